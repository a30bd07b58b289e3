// RUN: neuron-opt --split-input-file %s | neuron-opt --split-input-file | FileCheck %s

// Tests that every nisa instruction parses, verifies and prints back in generic form.
// CHECK-LABEL: func.func @instructions
// CHECK: "nisa.alloc"() {address = 0 : i64, memory = "sbuf"} : () -> memref<128x64xf32, "sbuf">
// CHECK: "nisa.dma"(%{{.*}}, %arg0) {aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>], engine = "dma", queue = 3 : i64, signal = 5 : i64}
// CHECK: "nisa.matmul"({{.*}}) {accumulate = false, {{.*}}engine = "pe", waits = array<i64: 5, 1>}
// CHECK: "nisa.transpose"
// CHECK: "nisa.activation"({{.*}}) {{{.*}}engine = "act", func = "relu", operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>, scale = 1.000000e+00 : f32}
// CHECK: "nisa.tensor_tensor"({{.*}}) {{{.*}}engine = "dve", op = "add"}
// CHECK: "nisa.tensor_scalar"({{.*}}) {{{.*}}engine = "pool", imm0 = 2.000000e+00 : f32, imm1 = 0.000000e+00 : f32, op0 = "mul", op1 = "bypass", operandSegmentSizes = array<i32: 1, 1, 0, 0>, reverse0 = false, reverse1 = false}
// CHECK: "nisa.tensor_reduce"({{.*}}) {{{.*}}engine = "dve", op = "max", reduce_dims = 1 : i64}
// CHECK: "nisa.tensor_scalar_reduce"({{.*}}) {{{.*}}engine = "dve", imm0 = 1.250000e-01 : f32, negate = true, op0 = "mul", operandSegmentSizes = array<i32: 1, 1, 1, 0>, reduce_op = "max", reverse0 = false}
// CHECK: "nisa.tensor_copy"({{.*}}) {{{.*}}engine = "act"}
// CHECK: "nisa.memset"({{.*}}) {{{.*}}engine = "pool", value = 0.000000e+00 : f32}
// CHECK: "nisa.iota"({{.*}}) {{{.*}}base = 0.000000e+00 : f32, engine = "pool", free_step = 1.000000e+00 : f32, partition_step = 6.400000e+01 : f32}
// CHECK: "nisa.select"
// CHECK: "nisa.nop"() {aps = [], engine = "sp", waits = array<i64: 0, 1>}
// CHECK: "nisa.hbm_constant"() {value = dense<1.000000e+00> : tensor<4xf32>} : () -> memref<4xf32, "hbm">
func.func @instructions(%x: memref<128x64xf32, "hbm">, %y: memref<64x128xf32, "hbm">) {
  %a = "nisa.alloc"() {memory = "sbuf", address = 0 : i64} : () -> memref<128x64xf32, "sbuf">
  "nisa.dma"(%a, %x) {engine = "dma", queue = 3 : i64, signal = 5 : i64, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  %p = "nisa.alloc"() {memory = "psum"} : () -> memref<64x64xf32, "psum">
  "nisa.matmul"(%p, %a, %a) {engine = "pe", accumulate = false, waits = array<i64: 5, 1>, aps = [array<i64: 0, 64, 64, 1, 64>, array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<64x64xf32, "psum">, memref<128x64xf32, "sbuf">, memref<128x64xf32, "sbuf">) -> ()
  %q = "nisa.alloc"() {memory = "psum"} : () -> memref<64x128xf32, "psum">
  "nisa.transpose"(%q, %a) {engine = "pe", aps = [array<i64: 0, 128, 64, 1, 128>, array<i64: 0, 64, 128, 1, 64>]} : (memref<64x128xf32, "psum">, memref<128x64xf32, "sbuf">) -> ()
  %b = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x1xf32, "sbuf">
  %o = "nisa.alloc"() {memory = "sbuf"} : () -> memref<64x64xf32, "sbuf">
  "nisa.activation"(%o, %p, %b) {engine = "act", func = "relu", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>, aps = [array<i64: 0, 64, 64, 1, 64>, array<i64: 0, 64, 64, 1, 64>, array<i64: 0, 1, 64, 1, 1>]} : (memref<64x64xf32, "sbuf">, memref<64x64xf32, "psum">, memref<128x1xf32, "sbuf">) -> ()
  "nisa.tensor_tensor"(%o, %o, %p) {engine = "dve", op = "add", aps = [array<i64: 0, 64, 64, 1, 64>, array<i64: 0, 64, 64, 1, 64>, array<i64: 0, 64, 64, 1, 64>]} : (memref<64x64xf32, "sbuf">, memref<64x64xf32, "sbuf">, memref<64x64xf32, "psum">) -> ()
  "nisa.tensor_scalar"(%o, %o) {engine = "pool", op0 = "mul", imm0 = 2.0 : f32, op1 = "bypass", imm1 = 0.0 : f32, reverse0 = false, reverse1 = false, operandSegmentSizes = array<i32: 1, 1, 0, 0>, aps = [array<i64: 0, 64, 64, 1, 64>, array<i64: 0, 64, 64, 1, 64>]} : (memref<64x64xf32, "sbuf">, memref<64x64xf32, "sbuf">) -> ()
  "nisa.tensor_reduce"(%b, %o) {engine = "dve", op = "max", reduce_dims = 1 : i64, aps = [array<i64: 0, 1, 64, 1, 1>, array<i64: 0, 64, 64, 1, 64>]} : (memref<128x1xf32, "sbuf">, memref<64x64xf32, "sbuf">) -> ()
  "nisa.tensor_scalar_reduce"(%o, %p, %b) {engine = "dve", op0 = "mul", imm0 = 0.125 : f32, reverse0 = false, reduce_op = "max", negate = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>, aps = [array<i64: 0, 64, 64, 1, 64>, array<i64: 0, 64, 64, 1, 64>, array<i64: 0, 1, 64, 1, 1>]} : (memref<64x64xf32, "sbuf">, memref<64x64xf32, "psum">, memref<128x1xf32, "sbuf">) -> ()
  "nisa.tensor_copy"(%a, %o) {engine = "act", aps = [array<i64: 0, 64, 64, 1, 64>, array<i64: 0, 64, 64, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<64x64xf32, "sbuf">) -> ()
  "nisa.memset"(%o) {engine = "pool", value = 0.0 : f32, aps = [array<i64: 0, 64, 64, 1, 64>]} : (memref<64x64xf32, "sbuf">) -> ()
  "nisa.iota"(%o) {engine = "pool", base = 0.0 : f32, partition_step = 64.0 : f32, free_step = 1.0 : f32, aps = [array<i64: 0, 64, 64, 1, 64>]} : (memref<64x64xf32, "sbuf">) -> ()
  "nisa.select"(%o, %o, %o, %o) {engine = "dve", aps = [array<i64: 0, 64, 64, 1, 64>, array<i64: 0, 64, 64, 1, 64>, array<i64: 0, 64, 64, 1, 64>, array<i64: 0, 64, 64, 1, 64>]} : (memref<64x64xf32, "sbuf">, memref<64x64xf32, "sbuf">, memref<64x64xf32, "sbuf">, memref<64x64xf32, "sbuf">) -> ()
  "nisa.nop"() {engine = "sp", aps = [], waits = array<i64: 0, 1>} : () -> ()
  %c = "nisa.hbm_constant"() {value = dense<1.0> : tensor<4xf32>} : () -> memref<4xf32, "hbm">
  return
}

// -----

// Tests that an indirect DMA round-trips; its HBM side may name more rows (16 partitions) than
// the table has (2): the index chooses them at run time.
// CHECK-LABEL: func.func @indirect
// CHECK: "nisa.dma_indirect"(%{{.*}}, %arg0, %{{.*}}) {aps = [array<i64: 0, 8, 16, 1, 8>, array<i64: 0, 8, 16, 1, 8>, array<i64: 0, 1, 16, 1, 1>], engine = "dma", queue = 0 : i64}
func.func @indirect(%t: memref<2x8xf32, "hbm">) {
  %i = "nisa.alloc"() {memory = "sbuf"} : () -> memref<16x1xi32, "sbuf">
  %d = "nisa.alloc"() {memory = "sbuf"} : () -> memref<16x8xf32, "sbuf">
  "nisa.dma_indirect"(%d, %t, %i) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 8, 16, 1, 8>, array<i64: 0, 8, 16, 1, 8>, array<i64: 0, 1, 16, 1, 1>]} : (memref<16x8xf32, "sbuf">, memref<2x8xf32, "hbm">, memref<16x1xi32, "sbuf">) -> ()
  return
}
