// An mlp_saved kernel without an op marked trn.producer_result (checked by ../trn_to_nisa.mlir).
func.func @bad(%arg0: tensor<256x128xbf16>, %arg1: tensor<512x128xbf16>, %arg2: tensor<512xbf16>, %arg3: tensor<128x512xbf16>) -> (tensor<256x128xbf16>, tensor<256x512xbf16>, tensor<256x512xbf16>) {
  %0:3 = "trn.kernel"() ({
    %1 = "trn.transpose"(%arg1) {permutation = array<i64: 1, 0>} : (tensor<512x128xbf16>) -> tensor<128x512xbf16>
    %2 = "trn.broadcast"(%arg2) {dimensions = array<i64: 0>} : (tensor<512xbf16>) -> tensor<256x512xbf16>
    %3 = "trn.matmul"(%arg0, %1) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
    %4 = "trn.tensor_tensor"(%3, %2) {op = "add"} : (tensor<256x512xf32>, tensor<256x512xbf16>) -> tensor<256x512xf32>
    %5 = "trn.convert"(%4) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
    %6 = "trn.activation"(%5) {bias = 0.000000e+00 : f32, func = "gelu", scale = 1.000000e+00 : f32} : (tensor<256x512xbf16>) -> tensor<256x512xf32>
    %7 = "trn.convert"(%6) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
    %8 = "trn.transpose"(%arg3) {permutation = array<i64: 1, 0>} : (tensor<128x512xbf16>) -> tensor<512x128xbf16>
    %9 = "trn.matmul"(%7, %8) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
    %10 = "trn.convert"(%9) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
    "trn.yield"(%10, %7, %5) {operandSegmentSizes = array<i32: 1, 2, 0>} : (tensor<256x128xbf16>, tensor<256x512xbf16>, tensor<256x512xbf16>) -> ()
  }) {kind = "mlp_saved", resultSegmentSizes = array<i32: 1, 2, 0>} : () -> (tensor<256x128xbf16>, tensor<256x512xbf16>, tensor<256x512xbf16>)
  return %0#0, %0#2, %0#1 : tensor<256x128xbf16>, tensor<256x512xbf16>, tensor<256x512xbf16>
}
