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
