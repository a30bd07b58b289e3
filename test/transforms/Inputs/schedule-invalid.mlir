// A wait list that is not (semaphore, value) pairs (checked by ../schedule.mlir).
func.func @bad() attributes {nisa.target = "trn2"} {
  "nisa.nop"() {engine = "pe", aps = [], waits = array<i64: 1, 2, 3>} : () -> ()
  return
}
