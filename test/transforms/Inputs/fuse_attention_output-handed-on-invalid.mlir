// An attention_linear_rows kernel that hands on its linear_rows part's rows but whose
// linear_rows part lost its trn.producer_result mark (checked by
// ../fuse_attention_output.mlir): convert-trn-to-nisa cannot tell where that part's Linear
// ends.
#map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#map1 = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>
#map2 = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>
module {
  func.func @encoder_layer(%arg0: tensor<1x128x128xbf16>, %arg1: tensor<384xbf16>, %arg2: tensor<128x384xbf16>, %arg3: tensor<128xbf16>, %arg4: tensor<128x128xbf16>, %arg5: tensor<128xbf16>, %arg6: tensor<128xbf16>, %arg7: tensor<256xbf16>, %arg8: tensor<128x256xbf16>, %arg9: tensor<128xbf16>, %arg10: tensor<256x128xbf16>, %arg11: tensor<128xbf16>, %arg12: tensor<128xbf16>) -> tensor<1x128x128xbf16> {
    %0 = "trn.kernel"() ({
      %1 = "trn.reshape"(%arg0) : (tensor<1x128x128xbf16>) -> tensor<128x128xbf16>
      %2 = "trn.broadcast"(%arg1) {dimensions = array<i64: 0>} : (tensor<384xbf16>) -> tensor<128x384xbf16>
      %3 = "trn.matmul"(%1, %arg2) : (tensor<128x128xbf16>, tensor<128x384xbf16>) -> tensor<128x384xf32>
      %4 = "trn.tensor_tensor"(%2, %3) {op = "add"} : (tensor<128x384xbf16>, tensor<128x384xf32>) -> tensor<128x384xf32>
      %5 = "trn.convert"(%4) {trn.attention_input} : (tensor<128x384xf32>) -> tensor<128x384xbf16>
      %6 = "trn.reshape"(%5) : (tensor<128x384xbf16>) -> tensor<1x128x3x2x64xbf16>
      %7 = "trn.transpose"(%6) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<1x128x3x2x64xbf16>) -> tensor<3x1x2x128x64xbf16>
      %8 = "trn.view"(%7) {indexing_map = #map} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
      %9 = "trn.reshape"(%8) : (tensor<1x1x2x128x64xbf16>) -> tensor<2x128x64xbf16>
      %10 = "trn.view"(%7) {indexing_map = #map1} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
      %11 = "trn.reshape"(%10) : (tensor<1x1x2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
      %12 = "trn.transpose"(%11) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<1x2x128x64xbf16>) -> tensor<1x2x64x128xbf16>
      %13 = "trn.reshape"(%12) : (tensor<1x2x64x128xbf16>) -> tensor<2x64x128xbf16>
      %14 = "trn.matmul"(%9, %13) : (tensor<2x128x64xbf16>, tensor<2x64x128xbf16>) -> tensor<2x128x128xf32>
      %15 = "trn.convert"(%14) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
      %16 = "trn.reshape"(%15) : (tensor<2x128x128xbf16>) -> tensor<1x2x128x128xbf16>
      %17 = "trn.tensor_scalar"(%16) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<1x2x128x128xbf16>) -> tensor<1x2x128x128xf32>
      %18 = "trn.reduce"(%17) {dimensions = array<i64: 3>, op = "max"} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
      %19 = "trn.broadcast"(%18) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
      %20 = "trn.tensor_tensor"(%17, %19) {op = "sub"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
      %21 = "trn.activation"(%20) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
      %22 = "trn.reduce"(%21) {dimensions = array<i64: 3>, op = "add"} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
      %23 = "trn.broadcast"(%22) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
      %24 = "trn.tensor_tensor"(%21, %23) {op = "div"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
      %25 = "trn.convert"(%24) : (tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xbf16>
      %26 = "trn.reshape"(%25) : (tensor<1x2x128x128xbf16>) -> tensor<2x128x128xbf16>
      %27 = "trn.reshape"(%5) : (tensor<128x384xbf16>) -> tensor<1x128x3x2x64xbf16>
      %28 = "trn.transpose"(%27) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<1x128x3x2x64xbf16>) -> tensor<3x1x2x128x64xbf16>
      %29 = "trn.view"(%28) {indexing_map = #map2} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
      %30 = "trn.reshape"(%29) : (tensor<1x1x2x128x64xbf16>) -> tensor<2x128x64xbf16>
      %31 = "trn.matmul"(%26, %30) : (tensor<2x128x128xbf16>, tensor<2x128x64xbf16>) -> tensor<2x128x64xf32>
      %32 = "trn.convert"(%31) : (tensor<2x128x64xf32>) -> tensor<2x128x64xbf16>
      %33 = "trn.reshape"(%32) : (tensor<2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
      %34 = "trn.transpose"(%33) {permutation = array<i64: 0, 2, 1, 3>, trn.attention_output} : (tensor<1x2x128x64xbf16>) -> tensor<1x128x2x64xbf16>
      %35 = "trn.reshape"(%34) : (tensor<1x128x2x64xbf16>) -> tensor<128x128xbf16>
      %36 = "trn.broadcast"(%arg3) {dimensions = array<i64: 0>} : (tensor<128xbf16>) -> tensor<128x128xbf16>
      %37 = "trn.matmul"(%35, %arg4) : (tensor<128x128xbf16>, tensor<128x128xbf16>) -> tensor<128x128xf32>
      %38 = "trn.tensor_tensor"(%36, %37) {op = "add"} : (tensor<128x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
      %39 = "trn.convert"(%38) : (tensor<128x128xf32>) -> tensor<128x128xbf16>
      %40 = "trn.reshape"(%39) : (tensor<128x128xbf16>) -> tensor<1x128x128xbf16>
      %41 = "trn.broadcast"(%arg5) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<1x128x128xbf16>
      %42 = "trn.broadcast"(%arg6) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<1x128x128xbf16>
      %43 = "trn.tensor_tensor"(%arg0, %40) {op = "add"} : (tensor<1x128x128xbf16>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
      %44 = "trn.convert"(%43) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
      %45 = "trn.reduce"(%44) {dimensions = array<i64: 2>, op = "add"} : (tensor<1x128x128xbf16>) -> tensor<1x128xbf16>
      %46 = "trn.tensor_scalar"(%45) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<1x128xbf16>) -> tensor<1x128xf32>
      %47 = "trn.convert"(%46) : (tensor<1x128xf32>) -> tensor<1x128xbf16>
      %48 = "trn.broadcast"(%47) {dimensions = array<i64: 2>} : (tensor<1x128xbf16>) -> tensor<1x128x128xbf16>
      %49 = "trn.tensor_tensor"(%44, %48) {op = "sub"} : (tensor<1x128x128xbf16>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
      %50 = "trn.tensor_tensor"(%49, %49) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
      %51 = "trn.convert"(%50) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
      %52 = "trn.reduce"(%51) {dimensions = array<i64: 2>, op = "add"} : (tensor<1x128x128xbf16>) -> tensor<1x128xbf16>
      %53 = "trn.tensor_scalar"(%52) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<1x128xbf16>) -> tensor<1x128xf32>
      %54 = "trn.tensor_scalar"(%53) {op = "add", reverse = false, scalar = 9.99999974E-6 : f32} : (tensor<1x128xf32>) -> tensor<1x128xf32>
      %55 = "trn.activation"(%54) {bias = 0.000000e+00 : f32, func = "rsqrt", scale = 1.000000e+00 : f32} : (tensor<1x128xf32>) -> tensor<1x128xf32>
      %56 = "trn.convert"(%55) : (tensor<1x128xf32>) -> tensor<1x128xbf16>
      %57 = "trn.broadcast"(%56) {dimensions = array<i64: 2>} : (tensor<1x128xbf16>) -> tensor<1x128x128xbf16>
      %58 = "trn.tensor_tensor"(%49, %57) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
      %59 = "trn.tensor_tensor"(%58, %41) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
      %60 = "trn.tensor_tensor"(%59, %42) {op = "add"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
      %61 = "trn.convert"(%60) {trn.rows_handed_on} : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
      %62 = "trn.reshape"(%61) : (tensor<1x128x128xbf16>) -> tensor<128x128xbf16>
      %63 = "trn.broadcast"(%arg7) {dimensions = array<i64: 0>} : (tensor<256xbf16>) -> tensor<128x256xbf16>
      %64 = "trn.matmul"(%62, %arg8) : (tensor<128x128xbf16>, tensor<128x256xbf16>) -> tensor<128x256xf32>
      %65 = "trn.tensor_tensor"(%63, %64) {op = "add"} : (tensor<128x256xbf16>, tensor<128x256xf32>) -> tensor<128x256xf32>
      %66 = "trn.activation"(%65) {bias = 0.000000e+00 : f32, func = "gelu", scale = 1.000000e+00 : f32} : (tensor<128x256xf32>) -> tensor<128x256xf32>
      %67 = "trn.convert"(%66) : (tensor<128x256xf32>) -> tensor<128x256xbf16>
      %68 = "trn.broadcast"(%arg9) {dimensions = array<i64: 0>} : (tensor<128xbf16>) -> tensor<128x128xbf16>
      %69 = "trn.matmul"(%67, %arg10) : (tensor<128x256xbf16>, tensor<256x128xbf16>) -> tensor<128x128xf32>
      %70 = "trn.tensor_tensor"(%68, %69) {op = "add"} : (tensor<128x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
      %71 = "trn.convert"(%70) {trn.producer_result} : (tensor<128x128xf32>) -> tensor<128x128xbf16>
      %72 = "trn.reshape"(%71) : (tensor<128x128xbf16>) -> tensor<1x128x128xbf16>
      %73 = "trn.broadcast"(%arg11) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<1x128x128xbf16>
      %74 = "trn.broadcast"(%arg12) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<1x128x128xbf16>
      %75 = "trn.tensor_tensor"(%61, %72) {op = "add"} : (tensor<1x128x128xbf16>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
      %76 = "trn.convert"(%75) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
      %77 = "trn.reduce"(%76) {dimensions = array<i64: 2>, op = "add"} : (tensor<1x128x128xbf16>) -> tensor<1x128xbf16>
      %78 = "trn.tensor_scalar"(%77) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<1x128xbf16>) -> tensor<1x128xf32>
      %79 = "trn.convert"(%78) : (tensor<1x128xf32>) -> tensor<1x128xbf16>
      %80 = "trn.broadcast"(%79) {dimensions = array<i64: 2>} : (tensor<1x128xbf16>) -> tensor<1x128x128xbf16>
      %81 = "trn.tensor_tensor"(%76, %80) {op = "sub"} : (tensor<1x128x128xbf16>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
      %82 = "trn.tensor_tensor"(%81, %81) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
      %83 = "trn.convert"(%82) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
      %84 = "trn.reduce"(%83) {dimensions = array<i64: 2>, op = "add"} : (tensor<1x128x128xbf16>) -> tensor<1x128xbf16>
      %85 = "trn.tensor_scalar"(%84) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<1x128xbf16>) -> tensor<1x128xf32>
      %86 = "trn.tensor_scalar"(%85) {op = "add", reverse = false, scalar = 9.99999974E-6 : f32} : (tensor<1x128xf32>) -> tensor<1x128xf32>
      %87 = "trn.activation"(%86) {bias = 0.000000e+00 : f32, func = "rsqrt", scale = 1.000000e+00 : f32} : (tensor<1x128xf32>) -> tensor<1x128xf32>
      %88 = "trn.convert"(%87) : (tensor<1x128xf32>) -> tensor<1x128xbf16>
      %89 = "trn.broadcast"(%88) {dimensions = array<i64: 2>} : (tensor<1x128xbf16>) -> tensor<1x128x128xbf16>
      %90 = "trn.tensor_tensor"(%81, %89) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
      %91 = "trn.tensor_tensor"(%90, %73) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
      %92 = "trn.tensor_tensor"(%91, %74) {op = "add"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
      %93 = "trn.convert"(%92) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
      "trn.yield"(%93) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x128xbf16>) -> ()
    }) {kind = "attention_linear_rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x128xbf16>
    return %0 : tensor<1x128x128xbf16>
  }
}
