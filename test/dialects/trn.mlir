// RUN: neuron-opt --split-input-file %s | neuron-opt --split-input-file | FileCheck %s

// Tests that every trn op parses, verifies and prints back in generic form (round trip).
// CHECK-LABEL: func.func @ops
// CHECK: "trn.transpose"(%{{.*}}) {permutation = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
// CHECK: "trn.matmul"(%{{.*}}, %{{.*}}) : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
// CHECK: "trn.broadcast"(%{{.*}}) {dimensions = array<i64: 0>} : (tensor<8xf32>) -> tensor<2x8xf32>
// CHECK: "trn.tensor_tensor"(%{{.*}}, %{{.*}}) {op = "add"}
// CHECK: "trn.activation"(%{{.*}}) {bias = 0.000000e+00 : f32, func = "gelu", scale = 1.000000e+00 : f32}
// CHECK: "trn.tensor_scalar"(%{{.*}}) {op = "sub", reverse = true, scalar = 1.000000e+00 : f32}
// CHECK: "trn.reshape"(%{{.*}}) : (tensor<2x8xf32>) -> tensor<16xf32>
// CHECK: "trn.convert"(%{{.*}}) : (tensor<16xf32>) -> tensor<16xbf16>
// CHECK: "trn.fill"() {value = 0.000000e+00 : f32} : () -> tensor<16xbf16>
// CHECK: "trn.tensor_tensor"(%{{.*}}, %{{.*}}) {op = "gt"} : (tensor<16xbf16>, tensor<16xbf16>) -> tensor<16xi1>
// CHECK: "trn.select"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<16xi1>, tensor<16xbf16>, tensor<16xbf16>) -> tensor<16xbf16>
// CHECK: "trn.reduce"(%{{.*}}) {dimensions = array<i64: 0>, op = "max"} : (tensor<16xbf16>) -> tensor<bf16>
func.func @ops(%w: tensor<8x4xf32>, %x: tensor<2x4xf32>, %b: tensor<8xf32>) -> tensor<bf16> {
  %wt = "trn.transpose"(%w) {permutation = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %y = "trn.matmul"(%x, %wt) : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<8xf32>) -> tensor<2x8xf32>
  %z = "trn.tensor_tensor"(%y, %bb) {op = "add"} : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %g = "trn.activation"(%z) {func = "gelu", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %s = "trn.tensor_scalar"(%g) {op = "sub", scalar = 1.0 : f32, reverse = true} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %r = "trn.reshape"(%s) : (tensor<2x8xf32>) -> tensor<16xf32>
  %c = "trn.convert"(%r) : (tensor<16xf32>) -> tensor<16xbf16>
  %zero = "trn.fill"() {value = 0.0 : f32} : () -> tensor<16xbf16>
  %m = "trn.tensor_tensor"(%c, %zero) {op = "gt"} : (tensor<16xbf16>, tensor<16xbf16>) -> tensor<16xi1>
  %sel = "trn.select"(%m, %c, %zero) : (tensor<16xi1>, tensor<16xbf16>, tensor<16xbf16>) -> tensor<16xbf16>
  %red = "trn.reduce"(%sel) {op = "max", dimensions = array<i64: 0>} : (tensor<16xbf16>) -> tensor<bf16>
  return %red : tensor<bf16>
}

// -----

// Tests that a fused kernel with a region round-trips, capturing values from above.
// CHECK-LABEL: func.func @kernel
// CHECK: %[[K:.*]] = "trn.kernel"() ({
// CHECK-NEXT: "trn.matmul"(%arg0, %arg1)
// CHECK-NEXT: "trn.activation"
// CHECK-NEXT: "trn.yield"
// CHECK-NEXT: }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x8xf32>
// CHECK: return %[[K]]
func.func @kernel(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>) -> tensor<2x8xf32> {
  %k = "trn.kernel"() ({
    %y = "trn.matmul"(%x, %w) : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
    %r = "trn.activation"(%y) {func = "relu", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<2x8xf32>) -> tensor<2x8xf32>
    "trn.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2x8xf32>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x8xf32>
  return %k : tensor<2x8xf32>
}

// -----

// Tests that a kernel may yield a second value it computes on the way, of another type.
// CHECK-LABEL: func.func @kernel_with_two_results
// CHECK: %[[K:.*]]:2 = "trn.kernel"() ({
// CHECK: "trn.yield"(%{{.*}}, %{{.*}}) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<2x8xbf16>, tensor<2x8xf32>) -> ()
// CHECK-NEXT: }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<2x8xbf16>, tensor<2x8xf32>)
// CHECK: return %[[K]]#0, %[[K]]#1
func.func @kernel_with_two_results(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>) -> (tensor<2x8xbf16>, tensor<2x8xf32>) {
  %k:2 = "trn.kernel"() ({
    %y = "trn.matmul"(%x, %w) : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
    %r = "trn.activation"(%y) {func = "gelu", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<2x8xf32>) -> tensor<2x8xf32>
    %c = "trn.convert"(%r) : (tensor<2x8xf32>) -> tensor<2x8xbf16>
    "trn.yield"(%c, %y) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<2x8xbf16>, tensor<2x8xf32>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<2x8xbf16>, tensor<2x8xf32>)
  return %k#0, %k#1 : tensor<2x8xbf16>, tensor<2x8xf32>
}

// -----

// Tests that a kernel's results after the first come in two groups, each of one type (a
// norm's output and the residual sum it saves, then its per-row mean and 1/std), counted
// by resultSegmentSizes and the yield's operandSegmentSizes.
// CHECK-LABEL: func.func @kernel_with_two_result_groups
// CHECK: %[[K:.*]]:4 = "trn.kernel"() ({
// CHECK: "trn.yield"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) {operandSegmentSizes = array<i32: 1, 1, 2>} : (tensor<2x8xbf16>, tensor<16xbf16>, tensor<2xf32>, tensor<2xf32>) -> ()
// CHECK-NEXT: }) {kind = "rows", resultSegmentSizes = array<i32: 1, 1, 2>} : () -> (tensor<2x8xbf16>, tensor<16xbf16>, tensor<2xf32>, tensor<2xf32>)
func.func @kernel_with_two_result_groups(%x: tensor<2x8xbf16>) -> (tensor<2x8xbf16>, tensor<16xbf16>, tensor<2xf32>, tensor<2xf32>) {
  %k:4 = "trn.kernel"() ({
    %f = "trn.reshape"(%x) : (tensor<2x8xbf16>) -> tensor<16xbf16>
    %w = "trn.convert"(%x) : (tensor<2x8xbf16>) -> tensor<2x8xf32>
    %s = "trn.reduce"(%w) {dimensions = array<i64: 1>, op = "add"} : (tensor<2x8xf32>) -> tensor<2xf32>
    %m = "trn.reduce"(%w) {dimensions = array<i64: 1>, op = "max"} : (tensor<2x8xf32>) -> tensor<2xf32>
    "trn.yield"(%x, %f, %s, %m) {operandSegmentSizes = array<i32: 1, 1, 2>} : (tensor<2x8xbf16>, tensor<16xbf16>, tensor<2xf32>, tensor<2xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 1, 2>} : () -> (tensor<2x8xbf16>, tensor<16xbf16>, tensor<2xf32>, tensor<2xf32>)
  return %k#0, %k#1, %k#2, %k#3 : tensor<2x8xbf16>, tensor<16xbf16>, tensor<2xf32>, tensor<2xf32>
}

// -----

// Tests that the data-movement and index ops round-trip: view (affine map), empty,
// insert_slice, iota.
// CHECK-LABEL: func.func @movement
// CHECK: "trn.view"(%arg0) {indexing_map = #{{.*}}} : (tensor<4x16xf32>) -> tensor<4x8xf32>
// CHECK: "trn.empty"() : () -> tensor<4x24xf32>
// CHECK: "trn.insert_slice"(%{{.*}}, %{{.*}}) {offsets = array<i64: 0, 8>, strides = array<i64: 1, 2>}
// CHECK: "trn.iota"() {dimension = 1 : i64} : () -> tensor<4x24xi64>
func.func @movement(%x: tensor<4x16xf32>) -> (tensor<4x24xf32>, tensor<4x24xi64>) {
  %v = "trn.view"(%x) {indexing_map = affine_map<(d0, d1) -> (d0, 15 - d1 * 2)>} : (tensor<4x16xf32>) -> tensor<4x8xf32>
  %e = "trn.empty"() : () -> tensor<4x24xf32>
  %i = "trn.insert_slice"(%e, %v) {offsets = array<i64: 0, 8>, strides = array<i64: 1, 2>} : (tensor<4x24xf32>, tensor<4x8xf32>) -> tensor<4x24xf32>
  %k = "trn.iota"() {dimension = 1 : i64} : () -> tensor<4x24xi64>
  return %i, %k : tensor<4x24xf32>, tensor<4x24xi64>
}

// -----

// Tests that convolution, pooling and gather round-trip.
// CHECK-LABEL: func.func @windows
// CHECK: "trn.conv"(%arg0, %arg1) {dilations = array<i64: 1, 1>, groups = 1 : i64, strides = array<i64: 1, 1>}
// CHECK: "trn.pool"(%arg0) {dilations = array<i64: 1, 1>, op = "max", strides = array<i64: 2, 2>, window = array<i64: 2, 2>}
// CHECK: "trn.gather"(%arg2, %arg3) {free_strides = array<i64: 1>, offset = 0 : i64, row_stride = 8 : i64}
func.func @windows(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %t: tensor<10x8xf32>, %i: tensor<5xi64>) -> (tensor<1x4x6x6xf32>, tensor<1x3x4x4xf32>, tensor<5x8xf32>) {
  %c = "trn.conv"(%x, %w) {strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
  %p = "trn.pool"(%x) {op = "max", window = array<i64: 2, 2>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32>
  %g = "trn.gather"(%t, %i) {offset = 0 : i64, row_stride = 8 : i64, free_strides = array<i64: 1>} : (tensor<10x8xf32>, tensor<5xi64>) -> tensor<5x8xf32>
  return %c, %p, %g : tensor<1x4x6x6xf32>, tensor<1x3x4x4xf32>, tensor<5x8xf32>
}

// -----

// Tests that a pool (or conv) may read fewer windows than its input holds, as a ceil-mode pool
// whose input is padded for a last window does.
// CHECK-LABEL: func.func @fewer_windows
// CHECK: "trn.pool"(%arg0) {{.*}} : (tensor<1x3x11x11xf32>) -> tensor<1x3x9x10xf32>
func.func @fewer_windows(%x: tensor<1x3x11x11xf32>) -> tensor<1x3x9x10xf32> {
  %p = "trn.pool"(%x) {op = "add", window = array<i64: 2, 2>, strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>} : (tensor<1x3x11x11xf32>) -> tensor<1x3x9x10xf32>
  return %p : tensor<1x3x9x10xf32>
}

// -----

// Tests that trn.scan round-trips.
// CHECK-LABEL: func.func @scan
// CHECK: "trn.scan"(%arg0) {dimension = 1 : i64, op = "add"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
func.func @scan(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = "trn.scan"(%x) {op = "add", dimension = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %s : tensor<4x8xf32>
}
