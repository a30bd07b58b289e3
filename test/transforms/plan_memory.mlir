// RUN: neuron-opt --split-input-file --trn-plan-memory %s | FileCheck %s
// RUN: neuron-opt --split-input-file --trn-plan-memory="oldest-freed=false" %s | FileCheck %s --check-prefix=ROTATE
// RUN: neuron-opt --split-input-file --trn-plan-memory="group-distance=1" %s | FileCheck %s --check-prefix=GROUP
// RUN: neuron-opt --split-input-file --trn-plan-memory="group-distance=1 group-reuse=false" %s | FileCheck %s --check-prefix=NOGROUP
// RUN: not neuron-opt --trn-plan-memory="group-distance=0" %s 2>&1 | FileCheck %s --check-prefix=ERRDIST
// RUN: not neuron-opt --trn-plan-memory %S/Inputs/plan_memory-invalid.mlir 2>&1 | FileCheck %s --check-prefix=ERR

// Tests that tiles live at the same time get disjoint SBUF ranges, that a tile allocated
// after another died goes after it rather than on top of it (so the next iteration's DMA
// need not wait for the last one's readers), and that peak use is recorded.
// CHECK-LABEL: func.func @sbuf
// CHECK-SAME: nisa.sbuf_bytes = 1536 : i64
// CHECK: "nisa.alloc"() {address = 0 : i64, memory = "sbuf"} : () -> memref<128x128xf32, "sbuf">
// CHECK: "nisa.alloc"() {address = 512 : i64, memory = "sbuf"} : () -> memref<128x128xf32, "sbuf">
// CHECK: "nisa.alloc"() {address = 1024 : i64, memory = "sbuf"} : () -> memref<128x128xf32, "sbuf">
func.func @sbuf(%x: memref<128x128xf32, "hbm">) attributes {nisa.target = "trn2"} {
  %a = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x128xf32, "sbuf">
  %b = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x128xf32, "sbuf">
  "nisa.dma"(%a, %x) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]} : (memref<128x128xf32, "sbuf">, memref<128x128xf32, "hbm">) -> ()
  "nisa.tensor_copy"(%b, %a) {engine = "dve", aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]} : (memref<128x128xf32, "sbuf">, memref<128x128xf32, "sbuf">) -> ()
  %c = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x128xf32, "sbuf">
  "nisa.tensor_copy"(%c, %b) {engine = "act", aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]} : (memref<128x128xf32, "sbuf">, memref<128x128xf32, "sbuf">) -> ()
  "nisa.dma"(%x, %c) {engine = "dma", queue = 1 : i64, aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]} : (memref<128x128xf32, "hbm">, memref<128x128xf32, "sbuf">) -> ()
  return
}

// -----

// Tests that PSUM tiles are placed inside 2 KiB banks, rotating through the banks, and that
// HBM scratch gets an offset in the scratch arena.
// CHECK-LABEL: func.func @psum_and_scratch
// CHECK-SAME: nisa.psum_bytes = 4096 : i64
// CHECK-SAME: nisa.scratch_bytes = 65536 : i64
// CHECK: "nisa.alloc"() {address = 0 : i64, memory = "psum"} : () -> memref<128x512xf32, "psum">
// CHECK: "nisa.alloc"() {address = 2048 : i64, memory = "psum"} : () -> memref<128x512xf32, "psum">
// CHECK: "nisa.alloc"() {address = 0 : i64, memory = "hbm"} : () -> memref<128x128xf32, "hbm">
func.func @psum_and_scratch() attributes {nisa.target = "trn2"} {
  %p = "nisa.alloc"() {memory = "psum"} : () -> memref<128x512xf32, "psum">
  %q = "nisa.alloc"() {memory = "psum"} : () -> memref<128x512xf32, "psum">
  "nisa.memset"(%p) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  "nisa.tensor_copy"(%q, %p) {engine = "dve", aps = [array<i64: 0, 512, 128, 1, 512>, array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">, memref<128x512xf32, "psum">) -> ()
  %s = "nisa.alloc"() {memory = "hbm"} : () -> memref<128x128xf32, "hbm">
  %t = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x128xf32, "sbuf">
  "nisa.memset"(%t) {engine = "pool", value = 0.0 : f32, aps = [array<i64: 0, 128, 128, 1, 128>]} : (memref<128x128xf32, "sbuf">) -> ()
  "nisa.dma"(%s, %t) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]} : (memref<128x128xf32, "hbm">, memref<128x128xf32, "sbuf">) -> ()
  return
}

// -----

// Tests that SBUF bytes freed longest ago are reused first: %b's last use comes before %a's,
// so %c, which fits only in bytes one of them held, takes %b's; with oldest-freed=false the
// allocator rotates back to the lowest free bytes, %a's, whose last reader ran later.
// CHECK-LABEL: func.func @oldest_freed_reused_first
// CHECK: "nisa.alloc"() {address = 0 : i64, memory = "sbuf"}
// CHECK: "nisa.alloc"() {address = 114688 : i64, memory = "sbuf"}
// CHECK: "nisa.alloc"() {address = 114688 : i64, memory = "sbuf"}
// ROTATE-LABEL: func.func @oldest_freed_reused_first
// ROTATE: "nisa.alloc"() {address = 0 : i64, memory = "sbuf"}
// ROTATE: "nisa.alloc"() {address = 114688 : i64, memory = "sbuf"}
// ROTATE: "nisa.alloc"() {address = 0 : i64, memory = "sbuf"}
func.func @oldest_freed_reused_first(%x: memref<128x28672xf32, "hbm">) attributes {nisa.target = "trn2"} {
  %a = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x28672xf32, "sbuf">
  %b = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x28672xf32, "sbuf">
  "nisa.dma"(%a, %x) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 28672, 128, 1, 28672>, array<i64: 0, 28672, 128, 1, 28672>]} : (memref<128x28672xf32, "sbuf">, memref<128x28672xf32, "hbm">) -> ()
  "nisa.dma"(%b, %x) {engine = "dma", queue = 1 : i64, aps = [array<i64: 0, 28672, 128, 1, 28672>, array<i64: 0, 28672, 128, 1, 28672>]} : (memref<128x28672xf32, "sbuf">, memref<128x28672xf32, "hbm">) -> ()
  "nisa.dma"(%x, %b) {engine = "dma", queue = 2 : i64, aps = [array<i64: 0, 28672, 128, 1, 28672>, array<i64: 0, 28672, 128, 1, 28672>]} : (memref<128x28672xf32, "hbm">, memref<128x28672xf32, "sbuf">) -> ()
  "nisa.dma"(%x, %a) {engine = "dma", queue = 3 : i64, aps = [array<i64: 0, 28672, 128, 1, 28672>, array<i64: 0, 28672, 128, 1, 28672>]} : (memref<128x28672xf32, "hbm">, memref<128x28672xf32, "sbuf">) -> ()
  %c = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x28672xf32, "sbuf">
  "nisa.dma"(%c, %x) {engine = "dma", queue = 4 : i64, aps = [array<i64: 0, 28672, 128, 1, 28672>, array<i64: 0, 28672, 128, 1, 28672>]} : (memref<128x28672xf32, "sbuf">, memref<128x28672xf32, "hbm">) -> ()
  "nisa.dma"(%x, %c) {engine = "dma", queue = 5 : i64, aps = [array<i64: 0, 28672, 128, 1, 28672>, array<i64: 0, 28672, 128, 1, 28672>]} : (memref<128x28672xf32, "hbm">, memref<128x28672xf32, "sbuf">) -> ()
  return
}

// -----

// Tests that a buffer with a reuse_group (a row-wise kernel's tile) takes bytes its own group
// freed once enough releases have passed (group-distance; 1 here), before the bytes freed
// longest ago of all: %c takes %a's (0), where without the group (group-reuse=false), or
// before 32 releases have passed (the default), it takes bytes no buffer has used yet (8192),
// as %b, which has no group, does (4096).
// CHECK-LABEL: func.func @group_reuses_own_bytes
// CHECK: "nisa.alloc"() {address = 0 : i64, memory = "sbuf", reuse_group = 0 : i64}
// CHECK: "nisa.alloc"() {address = 4096 : i64, memory = "sbuf"}
// CHECK: "nisa.alloc"() {address = 8192 : i64, memory = "sbuf", reuse_group = 0 : i64}
// GROUP-LABEL: func.func @group_reuses_own_bytes
// GROUP: "nisa.alloc"() {address = 0 : i64, memory = "sbuf", reuse_group = 0 : i64}
// GROUP: "nisa.alloc"() {address = 4096 : i64, memory = "sbuf"}
// GROUP: "nisa.alloc"() {address = 0 : i64, memory = "sbuf", reuse_group = 0 : i64}
// NOGROUP-LABEL: func.func @group_reuses_own_bytes
// NOGROUP: "nisa.alloc"() {address = 0 : i64, memory = "sbuf", reuse_group = 0 : i64}
// NOGROUP: "nisa.alloc"() {address = 4096 : i64, memory = "sbuf"}
// NOGROUP: "nisa.alloc"() {address = 8192 : i64, memory = "sbuf", reuse_group = 0 : i64}
// ERRDIST: group-distance must be at least 1, got 0
func.func @group_reuses_own_bytes(%x: memref<128x1024xf32, "hbm">) attributes {nisa.target = "trn2"} {
  %a = "nisa.alloc"() {memory = "sbuf", reuse_group = 0 : i64} : () -> memref<128x1024xf32, "sbuf">
  "nisa.dma"(%a, %x) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 1024, 128, 1, 1024>, array<i64: 0, 1024, 128, 1, 1024>]} : (memref<128x1024xf32, "sbuf">, memref<128x1024xf32, "hbm">) -> ()
  "nisa.dma"(%x, %a) {engine = "dma", queue = 1 : i64, aps = [array<i64: 0, 1024, 128, 1, 1024>, array<i64: 0, 1024, 128, 1, 1024>]} : (memref<128x1024xf32, "hbm">, memref<128x1024xf32, "sbuf">) -> ()
  %b = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x1024xf32, "sbuf">
  "nisa.dma"(%b, %x) {engine = "dma", queue = 2 : i64, aps = [array<i64: 0, 1024, 128, 1, 1024>, array<i64: 0, 1024, 128, 1, 1024>]} : (memref<128x1024xf32, "sbuf">, memref<128x1024xf32, "hbm">) -> ()
  "nisa.dma"(%x, %b) {engine = "dma", queue = 3 : i64, aps = [array<i64: 0, 1024, 128, 1, 1024>, array<i64: 0, 1024, 128, 1, 1024>]} : (memref<128x1024xf32, "hbm">, memref<128x1024xf32, "sbuf">) -> ()
  %c = "nisa.alloc"() {memory = "sbuf", reuse_group = 0 : i64} : () -> memref<128x1024xf32, "sbuf">
  "nisa.dma"(%c, %x) {engine = "dma", queue = 4 : i64, aps = [array<i64: 0, 1024, 128, 1, 1024>, array<i64: 0, 1024, 128, 1, 1024>]} : (memref<128x1024xf32, "sbuf">, memref<128x1024xf32, "hbm">) -> ()
  "nisa.dma"(%x, %c) {engine = "dma", queue = 5 : i64, aps = [array<i64: 0, 1024, 128, 1, 1024>, array<i64: 0, 1024, 128, 1, 1024>]} : (memref<128x1024xf32, "hbm">, memref<128x1024xf32, "sbuf">) -> ()
  return
}

// -----

// Tests that PSUM, too, reuses the bytes freed longest ago: with all eight banks taken, %t3
// dies before %t0, so %n takes %t3's bank (6144); with oldest-freed=false the banks rotate
// and %n takes the next free one after %t7's, %t0's (0).
// CHECK-LABEL: func.func @psum_oldest_freed
// CHECK-COUNT-8: "nisa.alloc"() {address = {{[0-9]+}} : i64, memory = "psum"}
// CHECK: "nisa.alloc"() {address = 6144 : i64, memory = "psum"}
// ROTATE-LABEL: func.func @psum_oldest_freed
// ROTATE-COUNT-8: "nisa.alloc"() {address = {{[0-9]+}} : i64, memory = "psum"}
// ROTATE: "nisa.alloc"() {address = 0 : i64, memory = "psum"}
func.func @psum_oldest_freed() attributes {nisa.target = "trn2"} {
  %t0 = "nisa.alloc"() {memory = "psum"} : () -> memref<128x512xf32, "psum">
  %t1 = "nisa.alloc"() {memory = "psum"} : () -> memref<128x512xf32, "psum">
  %t2 = "nisa.alloc"() {memory = "psum"} : () -> memref<128x512xf32, "psum">
  %t3 = "nisa.alloc"() {memory = "psum"} : () -> memref<128x512xf32, "psum">
  %t4 = "nisa.alloc"() {memory = "psum"} : () -> memref<128x512xf32, "psum">
  %t5 = "nisa.alloc"() {memory = "psum"} : () -> memref<128x512xf32, "psum">
  %t6 = "nisa.alloc"() {memory = "psum"} : () -> memref<128x512xf32, "psum">
  %t7 = "nisa.alloc"() {memory = "psum"} : () -> memref<128x512xf32, "psum">
  %n = "nisa.alloc"() {memory = "psum"} : () -> memref<128x512xf32, "psum">
  "nisa.memset"(%t0) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  "nisa.memset"(%t1) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  "nisa.memset"(%t2) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  "nisa.memset"(%t3) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  "nisa.memset"(%t4) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  "nisa.memset"(%t5) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  "nisa.memset"(%t6) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  "nisa.memset"(%t7) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  "nisa.memset"(%t3) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  "nisa.memset"(%t0) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  "nisa.memset"(%n) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  "nisa.memset"(%t1) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  "nisa.memset"(%t2) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  "nisa.memset"(%t4) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  "nisa.memset"(%t5) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  "nisa.memset"(%t6) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  "nisa.memset"(%t7) {engine = "dve", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "psum">) -> ()
  return
}

// ERR: plan_memory-invalid.mlir:{{[0-9]+}}:{{[0-9]+}}: error: trn-plan-memory: out of SBUF: a tile needs 240000 more bytes per partition; trn2 has 229376 per partition and live tiles already reach 0

// -----

// Tests that the tiles of a co-running pair take disjoint parts of SBUF and PSUM: the
// partner's SBUF tile the top 512 bytes (its peak, 256, twice over), its PSUM tile the last
// bank (its peak fills one), the primary's tiles the rest (from 0).
// CHECK-LABEL: func.func @co_run_parts
// CHECK: "nisa.alloc"() {address = 0 : i64, co_run = 0 : i64, co_run_role = "primary", memory = "sbuf"}
// CHECK: "nisa.alloc"() {address = 228864 : i64, co_run = 0 : i64, co_run_role = "partner", memory = "sbuf"}
// CHECK: "nisa.alloc"() {address = 0 : i64, co_run = 0 : i64, co_run_role = "primary", memory = "psum"}
// CHECK: "nisa.alloc"() {address = 14336 : i64, co_run = 0 : i64, co_run_role = "partner", memory = "psum"}
func.func @co_run_parts(%x: memref<128x64xf32, "hbm">) attributes {nisa.target = "trn2"} {
  %p = "nisa.alloc"() {memory = "sbuf", co_run = 0 : i64, co_run_role = "primary"} : () -> memref<128x64xf32, "sbuf">
  %q = "nisa.alloc"() {memory = "sbuf", co_run = 0 : i64, co_run_role = "partner"} : () -> memref<128x64xf32, "sbuf">
  %r = "nisa.alloc"() {memory = "psum", co_run = 0 : i64, co_run_role = "primary"} : () -> memref<128x512xf32, "psum">
  %s = "nisa.alloc"() {memory = "psum", co_run = 0 : i64, co_run_role = "partner"} : () -> memref<128x512xf32, "psum">
  "nisa.dma"(%p, %x) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  "nisa.dma"(%q, %x) {engine = "dma", queue = 1 : i64, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  "nisa.tensor_copy"(%p, %r) {engine = "dve", aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 512, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x512xf32, "psum">) -> ()
  "nisa.tensor_copy"(%q, %s) {engine = "dve", aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 512, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x512xf32, "psum">) -> ()
  "nisa.dma"(%x, %p) {engine = "dma", queue = 2 : i64, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "hbm">, memref<128x64xf32, "sbuf">) -> ()
  "nisa.dma"(%x, %q) {engine = "dma", queue = 3 : i64, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "hbm">, memref<128x64xf32, "sbuf">) -> ()
  return
}
