// RUN: neuron-opt --split-input-file --trn-layout %s | FileCheck %s
// RUN: neuron-opt --split-input-file --trn-layout --convert-trn-to-nisa %s | FileCheck %s --check-prefix=ISA
// RUN: not neuron-opt --trn-layout %S/Inputs/layout-invalid.mlir 2>&1 | FileCheck %s --check-prefix=ERR

// Tests that a matmul result read only as the left operand of another matmul is stored
// transposed: the producer yields trn.transpose of its result in orientation "nm", and the
// consumer reads it through a transpose view.
// CHECK-LABEL: func.func @two_linears
// CHECK: %[[H:.*]] = "trn.kernel"() ({
// CHECK: %[[G:.*]] = "trn.activation"
// CHECK-NEXT: %[[T:.*]] = "trn.transpose"(%[[G]]) {permutation = array<i64: 1, 0>} : (tensor<256x128xf32>) -> tensor<128x256xf32>
// CHECK-NEXT: "trn.yield"(%[[T]])
// CHECK-NEXT: }) {kind = "matmul", orientation = "nm"} : () -> tensor<128x256xf32>
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
    "trn.yield"(%g) : (tensor<256x128xf32>) -> ()
  }) {kind = "matmul"} : () -> tensor<256x128xf32>
  %o = "trn.kernel"() ({
    %y = "trn.matmul"(%h, %w2) : (tensor<256x128xf32>, tensor<128x32xf32>) -> tensor<256x32xf32>
    "trn.yield"(%y) : (tensor<256x32xf32>) -> ()
  }) {kind = "matmul"} : () -> tensor<256x32xf32>
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
    "trn.yield"(%y) : (tensor<256x128xf32>) -> ()
  }) {kind = "matmul"} : () -> tensor<256x128xf32>
  %o = "trn.kernel"() ({
    %y = "trn.matmul"(%h, %w2) : (tensor<256x128xf32>, tensor<128x32xf32>) -> tensor<256x32xf32>
    "trn.yield"(%y) : (tensor<256x32xf32>) -> ()
  }) {kind = "matmul"} : () -> tensor<256x32xf32>
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
    "trn.yield"(%z) : (tensor<256x128xf32>) -> ()
  }) {kind = "matmul"} : () -> tensor<256x128xf32>
  %o = "trn.kernel"() ({
    %y = "trn.matmul"(%h, %w2) : (tensor<256x128xf32>, tensor<128x32xf32>) -> tensor<256x32xf32>
    "trn.yield"(%y) : (tensor<256x32xf32>) -> ()
  }) {kind = "matmul"} : () -> tensor<256x32xf32>
  return %o : tensor<256x32xf32>
}

// ERR: layout-invalid.mlir:3:8: error: 'trn.transpose' op result shape [4, 8] is not the input shape [4, 8] permuted by [1, 0]
