// RUN: not neuron-opt --split-input-file %s 2>&1 | FileCheck %s

// Tests that a compute engine may not touch HBM.
// CHECK: nisa-invalid.mlir:[[# @LINE + 3]]:3: error: 'nisa.activation' op src is in hbm; act may use src only in sbuf, psum
func.func @act_hbm(%x: memref<128x64xf32, "hbm">) {
  %a = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x64xf32, "sbuf">
  "nisa.activation"(%a, %x) {engine = "act", func = "exp", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  return
}

// -----

// Tests that POOL (GpSimd) may not touch PSUM.
// CHECK: nisa-invalid.mlir:[[# @LINE + 4]]:3: error: 'nisa.tensor_copy' op src is in psum; pool may use src only in sbuf
func.func @pool_psum() {
  %a = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x64xf32, "sbuf">
  %p = "nisa.alloc"() {memory = "psum"} : () -> memref<128x64xf32, "psum">
  "nisa.tensor_copy"(%a, %p) {engine = "pool", aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "psum">) -> ()
  return
}

// -----

// Tests that tensor_tensor may not read both operands from PSUM.
// CHECK: nisa-invalid.mlir:[[# @LINE + 4]]:3: error: 'nisa.tensor_tensor' op reads two operands from PSUM (an engine reads at most one; stage one in SBUF)
func.func @two_psum_inputs() {
  %a = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x64xf32, "sbuf">
  %p = "nisa.alloc"() {memory = "psum"} : () -> memref<128x64xf32, "psum">
  "nisa.tensor_tensor"(%a, %p, %p) {engine = "dve", op = "add", aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "psum">, memref<128x64xf32, "psum">) -> ()
  return
}

// -----

// Tests that an instruction on the wrong engine is rejected.
// CHECK: error: 'nisa.matmul' op cannot run on engine 'dve'; allowed: pe
func.func @matmul_engine() {
  %a = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x64xf32, "sbuf">
  %p = "nisa.alloc"() {memory = "psum"} : () -> memref<64x64xf32, "psum">
  "nisa.matmul"(%p, %a, %a) {engine = "dve", accumulate = false, aps = [array<i64: 0, 64, 64, 1, 64>, array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<64x64xf32, "psum">, memref<128x64xf32, "sbuf">, memref<128x64xf32, "sbuf">) -> ()
  return
}

// -----

// Tests that an access pattern reaching past its buffer is rejected.
// CHECK: error: 'nisa.dma' op src access pattern [0, 64, 129, 1, 64] reaches elements 0..8255 of a 8192-element buffer
func.func @dma_out_of_bounds(%x: memref<128x64xf32, "hbm">) {
  %a = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x64xf32, "sbuf">
  "nisa.dma"(%a, %x) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 129, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  return
}

// -----

// Tests that an on-chip access pattern must step one partition per tile row.
// CHECK: error: 'nisa.tensor_copy' op dst partition stride 32 must be one tile row (64 elements)
func.func @partition_stride() {
  %a = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x64xf32, "sbuf">
  "nisa.tensor_copy"(%a, %a) {engine = "dve", aps = [array<i64: 0, 32, 64, 1, 32>, array<i64: 0, 64, 64, 1, 32>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "sbuf">) -> ()
  return
}

// -----

// Tests that an instruction needs one access pattern per buffer operand.
// CHECK: error: 'nisa.tensor_copy' op has 2 buffer operands but 1 access patterns
func.func @missing_ap() {
  %a = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x64xf32, "sbuf">
  "nisa.tensor_copy"(%a, %a) {engine = "dve", aps = [array<i64: 0, 64, 64, 1, 32>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "sbuf">) -> ()
  return
}

// -----

// Tests that tensor_scalar_reduce reduces only with add, mul, max or min.
// CHECK: error: 'nisa.tensor_scalar_reduce' op tensor_scalar_reduce reduces with add/max/min/mul, not 'xor'
func.func @scalar_reduce_xor() {
  %a = "nisa.alloc"() {memory = "sbuf"} : () -> memref<64x64xf32, "sbuf">
  %r = "nisa.alloc"() {memory = "sbuf"} : () -> memref<64x1xf32, "sbuf">
  "nisa.tensor_scalar_reduce"(%a, %a, %r) {engine = "dve", op0 = "mul", imm0 = 1.0 : f32, reverse0 = false, reduce_op = "xor", negate = false, operandSegmentSizes = array<i32: 1, 1, 1, 0>, aps = [array<i64: 0, 64, 64, 1, 64>, array<i64: 0, 64, 64, 1, 64>, array<i64: 0, 1, 64, 1, 1>]} : (memref<64x64xf32, "sbuf">, memref<64x64xf32, "sbuf">, memref<64x1xf32, "sbuf">) -> ()
  return
}

// -----

// Tests that an access pattern's error is reported for every instruction that has it: within
// one run the operand checks are made once per (op, engine, patterns, buffer types), and the
// remembered failure is raised again at the second instruction's own location.
// CHECK: nisa-invalid.mlir:[[# @LINE + 3]]:3: error: 'nisa.dma' op src access pattern [0, 64, 129, 1, 64] reaches elements 0..8255 of a 8192-element buffer
func.func @same_bad_pattern_first(%x: memref<128x64xf32, "hbm">) {
  %a = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x64xf32, "sbuf">
  "nisa.dma"(%a, %x) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 129, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  return
}
// CHECK: nisa-invalid.mlir:[[# @LINE + 3]]:3: error: 'nisa.dma' op src access pattern [0, 64, 129, 1, 64] reaches elements 0..8255 of a 8192-element buffer
func.func @same_bad_pattern_second(%x: memref<128x64xf32, "hbm">) {
  %a = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x64xf32, "sbuf">
  "nisa.dma"(%a, %x) {engine = "dma", queue = 1 : i64, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 129, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  return
}

// -----

// Tests that a buffer's reuse_group (trn-plan-memory's group of a row-wise kernel's tiles)
// may not be negative.
// CHECK: nisa-invalid.mlir:[[# @LINE + 2]]:8: error: 'nisa.alloc' op reuse_group must be non-negative
func.func @negative_reuse_group() {
  %a = "nisa.alloc"() {memory = "sbuf", reuse_group = -1 : i64} : () -> memref<128x64xf32, "sbuf">
  return
}

// -----

// Tests that a tile of a co-running pair (trn-plan-memory's disjoint parts) names its role.
// CHECK: nisa-invalid.mlir:[[# @LINE + 2]]:8: error: 'nisa.alloc' op co_run needs a co_run_role of 'primary' or 'partner'
func.func @co_run_without_role() {
  %a = "nisa.alloc"() {memory = "sbuf", co_run = 0 : i64} : () -> memref<128x64xf32, "sbuf">
  return
}
