// RUN: neuron-opt --split-input-file --trn-tile %s | FileCheck %s
// RUN: neuron-opt --split-input-file --trn-tile="target=trn1" %s | FileCheck %s --check-prefix=TRN1
// RUN: not neuron-opt --trn-tile %S/Inputs/tile-invalid.mlir 2>&1 | FileCheck %s --check-prefix=ERR
// Tests that a kernel tuned by neuron-tune gets the stored configuration back from the
// tuning database (keyed by its IR and target), and that a corrupt database is a warning
// naming the file, the kernel keeping trn-tile's own choices.
// RUN: rm -f %t.json
// RUN: neuron-tune --quiet --db %t.json --max-candidates 4 %S/Inputs/tile-tuned.mlir
// RUN: neuron-opt --trn-tile="tuning-db=%t.json" %S/Inputs/tile-tuned.mlir | FileCheck %S/Inputs/tile-tuned.mlir --check-prefix=TUNED
// RUN: neuron-opt --trn-tile="tuning-db=%S/Inputs/tile-corrupt-db.json" %S/Inputs/tile-tuned.mlir 2>&1 | FileCheck %S/Inputs/tile-tuned.mlir --check-prefix=CORRUPT
// Tests that gemm_resident must name an operand.
// RUN: not neuron-opt --trn-tile %S/Inputs/tile-invalid-resident.mlir 2>&1 | FileCheck %s --check-prefix=RESIDENT
// RESIDENT: tile-invalid-resident.mlir:3:8: error: trn-tile: unknown gemm_resident 'k' (expected p or f)

// Tests that a bias constant along M, with the result stored row-major, keeps M on
// partitions ("mn"): the bias is read as a [M-tile, N-tile] broadcast beside PSUM, rather than
// per partition by an "nm" product that would go back through the PE to be stored.
// CHECK-LABEL: func.func @bias_over_features
// CHECK: }) {gemm_block = 1 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
func.func @bias_over_features(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %k = "trn.kernel"() ({
    %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<16xf32>) -> tensor<4x16xf32>
    %y = "trn.matmul"(%x, %w) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    %z = "trn.tensor_tensor"(%bb, %y) {op = "add"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    "trn.yield"(%z) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<4x16xf32>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<4x16xf32>
  return %k : tensor<4x16xf32>
}

// -----

// Tests that a bias constant along M, with the result stored transposed, puts N on
// partitions ("nm"): the activation engine adds it per partition and the tiles are stored as
// they are.
// CHECK-LABEL: func.func @bias_over_features_stored_transposed
// CHECK: }) {{{.*}}kind = "matmul", orientation = "nm", resultSegmentSizes = array<i32: 1, 0, 0>}
func.func @bias_over_features_stored_transposed(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<16x4xf32> {
  %k = "trn.kernel"() ({
    %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<16xf32>) -> tensor<4x16xf32>
    %y = "trn.matmul"(%x, %w) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    %z = "trn.tensor_tensor"(%bb, %y) {op = "add"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %t = "trn.transpose"(%z) {permutation = array<i64: 1, 0>} : (tensor<4x16xf32>) -> tensor<16x4xf32>
    "trn.yield"(%t) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<16x4xf32>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<16x4xf32>
  return %k : tensor<16x4xf32>
}

// -----

// Tests that when both operands fit on chip whole (a tie: each is loaded once either way), a
// product of at most four 128-row tiles of A keeps B resident and streams A's row tiles, so
// its output rows are done one tile after another (a layer norm reading them starts on the
// first); with more row tiles A stays resident.
// CHECK-LABEL: func.func @few_rows_streamed
// CHECK: }) {gemm_block = 2 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-LABEL: func.func @many_rows_resident
// CHECK: }) {gemm_block = 16 : i64, gemm_resident = "p", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
func.func @few_rows_streamed(%x: tensor<512x768xbf16>, %w: tensor<768x768xbf16>) -> tensor<512x768xbf16> {
  %k = "trn.kernel"() ({
    %y = "trn.matmul"(%x, %w) : (tensor<512x768xbf16>, tensor<768x768xbf16>) -> tensor<512x768xf32>
    %z = "trn.convert"(%y) : (tensor<512x768xf32>) -> tensor<512x768xbf16>
    "trn.yield"(%z) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<512x768xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<512x768xbf16>
  return %k : tensor<512x768xbf16>
}
func.func @many_rows_resident(%x: tensor<2048x768xbf16>, %w: tensor<768x768xbf16>) -> tensor<2048x768xbf16> {
  %k = "trn.kernel"() ({
    %y = "trn.matmul"(%x, %w) : (tensor<2048x768xbf16>, tensor<768x768xbf16>) -> tensor<2048x768xf32>
    %z = "trn.convert"(%y) : (tensor<2048x768xf32>) -> tensor<2048x768xbf16>
    "trn.yield"(%z) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2048x768xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2048x768xbf16>
  return %k : tensor<2048x768xbf16>
}

// -----

// Tests that when neither operand fits on chip whole, the one PE must transpose stays
// resident, loaded (and transposed) once, while the other streams past it once per block:
// A (row-major: A^T needs PE transposes) stays here, 13 row tiles at a time; with B stored
// transposed instead (and A not), B stays, in one block of all four 512-column tiles.
// CHECK-LABEL: func.func @resident_stationary
// CHECK: }) {gemm_block = 13 : i64, gemm_resident = "p", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-LABEL: func.func @resident_moving
// CHECK: }) {gemm_block = 4 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
func.func @resident_stationary(%a: tensor<4096x4096xbf16>, %b: tensor<4096x4096xbf16>) -> tensor<4096x4096xbf16> {
  %k = "trn.kernel"() ({
    %y = "trn.matmul"(%a, %b) : (tensor<4096x4096xbf16>, tensor<4096x4096xbf16>) -> tensor<4096x4096xf32>
    %z = "trn.convert"(%y) : (tensor<4096x4096xf32>) -> tensor<4096x4096xbf16>
    "trn.yield"(%z) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<4096x4096xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<4096x4096xbf16>
  return %k : tensor<4096x4096xbf16>
}
func.func @resident_moving(%xt: tensor<4096x2048xbf16>, %w: tensor<2048x4096xbf16>) -> tensor<2048x2048xbf16> {
  %k = "trn.kernel"() ({
    %a = "trn.transpose"(%xt) {permutation = array<i64: 1, 0>} : (tensor<4096x2048xbf16>) -> tensor<2048x4096xbf16>
    %b = "trn.transpose"(%w) {permutation = array<i64: 1, 0>} : (tensor<2048x4096xbf16>) -> tensor<4096x2048xbf16>
    %y = "trn.matmul"(%a, %b) : (tensor<2048x4096xbf16>, tensor<4096x2048xbf16>) -> tensor<2048x2048xf32>
    %z = "trn.convert"(%y) : (tensor<2048x2048xf32>) -> tensor<2048x2048xbf16>
    "trn.yield"(%z) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2048x2048xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2048x2048xbf16>
  return %k : tensor<2048x2048xbf16>
}

// -----

// Tests that a plain matmul keeps M on partitions ("mn").
// CHECK-LABEL: func.func @plain
// CHECK: }) {gemm_block = 1 : i64, gemm_resident = "f", kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
func.func @plain(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %k = "trn.kernel"() ({
    %y = "trn.matmul"(%x, %w) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    "trn.yield"(%y) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<4x16xf32>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<4x16xf32>
  return %k : tensor<4x16xf32>
}

// -----

// Tests that an elementwise kernel gets a free tile size derived from the target's SBUF.
// CHECK-LABEL: func.func @elementwise
// CHECK: }) {free_tile = 3072 : i64, kind = "elementwise", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// TRN1-LABEL: func.func @elementwise
// TRN1: }) {free_tile = 2560 : i64, kind = "elementwise", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
func.func @elementwise(%x: tensor<128x8192xf32>) -> tensor<128x8192xf32> {
  %k = "trn.kernel"() ({
    %e = "trn.activation"(%x) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x8192xf32>) -> tensor<128x8192xf32>
    "trn.yield"(%e) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x8192xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x8192xf32>
  return %k : tensor<128x8192xf32>
}

// ERR: tile-invalid.mlir:3:8: error: trn-tile: unknown matmul orientation 'km' (expected mn or nm)
