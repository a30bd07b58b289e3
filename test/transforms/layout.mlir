// RUN: neuron-opt --split-input-file --trn-layout %s | FileCheck %s
// RUN: neuron-opt --split-input-file --trn-layout --convert-trn-to-nisa %s | FileCheck %s --check-prefix=ISA
// RUN: neuron-opt --split-input-file --trn-layout="attention-token-major=false" %s | FileCheck %s --check-prefix=NOTM
// RUN: neuron-opt --split-input-file --trn-layout="concat-reader-order=false" %s | FileCheck %s --check-prefix=NOCAT
// RUN: neuron-opt --split-input-file --trn-layout="transposed-contractions=false" %s | FileCheck %s --check-prefix=NOTC
// RUN: not neuron-opt --trn-layout %S/Inputs/layout-invalid.mlir 2>&1 | FileCheck %s --check-prefix=ERR

// Tests that a matmul result read only as the left operand of another matmul is stored
// transposed: the producer yields trn.transpose of its result in orientation "nm", and the
// consumer reads it through a transpose view.
// CHECK-LABEL: func.func @two_linears
// CHECK: %[[H:.*]] = "trn.kernel"() ({
// CHECK: %[[G:.*]] = "trn.activation"
// CHECK-NEXT: %[[T:.*]] = "trn.transpose"(%[[G]]) {permutation = array<i64: 1, 0>} : (tensor<256x128xf32>) -> tensor<128x256xf32>
// CHECK-NEXT: "trn.yield"(%[[T]])
// CHECK-NEXT: }) {kind = "matmul", orientation = "nm", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x256xf32>
// CHECK: "trn.kernel"() ({
// CHECK-NEXT: %[[L:.*]] = "trn.transpose"(%[[H]]) {permutation = array<i64: 1, 0>} : (tensor<128x256xf32>) -> tensor<256x128xf32>
// CHECK: "trn.matmul"(%[[L]], %arg3)
// The producer stores its transposed tiles as they are (no PE transpose of the result), and
// the consumer loads K-major rows of H^T (no PE transpose of its left operand): the only
// transposes left are the first kernel's, of its weight (one 128x64 tile) and of %arg2 (two
// 128-row tiles); without trn-layout there are seven.
// ISA-LABEL: func.func @two_linears
// ISA-COUNT-3: "nisa.transpose"
// ISA-NOT: "nisa.transpose"
// ISA: return
func.func @two_linears(%w: tensor<128x64xf32>, %b: tensor<128xf32>, %x: tensor<256x64xf32>, %w2: tensor<128x32xf32>) -> tensor<256x32xf32> {
  %h = "trn.kernel"() ({
    %wt = "trn.transpose"(%w) {permutation = array<i64: 1, 0>} : (tensor<128x64xf32>) -> tensor<64x128xf32>
    %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<128xf32>) -> tensor<256x128xf32>
    %y = "trn.matmul"(%x, %wt) : (tensor<256x64xf32>, tensor<64x128xf32>) -> tensor<256x128xf32>
    %z = "trn.tensor_tensor"(%bb, %y) {op = "add"} : (tensor<256x128xf32>, tensor<256x128xf32>) -> tensor<256x128xf32>
    %g = "trn.activation"(%z) {func = "gelu", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<256x128xf32>) -> tensor<256x128xf32>
    "trn.yield"(%g) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x128xf32>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x128xf32>
  %o = "trn.kernel"() ({
    %y = "trn.matmul"(%h, %w2) : (tensor<256x128xf32>, tensor<128x32xf32>) -> tensor<256x32xf32>
    "trn.yield"(%y) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x32xf32>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x32xf32>
  return %o : tensor<256x32xf32>
}

// -----

// Tests that a result that is also a graph output keeps its row-major layout.
// CHECK-LABEL: func.func @also_returned
// CHECK-NOT: "trn.transpose"
// CHECK: return
func.func @also_returned(%x: tensor<256x64xf32>, %w: tensor<64x128xf32>, %w2: tensor<128x32xf32>) -> (tensor<256x128xf32>, tensor<256x32xf32>) {
  %h = "trn.kernel"() ({
    %y = "trn.matmul"(%x, %w) : (tensor<256x64xf32>, tensor<64x128xf32>) -> tensor<256x128xf32>
    "trn.yield"(%y) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x128xf32>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x128xf32>
  %o = "trn.kernel"() ({
    %y = "trn.matmul"(%h, %w2) : (tensor<256x128xf32>, tensor<128x32xf32>) -> tensor<256x32xf32>
    "trn.yield"(%y) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x32xf32>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x32xf32>
  return %h, %o : tensor<256x128xf32>, tensor<256x32xf32>
}

// -----

// Tests that a kernel whose epilogue reads a per-row (M-only) operand keeps M on partitions.
// CHECK-LABEL: func.func @row_scaled
// CHECK-NOT: orientation = "nm"
// CHECK: return
func.func @row_scaled(%x: tensor<256x64xf32>, %w: tensor<64x128xf32>, %s: tensor<256xf32>, %w2: tensor<128x32xf32>) -> tensor<256x32xf32> {
  %h = "trn.kernel"() ({
    %y = "trn.matmul"(%x, %w) : (tensor<256x64xf32>, tensor<64x128xf32>) -> tensor<256x128xf32>
    %sb = "trn.broadcast"(%s) {dimensions = array<i64: 1>} : (tensor<256xf32>) -> tensor<256x128xf32>
    %z = "trn.tensor_tensor"(%y, %sb) {op = "mul"} : (tensor<256x128xf32>, tensor<256x128xf32>) -> tensor<256x128xf32>
    "trn.yield"(%z) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x128xf32>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x128xf32>
  %o = "trn.kernel"() ({
    %y = "trn.matmul"(%h, %w2) : (tensor<256x128xf32>, tensor<128x32xf32>) -> tensor<256x32xf32>
    "trn.yield"(%y) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x32xf32>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x32xf32>
  return %o : tensor<256x32xf32>
}

// -----

// Tests that an attention kernel whose output is read only as the token-major view the
// output projection takes ([B, H, S, Dv] -> [B, S, H, Dv]) yields that view: the projection
// reads the result as it is, the attention kernel stores each query block of both heads as
// whole 128-element token rows, and the projection loads them back as such. Without it, the
// output goes out in 64-element runs per head and comes back two partitions at a time.
// CHECK-LABEL: func.func @attention_token_major
// CHECK: %[[O:.*]] = "trn.convert"({{.*}}) : (tensor<2x128x64xf32>) -> tensor<2x128x64xbf16>
// CHECK-NEXT: %[[S:.*]] = "trn.reshape"(%[[O]]) : (tensor<2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
// CHECK-NEXT: %[[T:.*]] = "trn.transpose"(%[[S]]) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x2x128x64xbf16>) -> tensor<1x128x2x64xbf16>
// CHECK-NEXT: "trn.yield"(%[[T]])
// CHECK-NEXT: }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x2x64xbf16>
// CHECK-NEXT: "trn.kernel"() ({
// CHECK-NEXT: "trn.reshape"(%{{.*}}) : (tensor<1x128x2x64xbf16>) -> tensor<128x128xbf16>
// ISA-LABEL: func.func @attention_token_major
// ISA-NOT: array<i64: {{[0-9]+}}, 64, 2, 1, 64>
// ISA: "nisa.dma"({{.*}}) {aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]{{.*}} : (memref<1x128x2x64xbf16, "hbm">, memref<128x128xbf16, "sbuf">)
// ISA-NOT: array<i64: {{[0-9]+}}, 64, 2, 1, 64>
// ISA: "nisa.dma"({{.*}}) {aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]{{.*}} : (memref<128x128xbf16, "sbuf">, memref<1x128x2x64xbf16, "hbm">)
// ISA-NOT: array<i64: {{[0-9]+}}, 64, 2, 1, 64>
// ISA: return
// NOTM-LABEL: func.func @attention_token_major
// NOTM: }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x64xbf16>
// NOTM-NEXT: "trn.kernel"() ({
// NOTM-NEXT: "trn.reshape"(%{{.*}}) : (tensor<2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
// NOTM-NEXT: "trn.transpose"
func.func @attention_token_major(%arg0: tensor<1x128x128xbf16>, %arg1: tensor<384x128xbf16>, %arg2: tensor<384xbf16>, %arg3: tensor<128x128xbf16>, %arg4: tensor<128xbf16>) -> tensor<128x128xbf16> {
  %0 = "trn.kernel"() ({
    %3 = "trn.reshape"(%arg0) : (tensor<1x128x128xbf16>) -> tensor<128x128xbf16>
    %4 = "trn.transpose"(%arg1) {permutation = array<i64: 1, 0>} : (tensor<384x128xbf16>) -> tensor<128x384xbf16>
    %5 = "trn.broadcast"(%arg2) {dimensions = array<i64: 0>} : (tensor<384xbf16>) -> tensor<128x384xbf16>
    %6 = "trn.matmul"(%3, %4) : (tensor<128x128xbf16>, tensor<128x384xbf16>) -> tensor<128x384xf32>
    %7 = "trn.tensor_tensor"(%5, %6) {op = "add"} : (tensor<128x384xbf16>, tensor<128x384xf32>) -> tensor<128x384xf32>
    %8 = "trn.convert"(%7) : (tensor<128x384xf32>) -> tensor<128x384xbf16>
    "trn.yield"(%8) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x384xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x384xbf16>
  %1 = "trn.kernel"() ({
    %3 = "trn.reshape"(%0) : (tensor<128x384xbf16>) -> tensor<1x128x3x2x64xbf16>
    %4 = "trn.transpose"(%3) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<1x128x3x2x64xbf16>) -> tensor<3x1x2x128x64xbf16>
    %5 = "trn.view"(%4) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
    %6 = "trn.reshape"(%5) : (tensor<1x1x2x128x64xbf16>) -> tensor<2x128x64xbf16>
    %7 = "trn.view"(%4) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
    %8 = "trn.reshape"(%7) : (tensor<1x1x2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
    %9 = "trn.transpose"(%8) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<1x2x128x64xbf16>) -> tensor<1x2x64x128xbf16>
    %10 = "trn.reshape"(%9) : (tensor<1x2x64x128xbf16>) -> tensor<2x64x128xbf16>
    %11 = "trn.matmul"(%6, %10) : (tensor<2x128x64xbf16>, tensor<2x64x128xbf16>) -> tensor<2x128x128xf32>
    %12 = "trn.convert"(%11) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    %13 = "trn.reshape"(%12) : (tensor<2x128x128xbf16>) -> tensor<1x2x128x128xbf16>
    %14 = "trn.tensor_scalar"(%13) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<1x2x128x128xbf16>) -> tensor<1x2x128x128xf32>
    %15 = "trn.reduce"(%14) {dimensions = array<i64: 3>, op = "max"} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
    %16 = "trn.broadcast"(%15) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
    %17 = "trn.tensor_tensor"(%14, %16) {op = "sub"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %18 = "trn.activation"(%17) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %19 = "trn.reduce"(%18) {dimensions = array<i64: 3>, op = "add"} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
    %20 = "trn.broadcast"(%19) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
    %21 = "trn.tensor_tensor"(%18, %20) {op = "div"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %22 = "trn.convert"(%21) : (tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xbf16>
    %23 = "trn.reshape"(%22) : (tensor<1x2x128x128xbf16>) -> tensor<2x128x128xbf16>
    %24 = "trn.reshape"(%0) : (tensor<128x384xbf16>) -> tensor<1x128x3x2x64xbf16>
    %25 = "trn.transpose"(%24) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<1x128x3x2x64xbf16>) -> tensor<3x1x2x128x64xbf16>
    %26 = "trn.view"(%25) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
    %27 = "trn.reshape"(%26) : (tensor<1x1x2x128x64xbf16>) -> tensor<2x128x64xbf16>
    %28 = "trn.matmul"(%23, %27) : (tensor<2x128x128xbf16>, tensor<2x128x64xbf16>) -> tensor<2x128x64xf32>
    %29 = "trn.convert"(%28) : (tensor<2x128x64xf32>) -> tensor<2x128x64xbf16>
    "trn.yield"(%29) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2x128x64xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x64xbf16>
  %2 = "trn.kernel"() ({
    %3 = "trn.reshape"(%1) : (tensor<2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
    %4 = "trn.transpose"(%3) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x2x128x64xbf16>) -> tensor<1x128x2x64xbf16>
    %5 = "trn.reshape"(%4) : (tensor<1x128x2x64xbf16>) -> tensor<128x128xbf16>
    %6 = "trn.transpose"(%arg3) {permutation = array<i64: 1, 0>} : (tensor<128x128xbf16>) -> tensor<128x128xbf16>
    %7 = "trn.broadcast"(%arg4) {dimensions = array<i64: 0>} : (tensor<128xbf16>) -> tensor<128x128xbf16>
    %8 = "trn.matmul"(%5, %6) : (tensor<128x128xbf16>, tensor<128x128xbf16>) -> tensor<128x128xf32>
    %9 = "trn.tensor_tensor"(%7, %8) {op = "add"} : (tensor<128x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
    %10 = "trn.convert"(%9) : (tensor<128x128xf32>) -> tensor<128x128xbf16>
    "trn.yield"(%10) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x128xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x128xbf16>
  return %2 : tensor<128x128xbf16>
}

// ERR: layout-invalid.mlir:3:8: error: 'trn.transpose' op result shape [4, 8] is not the input shape [4, 8] permuted by [1, 0]

// -----

// Tests that an attention kernel that also yields its probabilities (a training step saves
// them) is made token-major the same way: its output becomes the token-major view and the
// probabilities stay its second result, as they were.
// CHECK-LABEL: func.func @attention_token_major_saving_probabilities
// CHECK: %[[S:.*]] = "trn.reshape"(%{{.*}}) : (tensor<2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
// CHECK-NEXT: %[[T:.*]] = "trn.transpose"(%[[S]]) {permutation = array<i64: 0, 2, 1, 3>}
// CHECK-NEXT: "trn.yield"(%[[T]], %{{.*}}) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<1x128x2x64xbf16>, tensor<1x2x128x128xbf16>) -> ()
// CHECK-NEXT: }) {kind = "attention", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<1x128x2x64xbf16>, tensor<1x2x128x128xbf16>)
func.func @attention_token_major_saving_probabilities(%arg0: tensor<1x128x128xbf16>, %arg1: tensor<384x128xbf16>, %arg2: tensor<384xbf16>, %arg3: tensor<128x128xbf16>, %arg4: tensor<128xbf16>) -> (tensor<128x128xbf16>, tensor<1x2x128x128xbf16>) {
  %0 = "trn.kernel"() ({
    %3 = "trn.reshape"(%arg0) : (tensor<1x128x128xbf16>) -> tensor<128x128xbf16>
    %4 = "trn.transpose"(%arg1) {permutation = array<i64: 1, 0>} : (tensor<384x128xbf16>) -> tensor<128x384xbf16>
    %5 = "trn.broadcast"(%arg2) {dimensions = array<i64: 0>} : (tensor<384xbf16>) -> tensor<128x384xbf16>
    %6 = "trn.matmul"(%3, %4) : (tensor<128x128xbf16>, tensor<128x384xbf16>) -> tensor<128x384xf32>
    %7 = "trn.tensor_tensor"(%5, %6) {op = "add"} : (tensor<128x384xbf16>, tensor<128x384xf32>) -> tensor<128x384xf32>
    %8 = "trn.convert"(%7) : (tensor<128x384xf32>) -> tensor<128x384xbf16>
    "trn.yield"(%8) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x384xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x384xbf16>
  %1:2 = "trn.kernel"() ({
    %3 = "trn.reshape"(%0) : (tensor<128x384xbf16>) -> tensor<1x128x3x2x64xbf16>
    %4 = "trn.transpose"(%3) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<1x128x3x2x64xbf16>) -> tensor<3x1x2x128x64xbf16>
    %5 = "trn.view"(%4) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
    %6 = "trn.reshape"(%5) : (tensor<1x1x2x128x64xbf16>) -> tensor<2x128x64xbf16>
    %7 = "trn.view"(%4) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
    %8 = "trn.reshape"(%7) : (tensor<1x1x2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
    %9 = "trn.transpose"(%8) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<1x2x128x64xbf16>) -> tensor<1x2x64x128xbf16>
    %10 = "trn.reshape"(%9) : (tensor<1x2x64x128xbf16>) -> tensor<2x64x128xbf16>
    %11 = "trn.matmul"(%6, %10) : (tensor<2x128x64xbf16>, tensor<2x64x128xbf16>) -> tensor<2x128x128xf32>
    %12 = "trn.convert"(%11) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    %13 = "trn.reshape"(%12) : (tensor<2x128x128xbf16>) -> tensor<1x2x128x128xbf16>
    %14 = "trn.tensor_scalar"(%13) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<1x2x128x128xbf16>) -> tensor<1x2x128x128xf32>
    %15 = "trn.reduce"(%14) {dimensions = array<i64: 3>, op = "max"} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
    %16 = "trn.broadcast"(%15) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
    %17 = "trn.tensor_tensor"(%14, %16) {op = "sub"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %18 = "trn.activation"(%17) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %19 = "trn.reduce"(%18) {dimensions = array<i64: 3>, op = "add"} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
    %20 = "trn.broadcast"(%19) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
    %21 = "trn.tensor_tensor"(%18, %20) {op = "div"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %22 = "trn.convert"(%21) : (tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xbf16>
    %23 = "trn.reshape"(%22) : (tensor<1x2x128x128xbf16>) -> tensor<2x128x128xbf16>
    %24 = "trn.reshape"(%0) : (tensor<128x384xbf16>) -> tensor<1x128x3x2x64xbf16>
    %25 = "trn.transpose"(%24) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<1x128x3x2x64xbf16>) -> tensor<3x1x2x128x64xbf16>
    %26 = "trn.view"(%25) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
    %27 = "trn.reshape"(%26) : (tensor<1x1x2x128x64xbf16>) -> tensor<2x128x64xbf16>
    %28 = "trn.matmul"(%23, %27) : (tensor<2x128x128xbf16>, tensor<2x128x64xbf16>) -> tensor<2x128x64xf32>
    %29 = "trn.convert"(%28) : (tensor<2x128x64xf32>) -> tensor<2x128x64xbf16>
    "trn.yield"(%29, %22) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<2x128x64xbf16>, tensor<1x2x128x128xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<2x128x64xbf16>, tensor<1x2x128x128xbf16>)
  %2 = "trn.kernel"() ({
    %3 = "trn.reshape"(%1#0) : (tensor<2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
    %4 = "trn.transpose"(%3) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x2x128x64xbf16>) -> tensor<1x128x2x64xbf16>
    %5 = "trn.reshape"(%4) : (tensor<1x128x2x64xbf16>) -> tensor<128x128xbf16>
    %6 = "trn.transpose"(%arg3) {permutation = array<i64: 1, 0>} : (tensor<128x128xbf16>) -> tensor<128x128xbf16>
    %7 = "trn.broadcast"(%arg4) {dimensions = array<i64: 0>} : (tensor<128xbf16>) -> tensor<128x128xbf16>
    %8 = "trn.matmul"(%5, %6) : (tensor<128x128xbf16>, tensor<128x128xbf16>) -> tensor<128x128xf32>
    %9 = "trn.tensor_tensor"(%7, %8) {op = "add"} : (tensor<128x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
    %10 = "trn.convert"(%9) : (tensor<128x128xf32>) -> tensor<128x128xbf16>
    "trn.yield"(%10) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x128xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x128xbf16>
  return %2, %1#1 : tensor<128x128xbf16>, tensor<1x2x128x128xbf16>
}

// -----

// Tests that a concatenation along dim 0 that its reader splits and transposes ([3 * B, H, S,
// D] read as [B, S, 3, H, D] rows, as a QKV weight gradient reads dQ, dK and dV) is built in
// that order: a new trn.empty of the transposed shape, each slice transposed as the reader
// sees it and inserted at its index of the split dim, and the reader taking the result as it
// is. The batched product inserted first is then itself read token-major, so its kernel
// yields that view (trn-layout attention-token-major, for a batched matmul kernel) and
// convert-trn-to-nisa computes it straight into its slice of the concatenation, whole token
// rows of which the reader loads (384 elements).
// CHECK-LABEL: func.func @concat_reader_order
// CHECK: %[[C:.*]] = "trn.convert"(%{{.*}}) : (tensor<2x128x64xf32>) -> tensor<2x128x64xbf16>
// CHECK-NEXT: %[[S:.*]] = "trn.reshape"(%[[C]]) : (tensor<2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
// CHECK-NEXT: %[[T:.*]] = "trn.transpose"(%[[S]]) {permutation = array<i64: 0, 2, 1, 3>}
// CHECK-NEXT: "trn.yield"(%[[T]])
// CHECK-NEXT: }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x2x64xbf16>
// CHECK: %[[E:.*]] = "trn.empty"() : () -> tensor<1x128x3x2x64xbf16>
// CHECK: %[[I0:.*]] = "trn.insert_slice"(%[[E]], %{{.*}}) {offsets = array<i64: 0, 0, 0, 0, 0>
// CHECK: "trn.transpose"(%arg2) {permutation = array<i64: 0, 2, 1, 3>}
// CHECK: %[[I1:.*]] = "trn.insert_slice"(%[[I0]], %{{.*}}) {offsets = array<i64: 0, 0, 1, 0, 0>
// CHECK: %[[I2:.*]] = "trn.insert_slice"(%[[I1]], %{{.*}}) {offsets = array<i64: 0, 0, 2, 0, 0>
// CHECK: "trn.kernel"() ({
// CHECK-NEXT: "trn.reshape"(%[[I2]]) : (tensor<1x128x3x2x64xbf16>) -> tensor<128x384xbf16>
// CHECK-NOT: "trn.empty"
// ISA-LABEL: func.func @concat_reader_order
// ISA: %[[CAT:.*]] = "nisa.alloc"() {{.*}} : () -> memref<1x128x3x2x64xbf16, "hbm">
// ISA-NOT: "nisa.alloc"() {memory = "hbm"} : () -> memref<2x128x64xbf16
// ISA: "nisa.dma"(%[[CAT]], %{{.*}}) {aps = [array<i64: 0, 384, 128, 1, 64>
// ISA: "nisa.dma"(%[[CAT]], %{{.*}}) {aps = [array<i64: 64, 384, 128, 1, 64>
// ISA: "nisa.dma"(%{{.*}}, %[[CAT]]) {aps = [array<i64: 0, 384, 43, 1, 384>
// NOCAT-LABEL: func.func @concat_reader_order
// NOCAT: "trn.empty"() : () -> tensor<3x2x128x64xbf16>
// NOCAT: "trn.reshape"(%{{.*}}) : (tensor<3x2x128x64xbf16>) -> tensor<3x1x2x128x64xbf16>
func.func @concat_reader_order(%p: tensor<2x128x128xbf16>, %v: tensor<2x128x64xbf16>, %k: tensor<1x2x128x64xbf16>, %kt: tensor<1x2x64x128xbf16>, %x: tensor<128x128xbf16>) -> tensor<384x128xbf16> {
  %0 = "trn.kernel"() ({
    %m = "trn.matmul"(%p, %v) : (tensor<2x128x128xbf16>, tensor<2x128x64xbf16>) -> tensor<2x128x64xf32>
    %c = "trn.convert"(%m) : (tensor<2x128x64xf32>) -> tensor<2x128x64xbf16>
    "trn.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2x128x64xbf16>) -> ()
  }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x64xbf16>
  %1 = "trn.reshape"(%0) : (tensor<2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
  %2 = "trn.transpose"(%kt) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<1x2x64x128xbf16>) -> tensor<1x2x128x64xbf16>
  %e = "trn.empty"() : () -> tensor<3x2x128x64xbf16>
  %c0 = "trn.insert_slice"(%e, %1) {offsets = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1, 1, 1>} : (tensor<3x2x128x64xbf16>, tensor<1x2x128x64xbf16>) -> tensor<3x2x128x64xbf16>
  %c1 = "trn.insert_slice"(%c0, %k) {offsets = array<i64: 1, 0, 0, 0>, strides = array<i64: 1, 1, 1, 1>} : (tensor<3x2x128x64xbf16>, tensor<1x2x128x64xbf16>) -> tensor<3x2x128x64xbf16>
  %c2 = "trn.insert_slice"(%c1, %2) {offsets = array<i64: 2, 0, 0, 0>, strides = array<i64: 1, 1, 1, 1>} : (tensor<3x2x128x64xbf16>, tensor<1x2x128x64xbf16>) -> tensor<3x2x128x64xbf16>
  %3 = "trn.kernel"() ({
    %r = "trn.reshape"(%c2) : (tensor<3x2x128x64xbf16>) -> tensor<3x1x2x128x64xbf16>
    %t = "trn.transpose"(%r) {permutation = array<i64: 1, 3, 0, 2, 4>} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x128x3x2x64xbf16>
    %rows = "trn.reshape"(%t) : (tensor<1x128x3x2x64xbf16>) -> tensor<128x384xbf16>
    %g = "trn.transpose"(%rows) {permutation = array<i64: 1, 0>} : (tensor<128x384xbf16>) -> tensor<384x128xbf16>
    %m = "trn.matmul"(%g, %x) : (tensor<384x128xbf16>, tensor<128x128xbf16>) -> tensor<384x128xf32>
    %c = "trn.convert"(%m) : (tensor<384x128xf32>) -> tensor<384x128xbf16>
    "trn.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<384x128xbf16>) -> ()
  }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<384x128xbf16>
  return %3 : tensor<384x128xbf16>
}

// -----

// Tests that an attention kernel's row contraction read only transposed (a softmax backward's
// dK^T = Q^T @ dS, inserted into the QKV gradient as dK) is computed transposed: dK = dS^T @ Q,
// the matmul reading the transposed rows and Q as it is, and the readers take the result
// without a transpose. dK is then read token-major like dQ, so the kernel yields both in
// that order, and convert-trn-to-nisa writes each straight into its slice of the
// concatenation in whole token rows of both heads (128 elements, slot 1 at element 128 of a
// 384-element row), not through a copy.
// CHECK-LABEL: func.func @transposed_contraction
// CHECK: %[[ROWS:.*]] = "trn.reshape"(%[[DS:.*]]) : (tensor<2x2x128x128xf32>) -> tensor<4x128x128xf32>
// CHECK-NEXT: "trn.transpose"(%arg4)
// CHECK-NEXT: "trn.matmul"(%[[ROWS]], %{{.*}}) : (tensor<4x128x128xf32>, tensor<4x128x64xf32>) -> tensor<4x128x64xf32>
// CHECK-NEXT: %[[ROWS2:.*]] = "trn.reshape"(%[[DS]]) : (tensor<2x2x128x128xf32>) -> tensor<4x128x128xf32>
// CHECK-NEXT: %[[RT:.*]] = "trn.transpose"(%[[ROWS2]]) {permutation = array<i64: 0, 2, 1>}
// CHECK-NEXT: %[[DK:.*]] = "trn.matmul"(%[[RT]], %arg3) : (tensor<4x128x128xf32>, tensor<4x128x64xf32>) -> tensor<4x128x64xf32>
// CHECK: %[[DKS:.*]] = "trn.reshape"(%[[DK]]) : (tensor<4x128x64xf32>) -> tensor<2x2x128x64xf32>
// CHECK-NEXT: %[[DKT:.*]] = "trn.transpose"(%[[DKS]]) {permutation = array<i64: 0, 2, 1, 3>}
// CHECK-NEXT: "trn.yield"(%{{.*}}, %[[DKT]])
// CHECK-NEXT: }) {kind = "attention", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<2x128x2x64xf32>, tensor<2x128x2x64xf32>)
// CHECK-NOT: "trn.transpose"(%{{.*}}#1)
// CHECK: %[[S1:.*]] = "trn.reshape"(%{{.*}}#1) : (tensor<2x128x2x64xf32>) -> tensor<2x128x1x2x64xf32>
// CHECK-NEXT: "trn.insert_slice"(%{{.*}}, %[[S1]]) {offsets = array<i64: 0, 0, 1, 0, 0>
// ISA-LABEL: func.func @transposed_contraction
// ISA: %[[CAT:.*]] = "nisa.alloc"() {memory = "hbm"} : () -> memref<2x128x3x2x64xf32, "hbm">
// ISA-NOT: "nisa.alloc"() {memory = "hbm"} : () -> memref<4x128x64xf32
// ISA: "nisa.dma"(%[[CAT]], %{{.*}}) {aps = [array<i64: 0, 384, 64, 1, 128>
// ISA: "nisa.dma"(%[[CAT]], %{{.*}}) {aps = [array<i64: 128, 384, 64, 1, 128>
// NOTC-LABEL: func.func @transposed_contraction
// NOTC: "trn.matmul"(%{{.*}}, %{{.*}}) : (tensor<4x64x128xf32>, tensor<4x128x128xf32>) -> tensor<4x64x128xf32>
// NOTC: }) {kind = "attention", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<2x128x2x64xf32>, tensor<4x64x128xf32>)
// NOTC: "trn.transpose"(%{{.*}}) {permutation = array<i64: 0, 1, 3, 2>}
func.func @transposed_contraction(%do: tensor<256x128xf32>, %k: tensor<4x128x64xf32>, %p: tensor<2x2x128x128xf32>, %q: tensor<4x128x64xf32>, %kt: tensor<4x64x128xf32>, %dv: tensor<2x2x128x64xf32>, %x: tensor<256x128xf32>) -> tensor<384x128xf32> {
  %0:2 = "trn.kernel"() ({
    %18 = "trn.reshape"(%do) : (tensor<256x128xf32>) -> tensor<2x128x2x64xf32>
    %19 = "trn.transpose"(%18) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x128x2x64xf32>) -> tensor<2x2x128x64xf32>
    %20 = "trn.reshape"(%19) : (tensor<2x2x128x64xf32>) -> tensor<4x128x64xf32>
    %21 = "trn.transpose"(%k) {permutation = array<i64: 0, 2, 1>} : (tensor<4x128x64xf32>) -> tensor<4x64x128xf32>
    %22 = "trn.matmul"(%20, %21) : (tensor<4x128x64xf32>, tensor<4x64x128xf32>) -> tensor<4x128x128xf32>
    %23 = "trn.reshape"(%22) : (tensor<4x128x128xf32>) -> tensor<2x2x128x128xf32>
    %24 = "trn.tensor_tensor"(%23, %p) {op = "mul"} : (tensor<2x2x128x128xf32>, tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %25 = "trn.reduce"(%24) {dimensions = array<i64: 3>, op = "add"} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128xf32>
    %26 = "trn.broadcast"(%25) {dimensions = array<i64: 3>} : (tensor<2x2x128xf32>) -> tensor<2x2x128x128xf32>
    %27 = "trn.tensor_tensor"(%p, %26) {op = "mul"} : (tensor<2x2x128x128xf32>, tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %28 = "trn.tensor_tensor"(%24, %27) {op = "sub"} : (tensor<2x2x128x128xf32>, tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %29 = "trn.tensor_scalar"(%28) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %30 = "trn.reshape"(%29) : (tensor<2x2x128x128xf32>) -> tensor<4x128x128xf32>
    %31 = "trn.transpose"(%kt) {permutation = array<i64: 0, 2, 1>} : (tensor<4x64x128xf32>) -> tensor<4x128x64xf32>
    %32 = "trn.matmul"(%30, %31) : (tensor<4x128x128xf32>, tensor<4x128x64xf32>) -> tensor<4x128x64xf32>
    %33 = "trn.transpose"(%q) {permutation = array<i64: 0, 2, 1>} : (tensor<4x128x64xf32>) -> tensor<4x64x128xf32>
    %34 = "trn.reshape"(%29) : (tensor<2x2x128x128xf32>) -> tensor<4x128x128xf32>
    %35 = "trn.matmul"(%33, %34) : (tensor<4x64x128xf32>, tensor<4x128x128xf32>) -> tensor<4x64x128xf32>
    "trn.yield"(%32, %35) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<4x128x64xf32>, tensor<4x64x128xf32>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<4x128x64xf32>, tensor<4x64x128xf32>)
  %1 = "trn.reshape"(%0#1) : (tensor<4x64x128xf32>) -> tensor<2x2x64x128xf32>
  %2 = "trn.reshape"(%0#0) : (tensor<4x128x64xf32>) -> tensor<2x2x128x64xf32>
  %3 = "trn.transpose"(%1) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<2x2x64x128xf32>) -> tensor<2x2x128x64xf32>
  %4 = "trn.empty"() : () -> tensor<6x2x128x64xf32>
  %5 = "trn.insert_slice"(%4, %2) {offsets = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1, 1, 1>} : (tensor<6x2x128x64xf32>, tensor<2x2x128x64xf32>) -> tensor<6x2x128x64xf32>
  %6 = "trn.insert_slice"(%5, %3) {offsets = array<i64: 2, 0, 0, 0>, strides = array<i64: 1, 1, 1, 1>} : (tensor<6x2x128x64xf32>, tensor<2x2x128x64xf32>) -> tensor<6x2x128x64xf32>
  %7 = "trn.insert_slice"(%6, %dv) {offsets = array<i64: 4, 0, 0, 0>, strides = array<i64: 1, 1, 1, 1>} : (tensor<6x2x128x64xf32>, tensor<2x2x128x64xf32>) -> tensor<6x2x128x64xf32>
  %8 = "trn.kernel"() ({
    %18 = "trn.reshape"(%7) : (tensor<6x2x128x64xf32>) -> tensor<3x2x2x128x64xf32>
    %19 = "trn.transpose"(%18) {permutation = array<i64: 1, 3, 0, 2, 4>} : (tensor<3x2x2x128x64xf32>) -> tensor<2x128x3x2x64xf32>
    %20 = "trn.reshape"(%19) : (tensor<2x128x3x2x64xf32>) -> tensor<256x384xf32>
    %21 = "trn.transpose"(%20) {permutation = array<i64: 1, 0>} : (tensor<256x384xf32>) -> tensor<384x256xf32>
    %22 = "trn.matmul"(%21, %x) : (tensor<384x256xf32>, tensor<256x128xf32>) -> tensor<384x128xf32>
    "trn.yield"(%22) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<384x128xf32>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<384x128xf32>
  return %8 : tensor<384x128xf32>
}
