// Tests that trn-schedule reorders an engine's instructions by when their inputs are ready,
// and spreads DMAs over queues (checked by ../schedule.mlir): in program order ACT would
// first wait for the slow 64 KiB load; scheduled, it first runs the activation whose small
// input arrives early, and the two loads go to different queues.
// REORDER-LABEL: func.func @reorder
// REORDER: "nisa.dma"(%[[BIG:.*]], %arg0) {{.*}}queue = 0 : i64
// REORDER: "nisa.dma"(%[[SMALL:.*]], %arg1) {{.*}}queue = 1 : i64
// REORDER: "nisa.activation"(%{{.*}}, %[[SMALL]])
// REORDER: "nisa.activation"(%{{.*}}, %[[BIG]])
func.func @reorder(%big: memref<128x128xf32, "hbm">, %small: memref<1x8xf32, "hbm">) attributes {nisa.target = "trn2"} {
  %a = "nisa.alloc"() {memory = "sbuf", address = 0 : i64} : () -> memref<128x128xf32, "sbuf">
  %b = "nisa.alloc"() {memory = "sbuf", address = 512 : i64} : () -> memref<128x128xf32, "sbuf">
  %c = "nisa.alloc"() {memory = "sbuf", address = 1024 : i64} : () -> memref<1x8xf32, "sbuf">
  %d = "nisa.alloc"() {memory = "sbuf", address = 1088 : i64} : () -> memref<1x8xf32, "sbuf">
  "nisa.dma"(%a, %big) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]} : (memref<128x128xf32, "sbuf">, memref<128x128xf32, "hbm">) -> ()
  "nisa.activation"(%b, %a) {engine = "act", func = "exp", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]} : (memref<128x128xf32, "sbuf">, memref<128x128xf32, "sbuf">) -> ()
  "nisa.dma"(%c, %small) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 8, 1, 1, 8>, array<i64: 0, 8, 1, 1, 8>]} : (memref<1x8xf32, "sbuf">, memref<1x8xf32, "hbm">) -> ()
  "nisa.activation"(%d, %c) {engine = "act", func = "exp", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 8, 1, 1, 8>, array<i64: 0, 8, 1, 1, 8>]} : (memref<1x8xf32, "sbuf">, memref<1x8xf32, "sbuf">) -> ()
  return
}

// -----

// Tests that among instructions ready together on one engine the one with more dependent
// work behind it goes first: both activations read the same loaded tile, but only the second
// (in program order) feeds DVE and then PE, so it runs before the first.
// REORDER-LABEL: func.func @critical_path_first
// REORDER: "nisa.dma"
// REORDER: "nisa.activation"(%[[FEEDS:.*]], %{{.*}}) {{.*}}func = "tanh"
// REORDER: "nisa.activation"(%{{.*}}, %{{.*}}) {{.*}}func = "exp"
func.func @critical_path_first(%x: memref<128x128xbf16, "hbm">) attributes {nisa.target = "trn2"} {
  %a = "nisa.alloc"() {memory = "sbuf", address = 0 : i64} : () -> memref<128x128xbf16, "sbuf">
  %b = "nisa.alloc"() {memory = "sbuf", address = 256 : i64} : () -> memref<128x128xbf16, "sbuf">
  %c = "nisa.alloc"() {memory = "sbuf", address = 512 : i64} : () -> memref<128x128xbf16, "sbuf">
  %d = "nisa.alloc"() {memory = "sbuf", address = 768 : i64} : () -> memref<128x128xbf16, "sbuf">
  %p = "nisa.alloc"() {memory = "psum", address = 0 : i64} : () -> memref<128x128xf32, "psum">
  "nisa.dma"(%a, %x) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]} : (memref<128x128xbf16, "sbuf">, memref<128x128xbf16, "hbm">) -> ()
  "nisa.activation"(%b, %a) {engine = "act", func = "exp", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]} : (memref<128x128xbf16, "sbuf">, memref<128x128xbf16, "sbuf">) -> ()
  "nisa.activation"(%c, %a) {engine = "act", func = "tanh", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]} : (memref<128x128xbf16, "sbuf">, memref<128x128xbf16, "sbuf">) -> ()
  "nisa.tensor_tensor"(%d, %c, %c) {engine = "dve", op = "mul", aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]} : (memref<128x128xbf16, "sbuf">, memref<128x128xbf16, "sbuf">, memref<128x128xbf16, "sbuf">) -> ()
  "nisa.matmul"(%p, %d, %d) {engine = "pe", accumulate = false, aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]} : (memref<128x128xf32, "psum">, memref<128x128xbf16, "sbuf">, memref<128x128xbf16, "sbuf">) -> ()
  return
}

// -----

// Tests that a DMA queue is given a transfer only when it can start it: 32 loads of 64 KiB
// that nothing waits for are ready at once; a copy that a chain of activations waits for
// becomes ready after a small load and the activation it feeds. Committing every ready DMA
// to a queue at once would queue the copy behind two loads; given to queues one at a time as
// they free up, the copy goes ahead of the loads not yet started (half of them).
// REORDER-LABEL: func.func @urgent_dma_ahead_of_queued_loads
// REORDER: "nisa.activation"(%[[T:.*]], %{{.*}}) {{.*}}func = "exp"
// REORDER-NOT: "nisa.activation"
// REORDER: "nisa.dma"(%{{.*}}, %[[T]])
// REORDER-COUNT-16: "nisa.dma"(%{{.*}}, %arg1)
// REORDER-NOT: "nisa.dma"
func.func @urgent_dma_ahead_of_queued_loads(%x: memref<128x64xf32, "hbm">, %w: memref<128x4096xf32, "hbm">) attributes {nisa.target = "trn2"} {
  %prefetched = "nisa.alloc"() {memory = "sbuf", address = 0 : i64} : () -> memref<128x4096xf32, "sbuf">
  %a = "nisa.alloc"() {memory = "sbuf", address = 16384 : i64} : () -> memref<128x64xf32, "sbuf">
  %t = "nisa.alloc"() {memory = "sbuf", address = 16640 : i64} : () -> memref<128x64xf32, "sbuf">
  %c = "nisa.alloc"() {memory = "sbuf", address = 16896 : i64} : () -> memref<128x512xf32, "sbuf">
  %d = "nisa.alloc"() {memory = "sbuf", address = 18944 : i64} : () -> memref<128x512xf32, "sbuf">
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 4096, 128, 1, 128>, array<i64: 0, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 128, 4096, 128, 1, 128>, array<i64: 128, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 256, 4096, 128, 1, 128>, array<i64: 256, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 384, 4096, 128, 1, 128>, array<i64: 384, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 512, 4096, 128, 1, 128>, array<i64: 512, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 640, 4096, 128, 1, 128>, array<i64: 640, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 768, 4096, 128, 1, 128>, array<i64: 768, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 896, 4096, 128, 1, 128>, array<i64: 896, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 1024, 4096, 128, 1, 128>, array<i64: 1024, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 1152, 4096, 128, 1, 128>, array<i64: 1152, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 1280, 4096, 128, 1, 128>, array<i64: 1280, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 1408, 4096, 128, 1, 128>, array<i64: 1408, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 1536, 4096, 128, 1, 128>, array<i64: 1536, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 1664, 4096, 128, 1, 128>, array<i64: 1664, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 1792, 4096, 128, 1, 128>, array<i64: 1792, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 1920, 4096, 128, 1, 128>, array<i64: 1920, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 2048, 4096, 128, 1, 128>, array<i64: 2048, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 2176, 4096, 128, 1, 128>, array<i64: 2176, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 2304, 4096, 128, 1, 128>, array<i64: 2304, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 2432, 4096, 128, 1, 128>, array<i64: 2432, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 2560, 4096, 128, 1, 128>, array<i64: 2560, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 2688, 4096, 128, 1, 128>, array<i64: 2688, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 2816, 4096, 128, 1, 128>, array<i64: 2816, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 2944, 4096, 128, 1, 128>, array<i64: 2944, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 3072, 4096, 128, 1, 128>, array<i64: 3072, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 3200, 4096, 128, 1, 128>, array<i64: 3200, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 3328, 4096, 128, 1, 128>, array<i64: 3328, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 3456, 4096, 128, 1, 128>, array<i64: 3456, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 3584, 4096, 128, 1, 128>, array<i64: 3584, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 3712, 4096, 128, 1, 128>, array<i64: 3712, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 3840, 4096, 128, 1, 128>, array<i64: 3840, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.dma"(%prefetched, %w) {engine = "dma", queue = 0 : i64, aps = [array<i64: 3968, 4096, 128, 1, 128>, array<i64: 3968, 4096, 128, 1, 128>]} : (memref<128x4096xf32, "sbuf">, memref<128x4096xf32, "hbm">) -> ()
  "nisa.memset"(%c) {engine = "pool", value = 0.0 : f32, aps = [array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "sbuf">) -> ()
  "nisa.dma"(%a, %x) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  "nisa.activation"(%t, %a) {engine = "act", func = "exp", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "sbuf">) -> ()
  "nisa.dma"(%c, %t) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 512, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x512xf32, "sbuf">, memref<128x64xf32, "sbuf">) -> ()
  "nisa.activation"(%d, %c) {engine = "act", func = "tanh", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 512, 128, 1, 512>, array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "sbuf">, memref<128x512xf32, "sbuf">) -> ()
  "nisa.activation"(%c, %d) {engine = "act", func = "tanh", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 512, 128, 1, 512>, array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "sbuf">, memref<128x512xf32, "sbuf">) -> ()
  "nisa.activation"(%d, %c) {engine = "act", func = "tanh", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 512, 128, 1, 512>, array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "sbuf">, memref<128x512xf32, "sbuf">) -> ()
  "nisa.activation"(%c, %d) {engine = "act", func = "tanh", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 512, 128, 1, 512>, array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "sbuf">, memref<128x512xf32, "sbuf">) -> ()
  "nisa.activation"(%d, %c) {engine = "act", func = "tanh", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 512, 128, 1, 512>, array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "sbuf">, memref<128x512xf32, "sbuf">) -> ()
  "nisa.activation"(%c, %d) {engine = "act", func = "tanh", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 512, 128, 1, 512>, array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "sbuf">, memref<128x512xf32, "sbuf">) -> ()
  "nisa.activation"(%d, %c) {engine = "act", func = "tanh", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 512, 128, 1, 512>, array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "sbuf">, memref<128x512xf32, "sbuf">) -> ()
  "nisa.activation"(%c, %d) {engine = "act", func = "tanh", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 512, 128, 1, 512>, array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "sbuf">, memref<128x512xf32, "sbuf">) -> ()
  return
}

// -----

// Tests that the list schedule is improved by a backward and a second forward pass
// (justify): ranks alone run the long activation first (more work behind it), leaving PE
// idle until the short one is done; right-justified, the short activation, whose result PE
// transposes, goes first and the transpose overlaps the long activation. With justify=false
// (RANKED, ../schedule.mlir) the long one stays first.
// REORDER-LABEL: func.func @justified_short_first
// REORDER: "nisa.activation"(%[[SHORT:.*]], %{{.*}}) {{.*}}aps = [array<i64: 0, 128, 128, 1, 128>
// REORDER: "nisa.activation"(%{{.*}}, %{{.*}}) {{.*}}aps = [array<i64: 0, 512, 128, 1, 512>
// REORDER: "nisa.transpose"(%{{.*}}, %[[SHORT]])
// RANKED-LABEL: func.func @justified_short_first
// RANKED: "nisa.activation"(%{{.*}}, %{{.*}}) {{.*}}aps = [array<i64: 0, 512, 128, 1, 512>
// RANKED: "nisa.activation"(%{{.*}}, %{{.*}}) {{.*}}aps = [array<i64: 0, 128, 128, 1, 128>
func.func @justified_short_first() attributes {nisa.target = "trn2"} {
  %x = "nisa.alloc"() {memory = "sbuf", address = 0 : i64} : () -> memref<128x512xf32, "sbuf">
  %y = "nisa.alloc"() {memory = "sbuf", address = 2048 : i64} : () -> memref<128x512xf32, "sbuf">
  %s = "nisa.alloc"() {memory = "sbuf", address = 4096 : i64} : () -> memref<128x128xf32, "sbuf">
  %t = "nisa.alloc"() {memory = "sbuf", address = 4608 : i64} : () -> memref<128x128xf32, "sbuf">
  %p = "nisa.alloc"() {memory = "psum", address = 0 : i64} : () -> memref<128x128xf32, "psum">
  "nisa.activation"(%y, %x) {engine = "act", func = "exp", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 512, 128, 1, 512>, array<i64: 0, 512, 128, 1, 512>]} : (memref<128x512xf32, "sbuf">, memref<128x512xf32, "sbuf">) -> ()
  "nisa.activation"(%t, %s) {engine = "act", func = "exp", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]} : (memref<128x128xf32, "sbuf">, memref<128x128xf32, "sbuf">) -> ()
  "nisa.transpose"(%p, %t) {engine = "pe", aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]} : (memref<128x128xf32, "psum">, memref<128x128xf32, "sbuf">) -> ()
  return
}
