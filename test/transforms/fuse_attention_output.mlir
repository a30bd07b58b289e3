// RUN: neuron-opt --split-input-file --trn-fuse-attention-output %s | FileCheck %s
// RUN: neuron-opt --split-input-file --trn-fuse-attention-output="qkv=false" %s | FileCheck %s --check-prefix=NOQKV
// RUN: neuron-opt --split-input-file --trn-fuse-attention-output --convert-trn-to-nisa %s | FileCheck %s --check-prefix=ISA
// RUN: neuron-opt --split-input-file --trn-fuse-attention-output="qkv=false" --convert-trn-to-nisa %s | FileCheck %s --check-prefix=ISA-NOQKV
// RUN: neuron-opt --split-input-file --convert-trn-to-nisa %s | FileCheck %s --check-prefix=UNFUSED
// RUN: neuron-opt --split-input-file --trn-fuse-attention-output="ffn=false" %s | FileCheck %s --check-prefix=NOFFN
// RUN: neuron-opt --split-input-file --trn-fuse-attention-output="qkv-saved=false" %s | FileCheck %s --check-prefix=NOSAVED
// RUN: neuron-opt --split-input-file --trn-fuse-attention-output="qkv-saved=false" --convert-trn-to-nisa %s | FileCheck %s --check-prefix=ISA-NOSAVED
// RUN: neuron-opt --split-input-file --trn-fuse-attention-output="input-rows=false" --convert-trn-to-nisa %s | FileCheck %s --check-prefix=ISA-NOROWS
// RUN: not neuron-opt --trn-fuse-attention-output --convert-trn-to-nisa %S/Inputs/fuse_attention_output-invalid.mlir 2>&1 | FileCheck %s --check-prefix=ERR
// RUN: not neuron-opt --convert-trn-to-nisa %S/Inputs/fuse_attention_output-handed-on-invalid.mlir 2>&1 | FileCheck %s --check-prefix=ERR-ROWS
// RUN: not neuron-opt --convert-trn-to-nisa %S/Inputs/fuse_attention_output-saved-invalid.mlir 2>&1 | FileCheck %s --check-prefix=ERR-SAVED


// A merged kernel whose attention part has lost its mark is an error naming the kernel, as
// is one whose linear_rows part, handing on its rows, has lost its own.
// ERR-ROWS: fuse_attention_output-handed-on-invalid.mlir:{{[0-9]+}}:{{[0-9]+}}: error: convert-trn-to-nisa: an attention_linear_rows kernel hands on the rows of one linear_rows part: one op marked trn.rows_handed_on after one marked trn.producer_result, and not its last
// A training step's attention kernel that yields, as a view saved from its QKV projection,
// one that is neither K^T as it stages it nor runs of columns of the computed row tiles is
// an error naming that view.
// ERR-SAVED: fuse_attention_output-saved-invalid.mlir:48:{{[0-9]+}}: error: convert-trn-to-nisa: a saved view of an attention kernel's operands must be K^T as it is staged or runs of columns of the computed rows (Q, V, or the whole value)
// ERR: fuse_attention_output-invalid.mlir:{{[0-9]+}}:{{[0-9]+}}: error: convert-trn-to-nisa: an attention_linear_rows kernel needs one op marked trn.attention_output, not its last, and at most one before it marked trn.attention_input

// Tests that a token-major attention kernel read only by the output projection's
// linear_rows kernel (Linear, residual add, layer norm) merges into it, and the QKV
// projection that only the attention reads joins in front: one kernel of kind
// attention_linear_rows, the projection's ops first (the op computing Q, K and V marked
// trn.attention_input), then the attention's (the op computing its output marked
// trn.attention_output), then the linear_rows kernel's. With qkv=false the projection keeps
// its own kernel.
// CHECK-LABEL: func.func @attention_then_projection
// CHECK-NEXT: %[[K:.*]] = "trn.kernel"() ({
// CHECK: %[[QKV:.*]] = "trn.convert"(%{{.*}}) {trn.attention_input} : (tensor<128x384xf32>) -> tensor<128x384xbf16>
// CHECK-NEXT: "trn.reshape"(%[[QKV]]) : (tensor<128x384xbf16>) -> tensor<1x128x3x2x64xbf16>
// CHECK: %[[O:.*]] = "trn.transpose"(%{{.*}}) {permutation = array<i64: 0, 2, 1, 3>, trn.attention_output} : (tensor<1x2x128x64xbf16>) -> tensor<1x128x2x64xbf16>
// CHECK-NEXT: "trn.reshape"(%[[O]]) : (tensor<1x128x2x64xbf16>) -> tensor<128x128xbf16>
// CHECK: "trn.convert"(%{{.*}}) {trn.producer_result}
// CHECK: }) {kind = "attention_linear_rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x128xbf16>
// CHECK-NEXT: return %[[K]]
// NOQKV-LABEL: func.func @attention_then_projection
// NOQKV: }) {{{.*}}kind = "matmul"{{.*}}, resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x384xbf16>
// NOQKV-NEXT: "trn.kernel"() ({
// NOQKV-NOT: trn.attention_input
// NOQKV: trn.attention_output
// NOQKV: }) {kind = "attention_linear_rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x128xbf16>
// Neither the attention output nor (fused) Q, K and V reach HBM: no scratch buffer holds
// them; with qkv=false Q, K and V do; unfused, both are stored and loaded back.
// ISA-LABEL: func.func @attention_then_projection
// ISA-NOT: "nisa.alloc"() {memory = "hbm"}
// ISA: return
// ISA-NOQKV-LABEL: func.func @attention_then_projection
// ISA-NOQKV: "nisa.alloc"() {memory = "hbm"} : () -> memref<128x384xbf16, "hbm">
// ISA-NOQKV-NOT: "nisa.alloc"() {memory = "hbm"}
// ISA-NOQKV: return
// UNFUSED-LABEL: func.func @attention_then_projection
// UNFUSED: "nisa.alloc"() {memory = "hbm"} : () -> memref<128x384xbf16, "hbm">
// UNFUSED: "nisa.alloc"() {memory = "hbm"} : () -> memref<1x128x2x64xbf16, "hbm">
// UNFUSED: "nisa.dma"(%{{.*}}) {{.*}} : (memref<1x128x2x64xbf16, "hbm">, memref<128x128xbf16, "sbuf">)
// UNFUSED: "nisa.dma"(%{{.*}}) {{.*}} : (memref<128x128xbf16, "sbuf">, memref<1x128x2x64xbf16, "hbm">)
func.func @attention_then_projection(%arg0: tensor<1x128x128xbf16>, %arg1: tensor<384xbf16>, %arg2: tensor<128x384xbf16>, %arg3: tensor<128xbf16>, %arg4: tensor<128x128xbf16>, %arg5: tensor<128xbf16>, %arg6: tensor<128xbf16>) -> tensor<1x128x128xbf16> {
  %0 = "trn.kernel"() ({
    %3 = "trn.reshape"(%arg0) : (tensor<1x128x128xbf16>) -> tensor<128x128xbf16>
    %4 = "trn.broadcast"(%arg1) {dimensions = array<i64: 0>} : (tensor<384xbf16>) -> tensor<128x384xbf16>
    %5 = "trn.matmul"(%3, %arg2) : (tensor<128x128xbf16>, tensor<128x384xbf16>) -> tensor<128x384xf32>
    %6 = "trn.tensor_tensor"(%4, %5) {op = "add"} : (tensor<128x384xbf16>, tensor<128x384xf32>) -> tensor<128x384xf32>
    %7 = "trn.convert"(%6) : (tensor<128x384xf32>) -> tensor<128x384xbf16>
    "trn.yield"(%7) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x384xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x384xbf16>
  %1 = "trn.kernel"() ({
    %3 = "trn.reshape"(%0) : (tensor<128x384xbf16>) -> tensor<1x128x3x2x64xbf16>
    %4 = "trn.transpose"(%3) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<1x128x3x2x64xbf16>) -> tensor<3x1x2x128x64xbf16>
    %5 = "trn.view"(%4) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
    %6 = "trn.reshape"(%5) : (tensor<1x1x2x128x64xbf16>) -> tensor<2x128x64xbf16>
    %7 = "trn.view"(%4) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
    %8 = "trn.reshape"(%7) : (tensor<1x1x2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
    %9 = "trn.transpose"(%8) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<1x2x128x64xbf16>) -> tensor<1x2x64x128xbf16>
    %10 = "trn.reshape"(%9) : (tensor<1x2x64x128xbf16>) -> tensor<2x64x128xbf16>
    %11 = "trn.matmul"(%6, %10) : (tensor<2x128x64xbf16>, tensor<2x64x128xbf16>) -> tensor<2x128x128xf32>
    %12 = "trn.convert"(%11) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    %13 = "trn.reshape"(%12) : (tensor<2x128x128xbf16>) -> tensor<1x2x128x128xbf16>
    %14 = "trn.tensor_scalar"(%13) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<1x2x128x128xbf16>) -> tensor<1x2x128x128xf32>
    %15 = "trn.reduce"(%14) {dimensions = array<i64: 3>, op = "max"} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
    %16 = "trn.broadcast"(%15) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
    %17 = "trn.tensor_tensor"(%14, %16) {op = "sub"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %18 = "trn.activation"(%17) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %19 = "trn.reduce"(%18) {dimensions = array<i64: 3>, op = "add"} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
    %20 = "trn.broadcast"(%19) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
    %21 = "trn.tensor_tensor"(%18, %20) {op = "div"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %22 = "trn.convert"(%21) : (tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xbf16>
    %23 = "trn.reshape"(%22) : (tensor<1x2x128x128xbf16>) -> tensor<2x128x128xbf16>
    %24 = "trn.reshape"(%0) : (tensor<128x384xbf16>) -> tensor<1x128x3x2x64xbf16>
    %25 = "trn.transpose"(%24) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<1x128x3x2x64xbf16>) -> tensor<3x1x2x128x64xbf16>
    %26 = "trn.view"(%25) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
    %27 = "trn.reshape"(%26) : (tensor<1x1x2x128x64xbf16>) -> tensor<2x128x64xbf16>
    %28 = "trn.matmul"(%23, %27) : (tensor<2x128x128xbf16>, tensor<2x128x64xbf16>) -> tensor<2x128x64xf32>
    %29 = "trn.convert"(%28) : (tensor<2x128x64xf32>) -> tensor<2x128x64xbf16>
    %30 = "trn.reshape"(%29) : (tensor<2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
    %31 = "trn.transpose"(%30) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x2x128x64xbf16>) -> tensor<1x128x2x64xbf16>
    "trn.yield"(%31) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x2x64xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x2x64xbf16>
  %2 = "trn.kernel"() ({
    %3 = "trn.reshape"(%1) : (tensor<1x128x2x64xbf16>) -> tensor<128x128xbf16>
    %4 = "trn.broadcast"(%arg3) {dimensions = array<i64: 0>} : (tensor<128xbf16>) -> tensor<128x128xbf16>
    %5 = "trn.matmul"(%3, %arg4) : (tensor<128x128xbf16>, tensor<128x128xbf16>) -> tensor<128x128xf32>
    %6 = "trn.tensor_tensor"(%4, %5) {op = "add"} : (tensor<128x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
    %7 = "trn.convert"(%6) {trn.producer_result} : (tensor<128x128xf32>) -> tensor<128x128xbf16>
    %8 = "trn.reshape"(%7) : (tensor<128x128xbf16>) -> tensor<1x128x128xbf16>
    %9 = "trn.broadcast"(%arg5) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<1x128x128xbf16>
    %10 = "trn.broadcast"(%arg6) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<1x128x128xbf16>
    %11 = "trn.tensor_tensor"(%arg0, %8) {op = "add"} : (tensor<1x128x128xbf16>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %12 = "trn.convert"(%11) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
    %13 = "trn.reduce"(%12) {dimensions = array<i64: 2>, op = "add"} : (tensor<1x128x128xbf16>) -> tensor<1x128xbf16>
    %14 = "trn.tensor_scalar"(%13) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<1x128xbf16>) -> tensor<1x128xf32>
    %15 = "trn.convert"(%14) : (tensor<1x128xf32>) -> tensor<1x128xbf16>
    %16 = "trn.broadcast"(%15) {dimensions = array<i64: 2>} : (tensor<1x128xbf16>) -> tensor<1x128x128xbf16>
    %17 = "trn.tensor_tensor"(%12, %16) {op = "sub"} : (tensor<1x128x128xbf16>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %18 = "trn.tensor_tensor"(%17, %17) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
    %19 = "trn.convert"(%18) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
    %20 = "trn.reduce"(%19) {dimensions = array<i64: 2>, op = "add"} : (tensor<1x128x128xbf16>) -> tensor<1x128xbf16>
    %21 = "trn.tensor_scalar"(%20) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<1x128xbf16>) -> tensor<1x128xf32>
    %22 = "trn.tensor_scalar"(%21) {op = "add", reverse = false, scalar = 9.99999974E-6 : f32} : (tensor<1x128xf32>) -> tensor<1x128xf32>
    %23 = "trn.activation"(%22) {bias = 0.000000e+00 : f32, func = "rsqrt", scale = 1.000000e+00 : f32} : (tensor<1x128xf32>) -> tensor<1x128xf32>
    %24 = "trn.convert"(%23) : (tensor<1x128xf32>) -> tensor<1x128xbf16>
    %25 = "trn.broadcast"(%24) {dimensions = array<i64: 2>} : (tensor<1x128xbf16>) -> tensor<1x128x128xbf16>
    %26 = "trn.tensor_tensor"(%17, %25) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %27 = "trn.tensor_tensor"(%26, %9) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %28 = "trn.tensor_tensor"(%27, %10) {op = "add"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %29 = "trn.convert"(%28) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
    "trn.yield"(%29) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x128xbf16>) -> ()
  }) {kind = "linear_rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x128xbf16>
  return %2 : tensor<1x128x128xbf16>
}

// -----

// Tests that an attention output something else reads too (here the function returns it)
// is left to its own kernel.
// CHECK-LABEL: func.func @attention_output_also_returned
// CHECK: }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x2x64xbf16>
// CHECK: }) {kind = "linear_rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x128xbf16>
// CHECK-NOT: attention_linear_rows
func.func @attention_output_also_returned(%arg0: tensor<1x128x128xbf16>, %arg1: tensor<384xbf16>, %arg2: tensor<128x384xbf16>, %arg3: tensor<128xbf16>, %arg4: tensor<128x128xbf16>, %arg5: tensor<128xbf16>, %arg6: tensor<128xbf16>) -> (tensor<1x128x128xbf16>, tensor<1x128x2x64xbf16>) {
  %0 = "trn.kernel"() ({
    %3 = "trn.reshape"(%arg0) : (tensor<1x128x128xbf16>) -> tensor<128x128xbf16>
    %4 = "trn.broadcast"(%arg1) {dimensions = array<i64: 0>} : (tensor<384xbf16>) -> tensor<128x384xbf16>
    %5 = "trn.matmul"(%3, %arg2) : (tensor<128x128xbf16>, tensor<128x384xbf16>) -> tensor<128x384xf32>
    %6 = "trn.tensor_tensor"(%4, %5) {op = "add"} : (tensor<128x384xbf16>, tensor<128x384xf32>) -> tensor<128x384xf32>
    %7 = "trn.convert"(%6) : (tensor<128x384xf32>) -> tensor<128x384xbf16>
    "trn.yield"(%7) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x384xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x384xbf16>
  %1 = "trn.kernel"() ({
    %3 = "trn.reshape"(%0) : (tensor<128x384xbf16>) -> tensor<1x128x3x2x64xbf16>
    %4 = "trn.transpose"(%3) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<1x128x3x2x64xbf16>) -> tensor<3x1x2x128x64xbf16>
    %5 = "trn.view"(%4) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
    %6 = "trn.reshape"(%5) : (tensor<1x1x2x128x64xbf16>) -> tensor<2x128x64xbf16>
    %7 = "trn.view"(%4) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
    %8 = "trn.reshape"(%7) : (tensor<1x1x2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
    %9 = "trn.transpose"(%8) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<1x2x128x64xbf16>) -> tensor<1x2x64x128xbf16>
    %10 = "trn.reshape"(%9) : (tensor<1x2x64x128xbf16>) -> tensor<2x64x128xbf16>
    %11 = "trn.matmul"(%6, %10) : (tensor<2x128x64xbf16>, tensor<2x64x128xbf16>) -> tensor<2x128x128xf32>
    %12 = "trn.convert"(%11) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    %13 = "trn.reshape"(%12) : (tensor<2x128x128xbf16>) -> tensor<1x2x128x128xbf16>
    %14 = "trn.tensor_scalar"(%13) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<1x2x128x128xbf16>) -> tensor<1x2x128x128xf32>
    %15 = "trn.reduce"(%14) {dimensions = array<i64: 3>, op = "max"} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
    %16 = "trn.broadcast"(%15) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
    %17 = "trn.tensor_tensor"(%14, %16) {op = "sub"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %18 = "trn.activation"(%17) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %19 = "trn.reduce"(%18) {dimensions = array<i64: 3>, op = "add"} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
    %20 = "trn.broadcast"(%19) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
    %21 = "trn.tensor_tensor"(%18, %20) {op = "div"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %22 = "trn.convert"(%21) : (tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xbf16>
    %23 = "trn.reshape"(%22) : (tensor<1x2x128x128xbf16>) -> tensor<2x128x128xbf16>
    %24 = "trn.reshape"(%0) : (tensor<128x384xbf16>) -> tensor<1x128x3x2x64xbf16>
    %25 = "trn.transpose"(%24) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<1x128x3x2x64xbf16>) -> tensor<3x1x2x128x64xbf16>
    %26 = "trn.view"(%25) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
    %27 = "trn.reshape"(%26) : (tensor<1x1x2x128x64xbf16>) -> tensor<2x128x64xbf16>
    %28 = "trn.matmul"(%23, %27) : (tensor<2x128x128xbf16>, tensor<2x128x64xbf16>) -> tensor<2x128x64xf32>
    %29 = "trn.convert"(%28) : (tensor<2x128x64xf32>) -> tensor<2x128x64xbf16>
    %30 = "trn.reshape"(%29) : (tensor<2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
    %31 = "trn.transpose"(%30) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x2x128x64xbf16>) -> tensor<1x128x2x64xbf16>
    "trn.yield"(%31) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x2x64xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x2x64xbf16>
  %2 = "trn.kernel"() ({
    %3 = "trn.reshape"(%1) : (tensor<1x128x2x64xbf16>) -> tensor<128x128xbf16>
    %4 = "trn.broadcast"(%arg3) {dimensions = array<i64: 0>} : (tensor<128xbf16>) -> tensor<128x128xbf16>
    %5 = "trn.matmul"(%3, %arg4) : (tensor<128x128xbf16>, tensor<128x128xbf16>) -> tensor<128x128xf32>
    %6 = "trn.tensor_tensor"(%4, %5) {op = "add"} : (tensor<128x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
    %7 = "trn.convert"(%6) {trn.producer_result} : (tensor<128x128xf32>) -> tensor<128x128xbf16>
    %8 = "trn.reshape"(%7) : (tensor<128x128xbf16>) -> tensor<1x128x128xbf16>
    %9 = "trn.broadcast"(%arg5) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<1x128x128xbf16>
    %10 = "trn.broadcast"(%arg6) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<1x128x128xbf16>
    %11 = "trn.tensor_tensor"(%arg0, %8) {op = "add"} : (tensor<1x128x128xbf16>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %12 = "trn.convert"(%11) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
    %13 = "trn.reduce"(%12) {dimensions = array<i64: 2>, op = "add"} : (tensor<1x128x128xbf16>) -> tensor<1x128xbf16>
    %14 = "trn.tensor_scalar"(%13) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<1x128xbf16>) -> tensor<1x128xf32>
    %15 = "trn.convert"(%14) : (tensor<1x128xf32>) -> tensor<1x128xbf16>
    %16 = "trn.broadcast"(%15) {dimensions = array<i64: 2>} : (tensor<1x128xbf16>) -> tensor<1x128x128xbf16>
    %17 = "trn.tensor_tensor"(%12, %16) {op = "sub"} : (tensor<1x128x128xbf16>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %18 = "trn.tensor_tensor"(%17, %17) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
    %19 = "trn.convert"(%18) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
    %20 = "trn.reduce"(%19) {dimensions = array<i64: 2>, op = "add"} : (tensor<1x128x128xbf16>) -> tensor<1x128xbf16>
    %21 = "trn.tensor_scalar"(%20) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<1x128xbf16>) -> tensor<1x128xf32>
    %22 = "trn.tensor_scalar"(%21) {op = "add", reverse = false, scalar = 9.99999974E-6 : f32} : (tensor<1x128xf32>) -> tensor<1x128xf32>
    %23 = "trn.activation"(%22) {bias = 0.000000e+00 : f32, func = "rsqrt", scale = 1.000000e+00 : f32} : (tensor<1x128xf32>) -> tensor<1x128xf32>
    %24 = "trn.convert"(%23) : (tensor<1x128xf32>) -> tensor<1x128xbf16>
    %25 = "trn.broadcast"(%24) {dimensions = array<i64: 2>} : (tensor<1x128xbf16>) -> tensor<1x128x128xbf16>
    %26 = "trn.tensor_tensor"(%17, %25) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %27 = "trn.tensor_tensor"(%26, %9) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %28 = "trn.tensor_tensor"(%27, %10) {op = "add"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %29 = "trn.convert"(%28) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
    "trn.yield"(%29) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x128xbf16>) -> ()
  }) {kind = "linear_rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x128xbf16>
  return %2, %1 : tensor<1x128x128xbf16>, tensor<1x128x2x64xbf16>
}

// -----

// Tests that a whole post-norm encoder layer becomes one kernel: the QKV projection, the
// attention, the output projection with the first layer norm (its result op marked
// trn.rows_handed_on), then the FFN's mlp_rows kernel that reads that result as its first
// matmul's input and as its residual. Nothing but the layer's input, weights and output
// crosses HBM: no scratch buffer at all. With ffn=false the FFN keeps its own kernel.
// CHECK-LABEL: func.func @encoder_layer
// CHECK-NEXT: %[[K:.*]] = "trn.kernel"() ({
// CHECK: trn.attention_input
// CHECK: trn.attention_output
// CHECK: %[[N:.*]] = "trn.convert"(%{{.*}}) {trn.rows_handed_on} : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
// CHECK-NEXT: "trn.reshape"(%[[N]]) : (tensor<1x128x128xbf16>) -> tensor<128x128xbf16>
// CHECK: "trn.tensor_tensor"(%[[N]], %{{.*}}) {op = "add"}
// CHECK: }) {kind = "attention_linear_rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x128xbf16>
// CHECK-NEXT: return %[[K]]
// ISA-LABEL: func.func @encoder_layer
// ISA-NOT: "nisa.alloc"() {memory = "hbm"}
// ISA: return
// NOFFN-LABEL: func.func @encoder_layer
// NOFFN-NOT: trn.rows_handed_on
// NOFFN: }) {kind = "attention_linear_rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x128xbf16>
// NOFFN-NEXT: "trn.kernel"() ({
// NOFFN: }) {kind = "mlp_rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x128xbf16>
func.func @encoder_layer(%arg0: tensor<1x128x128xbf16>, %arg1: tensor<384xbf16>, %arg2: tensor<128x384xbf16>, %arg3: tensor<128xbf16>, %arg4: tensor<128x128xbf16>, %arg5: tensor<128xbf16>, %arg6: tensor<128xbf16>, %arg7: tensor<256xbf16>, %arg8: tensor<128x256xbf16>, %arg9: tensor<128xbf16>, %arg10: tensor<256x128xbf16>, %arg11: tensor<128xbf16>, %arg12: tensor<128xbf16>) -> tensor<1x128x128xbf16> {
  %0 = "trn.kernel"() ({
    %4 = "trn.reshape"(%arg0) : (tensor<1x128x128xbf16>) -> tensor<128x128xbf16>
    %5 = "trn.broadcast"(%arg1) {dimensions = array<i64: 0>} : (tensor<384xbf16>) -> tensor<128x384xbf16>
    %6 = "trn.matmul"(%4, %arg2) : (tensor<128x128xbf16>, tensor<128x384xbf16>) -> tensor<128x384xf32>
    %7 = "trn.tensor_tensor"(%5, %6) {op = "add"} : (tensor<128x384xbf16>, tensor<128x384xf32>) -> tensor<128x384xf32>
    %8 = "trn.convert"(%7) : (tensor<128x384xf32>) -> tensor<128x384xbf16>
    "trn.yield"(%8) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x384xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x384xbf16>
  %1 = "trn.kernel"() ({
    %4 = "trn.reshape"(%0) : (tensor<128x384xbf16>) -> tensor<1x128x3x2x64xbf16>
    %5 = "trn.transpose"(%4) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<1x128x3x2x64xbf16>) -> tensor<3x1x2x128x64xbf16>
    %6 = "trn.view"(%5) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
    %7 = "trn.reshape"(%6) : (tensor<1x1x2x128x64xbf16>) -> tensor<2x128x64xbf16>
    %8 = "trn.view"(%5) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
    %9 = "trn.reshape"(%8) : (tensor<1x1x2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
    %10 = "trn.transpose"(%9) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<1x2x128x64xbf16>) -> tensor<1x2x64x128xbf16>
    %11 = "trn.reshape"(%10) : (tensor<1x2x64x128xbf16>) -> tensor<2x64x128xbf16>
    %12 = "trn.matmul"(%7, %11) : (tensor<2x128x64xbf16>, tensor<2x64x128xbf16>) -> tensor<2x128x128xf32>
    %13 = "trn.convert"(%12) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    %14 = "trn.reshape"(%13) : (tensor<2x128x128xbf16>) -> tensor<1x2x128x128xbf16>
    %15 = "trn.tensor_scalar"(%14) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<1x2x128x128xbf16>) -> tensor<1x2x128x128xf32>
    %16 = "trn.reduce"(%15) {dimensions = array<i64: 3>, op = "max"} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
    %17 = "trn.broadcast"(%16) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
    %18 = "trn.tensor_tensor"(%15, %17) {op = "sub"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %19 = "trn.activation"(%18) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %20 = "trn.reduce"(%19) {dimensions = array<i64: 3>, op = "add"} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
    %21 = "trn.broadcast"(%20) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
    %22 = "trn.tensor_tensor"(%19, %21) {op = "div"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %23 = "trn.convert"(%22) : (tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xbf16>
    %24 = "trn.reshape"(%23) : (tensor<1x2x128x128xbf16>) -> tensor<2x128x128xbf16>
    %25 = "trn.reshape"(%0) : (tensor<128x384xbf16>) -> tensor<1x128x3x2x64xbf16>
    %26 = "trn.transpose"(%25) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<1x128x3x2x64xbf16>) -> tensor<3x1x2x128x64xbf16>
    %27 = "trn.view"(%26) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>} : (tensor<3x1x2x128x64xbf16>) -> tensor<1x1x2x128x64xbf16>
    %28 = "trn.reshape"(%27) : (tensor<1x1x2x128x64xbf16>) -> tensor<2x128x64xbf16>
    %29 = "trn.matmul"(%24, %28) : (tensor<2x128x128xbf16>, tensor<2x128x64xbf16>) -> tensor<2x128x64xf32>
    %30 = "trn.convert"(%29) : (tensor<2x128x64xf32>) -> tensor<2x128x64xbf16>
    %31 = "trn.reshape"(%30) : (tensor<2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
    %32 = "trn.transpose"(%31) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x2x128x64xbf16>) -> tensor<1x128x2x64xbf16>
    "trn.yield"(%32) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x2x64xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x2x64xbf16>
  %2 = "trn.kernel"() ({
    %4 = "trn.reshape"(%1) : (tensor<1x128x2x64xbf16>) -> tensor<128x128xbf16>
    %5 = "trn.broadcast"(%arg3) {dimensions = array<i64: 0>} : (tensor<128xbf16>) -> tensor<128x128xbf16>
    %6 = "trn.matmul"(%4, %arg4) : (tensor<128x128xbf16>, tensor<128x128xbf16>) -> tensor<128x128xf32>
    %7 = "trn.tensor_tensor"(%5, %6) {op = "add"} : (tensor<128x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
    %8 = "trn.convert"(%7) {trn.producer_result} : (tensor<128x128xf32>) -> tensor<128x128xbf16>
    %9 = "trn.reshape"(%8) : (tensor<128x128xbf16>) -> tensor<1x128x128xbf16>
    %10 = "trn.broadcast"(%arg5) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<1x128x128xbf16>
    %11 = "trn.broadcast"(%arg6) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<1x128x128xbf16>
    %12 = "trn.tensor_tensor"(%arg0, %9) {op = "add"} : (tensor<1x128x128xbf16>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %13 = "trn.convert"(%12) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
    %14 = "trn.reduce"(%13) {dimensions = array<i64: 2>, op = "add"} : (tensor<1x128x128xbf16>) -> tensor<1x128xbf16>
    %15 = "trn.tensor_scalar"(%14) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<1x128xbf16>) -> tensor<1x128xf32>
    %16 = "trn.convert"(%15) : (tensor<1x128xf32>) -> tensor<1x128xbf16>
    %17 = "trn.broadcast"(%16) {dimensions = array<i64: 2>} : (tensor<1x128xbf16>) -> tensor<1x128x128xbf16>
    %18 = "trn.tensor_tensor"(%13, %17) {op = "sub"} : (tensor<1x128x128xbf16>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %19 = "trn.tensor_tensor"(%18, %18) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
    %20 = "trn.convert"(%19) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
    %21 = "trn.reduce"(%20) {dimensions = array<i64: 2>, op = "add"} : (tensor<1x128x128xbf16>) -> tensor<1x128xbf16>
    %22 = "trn.tensor_scalar"(%21) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<1x128xbf16>) -> tensor<1x128xf32>
    %23 = "trn.tensor_scalar"(%22) {op = "add", reverse = false, scalar = 9.99999974E-6 : f32} : (tensor<1x128xf32>) -> tensor<1x128xf32>
    %24 = "trn.activation"(%23) {bias = 0.000000e+00 : f32, func = "rsqrt", scale = 1.000000e+00 : f32} : (tensor<1x128xf32>) -> tensor<1x128xf32>
    %25 = "trn.convert"(%24) : (tensor<1x128xf32>) -> tensor<1x128xbf16>
    %26 = "trn.broadcast"(%25) {dimensions = array<i64: 2>} : (tensor<1x128xbf16>) -> tensor<1x128x128xbf16>
    %27 = "trn.tensor_tensor"(%18, %26) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %28 = "trn.tensor_tensor"(%27, %10) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %29 = "trn.tensor_tensor"(%28, %11) {op = "add"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %30 = "trn.convert"(%29) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
    "trn.yield"(%30) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x128xbf16>) -> ()
  }) {kind = "linear_rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x128xbf16>
  %3 = "trn.kernel"() ({
    %4 = "trn.reshape"(%2) : (tensor<1x128x128xbf16>) -> tensor<128x128xbf16>
    %5 = "trn.broadcast"(%arg7) {dimensions = array<i64: 0>} : (tensor<256xbf16>) -> tensor<128x256xbf16>
    %6 = "trn.matmul"(%4, %arg8) : (tensor<128x128xbf16>, tensor<128x256xbf16>) -> tensor<128x256xf32>
    %7 = "trn.tensor_tensor"(%5, %6) {op = "add"} : (tensor<128x256xbf16>, tensor<128x256xf32>) -> tensor<128x256xf32>
    %8 = "trn.activation"(%7) {bias = 0.000000e+00 : f32, func = "gelu", scale = 1.000000e+00 : f32} : (tensor<128x256xf32>) -> tensor<128x256xf32>
    %9 = "trn.convert"(%8) : (tensor<128x256xf32>) -> tensor<128x256xbf16>
    %10 = "trn.broadcast"(%arg9) {dimensions = array<i64: 0>} : (tensor<128xbf16>) -> tensor<128x128xbf16>
    %11 = "trn.matmul"(%9, %arg10) : (tensor<128x256xbf16>, tensor<256x128xbf16>) -> tensor<128x128xf32>
    %12 = "trn.tensor_tensor"(%10, %11) {op = "add"} : (tensor<128x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
    %13 = "trn.convert"(%12) {trn.producer_result} : (tensor<128x128xf32>) -> tensor<128x128xbf16>
    %14 = "trn.reshape"(%13) : (tensor<128x128xbf16>) -> tensor<1x128x128xbf16>
    %15 = "trn.broadcast"(%arg11) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<1x128x128xbf16>
    %16 = "trn.broadcast"(%arg12) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<1x128x128xbf16>
    %17 = "trn.tensor_tensor"(%2, %14) {op = "add"} : (tensor<1x128x128xbf16>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %18 = "trn.convert"(%17) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
    %19 = "trn.reduce"(%18) {dimensions = array<i64: 2>, op = "add"} : (tensor<1x128x128xbf16>) -> tensor<1x128xbf16>
    %20 = "trn.tensor_scalar"(%19) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<1x128xbf16>) -> tensor<1x128xf32>
    %21 = "trn.convert"(%20) : (tensor<1x128xf32>) -> tensor<1x128xbf16>
    %22 = "trn.broadcast"(%21) {dimensions = array<i64: 2>} : (tensor<1x128xbf16>) -> tensor<1x128x128xbf16>
    %23 = "trn.tensor_tensor"(%18, %22) {op = "sub"} : (tensor<1x128x128xbf16>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %24 = "trn.tensor_tensor"(%23, %23) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
    %25 = "trn.convert"(%24) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
    %26 = "trn.reduce"(%25) {dimensions = array<i64: 2>, op = "add"} : (tensor<1x128x128xbf16>) -> tensor<1x128xbf16>
    %27 = "trn.tensor_scalar"(%26) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<1x128xbf16>) -> tensor<1x128xf32>
    %28 = "trn.tensor_scalar"(%27) {op = "add", reverse = false, scalar = 9.99999974E-6 : f32} : (tensor<1x128xf32>) -> tensor<1x128xf32>
    %29 = "trn.activation"(%28) {bias = 0.000000e+00 : f32, func = "rsqrt", scale = 1.000000e+00 : f32} : (tensor<1x128xf32>) -> tensor<1x128xf32>
    %30 = "trn.convert"(%29) : (tensor<1x128xf32>) -> tensor<1x128xbf16>
    %31 = "trn.broadcast"(%30) {dimensions = array<i64: 2>} : (tensor<1x128xbf16>) -> tensor<1x128x128xbf16>
    %32 = "trn.tensor_tensor"(%23, %31) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %33 = "trn.tensor_tensor"(%32, %15) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %34 = "trn.tensor_tensor"(%33, %16) {op = "add"} : (tensor<1x128x128xf32>, tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %35 = "trn.convert"(%34) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
    "trn.yield"(%35) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x128xbf16>) -> ()
  }) {kind = "mlp_rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x128xbf16>
  return %3 : tensor<1x128x128xbf16>
}

// -----

// Tests that in a training step's forward, where the attention kernel also stores its
// probabilities and the function returns Q, K^T and V (views of the QKV projection's result
// that are the attention's operands), the projection joins the attention kernel in front
// (its result op marked trn.attention_input) and the kernel yields the probabilities, then
// flat its output and each saved view -- the operand's own view inside the kernel -- which
// reshapes outside give back their shapes; the returned views of the projection's result
// are gone. Lowered, no buffer holds that result (with qkv-saved=false it is stored, for
// the attention and for the copies into Q, K^T and V).
// CHECK-LABEL: func.func @training_attention_saves_q_kt_v
// CHECK-NEXT: %[[K:.*]]:5 = "trn.kernel"() ({
// CHECK: %[[QKV:.*]] = "trn.convert"(%{{.*}}) {trn.attention_input} : (tensor<256x192xf32>) -> tensor<256x192xbf16>
// CHECK-NEXT: %[[HEADS:.*]] = "trn.reshape"(%[[QKV]]) : (tensor<256x192xbf16>) -> tensor<2x128x3x2x32xbf16>
// CHECK-NEXT: %[[SPLIT:.*]] = "trn.transpose"(%[[HEADS]])
// CHECK-NEXT: %[[Q:.*]] = "trn.view"(%[[SPLIT]]) {indexing_map = #map}
// CHECK: %[[KT:.*]] = "trn.transpose"(%{{.*}}) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<2x2x128x32xbf16>) -> tensor<2x2x32x128xbf16>
// CHECK: %[[P:.*]] = "trn.convert"(%{{.*}}) : (tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xbf16>
// CHECK: %[[V:.*]] = "trn.view"(%{{.*}}) {indexing_map = #map2}
// CHECK: %[[O:.*]] = "trn.transpose"(%{{.*}}) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x128x32xbf16>) -> tensor<2x128x2x32xbf16>
// CHECK-NEXT: %[[OF:.*]] = "trn.reshape"(%[[O]]) : (tensor<2x128x2x32xbf16>) -> tensor<16384xbf16>
// CHECK-NEXT: %[[VF:.*]] = "trn.reshape"(%[[V]]) : (tensor<1x2x2x128x32xbf16>) -> tensor<16384xbf16>
// CHECK-NEXT: %[[QF:.*]] = "trn.reshape"(%[[Q]]) : (tensor<1x2x2x128x32xbf16>) -> tensor<16384xbf16>
// CHECK-NEXT: %[[KTF:.*]] = "trn.reshape"(%[[KT]]) : (tensor<2x2x32x128xbf16>) -> tensor<16384xbf16>
// CHECK-NEXT: "trn.yield"(%[[P]], %[[OF]], %[[VF]], %[[QF]], %[[KTF]])
// CHECK-NEXT: }) {kind = "attention", resultSegmentSizes = array<i32: 1, 4, 0>} : () -> (tensor<2x2x128x128xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>, tensor<16384xbf16>)
// CHECK-NEXT: %[[OUT:.*]] = "trn.reshape"(%[[K]]#1) : (tensor<16384xbf16>) -> tensor<2x128x2x32xbf16>
// CHECK-NEXT: %[[VOUT:.*]] = "trn.reshape"(%[[K]]#2) : (tensor<16384xbf16>) -> tensor<2x2x128x32xbf16>
// CHECK-NEXT: %[[QOUT:.*]] = "trn.reshape"(%[[K]]#3) : (tensor<16384xbf16>) -> tensor<2x2x128x32xbf16>
// CHECK-NEXT: %[[KTOUT:.*]] = "trn.reshape"(%[[K]]#4) : (tensor<16384xbf16>) -> tensor<2x2x32x128xbf16>
// CHECK-NEXT: return %[[QOUT]], %[[KTOUT]], %[[K]]#0, %[[VOUT]], %[[OUT]]
// NOSAVED-LABEL: func.func @training_attention_saves_q_kt_v
// NOSAVED: }) {{{.*}}kind = "matmul"{{.*}}, resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x192xbf16>
// NOSAVED: }) {kind = "attention", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<2x128x2x32xbf16>, tensor<2x2x128x128xbf16>)
// NOSAVED-NOT: trn.attention_input
// NOSAVED: return
// ISA-LABEL: func.func @training_attention_saves_q_kt_v
// ISA-NOT: "nisa.alloc"() {memory = "hbm"}
// ISA: return
// ISA-NOSAVED-LABEL: func.func @training_attention_saves_q_kt_v
// ISA-NOSAVED: "nisa.alloc"() {memory = "hbm"} : () -> memref<256x192xbf16, "hbm">
func.func @training_attention_saves_q_kt_v(%arg0: tensor<2x128x64xbf16>, %arg1: tensor<192x64xbf16>, %arg2: tensor<192xbf16>) -> (tensor<2x2x128x32xbf16>, tensor<2x2x32x128xbf16>, tensor<2x2x128x128xbf16>, tensor<2x2x128x32xbf16>, tensor<2x128x2x32xbf16>) {
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

// -----

// Tests that where the output projection (its bias and the residual) alone reads the
// attention's output as its matmul's input, and the step saves that output too, the
// projection joins the merged kernel behind the attention (the op computing the output
// marked trn.attention_output): the kernel yields the probabilities, then flat its output,
// the saved views and the projection's result. Lowered, no buffer holds the QKV projection's
// result (with qkv-saved=false it is stored).
// CHECK-LABEL: func.func @training_attention_and_projection
// CHECK-NEXT: %[[K:.*]]:6 = "trn.kernel"() ({
// CHECK: trn.attention_input
// CHECK: %[[O:.*]] = "trn.transpose"(%{{.*}}) {permutation = array<i64: 0, 2, 1, 3>, trn.attention_output} : (tensor<2x2x128x64xbf16>) -> tensor<2x128x2x64xbf16>
// CHECK-NEXT: %[[X:.*]] = "trn.reshape"(%[[O]]) : (tensor<2x128x2x64xbf16>) -> tensor<256x128xbf16>
// CHECK: %[[Y:.*]] = "trn.matmul"(%[[X]], %{{.*}}) : (tensor<256x128xbf16>, tensor<128x128xbf16>) -> tensor<256x128xf32>
// CHECK: %[[S:.*]] = "trn.convert"(%{{.*}}) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
// CHECK-NEXT: %[[OF:.*]] = "trn.reshape"(%[[O]]) : (tensor<2x128x2x64xbf16>) -> tensor<32768xbf16>
// CHECK: %[[SF:.*]] = "trn.reshape"(%[[S]]) : (tensor<256x128xbf16>) -> tensor<32768xbf16>
// CHECK-NEXT: "trn.yield"(%{{.*}}, %[[OF]], %{{.*}}, %{{.*}}, %{{.*}}, %[[SF]])
// CHECK-NEXT: }) {kind = "attention", resultSegmentSizes = array<i32: 1, 5, 0>} : () -> (tensor<2x2x128x128xbf16>, tensor<32768xbf16>, tensor<32768xbf16>, tensor<32768xbf16>, tensor<32768xbf16>, tensor<32768xbf16>)
// CHECK: "trn.reshape"(%[[K]]#5) : (tensor<32768xbf16>) -> tensor<256x128xbf16>
// CHECK: }) {free_tile = 256 : i64, kind = "rows", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NOSAVED-LABEL: func.func @training_attention_and_projection
// NOSAVED-NOT: trn.attention_output
// NOSAVED: return
// ISA-LABEL: func.func @training_attention_and_projection
// ISA-NOT: "nisa.alloc"() {memory = "hbm"}
// ISA: return
// ISA-NOSAVED-LABEL: func.func @training_attention_and_projection
// ISA-NOSAVED: "nisa.alloc"() {memory = "hbm"} : () -> memref<256x384xbf16, "hbm">
func.func @training_attention_and_projection(%arg0: tensor<2x128x128xbf16>, %arg1: tensor<384x128xbf16>, %arg2: tensor<384xbf16>, %arg3: tensor<128x128xbf16>, %arg4: tensor<128xbf16>, %arg5: tensor<128xbf16>, %arg6: tensor<128xbf16>) -> (tensor<2x2x128x64xbf16>, tensor<2x2x64x128xbf16>, tensor<2x2x128x128xbf16>, tensor<2x2x128x64xbf16>, tensor<2x128x2x64xbf16>, tensor<2x128x128xbf16>, tensor<2x128x128xbf16>, tensor<2x128x1xbf16>, tensor<2x128x1xbf16>) {
  %0 = "trn.kernel"() ({
    %14 = "trn.reshape"(%arg0) : (tensor<2x128x128xbf16>) -> tensor<256x128xbf16>
    %15 = "trn.transpose"(%arg1) {permutation = array<i64: 1, 0>} : (tensor<384x128xbf16>) -> tensor<128x384xbf16>
    %16 = "trn.broadcast"(%arg2) {dimensions = array<i64: 0>} : (tensor<384xbf16>) -> tensor<256x384xbf16>
    %17 = "trn.matmul"(%14, %15) : (tensor<256x128xbf16>, tensor<128x384xbf16>) -> tensor<256x384xf32>
    %18 = "trn.tensor_tensor"(%16, %17) {op = "add"} : (tensor<256x384xbf16>, tensor<256x384xf32>) -> tensor<256x384xf32>
    %19 = "trn.convert"(%18) : (tensor<256x384xf32>) -> tensor<256x384xbf16>
    "trn.yield"(%19) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x384xbf16>) -> ()
  }) {gemm_block = 1 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x384xbf16>
  %1:2 = "trn.kernel"() ({
    %14 = "trn.reshape"(%0) : (tensor<256x384xbf16>) -> tensor<2x128x3x2x64xbf16>
    %15 = "trn.transpose"(%14) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x128x3x2x64xbf16>) -> tensor<3x2x2x128x64xbf16>
    %16 = "trn.view"(%15) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>} : (tensor<3x2x2x128x64xbf16>) -> tensor<1x2x2x128x64xbf16>
    %17 = "trn.reshape"(%16) : (tensor<1x2x2x128x64xbf16>) -> tensor<4x128x64xbf16>
    %18 = "trn.view"(%15) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>} : (tensor<3x2x2x128x64xbf16>) -> tensor<1x2x2x128x64xbf16>
    %19 = "trn.reshape"(%18) : (tensor<1x2x2x128x64xbf16>) -> tensor<2x2x128x64xbf16>
    %20 = "trn.transpose"(%19) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<2x2x128x64xbf16>) -> tensor<2x2x64x128xbf16>
    %21 = "trn.reshape"(%20) : (tensor<2x2x64x128xbf16>) -> tensor<4x64x128xbf16>
    %22 = "trn.matmul"(%17, %21) : (tensor<4x128x64xbf16>, tensor<4x64x128xbf16>) -> tensor<4x128x128xf32>
    %23 = "trn.convert"(%22) : (tensor<4x128x128xf32>) -> tensor<4x128x128xbf16>
    %24 = "trn.reshape"(%23) : (tensor<4x128x128xbf16>) -> tensor<2x2x128x128xbf16>
    %25 = "trn.tensor_scalar"(%24) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<2x2x128x128xbf16>) -> tensor<2x2x128x128xf32>
    %26 = "trn.reduce"(%25) {dimensions = array<i64: 3>, op = "max"} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128xf32>
    %27 = "trn.broadcast"(%26) {dimensions = array<i64: 3>} : (tensor<2x2x128xf32>) -> tensor<2x2x128x128xf32>
    %28 = "trn.tensor_tensor"(%25, %27) {op = "sub"} : (tensor<2x2x128x128xf32>, tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %29 = "trn.activation"(%28) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %30 = "trn.reduce"(%29) {dimensions = array<i64: 3>, op = "add"} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128xf32>
    %31 = "trn.broadcast"(%30) {dimensions = array<i64: 3>} : (tensor<2x2x128xf32>) -> tensor<2x2x128x128xf32>
    %32 = "trn.tensor_tensor"(%29, %31) {op = "div"} : (tensor<2x2x128x128xf32>, tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %33 = "trn.convert"(%32) : (tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xbf16>
    %34 = "trn.reshape"(%33) : (tensor<2x2x128x128xbf16>) -> tensor<4x128x128xbf16>
    %35 = "trn.reshape"(%0) : (tensor<256x384xbf16>) -> tensor<2x128x3x2x64xbf16>
    %36 = "trn.transpose"(%35) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x128x3x2x64xbf16>) -> tensor<3x2x2x128x64xbf16>
    %37 = "trn.view"(%36) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>} : (tensor<3x2x2x128x64xbf16>) -> tensor<1x2x2x128x64xbf16>
    %38 = "trn.reshape"(%37) : (tensor<1x2x2x128x64xbf16>) -> tensor<4x128x64xbf16>
    %39 = "trn.matmul"(%34, %38) : (tensor<4x128x128xbf16>, tensor<4x128x64xbf16>) -> tensor<4x128x64xf32>
    %40 = "trn.convert"(%39) : (tensor<4x128x64xf32>) -> tensor<4x128x64xbf16>
    %41 = "trn.reshape"(%40) : (tensor<4x128x64xbf16>) -> tensor<2x2x128x64xbf16>
    %42 = "trn.transpose"(%41) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x128x64xbf16>) -> tensor<2x128x2x64xbf16>
    "trn.yield"(%42, %33) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<2x128x2x64xbf16>, tensor<2x2x128x128xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<2x128x2x64xbf16>, tensor<2x2x128x128xbf16>)
  %2 = "trn.kernel"() ({
    %14 = "trn.reshape"(%1#0) : (tensor<2x128x2x64xbf16>) -> tensor<256x128xbf16>
    %15 = "trn.transpose"(%arg3) {permutation = array<i64: 1, 0>} : (tensor<128x128xbf16>) -> tensor<128x128xbf16>
    %16 = "trn.broadcast"(%arg4) {dimensions = array<i64: 0>} : (tensor<128xbf16>) -> tensor<256x128xbf16>
    %17 = "trn.reshape"(%arg0) : (tensor<2x128x128xbf16>) -> tensor<256x128xbf16>
    %18 = "trn.matmul"(%14, %15) : (tensor<256x128xbf16>, tensor<128x128xbf16>) -> tensor<256x128xf32>
    %19 = "trn.tensor_tensor"(%16, %18) {op = "add"} : (tensor<256x128xbf16>, tensor<256x128xf32>) -> tensor<256x128xf32>
    %20 = "trn.tensor_tensor"(%17, %19) {op = "add"} : (tensor<256x128xbf16>, tensor<256x128xf32>) -> tensor<256x128xf32>
    %21 = "trn.convert"(%20) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
    "trn.yield"(%21) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x128xbf16>) -> ()
  }) {gemm_block = 1 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x128xbf16>
  %3 = "trn.reshape"(%2) : (tensor<256x128xbf16>) -> tensor<2x128x128xbf16>
  %4:3 = "trn.kernel"() ({
    %14 = "trn.broadcast"(%arg5) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<2x128x128xbf16>
    %15 = "trn.broadcast"(%arg6) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<2x128x128xbf16>
    %16 = "trn.reduce"(%3) {dimensions = array<i64: 2>, op = "add"} : (tensor<2x128x128xbf16>) -> tensor<2x128xbf16>
    %17 = "trn.tensor_scalar"(%16) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<2x128xbf16>) -> tensor<2x128xf32>
    %18 = "trn.convert"(%17) : (tensor<2x128xf32>) -> tensor<2x128xbf16>
    %19 = "trn.reshape"(%18) : (tensor<2x128xbf16>) -> tensor<2x128x1xbf16>
    %20 = "trn.broadcast"(%18) {dimensions = array<i64: 2>} : (tensor<2x128xbf16>) -> tensor<2x128x128xbf16>
    %21 = "trn.tensor_tensor"(%3, %20) {op = "sub"} : (tensor<2x128x128xbf16>, tensor<2x128x128xbf16>) -> tensor<2x128x128xf32>
    %22 = "trn.tensor_tensor"(%21, %21) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %23 = "trn.convert"(%22) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    %24 = "trn.reduce"(%23) {dimensions = array<i64: 2>, op = "add"} : (tensor<2x128x128xbf16>) -> tensor<2x128xbf16>
    %25 = "trn.tensor_scalar"(%24) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<2x128xbf16>) -> tensor<2x128xf32>
    %26 = "trn.tensor_scalar"(%25) {op = "add", reverse = false, scalar = 9.99999974E-6 : f32} : (tensor<2x128xf32>) -> tensor<2x128xf32>
    %27 = "trn.activation"(%26) {bias = 0.000000e+00 : f32, func = "rsqrt", scale = 1.000000e+00 : f32} : (tensor<2x128xf32>) -> tensor<2x128xf32>
    %28 = "trn.convert"(%27) : (tensor<2x128xf32>) -> tensor<2x128xbf16>
    %29 = "trn.reshape"(%28) : (tensor<2x128xbf16>) -> tensor<2x128x1xbf16>
    %30 = "trn.broadcast"(%28) {dimensions = array<i64: 2>} : (tensor<2x128xbf16>) -> tensor<2x128x128xbf16>
    %31 = "trn.tensor_tensor"(%21, %30) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xbf16>) -> tensor<2x128x128xf32>
    %32 = "trn.tensor_tensor"(%31, %14) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xbf16>) -> tensor<2x128x128xf32>
    %33 = "trn.tensor_tensor"(%32, %15) {op = "add"} : (tensor<2x128x128xf32>, tensor<2x128x128xbf16>) -> tensor<2x128x128xf32>
    %34 = "trn.convert"(%33) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    "trn.yield"(%34, %19, %29) {operandSegmentSizes = array<i32: 1, 2, 0>} : (tensor<2x128x128xbf16>, tensor<2x128x1xbf16>, tensor<2x128x1xbf16>) -> ()
  }) {free_tile = 256 : i64, kind = "rows", resultSegmentSizes = array<i32: 1, 2, 0>} : () -> (tensor<2x128x128xbf16>, tensor<2x128x1xbf16>, tensor<2x128x1xbf16>)
  %5 = "trn.reshape"(%0) : (tensor<256x384xbf16>) -> tensor<2x128x3x2x64xbf16>
  %6 = "trn.transpose"(%5) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x128x3x2x64xbf16>) -> tensor<3x2x2x128x64xbf16>
  %7 = "trn.view"(%6) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>} : (tensor<3x2x2x128x64xbf16>) -> tensor<1x2x2x128x64xbf16>
  %8 = "trn.view"(%6) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>} : (tensor<3x2x2x128x64xbf16>) -> tensor<1x2x2x128x64xbf16>
  %9 = "trn.view"(%6) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>} : (tensor<3x2x2x128x64xbf16>) -> tensor<1x2x2x128x64xbf16>
  %10 = "trn.reshape"(%7) : (tensor<1x2x2x128x64xbf16>) -> tensor<2x2x128x64xbf16>
  %11 = "trn.reshape"(%8) : (tensor<1x2x2x128x64xbf16>) -> tensor<2x2x128x64xbf16>
  %12 = "trn.reshape"(%9) : (tensor<1x2x2x128x64xbf16>) -> tensor<2x2x128x64xbf16>
  %13 = "trn.transpose"(%11) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<2x2x128x64xbf16>) -> tensor<2x2x64x128xbf16>
  return %10, %13, %1#1, %12, %1#0, %3, %4#0, %4#1, %4#2 : tensor<2x2x128x64xbf16>, tensor<2x2x64x128xbf16>, tensor<2x2x128x128xbf16>, tensor<2x2x128x64xbf16>, tensor<2x128x2x64xbf16>, tensor<2x128x128xbf16>, tensor<2x128x128xbf16>, tensor<2x128x1xbf16>, tensor<2x128x1xbf16>
}

// -----

// Tests that in a training step's backward the Linear computing dO (the attention's left
// operand of dO @ V^T) joins the softmax backward's attention kernel in front, where dV's
// kernel reads dO too: the kernel yields its output dQ first, then dK^T and dO whole, each
// in its own shape (two types after the first: one result group each), and stands where
// the Linear stood, ahead of dV's kernel, which reads dO as the kernel yields it.
// CHECK-LABEL: func.func @training_backward_attention_and_do
// CHECK: }) {free_tile = 256 : i64, kind = "rows", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NEXT: %[[K:.*]]:3 = "trn.kernel"() ({
// CHECK: "trn.matmul"(%{{.*}}, %{{.*}}) {trn.attention_input} : (tensor<256x128xf32>, tensor<128x128xf32>) -> tensor<256x128xf32>
// CHECK: }) {kind = "attention", resultSegmentSizes = array<i32: 1, 1, 1>} : () -> (tensor<2x128x2x64xf32>, tensor<4x64x128xf32>, tensor<256x128xf32>)
// CHECK-NEXT: "trn.kernel"() ({
// CHECK: "trn.reshape"(%[[K]]#2) : (tensor<256x128xf32>) -> tensor<2x128x2x64xf32>
// CHECK: }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x2x64xf32>
// NOSAVED-LABEL: func.func @training_backward_attention_and_do
// NOSAVED-NOT: trn.attention_input
// NOSAVED: return
func.func @training_backward_attention_and_do(%arg0: tensor<2x128x128xf32>, %arg1: tensor<2x128x1xf32>, %arg2: tensor<2x128x1xf32>, %arg3: tensor<2x128x128xf32>, %arg4: tensor<128xf32>, %arg5: tensor<128x128xf32>, %arg6: tensor<256x128xf32>, %arg7: tensor<4x128x128xf32>, %arg8: tensor<4x128x64xf32>, %arg9: tensor<2x2x128x128xf32>, %arg10: tensor<4x128x64xf32>, %arg11: tensor<4x64x128xf32>, %arg12: tensor<128x384xf32>, %arg13: tensor<256x128xf32>) -> (tensor<128xf32>, tensor<128xf32>, tensor<128x128xf32>, tensor<1x128xf32>, tensor<384x128xf32>, tensor<1x384xf32>, tensor<2x128x128xf32>) {
  %0:3 = "trn.kernel"() ({
    %20 = "trn.broadcast"(%arg4) {dimensions = array<i64: 0, 1>} : (tensor<128xf32>) -> tensor<2x128x128xf32>
    %21 = "trn.reshape"(%arg1) : (tensor<2x128x1xf32>) -> tensor<2x128xf32>
    %22 = "trn.broadcast"(%21) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x128xf32>
    %23 = "trn.tensor_tensor"(%arg0, %22) {op = "sub"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %24 = "trn.reshape"(%arg2) : (tensor<2x128x1xf32>) -> tensor<2x128xf32>
    %25 = "trn.broadcast"(%24) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x128xf32>
    %26 = "trn.tensor_tensor"(%23, %25) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %27 = "trn.tensor_tensor"(%arg3, %20) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %28 = "trn.tensor_scalar"(%27) {op = "mul", reverse = false, scalar = 1.280000e+02 : f32} : (tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %29 = "trn.reduce"(%27) {dimensions = array<i64: 2>, op = "add"} : (tensor<2x128x128xf32>) -> tensor<2x128xf32>
    %30 = "trn.tensor_tensor"(%27, %26) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %31 = "trn.reduce"(%30) {dimensions = array<i64: 2>, op = "add"} : (tensor<2x128x128xf32>) -> tensor<2x128xf32>
    %32 = "trn.broadcast"(%31) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x128xf32>
    %33 = "trn.tensor_tensor"(%26, %32) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %34 = "trn.broadcast"(%29) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x128xf32>
    %35 = "trn.tensor_tensor"(%28, %34) {op = "sub"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %36 = "trn.tensor_tensor"(%35, %33) {op = "sub"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %37 = "trn.tensor_scalar"(%arg2) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<2x128x1xf32>) -> tensor<2x128x1xf32>
    %38 = "trn.reshape"(%37) : (tensor<2x128x1xf32>) -> tensor<2x128xf32>
    %39 = "trn.broadcast"(%38) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x128xf32>
    %40 = "trn.tensor_tensor"(%arg3, %26) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %41 = "trn.reduce"(%40) {dimensions = array<i64: 0, 1>, op = "add"} : (tensor<2x128x128xf32>) -> tensor<128xf32>
    %42 = "trn.reduce"(%arg3) {dimensions = array<i64: 0, 1>, op = "add"} : (tensor<2x128x128xf32>) -> tensor<128xf32>
    %43 = "trn.tensor_tensor"(%39, %36) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    "trn.yield"(%43, %41, %42) {operandSegmentSizes = array<i32: 1, 2, 0>} : (tensor<2x128x128xf32>, tensor<128xf32>, tensor<128xf32>) -> ()
  }) {free_tile = 256 : i64, kind = "rows", resultSegmentSizes = array<i32: 1, 2, 0>} : () -> (tensor<2x128x128xf32>, tensor<128xf32>, tensor<128xf32>)
  %1 = "trn.kernel"() ({
    %20 = "trn.reshape"(%0#0) : (tensor<2x128x128xf32>) -> tensor<256x128xf32>
    %21 = "trn.transpose"(%arg5) {permutation = array<i64: 1, 0>} : (tensor<128x128xf32>) -> tensor<128x128xf32>
    %22 = "trn.matmul"(%20, %21) : (tensor<256x128xf32>, tensor<128x128xf32>) -> tensor<256x128xf32>
    "trn.yield"(%22) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x128xf32>) -> ()
  }) {gemm_block = 1 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x128xf32>
  %2:2 = "trn.kernel"() ({
    %20 = "trn.reshape"(%1) : (tensor<256x128xf32>) -> tensor<2x128x2x64xf32>
    %21 = "trn.transpose"(%20) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x128x2x64xf32>) -> tensor<2x2x128x64xf32>
    %22 = "trn.reshape"(%21) : (tensor<2x2x128x64xf32>) -> tensor<4x128x64xf32>
    %23 = "trn.transpose"(%arg8) {permutation = array<i64: 0, 2, 1>} : (tensor<4x128x64xf32>) -> tensor<4x64x128xf32>
    %24 = "trn.matmul"(%22, %23) : (tensor<4x128x64xf32>, tensor<4x64x128xf32>) -> tensor<4x128x128xf32>
    %25 = "trn.reshape"(%24) : (tensor<4x128x128xf32>) -> tensor<2x2x128x128xf32>
    %26 = "trn.tensor_tensor"(%25, %arg9) {op = "mul"} : (tensor<2x2x128x128xf32>, tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %27 = "trn.reduce"(%26) {dimensions = array<i64: 3>, op = "add"} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128xf32>
    %28 = "trn.broadcast"(%27) {dimensions = array<i64: 3>} : (tensor<2x2x128xf32>) -> tensor<2x2x128x128xf32>
    %29 = "trn.tensor_tensor"(%arg9, %28) {op = "mul"} : (tensor<2x2x128x128xf32>, tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %30 = "trn.tensor_tensor"(%26, %29) {op = "sub"} : (tensor<2x2x128x128xf32>, tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %31 = "trn.tensor_scalar"(%30) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %32 = "trn.reshape"(%31) : (tensor<2x2x128x128xf32>) -> tensor<4x128x128xf32>
    %33 = "trn.transpose"(%arg11) {permutation = array<i64: 0, 2, 1>} : (tensor<4x64x128xf32>) -> tensor<4x128x64xf32>
    %34 = "trn.matmul"(%32, %33) : (tensor<4x128x128xf32>, tensor<4x128x64xf32>) -> tensor<4x128x64xf32>
    %35 = "trn.transpose"(%arg10) {permutation = array<i64: 0, 2, 1>} : (tensor<4x128x64xf32>) -> tensor<4x64x128xf32>
    %36 = "trn.reshape"(%31) : (tensor<2x2x128x128xf32>) -> tensor<4x128x128xf32>
    %37 = "trn.matmul"(%35, %36) : (tensor<4x64x128xf32>, tensor<4x128x128xf32>) -> tensor<4x64x128xf32>
    %38 = "trn.reshape"(%34) : (tensor<4x128x64xf32>) -> tensor<2x2x128x64xf32>
    %39 = "trn.transpose"(%38) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x128x64xf32>) -> tensor<2x128x2x64xf32>
    "trn.yield"(%39, %37) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<2x128x2x64xf32>, tensor<4x64x128xf32>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<2x128x2x64xf32>, tensor<4x64x128xf32>)
  %3 = "trn.kernel"() ({
    %20 = "trn.transpose"(%arg7) {permutation = array<i64: 0, 2, 1>} : (tensor<4x128x128xf32>) -> tensor<4x128x128xf32>
    %21 = "trn.reshape"(%1) : (tensor<256x128xf32>) -> tensor<2x128x2x64xf32>
    %22 = "trn.transpose"(%21) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x128x2x64xf32>) -> tensor<2x2x128x64xf32>
    %23 = "trn.reshape"(%22) : (tensor<2x2x128x64xf32>) -> tensor<4x128x64xf32>
    %24 = "trn.matmul"(%20, %23) : (tensor<4x128x128xf32>, tensor<4x128x64xf32>) -> tensor<4x128x64xf32>
    %25 = "trn.reshape"(%24) : (tensor<4x128x64xf32>) -> tensor<2x2x128x64xf32>
    %26 = "trn.transpose"(%25) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x128x64xf32>) -> tensor<2x128x2x64xf32>
    "trn.yield"(%26) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2x128x2x64xf32>) -> ()
  }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x2x64xf32>
  %4 = "trn.reshape"(%2#1) : (tensor<4x64x128xf32>) -> tensor<2x2x64x128xf32>
  %5 = "trn.transpose"(%4) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<2x2x64x128xf32>) -> tensor<2x2x128x64xf32>
  %6 = "trn.empty"() : () -> tensor<2x128x3x2x64xf32>
  %7 = "trn.reshape"(%2#0) : (tensor<2x128x2x64xf32>) -> tensor<2x128x1x2x64xf32>
  %8 = "trn.insert_slice"(%6, %7) {offsets = array<i64: 0, 0, 0, 0, 0>, strides = array<i64: 1, 1, 1, 1, 1>} : (tensor<2x128x3x2x64xf32>, tensor<2x128x1x2x64xf32>) -> tensor<2x128x3x2x64xf32>
  %9 = "trn.transpose"(%5) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x128x64xf32>) -> tensor<2x128x2x64xf32>
  %10 = "trn.reshape"(%9) : (tensor<2x128x2x64xf32>) -> tensor<2x128x1x2x64xf32>
  %11 = "trn.insert_slice"(%8, %10) {offsets = array<i64: 0, 0, 1, 0, 0>, strides = array<i64: 1, 1, 1, 1, 1>} : (tensor<2x128x3x2x64xf32>, tensor<2x128x1x2x64xf32>) -> tensor<2x128x3x2x64xf32>
  %12 = "trn.reshape"(%3) : (tensor<2x128x2x64xf32>) -> tensor<2x128x1x2x64xf32>
  %13 = "trn.insert_slice"(%11, %12) {offsets = array<i64: 0, 0, 2, 0, 0>, strides = array<i64: 1, 1, 1, 1, 1>} : (tensor<2x128x3x2x64xf32>, tensor<2x128x1x2x64xf32>) -> tensor<2x128x3x2x64xf32>
  %14 = "trn.kernel"() ({
    %20 = "trn.reshape"(%13) : (tensor<2x128x3x2x64xf32>) -> tensor<256x384xf32>
    %21 = "trn.transpose"(%arg12) {permutation = array<i64: 1, 0>} : (tensor<128x384xf32>) -> tensor<384x128xf32>
    %22 = "trn.reshape"(%0#0) : (tensor<2x128x128xf32>) -> tensor<256x128xf32>
    %23 = "trn.matmul"(%20, %21) : (tensor<256x384xf32>, tensor<384x128xf32>) -> tensor<256x128xf32>
    %24 = "trn.tensor_tensor"(%22, %23) {op = "add"} : (tensor<256x128xf32>, tensor<256x128xf32>) -> tensor<256x128xf32>
    "trn.yield"(%24) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x128xf32>) -> ()
  }) {gemm_block = 1 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x128xf32>
  %15:2 = "trn.kernel"() ({
    %20 = "trn.reshape"(%13) : (tensor<2x128x3x2x64xf32>) -> tensor<256x384xf32>
    %21 = "trn.transpose"(%20) {permutation = array<i64: 1, 0>} : (tensor<256x384xf32>) -> tensor<384x256xf32>
    %22 = "trn.matmul"(%21, %arg13) : (tensor<384x256xf32>, tensor<256x128xf32>) -> tensor<384x128xf32>
    %23 = "trn.reduce"(%20) {dimensions = array<i64: 0>, op = "add"} : (tensor<256x384xf32>) -> tensor<384xf32>
    "trn.yield"(%22, %23) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<384x128xf32>, tensor<384xf32>) -> ()
  }) {gemm_block = 1 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<384x128xf32>, tensor<384xf32>)
  %16:2 = "trn.kernel"() ({
    %20 = "trn.reshape"(%0#0) : (tensor<2x128x128xf32>) -> tensor<256x128xf32>
    %21 = "trn.transpose"(%20) {permutation = array<i64: 1, 0>} : (tensor<256x128xf32>) -> tensor<128x256xf32>
    %22 = "trn.matmul"(%21, %arg6) : (tensor<128x256xf32>, tensor<256x128xf32>) -> tensor<128x128xf32>
    %23 = "trn.reduce"(%20) {dimensions = array<i64: 0>, op = "add"} : (tensor<256x128xf32>) -> tensor<128xf32>
    "trn.yield"(%22, %23) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<128x128xf32>, tensor<128xf32>) -> ()
  }) {gemm_block = 1 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<128x128xf32>, tensor<128xf32>)
  %17 = "trn.reshape"(%16#1) : (tensor<128xf32>) -> tensor<1x128xf32>
  %18 = "trn.reshape"(%15#1) : (tensor<384xf32>) -> tensor<1x384xf32>
  %19 = "trn.reshape"(%14) : (tensor<256x128xf32>) -> tensor<2x128x128xf32>
  return %0#1, %0#2, %16#0, %17, %15#0, %18, %19 : tensor<128xf32>, tensor<128xf32>, tensor<128x128xf32>, tensor<1x128xf32>, tensor<384x128xf32>, tensor<1x384xf32>, tensor<2x128x128xf32>
}

// -----

// Tests that in inference, where the QKV projection's result is read only by the attention
// kernel and the output projection (a matmul kernel: its bias and the residual, a pre-norm
// layer's) alone reads the attention's output, both join it: the merged kernel yields only
// the projection's result, the attention's output staying on chip. Lowered, no buffer holds
// the QKV projection's result or the attention's output (with qkv-saved=false both are
// stored).
// CHECK-LABEL: func.func @inference_attention_and_projection
// CHECK-NEXT: %[[K:.*]] = "trn.kernel"() ({
// CHECK: trn.attention_input
// CHECK: %[[O:.*]] = "trn.transpose"(%{{.*}}) {permutation = array<i64: 0, 2, 1, 3>, trn.attention_output} : (tensor<2x2x128x64xbf16>) -> tensor<2x128x2x64xbf16>
// CHECK-NEXT: %[[X:.*]] = "trn.reshape"(%[[O]]) : (tensor<2x128x2x64xbf16>) -> tensor<256x128xbf16>
// CHECK: "trn.matmul"(%[[X]], %{{.*}}) : (tensor<256x128xbf16>, tensor<128x128xbf16>) -> tensor<256x128xf32>
// CHECK: %[[S:.*]] = "trn.convert"(%{{.*}}) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
// CHECK-NEXT: "trn.yield"(%[[S]]) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x128xbf16>) -> ()
// CHECK-NEXT: }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x128xbf16>
// CHECK-NEXT: return %[[K]] : tensor<256x128xbf16>
// NOSAVED-LABEL: func.func @inference_attention_and_projection
// NOSAVED: }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x2x64xbf16>
// NOSAVED-NOT: trn.attention_output
// NOSAVED: return
// ISA-LABEL: func.func @inference_attention_and_projection
// ISA-NOT: "nisa.alloc"() {memory = "hbm"}
// ISA: return
// ISA-NOSAVED-LABEL: func.func @inference_attention_and_projection
// ISA-NOSAVED-DAG: "nisa.alloc"() {memory = "hbm"} : () -> memref<256x384xbf16, "hbm">
// ISA-NOSAVED-DAG: "nisa.alloc"() {memory = "hbm"} : () -> memref<2x128x2x64xbf16, "hbm">
func.func @inference_attention_and_projection(%arg0: tensor<2x128x128xbf16>, %arg1: tensor<384x128xbf16>, %arg2: tensor<384xbf16>, %arg3: tensor<128x128xbf16>, %arg4: tensor<128xbf16>) -> tensor<256x128xbf16> {
  %0 = "trn.kernel"() ({
    %14 = "trn.reshape"(%arg0) : (tensor<2x128x128xbf16>) -> tensor<256x128xbf16>
    %15 = "trn.transpose"(%arg1) {permutation = array<i64: 1, 0>} : (tensor<384x128xbf16>) -> tensor<128x384xbf16>
    %16 = "trn.broadcast"(%arg2) {dimensions = array<i64: 0>} : (tensor<384xbf16>) -> tensor<256x384xbf16>
    %17 = "trn.matmul"(%14, %15) : (tensor<256x128xbf16>, tensor<128x384xbf16>) -> tensor<256x384xf32>
    %18 = "trn.tensor_tensor"(%16, %17) {op = "add"} : (tensor<256x384xbf16>, tensor<256x384xf32>) -> tensor<256x384xf32>
    %19 = "trn.convert"(%18) : (tensor<256x384xf32>) -> tensor<256x384xbf16>
    "trn.yield"(%19) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x384xbf16>) -> ()
  }) {gemm_block = 1 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x384xbf16>
  %1 = "trn.kernel"() ({
    %14 = "trn.reshape"(%0) : (tensor<256x384xbf16>) -> tensor<2x128x3x2x64xbf16>
    %15 = "trn.transpose"(%14) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x128x3x2x64xbf16>) -> tensor<3x2x2x128x64xbf16>
    %16 = "trn.view"(%15) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>} : (tensor<3x2x2x128x64xbf16>) -> tensor<1x2x2x128x64xbf16>
    %17 = "trn.reshape"(%16) : (tensor<1x2x2x128x64xbf16>) -> tensor<4x128x64xbf16>
    %18 = "trn.view"(%15) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>} : (tensor<3x2x2x128x64xbf16>) -> tensor<1x2x2x128x64xbf16>
    %19 = "trn.reshape"(%18) : (tensor<1x2x2x128x64xbf16>) -> tensor<2x2x128x64xbf16>
    %20 = "trn.transpose"(%19) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<2x2x128x64xbf16>) -> tensor<2x2x64x128xbf16>
    %21 = "trn.reshape"(%20) : (tensor<2x2x64x128xbf16>) -> tensor<4x64x128xbf16>
    %22 = "trn.matmul"(%17, %21) : (tensor<4x128x64xbf16>, tensor<4x64x128xbf16>) -> tensor<4x128x128xf32>
    %23 = "trn.convert"(%22) : (tensor<4x128x128xf32>) -> tensor<4x128x128xbf16>
    %24 = "trn.reshape"(%23) : (tensor<4x128x128xbf16>) -> tensor<2x2x128x128xbf16>
    %25 = "trn.tensor_scalar"(%24) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<2x2x128x128xbf16>) -> tensor<2x2x128x128xf32>
    %26 = "trn.reduce"(%25) {dimensions = array<i64: 3>, op = "max"} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128xf32>
    %27 = "trn.broadcast"(%26) {dimensions = array<i64: 3>} : (tensor<2x2x128xf32>) -> tensor<2x2x128x128xf32>
    %28 = "trn.tensor_tensor"(%25, %27) {op = "sub"} : (tensor<2x2x128x128xf32>, tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %29 = "trn.activation"(%28) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %30 = "trn.reduce"(%29) {dimensions = array<i64: 3>, op = "add"} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128xf32>
    %31 = "trn.broadcast"(%30) {dimensions = array<i64: 3>} : (tensor<2x2x128xf32>) -> tensor<2x2x128x128xf32>
    %32 = "trn.tensor_tensor"(%29, %31) {op = "div"} : (tensor<2x2x128x128xf32>, tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %33 = "trn.convert"(%32) : (tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xbf16>
    %34 = "trn.reshape"(%33) : (tensor<2x2x128x128xbf16>) -> tensor<4x128x128xbf16>
    %35 = "trn.reshape"(%0) : (tensor<256x384xbf16>) -> tensor<2x128x3x2x64xbf16>
    %36 = "trn.transpose"(%35) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x128x3x2x64xbf16>) -> tensor<3x2x2x128x64xbf16>
    %37 = "trn.view"(%36) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>} : (tensor<3x2x2x128x64xbf16>) -> tensor<1x2x2x128x64xbf16>
    %38 = "trn.reshape"(%37) : (tensor<1x2x2x128x64xbf16>) -> tensor<4x128x64xbf16>
    %39 = "trn.matmul"(%34, %38) : (tensor<4x128x128xbf16>, tensor<4x128x64xbf16>) -> tensor<4x128x64xf32>
    %40 = "trn.convert"(%39) : (tensor<4x128x64xf32>) -> tensor<4x128x64xbf16>
    %41 = "trn.reshape"(%40) : (tensor<4x128x64xbf16>) -> tensor<2x2x128x64xbf16>
    %42 = "trn.transpose"(%41) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x128x64xbf16>) -> tensor<2x128x2x64xbf16>
    "trn.yield"(%42) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2x128x2x64xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x2x64xbf16>
  %2 = "trn.kernel"() ({
    %14 = "trn.reshape"(%1) : (tensor<2x128x2x64xbf16>) -> tensor<256x128xbf16>
    %15 = "trn.transpose"(%arg3) {permutation = array<i64: 1, 0>} : (tensor<128x128xbf16>) -> tensor<128x128xbf16>
    %16 = "trn.broadcast"(%arg4) {dimensions = array<i64: 0>} : (tensor<128xbf16>) -> tensor<256x128xbf16>
    %17 = "trn.reshape"(%arg0) : (tensor<2x128x128xbf16>) -> tensor<256x128xbf16>
    %18 = "trn.matmul"(%14, %15) : (tensor<256x128xbf16>, tensor<128x128xbf16>) -> tensor<256x128xf32>
    %19 = "trn.tensor_tensor"(%16, %18) {op = "add"} : (tensor<256x128xbf16>, tensor<256x128xf32>) -> tensor<256x128xf32>
    %20 = "trn.tensor_tensor"(%17, %19) {op = "add"} : (tensor<256x128xbf16>, tensor<256x128xf32>) -> tensor<256x128xf32>
    %21 = "trn.convert"(%20) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
    "trn.yield"(%21) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x128xbf16>) -> ()
  }) {gemm_block = 1 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x128xbf16>
  return %2 : tensor<256x128xbf16>
}

// -----

// Tests that in inference, where nothing reads the attention's output but the function (no
// output projection joins), the QKV projection still joins in front and the kernel yields
// the output alone, unflattened.
// CHECK-LABEL: func.func @inference_attention_only
// CHECK-NEXT: %[[K:.*]] = "trn.kernel"() ({
// CHECK: trn.attention_input
// CHECK: %[[O:.*]] = "trn.transpose"(%{{.*}}) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x128x64xbf16>) -> tensor<2x128x2x64xbf16>
// CHECK-NEXT: "trn.yield"(%[[O]]) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2x128x2x64xbf16>) -> ()
// CHECK-NEXT: }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x2x64xbf16>
// CHECK-NEXT: return %[[K]] : tensor<2x128x2x64xbf16>
// ISA-LABEL: func.func @inference_attention_only
// ISA-NOT: "nisa.alloc"() {memory = "hbm"}
// ISA: return
// ISA-NOSAVED-LABEL: func.func @inference_attention_only
// ISA-NOSAVED: "nisa.alloc"() {memory = "hbm"} : () -> memref<256x384xbf16, "hbm">
func.func @inference_attention_only(%arg0: tensor<2x128x128xbf16>, %arg1: tensor<384x128xbf16>, %arg2: tensor<384xbf16>) -> tensor<2x128x2x64xbf16> {
  %0 = "trn.kernel"() ({
    %14 = "trn.reshape"(%arg0) : (tensor<2x128x128xbf16>) -> tensor<256x128xbf16>
    %15 = "trn.transpose"(%arg1) {permutation = array<i64: 1, 0>} : (tensor<384x128xbf16>) -> tensor<128x384xbf16>
    %16 = "trn.broadcast"(%arg2) {dimensions = array<i64: 0>} : (tensor<384xbf16>) -> tensor<256x384xbf16>
    %17 = "trn.matmul"(%14, %15) : (tensor<256x128xbf16>, tensor<128x384xbf16>) -> tensor<256x384xf32>
    %18 = "trn.tensor_tensor"(%16, %17) {op = "add"} : (tensor<256x384xbf16>, tensor<256x384xf32>) -> tensor<256x384xf32>
    %19 = "trn.convert"(%18) : (tensor<256x384xf32>) -> tensor<256x384xbf16>
    "trn.yield"(%19) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x384xbf16>) -> ()
  }) {gemm_block = 1 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x384xbf16>
  %1 = "trn.kernel"() ({
    %14 = "trn.reshape"(%0) : (tensor<256x384xbf16>) -> tensor<2x128x3x2x64xbf16>
    %15 = "trn.transpose"(%14) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x128x3x2x64xbf16>) -> tensor<3x2x2x128x64xbf16>
    %16 = "trn.view"(%15) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>} : (tensor<3x2x2x128x64xbf16>) -> tensor<1x2x2x128x64xbf16>
    %17 = "trn.reshape"(%16) : (tensor<1x2x2x128x64xbf16>) -> tensor<4x128x64xbf16>
    %18 = "trn.view"(%15) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>} : (tensor<3x2x2x128x64xbf16>) -> tensor<1x2x2x128x64xbf16>
    %19 = "trn.reshape"(%18) : (tensor<1x2x2x128x64xbf16>) -> tensor<2x2x128x64xbf16>
    %20 = "trn.transpose"(%19) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<2x2x128x64xbf16>) -> tensor<2x2x64x128xbf16>
    %21 = "trn.reshape"(%20) : (tensor<2x2x64x128xbf16>) -> tensor<4x64x128xbf16>
    %22 = "trn.matmul"(%17, %21) : (tensor<4x128x64xbf16>, tensor<4x64x128xbf16>) -> tensor<4x128x128xf32>
    %23 = "trn.convert"(%22) : (tensor<4x128x128xf32>) -> tensor<4x128x128xbf16>
    %24 = "trn.reshape"(%23) : (tensor<4x128x128xbf16>) -> tensor<2x2x128x128xbf16>
    %25 = "trn.tensor_scalar"(%24) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<2x2x128x128xbf16>) -> tensor<2x2x128x128xf32>
    %26 = "trn.reduce"(%25) {dimensions = array<i64: 3>, op = "max"} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128xf32>
    %27 = "trn.broadcast"(%26) {dimensions = array<i64: 3>} : (tensor<2x2x128xf32>) -> tensor<2x2x128x128xf32>
    %28 = "trn.tensor_tensor"(%25, %27) {op = "sub"} : (tensor<2x2x128x128xf32>, tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %29 = "trn.activation"(%28) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %30 = "trn.reduce"(%29) {dimensions = array<i64: 3>, op = "add"} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128xf32>
    %31 = "trn.broadcast"(%30) {dimensions = array<i64: 3>} : (tensor<2x2x128xf32>) -> tensor<2x2x128x128xf32>
    %32 = "trn.tensor_tensor"(%29, %31) {op = "div"} : (tensor<2x2x128x128xf32>, tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %33 = "trn.convert"(%32) : (tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xbf16>
    %34 = "trn.reshape"(%33) : (tensor<2x2x128x128xbf16>) -> tensor<4x128x128xbf16>
    %35 = "trn.reshape"(%0) : (tensor<256x384xbf16>) -> tensor<2x128x3x2x64xbf16>
    %36 = "trn.transpose"(%35) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x128x3x2x64xbf16>) -> tensor<3x2x2x128x64xbf16>
    %37 = "trn.view"(%36) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>} : (tensor<3x2x2x128x64xbf16>) -> tensor<1x2x2x128x64xbf16>
    %38 = "trn.reshape"(%37) : (tensor<1x2x2x128x64xbf16>) -> tensor<4x128x64xbf16>
    %39 = "trn.matmul"(%34, %38) : (tensor<4x128x128xbf16>, tensor<4x128x64xbf16>) -> tensor<4x128x64xf32>
    %40 = "trn.convert"(%39) : (tensor<4x128x64xf32>) -> tensor<4x128x64xbf16>
    %41 = "trn.reshape"(%40) : (tensor<4x128x64xbf16>) -> tensor<2x2x128x64xbf16>
    %42 = "trn.transpose"(%41) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x128x64xbf16>) -> tensor<2x128x2x64xbf16>
    "trn.yield"(%42) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2x128x2x64xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x2x64xbf16>
  return %1 : tensor<2x128x2x64xbf16>
}

// -----

// Tests that in front of such a pre-norm inference attention, the layer norm's rows kernel
// whose result only the QKV projection reads joins too, its result op marked
// trn.input_rows: one kernel, whose lowering keeps the norm's rows on chip for the
// projection (no HBM buffer; with input-rows=false the norm's output is stored).
// CHECK-LABEL: func.func @inference_norm_attention_and_projection
// CHECK-NEXT: %[[K:.*]] = "trn.kernel"() ({
// CHECK: %[[N:.*]] = "trn.convert"(%{{.*}}) {trn.input_rows} : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
// CHECK-NEXT: "trn.reshape"(%[[N]]) : (tensor<2x128x128xbf16>) -> tensor<256x128xbf16>
// CHECK: trn.attention_input
// CHECK: trn.attention_output
// CHECK: }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x128xbf16>
// CHECK-NEXT: return %[[K]] : tensor<256x128xbf16>
// ISA-LABEL: func.func @inference_norm_attention_and_projection
// ISA-NOT: "nisa.alloc"() {memory = "hbm"}
// ISA: return
// ISA-NOROWS-LABEL: func.func @inference_norm_attention_and_projection
// ISA-NOROWS: "nisa.alloc"() {memory = "hbm"} : () -> memref<2x128x128xbf16, "hbm">
func.func @inference_norm_attention_and_projection(%arg0: tensor<2x128x128xbf16>, %arg1: tensor<384x128xbf16>, %arg2: tensor<384xbf16>, %arg3: tensor<128x128xbf16>, %arg4: tensor<128xbf16>, %arg5: tensor<128xbf16>, %arg6: tensor<128xbf16>) -> tensor<256x128xbf16> {
  %n = "trn.kernel"() ({
    %14 = "trn.broadcast"(%arg5) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<2x128x128xbf16>
    %15 = "trn.broadcast"(%arg6) {dimensions = array<i64: 0, 1>} : (tensor<128xbf16>) -> tensor<2x128x128xbf16>
    %16 = "trn.reduce"(%arg0) {dimensions = array<i64: 2>, op = "add"} : (tensor<2x128x128xbf16>) -> tensor<2x128xbf16>
    %17 = "trn.tensor_scalar"(%16) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<2x128xbf16>) -> tensor<2x128xf32>
    %18 = "trn.convert"(%17) : (tensor<2x128xf32>) -> tensor<2x128xbf16>
    %20 = "trn.broadcast"(%18) {dimensions = array<i64: 2>} : (tensor<2x128xbf16>) -> tensor<2x128x128xbf16>
    %21 = "trn.tensor_tensor"(%arg0, %20) {op = "sub"} : (tensor<2x128x128xbf16>, tensor<2x128x128xbf16>) -> tensor<2x128x128xf32>
    %22 = "trn.tensor_tensor"(%21, %21) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %23 = "trn.convert"(%22) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    %24 = "trn.reduce"(%23) {dimensions = array<i64: 2>, op = "add"} : (tensor<2x128x128xbf16>) -> tensor<2x128xbf16>
    %25 = "trn.tensor_scalar"(%24) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<2x128xbf16>) -> tensor<2x128xf32>
    %26 = "trn.tensor_scalar"(%25) {op = "add", reverse = false, scalar = 9.99999974E-6 : f32} : (tensor<2x128xf32>) -> tensor<2x128xf32>
    %27 = "trn.activation"(%26) {bias = 0.000000e+00 : f32, func = "rsqrt", scale = 1.000000e+00 : f32} : (tensor<2x128xf32>) -> tensor<2x128xf32>
    %28 = "trn.convert"(%27) : (tensor<2x128xf32>) -> tensor<2x128xbf16>
    %30 = "trn.broadcast"(%28) {dimensions = array<i64: 2>} : (tensor<2x128xbf16>) -> tensor<2x128x128xbf16>
    %31 = "trn.tensor_tensor"(%21, %30) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xbf16>) -> tensor<2x128x128xf32>
    %32 = "trn.tensor_tensor"(%31, %14) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xbf16>) -> tensor<2x128x128xf32>
    %33 = "trn.tensor_tensor"(%32, %15) {op = "add"} : (tensor<2x128x128xf32>, tensor<2x128x128xbf16>) -> tensor<2x128x128xf32>
    %34 = "trn.convert"(%33) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    "trn.yield"(%34) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2x128x128xbf16>) -> ()
  }) {free_tile = 256 : i64, kind = "rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x128xbf16>
  %0 = "trn.kernel"() ({
    %14 = "trn.reshape"(%n) : (tensor<2x128x128xbf16>) -> tensor<256x128xbf16>
    %15 = "trn.transpose"(%arg1) {permutation = array<i64: 1, 0>} : (tensor<384x128xbf16>) -> tensor<128x384xbf16>
    %16 = "trn.broadcast"(%arg2) {dimensions = array<i64: 0>} : (tensor<384xbf16>) -> tensor<256x384xbf16>
    %17 = "trn.matmul"(%14, %15) : (tensor<256x128xbf16>, tensor<128x384xbf16>) -> tensor<256x384xf32>
    %18 = "trn.tensor_tensor"(%16, %17) {op = "add"} : (tensor<256x384xbf16>, tensor<256x384xf32>) -> tensor<256x384xf32>
    %19 = "trn.convert"(%18) : (tensor<256x384xf32>) -> tensor<256x384xbf16>
    "trn.yield"(%19) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x384xbf16>) -> ()
  }) {gemm_block = 1 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x384xbf16>
  %1 = "trn.kernel"() ({
    %14 = "trn.reshape"(%0) : (tensor<256x384xbf16>) -> tensor<2x128x3x2x64xbf16>
    %15 = "trn.transpose"(%14) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x128x3x2x64xbf16>) -> tensor<3x2x2x128x64xbf16>
    %16 = "trn.view"(%15) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>} : (tensor<3x2x2x128x64xbf16>) -> tensor<1x2x2x128x64xbf16>
    %17 = "trn.reshape"(%16) : (tensor<1x2x2x128x64xbf16>) -> tensor<4x128x64xbf16>
    %18 = "trn.view"(%15) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>} : (tensor<3x2x2x128x64xbf16>) -> tensor<1x2x2x128x64xbf16>
    %19 = "trn.reshape"(%18) : (tensor<1x2x2x128x64xbf16>) -> tensor<2x2x128x64xbf16>
    %20 = "trn.transpose"(%19) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<2x2x128x64xbf16>) -> tensor<2x2x64x128xbf16>
    %21 = "trn.reshape"(%20) : (tensor<2x2x64x128xbf16>) -> tensor<4x64x128xbf16>
    %22 = "trn.matmul"(%17, %21) : (tensor<4x128x64xbf16>, tensor<4x64x128xbf16>) -> tensor<4x128x128xf32>
    %23 = "trn.convert"(%22) : (tensor<4x128x128xf32>) -> tensor<4x128x128xbf16>
    %24 = "trn.reshape"(%23) : (tensor<4x128x128xbf16>) -> tensor<2x2x128x128xbf16>
    %25 = "trn.tensor_scalar"(%24) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<2x2x128x128xbf16>) -> tensor<2x2x128x128xf32>
    %26 = "trn.reduce"(%25) {dimensions = array<i64: 3>, op = "max"} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128xf32>
    %27 = "trn.broadcast"(%26) {dimensions = array<i64: 3>} : (tensor<2x2x128xf32>) -> tensor<2x2x128x128xf32>
    %28 = "trn.tensor_tensor"(%25, %27) {op = "sub"} : (tensor<2x2x128x128xf32>, tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %29 = "trn.activation"(%28) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %30 = "trn.reduce"(%29) {dimensions = array<i64: 3>, op = "add"} : (tensor<2x2x128x128xf32>) -> tensor<2x2x128xf32>
    %31 = "trn.broadcast"(%30) {dimensions = array<i64: 3>} : (tensor<2x2x128xf32>) -> tensor<2x2x128x128xf32>
    %32 = "trn.tensor_tensor"(%29, %31) {op = "div"} : (tensor<2x2x128x128xf32>, tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xf32>
    %33 = "trn.convert"(%32) : (tensor<2x2x128x128xf32>) -> tensor<2x2x128x128xbf16>
    %34 = "trn.reshape"(%33) : (tensor<2x2x128x128xbf16>) -> tensor<4x128x128xbf16>
    %35 = "trn.reshape"(%0) : (tensor<256x384xbf16>) -> tensor<2x128x3x2x64xbf16>
    %36 = "trn.transpose"(%35) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x128x3x2x64xbf16>) -> tensor<3x2x2x128x64xbf16>
    %37 = "trn.view"(%36) {indexing_map = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 2, d1, d2, d3, d4)>} : (tensor<3x2x2x128x64xbf16>) -> tensor<1x2x2x128x64xbf16>
    %38 = "trn.reshape"(%37) : (tensor<1x2x2x128x64xbf16>) -> tensor<4x128x64xbf16>
    %39 = "trn.matmul"(%34, %38) : (tensor<4x128x128xbf16>, tensor<4x128x64xbf16>) -> tensor<4x128x64xf32>
    %40 = "trn.convert"(%39) : (tensor<4x128x64xf32>) -> tensor<4x128x64xbf16>
    %41 = "trn.reshape"(%40) : (tensor<4x128x64xbf16>) -> tensor<2x2x128x64xbf16>
    %42 = "trn.transpose"(%41) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x2x128x64xbf16>) -> tensor<2x128x2x64xbf16>
    "trn.yield"(%42) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2x128x2x64xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x2x64xbf16>
  %2 = "trn.kernel"() ({
    %14 = "trn.reshape"(%1) : (tensor<2x128x2x64xbf16>) -> tensor<256x128xbf16>
    %15 = "trn.transpose"(%arg3) {permutation = array<i64: 1, 0>} : (tensor<128x128xbf16>) -> tensor<128x128xbf16>
    %16 = "trn.broadcast"(%arg4) {dimensions = array<i64: 0>} : (tensor<128xbf16>) -> tensor<256x128xbf16>
    %17 = "trn.reshape"(%arg0) : (tensor<2x128x128xbf16>) -> tensor<256x128xbf16>
    %18 = "trn.matmul"(%14, %15) : (tensor<256x128xbf16>, tensor<128x128xbf16>) -> tensor<256x128xf32>
    %19 = "trn.tensor_tensor"(%16, %18) {op = "add"} : (tensor<256x128xbf16>, tensor<256x128xf32>) -> tensor<256x128xf32>
    %20 = "trn.tensor_tensor"(%17, %19) {op = "add"} : (tensor<256x128xbf16>, tensor<256x128xf32>) -> tensor<256x128xf32>
    %21 = "trn.convert"(%20) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
    "trn.yield"(%21) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x128xbf16>) -> ()
  }) {gemm_block = 1 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x128xbf16>
  return %2 : tensor<256x128xbf16>
}
