// A weight_gradient kernel whose second matmul reads the first's result as it is, not its
// transpose (checked by ../trn_to_nisa.mlir).
func.func @bad(%a: tensor<128x128xbf16>, %b: tensor<128x128xbf16>, %x: tensor<128x64xbf16>) -> tensor<128x64xf32> {
  %k = "trn.kernel"() ({
    %t = "trn.matmul"(%a, %b) : (tensor<128x128xbf16>, tensor<128x128xbf16>) -> tensor<128x128xf32>
    %tc = "trn.convert"(%t) : (tensor<128x128xf32>) -> tensor<128x128xbf16>
    %w = "trn.matmul"(%tc, %x) : (tensor<128x128xbf16>, tensor<128x64xbf16>) -> tensor<128x64xf32>
    "trn.yield"(%w) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x64xf32>) -> ()
  }) {kind = "weight_gradient", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x64xf32>
  return %k : tensor<128x64xf32>
}
