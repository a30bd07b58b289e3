// A training step's attention kernel that computes its QKV projection (trn.attention_input)
// and yields, as a saved view of it, every other token's row (checked by
// ../fuse_attention_output.mlir): neither K^T as the attention stages it nor runs of
// columns of whole 128-token row tiles, so convert-trn-to-nisa has nothing to store it from.
#map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#map1 = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>
#map2 = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>
module {
  func.func @training_attention_saves_q_kt_v(%arg0: tensor<2x128x64xbf16>, %arg1: tensor<192x64xbf16>, %arg2: tensor<192xbf16>) -> (tensor<2x2x128x32xbf16>, tensor<2x2x32x128xbf16>, tensor<2x2x128x128xbf16>, tensor<2x2x128x32xbf16>, tensor<2x128x2x32xbf16>) {
    %0:5 = "trn.kernel"() ({
      %5 = "trn.reshape"(%arg0) : (tensor<2x128x64xbf16>) -> tensor<256x64xbf16>
      %6 = "trn.transpose"(%arg1) {permutation = array<i64: 1, 0>} : (tensor<192x64xbf16>) -> tensor<64x192xbf16>
      %7 = "trn.broadcast"(%arg2) {dimensions = array<i64: 0>} : (tensor<192xbf16>) -> tensor<256x192xbf16>
      %8 = "trn.matmul"(%5, %6) : (tensor<256x64xbf16>, tensor<64x192xbf16>) -> tensor<256x192xf32>
      %9 = "trn.tensor_tensor"(%7, %8) {op = "add"} : (tensor<256x192xbf16>, tensor<256x192xf32>) -> tensor<256x192xf32>
      %10 = "trn.convert"(%9) {trn.attention_input} : (tensor<256x192xf32>) -> tensor<256x192xbf16>
      %11 = "trn.reshape"(%10) : (tensor<256x192xbf16>) -> tensor<2x128x3x2x32xbf16>
      %12 = "trn.transpose"(%11) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x128x3x2x32xbf16>) -> tensor<3x2x2x128x32xbf16>
      %13 = "trn.view"(%12) {indexing_map = #map} : (tensor<3x2x2x128x32xbf16>) -> tensor<1x2x2x128x32xbf16>
      %14 = "trn.reshape"(%13) : (tensor<1x2x2x128x32xbf16>) -> tensor<4x128x32xbf16>
      %15 = "trn.view"(%12) {indexing_map = #map1} : (tensor<3x2x2x128x32xbf16>) -> tensor<1x2x2x128x32xbf16>
      %16 = "trn.reshape"(%15) : (tensor<1x2x2x128x32xbf16>) -> tensor<2x2x128x32xbf16>
      %17 = "trn.transpose"(%16) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<2x2x128x32xbf16>) -> tensor<2x2x32x128xbf16>
      %18 = "trn.reshape"(%17) : (tensor<2x2x32x128xbf16>) -> tensor<4x32x128xbf16>
      %19 = "trn.matmul"(%14, %18) : (tensor<4x128x32xbf16>, tensor<4x32x128xbf16>) -> tensor<4x128x128xf32>
      %20 = "trn.convert"(%19) : (tensor<4x128x128xf32>) -> tensor<4x128x128xbf16>
      %21 = "trn.reshape"(%20) : (tensor<4x128x128xbf16>) -> tensor<2x2x128x128xbf16>
      %22 = "trn.tensor_scalar"(%21) {op = "mul", reverse = false, scalar = 0.176776692 : f32} : (tensor<2x2x128x128xbf16>) -> tensor<2x2x128x128xf32>
      %23 = "trn.reduce"(%22) {dimensions = array<i64: 3>, op = "max"} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128xf32>
      %24 = "trn.broadcast"(%23) {dimensions = array<i64: 3>} : (tensor<2x2x128xf32>) -> tensor<2x2x128x128xf32>
      %25 = "trn.tensor_tensor"(%22, %24) {op = "sub"} : (tensor<2x2x128x128xf32>, tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
      %26 = "trn.activation"(%25) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
      %27 = "trn.reduce"(%26) {dimensions = array<i64: 3>, op = "add"} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128xf32>
      %28 = "trn.broadcast"(%27) {dimensions = array<i64: 3>} : (tensor<2x2x128xf32>) -> tensor<2x2x128x128xf32>
      %29 = "trn.tensor_tensor"(%26, %28) {op = "div"} : (tensor<2x2x128x128xf32>, tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
      %30 = "trn.convert"(%29) : (tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xbf16>
      %31 = "trn.reshape"(%30) : (tensor<2x2x128x128xbf16>) -> tensor<4x128x128xbf16>
      %32 = "trn.reshape"(%10) : (tensor<256x192xbf16>) -> tensor<2x128x3x2x32xbf16>
      %33 = "trn.transpose"(%32) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x128x3x2x32xbf16>) -> tensor<3x2x2x128x32xbf16>
      %34 = "trn.view"(%33) {indexing_map = #map2} : (tensor<3x2x2x128x32xbf16>) -> tensor<1x2x2x128x32xbf16>
      %35 = "trn.reshape"(%34) : (tensor<1x2x2x128x32xbf16>) -> tensor<4x128x32xbf16>
      %36 = "trn.matmul"(%31, %35) : (tensor<4x128x128xbf16>, tensor<4x128x32xbf16>) -> tensor<4x128x32xf32>
      %37 = "trn.convert"(%36) : (tensor<4x128x32xf32>) -> tensor<4x128x32xbf16>
      %38 = "trn.reshape"(%37) : (tensor<4x128x32xbf16>) -> tensor<2x2x128x32xbf16>
      %39 = "trn.transpose"(%38) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x128x32xbf16>) -> tensor<2x128x2x32xbf16>
      %40 = "trn.reshape"(%39) : (tensor<2x128x2x32xbf16>) -> tensor<16384xbf16>
      %41 = "trn.reshape"(%34) : (tensor<1x2x2x128x32xbf16>) -> tensor<16384xbf16>
      %every_other = "trn.view"(%10) {indexing_map = affine_map<(d0, d1) -> (d0 * 2, d1)>} : (tensor<256x192xbf16>) -> tensor<128x128xbf16>
      %42 = "trn.reshape"(%every_other) : (tensor<128x128xbf16>) -> tensor<16384xbf16>
      %43 = "trn.reshape"(%17) : (tensor<2x2x32x128xbf16>) -> tensor<16384xbf16>
      "trn.yield"(%30, %40, %41, %42, %43) {operandSegmentSizes = array<i32: 1, 4, 0>} : (tensor<2x2x128x128xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>) -> ()
    }) {kind = "attention", resultSegmentSizes = array<i32: 1, 4, 0>} : () -> (tensor<2x2x128x128xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>)
    %1 = "trn.reshape"(%0#1) : (tensor<16384xbf16>) -> tensor<2x128x2x32xbf16>
    %2 = "trn.reshape"(%0#2) : (tensor<16384xbf16>) -> tensor<2x2x128x32xbf16>
    %3 = "trn.reshape"(%0#3) : (tensor<16384xbf16>) -> tensor<2x2x128x32xbf16>
    %4 = "trn.reshape"(%0#4) : (tensor<16384xbf16>) -> tensor<2x2x32x128xbf16>
    return %3, %4, %0#0, %2, %1 : tensor<2x2x128x32xbf16>, tensor<2x2x32x128xbf16>, tensor<2x2x128x128xbf16>, tensor<2x2x128x32xbf16>, tensor<2x128x2x32xbf16>
  }
}
