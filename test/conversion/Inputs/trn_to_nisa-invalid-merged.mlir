// Merged kernels whose marks or results do not fit their lowering (checked by
// ../trn_to_nisa.mlir): an attention kernel with two ops marked trn.attention_input; one
// whose output op is marked trn.attention_output with no output projection after it; an
// mlp_saved kernel that does not yield its first Linear's result; an attention kernel with
// two ops marked trn.attention_output; a matmul kernel with an op marked trn.input_rows.
func.func @two_marks(%arg0: tensor<2x128x64xbf16>, %arg1: tensor<192x64xbf16>, %arg2: tensor<192xbf16>) -> (tensor<2x2x128x32xbf16>, tensor<2x2x32x128xbf16>, tensor<2x2x128x128xbf16>, tensor<2x2x128x32xbf16>, tensor<2x128x2x32xbf16>) {
  %0:5 = "trn.kernel"() ({
    %5 = "trn.reshape"(%arg0) : (tensor<2x128x64xbf16>) -> tensor<256x64xbf16>
    %6 = "trn.transpose"(%arg1) {permutation = array<i64: 1, 0>} : (tensor<192x64xbf16>) -> tensor<64x192xbf16>
    %7 = "trn.broadcast"(%arg2) {dimensions = array<i64: 0>} : (tensor<192xbf16>) -> tensor<256x192xbf16>
    %8 = "trn.matmul"(%5, %6) {trn.attention_input} : (tensor<256x64xbf16>, tensor<64x192xbf16>) -> tensor<256x192xf32>
    %9 = "trn.tensor_tensor"(%7, %8) {op = "add"} : (tensor<256x192xbf16>, tensor<256x192xf32>) -> tensor<256x192xf32>
    %10 = "trn.convert"(%9) {trn.attention_input} : (tensor<256x192xf32>) -> tensor<256x192xbf16>
    %11 = "trn.reshape"(%10) : (tensor<256x192xbf16>) -> tensor<2x128x3x2x32xbf16>
    %12 = "trn.transpose"(%11) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x128x3x2x32xbf16>) -> tensor<3x2x2x128x32xbf16>
    %13 = "trn.view"(%12) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>} : (tensor<3x2x2x128x32xbf16>) -> tensor<1x2x2x128x32xbf16>
    %14 = "trn.reshape"(%13) : (tensor<1x2x2x128x32xbf16>) -> tensor<4x128x32xbf16>
    %15 = "trn.view"(%12) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>} : (tensor<3x2x2x128x32xbf16>) -> tensor<1x2x2x128x32xbf16>
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
    %34 = "trn.view"(%33) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>} : (tensor<3x2x2x128x32xbf16>) -> tensor<1x2x2x128x32xbf16>
    %35 = "trn.reshape"(%34) : (tensor<1x2x2x128x32xbf16>) -> tensor<4x128x32xbf16>
    %36 = "trn.matmul"(%31, %35) : (tensor<4x128x128xbf16>, tensor<4x128x32xbf16>) -> tensor<4x128x32xf32>
    %37 = "trn.convert"(%36) : (tensor<4x128x32xf32>) -> tensor<4x128x32xbf16>
    %38 = "trn.reshape"(%37) : (tensor<4x128x32xbf16>) -> tensor<2x2x128x32xbf16>
    %39 = "trn.transpose"(%38) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x128x32xbf16>) -> tensor<2x128x2x32xbf16>
    %40 = "trn.reshape"(%39) : (tensor<2x128x2x32xbf16>) -> tensor<16384xbf16>
    %41 = "trn.reshape"(%34) : (tensor<1x2x2x128x32xbf16>) -> tensor<16384xbf16>
    %42 = "trn.reshape"(%13) : (tensor<1x2x2x128x32xbf16>) -> tensor<16384xbf16>
    %43 = "trn.reshape"(%17) : (tensor<2x2x32x128xbf16>) -> tensor<16384xbf16>
    "trn.yield"(%30, %40, %41, %42, %43) {operandSegmentSizes = array<i32: 1, 4, 0>} : (tensor<2x2x128x128xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 4, 0>} : () -> (tensor<2x2x128x128xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>)
  %1 = "trn.reshape"(%0#1) : (tensor<16384xbf16>) -> tensor<2x128x2x32xbf16>
  %2 = "trn.reshape"(%0#2) : (tensor<16384xbf16>) -> tensor<2x2x128x32xbf16>
  %3 = "trn.reshape"(%0#3) : (tensor<16384xbf16>) -> tensor<2x2x128x32xbf16>
  %4 = "trn.reshape"(%0#4) : (tensor<16384xbf16>) -> tensor<2x2x32x128xbf16>
  return %3, %4, %0#0, %2, %1 : tensor<2x2x128x32xbf16>, tensor<2x2x32x128xbf16>, tensor<2x2x128x128xbf16>, tensor<2x2x128x32xbf16>, tensor<2x128x2x32xbf16>
}

// -----

func.func @marked_output_without_projection(%arg0: tensor<2x128x64xbf16>, %arg1: tensor<192x64xbf16>, %arg2: tensor<192xbf16>) -> (tensor<2x2x128x32xbf16>, tensor<2x2x32x128xbf16>, tensor<2x2x128x128xbf16>, tensor<2x2x128x32xbf16>, tensor<2x128x2x32xbf16>) {
  %0:5 = "trn.kernel"() ({
    %5 = "trn.reshape"(%arg0) : (tensor<2x128x64xbf16>) -> tensor<256x64xbf16>
    %6 = "trn.transpose"(%arg1) {permutation = array<i64: 1, 0>} : (tensor<192x64xbf16>) -> tensor<64x192xbf16>
    %7 = "trn.broadcast"(%arg2) {dimensions = array<i64: 0>} : (tensor<192xbf16>) -> tensor<256x192xbf16>
    %8 = "trn.matmul"(%5, %6) : (tensor<256x64xbf16>, tensor<64x192xbf16>) -> tensor<256x192xf32>
    %9 = "trn.tensor_tensor"(%7, %8) {op = "add"} : (tensor<256x192xbf16>, tensor<256x192xf32>) -> tensor<256x192xf32>
    %10 = "trn.convert"(%9) {trn.attention_input} : (tensor<256x192xf32>) -> tensor<256x192xbf16>
    %11 = "trn.reshape"(%10) : (tensor<256x192xbf16>) -> tensor<2x128x3x2x32xbf16>
    %12 = "trn.transpose"(%11) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x128x3x2x32xbf16>) -> tensor<3x2x2x128x32xbf16>
    %13 = "trn.view"(%12) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>} : (tensor<3x2x2x128x32xbf16>) -> tensor<1x2x2x128x32xbf16>
    %14 = "trn.reshape"(%13) : (tensor<1x2x2x128x32xbf16>) -> tensor<4x128x32xbf16>
    %15 = "trn.view"(%12) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>} : (tensor<3x2x2x128x32xbf16>) -> tensor<1x2x2x128x32xbf16>
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
    %34 = "trn.view"(%33) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>} : (tensor<3x2x2x128x32xbf16>) -> tensor<1x2x2x128x32xbf16>
    %35 = "trn.reshape"(%34) : (tensor<1x2x2x128x32xbf16>) -> tensor<4x128x32xbf16>
    %36 = "trn.matmul"(%31, %35) : (tensor<4x128x128xbf16>, tensor<4x128x32xbf16>) -> tensor<4x128x32xf32>
    %37 = "trn.convert"(%36) : (tensor<4x128x32xf32>) -> tensor<4x128x32xbf16>
    %38 = "trn.reshape"(%37) : (tensor<4x128x32xbf16>) -> tensor<2x2x128x32xbf16>
    %39 = "trn.transpose"(%38) {permutation = array<i64: 0, 2, 1, 3>, trn.attention_output} : (tensor<2x2x128x32xbf16>) -> tensor<2x128x2x32xbf16>
    %40 = "trn.reshape"(%39) : (tensor<2x128x2x32xbf16>) -> tensor<16384xbf16>
    %41 = "trn.reshape"(%34) : (tensor<1x2x2x128x32xbf16>) -> tensor<16384xbf16>
    %42 = "trn.reshape"(%13) : (tensor<1x2x2x128x32xbf16>) -> tensor<16384xbf16>
    %43 = "trn.reshape"(%17) : (tensor<2x2x32x128xbf16>) -> tensor<16384xbf16>
    "trn.yield"(%30, %40, %41, %42, %43) {operandSegmentSizes = array<i32: 1, 4, 0>} : (tensor<2x2x128x128xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 4, 0>} : () -> (tensor<2x2x128x128xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>)
  %1 = "trn.reshape"(%0#1) : (tensor<16384xbf16>) -> tensor<2x128x2x32xbf16>
  %2 = "trn.reshape"(%0#2) : (tensor<16384xbf16>) -> tensor<2x2x128x32xbf16>
  %3 = "trn.reshape"(%0#3) : (tensor<16384xbf16>) -> tensor<2x2x128x32xbf16>
  %4 = "trn.reshape"(%0#4) : (tensor<16384xbf16>) -> tensor<2x2x32x128xbf16>
  return %3, %4, %0#0, %2, %1 : tensor<2x2x128x32xbf16>, tensor<2x2x32x128xbf16>, tensor<2x2x128x128xbf16>, tensor<2x2x128x32xbf16>, tensor<2x128x2x32xbf16>
}

// -----

func.func @mlp_saved_without_its_hidden_result(%arg0: tensor<256x128xbf16>, %arg1: tensor<512x128xbf16>, %arg2: tensor<512xbf16>, %arg3: tensor<128x512xbf16>) -> (tensor<256x128xbf16>, tensor<256x512xbf16>) {
  %0:2 = "trn.kernel"() ({
    %1 = "trn.transpose"(%arg1) {permutation = array<i64: 1, 0>} : (tensor<512x128xbf16>) -> tensor<128x512xbf16>
    %2 = "trn.broadcast"(%arg2) {dimensions = array<i64: 0>} : (tensor<512xbf16>) -> tensor<256x512xbf16>
    %3 = "trn.matmul"(%arg0, %1) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
    %4 = "trn.tensor_tensor"(%3, %2) {op = "add"} : (tensor<256x512xf32>, tensor<256x512xbf16>) -> tensor<256x512xf32>
    %5 = "trn.convert"(%4) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
    %6 = "trn.activation"(%5) {bias = 0.000000e+00 : f32, func = "gelu", scale = 1.000000e+00 : f32} : (tensor<256x512xbf16>) -> tensor<256x512xf32>
    %7 = "trn.convert"(%6) {trn.producer_result} : (tensor<256x512xf32>) -> tensor<256x512xbf16>
    %8 = "trn.transpose"(%arg3) {permutation = array<i64: 1, 0>} : (tensor<128x512xbf16>) -> tensor<512x128xbf16>
    %9 = "trn.matmul"(%7, %8) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
    %10 = "trn.convert"(%9) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
    "trn.yield"(%10, %5) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<256x128xbf16>, tensor<256x512xbf16>) -> ()
  }) {kind = "mlp_saved", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<256x128xbf16>, tensor<256x512xbf16>)
  return %0#0, %0#1 : tensor<256x128xbf16>, tensor<256x512xbf16>
}

// -----

func.func @two_output_marks(%arg0: tensor<2x128x64xbf16>, %arg1: tensor<192x64xbf16>, %arg2: tensor<192xbf16>) -> (tensor<2x2x128x32xbf16>, tensor<2x2x32x128xbf16>, tensor<2x2x128x128xbf16>, tensor<2x2x128x32xbf16>, tensor<2x128x2x32xbf16>) {
  %0:5 = "trn.kernel"() ({
    %5 = "trn.reshape"(%arg0) : (tensor<2x128x64xbf16>) -> tensor<256x64xbf16>
    %6 = "trn.transpose"(%arg1) {permutation = array<i64: 1, 0>} : (tensor<192x64xbf16>) -> tensor<64x192xbf16>
    %7 = "trn.broadcast"(%arg2) {dimensions = array<i64: 0>} : (tensor<192xbf16>) -> tensor<256x192xbf16>
    %8 = "trn.matmul"(%5, %6) : (tensor<256x64xbf16>, tensor<64x192xbf16>) -> tensor<256x192xf32>
    %9 = "trn.tensor_tensor"(%7, %8) {op = "add"} : (tensor<256x192xbf16>, tensor<256x192xf32>) -> tensor<256x192xf32>
    %10 = "trn.convert"(%9) {trn.attention_input} : (tensor<256x192xf32>) -> tensor<256x192xbf16>
    %11 = "trn.reshape"(%10) : (tensor<256x192xbf16>) -> tensor<2x128x3x2x32xbf16>
    %12 = "trn.transpose"(%11) {permutation = array<i64: 2, 0, 3, 1, 4>, trn.attention_output} : (tensor<2x128x3x2x32xbf16>) -> tensor<3x2x2x128x32xbf16>
    %13 = "trn.view"(%12) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>} : (tensor<3x2x2x128x32xbf16>) -> tensor<1x2x2x128x32xbf16>
    %14 = "trn.reshape"(%13) : (tensor<1x2x2x128x32xbf16>) -> tensor<4x128x32xbf16>
    %15 = "trn.view"(%12) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>} : (tensor<3x2x2x128x32xbf16>) -> tensor<1x2x2x128x32xbf16>
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
    %34 = "trn.view"(%33) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>} : (tensor<3x2x2x128x32xbf16>) -> tensor<1x2x2x128x32xbf16>
    %35 = "trn.reshape"(%34) : (tensor<1x2x2x128x32xbf16>) -> tensor<4x128x32xbf16>
    %36 = "trn.matmul"(%31, %35) : (tensor<4x128x128xbf16>, tensor<4x128x32xbf16>) -> tensor<4x128x32xf32>
    %37 = "trn.convert"(%36) : (tensor<4x128x32xf32>) -> tensor<4x128x32xbf16>
    %38 = "trn.reshape"(%37) : (tensor<4x128x32xbf16>) -> tensor<2x2x128x32xbf16>
    %39 = "trn.transpose"(%38) {permutation = array<i64: 0, 2, 1, 3>, trn.attention_output} : (tensor<2x2x128x32xbf16>) -> tensor<2x128x2x32xbf16>
    %40 = "trn.reshape"(%39) : (tensor<2x128x2x32xbf16>) -> tensor<16384xbf16>
    %41 = "trn.reshape"(%34) : (tensor<1x2x2x128x32xbf16>) -> tensor<16384xbf16>
    %42 = "trn.reshape"(%13) : (tensor<1x2x2x128x32xbf16>) -> tensor<16384xbf16>
    %43 = "trn.reshape"(%17) : (tensor<2x2x32x128xbf16>) -> tensor<16384xbf16>
    "trn.yield"(%30, %40, %41, %42, %43) {operandSegmentSizes = array<i32: 1, 4, 0>} : (tensor<2x2x128x128xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 4, 0>} : () -> (tensor<2x2x128x128xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>)
  %1 = "trn.reshape"(%0#1) : (tensor<16384xbf16>) -> tensor<2x128x2x32xbf16>
  %2 = "trn.reshape"(%0#2) : (tensor<16384xbf16>) -> tensor<2x2x128x32xbf16>
  %3 = "trn.reshape"(%0#3) : (tensor<16384xbf16>) -> tensor<2x2x128x32xbf16>
  %4 = "trn.reshape"(%0#4) : (tensor<16384xbf16>) -> tensor<2x2x32x128xbf16>
  return %3, %4, %0#0, %2, %1 : tensor<2x2x128x32xbf16>, tensor<2x2x32x128xbf16>, tensor<2x2x128x128xbf16>, tensor<2x2x128x32xbf16>, tensor<2x128x2x32xbf16>
}

// -----

func.func @input_rows_in_a_matmul(%a: tensor<128x64xbf16>, %b: tensor<64x64xbf16>) -> tensor<128x64xbf16> {
  %0 = "trn.kernel"() ({
    %1 = "trn.matmul"(%a, %b) : (tensor<128x64xbf16>, tensor<64x64xbf16>) -> tensor<128x64xf32>
    %2 = "trn.convert"(%1) {trn.input_rows} : (tensor<128x64xf32>) -> tensor<128x64xbf16>
    "trn.yield"(%2) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x64xbf16>) -> ()
  }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x64xbf16>
  return %0 : tensor<128x64xbf16>
}

// -----

func.func @saved_gradient_before_the_second_linear(%arg0: tensor<256x128xbf16>, %arg1: tensor<128x512xbf16>, %arg2: tensor<512x128xbf16>, %arg3: tensor<256x128xbf16>) -> (tensor<256x128xbf16>, tensor<512x128xbf16>) {
  %0:2 = "trn.kernel"() ({
    %1 = "trn.matmul"(%arg0, %arg1) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
    %2 = "trn.convert"(%1) {trn.producer_result, trn.saved_gradient} : (tensor<256x512xf32>) -> tensor<256x512xbf16>
    %3 = "trn.matmul"(%2, %arg2) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
    %4 = "trn.convert"(%3) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
    %5 = "trn.transpose"(%2) {permutation = array<i64: 1, 0>} : (tensor<256x512xbf16>) -> tensor<512x256xbf16>
    %6 = "trn.matmul"(%5, %arg3) : (tensor<512x256xbf16>, tensor<256x128xbf16>) -> tensor<512x128xf32>
    %7 = "trn.convert"(%6) : (tensor<512x128xf32>) -> tensor<512x128xbf16>
    "trn.yield"(%4, %7) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<256x128xbf16>, tensor<512x128xbf16>) -> ()
  }) {kind = "mlp_saved", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<256x128xbf16>, tensor<512x128xbf16>)
  return %0#0, %0#1 : tensor<256x128xbf16>, tensor<512x128xbf16>
}

// -----

func.func @saved_gradient_without_a_matmul(%arg0: tensor<256x128xbf16>, %arg1: tensor<128x512xbf16>, %arg2: tensor<512x128xbf16>) -> (tensor<256x128xbf16>, tensor<512xf32>) {
  %0:2 = "trn.kernel"() ({
    %1 = "trn.matmul"(%arg0, %arg1) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
    %2 = "trn.convert"(%1) {trn.producer_result} : (tensor<256x512xf32>) -> tensor<256x512xbf16>
    %3 = "trn.matmul"(%2, %arg2) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
    %4 = "trn.convert"(%3) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
    %5 = "trn.reduce"(%2) {dimensions = array<i64: 0>, op = "add", trn.saved_gradient} : (tensor<256x512xbf16>) -> tensor<512xf32>
    "trn.yield"(%4, %5) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<256x128xbf16>, tensor<512xf32>) -> ()
  }) {kind = "mlp_saved", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<256x128xbf16>, tensor<512xf32>)
  return %0#0, %0#1 : tensor<256x128xbf16>, tensor<512xf32>
}

// -----

func.func @saved_gradient_of_another_value(%arg0: tensor<256x128xbf16>, %arg1: tensor<128x512xbf16>, %arg2: tensor<512x128xbf16>, %arg3: tensor<256x128xbf16>, %arg4: tensor<256x512xbf16>) -> (tensor<256x128xbf16>, tensor<512x128xbf16>) {
  %0:2 = "trn.kernel"() ({
    %1 = "trn.matmul"(%arg0, %arg1) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
    %2 = "trn.convert"(%1) {trn.producer_result} : (tensor<256x512xf32>) -> tensor<256x512xbf16>
    %3 = "trn.matmul"(%2, %arg2) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
    %4 = "trn.convert"(%3) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
    %5 = "trn.transpose"(%arg4) {permutation = array<i64: 1, 0>, trn.saved_gradient} : (tensor<256x512xbf16>) -> tensor<512x256xbf16>
    %6 = "trn.matmul"(%5, %arg3) : (tensor<512x256xbf16>, tensor<256x128xbf16>) -> tensor<512x128xf32>
    %7 = "trn.convert"(%6) : (tensor<512x128xf32>) -> tensor<512x128xbf16>
    "trn.yield"(%4, %7) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<256x128xbf16>, tensor<512x128xbf16>) -> ()
  }) {kind = "mlp_saved", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<256x128xbf16>, tensor<512x128xbf16>)
  return %0#0, %0#1 : tensor<256x128xbf16>, tensor<512x128xbf16>
}

// -----

func.func @saved_gradient_summing_another_value(%arg0: tensor<256x128xbf16>, %arg1: tensor<128x512xbf16>, %arg2: tensor<512x128xbf16>, %arg3: tensor<256x128xbf16>, %arg4: tensor<256x512xbf16>) -> (tensor<256x128xbf16>, tensor<512x128xbf16>, tensor<512xf32>) {
  %0:3 = "trn.kernel"() ({
    %1 = "trn.matmul"(%arg0, %arg1) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
    %2 = "trn.convert"(%1) {trn.producer_result} : (tensor<256x512xf32>) -> tensor<256x512xbf16>
    %3 = "trn.matmul"(%2, %arg2) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
    %4 = "trn.convert"(%3) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
    %5 = "trn.transpose"(%2) {permutation = array<i64: 1, 0>, trn.saved_gradient} : (tensor<256x512xbf16>) -> tensor<512x256xbf16>
    %6 = "trn.matmul"(%5, %arg3) : (tensor<512x256xbf16>, tensor<256x128xbf16>) -> tensor<512x128xf32>
    %7 = "trn.convert"(%6) : (tensor<512x128xf32>) -> tensor<512x128xbf16>
    %8 = "trn.reduce"(%arg4) {dimensions = array<i64: 0>, op = "add"} : (tensor<256x512xbf16>) -> tensor<512xf32>
    "trn.yield"(%4, %7, %8) {operandSegmentSizes = array<i32: 1, 1, 1>} : (tensor<256x128xbf16>, tensor<512x128xbf16>, tensor<512xf32>) -> ()
  }) {kind = "mlp_saved", resultSegmentSizes = array<i32: 1, 1, 1>} : () -> (tensor<256x128xbf16>, tensor<512x128xbf16>, tensor<512xf32>)
  return %0#0, %0#1, %0#2 : tensor<256x128xbf16>, tensor<512x128xbf16>, tensor<512xf32>
}

// -----

// An attention kernel whose fourth matmul contracts an input its row part does not read.
func.func @input_contraction_of_an_unread_input(%other: tensor<2x128x128xbf16>, %arg0: tensor<2x128x32xbf16>, %arg1: tensor<2x32x128xbf16>, %arg2: tensor<2x128x128xbf16>, %arg3: tensor<2x128x32xbf16>, %arg4: tensor<2x32x128xbf16>) -> (tensor<2x128x32xbf16>, tensor<2x32x128xbf16>, tensor<2x128x32xbf16>) {
  %0:3 = "trn.kernel"() ({
    %1 = "trn.matmul"(%arg0, %arg1) : (tensor<2x128x32xbf16>, tensor<2x32x128xbf16>) -> tensor<2x128x128xf32>
    %2 = "trn.convert"(%arg2) : (tensor<2x128x128xbf16>) -> tensor<2x128x128xf32>
    %3 = "trn.tensor_tensor"(%1, %2) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %4 = "trn.reduce"(%3) {dimensions = array<i64: 2>, op = "add"} : (tensor<2x128x128xf32>) -> tensor<2x128xf32>
    %5 = "trn.broadcast"(%4) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x128xf32>
    %6 = "trn.tensor_tensor"(%2, %5) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %7 = "trn.tensor_tensor"(%3, %6) {op = "sub"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %8 = "trn.tensor_scalar"(%7) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %9 = "trn.convert"(%8) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    %10 = "trn.matmul"(%9, %arg3) : (tensor<2x128x128xbf16>, tensor<2x128x32xbf16>) -> tensor<2x128x32xf32>
    %11 = "trn.convert"(%10) : (tensor<2x128x32xf32>) -> tensor<2x128x32xbf16>
    %12 = "trn.matmul"(%arg4, %9) : (tensor<2x32x128xbf16>, tensor<2x128x128xbf16>) -> tensor<2x32x128xf32>
    %13 = "trn.convert"(%12) : (tensor<2x32x128xf32>) -> tensor<2x32x128xbf16>
    %14 = "trn.transpose"(%other) {permutation = array<i64: 0, 2, 1>} : (tensor<2x128x128xbf16>) -> tensor<2x128x128xbf16>
    %15 = "trn.matmul"(%14, %arg0) : (tensor<2x128x128xbf16>, tensor<2x128x32xbf16>) -> tensor<2x128x32xf32>
    %16 = "trn.convert"(%15) : (tensor<2x128x32xf32>) -> tensor<2x128x32xbf16>
    "trn.yield"(%11, %13, %16) {operandSegmentSizes = array<i32: 1, 1, 1>} : (tensor<2x128x32xbf16>, tensor<2x32x128xbf16>, tensor<2x128x32xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 1, 1>} : () -> (tensor<2x128x32xbf16>, tensor<2x32x128xbf16>, tensor<2x128x32xbf16>)
  return %0#0, %0#1, %0#2 : tensor<2x128x32xbf16>, tensor<2x32x128xbf16>, tensor<2x128x32xbf16>
}
