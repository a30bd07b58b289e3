// A trn op whose operand shapes disagree (checked by ../fuse.mlir).
func.func @bad(%x: tensor<8xf32>, %y: tensor<4xf32>) -> tensor<8xf32> {
  %t = "trn.tensor_tensor"(%x, %y) {op = "add"} : (tensor<8xf32>, tensor<4xf32>) -> tensor<8xf32>
  return %t : tensor<8xf32>
}
