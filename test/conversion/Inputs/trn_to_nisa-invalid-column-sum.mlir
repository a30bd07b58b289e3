// A row-wise kernel summing its rows over one of its two kept dims only, which its tiles of
// rows cannot accumulate (checked by ../trn_to_nisa.mlir).
func.func @bad(%x: tensor<4x128x64xf32>) -> (tensor<4x128x64xf32>, tensor<128x64xf32>) {
  %k:2 = "trn.kernel"() ({
    %sum = "trn.reduce"(%x) {op = "add", dimensions = array<i64: 2>} : (tensor<4x128x64xf32>) -> tensor<4x128xf32>
    %sb = "trn.broadcast"(%sum) {dimensions = array<i64: 2>} : (tensor<4x128xf32>) -> tensor<4x128x64xf32>
    %c = "trn.tensor_tensor"(%x, %sb) {op = "sub"} : (tensor<4x128x64xf32>, tensor<4x128x64xf32>) -> tensor<4x128x64xf32>
    %part = "trn.reduce"(%c) {op = "add", dimensions = array<i64: 0>} : (tensor<4x128x64xf32>) -> tensor<128x64xf32>
    "trn.yield"(%c, %part) : (tensor<4x128x64xf32>, tensor<128x64xf32>) -> ()
  }) {kind = "rows"} : () -> (tensor<4x128x64xf32>, tensor<128x64xf32>)
  return %k#0, %k#1 : tensor<4x128x64xf32>, tensor<128x64xf32>
}
