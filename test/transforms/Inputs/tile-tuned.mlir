// A GEMM for tile.mlir's tuning-database cases: neuron-tune tunes it into a fresh database,
// then trn-tile reads that database back.
// TUNED-LABEL: func.func @gemm
// TUNED: }) {gemm_block = {{[0-9]+}} : i64, gemm_resident = "{{[pf]}}", kind = "matmul", orientation = "{{mn|nm}}", resultSegmentSizes = array<i32: 1, 0, 0>}
// CORRUPT: RuntimeWarning: tuning database {{.*}}tile-corrupt-db.json is corrupt (not JSON
// CORRUPT-LABEL: func.func @gemm
// CORRUPT: }) {gemm_block = 2 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
func.func @gemm(%a: tensor<256x256xbf16>, %b: tensor<256x1024xbf16>) -> tensor<256x1024xbf16> {
  %k = "trn.kernel"() ({
    %y = "trn.matmul"(%a, %b) : (tensor<256x256xbf16>, tensor<256x1024xbf16>) -> tensor<256x1024xf32>
    %z = "trn.convert"(%y) : (tensor<256x1024xf32>) -> tensor<256x1024xbf16>
    "trn.yield"(%z) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x1024xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x1024xbf16>
  return %k : tensor<256x1024xbf16>
}
