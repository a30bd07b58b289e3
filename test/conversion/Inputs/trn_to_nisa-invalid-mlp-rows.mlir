// An mlp_rows kernel without an op marked trn.producer_result (checked by ../trn_to_nisa.mlir).
func.func @bad(%x: tensor<128x128xbf16>, %w1: tensor<128x256xbf16>, %w2: tensor<256x128xbf16>) -> tensor<128x128xbf16> {
  %k = "trn.kernel"() ({
    %h = "trn.matmul"(%x, %w1) : (tensor<128x128xbf16>, tensor<128x256xbf16>) -> tensor<128x256xf32>
    %hb = "trn.convert"(%h) : (tensor<128x256xf32>) -> tensor<128x256xbf16>
    %y = "trn.matmul"(%hb, %w2) : (tensor<128x256xbf16>, tensor<256x128xbf16>) -> tensor<128x128xf32>
    %s = "trn.reduce"(%y) {dimensions = array<i64: 1>, op = "add"} : (tensor<128x128xf32>) -> tensor<128xf32>
    %sb = "trn.broadcast"(%s) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x128xf32>
    %c = "trn.tensor_tensor"(%y, %sb) {op = "sub"} : (tensor<128x128xf32>, tensor<128x128xf32>) -> tensor<128x128xf32>
    %cb = "trn.convert"(%c) : (tensor<128x128xf32>) -> tensor<128x128xbf16>
    "trn.yield"(%cb) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x128xbf16>) -> ()
  }) {kind = "mlp_rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x128xbf16>
  return %k : tensor<128x128xbf16>
}
