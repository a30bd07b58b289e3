// RUN: neuron-opt --convert-trn-to-nisa %s | FileCheck %s
// RUN: neuron-opt --convert-trn-to-nisa="hidden-spans=false" %s | FileCheck %s --check-prefix=OFF

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
