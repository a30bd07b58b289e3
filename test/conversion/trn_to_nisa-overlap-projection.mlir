// RUN: neuron-opt --split-input-file --trn-fuse-attention-output --convert-trn-to-nisa %s | FileCheck %s
// RUN: neuron-opt --split-input-file --trn-fuse-attention-output --convert-trn-to-nisa="overlap-projection=false" %s | FileCheck %s --check-prefix=OFF
// RUN: neuron-opt --split-input-file --trn-fuse-attention-output --convert-trn-to-nisa --trn-plan-memory %s | FileCheck %s --check-prefix=PLACED

// Tests convert-trn-to-nisa overlap-projection on a training step's attention kernel that
// computes its QKV projection (trn-fuse-attention-output qkv-saved) over two batch indices
// of two 128-row query blocks each: the projection's on-chip tiles and the attention's are
// a co-run pair, numbered after trn-order's pairs (none here). trn-plan-memory then gives the
// projection's PSUM tiles the top bank (their peak fits one: 14336 of the 16384 bytes up)
// and the attention's the seven below it. With the option off nothing is paired.
// CHECK-LABEL: func.func @two_query_blocks
// CHECK: "nisa.alloc"() {co_run = 0 : i64, co_run_role = "partner", memory = "psum"}
// CHECK: "nisa.matmul"
// CHECK: "nisa.alloc"() {co_run = 0 : i64, co_run_role = "primary", memory = "psum"}
// CHECK: return
// OFF-LABEL: func.func @two_query_blocks
// OFF-NOT: co_run
// OFF: return
// PLACED-LABEL: func.func @two_query_blocks
// PLACED-NOT: address = {{1[4-6][0-9][0-9][0-9]}} : i64, co_run = 0 : i64, co_run_role = "primary", memory = "psum"
// PLACED-NOT: address = {{([0-9]|[0-9][0-9]|[0-9][0-9][0-9]|[0-9][0-9][0-9][0-9]|1[0-3][0-9][0-9][0-9])}} : i64, co_run = 0 : i64, co_run_role = "partner", memory = "psum"
// PLACED: "nisa.alloc"() {address = {{1[45][0-9][0-9][0-9]}} : i64, co_run = 0 : i64, co_run_role = "partner", memory = "psum"}
// PLACED-NOT: address = {{1[4-6][0-9][0-9][0-9]}} : i64, co_run = 0 : i64, co_run_role = "primary", memory = "psum"
// PLACED-NOT: address = {{([0-9]|[0-9][0-9]|[0-9][0-9][0-9]|[0-9][0-9][0-9][0-9]|1[0-3][0-9][0-9][0-9])}} : i64, co_run = 0 : i64, co_run_role = "partner", memory = "psum"
// PLACED: return
func.func @two_query_blocks(%arg0: tensor<2x256x64xbf16>, %arg1: tensor<192x64xbf16>, %arg2: tensor<192xbf16>) -> (tensor<2x2x256x32xbf16>, tensor<2x2x32x256xbf16>, tensor<2x2x256x256xbf16>, tensor<2x2x256x32xbf16>, tensor<2x256x2x32xbf16>) {
  %0 = "trn.kernel"() ({
    %11 = "trn.reshape"(%arg0) : (tensor<2x256x64xbf16>) -> tensor<512x64xbf16>
    %12 = "trn.transpose"(%arg1) {permutation = array<i64: 1, 0>} : (tensor<192x64xbf16>) -> tensor<64x192xbf16>
    %13 = "trn.broadcast"(%arg2) {dimensions = array<i64: 0>} : (tensor<192xbf16>) -> tensor<512x192xbf16>
    %14 = "trn.matmul"(%11, %12) : (tensor<512x64xbf16>, tensor<64x192xbf16>) -> tensor<512x192xf32>
    %15 = "trn.tensor_tensor"(%13, %14) {op = "add"} : (tensor<512x192xbf16>, tensor<512x192xf32>) -> tensor<512x192xf32>
    %16 = "trn.convert"(%15) : (tensor<512x192xf32>) -> tensor<512x192xbf16>
    "trn.yield"(%16) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<512x192xbf16>) -> ()
  }) {gemm_block = 1 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<512x192xbf16>
  %1:2 = "trn.kernel"() ({
    %11 = "trn.reshape"(%0) : (tensor<512x192xbf16>) -> tensor<2x256x3x2x32xbf16>
    %12 = "trn.transpose"(%11) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x256x3x2x32xbf16>) -> tensor<3x2x2x256x32xbf16>
    %13 = "trn.view"(%12) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>} : (tensor<3x2x2x256x32xbf16>) -> tensor<1x2x2x256x32xbf16>
    %14 = "trn.reshape"(%13) : (tensor<1x2x2x256x32xbf16>) -> tensor<4x256x32xbf16>
    %15 = "trn.view"(%12) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>} : (tensor<3x2x2x256x32xbf16>) -> tensor<1x2x2x256x32xbf16>
    %16 = "trn.reshape"(%15) : (tensor<1x2x2x256x32xbf16>) -> tensor<2x2x256x32xbf16>
    %17 = "trn.transpose"(%16) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<2x2x256x32xbf16>) -> tensor<2x2x32x256xbf16>
    %18 = "trn.reshape"(%17) : (tensor<2x2x32x256xbf16>) -> tensor<4x32x256xbf16>
    %19 = "trn.matmul"(%14, %18) : (tensor<4x256x32xbf16>, tensor<4x32x256xbf16>) -> tensor<4x256x256xf32>
    %20 = "trn.convert"(%19) : (tensor<4x256x256xf32>) -> tensor<4x256x256xbf16>
    %21 = "trn.reshape"(%20) : (tensor<4x256x256xbf16>) -> tensor<2x2x256x256xbf16>
    %22 = "trn.tensor_scalar"(%21) {op = "mul", reverse = false, scalar = 0.176776692 : f32} : (tensor<2x2x256x256xbf16>) -> tensor<2x2x256x256xf32>
    %23 = "trn.reduce"(%22) {dimensions = array<i64: 3>, op = "max"} : (tensor<2x2x256x256xf32>) -> tensor<2x2x256xf32>
    %24 = "trn.broadcast"(%23) {dimensions = array<i64: 3>} : (tensor<2x2x256xf32>) -> tensor<2x2x256x256xf32>
    %25 = "trn.tensor_tensor"(%22, %24) {op = "sub"} : (tensor<2x2x256x256xf32>, tensor<2x2x256x256xf32>) -> tensor<2x2x256x256xf32>
    %26 = "trn.activation"(%25) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<2x2x256x256xf32>) -> tensor<2x2x256x256xf32>
    %27 = "trn.reduce"(%26) {dimensions = array<i64: 3>, op = "add"} : (tensor<2x2x256x256xf32>) -> tensor<2x2x256xf32>
    %28 = "trn.broadcast"(%27) {dimensions = array<i64: 3>} : (tensor<2x2x256xf32>) -> tensor<2x2x256x256xf32>
    %29 = "trn.tensor_tensor"(%26, %28) {op = "div"} : (tensor<2x2x256x256xf32>, tensor<2x2x256x256xf32>) -> tensor<2x2x256x256xf32>
    %30 = "trn.convert"(%29) : (tensor<2x2x256x256xf32>) -> tensor<2x2x256x256xbf16>
    %31 = "trn.reshape"(%30) : (tensor<2x2x256x256xbf16>) -> tensor<4x256x256xbf16>
    %32 = "trn.reshape"(%0) : (tensor<512x192xbf16>) -> tensor<2x256x3x2x32xbf16>
    %33 = "trn.transpose"(%32) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x256x3x2x32xbf16>) -> tensor<3x2x2x256x32xbf16>
    %34 = "trn.view"(%33) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>} : (tensor<3x2x2x256x32xbf16>) -> tensor<1x2x2x256x32xbf16>
    %35 = "trn.reshape"(%34) : (tensor<1x2x2x256x32xbf16>) -> tensor<4x256x32xbf16>
    %36 = "trn.matmul"(%31, %35) : (tensor<4x256x256xbf16>, tensor<4x256x32xbf16>) -> tensor<4x256x32xf32>
    %37 = "trn.convert"(%36) : (tensor<4x256x32xf32>) -> tensor<4x256x32xbf16>
    %38 = "trn.reshape"(%37) : (tensor<4x256x32xbf16>) -> tensor<2x2x256x32xbf16>
    %39 = "trn.transpose"(%38) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x256x32xbf16>) -> tensor<2x256x2x32xbf16>
    "trn.yield"(%39, %30) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<2x256x2x32xbf16>, tensor<2x2x256x256xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<2x256x2x32xbf16>, tensor<2x2x256x256xbf16>)
  %2 = "trn.reshape"(%0) : (tensor<512x192xbf16>) -> tensor<2x256x3x2x32xbf16>
  %3 = "trn.transpose"(%2) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x256x3x2x32xbf16>) -> tensor<3x2x2x256x32xbf16>
  %4 = "trn.view"(%3) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>} : (tensor<3x2x2x256x32xbf16>) -> tensor<1x2x2x256x32xbf16>
  %5 = "trn.view"(%3) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>} : (tensor<3x2x2x256x32xbf16>) -> tensor<1x2x2x256x32xbf16>
  %6 = "trn.view"(%3) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>} : (tensor<3x2x2x256x32xbf16>) -> tensor<1x2x2x256x32xbf16>
  %7 = "trn.reshape"(%4) : (tensor<1x2x2x256x32xbf16>) -> tensor<2x2x256x32xbf16>
  %8 = "trn.reshape"(%5) : (tensor<1x2x2x256x32xbf16>) -> tensor<2x2x256x32xbf16>
  %9 = "trn.reshape"(%6) : (tensor<1x2x2x256x32xbf16>) -> tensor<2x2x256x32xbf16>
  %10 = "trn.transpose"(%8) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<2x2x256x32xbf16>) -> tensor<2x2x32x256xbf16>
  return %7, %10, %1#1, %9, %1#0 : tensor<2x2x256x32xbf16>, tensor<2x2x32x256xbf16>, tensor<2x2x256x256xbf16>, tensor<2x2x256x32xbf16>, tensor<2x256x2x32xbf16>
}

// -----

// Tests that with one query block per batch index (the same kernel over 2 x 128 tokens) no
// pair forms: the attention's work per batch index is too short to hide the next index's
// projection.
// CHECK-LABEL: func.func @one_query_block
// CHECK-NOT: co_run
// CHECK: return
func.func @one_query_block(%arg0: tensor<2x128x64xbf16>, %arg1: tensor<192x64xbf16>, %arg2: tensor<192xbf16>) -> (tensor<2x2x128x32xbf16>, tensor<2x2x32x128xbf16>, tensor<2x2x128x128xbf16>, tensor<2x2x128x32xbf16>, tensor<2x128x2x32xbf16>) {
  %0 = "trn.kernel"() ({
    %11 = "trn.reshape"(%arg0) : (tensor<2x128x64xbf16>) -> tensor<256x64xbf16>
    %12 = "trn.transpose"(%arg1) {permutation = array<i64: 1, 0>} : (tensor<192x64xbf16>) -> tensor<64x192xbf16>
    %13 = "trn.broadcast"(%arg2) {dimensions = array<i64: 0>} : (tensor<192xbf16>) -> tensor<256x192xbf16>
    %14 = "trn.matmul"(%11, %12) : (tensor<256x64xbf16>, tensor<64x192xbf16>) -> tensor<256x192xf32>
    %15 = "trn.tensor_tensor"(%13, %14) {op = "add"} : (tensor<256x192xbf16>, tensor<256x192xf32>) -> tensor<256x192xf32>
    %16 = "trn.convert"(%15) : (tensor<256x192xf32>) -> tensor<256x192xbf16>
    "trn.yield"(%16) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x192xbf16>) -> ()
  }) {gemm_block = 1 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x192xbf16>
  %1:2 = "trn.kernel"() ({
    %11 = "trn.reshape"(%0) : (tensor<256x192xbf16>) -> tensor<2x128x3x2x32xbf16>
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
    %32 = "trn.reshape"(%0) : (tensor<256x192xbf16>) -> tensor<2x128x3x2x32xbf16>
    %33 = "trn.transpose"(%32) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x128x3x2x32xbf16>) -> tensor<3x2x2x128x32xbf16>
    %34 = "trn.view"(%33) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>} : (tensor<3x2x2x128x32xbf16>) -> tensor<1x2x2x128x32xbf16>
    %35 = "trn.reshape"(%34) : (tensor<1x2x2x128x32xbf16>) -> tensor<4x128x32xbf16>
    %36 = "trn.matmul"(%31, %35) : (tensor<4x128x128xbf16>, tensor<4x128x32xbf16>) -> tensor<4x128x32xf32>
    %37 = "trn.convert"(%36) : (tensor<4x128x32xf32>) -> tensor<4x128x32xbf16>
    %38 = "trn.reshape"(%37) : (tensor<4x128x32xbf16>) -> tensor<2x2x128x32xbf16>
    %39 = "trn.transpose"(%38) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x128x32xbf16>) -> tensor<2x128x2x32xbf16>
    "trn.yield"(%39, %30) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<2x128x2x32xbf16>, tensor<2x2x128x128xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<2x128x2x32xbf16>, tensor<2x2x128x128xbf16>)
  %2 = "trn.reshape"(%0) : (tensor<256x192xbf16>) -> tensor<2x128x3x2x32xbf16>
  %3 = "trn.transpose"(%2) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x128x3x2x32xbf16>) -> tensor<3x2x2x128x32xbf16>
  %4 = "trn.view"(%3) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>} : (tensor<3x2x2x128x32xbf16>) -> tensor<1x2x2x128x32xbf16>
  %5 = "trn.view"(%3) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>} : (tensor<3x2x2x128x32xbf16>) -> tensor<1x2x2x128x32xbf16>
  %6 = "trn.view"(%3) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>} : (tensor<3x2x2x128x32xbf16>) -> tensor<1x2x2x128x32xbf16>
  %7 = "trn.reshape"(%4) : (tensor<1x2x2x128x32xbf16>) -> tensor<2x2x128x32xbf16>
  %8 = "trn.reshape"(%5) : (tensor<1x2x2x128x32xbf16>) -> tensor<2x2x128x32xbf16>
  %9 = "trn.reshape"(%6) : (tensor<1x2x2x128x32xbf16>) -> tensor<2x2x128x32xbf16>
  %10 = "trn.transpose"(%8) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<2x2x128x32xbf16>) -> tensor<2x2x32x128xbf16>
  return %7, %10, %1#1, %9, %1#0 : tensor<2x2x128x32xbf16>, tensor<2x2x32x128xbf16>, tensor<2x2x128x128xbf16>, tensor<2x2x128x32xbf16>, tensor<2x128x2x32xbf16>
}
