// A reduction kernel with a second result (checked by ../trn_to_nisa.mlir).
func.func @bad(%x: tensor<128x64xf32>) -> (tensor<128xf32>, tensor<128x64xf32>) {
  %k:2 = "trn.kernel"() ({
    %e = "trn.activation"(%x) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x64xf32>) -> tensor<128x64xf32>
    %s = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 1>} : (tensor<128x64xf32>) -> tensor<128xf32>
    "trn.yield"(%s, %e) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<128xf32>, tensor<128x64xf32>) -> ()
  }) {kind = "reduce", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<128xf32>, tensor<128x64xf32>)
  return %k#0, %k#1 : tensor<128xf32>, tensor<128x64xf32>
}
