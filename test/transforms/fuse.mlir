// RUN: neuron-opt --split-input-file --trn-fuse %s | FileCheck %s
// RUN: neuron-opt --split-input-file --trn-fuse="matmul-epilogue=false elementwise=false" %s | FileCheck %s --check-prefix=OFF
// RUN: neuron-opt --split-input-file --trn-fuse="keep-roundings=true" %s | FileCheck %s --check-prefix=KEEP
// RUN: not neuron-opt --trn-fuse %S/Inputs/fuse-invalid.mlir 2>&1 | FileCheck %s --check-prefix=ERR

// Tests that a matmul, its bias add and activation become one kernel, and that the views
// feeding it (weight transpose, bias broadcast) are copied into the kernel.
// CHECK-LABEL: func.func @linear_relu
// CHECK: %[[K:.*]] = "trn.kernel"() ({
// CHECK-NEXT: "trn.transpose"(%arg0)
// CHECK-NEXT: "trn.broadcast"(%arg1)
// CHECK-NEXT: "trn.matmul"
// CHECK-NEXT: "trn.tensor_tensor"
// CHECK-NEXT: "trn.activation"
// CHECK-NEXT: "trn.yield"
// CHECK-NEXT: }) {kind = "matmul"}
// CHECK-NEXT: return %[[K]]
// OFF-LABEL: func.func @linear_relu
// OFF-COUNT-3: "trn.kernel"
func.func @linear_relu(%w: tensor<16x8xf32>, %b: tensor<16xf32>, %x: tensor<4x8xf32>) -> tensor<4x16xf32> {
  %t = "trn.transpose"(%w) {permutation = array<i64: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %y = "trn.matmul"(%x, %t) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<16xf32>) -> tensor<4x16xf32>
  %z = "trn.tensor_tensor"(%bb, %y) {op = "add"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %r = "trn.activation"(%z) {func = "relu", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}

// -----

// Tests that an elementwise chain becomes one kernel, and that a value with two users ends
// a chain (it must be stored for the second user).
// CHECK-LABEL: func.func @chain
// CHECK: %[[A:.*]] = "trn.kernel"() ({
// CHECK-NEXT: "trn.activation"(%arg0) {{.*}}func = "exp"
// CHECK-NEXT: "trn.yield"
// CHECK: %[[B:.*]] = "trn.kernel"() ({
// CHECK-NEXT: "trn.tensor_scalar"(%[[A]])
// CHECK-NEXT: "trn.tensor_tensor"({{.*}}, %[[A]])
// CHECK-NEXT: "trn.yield"
// CHECK: return %[[B]]
func.func @chain(%x: tensor<8xf32>) -> tensor<8xf32> {
  %e = "trn.activation"(%x) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<8xf32>) -> tensor<8xf32>
  %s = "trn.tensor_scalar"(%e) {op = "mul", scalar = 2.0 : f32, reverse = false} : (tensor<8xf32>) -> tensor<8xf32>
  %t = "trn.tensor_tensor"(%s, %e) {op = "add"} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %t : tensor<8xf32>
}

// -----

// Tests that an op joining two chains lands in exactly one kernel: the first chain takes the
// join, the second chain stops before it.
// CHECK-LABEL: func.func @join
// CHECK: %[[S:.*]] = "trn.kernel"() ({
// CHECK-NEXT: "trn.tensor_scalar"(%arg0)
// CHECK-NEXT: "trn.yield"
// CHECK: %[[J:.*]] = "trn.kernel"() ({
// CHECK-NEXT: "trn.activation"(%arg0)
// CHECK-NEXT: "trn.tensor_tensor"({{.*}}, %arg0) {op = "mul"}
// CHECK-NEXT: "trn.tensor_tensor"({{.*}}, %[[S]]) {op = "add"}
// CHECK-NEXT: "trn.yield"
// CHECK: return %[[J]]
func.func @join(%x: tensor<8xf32>) -> tensor<8xf32> {
  %e = "trn.activation"(%x) {func = "sigmoid", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<8xf32>) -> tensor<8xf32>
  %m = "trn.tensor_tensor"(%e, %x) {op = "mul"} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %s = "trn.tensor_scalar"(%x) {op = "mul", scalar = 2.0 : f32, reverse = false} : (tensor<8xf32>) -> tensor<8xf32>
  %t = "trn.tensor_tensor"(%m, %s) {op = "add"} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %t : tensor<8xf32>
}

// -----

// Tests that inside a kernel a bf16 rounding read only by the next elementwise op is dropped
// (the bias add reads the fp32 matmul result), while the rounding of the stored result stays;
// keep-roundings=true keeps both.
// CHECK-LABEL: func.func @bf16_linear
// CHECK: %[[Y:.*]] = "trn.matmul"
// CHECK-NEXT: %[[Z:.*]] = "trn.tensor_tensor"(%{{.*}}, %[[Y]]) {op = "add"} : (tensor<4x16xbf16>, tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[R:.*]] = "trn.convert"(%[[Z]]) : (tensor<4x16xf32>) -> tensor<4x16xbf16>
// CHECK-NEXT: "trn.yield"(%[[R]])
// KEEP-LABEL: func.func @bf16_linear
// KEEP-COUNT-2: "trn.convert"
func.func @bf16_linear(%x: tensor<4x8xbf16>, %w: tensor<8x16xbf16>, %b: tensor<16xbf16>) -> tensor<4x16xbf16> {
  %y = "trn.matmul"(%x, %w) : (tensor<4x8xbf16>, tensor<8x16xbf16>) -> tensor<4x16xf32>
  %yb = "trn.convert"(%y) : (tensor<4x16xf32>) -> tensor<4x16xbf16>
  %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<16xbf16>) -> tensor<4x16xbf16>
  %z = "trn.tensor_tensor"(%bb, %yb) {op = "add"} : (tensor<4x16xbf16>, tensor<4x16xbf16>) -> tensor<4x16xf32>
  %r = "trn.convert"(%z) : (tensor<4x16xf32>) -> tensor<4x16xbf16>
  return %r : tensor<4x16xbf16>
}

// ERR: fuse-invalid.mlir:3:8: error: 'trn.tensor_tensor' op operand #1 shape [4] differs from result shape [8]
