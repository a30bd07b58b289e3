// An mlp kernel with one matmul (checked by ../trn_to_nisa.mlir).
func.func @bad(%x: tensor<128x128xbf16>, %w: tensor<128x128xbf16>) -> tensor<128x128xbf16> {
  %k = "trn.kernel"() ({
    %m = "trn.matmul"(%x, %w) : (tensor<128x128xbf16>, tensor<128x128xbf16>) -> tensor<128x128xf32>
    %c = "trn.convert"(%m) : (tensor<128x128xf32>) -> tensor<128x128xbf16>
    "trn.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x128xbf16>) -> ()
  }) {kind = "mlp", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x128xbf16>
  return %k : tensor<128x128xbf16>
}
