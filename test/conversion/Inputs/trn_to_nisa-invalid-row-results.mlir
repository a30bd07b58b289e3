// A row-wise kernel whose second result is a row value, not a per-row one (checked by
// ../trn_to_nisa.mlir).
func.func @bad(%x: tensor<128x64xf32>) -> (tensor<128x64xf32>, tensor<128x64xf32>) {
  %k:2 = "trn.kernel"() ({
    %sum = "trn.reduce"(%x) {op = "add", dimensions = array<i64: 1>} : (tensor<128x64xf32>) -> tensor<128xf32>
    %sb = "trn.broadcast"(%sum) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x64xf32>
    %c = "trn.tensor_tensor"(%x, %sb) {op = "sub"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
    %y = "trn.tensor_tensor"(%c, %c) {op = "mul"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
    "trn.yield"(%y, %c) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<128x64xf32>, tensor<128x64xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<128x64xf32>, tensor<128x64xf32>)
  return %k#0, %k#1 : tensor<128x64xf32>, tensor<128x64xf32>
}
