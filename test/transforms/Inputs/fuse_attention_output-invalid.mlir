// An attention_linear_rows kernel whose attention output op lost its trn.attention_output mark
// (checked by ../fuse_attention_output.mlir): convert-trn-to-nisa cannot tell where the
// attention's ops end.
#map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#map1 = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>
#map2 = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>
module {
  func.func @attention_then_projection(%arg0: tensor<1x128x128xbf16>, %arg1: tensor<384xbf16>, %arg2: tensor<128x384xbf16>, %arg3: tensor<128xbf16>, %arg4: tensor<128x128xbf16>, %arg5: tensor<128xbf16>, %arg6: tensor<128xbf16>) -> tensor<1x128x128xbf16> {
    %0 = "trn.kernel"() ({
      %2 = "trn.reshape"(%arg0) : (tensor<1x128x128xbf16>) -> tensor<128x128xbf16>
      %3 = "trn.broadcast"(%arg1) {dimensions = array<i64: 0>} : (tensor<384xbf16>) -> tensor<128x384xbf16>
      %4 = "trn.matmul"(%2, %arg2) : (tensor<128x128xbf16>, tensor<128x384xbf16>) -> tensor<128x384xf32>
      %5 = "trn.tensor_tensor"(%3, %4) {op = "add"} : (tensor<128x384xbf16>, tensor<128x384xf32>) -> tensor<128x384xf32>
      %6 = "trn.convert"(%5) : (tensor<128x384xf32>) -> tensor<128x384xbf16>
      "trn.yield"(%6) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x384xbf16>) -> ()
    }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x384xbf16>
    %1 = "trn.kernel"() ({
      %2 = "trn.reshape"(%0) : (tensor<128x384xbf16>) -> tensor<1x128x3x2x64xbf16>
      %3 = "trn.transpose"(%2) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<1x128x3x2x64xbf16>) -> tensor<3x1x2x128x64xbf16>
      %4 = "trn.view"(%3) {indexing_map = #map} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
      %5 = "trn.reshape"(%4) : (tensor<1x1x2x128x64xbf16>) -> tensor<2x128x64xbf16>
      %6 = "trn.view"(%3) {indexing_map = #map1} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
      %7 = "trn.reshape"(%6) : (tensor<1x1x2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
      %8 = "trn.transpose"(%7) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<1x2x128x64xbf16>) -> tensor<1x2x64x128xbf16>
      %9 = "trn.reshape"(%8) : (tensor<1x2x64x128xbf16>) -> tensor<2x64x128xbf16>
      %10 = "trn.matmul"(%5, %9) : (tensor<2x128x64xbf16>, tensor<2x64x128xbf16>) -> tensor<2x128x128xf32>
      %11 = "trn.convert"(%10) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
      %12 = "trn.reshape"(%11) : (tensor<2x128x128xbf16>) -> tensor<1x2x128x128xbf16>
      %13 = "trn.tensor_scalar"(%12) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<1x2x128x128xbf16>) -> tensor<1x2x128x128xf32>
      %14 = "trn.reduce"(%13) {dimensions = array<i64: 3>, op = "max"} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
      %15 = "trn.broadcast"(%14) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
      %16 = "trn.tensor_tensor"(%13, %15) {op = "sub"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
      %17 = "trn.activation"(%16) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
      %18 = "trn.reduce"(%17) {dimensions = array<i64: 3>, op = "add"} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
      %19 = "trn.broadcast"(%18) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
      %20 = "trn.tensor_tensor"(%17, %19) {op = "div"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
      %21 = "trn.convert"(%20) : (tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xbf16>
      %22 = "trn.reshape"(%21) : (tensor<1x2x128x128xbf16>) -> tensor<2x128x128xbf16>
      %23 = "trn.reshape"(%0) : (tensor<128x384xbf16>) -> tensor<1x128x3x2x64xbf16>
      %24 = "trn.transpose"(%23) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<1x128x3x2x64xbf16>) -> tensor<3x1x2x128x64xbf16>
      %25 = "trn.view"(%24) {indexing_map = #map2} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
      %26 = "trn.reshape"(%25) : (tensor<1x1x2x128x64xbf16>) -> tensor<2x128x64xbf16>
      %27 = "trn.matmul"(%22, %26) : (tensor<2x128x128xbf16>, tensor<2x128x64xbf16>) -> tensor<2x128x64xf32>
      %28 = "trn.convert"(%27) : (tensor<2x128x64xf32>) -> tensor<2x128x64xbf16>
      %29 = "trn.reshape"(%28) : (tensor<2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
      %30 = "trn.transpose"(%29) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x2x128x64xbf16>) -> tensor<1x128x2x64xbf16>
      %31 = "trn.reshape"(%30) : (tensor<1x128x2x64xbf16>) -> tensor<128x128xbf16>
      %32 = "trn.broadcast"(%arg3) {dimensions = array<i64: 0>} : (tensor<128xbf16>) -> tensor<128x128xbf16>
      %33 = "trn.matmul"(%31, %arg4) : (tensor<128x128xbf16>, tensor<128x128xbf16>) -> tensor<128x128xf32>
      %34 = "trn.tensor_tensor"(%32, %33) {op = "add"} : (tensor<128x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
      %35 = "trn.convert"(%34) {trn.producer_result} : (tensor<128x128xf32>) -> tensor<128x128xbf16>
      %36 = "trn.reshape"(%35) : (tensor<128x128xbf16>) -> tensor<1x128x128xbf16>
      %37 = "trn.broadcast"(%arg5) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<1x128x128xbf16>
      %38 = "trn.broadcast"(%arg6) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<1x128x128xbf16>
      %39 = "trn.tensor_tensor"(%arg0, %36) {op = "add"} : (tensor<1x128x128xbf16>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
      %40 = "trn.convert"(%39) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
      %41 = "trn.reduce"(%40) {dimensions = array<i64: 2>, op = "add"} : (tensor<1x128x128xbf16>) -> tensor<1x128xbf16>
      %42 = "trn.tensor_scalar"(%41) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<1x128xbf16>) -> tensor<1x128xf32>
      %43 = "trn.convert"(%42) : (tensor<1x128xf32>) -> tensor<1x128xbf16>
      %44 = "trn.broadcast"(%43) {dimensions = array<i64: 2>} : (tensor<1x128xbf16>) -> tensor<1x128x128xbf16>
      %45 = "trn.tensor_tensor"(%40, %44) {op = "sub"} : (tensor<1x128x128xbf16>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
      %46 = "trn.tensor_tensor"(%45, %45) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
      %47 = "trn.convert"(%46) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
      %48 = "trn.reduce"(%47) {dimensions = array<i64: 2>, op = "add"} : (tensor<1x128x128xbf16>) -> tensor<1x128xbf16>
      %49 = "trn.tensor_scalar"(%48) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<1x128xbf16>) -> tensor<1x128xf32>
      %50 = "trn.tensor_scalar"(%49) {op = "add", reverse = false, scalar = 9.99999974E-6 : f32} : (tensor<1x128xf32>) -> tensor<1x128xf32>
      %51 = "trn.activation"(%50) {bias = 0.000000e+00 : f32, func = "rsqrt", scale = 1.000000e+00 : f32} : (tensor<1x128xf32>) -> tensor<1x128xf32>
      %52 = "trn.convert"(%51) : (tensor<1x128xf32>) -> tensor<1x128xbf16>
      %53 = "trn.broadcast"(%52) {dimensions = array<i64: 2>} : (tensor<1x128xbf16>) -> tensor<1x128x128xbf16>
      %54 = "trn.tensor_tensor"(%45, %53) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
      %55 = "trn.tensor_tensor"(%54, %37) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
      %56 = "trn.tensor_tensor"(%55, %38) {op = "add"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
      %57 = "trn.convert"(%56) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
      "trn.yield"(%57) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x128xbf16>) -> ()
    }) {kind = "attention_linear_rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x128xbf16>
    return %1 : tensor<1x128x128xbf16>
  }
}

