// RUN: neuron-opt --split-input-file --trn-order %s | FileCheck %s
// RUN: not neuron-opt --trn-order %S/Inputs/order-invalid.mlir 2>&1 | FileCheck %s --check-prefix=ERR
// RUN: neuron-opt --split-input-file --trn-order="co-run=true" %s | FileCheck %s --check-prefix=PAIR

// Tests that the kernel at the head of the longer chain moves first: dH (a matmul whose
// result another matmul reads) before the independent dW2 matmul that stood before it; dW2
// and dW1 weigh the same and keep their order. The function's results stay as they were.
// CHECK-LABEL: func.func @backward
// CHECK: "trn.kernel"() ({
// CHECK-NEXT: "trn.matmul"(%arg0, %arg2)
// CHECK: %[[DW2:.*]] = "trn.kernel"() ({
// CHECK: "trn.matmul"(%{{.*}}, %arg1)
// CHECK: %[[DW1:.*]] = "trn.kernel"() ({
// CHECK: "trn.matmul"(%{{.*}}, %arg3)
// CHECK: return %[[DW2]], %[[DW1]]
func.func @backward(%dy: tensor<256x128xbf16>, %h: tensor<256x256xbf16>, %w: tensor<128x256xbf16>, %x: tensor<256x128xbf16>) -> (tensor<128x256xbf16>, tensor<256x128xbf16>) {
  %dw2 = "trn.kernel"() ({
    %t = "trn.transpose"(%dy) {permutation = array<i64: 1, 0>} : (tensor<256x128xbf16>) -> tensor<128x256xbf16>
    %m = "trn.matmul"(%t, %h) : (tensor<128x256xbf16>, tensor<256x256xbf16>) -> tensor<128x256xf32>
    %c = "trn.convert"(%m) : (tensor<128x256xf32>) -> tensor<128x256xbf16>
    "trn.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x256xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x256xbf16>
  %dh = "trn.kernel"() ({
    %m = "trn.matmul"(%dy, %w) : (tensor<256x128xbf16>, tensor<128x256xbf16>) -> tensor<256x256xf32>
    %c = "trn.convert"(%m) : (tensor<256x256xf32>) -> tensor<256x256xbf16>
    "trn.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x256xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x256xbf16>
  %dw1 = "trn.kernel"() ({
    %t = "trn.transpose"(%dh) {permutation = array<i64: 1, 0>} : (tensor<256x256xbf16>) -> tensor<256x256xbf16>
    %m = "trn.matmul"(%t, %x) : (tensor<256x256xbf16>, tensor<256x128xbf16>) -> tensor<256x128xf32>
    %c = "trn.convert"(%m) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
    "trn.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x128xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x128xbf16>
  return %dw2, %dw1 : tensor<128x256xbf16>, tensor<256x128xbf16>
}

// -----

// Tests that a view feeding a kernel from outside stays before it, and that ops of equal
// weight keep their order.
// CHECK-LABEL: func.func @views_and_ties
// CHECK: "trn.reshape"(%arg0)
// CHECK: "trn.kernel"
// CHECK: "trn.tensor_scalar"(%{{.*}}) {op = "mul"
// CHECK: "trn.kernel"
// CHECK: "trn.tensor_scalar"(%{{.*}}) {op = "add"
func.func @views_and_ties(%a: tensor<8x16xf32>, %b: tensor<128xf32>) -> (tensor<128xf32>, tensor<128xf32>) {
  %r = "trn.reshape"(%a) : (tensor<8x16xf32>) -> tensor<128xf32>
  %k1 = "trn.kernel"() ({
    %y = "trn.tensor_scalar"(%r) {op = "mul", reverse = false, scalar = 2.0 : f32} : (tensor<128xf32>) -> tensor<128xf32>
    "trn.yield"(%y) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128xf32>
  %k2 = "trn.kernel"() ({
    %y = "trn.tensor_scalar"(%b) {op = "add", reverse = false, scalar = 1.0 : f32} : (tensor<128xf32>) -> tensor<128xf32>
    "trn.yield"(%y) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128xf32>
  return %k1, %k2 : tensor<128xf32>, tensor<128xf32>
}

// ERR: order-invalid.mlir:3:8: error: 'trn.kernel' op yields tensor<8xf32> but the kernel returns tensor<8xbf16>

// -----

// Tests co-run: the independent PE-bound matmul kernel moves to just before the attention
// kernel and the two are marked as a pair; the matmul that reads the attention kernel's
// result (more PE work, but dependent) stays after it.
// PAIR-LABEL: func.func @co_run
// PAIR: "trn.matmul"(%arg1, %arg2)
// PAIR: {co_run = 0 : i64, co_run_role = "partner", kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// PAIR: "trn.tensor_scalar"(%arg0)
// PAIR: {co_run = 0 : i64, co_run_role = "primary", kind = "attention", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// PAIR: "trn.matmul"(%{{.*}}, %arg3)
// PAIR: {kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
func.func @co_run(%q: tensor<4096x4096xf32>, %x: tensor<1024x1024xbf16>, %w: tensor<1024x1024xbf16>, %v: tensor<4096x1024xf32>) -> (tensor<4096x1024xf32>, tensor<1024x1024xbf16>) {
  %a = "trn.kernel"() ({
    %y = "trn.tensor_scalar"(%q) {op = "mul", reverse = false, scalar = 2.0 : f32} : (tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
    "trn.yield"(%y) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<4096x4096xf32>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<4096x4096xf32>
  %d = "trn.kernel"() ({
    %m = "trn.matmul"(%a, %v) : (tensor<4096x4096xf32>, tensor<4096x1024xf32>) -> tensor<4096x1024xf32>
    "trn.yield"(%m) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<4096x1024xf32>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<4096x1024xf32>
  %mm = "trn.kernel"() ({
    %m = "trn.matmul"(%x, %w) : (tensor<1024x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<1024x1024xf32>
    %c = "trn.convert"(%m) : (tensor<1024x1024xf32>) -> tensor<1024x1024xbf16>
    "trn.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1024x1024xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1024x1024xbf16>
  return %d, %mm : tensor<4096x1024xf32>, tensor<1024x1024xbf16>
}

// -----

// Tests co-run partners packed into the PE time the attention kernel leaves idle (its vector
// work: one pass over 4096 x 4096 elements, ~60.7 us on ACT and DVE): the two smaller
// independent matmuls (13.7 and 27.3 us of PE work) are its partners, moved before it in
// the order they stood; the larger one (109.4 us) would not fit beside them and stays after.
// PAIR-LABEL: func.func @co_run_partners
// PAIR: "trn.matmul"(%arg1, %arg2)
// PAIR: {co_run = 0 : i64, co_run_role = "partner", kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// PAIR: "trn.matmul"(%arg3, %arg2)
// PAIR: {co_run = 0 : i64, co_run_role = "partner", kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// PAIR: "trn.tensor_scalar"(%arg0)
// PAIR: {co_run = 0 : i64, co_run_role = "primary", kind = "attention", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// PAIR: "trn.matmul"(%arg4, %arg5)
// PAIR: {kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
func.func @co_run_partners(%q: tensor<4096x4096xf32>, %x: tensor<1024x1024xbf16>, %w: tensor<1024x1024xbf16>, %s: tensor<512x1024xbf16>, %l: tensor<2048x1024xbf16>, %r: tensor<1024x2048xbf16>) -> (tensor<4096x4096xf32>, tensor<1024x1024xbf16>, tensor<512x1024xbf16>, tensor<2048x2048xbf16>) {
  %a = "trn.kernel"() ({
    %y = "trn.tensor_scalar"(%q) {op = "mul", reverse = false, scalar = 2.0 : f32} : (tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
    "trn.yield"(%y) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<4096x4096xf32>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<4096x4096xf32>
  %mm = "trn.kernel"() ({
    %m = "trn.matmul"(%x, %w) : (tensor<1024x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<1024x1024xf32>
    %c = "trn.convert"(%m) : (tensor<1024x1024xf32>) -> tensor<1024x1024xbf16>
    "trn.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1024x1024xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1024x1024xbf16>
  %small = "trn.kernel"() ({
    %m = "trn.matmul"(%s, %w) : (tensor<512x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<512x1024xf32>
    %c = "trn.convert"(%m) : (tensor<512x1024xf32>) -> tensor<512x1024xbf16>
    "trn.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<512x1024xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<512x1024xbf16>
  %large = "trn.kernel"() ({
    %m = "trn.matmul"(%l, %r) : (tensor<2048x1024xbf16>, tensor<1024x2048xbf16>) -> tensor<2048x2048xf32>
    %c = "trn.convert"(%m) : (tensor<2048x2048xf32>) -> tensor<2048x2048xbf16>
    "trn.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2048x2048xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2048x2048xbf16>
  return %a, %mm, %small, %large : tensor<4096x4096xf32>, tensor<1024x1024xbf16>, tensor<512x1024xbf16>, tensor<2048x2048xbf16>
}

// -----

// Tests co-run with a DMA-bound primary: the batched matmul moves 10 MiB for 0.54 GFLOP
// (28.9 us of HBM traffic against 6.8 us of PE work); the independent 1024^3 matmul (27.3 us
// of PE, 17.4 us of bytes) moves before it as its partner: together they take 46.3 us by
// the roofline, one after the other 56.2.
// PAIR-LABEL: func.func @co_run_dma_bound
// PAIR: "trn.matmul"(%arg2, %arg3)
// PAIR: {co_run = 0 : i64, co_run_role = "partner", kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// PAIR: "trn.matmul"(%arg0, %arg1)
// PAIR: {co_run = 0 : i64, co_run_role = "primary", kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
func.func @co_run_dma_bound(%p: tensor<64x256x128xbf16>, %o: tensor<64x128x128xbf16>, %x: tensor<1024x1024xbf16>, %w: tensor<1024x1024xbf16>) -> (tensor<64x256x128xbf16>, tensor<1024x1024xbf16>) {
  %dv = "trn.kernel"() ({
    %m = "trn.matmul"(%p, %o) : (tensor<64x256x128xbf16>, tensor<64x128x128xbf16>) -> tensor<64x256x128xf32>
    %c = "trn.convert"(%m) : (tensor<64x256x128xf32>) -> tensor<64x256x128xbf16>
    "trn.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<64x256x128xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<64x256x128xbf16>
  %mm = "trn.kernel"() ({
    %m = "trn.matmul"(%x, %w) : (tensor<1024x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<1024x1024xf32>
    %c = "trn.convert"(%m) : (tensor<1024x1024xf32>) -> tensor<1024x1024xbf16>
    "trn.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1024x1024xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1024x1024xbf16>
  return %dv, %mm : tensor<64x256x128xbf16>, tensor<1024x1024xbf16>
}
