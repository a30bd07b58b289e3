// A tile larger than a partition of SBUF (checked by ../plan_memory.mlir).
func.func @too_big() attributes {nisa.target = "trn2"} {
  %a = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x60000xf32, "sbuf">
  "nisa.memset"(%a) {engine = "pool", value = 0.0 : f32, aps = [array<i64: 0, 60000, 128, 1, 60000>]} : (memref<128x60000xf32, "sbuf">) -> ()
  return
}
