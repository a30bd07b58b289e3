// A transpose whose permutation does not match its result shape (checked by ../layout.mlir).
func.func @bad(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %t = "trn.transpose"(%x) {permutation = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %t : tensor<4x8xf32>
}
