// RUN: neuron-opt --split-input-file --convert-trn-to-nisa %s | FileCheck %s
// RUN: neuron-opt --split-input-file --convert-trn-to-nisa="hidden-spans=false" %s | FileCheck %s --check-prefix=OFF

// Tests convert-trn-to-nisa hidden-spans on an mlp kernel whose 1024 output features leave
// PSUM room for token blocks of 256 (mlp.tokens_per_block), and for the first matmul's
// accumulators over 512 tokens beside them (mlp.hidden_tokens_per_block): each span of 512
// tokens gets one first matmul of 512 columns and one GELU evacuation into a [128, 512]
// SBUF tile; the span's first block reads that tile's columns 0..255 (offsets 0 and 128 of
// the stationary operand), and its second block reads columns 256..511 without a matmul
// of its own. Without the option, each block of 256 computes its own [128, 256] tile.
// CHECK-LABEL: func.func @mlp_spans
// CHECK: "nisa.matmul"(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) {{.*}} : (memref<128x512xf32, "psum">, memref<128x128xbf16, "sbuf">, memref<128x512xbf16, "sbuf">)
// CHECK: "nisa.activation"(%[[H:[0-9]+]], %{{[0-9]+}}) {{.*}}func = "gelu"{{.*}} : (memref<128x512xbf16, "sbuf">, memref<128x512xf32, "psum">)
// CHECK-COUNT-2: "nisa.matmul"(%{{[0-9]+}}, %[[H]], %{{[0-9]+}}) {accumulate = false, aps = [array<i64: 0, 512, 128, 1, 512>, array<i64: 0, 512, 128, 1, 128>,
// CHECK-COUNT-2: "nisa.matmul"(%{{[0-9]+}}, %[[H]], %{{[0-9]+}}) {accumulate = false, aps = [array<i64: 0, 512, 128, 1, 512>, array<i64: 128, 512, 128, 1, 128>,
// CHECK-NOT: "nisa.matmul"(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) {{.*}} : (memref<128x512xf32, "psum">, memref<128x128xbf16, "sbuf">
// CHECK-COUNT-2: "nisa.matmul"(%{{[0-9]+}}, %[[H]], %{{[0-9]+}}) {accumulate = false, aps = [array<i64: 0, 512, 128, 1, 512>, array<i64: 256, 512, 128, 1, 128>,
// CHECK-COUNT-2: "nisa.matmul"(%{{[0-9]+}}, %[[H]], %{{[0-9]+}}) {accumulate = false, aps = [array<i64: 0, 512, 128, 1, 512>, array<i64: 384, 512, 128, 1, 128>,
// CHECK-COUNT-3: "nisa.activation"({{.*}}func = "gelu"{{.*}} : (memref<128x512xbf16, "sbuf">, memref<128x512xf32, "psum">)
// CHECK-NOT: func = "gelu"
// CHECK: return
// OFF-LABEL: func.func @mlp_spans
// OFF-COUNT-8: "nisa.activation"({{.*}}func = "gelu"{{.*}} : (memref<128x256xbf16, "sbuf">, memref<128x256xf32, "psum">)
// OFF-NOT: func = "gelu"
// OFF: return
func.func @mlp_spans(%arg0: tensor<2048x128xbf16>, %arg1: tensor<128x128xbf16>, %arg2: tensor<128x1024xbf16>) -> tensor<2048x1024xbf16> {
  %0 = "trn.kernel"() ({
    %1 = "trn.matmul"(%arg0, %arg1) : (tensor<2048x128xbf16>, tensor<128x128xbf16>) -> tensor<2048x128xf32>
    %2 = "trn.activation"(%1) {bias = 0.000000e+00 : f32, func = "gelu", scale = 1.000000e+00 : f32} : (tensor<2048x128xf32>) -> tensor<2048x128xf32>
    %3 = "trn.convert"(%2) : (tensor<2048x128xf32>) -> tensor<2048x128xbf16>
    %4 = "trn.matmul"(%3, %arg2) : (tensor<2048x128xbf16>, tensor<128x1024xbf16>) -> tensor<2048x1024xf32>
    %5 = "trn.convert"(%4) : (tensor<2048x1024xf32>) -> tensor<2048x1024xbf16>
    "trn.yield"(%5) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2048x1024xbf16>) -> ()
  }) {kind = "mlp", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2048x1024xbf16>
  return %0 : tensor<2048x1024xbf16>
}

// -----

// Tests convert-trn-to-nisa hidden-spans on a weight_gradient kernel (the first Linear's weight
// and bias gradients of a Linear - GELU - Linear block): 640 input features put W in blocks of
// 256 hidden units (four PSUM banks of accumulators), and T = (dY @ W2) * GELU'(H) is
// computed for spans of 512 (weight_gradient.hidden_span). The span's first block computes
// T's tile over 512 columns for each of the two token tiles and sums it over the tokens in
// one [1, 512] row; its second block reads the same tiles and computes no T. The last span is
// the last block's 128 columns. Without the option, each block of 256 computes its own.
// CHECK-LABEL: func.func @weight_gradient_spans
// CHECK: "nisa.matmul"({{.*}} : (memref<128x512xf32, "psum">, memref<96x128xbf16, "sbuf">, memref<96x512xbf16, "sbuf">)
// CHECK: "nisa.matmul"(%{{[0-9]+}}, %[[T0:[0-9]+]], %{{[0-9]+}}) {{.*}} : (memref<128x512xf32, "psum">, memref<128x512xbf16, "sbuf">, memref<128x512xbf16, "sbuf">)
// CHECK: "nisa.matmul"(%[[S:[0-9]+]], %{{[0-9]+}}, %[[T0]]) {{.*}} : (memref<1x512xf32, "psum">, memref<128x1xbf16, "sbuf">, memref<128x512xbf16, "sbuf">)
// CHECK: "nisa.matmul"({{.*}} : (memref<128x512xf32, "psum">, memref<96x128xbf16, "sbuf">, memref<96x512xbf16, "sbuf">)
// CHECK: "nisa.matmul"(%{{[0-9]+}}, %[[T1:[0-9]+]], %{{[0-9]+}}) {{.*}} : (memref<128x512xf32, "psum">, memref<128x512xbf16, "sbuf">, memref<128x512xbf16, "sbuf">)
// CHECK: "nisa.matmul"(%[[S]], %{{[0-9]+}}, %[[T1]])
// CHECK: "nisa.dma"(%arg4,
// CHECK: "nisa.dma"(%arg5, %{{[0-9]+}}) {{.*}} : (memref<640xbf16, "hbm">, memref<1x512xbf16, "sbuf">)
// CHECK-NOT: memref<96x128xbf16, "sbuf">, memref<96x512xbf16, "sbuf">
// CHECK: "nisa.matmul"(%{{[0-9]+}}, %[[T0]], %{{[0-9]+}})
// CHECK-NOT: memref<96x128xbf16, "sbuf">, memref<96x512xbf16, "sbuf">
// CHECK: "nisa.matmul"(%{{[0-9]+}}, %[[T1]], %{{[0-9]+}})
// CHECK: "nisa.dma"(%arg4,
// CHECK: "nisa.matmul"({{.*}} : (memref<128x128xf32, "psum">, memref<96x128xbf16, "sbuf">, memref<96x128xbf16, "sbuf">)
// CHECK-NOT: memref<1x256xf32, "psum">
// CHECK: "nisa.dma"(%arg5, %{{[0-9]+}}) {{.*}} : (memref<640xbf16, "hbm">, memref<1x128xbf16, "sbuf">)
// CHECK: return
// OFF-LABEL: func.func @weight_gradient_spans
// OFF-COUNT-2: "nisa.matmul"({{.*}} : (memref<128x256xf32, "psum">, memref<96x128xbf16, "sbuf">, memref<96x256xbf16, "sbuf">)
// OFF: "nisa.dma"(%arg5, %{{[0-9]+}}) {{.*}} : (memref<640xbf16, "hbm">, memref<1x256xbf16, "sbuf">)
// OFF-COUNT-2: "nisa.matmul"({{.*}} : (memref<128x256xf32, "psum">, memref<96x128xbf16, "sbuf">, memref<96x256xbf16, "sbuf">)
// OFF: "nisa.dma"(%arg5, %{{[0-9]+}}) {{.*}} : (memref<640xbf16, "hbm">, memref<1x256xbf16, "sbuf">)
// OFF: return
func.func @weight_gradient_spans(%h: tensor<256x640xbf16>, %dy: tensor<256x96xbf16>, %w2: tensor<96x640xbf16>, %x: tensor<256x640xbf16>) -> (tensor<640x640xbf16>, tensor<640xbf16>) {
  %k:2 = "trn.kernel"() ({
    %d = "trn.activation"(%h) {bias = 0.000000e+00 : f32, func = "gelu_dx", scale = 1.000000e+00 : f32} : (tensor<256x640xbf16>) -> tensor<256x640xf32>
    %g = "trn.matmul"(%dy, %w2) : (tensor<256x96xbf16>, tensor<96x640xbf16>) -> tensor<256x640xf32>
    %t = "trn.tensor_tensor"(%g, %d) {op = "mul"} : (tensor<256x640xf32>, tensor<256x640xf32>) -> tensor<256x640xf32>
    %tb = "trn.convert"(%t) : (tensor<256x640xf32>) -> tensor<256x640xbf16>
    %tt = "trn.transpose"(%tb) {permutation = array<i64: 1, 0>} : (tensor<256x640xbf16>) -> tensor<640x256xbf16>
    %w = "trn.matmul"(%tt, %x) : (tensor<640x256xbf16>, tensor<256x640xbf16>) -> tensor<640x640xf32>
    %wb = "trn.convert"(%w) : (tensor<640x640xf32>) -> tensor<640x640xbf16>
    %b = "trn.reduce"(%tb) {dimensions = array<i64: 0>, op = "add"} : (tensor<256x640xbf16>) -> tensor<640xf32>
    %bb = "trn.convert"(%b) : (tensor<640xf32>) -> tensor<640xbf16>
    "trn.yield"(%wb, %bb) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<640x640xbf16>, tensor<640xbf16>) -> ()
  }) {kind = "weight_gradient", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<640x640xbf16>, tensor<640xbf16>)
  return %k#0, %k#1 : tensor<640x640xbf16>, tensor<640xbf16>
}

// -----

// The same kernel as a co-run partner (trn-order set it beside another kernel, which takes
// its own part of PSUM): no spans, T over each block of 256 as without the option.
// CHECK-LABEL: func.func @weight_gradient_co_run
// CHECK-NOT: memref<96x512xbf16, "sbuf">
// CHECK-COUNT-2: "nisa.matmul"({{.*}} : (memref<128x256xf32, "psum">, memref<96x128xbf16, "sbuf">, memref<96x256xbf16, "sbuf">)
// CHECK-NOT: memref<96x512xbf16, "sbuf">
// CHECK: return
// OFF-LABEL: func.func @weight_gradient_co_run
func.func @weight_gradient_co_run(%h: tensor<256x640xbf16>, %dy: tensor<256x96xbf16>, %w2: tensor<96x640xbf16>, %x: tensor<256x640xbf16>) -> (tensor<640x640xbf16>, tensor<640xbf16>) {
  %k:2 = "trn.kernel"() ({
    %d = "trn.activation"(%h) {bias = 0.000000e+00 : f32, func = "gelu_dx", scale = 1.000000e+00 : f32} : (tensor<256x640xbf16>) -> tensor<256x640xf32>
    %g = "trn.matmul"(%dy, %w2) : (tensor<256x96xbf16>, tensor<96x640xbf16>) -> tensor<256x640xf32>
    %t = "trn.tensor_tensor"(%g, %d) {op = "mul"} : (tensor<256x640xf32>, tensor<256x640xf32>) -> tensor<256x640xf32>
    %tb = "trn.convert"(%t) : (tensor<256x640xf32>) -> tensor<256x640xbf16>
    %tt = "trn.transpose"(%tb) {permutation = array<i64: 1, 0>} : (tensor<256x640xbf16>) -> tensor<640x256xbf16>
    %w = "trn.matmul"(%tt, %x) : (tensor<640x256xbf16>, tensor<256x640xbf16>) -> tensor<640x640xf32>
    %wb = "trn.convert"(%w) : (tensor<640x640xf32>) -> tensor<640x640xbf16>
    %b = "trn.reduce"(%tb) {dimensions = array<i64: 0>, op = "add"} : (tensor<256x640xbf16>) -> tensor<640xf32>
    %bb = "trn.convert"(%b) : (tensor<640xf32>) -> tensor<640xbf16>
    "trn.yield"(%wb, %bb) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<640x640xbf16>, tensor<640xbf16>) -> ()
  }) {co_run = 0 : i64, co_run_role = "partner", kind = "weight_gradient", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<640x640xbf16>, tensor<640xbf16>)
  return %k#0, %k#1 : tensor<640x640xbf16>, tensor<640xbf16>
}

// -----

// The mlp kernel as a co-run partner: no spans, a [128, 256] hidden tile per block of 256.
// CHECK-LABEL: func.func @mlp_co_run
// CHECK-COUNT-8: "nisa.activation"({{.*}}func = "gelu"{{.*}} : (memref<128x256xbf16, "sbuf">, memref<128x256xf32, "psum">)
// CHECK-NOT: func = "gelu"
// CHECK: return
// OFF-LABEL: func.func @mlp_co_run
func.func @mlp_co_run(%arg0: tensor<2048x128xbf16>, %arg1: tensor<128x128xbf16>, %arg2: tensor<128x1024xbf16>) -> tensor<2048x1024xbf16> {
  %0 = "trn.kernel"() ({
    %1 = "trn.matmul"(%arg0, %arg1) : (tensor<2048x128xbf16>, tensor<128x128xbf16>) -> tensor<2048x128xf32>
    %2 = "trn.activation"(%1) {bias = 0.000000e+00 : f32, func = "gelu", scale = 1.000000e+00 : f32} : (tensor<2048x128xf32>) -> tensor<2048x128xf32>
    %3 = "trn.convert"(%2) : (tensor<2048x128xf32>) -> tensor<2048x128xbf16>
    %4 = "trn.matmul"(%3, %arg2) : (tensor<2048x128xbf16>, tensor<128x1024xbf16>) -> tensor<2048x1024xf32>
    %5 = "trn.convert"(%4) : (tensor<2048x1024xf32>) -> tensor<2048x1024xbf16>
    "trn.yield"(%5) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2048x1024xbf16>) -> ()
  }) {co_run = 0 : i64, co_run_role = "partner", kind = "mlp", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2048x1024xbf16>
  return %0 : tensor<2048x1024xbf16>
}

