// RUN: neuron-opt --split-input-file --trn-schedule="reorder=false" %s | FileCheck %s
// RUN: neuron-opt --split-input-file --trn-schedule %S/Inputs/schedule-reorder.mlir | FileCheck %S/Inputs/schedule-reorder.mlir --check-prefix=REORDER
// RUN: neuron-opt --split-input-file --trn-schedule="justify=false" %S/Inputs/schedule-reorder.mlir | FileCheck %S/Inputs/schedule-reorder.mlir --check-prefix=RANKED
// RUN: not neuron-opt --trn-schedule %S/Inputs/schedule-invalid.mlir 2>&1 | FileCheck %s --check-prefix=ERR

// Tests that a consumer on another engine waits for its producer: the DMA on queue 0
// (semaphore 5) signals, the activation waits for its first signal; the DVE copy reading
// what ACT wrote waits on ACT (semaphore 1) only, since ACT itself waited for the DMA the copy
// also conflicts with; the next DVE op needs no semaphore (one engine runs in order); the
// final DMA waits for DVE (semaphore 2).
// CHECK-LABEL: func.func @chain
// CHECK-SAME: nisa.num_semaphores = 21 : i64
// CHECK: "nisa.dma"({{.*}}queue = 0 : i64, signal = 5 : i64}
// CHECK: "nisa.activation"({{.*}}signal = 1 : i64, waits = array<i64: 5, 1>}
// CHECK: "nisa.tensor_copy"({{.*}}engine = "dve", waits = array<i64: 1, 1>}
// CHECK: "nisa.tensor_scalar"({{.*}}signal = 2 : i64}
// CHECK: "nisa.dma"({{.*}}queue = 1 : i64, waits = array<i64: 2, 1>}
func.func @chain(%x: memref<128x64xf32, "hbm">, %y: memref<128x64xf32, "hbm">) attributes {nisa.target = "trn2"} {
  %a = "nisa.alloc"() {memory = "sbuf", address = 0 : i64} : () -> memref<128x64xf32, "sbuf">
  %b = "nisa.alloc"() {memory = "sbuf", address = 256 : i64} : () -> memref<128x64xf32, "sbuf">
  "nisa.dma"(%a, %x) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  "nisa.activation"(%b, %a) {engine = "act", func = "exp", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "sbuf">) -> ()
  "nisa.tensor_copy"(%a, %b) {engine = "dve", aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "sbuf">) -> ()
  "nisa.tensor_scalar"(%a, %a) {engine = "dve", op0 = "mul", imm0 = 2.0 : f32, op1 = "bypass", imm1 = 0.0 : f32, reverse0 = false, reverse1 = false, operandSegmentSizes = array<i32: 1, 1, 0, 0>, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "sbuf">) -> ()
  "nisa.dma"(%y, %a) {engine = "dma", queue = 1 : i64, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "hbm">, memref<128x64xf32, "sbuf">) -> ()
  return
}

// -----

// Tests write-after-read: a DMA refilling a tile that ACT still reads waits for ACT; and
// that disjoint halves of one tile do not depend on each other.
// CHECK-LABEL: func.func @war
// CHECK: "nisa.dma"({{.*}}queue = 0 : i64, signal = 5 : i64}
// CHECK: "nisa.dma"({{.*}}queue = 1 : i64}
// CHECK: "nisa.activation"({{.*}}signal = 1 : i64, waits = array<i64: 5, 1>}
// CHECK: "nisa.dma"({{.*}}queue = 2 : i64, waits = array<i64: 1, 1>}
func.func @war(%x: memref<128x64xf32, "hbm">) attributes {nisa.target = "trn2"} {
  %a = "nisa.alloc"() {memory = "sbuf", address = 0 : i64} : () -> memref<128x64xf32, "sbuf">
  %b = "nisa.alloc"() {memory = "sbuf", address = 256 : i64} : () -> memref<128x64xf32, "sbuf">
  "nisa.dma"(%a, %x) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 64, 128, 1, 32>, array<i64: 0, 64, 128, 1, 32>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  "nisa.dma"(%a, %x) {engine = "dma", queue = 1 : i64, aps = [array<i64: 32, 64, 128, 1, 32>, array<i64: 32, 64, 128, 1, 32>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  "nisa.activation"(%b, %a) {engine = "act", func = "exp", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 64, 128, 1, 32>, array<i64: 0, 64, 128, 1, 32>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "sbuf">) -> ()
  "nisa.dma"(%a, %x) {engine = "dma", queue = 2 : i64, aps = [array<i64: 0, 64, 128, 1, 32>, array<i64: 0, 64, 128, 1, 32>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  return
}

// -----

// Tests that every access of a buffer placed where a dead one lived waits for that one's
// accesses, not only the first: the two DMAs filling disjoint partition halves of %c (at %a's
// address) both wait for ACT's read of %a (semaphore 1).
// CHECK-LABEL: func.func @reuse_pieces
// CHECK: "nisa.activation"({{.*}}signal = 1 : i64
// CHECK: "nisa.dma"({{.*}}queue = 1 : i64, waits = array<i64: 1, 1>}
// CHECK: "nisa.dma"({{.*}}queue = 2 : i64, waits = array<i64: 1, 1>}
func.func @reuse_pieces(%x: memref<128x64xf32, "hbm">) attributes {nisa.target = "trn2"} {
  %a = "nisa.alloc"() {memory = "sbuf", address = 0 : i64} : () -> memref<128x64xf32, "sbuf">
  %b = "nisa.alloc"() {memory = "sbuf", address = 256 : i64} : () -> memref<128x64xf32, "sbuf">
  %c = "nisa.alloc"() {memory = "sbuf", address = 0 : i64} : () -> memref<128x64xf32, "sbuf">
  "nisa.dma"(%a, %x) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  "nisa.activation"(%b, %a) {engine = "act", func = "exp", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "sbuf">) -> ()
  "nisa.dma"(%c, %x) {engine = "dma", queue = 1 : i64, aps = [array<i64: 0, 64, 64, 1, 64>, array<i64: 0, 64, 64, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  "nisa.dma"(%c, %x) {engine = "dma", queue = 2 : i64, aps = [array<i64: 4096, 64, 64, 1, 64>, array<i64: 4096, 64, 64, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  return
}

// ERR: schedule-invalid.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nisa.nop' op attribute 'waits' must hold (semaphore, value) pairs

// -----

// Tests that a tensor_scalar_reduce writes its reduction operand: the activation reading it as
// its bias waits for the tensor_scalar_reduce (not merely for the memset before it, which
// wrote the activation's other input), and the DMA that refills the [128, 1] tile afterwards
// waits for the activation that read it (write-after-read).
// CHECK-LABEL: func.func @scalar_reduce_writes_its_reduction
// CHECK: "nisa.memset"({{.*}}engine = "dve", value = 1.000000e+00 : f32}
// CHECK: "nisa.tensor_scalar_reduce"({{.*}}signal = 2 : i64}
// CHECK: "nisa.activation"({{.*}}signal = 1 : i64, waits = array<i64: 2, 1>}
// CHECK: "nisa.dma"({{.*}}queue = 0 : i64, waits = array<i64: 1, 1>}
func.func @scalar_reduce_writes_its_reduction(%x: memref<128x1xf32, "hbm">) attributes {nisa.target = "trn2"} {
  %a = "nisa.alloc"() {memory = "sbuf", address = 0 : i64} : () -> memref<128x64xf32, "sbuf">
  %b = "nisa.alloc"() {memory = "sbuf", address = 256 : i64} : () -> memref<128x64xf32, "sbuf">
  %c = "nisa.alloc"() {memory = "sbuf", address = 768 : i64} : () -> memref<128x64xf32, "sbuf">
  %r = "nisa.alloc"() {memory = "sbuf", address = 512 : i64} : () -> memref<128x1xf32, "sbuf">
  "nisa.memset"(%a) {engine = "dve", value = 1.0 : f32, aps = [array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">) -> ()
  "nisa.tensor_scalar_reduce"(%b, %a, %r) {engine = "dve", op0 = "mul", imm0 = 0.5 : f32, reverse0 = false, reduce_op = "max", negate = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 1, 128, 1, 1>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "sbuf">, memref<128x1xf32, "sbuf">) -> ()
  "nisa.activation"(%c, %a, %r) {engine = "act", func = "exp", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 1, 128, 1, 1>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "sbuf">, memref<128x1xf32, "sbuf">) -> ()
  "nisa.dma"(%r, %x) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 1, 128, 1, 1>, array<i64: 0, 1, 128, 1, 1>]} : (memref<128x1xf32, "sbuf">, memref<128x1xf32, "hbm">) -> ()
  return
}

// -----

// Tests that stores to disjoint column blocks of the same HBM rows do not depend on each
// other: %y's boxes are taken in rows of 3*2*64 elements (the trailing dims whose boxes cover
// the fewest bytes), so the store of %b into y[:, 2, 0, :] (queue 3) waits only for the load
// of %b (queue 1, semaphore 6), not for the store of %a into y[:, 0, 0, :] (queue 2); a load of
// the whole rows (queue 4) waits for both stores (semaphores 7 and 8).
// CHECK-LABEL: func.func @hbm_column_blocks
// CHECK: "nisa.dma"({{.*}}queue = 2 : i64, signal = 7 : i64, waits = array<i64: 5, 1>}
// CHECK: "nisa.dma"({{.*}}queue = 3 : i64, signal = 8 : i64, waits = array<i64: 6, 1>}
// CHECK: "nisa.dma"({{.*}}queue = 4 : i64, waits = array<i64: 7, 1, 8, 1>}
func.func @hbm_column_blocks(%x: memref<128x64xf32, "hbm">, %y: memref<128x3x2x64xf32, "hbm">) attributes {nisa.target = "trn2"} {
  %a = "nisa.alloc"() {memory = "sbuf", address = 0 : i64} : () -> memref<128x64xf32, "sbuf">
  %b = "nisa.alloc"() {memory = "sbuf", address = 256 : i64} : () -> memref<128x64xf32, "sbuf">
  %c = "nisa.alloc"() {memory = "sbuf", address = 512 : i64} : () -> memref<128x384xf32, "sbuf">
  "nisa.dma"(%a, %x) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  "nisa.dma"(%b, %x) {engine = "dma", queue = 1 : i64, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  "nisa.dma"(%y, %a) {engine = "dma", queue = 2 : i64, aps = [array<i64: 0, 384, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x3x2x64xf32, "hbm">, memref<128x64xf32, "sbuf">) -> ()
  "nisa.dma"(%y, %b) {engine = "dma", queue = 3 : i64, aps = [array<i64: 256, 384, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x3x2x64xf32, "hbm">, memref<128x64xf32, "sbuf">) -> ()
  "nisa.dma"(%c, %y) {engine = "dma", queue = 4 : i64, aps = [array<i64: 0, 384, 128, 1, 384>, array<i64: 0, 384, 128, 1, 384>]} : (memref<128x384xf32, "sbuf">, memref<128x3x2x64xf32, "hbm">) -> ()
  return
}
