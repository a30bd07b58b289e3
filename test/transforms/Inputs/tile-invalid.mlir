// A kernel with an orientation trn-tile does not know (checked by ../tile.mlir).
func.func @bad(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %k = "trn.kernel"() ({
    %y = "trn.matmul"(%x, %w) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    "trn.yield"(%y) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<4x16xf32>) -> ()
  }) {kind = "matmul", orientation = "km", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<4x16xf32>
  return %k : tensor<4x16xf32>
}
