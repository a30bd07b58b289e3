// RUN: not neuron-opt --split-input-file %s 2>&1 | FileCheck %s

// Tests that a matmul with mismatched contraction dims is rejected.
// CHECK: trn-invalid.mlir:[[# @LINE + 2]]:8: error: 'trn.matmul' op contraction dims differ: lhs has K=4, rhs has K=5
func.func @matmul(%x: tensor<2x4xf32>, %w: tensor<5x8xf32>) -> tensor<2x8xf32> {
  %y = "trn.matmul"(%x, %w) : (tensor<2x4xf32>, tensor<5x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests that an activation outside the scalar engine's table is rejected.
// CHECK: error: 'trn.activation' op unknown activation function 'swish'
func.func @act(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = "trn.activation"(%x) {func = "swish", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Tests that a transpose whose result shape does not follow the permutation is rejected.
// CHECK: error: 'trn.transpose' op result shape [8, 4] is not the input shape [8, 4] permuted by [1, 0]
func.func @transpose(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %y = "trn.transpose"(%x) {permutation = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %y : tensor<8x4xf32>
}

// -----

// Tests that a kernel must yield a value of its result type.
// CHECK: error: 'trn.kernel' op yields tensor<4xf32> but the kernel returns tensor<8xf32>
func.func @kernel(%x: tensor<4xf32>) -> tensor<8xf32> {
  %k = "trn.kernel"() ({
    "trn.yield"(%x) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<4xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<8xf32>
  return %k : tensor<8xf32>
}

// -----

// Tests that a kernel must yield as many values as it has results.
// CHECK: error: 'trn.kernel' op yields 1 value(s) but the kernel has 2 result(s)
func.func @kernel_results(%x: tensor<4xf32>) -> tensor<4xf32> {
  %k:2 = "trn.kernel"() ({
    "trn.yield"(%x) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<4xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<4xf32>, tensor<4xf32>)
  return %k#0 : tensor<4xf32>
}

// -----

// Tests that a kernel's results after the first come in two groups of one type each (IRDL
// binds one type to a variadic result): a third type among them is rejected.
// CHECK: error: expected 'tensor<2xf32>' but got 'tensor<4xf32>'
func.func @kernel_three_result_types(%x: tensor<4xf32>, %y: tensor<2xf32>) -> tensor<4xf32> {
  %k:4 = "trn.kernel"() ({
    "trn.yield"(%x, %x, %y, %x) {operandSegmentSizes = array<i32: 1, 1, 2>} : (tensor<4xf32>, tensor<4xf32>, tensor<2xf32>, tensor<4xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 1, 2>} : () -> (tensor<4xf32>, tensor<4xf32>, tensor<2xf32>, tensor<4xf32>)
  return %k#0 : tensor<4xf32>
}

// -----

// Tests that a kernel's yield groups its values as the kernel groups its results.
// CHECK: error: 'trn.kernel' op yields groups of [1, 2, 0] value(s) but the kernel's results come in groups of [1, 1, 1]
func.func @kernel_yield_groups(%x: tensor<4xf32>) -> tensor<4xf32> {
  %k:3 = "trn.kernel"() ({
    "trn.yield"(%x, %x, %x) {operandSegmentSizes = array<i32: 1, 2, 0>} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 1, 1>} : () -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %k#0 : tensor<4xf32>
}

// -----

// Tests that a missing required attribute is reported.
// CHECK: error: 'trn.broadcast' op requires attribute 'dimensions'
func.func @broadcast(%x: tensor<4xf32>) -> tensor<2x4xf32> {
  %y = "trn.broadcast"(%x) : (tensor<4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// Tests that a view reaching outside its input is rejected.
// CHECK: error: 'trn.view' op indexing_map {{.*}} reaches [1, 16] along input dim 1 of size 16
func.func @view(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %v = "trn.view"(%x) {indexing_map = affine_map<(d0, d1) -> (d0, d1 + 1)>} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return %v : tensor<4x16xf32>
}

// -----

// Tests that an insert_slice leaving its destination is rejected.
// CHECK: error: 'trn.insert_slice' op slice along dim 1 (offset 12, stride 1, size 8) leaves the dest (size 16)
func.func @insert(%d: tensor<4x16xf32>, %s: tensor<4x8xf32>) -> tensor<4x16xf32> {
  %i = "trn.insert_slice"(%d, %s) {offsets = array<i64: 0, 12>, strides = array<i64: 1, 1>} : (tensor<4x16xf32>, tensor<4x8xf32>) -> tensor<4x16xf32>
  return %i : tensor<4x16xf32>
}

// -----

// Tests that a convolution with more windows than its input holds is rejected.
// CHECK: error: 'trn.conv' op result shape [1, 4, 7, 7] needs more windows than the input holds ([1, 4, 6, 6])
func.func @conv(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x7x7xf32> {
  %c = "trn.conv"(%x, %w) {strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x7x7xf32>
  return %c : tensor<1x4x7x7xf32>
}
