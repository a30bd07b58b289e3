// RUN: neuron-opt --split-input-file --convert-trn-to-nisa %s | FileCheck %s
// RUN: neuron-opt --split-input-file --convert-trn-to-nisa="masked-keys=false" %s | FileCheck %s --check-prefix=NOMASK
// RUN: neuron-opt --split-input-file --convert-trn-to-nisa="pool-sharing=false" %s | FileCheck %s --check-prefix=NOPOOL
// RUN: neuron-opt --split-input-file --convert-trn-to-nisa="regroup-copies=false" %s | FileCheck %s --check-prefix=NOREGROUP
// RUN: neuron-opt --split-input-file --convert-trn-to-nisa="scale-into-q=false" %s | FileCheck %s --check-prefix=NOSCALE
// RUN: not neuron-opt --convert-trn-to-nisa %S/Inputs/trn_to_nisa-invalid.mlir 2>&1 | FileCheck %s --check-prefix=ERR
// RUN: not neuron-opt --convert-trn-to-nisa %S/Inputs/trn_to_nisa-invalid-mlp.mlir 2>&1 | FileCheck %s --check-prefix=ERRMLP
// RUN: not neuron-opt --convert-trn-to-nisa %S/Inputs/trn_to_nisa-invalid-mlp-rows.mlir 2>&1 | FileCheck %s --check-prefix=ERRMLPROWS
// RUN: not neuron-opt --convert-trn-to-nisa %S/Inputs/trn_to_nisa-invalid-mlp-saved.mlir 2>&1 | FileCheck %s --check-prefix=ERRMLPSAVED
// RUN: not neuron-opt --split-input-file --convert-trn-to-nisa %S/Inputs/trn_to_nisa-invalid-merged.mlir 2>&1 | FileCheck %s --check-prefix=ERRMERGED
// RUN: not neuron-opt --convert-trn-to-nisa %S/Inputs/trn_to_nisa-invalid-results.mlir 2>&1 | FileCheck %s --check-prefix=ERRRES
// RUN: not neuron-opt --convert-trn-to-nisa %S/Inputs/trn_to_nisa-invalid-row-results.mlir 2>&1 | FileCheck %s --check-prefix=ERRROWRES
// RUN: not neuron-opt --split-input-file --convert-trn-to-nisa %S/Inputs/trn_to_nisa-invalid-column-sum.mlir 2>&1 | FileCheck %s --check-prefix=ERRCOLS
// RUN: not neuron-opt --convert-trn-to-nisa %S/Inputs/trn_to_nisa-invalid-weight-gradient.mlir 2>&1 | FileCheck %s --check-prefix=ERRWG

// Tests the lowering of a Linear + bias + ReLU kernel computed transposed ("nm"): tensors
// become HBM buffers and the result an output argument; K = 256 runs as two 128-row K-tiles
// accumulating in one PSUM tile; the activation engine reads PSUM, adds the per-partition
// bias and writes SBUF; each operand arrives in wide DMAs (contiguous 1 KiB rows, split by
// partitions over several queues) and its [128, 128] blocks are transposed on PE (K must sit
// on partitions) where the matmuls first use them, K-tile by K-tile, so the first matmul
// waits for one K-tile of each operand only; the result is transposed back and stored by DMA.
// CHECK-LABEL: func.func @linear_relu
// CHECK-SAME: (%[[W:.*]]: memref<128x256xf32, "hbm">, %[[B:.*]]: memref<128xf32, "hbm">, %[[X:.*]]: memref<64x256xf32, "hbm">, %[[OUT:.*]]: memref<64x128xf32, "hbm">)
// CHECK-SAME: nisa.num_inputs = 3 : i64, nisa.target = "trn2"
// CHECK: %[[ACC:.*]] = "nisa.alloc"() {memory = "psum"} : () -> memref<128x64xf32, "psum">
// CHECK: "nisa.dma"(%[[WROWS:.*]], %[[W]]) {aps = [array<i64: 0, 256, 32, 1, 256>, array<i64: 0, 256, 32, 1, 256>], engine = "dma"
// CHECK: "nisa.dma"(%[[WROWS]], %[[W]]) {aps = [array<i64: 8192, 256, 32, 1, 256>, array<i64: 8192, 256, 32, 1, 256>], engine = "dma"
// CHECK: "nisa.transpose"(%{{.*}}, %[[WROWS]]) {aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 256, 128, 1, 128>]
// CHECK: "nisa.dma"(%[[XROWS:.*]], %[[X]])
// CHECK: "nisa.transpose"(%{{.*}}, %[[XROWS]]) {aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 256, 64, 1, 128>]
// CHECK: "nisa.matmul"(%[[ACC]], %{{.*}}, %{{.*}}) {accumulate = false
// CHECK: "nisa.transpose"(%{{.*}}, %[[WROWS]]) {aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 128, 256, 128, 1, 128>]
// CHECK: "nisa.transpose"(%{{.*}}, %[[XROWS]]) {aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 128, 256, 64, 1, 128>]
// CHECK: "nisa.matmul"(%[[ACC]], %{{.*}}, %{{.*}}) {accumulate = true
// CHECK: "nisa.dma"(%[[BIAS:.*]], %[[B]]) {aps = [array<i64: 0, 1, 128, 1, 1>, array<i64: 0, 1, 128, 0, 1>]
// CHECK: %[[H:.*]] = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x64xf32, "sbuf">
// CHECK: "nisa.activation"(%[[H]], %[[ACC]], %[[BIAS]]) {{{.*}}engine = "act", func = "relu"
// CHECK: "nisa.transpose"(%{{.*}}, %[[H]])
// CHECK: "nisa.dma"(%[[OUT]], %{{.*}}) {aps = [array<i64: 0, 128, 64, 1, 128>, array<i64: 0, 128, 64, 1, 128>], engine = "dma"
// CHECK: return
func.func @linear_relu(%w: tensor<128x256xf32>, %b: tensor<128xf32>, %x: tensor<64x256xf32>) -> tensor<64x128xf32> {
  %k = "trn.kernel"() ({
    %t = "trn.transpose"(%w) {permutation = array<i64: 1, 0>} : (tensor<128x256xf32>) -> tensor<256x128xf32>
    %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<128xf32>) -> tensor<64x128xf32>
    %y = "trn.matmul"(%x, %t) : (tensor<64x256xf32>, tensor<256x128xf32>) -> tensor<64x128xf32>
    %z = "trn.tensor_tensor"(%bb, %y) {op = "add"} : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>
    %r = "trn.activation"(%z) {func = "relu", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<64x128xf32>) -> tensor<64x128xf32>
    "trn.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<64x128xf32>) -> ()
  }) {kind = "matmul", orientation = "nm", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<64x128xf32>
  return %k : tensor<64x128xf32>
}

// -----

// Tests that a GEMM whose rows are short (K = N = 256 bf16: 512-byte DMA runs, which the
// per-run DMA cost makes slow) interleaves four row tiles by partition: partition p of each
// 512-row block holds rows 4p..4p+3, so A arrives in 2 KiB runs (partition stride 4 rows)
// and C leaves in 2 KiB runs; output tile j's stationary operand is the PE transpose of panel
// columns [256 j, 256 j + 256), and it is evacuated into columns [256 j, 256 j + 256) of the
// block's output tile, stored once.
// CHECK-LABEL: func.func @grouped_rows
// CHECK-SAME: (%[[A:.*]]: memref<2048x256xbf16, "hbm">, %[[B:.*]]: memref<256x256xbf16, "hbm">, %[[C:.*]]: memref<2048x256xbf16, "hbm">)
// CHECK: "nisa.dma"(%[[PANEL:.*]], %[[A]]) {aps = [array<i64: 0, 1024, 16, 1, 1024>, array<i64: 0, 1024, 16, 1, 1024>]
// CHECK: "nisa.transpose"(%{{.*}}, %[[PANEL]]) {aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 1024, 128, 1, 128>]
// CHECK: "nisa.matmul"(%[[ACC0:.*]], %{{.*}}, %{{.*}}) {accumulate = false
// CHECK: "nisa.transpose"(%{{.*}}, %[[PANEL]]) {aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 128, 1024, 128, 1, 128>]
// CHECK: "nisa.matmul"(%[[ACC0]], %{{.*}}, %{{.*}}) {accumulate = true
// CHECK: "nisa.tensor_copy"(%[[OUT:.*]], %[[ACC0]]) {aps = [array<i64: 0, 1024, 128, 1, 256>, array<i64: 0, 256, 128, 1, 256>]
// CHECK: "nisa.transpose"(%{{.*}}, %[[PANEL]]) {aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 256, 1024, 128, 1, 128>]
// CHECK: "nisa.tensor_copy"(%[[OUT]], %{{.*}}) {aps = [array<i64: 256, 1024, 128, 1, 256>
// CHECK: "nisa.dma"(%[[C]], %[[OUT]]) {aps = [array<i64: 0, 1024, 16, 1, 1024>, array<i64: 0, 1024, 16, 1, 1024>]
func.func @grouped_rows(%a: tensor<2048x256xbf16>, %b: tensor<256x256xbf16>) -> tensor<2048x256xbf16> {
  %k = "trn.kernel"() ({
    %y = "trn.matmul"(%a, %b) : (tensor<2048x256xbf16>, tensor<256x256xbf16>) -> tensor<2048x256xf32>
    %z = "trn.convert"(%y) : (tensor<2048x256xf32>) -> tensor<2048x256xbf16>
    "trn.yield"(%z) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2048x256xbf16>) -> ()
  }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2048x256xbf16>
  return %k : tensor<2048x256xbf16>
}

// -----

// Tests that a batched matmul whose every product is a single block of 512 rows ([512, 512]
// @ [512, 64] per head, a softmax gradient times K) interleaves its row tiles too: the blocks
// of all four products overlap one another's stores. Each product's A arrives as [128, 4 x
// 512] (4 KiB runs, partition stride four rows) and its result leaves as [128, 4 x 64]
// (512 B runs instead of 128 B).
// CHECK-LABEL: func.func @grouped_rows_per_head
// CHECK: "nisa.dma"(%[[PANEL:.*]], %arg0) {aps = [array<i64: 0, 2048, 8, 1, 2048>, array<i64: 0, 2048, 8, 1, 2048>]
// CHECK: "nisa.transpose"(%{{.*}}, %[[PANEL]])
// CHECK: "nisa.dma"(%arg2, %{{.*}}) {aps = [array<i64: 0, 256, 64, 1, 256>, array<i64: 0, 256, 64, 1, 256>]
// CHECK: "nisa.dma"(%{{.*}}, %arg0) {aps = [array<i64: 0, 2048, 8, 1, 2048>, array<i64: 262144, 2048, 8, 1, 2048>]
func.func @grouped_rows_per_head(%a: tensor<4x512x512xbf16>, %b: tensor<4x512x64xbf16>) -> tensor<4x512x64xbf16> {
  %k = "trn.kernel"() ({
    %y = "trn.matmul"(%a, %b) : (tensor<4x512x512xbf16>, tensor<4x512x64xbf16>) -> tensor<4x512x64xf32>
    %z = "trn.convert"(%y) : (tensor<4x512x64xf32>) -> tensor<4x512x64xbf16>
    "trn.yield"(%z) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<4x512x64xbf16>) -> ()
  }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<4x512x64xbf16>
  return %k : tensor<4x512x64xbf16>
}

// -----

// Tests that an elementwise op outside any kernel is tiled over 128 partitions. A [300, 64]
// tensor plus a row broadcast over it cannot be merged into one contiguous extent, so it is
// tiled as 128, 128 and 44 rows; the broadcast loads with partition stride 0. Every operand
// of the adds is in SBUF, so POOL shares them with DVE: each goes to whichever would finish it
// first (POOL, at its faster clock, then DVE, then POOL). A contiguous tensor alone is spread
// evenly: 19200 elements become 128 partitions x 150 (loaded in two 64-partition pieces on
// two queues).
// CHECK-LABEL: func.func @add_row
// CHECK: "nisa.dma"(%{{.*}}, %arg0) {aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]
// CHECK: "nisa.dma"(%{{.*}}, %arg1) {aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 0, 128, 1, 64>]
// CHECK: "nisa.tensor_tensor"({{.*}}engine = "pool", op = "add"
// CHECK: "nisa.dma"(%arg2, %{{.*}}) {aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]
// Without pool-sharing, all three adds run on DVE.
// NOPOOL-LABEL: func.func @add_row
// NOPOOL-COUNT-3: "nisa.tensor_tensor"({{.*}}engine = "dve", op = "add"
// NOPOOL-NOT: engine = "pool"
// NOPOOL-LABEL: func.func @exp
// CHECK: "nisa.dma"(%{{.*}}, %arg0) {aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 8192, 64, 128, 1, 64>]
// CHECK: "nisa.tensor_tensor"({{.*}}engine = "dve", op = "add"
// CHECK: "nisa.dma"(%{{.*}}, %arg0) {aps = [array<i64: 0, 64, 44, 1, 64>, array<i64: 16384, 64, 44, 1, 64>]
// CHECK: "nisa.tensor_tensor"({{.*}}engine = "pool", op = "add"
// CHECK-LABEL: func.func @exp
// CHECK: "nisa.dma"(%{{.*}}, %arg0) {aps = [array<i64: 0, 150, 64, 1, 150>, array<i64: 0, 150, 64, 1, 150>]
// CHECK: "nisa.activation"({{.*}}func = "exp"
func.func @add_row(%x: tensor<300x64xf32>, %b: tensor<64xf32>) -> tensor<300x64xf32> {
  %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<64xf32>) -> tensor<300x64xf32>
  %e = "trn.tensor_tensor"(%x, %bb) {op = "add"} : (tensor<300x64xf32>, tensor<300x64xf32>) -> tensor<300x64xf32>
  return %e : tensor<300x64xf32>
}
func.func @exp(%x: tensor<300x64xf32>) -> tensor<300x64xf32> {
  %e = "trn.activation"(%x) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<300x64xf32>) -> tensor<300x64xf32>
  return %e : tensor<300x64xf32>
}

// -----

// Tests that returning an input copies it into the output buffer through SBUF.
// CHECK-LABEL: func.func @identity
// CHECK: "nisa.dma"(%{{.*}}, %arg0)
// CHECK: "nisa.dma"(%arg1, %{{.*}})
func.func @identity(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  return %x : tensor<4x8xf32>
}

// -----

// Tests the lowering of a softmax-style kernel: a reduction with elementwise ops before
// (exp) and after (reciprocal). The kept dim goes on partitions, the reduced dim on the free
// axis: one DVE tensor_reduce per tile; the [P, 1] result is finished on chip and stored.
// CHECK-LABEL: func.func @exp_sum
// CHECK: "nisa.dma"(%{{.*}}, %arg0) {aps = [array<i64: 0, 16, 4, 1, 16>, array<i64: 0, 16, 4, 1, 16>]
// CHECK: "nisa.activation"({{.*}}func = "exp"
// CHECK: "nisa.tensor_reduce"({{.*}}engine = "dve", op = "add", reduce_dims = 1 : i64}
// CHECK: "nisa.activation"({{.*}}func = "reciprocal"
// CHECK: "nisa.dma"(%arg1, %{{.*}}) {aps = [array<i64: 0, 1, 4, 1, 1>, array<i64: 0, 1, 4, 1, 1>]
func.func @exp_sum(%x: tensor<4x16xf32>) -> tensor<4xf32> {
  %k = "trn.kernel"() ({
    %e = "trn.activation"(%x) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<4x16xf32>) -> tensor<4x16xf32>
    %s = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 1>} : (tensor<4x16xf32>) -> tensor<4xf32>
    %r = "trn.activation"(%s) {func = "reciprocal", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<4xf32>) -> tensor<4xf32>
    "trn.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<4xf32>) -> ()
  }) {kind = "reduce", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<4xf32>
  return %k : tensor<4xf32>
}

// -----

// Tests that a reduction over every dim reduces per partition, then across partitions by
// transposing the [P, 1] partials on PE and reducing once more.
// CHECK-LABEL: func.func @max_all
// CHECK: "nisa.tensor_reduce"({{.*}}op = "max"
// CHECK: "nisa.transpose"
// CHECK: "nisa.tensor_reduce"({{.*}}op = "max"
func.func @max_all(%x: tensor<256x8xf32>) -> tensor<f32> {
  %m = "trn.reduce"(%x) {op = "max", dimensions = array<i64: 0, 1>} : (tensor<256x8xf32>) -> tensor<f32>
  return %m : tensor<f32>
}

// -----

// Tests that a loop index (trn.iota) is generated on chip by IOTA, not loaded: for a [4, 16]
// index along dim 1 each partition counts 0..15.
// CHECK-LABEL: func.func @iota
// CHECK: "nisa.iota"({{.*}}) {{{.*}}base = 0.000000e+00 : f32, engine = "pool", free_step = 1.000000e+00 : f32, partition_step = 0.000000e+00 : f32}
func.func @iota(%x: tensor<4x16xi64>) -> tensor<4x16xi64> {
  %i = "trn.iota"() {dimension = 1 : i64} : () -> tensor<4x16xi64>
  %s = "trn.tensor_tensor"(%x, %i) {op = "add"} : (tensor<4x16xi64>, tensor<4x16xi64>) -> tensor<4x16xi64>
  return %s : tensor<4x16xi64>
}

// -----

// Tests that an insert_slice writes in place into its destination's buffer (the output,
// since the result is returned): each source is copied into its region, no destination copy.
// CHECK-LABEL: func.func @concat
// CHECK-SAME: (%arg0: memref<4x16xf32, "hbm">, %arg1: memref<4x32xf32, "hbm">)
// CHECK: "nisa.dma"(%{{.*}}, %arg0)
// CHECK: "nisa.dma"(%arg1, %{{.*}}) {aps = [array<i64: 0, 32, 4, 1, 16>
// CHECK: "nisa.dma"(%{{.*}}, %arg0)
// CHECK: "nisa.dma"(%arg1, %{{.*}}) {aps = [array<i64: 16, 32, 4, 1, 16>
// CHECK-NOT: "nisa.alloc"() {memory = "hbm"}
func.func @concat(%x: tensor<4x16xf32>) -> tensor<4x32xf32> {
  %e = "trn.empty"() : () -> tensor<4x32xf32>
  %a = "trn.insert_slice"(%e, %x) {offsets = array<i64: 0, 0>, strides = array<i64: 1, 1>} : (tensor<4x32xf32>, tensor<4x16xf32>) -> tensor<4x32xf32>
  %b = "trn.insert_slice"(%a, %x) {offsets = array<i64: 0, 16>, strides = array<i64: 1, 1>} : (tensor<4x32xf32>, tensor<4x16xf32>) -> tensor<4x32xf32>
  return %b : tensor<4x32xf32>
}

// -----

// Tests that a flipped view is read by a DMA with a negative stride.
// CHECK-LABEL: func.func @flip
// CHECK: "nisa.dma"(%{{.*}}, %arg0) {aps = [array<i64: 0, 16, 4, 1, 16>, array<i64: 15, 16, 4, -1, 16>]
func.func @flip(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %v = "trn.view"(%x) {indexing_map = affine_map<(d0, d1) -> (d0, 15 - d1)>} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %e = "trn.activation"(%v) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return %e : tensor<4x16xf32>
}

// -----

// Tests the convolution lowering: the input plane is loaded once ([C, H*W]) and, since its 3
// channels leave PE's rows free, copied on chip (SBUF to SBUF, one run per partition) into two
// more partition blocks shifted by one and two elements; the weights come as contiguous rows
// and each kernel row's three positions are transposed together on PE into one stationary
// operand [3 positions x 3 channels, 4]; each kernel row is then one matmul contracting over
// 9 partitions, reading the blocks through one window access pattern (stride 2 along both
// spatial dims), all accumulating in one PSUM tile; the bias add and ReLU fold into one
// activation.
// CHECK-LABEL: func.func @conv
// CHECK: "nisa.dma"(%{{.*}}, %arg1) {aps = [array<i64: 0, 27, 4, 1, 27>, array<i64: 0, 27, 4, 9, 3, 3, 3, 1, 3>]
// CHECK: "nisa.transpose"({{.*}}) {aps = [array<i64: 0, 4, 9, 1, 4>, array<i64: 0, 27, 4, 1, 3, 9, 3>]
// CHECK: "nisa.transpose"({{.*}}) {aps = [array<i64: 0, 4, 9, 1, 4>, array<i64: 3, 27, 4, 1, 3, 9, 3>]
// CHECK: "nisa.transpose"({{.*}}) {aps = [array<i64: 0, 4, 9, 1, 4>, array<i64: 6, 27, 4, 1, 3, 9, 3>]
// CHECK-NOT: "nisa.transpose"
// CHECK: "nisa.dma"(%[[PLANE:.*]], %arg0) {aps = [array<i64: 0, 100, 3, 1, 100>, array<i64: 0, 100, 3, 10, 10, 1, 10>]
// CHECK: "nisa.dma"(%[[PLANE]], %[[PLANE]]) {aps = [array<i64: 300, 100, 3, 1, 99>, array<i64: 1, 100, 3, 1, 99>]
// CHECK: "nisa.dma"(%[[PLANE]], %[[PLANE]]) {aps = [array<i64: 600, 100, 3, 1, 98>, array<i64: 2, 100, 3, 1, 98>]
// CHECK: "nisa.matmul"({{.*}}) {accumulate = false, aps = [array<i64: 0, 16, 4, 1, 16>, array<i64: 0, 4, 9, 1, 4>, array<i64: 0, 100, 9, 20, 4, 2, 4>]
// CHECK: "nisa.matmul"({{.*}}) {accumulate = true, aps = [array<i64: 0, 16, 4, 1, 16>, array<i64: 0, 4, 9, 1, 4>, array<i64: 10, 100, 9, 20, 4, 2, 4>]
// CHECK: "nisa.matmul"({{.*}}) {accumulate = true, aps = [array<i64: 0, 16, 4, 1, 16>, array<i64: 0, 4, 9, 1, 4>, array<i64: 20, 100, 9, 20, 4, 2, 4>]
// CHECK-NOT: "nisa.matmul"
// CHECK: "nisa.activation"({{.*}}func = "relu", operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>
func.func @conv(%x: tensor<2x3x10x10xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf32>) -> tensor<2x4x4x4xf32> {
  %k = "trn.kernel"() ({
    %c = "trn.conv"(%x, %w) {strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<2x3x10x10xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x4x4xf32>
    %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0, 2, 3>} : (tensor<4xf32>) -> tensor<2x4x4x4xf32>
    %s = "trn.tensor_tensor"(%c, %bb) {op = "add"} : (tensor<2x4x4x4xf32>, tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
    %r = "trn.activation"(%s) {func = "relu", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
    "trn.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2x4x4x4xf32>) -> ()
  }) {kind = "conv", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x4x4x4xf32>
  return %k : tensor<2x4x4x4xf32>
}

// -----

// Tests that an epilogue's per-channel steps (a batch norm in inference: (x - mean) * rstd *
// gamma + beta) pair up: two steps in a row, the first's fp32 result read by the second alone,
// are one DVE tensor_scalar with two ALU ops; a multiply and an add ahead of an activation are
// its per-partition scale and bias (one ACT instruction reading the pair's result).
// CHECK-LABEL: func.func @conv_batchnorm
// CHECK: "nisa.tensor_scalar"({{.*}}engine = "dve", {{.*}}op0 = "sub", op1 = "mul", operandSegmentSizes = array<i32: 1, 1, 1, 1>, reverse0 = false, reverse1 = false}
// CHECK-NOT: "nisa.tensor_scalar"
// CHECK: "nisa.activation"({{.*}}func = "relu", operandSegmentSizes = array<i32: 1, 1, 1, 1, 0>, scale = 1.000000e+00 : f32}
// CHECK-NOT: "nisa.tensor_scalar"
// CHECK: return
func.func @conv_batchnorm(%x: tensor<1x4x6x6xf32>, %w: tensor<4x4x3x3xf32>, %m: tensor<4xf32>, %r: tensor<4xf32>, %g: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<1x4x4x4xf32> {
  %k = "trn.kernel"() ({
    %c = "trn.conv"(%x, %w) {strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x4x4xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 0, 2, 3>} : (tensor<4xf32>) -> tensor<1x4x4x4xf32>
    %rb = "trn.broadcast"(%r) {dimensions = array<i64: 0, 2, 3>} : (tensor<4xf32>) -> tensor<1x4x4x4xf32>
    %gb = "trn.broadcast"(%g) {dimensions = array<i64: 0, 2, 3>} : (tensor<4xf32>) -> tensor<1x4x4x4xf32>
    %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0, 2, 3>} : (tensor<4xf32>) -> tensor<1x4x4x4xf32>
    %s1 = "trn.tensor_tensor"(%c, %mb) {op = "sub"} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %s2 = "trn.tensor_tensor"(%s1, %rb) {op = "mul"} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %s3 = "trn.tensor_tensor"(%gb, %s2) {op = "mul"} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %s4 = "trn.tensor_tensor"(%s3, %bb) {op = "add"} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %o = "trn.activation"(%s4) {func = "relu", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    "trn.yield"(%o) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x4x4x4xf32>) -> ()
  }) {kind = "conv", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x4x4x4xf32>
  return %k : tensor<1x4x4x4xf32>
}

// -----

// Tests that a reversed step (mean - x) keeps its order in a pair; that a multiply and an
// add not followed by an activation still make one instruction, here ACT's identity with a
// per-partition scale and bias (ACT finishes it before DVE, which has the first pair); and
// that a residual's add, whose operand is no per-channel vector, is left alone.
// CHECK-LABEL: func.func @conv_batchnorm_residual
// CHECK: "nisa.tensor_scalar"({{.*}}op0 = "sub", op1 = "mul", operandSegmentSizes = array<i32: 1, 1, 1, 1>, reverse0 = true, reverse1 = false}
// CHECK-NOT: "nisa.tensor_scalar"
// CHECK: "nisa.activation"({{.*}}func = "identity", operandSegmentSizes = array<i32: 1, 1, 1, 1, 0>
// CHECK-NOT: "nisa.tensor_scalar"
// CHECK: "nisa.tensor_tensor"({{.*}}op = "add"
// CHECK: "nisa.activation"({{.*}}func = "relu", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>
func.func @conv_batchnorm_residual(%x: tensor<1x4x6x6xf32>, %w: tensor<4x4x3x3xf32>, %m: tensor<4xf32>, %r: tensor<4xf32>, %g: tensor<4xf32>, %b: tensor<4xf32>, %res: tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32> {
  %k = "trn.kernel"() ({
    %c = "trn.conv"(%x, %w) {strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x4x4xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 0, 2, 3>} : (tensor<4xf32>) -> tensor<1x4x4x4xf32>
    %rb = "trn.broadcast"(%r) {dimensions = array<i64: 0, 2, 3>} : (tensor<4xf32>) -> tensor<1x4x4x4xf32>
    %gb = "trn.broadcast"(%g) {dimensions = array<i64: 0, 2, 3>} : (tensor<4xf32>) -> tensor<1x4x4x4xf32>
    %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0, 2, 3>} : (tensor<4xf32>) -> tensor<1x4x4x4xf32>
    %s1 = "trn.tensor_tensor"(%mb, %c) {op = "sub"} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %s2 = "trn.tensor_tensor"(%s1, %rb) {op = "mul"} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %s3 = "trn.tensor_tensor"(%s2, %gb) {op = "mul"} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %s4 = "trn.tensor_tensor"(%s3, %bb) {op = "add"} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %s5 = "trn.tensor_tensor"(%res, %s4) {op = "add"} : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    %o = "trn.activation"(%s5) {func = "relu", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
    "trn.yield"(%o) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x4x4x4xf32>) -> ()
  }) {kind = "conv", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x4x4x4xf32>
  return %k : tensor<1x4x4x4xf32>
}

// -----

// Tests that max pooling reads each window of the loaded plane through an access pattern and
// combines them on DVE.
// CHECK-LABEL: func.func @maxpool
// CHECK: "nisa.tensor_copy"({{.*}}) {aps = [array<i64: 0, 16, 3, 1, 16>, array<i64: 0, 64, 3, 16, 4, 2, 4>], engine = "dve"}
// CHECK-COUNT-3: "nisa.tensor_tensor"({{.*}}engine = "dve", op = "max"}
func.func @maxpool(%x: tensor<2x3x8x8xf32>) -> tensor<2x3x4x4xf32> {
  %p = "trn.pool"(%x) {op = "max", window = array<i64: 2, 2>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>} : (tensor<2x3x8x8xf32>) -> tensor<2x3x4x4xf32>
  return %p : tensor<2x3x4x4xf32>
}

// -----

// Tests that an elementwise kernel whose broadcast operand keeps the outer dim (12 heads) from
// merging with the rest still fills the partitions: the merged inner extent 64 x 256 is split
// as 128 partitions x 128 elements, and the heads loop (tiles [128, 128], not [12, 16384]).
// CHECK-LABEL: func.func @heads_plus_mask
// CHECK: "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x128xf32, "sbuf">
// CHECK: "nisa.tensor_tensor"({{.*}}aps = [array<i64: 0, 128, 128, 1, 128>
// CHECK-NOT: memref<12x{{[0-9]+}}xf32, "sbuf">
func.func @heads_plus_mask(%x: tensor<12x64x256xf32>, %m: tensor<64x256xf32>) -> tensor<12x64x256xf32> {
  %k = "trn.kernel"() ({
    %b = "trn.broadcast"(%m) {dimensions = array<i64: 0>} : (tensor<64x256xf32>) -> tensor<12x64x256xf32>
    %y = "trn.tensor_tensor"(%x, %b) {op = "add"} : (tensor<12x64x256xf32>, tensor<12x64x256xf32>) -> tensor<12x64x256xf32>
    "trn.yield"(%y) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<12x64x256xf32>) -> ()
  }) {kind = "elementwise", free_tile = 512 : i64, resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<12x64x256xf32>
  return %k : tensor<12x64x256xf32>
}

// -----

// Tests that an elementwise kernel shares its arithmetic between ACT, DVE and POOL: a multiply
// or add by a constant becomes an identity activation (scale, or a bias column), and a square
// x * x the square activation, when ACT would finish it no later than DVE given the work each
// has been given, each engine at its own clock (a fp32 tensor_tensor in SBUF costs two cycles
// per element); a tensor_tensor whose operands are all in SBUF may go to POOL instead of DVE.
// Here: 0.5 to ACT, the product to POOL (which has had nothing), + 1 to DVE, * 3 to ACT, * 2 to
// DVE, the square to ACT.
// CHECK-LABEL: func.func @scaled_twice
// CHECK: "nisa.activation"({{.*}}engine = "act", func = "identity"{{.*}}scale = 5.000000e-01
// CHECK: "nisa.tensor_tensor"({{.*}}engine = "pool", op = "mul"
// CHECK: "nisa.tensor_scalar"({{.*}}engine = "dve", imm0 = 1.000000e+00{{.*}}op0 = "add"
// CHECK: "nisa.activation"({{.*}}engine = "act", func = "identity"{{.*}}scale = 3.000000e+00
// CHECK-NOT: "nisa.activation"({{.*}}func = "identity"
// CHECK: "nisa.tensor_scalar"({{.*}}engine = "dve", imm0 = 2.000000e+00
// CHECK: "nisa.activation"({{.*}}engine = "act", func = "square"
// CHECK-NOT: "nisa.tensor_tensor"
func.func @scaled_twice(%x: tensor<128x512xf32>) -> tensor<128x512xf32> {
  %k = "trn.kernel"() ({
    %a = "trn.tensor_scalar"(%x) {op = "mul", reverse = false, scalar = 5.000000e-01 : f32} : (tensor<128x512xf32>) -> tensor<128x512xf32>
    %b = "trn.tensor_tensor"(%a, %x) {op = "mul"} : (tensor<128x512xf32>, tensor<128x512xf32>) -> tensor<128x512xf32>
    %c = "trn.tensor_scalar"(%b) {op = "add", reverse = false, scalar = 1.000000e+00 : f32} : (tensor<128x512xf32>) -> tensor<128x512xf32>
    %d = "trn.tensor_scalar"(%c) {op = "mul", reverse = false, scalar = 3.000000e+00 : f32} : (tensor<128x512xf32>) -> tensor<128x512xf32>
    %e = "trn.tensor_scalar"(%d) {op = "mul", reverse = false, scalar = 2.000000e+00 : f32} : (tensor<128x512xf32>) -> tensor<128x512xf32>
    %f = "trn.tensor_tensor"(%e, %e) {op = "mul"} : (tensor<128x512xf32>, tensor<128x512xf32>) -> tensor<128x512xf32>
    "trn.yield"(%f) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x512xf32>) -> ()
  }) {kind = "elementwise", free_tile = 512 : i64, resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x512xf32>
  return %k : tensor<128x512xf32>
}

// -----

// Tests that a padded input (insert_slice into a fill) read only by a pooling is padded on
// chip: each plane [3, 10 x 10] is set to -inf, the 8 x 8 input DMA'd as it lies (one run
// per channel) and copied into the plane's interior (offset 11 = row 1, column 1; rows 10
// apart), with no HBM buffer for the padded copy.
// CHECK-LABEL: func.func @padded_maxpool
// CHECK-NOT: memory = "hbm"
// CHECK: "nisa.memset"(%[[PLANE:.*]]) {{.*}}value = 0xFF800000 : f32}
// CHECK: "nisa.dma"(%[[STAGED:.*]], %arg0) {aps = [array<i64: 0, 64, 3, 1, 64>, array<i64: 0, 64, 3, 8, 8, 1, 8>]
// CHECK-NEXT: "nisa.tensor_copy"(%[[PLANE]], %[[STAGED]]) {aps = [array<i64: 11, 100, 3, 10, 8, 1, 8>, array<i64: 0, 64, 3, 8, 8, 1, 8>]
// CHECK-NOT: memory = "hbm"
// CHECK: return
func.func @padded_maxpool(%x: tensor<2x3x8x8xf32>) -> tensor<2x3x5x5xf32> {
  %f = "trn.fill"() {value = 0xFF800000 : f32} : () -> tensor<2x3x10x10xf32>
  %p = "trn.insert_slice"(%f, %x) {offsets = array<i64: 0, 0, 1, 1>, strides = array<i64: 1, 1, 1, 1>} : (tensor<2x3x10x10xf32>, tensor<2x3x8x8xf32>) -> tensor<2x3x10x10xf32>
  %m = "trn.pool"(%p) {op = "max", window = array<i64: 2, 2>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>} : (tensor<2x3x10x10xf32>) -> tensor<2x3x5x5xf32>
  return %m : tensor<2x3x5x5xf32>
}

// -----

// Tests the gather lowering: a [P, 1] slice of the index is loaded, and one indirect DMA
// brings row index[p] (row_stride 8 elements) of the table to partition p.
// CHECK-LABEL: func.func @gather
// CHECK: "nisa.dma"(%[[IDX:.*]], %arg1) {aps = [array<i64: 0, 1, 5, 1, 1>, array<i64: 0, 1, 5, 1, 1>]
// CHECK: "nisa.dma_indirect"(%{{.*}}, %arg0, %[[IDX]]) {aps = [array<i64: 0, 8, 5, 1, 8>, array<i64: 0, 8, 5, 1, 8>, array<i64: 0, 1, 5, 1, 1>], engine = "dma"
func.func @gather(%table: tensor<10x8xf32>, %ids: tensor<5xi64>) -> tensor<5x8xf32> {
  %g = "trn.gather"(%table, %ids) {offset = 0 : i64, row_stride = 8 : i64, free_strides = array<i64: 1>} : (tensor<10x8xf32>, tensor<5xi64>) -> tensor<5x8xf32>
  return %g : tensor<5x8xf32>
}

// -----

// Tests the depthwise convolution (one channel per group) on DVE: per kernel position, the
// window times the channel's weight, read as a per-partition scalar column of the weights.
// CHECK-LABEL: func.func @depthwise
// CHECK: "nisa.tensor_scalar"(%{{.*}}, %{{.*}}, %{{.*}}) {aps = [array<i64: 0, 25, 2, 1, 25>, array<i64: 0, 36, 2, 6, 5, 1, 5>, array<i64: 0, 4, 2, 1, 1>]{{.*}}op0 = "mul"
// CHECK: "nisa.tensor_scalar"(%{{.*}}, %{{.*}}, %{{.*}}) {aps = [array<i64: 0, 25, 2, 1, 25>, array<i64: 1, 36, 2, 6, 5, 1, 5>, array<i64: 1, 4, 2, 1, 1>]{{.*}}op0 = "mul"
// CHECK: "nisa.tensor_tensor"({{.*}}op = "add"
func.func @depthwise(%x: tensor<1x2x6x6xf32>, %w: tensor<2x1x2x2xf32>) -> tensor<1x2x5x5xf32> {
  %k = "trn.kernel"() ({
    %c = "trn.conv"(%x, %w) {strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, groups = 2 : i64} : (tensor<1x2x6x6xf32>, tensor<2x1x2x2xf32>) -> tensor<1x2x5x5xf32>
    "trn.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x2x5x5xf32>) -> ()
  }) {kind = "conv", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x2x5x5xf32>
  return %k : tensor<1x2x5x5xf32>
}

// -----

// Tests that a 0-d index gathers one row: a one-element index on one partition.
// CHECK-LABEL: func.func @gather_one_row
// CHECK: "nisa.dma"(%[[IDX:.*]], %arg1) {aps = [array<i64: 0, 1, 1, 1, 1>, array<i64: 0, 1, 1, 1, 1>]
// CHECK: "nisa.dma_indirect"(%{{.*}}, %arg0, %[[IDX]]) {aps = [array<i64: 0, 8, 1, 1, 8>, array<i64: 0, 8, 1, 1, 8>, array<i64: 0, 1, 1, 1, 1>]
// CHECK: "nisa.dma"(%arg2, %{{.*}}) {aps = [array<i64: 0, 0, 1, 1, 8>, array<i64: 0, 8, 1, 1, 8>]
func.func @gather_one_row(%table: tensor<10x8xf32>, %id: tensor<i64>) -> tensor<8xf32> {
  %g = "trn.gather"(%table, %id) {offset = 0 : i64, row_stride = 8 : i64, free_strides = array<i64: 1>} : (tensor<10x8xf32>, tensor<i64>) -> tensor<8xf32>
  return %g : tensor<8xf32>
}

// -----

// Tests the scan lowering: the scanned dim on the free axis, log-step combining of the tile
// with itself shifted by 1, 2, 4 columns (an 8-element cumsum takes three steps).
// CHECK-LABEL: func.func @cumsum
// CHECK: "nisa.tensor_tensor"({{.*}}) {aps = [array<i64: 1, 8, 4, 1, 7>, array<i64: 1, 8, 4, 1, 7>, array<i64: 0, 8, 4, 1, 7>], engine = "dve", op = "add"}
// CHECK: "nisa.tensor_tensor"({{.*}}) {aps = [array<i64: 2, 8, 4, 1, 6>, array<i64: 2, 8, 4, 1, 6>, array<i64: 0, 8, 4, 1, 6>], engine = "dve", op = "add"}
// CHECK: "nisa.tensor_tensor"({{.*}}) {aps = [array<i64: 4, 8, 4, 1, 4>, array<i64: 4, 8, 4, 1, 4>, array<i64: 0, 8, 4, 1, 4>], engine = "dve", op = "add"}
// CHECK-NOT: "nisa.tensor_tensor"
func.func @cumsum(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = "trn.scan"(%x) {op = "add", dimension = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %s : tensor<4x8xf32>
}

// -----

// Tests the logaddexp combine of logcumsumexp: max(a, b) + log(1 + exp(-|a - b|)), so no exp
// of a large argument is taken.
// CHECK-LABEL: func.func @logcumsumexp
// CHECK: "nisa.tensor_tensor"({{.*}}) {{{.*}} op = "max"}
// CHECK: "nisa.tensor_tensor"({{.*}}) {{{.*}} op = "sub"}
// CHECK: "nisa.activation"({{.*}}) {{{.*}} func = "abs"
// CHECK: "nisa.activation"({{.*}}) {{{.*}} func = "exp", {{.*}} scale = -1.000000e+00 : f32}
// CHECK: "nisa.activation"({{.*}}) {{{.*}} func = "log"
// CHECK: "nisa.tensor_tensor"({{.*}}) {{{.*}} op = "add"}
func.func @logcumsumexp(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %s = "trn.scan"(%x) {op = "logaddexp", dimension = 1 : i64} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  return %s : tensor<4x4xf32>
}

// -----

// Tests that a bf16 chain computes in fp32 and rounds on the write: the fp32 intermediate
// that is only converted to bf16 is written as bf16 by its producer, with no copy.
// CHECK-LABEL: func.func @bf16_chain
// CHECK: "nisa.activation"(%[[E:[0-9]+]], %{{.*}}) {{{.*}} func = "exp"{{.*}} : (memref<2x32xf32, "sbuf">, memref<2x32xbf16, "sbuf">)
// CHECK: "nisa.tensor_scalar"(%[[R:[0-9]+]], %[[E]]) {{{.*}} op0 = "mul"{{.*}} : (memref<2x32xbf16, "sbuf">, memref<2x32xf32, "sbuf">)
// CHECK-NOT: "nisa.tensor_copy"
// CHECK: "nisa.dma"(%arg1, %[[R]])
func.func @bf16_chain(%x: tensor<4x16xbf16>) -> tensor<4x16xbf16> {
  %k = "trn.kernel"() ({
    %e = "trn.activation"(%x) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<4x16xbf16>) -> tensor<4x16xf32>
    %m = "trn.tensor_scalar"(%e) {op = "mul", scalar = 3.0 : f32, reverse = false} : (tensor<4x16xf32>) -> tensor<4x16xf32>
    %r = "trn.convert"(%m) : (tensor<4x16xf32>) -> tensor<4x16xbf16>
    "trn.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<4x16xbf16>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<4x16xbf16>
  return %k : tensor<4x16xbf16>
}

// -----

// Tests that a splat float constant read only by kernels is generated on chip (a memset, as
// a trn.fill is) instead of stored in the NEFF and loaded.
// CHECK-LABEL: func.func @splat_read_by_a_kernel
// CHECK-NOT: nisa.hbm_constant
// CHECK: "nisa.memset"({{.*}}value = 5.000000e-01 : f32
// CHECK: "nisa.tensor_tensor"
// CHECK: return
func.func @splat_read_by_a_kernel(%x: tensor<128x64xf32>) -> tensor<128x64xf32> {
  %half = arith.constant dense<0.5> : tensor<128x64xf32>
  %y = "trn.kernel"() ({
    %s = "trn.tensor_tensor"(%x, %half) {op = "add"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
    "trn.yield"(%s) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x64xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x64xf32>
  return %y : tensor<128x64xf32>
}

// -----

// Tests that a splat constant the function also returns stays a stored constant (the
// output is a copy of it).
// CHECK-LABEL: func.func @splat_returned
// CHECK: "nisa.hbm_constant"() {value = dense<5.000000e-01> : tensor<128x64xf32>}
// CHECK-NOT: "nisa.memset"
// CHECK: return
func.func @splat_returned(%x: tensor<128x64xf32>) -> (tensor<128x64xf32>, tensor<128x64xf32>) {
  %half = arith.constant dense<0.5> : tensor<128x64xf32>
  %y = "trn.kernel"() ({
    %s = "trn.tensor_tensor"(%x, %half) {op = "add"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
    "trn.yield"(%s) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x64xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x64xf32>
  return %y, %half : tensor<128x64xf32>, tensor<128x64xf32>
}

// ERR: trn_to_nisa-invalid.mlir:{{[0-9]+}}:{{[0-9]+}}: error: convert-trn-to-nisa: 'tensor.empty' cannot be lowered to NeuronCore instructions here (expected trn ops; run convert-linalg-to-trn first)

// -----

// Tests that outputs with no elements (a returned input, a trn.empty) need no instruction:
// no DMA reads the empty input, and nothing is stored.
// CHECK-LABEL: func.func @zero_elements
// CHECK-SAME: (%{{.*}}: memref<0x4xf32, "hbm">, %{{.*}}: memref<0x4xf32, "hbm">, %{{.*}}: memref<2x0xf32, "hbm">)
// CHECK-NOT: "nisa.
// CHECK: return
func.func @zero_elements(%x: tensor<0x4xf32>) -> (tensor<0x4xf32>, tensor<2x0xf32>) {
  %e = "trn.empty"() : () -> tensor<2x0xf32>
  return %x, %e : tensor<0x4xf32>, tensor<2x0xf32>
}

// -----

// Tests the lowering of a row-wise kernel (a norm): rows on partitions, whole rows on the
// free axis. The weight, constant over the rows, is loaded once (partition stride 0) before
// the two 128-row tiles; each tile loads its rows once, reduces them into a [P, 1] per-row
// value (on DVE; the second tile's sum on ACT, an identity activation accumulating its
// results, as DVE holds more work by then), subtracts it through a per-partition operand
// (no broadcast is materialised) and stores the result once. The mean is read only to be
// subtracted, so it is made negated, sum * -1/N in one multiply, and added: x + (-m) is
// x - m exactly, and with no negation to make first, the addition goes to ACT (an identity
// activation with -m as its bias) when ACT would finish it sooner. The weight stays in SBUF:
// nothing of the kernel is held in PSUM. The kernel's SBUF tiles carry its reuse_group (0: the
// function's first row-wise kernel), for trn-plan-memory to reuse their own bytes first.
// CHECK-LABEL: func.func @norm
// CHECK-SAME: (%[[X:.*]]: memref<256x64xf32, "hbm">, %[[W:.*]]: memref<64xf32, "hbm">, %[[OUT:.*]]: memref<256x64xf32, "hbm">)
// CHECK: "nisa.alloc"() {memory = "sbuf", reuse_group = 0 : i64}
// CHECK: "nisa.dma"(%{{.*}}, %[[W]]) {aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 0, 128, 1, 64>]
// CHECK-NOT: "psum"
// CHECK: "nisa.dma"(%{{.*}}, %[[X]]) {aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: [[ROW:[0-9]+]], 64, 128, 1, 64>]
// CHECK-NOT: "nisa.dma"
// CHECK: "nisa.tensor_reduce"({{.*}}op = "add"
// CHECK: "nisa.tensor_scalar"(%[[NEGM:[0-9]+]], {{.*}}imm0 = -1.562500e-02 : f32{{.*}}op0 = "mul"
// CHECK-NOT: "nisa.tensor_scalar"
// CHECK: "nisa.activation"(%{{[0-9]+}}, %{{[0-9]+}}, %[[NEGM]]) {{.*}}func = "identity", operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>
// CHECK: "nisa.tensor_tensor"({{.*}}op = "mul"
// CHECK: "nisa.dma"(%[[OUT]], %{{.*}}) {aps = [array<i64: [[ROW]], 64, 128, 1, 64>
// CHECK: "nisa.dma"(%{{.*}}, %[[X]]) {aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: [[ROW2:[0-9]+]], 64, 128, 1, 64>]
// CHECK-NOT: "nisa.dma"
// CHECK: "nisa.activation"({{.*}}engine = "act", func = "identity", operandSegmentSizes = array<i32: 1, 1, 0, 0, 1>
// CHECK: "nisa.tensor_scalar"(%[[NEGM:[0-9]+]], {{.*}}imm0 = -1.562500e-02 : f32{{.*}}op0 = "mul"
// CHECK-NOT: "nisa.tensor_scalar"
// CHECK: "nisa.activation"(%{{[0-9]+}}, %{{[0-9]+}}, %[[NEGM]]) {{.*}}func = "identity", operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>
// CHECK: "nisa.tensor_tensor"({{.*}}op = "mul"
// CHECK: "nisa.dma"(%[[OUT]], %{{.*}}) {aps = [array<i64: [[ROW2]], 64, 128, 1, 64>
// CHECK-NOT: "nisa.dma"
// CHECK: return
func.func @norm(%x: tensor<256x64xf32>, %w: tensor<64xf32>) -> tensor<256x64xf32> {
  %k = "trn.kernel"() ({
    %wb = "trn.broadcast"(%w) {dimensions = array<i64: 0>} : (tensor<64xf32>) -> tensor<256x64xf32>
    %sum = "trn.reduce"(%x) {op = "add", dimensions = array<i64: 1>} : (tensor<256x64xf32>) -> tensor<256xf32>
    %mean = "trn.tensor_scalar"(%sum) {op = "mul", scalar = 0.015625 : f32, reverse = false} : (tensor<256xf32>) -> tensor<256xf32>
    %mb = "trn.broadcast"(%mean) {dimensions = array<i64: 1>} : (tensor<256xf32>) -> tensor<256x64xf32>
    %c = "trn.tensor_tensor"(%x, %mb) {op = "sub"} : (tensor<256x64xf32>, tensor<256x64xf32>) -> tensor<256x64xf32>
    %y = "trn.tensor_tensor"(%c, %wb) {op = "mul"} : (tensor<256x64xf32>, tensor<256x64xf32>) -> tensor<256x64xf32>
    "trn.yield"(%y) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x64xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x64xf32>
  return %k : tensor<256x64xf32>
}

// -----

// Tests that a row-wise kernel's per-row second result (a norm's mean, saved for the
// backward) is stored from each tile's [128, 1] tile as computed: the mean made as it is
// (not negated in place for the centring, which then subtracts it), each tile's rows stored
// and then its means, at rows 0 and 128 of the [256, 1] result.
// CHECK-LABEL: func.func @norm_saving_mean
// CHECK: "nisa.tensor_scalar"(%[[M:[0-9]+]], {{.*}}imm0 = 1.562500e-02 : f32{{.*}}op0 = "mul"
// CHECK: "nisa.tensor_scalar"({{.*}}, %[[M]]) {{.*}}op0 = "sub"
// CHECK: "nisa.dma"(%arg2,
// CHECK-NEXT: "nisa.dma"(%arg3, %[[M]]) {aps = [array<i64: 0, 1, 128, 1, 1>, array<i64: 0, 1, 128, 1, 1>]
// CHECK: "nisa.tensor_scalar"(%[[M2:[0-9]+]], {{.*}}imm0 = 1.562500e-02 : f32{{.*}}op0 = "mul"
// CHECK: "nisa.dma"(%arg2,
// CHECK-NEXT: "nisa.dma"(%arg3, %[[M2]]) {aps = [array<i64: 128, 1, 128, 1, 1>, array<i64: 0, 1, 128, 1, 1>]
// CHECK-NOT: "nisa.dma"
// CHECK: return
func.func @norm_saving_mean(%x: tensor<256x64xf32>, %w: tensor<64xf32>) -> (tensor<256x64xf32>, tensor<256x1xf32>) {
  %k:2 = "trn.kernel"() ({
    %wb = "trn.broadcast"(%w) {dimensions = array<i64: 0>} : (tensor<64xf32>) -> tensor<256x64xf32>
    %sum = "trn.reduce"(%x) {op = "add", dimensions = array<i64: 1>} : (tensor<256x64xf32>) -> tensor<256xf32>
    %mean = "trn.tensor_scalar"(%sum) {op = "mul", scalar = 0.015625 : f32, reverse = false} : (tensor<256xf32>) -> tensor<256xf32>
    %saved = "trn.reshape"(%mean) : (tensor<256xf32>) -> tensor<256x1xf32>
    %mb = "trn.broadcast"(%mean) {dimensions = array<i64: 1>} : (tensor<256xf32>) -> tensor<256x64xf32>
    %c = "trn.tensor_tensor"(%x, %mb) {op = "sub"} : (tensor<256x64xf32>, tensor<256x64xf32>) -> tensor<256x64xf32>
    %y = "trn.tensor_tensor"(%c, %wb) {op = "mul"} : (tensor<256x64xf32>, tensor<256x64xf32>) -> tensor<256x64xf32>
    "trn.yield"(%y, %saved) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<256x64xf32>, tensor<256x1xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<256x64xf32>, tensor<256x1xf32>)
  return %k#0, %k#1 : tensor<256x64xf32>, tensor<256x1xf32>
}

// -----

// Tests that a row-wise kernel's column sums (a norm's weight and bias gradients) are
// accumulated on PE over the row tiles: per tile, a ones column times the tile, into a PSUM
// row per 512 columns (640 = 512 + 128), started by the first tile and accumulated by the
// second. The fp32 product is summed with fp32 ones; the bf16 gradient as loaded, with bf16
// ones (no widening copy). After the last tile each sum is rounded to bf16 out of PSUM and
// stored at its columns.
// CHECK-LABEL: func.func @norm_with_column_sums
// CHECK-DAG: %[[W0:[0-9]+]] = "nisa.alloc"() {memory = "psum"} : () -> memref<1x512xf32, "psum">
// CHECK-DAG: %[[W1:[0-9]+]] = "nisa.alloc"() {memory = "psum"} : () -> memref<1x128xf32, "psum">
// CHECK-DAG: %[[B0:[0-9]+]] = "nisa.alloc"() {memory = "psum"} : () -> memref<1x512xf32, "psum">
// CHECK-DAG: %[[B1:[0-9]+]] = "nisa.alloc"() {memory = "psum"} : () -> memref<1x128xf32, "psum">
// CHECK: "nisa.dma"(%[[DY:[0-9]+]], %arg1)
// CHECK: "nisa.tensor_tensor"(%[[GC:[0-9]+]], %[[DY]], {{.*}}op = "mul"
// CHECK: %[[ONES:[0-9]+]] = "nisa.alloc"() {{.*}} -> memref<128x1xf32, "sbuf">
// CHECK-NEXT: "nisa.memset"(%[[ONES]]) {{.*}}value = 1.0
// CHECK-NEXT: "nisa.matmul"(%[[W0]], %[[ONES]], %[[GC]]) {accumulate = false, aps = [{{.*}}, array<i64: 0, 640, 128, 1, 512>]
// CHECK-NEXT: "nisa.matmul"(%[[W1]], %[[ONES]], %[[GC]]) {accumulate = false, aps = [{{.*}}, array<i64: 512, 640, 128, 1, 128>]
// CHECK-NEXT: %[[ONES16:[0-9]+]] = "nisa.alloc"() {{.*}} -> memref<128x1xbf16, "sbuf">
// CHECK-NEXT: "nisa.memset"(%[[ONES16]])
// CHECK-NEXT: "nisa.matmul"(%[[B0]], %[[ONES16]], %[[DY]]) {accumulate = false
// CHECK-NEXT: "nisa.matmul"(%[[B1]], %[[ONES16]], %[[DY]]) {accumulate = false
// CHECK: "nisa.dma"(%[[DY2:[0-9]+]], %arg1) {aps = [array<i64: 0, 640, 26, 1, 640>, array<i64: 81920,
// CHECK: "nisa.matmul"(%[[W0]], %[[ONES]], %{{[0-9]+}}) {accumulate = true
// CHECK-NEXT: "nisa.matmul"(%[[W1]], %[[ONES]], %{{[0-9]+}}) {accumulate = true
// CHECK-NEXT: "nisa.matmul"(%[[B0]], %[[ONES16]], %[[DY2]]) {accumulate = true
// CHECK-NEXT: "nisa.matmul"(%[[B1]], %[[ONES16]], %[[DY2]]) {accumulate = true
// CHECK-NEXT: %[[DWB:[0-9]+]] = "nisa.alloc"() {{.*}} -> memref<1x512xbf16, "sbuf">
// CHECK-NEXT: "nisa.tensor_copy"(%[[DWB]], %[[W0]])
// CHECK: "nisa.dma"(%arg3, %[[DWB]]) {aps = [array<i64: 0, 640, 1, 1, 512>
// CHECK: "nisa.dma"(%arg4, {{.*}}) {aps = [array<i64: 0, 640, 1, 1, 512>
// CHECK: "nisa.tensor_copy"({{.*}}, %[[W1]])
// CHECK: "nisa.dma"(%arg3, {{.*}}) {aps = [array<i64: 512, 640, 1, 1, 128>
// CHECK: "nisa.dma"(%arg4, {{.*}}) {aps = [array<i64: 512, 640, 1, 1, 128>
// CHECK-NEXT: return
func.func @norm_with_column_sums(%x: tensor<256x640xbf16>, %dy: tensor<256x640xbf16>) -> (tensor<256x640xf32>, tensor<640xbf16>, tensor<640xbf16>) {
  %k:3 = "trn.kernel"() ({
    %xf = "trn.convert"(%x) : (tensor<256x640xbf16>) -> tensor<256x640xf32>
    %g = "trn.convert"(%dy) : (tensor<256x640xbf16>) -> tensor<256x640xf32>
    %sum = "trn.reduce"(%xf) {op = "add", dimensions = array<i64: 1>} : (tensor<256x640xf32>) -> tensor<256xf32>
    %mean = "trn.tensor_scalar"(%sum) {op = "mul", scalar = 0.0015625 : f32, reverse = false} : (tensor<256xf32>) -> tensor<256xf32>
    %mb = "trn.broadcast"(%mean) {dimensions = array<i64: 1>} : (tensor<256xf32>) -> tensor<256x640xf32>
    %c = "trn.tensor_tensor"(%xf, %mb) {op = "sub"} : (tensor<256x640xf32>, tensor<256x640xf32>) -> tensor<256x640xf32>
    %gc = "trn.tensor_tensor"(%g, %c) {op = "mul"} : (tensor<256x640xf32>, tensor<256x640xf32>) -> tensor<256x640xf32>
    %dw = "trn.reduce"(%gc) {op = "add", dimensions = array<i64: 0>} : (tensor<256x640xf32>) -> tensor<640xf32>
    %dwb = "trn.convert"(%dw) : (tensor<640xf32>) -> tensor<640xbf16>
    %db = "trn.reduce"(%g) {op = "add", dimensions = array<i64: 0>} : (tensor<256x640xf32>) -> tensor<640xf32>
    %dbb = "trn.convert"(%db) : (tensor<640xf32>) -> tensor<640xbf16>
    "trn.yield"(%c, %dwb, %dbb) {operandSegmentSizes = array<i32: 1, 2, 0>} : (tensor<256x640xf32>, tensor<640xbf16>, tensor<640xbf16>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 2, 0>} : () -> (tensor<256x640xf32>, tensor<640xbf16>, tensor<640xbf16>)
  return %k#0, %k#1, %k#2 : tensor<256x640xf32>, tensor<640xbf16>, tensor<640xbf16>
}

// -----

// Tests that a row-wise kernel shares whole-row arithmetic with ACT when DVE holds more
// work: the square of the centred rows (a norm's variance) becomes ACT's square activation
// (x * x rounded once, as DVE's multiply), while the per-row mean stays on DVE beside its
// reduction (made negated, the centring adds it on ACT).
// CHECK-LABEL: func.func @norm_square_on_act
// CHECK: "nisa.tensor_reduce"({{.*}}op = "add"
// CHECK: "nisa.tensor_scalar"({{.*}}engine = "dve"{{.*}}op0 = "mul"
// CHECK: "nisa.activation"({{.*}}engine = "act", func = "identity"
// CHECK: "nisa.activation"({{.*}}engine = "act", func = "square"
// CHECK-NOT: "nisa.tensor_tensor"
// CHECK: return
func.func @norm_square_on_act(%x: tensor<256x64xf32>) -> tensor<256x64xf32> {
  %k = "trn.kernel"() ({
    %sum = "trn.reduce"(%x) {op = "add", dimensions = array<i64: 1>} : (tensor<256x64xf32>) -> tensor<256xf32>
    %mean = "trn.tensor_scalar"(%sum) {op = "mul", scalar = 0.015625 : f32, reverse = false} : (tensor<256xf32>) -> tensor<256xf32>
    %mb = "trn.broadcast"(%mean) {dimensions = array<i64: 1>} : (tensor<256xf32>) -> tensor<256x64xf32>
    %c = "trn.tensor_tensor"(%x, %mb) {op = "sub"} : (tensor<256x64xf32>, tensor<256x64xf32>) -> tensor<256x64xf32>
    %sq = "trn.tensor_tensor"(%c, %c) {op = "mul"} : (tensor<256x64xf32>, tensor<256x64xf32>) -> tensor<256x64xf32>
    "trn.yield"(%sq) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x64xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x64xf32>
  return %k : tensor<256x64xf32>
}

// -----

// Tests that a batched matmul whose batch merges dims no single stride spans (heads split out
// of a fused QKV projection, batch x heads) loops over those dims as they are: no HBM copy of
// the operands, one matmul per (batch, head).
// CHECK-LABEL: func.func @heads
// CHECK-NOT: memory = "hbm"
// CHECK-COUNT-4: "nisa.matmul"
// CHECK-NOT: "nisa.matmul"
// CHECK: return
#id = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#k = affine_map<(d0, d1, d2, d3, d4) -> (d0 + 1, d1, d2, d3, d4)>
func.func @heads(%qkv: tensor<256x384xbf16>) -> tensor<4x128x128xbf16> {
  %0 = "trn.kernel"() ({
    %1 = "trn.reshape"(%qkv) : (tensor<256x384xbf16>) -> tensor<2x128x3x2x64xbf16>
    %2 = "trn.transpose"(%1) {permutation = array<i64: 2, 0, 3, 1, 4>} : (tensor<2x128x3x2x64xbf16>) -> tensor<3x2x2x128x64xbf16>
    %3 = "trn.view"(%2) {indexing_map = #id} : (tensor<3x2x2x128x64xbf16>) -> tensor<1x2x2x128x64xbf16>
    %4 = "trn.reshape"(%3) : (tensor<1x2x2x128x64xbf16>) -> tensor<4x128x64xbf16>
    %5 = "trn.view"(%2) {indexing_map = #k} : (tensor<3x2x2x128x64xbf16>) -> tensor<1x2x2x128x64xbf16>
    %6 = "trn.reshape"(%5) : (tensor<1x2x2x128x64xbf16>) -> tensor<2x2x128x64xbf16>
    %7 = "trn.transpose"(%6) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<2x2x128x64xbf16>) -> tensor<2x2x64x128xbf16>
    %8 = "trn.reshape"(%7) : (tensor<2x2x64x128xbf16>) -> tensor<4x64x128xbf16>
    %9 = "trn.matmul"(%4, %8) : (tensor<4x128x64xbf16>, tensor<4x64x128xbf16>) -> tensor<4x128x128xf32>
    %10 = "trn.convert"(%9) : (tensor<4x128x128xf32>) -> tensor<4x128x128xbf16>
    "trn.yield"(%10) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<4x128x128xbf16>) -> ()
  }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<4x128x128xbf16>
  return %0 : tensor<4x128x128xbf16>
}

// -----

// Tests that a sum over the leading dim of a row-major tensor (a bias gradient) is summed
// across partitions on PE instead of loading the reduced dim onto the free axis one element
// per DMA descriptor: natural [128, 512] row tiles, a ones column as the stationary operand,
// the two row tiles accumulating into one PSUM row per 512 columns (600 = 512 + 88).
// CHECK-LABEL: func.func @bias_grad
// CHECK: "nisa.memset"({{.*}}value = 1.000000e+00
// CHECK: "nisa.dma"({{.*}}aps = [array<i64: 0, 512, 32, 1, 512>, array<i64: 0, 600, 32, 1, 512>]
// CHECK: "nisa.matmul"({{.*}}accumulate = false
// CHECK: "nisa.dma"({{.*}}array<i64: 76800, 600, 32, 1, 512>]
// CHECK: "nisa.matmul"({{.*}}accumulate = true
// CHECK: "nisa.dma"(%arg1, {{.*}}aps = [array<i64: 0, 600, 1, 1, 512>
// CHECK: "nisa.matmul"({{.*}}accumulate = false
// CHECK: "nisa.matmul"({{.*}}accumulate = true
// CHECK: "nisa.dma"(%arg1, {{.*}}aps = [array<i64: 512, 600, 1, 1, 88>
// CHECK-NOT: "nisa.tensor_reduce"
func.func @bias_grad(%g: tensor<256x600xbf16>) -> tensor<600xf32> {
  %0 = "trn.kernel"() ({
    %s = "trn.reduce"(%g) {op = "add", dimensions = array<i64: 0>} : (tensor<256x600xbf16>) -> tensor<600xf32>
    "trn.yield"(%s) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<600xf32>) -> ()
  }) {kind = "reduce", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<600xf32>
  return %0 : tensor<600xf32>
}

// -----

// Tests that a row-wise softmax hands the scalar engine what it does in one pass: exp of the
// scaled row minus its max as one activation (scale 0.125, per-partition bias -max), with the
// row sum accumulated by that activation. The scaling is no pass of its own: DVE reduces the
// max of the unscaled row (max(c x) = c max(x) for c > 0), and as the scaled max is read only
// as that bias, one multiply of the [P, 1] column by -c makes it (-fl(c m) = fl(-c m)); DVE
// divides at the end.
// CHECK-LABEL: func.func @softmax
// CHECK-NOT: func = "identity"
// CHECK: "nisa.tensor_reduce"({{.*}}op = "max"
// CHECK-NOT: "nisa.tensor_scalar"({{.*}}imm0 = 1.250000e-01
// CHECK: "nisa.tensor_scalar"({{.*}}imm0 = -1.250000e-01 : f32{{.*}}op0 = "mul"
// CHECK: "nisa.activation"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) {{{.*}}func = "exp"{{.*}}operandSegmentSizes = array<i32: 1, 1, 1, 0, 1>{{.*}}scale = 1.250000e-01
// CHECK-NOT: "nisa.tensor_reduce"({{.*}}op = "add"
// CHECK: "nisa.tensor_scalar"({{.*}}op0 = "div"
func.func @softmax(%x: tensor<128x96xf32>) -> tensor<128x96xf32> {
  %k = "trn.kernel"() ({
    %s = "trn.tensor_scalar"(%x) {op = "mul", scalar = 0.125 : f32, reverse = false} : (tensor<128x96xf32>) -> tensor<128x96xf32>
    %m = "trn.reduce"(%s) {op = "max", dimensions = array<i64: 1>} : (tensor<128x96xf32>) -> tensor<128xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x96xf32>
    %d = "trn.tensor_tensor"(%s, %mb) {op = "sub"} : (tensor<128x96xf32>, tensor<128x96xf32>) -> tensor<128x96xf32>
    %e = "trn.activation"(%d) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x96xf32>) -> tensor<128x96xf32>
    %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 1>} : (tensor<128x96xf32>) -> tensor<128xf32>
    %zb = "trn.broadcast"(%z) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x96xf32>
    %r = "trn.tensor_tensor"(%e, %zb) {op = "div"} : (tensor<128x96xf32>, tensor<128x96xf32>) -> tensor<128x96xf32>
    "trn.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x96xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x96xf32>
  return %k : tensor<128x96xf32>
}

// -----

// Tests PyTorch's attention softmax that zeroes fully masked rows, select(max == -inf, 0,
// e / sum): such a row is all -inf, so its exp's bias -max = +inf is clamped to the largest
// float (the exp is then exp(-inf) = 0, not NaN) and the division divides by max(sum,
// smallest normal), giving the select's +0; any other row's sum is at least 1. Two [128, 1]
// ops replace the comparison and the select over the row, and the zero is never generated.
// CHECK-LABEL: func.func @safe_softmax
// CHECK-NOT: "nisa.memset"
// CHECK: "nisa.tensor_reduce"(%[[MAX:[0-9]+]], {{.*}}op = "max"
// CHECK: "nisa.tensor_scalar"(%[[BIAS:[0-9]+]], %[[MAX]]) {{.*}}imm0 = -1.000000e+00 : f32, imm1 = 3.40282347E+38 : f32, op0 = "mul", op1 = "min"
// CHECK: "nisa.activation"(%[[E:[0-9]+]], %{{[0-9]+}}, %[[BIAS]], %[[SUM:[0-9]+]]) {{.*}}func = "exp"
// CHECK: "nisa.tensor_scalar"(%[[DIVISOR:[0-9]+]], %[[SUM]]) {{.*}}imm0 = 1.17549435E-38 : f32{{.*}}op0 = "max"
// CHECK: "nisa.tensor_scalar"(%{{[0-9]+}}, %[[E]], %[[DIVISOR]]) {{.*}}op0 = "div"
// CHECK-NOT: "nisa.select"
// CHECK-NOT: op = "eq"
func.func @safe_softmax(%x: tensor<128x96xf32>) -> tensor<128x96xf32> {
  %k = "trn.kernel"() ({
    %m = "trn.reduce"(%x) {op = "max", dimensions = array<i64: 1>} : (tensor<128x96xf32>) -> tensor<128xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x96xf32>
    %d = "trn.tensor_tensor"(%x, %mb) {op = "sub"} : (tensor<128x96xf32>, tensor<128x96xf32>) -> tensor<128x96xf32>
    %e = "trn.activation"(%d) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x96xf32>) -> tensor<128x96xf32>
    %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 1>} : (tensor<128x96xf32>) -> tensor<128xf32>
    %zb = "trn.broadcast"(%z) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x96xf32>
    %r = "trn.tensor_tensor"(%e, %zb) {op = "div"} : (tensor<128x96xf32>, tensor<128x96xf32>) -> tensor<128x96xf32>
    %c = "trn.tensor_scalar"(%m) {op = "eq", reverse = false, scalar = 0xFF800000 : f32} : (tensor<128xf32>) -> tensor<128xi1>
    %cb = "trn.broadcast"(%c) {dimensions = array<i64: 1>} : (tensor<128xi1>) -> tensor<128x96xi1>
    %zero = "trn.fill"() {value = 0.0 : f32} : () -> tensor<128x96xf32>
    %o = "trn.select"(%cb, %zero, %r) : (tensor<128x96xi1>, tensor<128x96xf32>, tensor<128x96xf32>) -> tensor<128x96xf32>
    "trn.yield"(%o) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x96xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x96xf32>
  return %k : tensor<128x96xf32>
}

// -----

// Tests that the select over the row stays where the quotient is read by more than it.
// CHECK-LABEL: func.func @safe_softmax_quotient_reused
// CHECK: "nisa.activation"({{.*}}func = "exp"
// CHECK: "nisa.tensor_scalar"({{.*}}op0 = "div"
// CHECK: "nisa.select"({{.*}}aps = [array<i64: 0, 96, 128, 1, 96>
func.func @safe_softmax_quotient_reused(%x: tensor<128x96xf32>) -> tensor<128x96xf32> {
  %k = "trn.kernel"() ({
    %m = "trn.reduce"(%x) {op = "max", dimensions = array<i64: 1>} : (tensor<128x96xf32>) -> tensor<128xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x96xf32>
    %d = "trn.tensor_tensor"(%x, %mb) {op = "sub"} : (tensor<128x96xf32>, tensor<128x96xf32>) -> tensor<128x96xf32>
    %e = "trn.activation"(%d) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x96xf32>) -> tensor<128x96xf32>
    %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 1>} : (tensor<128x96xf32>) -> tensor<128xf32>
    %zb = "trn.broadcast"(%z) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x96xf32>
    %r = "trn.tensor_tensor"(%e, %zb) {op = "div"} : (tensor<128x96xf32>, tensor<128x96xf32>) -> tensor<128x96xf32>
    %c = "trn.tensor_scalar"(%m) {op = "eq", reverse = false, scalar = 0xFF800000 : f32} : (tensor<128xf32>) -> tensor<128xi1>
    %cb = "trn.broadcast"(%c) {dimensions = array<i64: 1>} : (tensor<128xi1>) -> tensor<128x96xi1>
    %zero = "trn.fill"() {value = 0.0 : f32} : () -> tensor<128x96xf32>
    %o = "trn.select"(%cb, %zero, %r) : (tensor<128x96xi1>, tensor<128x96xf32>, tensor<128x96xf32>) -> tensor<128x96xf32>
    %o2 = "trn.tensor_tensor"(%o, %r) {op = "add"} : (tensor<128x96xf32>, tensor<128x96xf32>) -> tensor<128x96xf32>
    "trn.yield"(%o2) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x96xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x96xf32>
  return %k : tensor<128x96xf32>
}

// -----

// Tests that a norm's whole-row arithmetic with a per-row value is shared with ACT, which is
// idle beside DVE's reductions: x - mean is an identity activation whose bias is the negated
// mean (read only to be subtracted, it is made negated, sum * -1/N in one multiply:
// x + (-m) is x - m exactly), and the sum of squares one square activation that accumulates
// its fp32 results (no tensor_reduce for it); d * rstd then goes to DVE, which has less work
// left by then.
// CHECK-LABEL: func.func @norm_on_two_engines
// CHECK: "nisa.tensor_reduce"({{.*}}engine = "dve", op = "add"
// CHECK: "nisa.tensor_scalar"(%[[NEG:[0-9]+]], {{.*}}imm0 = -9.765625E-4 : f32{{.*}}op0 = "mul"
// CHECK: "nisa.activation"(%[[D:[0-9]+]], %{{[0-9]+}}, %[[NEG]]) {{.*}}engine = "act", func = "identity", operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>, scale = 1.000000e+00
// CHECK: "nisa.activation"(%{{[0-9]+}}, %[[D]], %[[SS:[0-9]+]]) {{.*}}func = "square", operandSegmentSizes = array<i32: 1, 1, 0, 0, 1>
// CHECK-NOT: "nisa.tensor_reduce"
// CHECK: "nisa.tensor_scalar"(%[[VAR:[0-9]+]], %[[SS]]) {{.*}}imm0 = 9.765625E-4
// CHECK: "nisa.activation"(%[[RSTD:[0-9]+]], %[[VAR]]) {{.*}}func = "rsqrt"
// CHECK: "nisa.tensor_scalar"(%{{[0-9]+}}, %[[D]], %[[RSTD]]) {{.*}}engine = "dve"{{.*}}op0 = "mul"
// CHECK-NOT: op0 = "sub"
func.func @norm_on_two_engines(%x: tensor<128x1024xf32>) -> tensor<128x1024xf32> {
  %k = "trn.kernel"() ({
    %sum = "trn.reduce"(%x) {op = "add", dimensions = array<i64: 1>} : (tensor<128x1024xf32>) -> tensor<128xf32>
    %mean = "trn.tensor_scalar"(%sum) {op = "mul", scalar = 9.765625e-04 : f32, reverse = false} : (tensor<128xf32>) -> tensor<128xf32>
    %mb = "trn.broadcast"(%mean) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x1024xf32>
    %d = "trn.tensor_tensor"(%x, %mb) {op = "sub"} : (tensor<128x1024xf32>, tensor<128x1024xf32>) -> tensor<128x1024xf32>
    %sq = "trn.tensor_tensor"(%d, %d) {op = "mul"} : (tensor<128x1024xf32>, tensor<128x1024xf32>) -> tensor<128x1024xf32>
    %ss = "trn.reduce"(%sq) {op = "add", dimensions = array<i64: 1>} : (tensor<128x1024xf32>) -> tensor<128xf32>
    %var = "trn.tensor_scalar"(%ss) {op = "mul", scalar = 9.765625e-04 : f32, reverse = false} : (tensor<128xf32>) -> tensor<128xf32>
    %r = "trn.activation"(%var) {func = "rsqrt", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128xf32>) -> tensor<128xf32>
    %rb = "trn.broadcast"(%r) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x1024xf32>
    %y = "trn.tensor_tensor"(%d, %rb) {op = "mul"} : (tensor<128x1024xf32>, tensor<128x1024xf32>) -> tensor<128x1024xf32>
    "trn.yield"(%y) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x1024xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x1024xf32>
  return %k : tensor<128x1024xf32>
}

// -----

// Tests that rows scaled by a per-row value go to ACT when it would finish them sooner than
// DVE, busy with the reduction: an identity activation with the per-row value as its
// per-partition scale and no bias (the product alone, as DVE's multiply).
// CHECK-LABEL: func.func @rows_scaled_on_act
// CHECK: "nisa.tensor_reduce"({{.*}}engine = "dve", op = "add"
// CHECK: "nisa.activation"(%[[R:[0-9]+]], {{.*}}func = "rsqrt"
// CHECK: "nisa.activation"(%{{[0-9]+}}, %{{[0-9]+}}, %[[R]]) {{.*}}engine = "act", func = "identity", operandSegmentSizes = array<i32: 1, 1, 0, 1, 0>
func.func @rows_scaled_on_act(%x: tensor<128x1024xf32>) -> tensor<128x1024xf32> {
  %k = "trn.kernel"() ({
    %ss = "trn.reduce"(%x) {op = "add", dimensions = array<i64: 1>} : (tensor<128x1024xf32>) -> tensor<128xf32>
    %r = "trn.activation"(%ss) {func = "rsqrt", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128xf32>) -> tensor<128xf32>
    %rb = "trn.broadcast"(%r) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x1024xf32>
    %y = "trn.tensor_tensor"(%x, %rb) {op = "mul"} : (tensor<128x1024xf32>, tensor<128x1024xf32>) -> tensor<128x1024xf32>
    "trn.yield"(%y) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x1024xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x1024xf32>
  return %k : tensor<128x1024xf32>
}

// -----

// Tests that an add of a per-row value to rows that are read elsewhere too (no step to chain
// it with), with DVE the busier engine, runs on ACT: an identity activation with the value as
// its per-partition bias (x + m exactly, as the tensor_scalar would add it).
// CHECK-LABEL: func.func @rows_plus_max_on_act
// CHECK: "nisa.tensor_reduce"(%[[M:[0-9]+]], {{.*}}op = "max"
// CHECK: "nisa.activation"(%{{[0-9]+}}, %{{[0-9]+}}, %[[M]]) {{.*}}engine = "act", func = "identity", operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>, scale = 1.000000e+00
func.func @rows_plus_max_on_act(%x: tensor<128x96xf32>) -> tensor<128x96xf32> {
  %k = "trn.kernel"() ({
    %m = "trn.reduce"(%x) {op = "max", dimensions = array<i64: 1>} : (tensor<128x96xf32>) -> tensor<128xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x96xf32>
    %q = "trn.tensor_tensor"(%x, %x) {op = "div"} : (tensor<128x96xf32>, tensor<128x96xf32>) -> tensor<128x96xf32>
    %o = "trn.tensor_tensor"(%q, %mb) {op = "add"} : (tensor<128x96xf32>, tensor<128x96xf32>) -> tensor<128x96xf32>
    %p = "trn.tensor_tensor"(%o, %q) {op = "mul"} : (tensor<128x96xf32>, tensor<128x96xf32>) -> tensor<128x96xf32>
    "trn.yield"(%p) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x96xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x96xf32>
  return %k : tensor<128x96xf32>
}

// -----

// Tests that two steps on rows, each with a per-row value or a constant, the first's fp32
// result read by the second alone, are one tensor_scalar with two ALU ops, each step in fp32
// as two instructions would compute it: a norm's (x - mean) * rstd, with both per-row values
// as its per-partition operands, and its backward's 768 g - r.
// CHECK-LABEL: func.func @norm_steps_per_row_chained
// CHECK: "nisa.tensor_reduce"(%[[SUM:[0-9]+]],
// CHECK: "nisa.tensor_scalar"(%[[MEAN:[0-9]+]], %[[SUM]])
// CHECK: "nisa.activation"(%[[R:[0-9]+]], %[[SUM]]) {{.*}}func = "rsqrt"
// CHECK: "nisa.tensor_scalar"(%[[XHAT:[0-9]+]], %{{[0-9]+}}, %[[MEAN]], %[[R]]) {{.*}}op0 = "sub", op1 = "mul", operandSegmentSizes = array<i32: 1, 1, 1, 1>
// CHECK: "nisa.tensor_scalar"(%[[T:[0-9]+]], %{{[0-9]+}}, %[[R]]) {{.*}}imm0 = 7.680000e+02 : f32{{.*}}op0 = "mul", op1 = "sub", operandSegmentSizes = array<i32: 1, 1, 0, 1>
// CHECK: "nisa.tensor_tensor"(%{{[0-9]+}}, %[[XHAT]], %[[T]]) {{.*}}op = "mul"
// CHECK-NOT: "nisa.tensor_scalar"
// CHECK: return
func.func @norm_steps_per_row_chained(%x: tensor<128x1024xf32>, %g: tensor<128x1024xf32>) -> tensor<128x1024xf32> {
  %k = "trn.kernel"() ({
    %sum = "trn.reduce"(%x) {op = "add", dimensions = array<i64: 1>} : (tensor<128x1024xf32>) -> tensor<128xf32>
    %mean = "trn.tensor_scalar"(%sum) {op = "mul", scalar = 9.765625e-04 : f32, reverse = false} : (tensor<128xf32>) -> tensor<128xf32>
    %mb = "trn.broadcast"(%mean) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x1024xf32>
    %r = "trn.activation"(%sum) {func = "rsqrt", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128xf32>) -> tensor<128xf32>
    %rb = "trn.broadcast"(%r) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x1024xf32>
    %d = "trn.tensor_tensor"(%x, %mb) {op = "sub"} : (tensor<128x1024xf32>, tensor<128x1024xf32>) -> tensor<128x1024xf32>
    %xhat = "trn.tensor_tensor"(%d, %rb) {op = "mul"} : (tensor<128x1024xf32>, tensor<128x1024xf32>) -> tensor<128x1024xf32>
    %g768 = "trn.tensor_scalar"(%g) {op = "mul", scalar = 7.680000e+02 : f32, reverse = false} : (tensor<128x1024xf32>) -> tensor<128x1024xf32>
    %t = "trn.tensor_tensor"(%g768, %rb) {op = "sub"} : (tensor<128x1024xf32>, tensor<128x1024xf32>) -> tensor<128x1024xf32>
    %y = "trn.tensor_tensor"(%xhat, %t) {op = "mul"} : (tensor<128x1024xf32>, tensor<128x1024xf32>) -> tensor<128x1024xf32>
    "trn.yield"(%y) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x1024xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x1024xf32>
  return %k : tensor<128x1024xf32>
}

// -----

// Tests that of three such steps in a row, the first two are one instruction and the third
// another (an instruction takes two ALU ops): (x * 0.5 - r) then * 2.
// CHECK-LABEL: func.func @three_steps_two_chained
// CHECK: "nisa.tensor_scalar"(%[[T:[0-9]+]], %{{[0-9]+}}, %[[R:[0-9]+]]) {{.*}}imm0 = 5.000000e-01 : f32{{.*}}op0 = "mul", op1 = "sub", operandSegmentSizes = array<i32: 1, 1, 0, 1>
// CHECK: "nisa.{{tensor_scalar|activation}}"(%{{[0-9]+}}, %[[T]]{{.*}}2.000000e+00 : f32
// CHECK: return
func.func @three_steps_two_chained(%x: tensor<128x1024xf32>) -> tensor<128x1024xf32> {
  %k = "trn.kernel"() ({
    %sum = "trn.reduce"(%x) {op = "add", dimensions = array<i64: 1>} : (tensor<128x1024xf32>) -> tensor<128xf32>
    %rb = "trn.broadcast"(%sum) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x1024xf32>
    %h = "trn.tensor_scalar"(%x) {op = "mul", scalar = 5.000000e-01 : f32, reverse = false} : (tensor<128x1024xf32>) -> tensor<128x1024xf32>
    %t = "trn.tensor_tensor"(%h, %rb) {op = "sub"} : (tensor<128x1024xf32>, tensor<128x1024xf32>) -> tensor<128x1024xf32>
    %y = "trn.tensor_scalar"(%t) {op = "mul", scalar = 2.000000e+00 : f32, reverse = false} : (tensor<128x1024xf32>) -> tensor<128x1024xf32>
    "trn.yield"(%y) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x1024xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x1024xf32>
  return %k : tensor<128x1024xf32>
}

// -----

// Tests that two constant steps on a per-row value (a variance's 1/N and its epsilon), the
// first's fp32 result read by the second alone, are one tensor_scalar with two ALU ops.
// CHECK-LABEL: func.func @norm_variance_steps_chained
// CHECK: "nisa.tensor_scalar"(%[[VAR:[0-9]+]], %{{[0-9]+}}) {{.*}}imm0 = 9.765625E-4 : f32, imm1 = 9.99999974E-6 : f32, op0 = "mul", op1 = "add"
// CHECK-NOT: "nisa.tensor_scalar"
// CHECK: "nisa.activation"(%{{[0-9]+}}, %[[VAR]]) {{.*}}func = "rsqrt"
func.func @norm_variance_steps_chained(%x: tensor<128x1024xf32>) -> tensor<128xf32> {
  %k = "trn.kernel"() ({
    %sq = "trn.tensor_tensor"(%x, %x) {op = "mul"} : (tensor<128x1024xf32>, tensor<128x1024xf32>) -> tensor<128x1024xf32>
    %ss = "trn.reduce"(%sq) {op = "add", dimensions = array<i64: 1>} : (tensor<128x1024xf32>) -> tensor<128xf32>
    %var = "trn.tensor_scalar"(%ss) {op = "mul", scalar = 9.765625e-04 : f32, reverse = false} : (tensor<128xf32>) -> tensor<128xf32>
    %ve = "trn.tensor_scalar"(%var) {op = "add", scalar = 1.0e-05 : f32, reverse = false} : (tensor<128xf32>) -> tensor<128xf32>
    %r = "trn.activation"(%ve) {func = "rsqrt", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128xf32>) -> tensor<128xf32>
    "trn.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128xf32>
  return %k : tensor<128xf32>
}

// -----

// Tests that a norm's weight and bias stay in SBUF (broadcast to every partition by DMA) and
// nothing of the norm is held in PSUM, which the matmul kernels beside it need: the multiply
// and the add, SBUF operands only, are shared by POOL and DVE (each on whichever would finish
// it first), two cycles per element each.
// CHECK-LABEL: func.func @norm_affine_shared_with_pool
// CHECK-NOT: "psum"
// CHECK: "nisa.dma"(%[[W:[0-9]+]], %arg1) {{.*}} : (memref<128x2048xbf16, "sbuf">, memref<2048xbf16, "hbm">)
// CHECK: "nisa.dma"(%[[B:[0-9]+]], %arg2) {{.*}} : (memref<128x2048xbf16, "sbuf">, memref<2048xbf16, "hbm">)
// CHECK-NOT: "psum"
// CHECK: "nisa.tensor_tensor"(%[[Y:[0-9]+]], %{{[0-9]+}}, %[[W]]) {{.*}}engine = "pool", op = "mul"
// CHECK-NOT: "psum"
// CHECK: "nisa.tensor_tensor"(%{{[0-9]+}}, %[[Y]], %[[B]]) {{.*}}engine = "dve", op = "add"
// CHECK-NOT: "psum"
// CHECK: return
func.func @norm_affine_shared_with_pool(%x: tensor<128x2048xf32>, %w: tensor<2048xbf16>, %b: tensor<2048xbf16>) -> tensor<128x2048xf32> {
  %k = "trn.kernel"() ({
    %wb = "trn.broadcast"(%w) {dimensions = array<i64: 0>} : (tensor<2048xbf16>) -> tensor<128x2048xbf16>
    %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<2048xbf16>) -> tensor<128x2048xbf16>
    %sum = "trn.reduce"(%x) {op = "add", dimensions = array<i64: 1>} : (tensor<128x2048xf32>) -> tensor<128xf32>
    %mean = "trn.tensor_scalar"(%sum) {op = "mul", scalar = 4.8828125e-04 : f32, reverse = false} : (tensor<128xf32>) -> tensor<128xf32>
    %mb = "trn.broadcast"(%mean) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x2048xf32>
    %d = "trn.tensor_tensor"(%x, %mb) {op = "sub"} : (tensor<128x2048xf32>, tensor<128x2048xf32>) -> tensor<128x2048xf32>
    %y = "trn.tensor_tensor"(%d, %wb) {op = "mul"} : (tensor<128x2048xf32>, tensor<128x2048xbf16>) -> tensor<128x2048xf32>
    %z = "trn.tensor_tensor"(%y, %bb) {op = "add"} : (tensor<128x2048xf32>, tensor<128x2048xbf16>) -> tensor<128x2048xf32>
    "trn.yield"(%z) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x2048xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x2048xf32>
  return %k : tensor<128x2048xf32>
}

// -----

// Tests that a scaled max read by more than the exp's bias is still made: the max of the
// unscaled row times c, then its negation as the bias. The division by the sum and the add
// of the max, the quotient read by the add alone, are one tensor_scalar with two per-row
// operands (each step in fp32, as two instructions would compute it).
// CHECK-LABEL: func.func @softmax_max_reused
// CHECK: "nisa.tensor_reduce"({{.*}}op = "max"
// CHECK: "nisa.tensor_scalar"(%[[M:[0-9]+]], {{.*}}imm0 = 1.250000e-01 : f32{{.*}}op0 = "mul"
// CHECK: "nisa.tensor_scalar"({{.*}}imm0 = -1.000000e+00 : f32{{.*}}op0 = "mul"
// CHECK: "nisa.activation"({{.*}}func = "exp"
// CHECK: "nisa.tensor_scalar"(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[M]]) {{.*}}op0 = "div", op1 = "add", operandSegmentSizes = array<i32: 1, 1, 1, 1>
// CHECK-NOT: "nisa.tensor_scalar"
// CHECK-NOT: "nisa.activation"
// CHECK: return
func.func @softmax_max_reused(%x: tensor<128x96xf32>) -> tensor<128x96xf32> {
  %k = "trn.kernel"() ({
    %s = "trn.tensor_scalar"(%x) {op = "mul", scalar = 0.125 : f32, reverse = false} : (tensor<128x96xf32>) -> tensor<128x96xf32>
    %m = "trn.reduce"(%s) {op = "max", dimensions = array<i64: 1>} : (tensor<128x96xf32>) -> tensor<128xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x96xf32>
    %d = "trn.tensor_tensor"(%s, %mb) {op = "sub"} : (tensor<128x96xf32>, tensor<128x96xf32>) -> tensor<128x96xf32>
    %e = "trn.activation"(%d) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x96xf32>) -> tensor<128x96xf32>
    %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 1>} : (tensor<128x96xf32>) -> tensor<128xf32>
    %zb = "trn.broadcast"(%z) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x96xf32>
    %r = "trn.tensor_tensor"(%e, %zb) {op = "div"} : (tensor<128x96xf32>, tensor<128x96xf32>) -> tensor<128x96xf32>
    %o = "trn.tensor_tensor"(%r, %mb) {op = "add"} : (tensor<128x96xf32>, tensor<128x96xf32>) -> tensor<128x96xf32>
    "trn.yield"(%o) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x96xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x96xf32>
  return %k : tensor<128x96xf32>
}

// -----

// Tests the lowering of an attention kernel: per batch index and block of 128 query rows, the
// scores matmul accumulates in PSUM and is evacuated into one SBUF row tile (rounded to bf16),
// the softmax runs on that tile, each 128-column block of the probabilities is transposed on
// PE to be the stationary operand against the values' rows, and only the result is stored.
// Nothing is stored to a scratch buffer in between. The evacuation also applies the scaling
// by 1/8 (a power of two: the same as scaling the rounded scores) and takes the negated row
// max in the same DVE pass, which the exp takes as its bias at scale 1: no separate max and
// no [128, 1] multiply. The softmax's division waits for the product: exp (with its row sum)
// writes the undivided probabilities in bf16, and the [128, 32] product is divided by the
// sum as it leaves PSUM, not the [128, 128] row.
// CHECK-LABEL: func.func @attention
// CHECK-NOT: memory = "hbm"
// CHECK: "nisa.matmul"(%[[S:[0-9]+]],
// CHECK: "nisa.tensor_scalar_reduce"(%[[X:[0-9]+]], %[[S]], %[[NEGMAX:[0-9]+]]) {{{.*}}engine = "dve", imm0 = 1.250000e-01 : f32, negate = true, op0 = "mul", {{.*}}reduce_op = "max"
// CHECK-NOT: "nisa.tensor_reduce"
// CHECK-NOT: "nisa.tensor_scalar"
// CHECK: "nisa.activation"(%[[E:[0-9]+]], %[[X]], %[[NEGMAX]], %[[SUM:[0-9]+]]) {{.*}}func = "exp"{{.*}}scale = 1.000000e+00 : f32} : (memref<128x128xbf16, "sbuf">
// CHECK-NOT: op0 = "div"
// CHECK: "nisa.transpose"(%{{[0-9]+}}, %[[E]])
// CHECK: "nisa.matmul"(%[[O:[0-9]+]],
// CHECK: "nisa.tensor_scalar"(%[[OUT:[0-9]+]], %[[O]], %[[SUM]]) {{.*}}op0 = "div"{{.*}} : (memref<128x32xbf16, "sbuf">, memref<128x32xf32, "psum">
// CHECK: "nisa.dma"(%arg3, %[[OUT]])
// CHECK-NOT: memory = "hbm"
// CHECK: return
func.func @attention(%q: tensor<2x128x32xbf16>, %kt: tensor<2x32x128xbf16>, %v: tensor<2x128x32xbf16>) -> tensor<2x128x32xbf16> {
  %k = "trn.kernel"() ({
    %s = "trn.matmul"(%q, %kt) : (tensor<2x128x32xbf16>, tensor<2x32x128xbf16>) -> tensor<2x128x128xf32>
    %sb = "trn.convert"(%s) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    %x = "trn.tensor_scalar"(%sb) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<2x128x128xbf16>) -> tensor<2x128x128xf32>
    %m = "trn.reduce"(%x) {op = "max", dimensions = array<i64: 2>} : (tensor<2x128x128xf32>) -> tensor<2x128xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x128xf32>
    %d = "trn.tensor_tensor"(%x, %mb) {op = "sub"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %e = "trn.activation"(%d) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 2>} : (tensor<2x128x128xf32>) -> tensor<2x128xf32>
    %zb = "trn.broadcast"(%z) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x128xf32>
    %p = "trn.tensor_tensor"(%e, %zb) {op = "div"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %pb = "trn.convert"(%p) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    %o = "trn.matmul"(%pb, %v) : (tensor<2x128x128xbf16>, tensor<2x128x32xbf16>) -> tensor<2x128x32xf32>
    %ob = "trn.convert"(%o) : (tensor<2x128x32xf32>) -> tensor<2x128x32xbf16>
    "trn.yield"(%ob) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2x128x32xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x32xbf16>
  return %k : tensor<2x128x32xbf16>
}

// -----

// Tests a matmul kernel whose epilogue computes a merged producer (GELU's derivative at a bf16
// input, multiplied into the product): the bf16 input is read by ACT and DVE as loaded (the
// engines widen exactly as they read: no copy), x * x is ACT's square (ACT would finish it
// first: a fp32 tensor_tensor costs DVE two cycles per element), the add of two SBUF values
// goes to POOL (idle so far), and the product is multiplied straight out of PSUM on DVE (POOL
// reads no PSUM).
// CHECK-LABEL: func.func @epilogue_producer
// CHECK: "nisa.matmul"
// CHECK: "nisa.dma"(%[[X:[0-9]+]], %arg2)
// CHECK-NOT: "nisa.tensor_copy"
// CHECK: "nisa.activation"(%{{.*}}, %[[X]]) {{.*}}func = "erf"{{.*}}scale = 0.707106769
// CHECK: "nisa.activation"(%{{.*}}, %[[X]]) {{.*}}func = "square"
// CHECK: "nisa.tensor_tensor"({{.*}}engine = "pool", op = "add"
// CHECK: "nisa.tensor_tensor"({{.*}}engine = "dve", op = "mul"{{.*}} : (memref<128x256xbf16, "sbuf">, memref<128x256xf32, "psum">, memref<128x256xf32, "sbuf">)
func.func @epilogue_producer(%w: tensor<256x128xbf16>, %dy: tensor<128x128xbf16>, %x: tensor<128x256xbf16>) -> tensor<128x256xbf16> {
  %k = "trn.kernel"() ({
    %c = "trn.convert"(%x) : (tensor<128x256xbf16>) -> tensor<128x256xf32>
    %e = "trn.activation"(%c) {bias = 0.0 : f32, func = "erf", scale = 0.707106769 : f32} : (tensor<128x256xf32>) -> tensor<128x256xf32>
    %sq = "trn.tensor_tensor"(%c, %c) {op = "mul"} : (tensor<128x256xf32>, tensor<128x256xf32>) -> tensor<128x256xf32>
    %d = "trn.tensor_tensor"(%e, %sq) {op = "add"} : (tensor<128x256xf32>, tensor<128x256xf32>) -> tensor<128x256xf32>
    %t = "trn.transpose"(%w) {permutation = array<i64: 1, 0>} : (tensor<256x128xbf16>) -> tensor<128x256xbf16>
    %mm = "trn.matmul"(%dy, %t) : (tensor<128x128xbf16>, tensor<128x256xbf16>) -> tensor<128x256xf32>
    %g = "trn.tensor_tensor"(%mm, %d) {op = "mul"} : (tensor<128x256xf32>, tensor<128x256xf32>) -> tensor<128x256xf32>
    %r = "trn.convert"(%g) : (tensor<128x256xf32>) -> tensor<128x256xbf16>
    "trn.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x256xbf16>) -> ()
  }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x256xbf16>
  return %k : tensor<128x256xbf16>
}

// -----

// Tests that an operand broadcast along the innermost free dim (a causal mask's row index,
// constant along each row) is not loaded one element per DMA run: its [128, 1] column is
// loaded and copied across the row on chip with a stride-0 read (an i64 read only by DVE's
// comparison, which sees it through fp32 as the copy does). The operand broadcast over
// partitions keeps its whole-row DMA.
// CHECK-LABEL: func.func @spread_columns
// CHECK: "nisa.dma"(%[[COL:[0-9]+]], %arg1) {aps = [array<i64: 0, 1, 128, 1, 1>, array<i64: 0, 1, 128, 0, 1>]
// CHECK: "nisa.tensor_copy"(%[[WIDE:[0-9]+]], %[[COL]]) {aps = [array<i64: 0, 512, 128, 1, 512>, array<i64: 0, 1, 128, 0, 512>]
// CHECK: "nisa.tensor_tensor"(%{{.*}}, %{{.*}}, %[[WIDE]]) {{.*}}op = "le"
// CHECK-NOT: "nisa.dma"(%{{.*}}, %arg1) {aps = [array<i64: 0, 512, 128, 1, 512>
func.func @spread_columns(%a: tensor<512xi64>, %b: tensor<512xi64>) -> tensor<512x512xi1> {
  %k = "trn.kernel"() ({
    %ra = "trn.broadcast"(%a) {dimensions = array<i64: 0>} : (tensor<512xi64>) -> tensor<512x512xi64>
    %cb = "trn.broadcast"(%b) {dimensions = array<i64: 1>} : (tensor<512xi64>) -> tensor<512x512xi64>
    %le = "trn.tensor_tensor"(%ra, %cb) {op = "le"} : (tensor<512x512xi64>, tensor<512x512xi64>) -> tensor<512x512xi1>
    "trn.yield"(%le) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<512x512xi1>) -> ()
  }) {kind = "elementwise", free_tile = 512 : i64, resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<512x512xi1>
  return %k : tensor<512x512xi1>
}

// -----

// Tests that a transposed ("nm") matmul with its feature tiles resident gathers the output
// rows of a block of feature tiles before storing them: each C^T tile [128 features, 256
// tokens] is turned back on PE into two [128 tokens, 128 features] blocks, copied side by side
// into one [128 tokens, 256 features] tile per 128 tokens, and stored once in runs of 256
// elements, not in 128-element runs per block.
// CHECK-LABEL: func.func @nm_rows
// CHECK-NOT: "nisa.dma"(%arg2,
// CHECK: "nisa.tensor_copy"(%[[CT:[0-9]+]], %{{[0-9]+}}) {aps = [array<i64: 0, 256, 128, 1, 256>
// CHECK: "nisa.transpose"(%{{[0-9]+}}, %[[CT]])
// CHECK: "nisa.tensor_copy"(%[[ROWS:[0-9]+]], %{{[0-9]+}}) {aps = [array<i64: 0, 256, 128, 1, 128>
// CHECK-NOT: "nisa.dma"(%arg2,
// CHECK: "nisa.tensor_copy"(%[[ROWS]], %{{[0-9]+}}) {aps = [array<i64: 128, 256, 128, 1, 128>
// CHECK: "nisa.dma"(%arg2, %[[ROWS]]) {aps = [array<i64: 0, 256, 64, 1, 256>
// CHECK-NOT: "nisa.dma"(%arg2, {{.*}}, 1, 128>
func.func @nm_rows(%x: tensor<256x128xbf16>, %w: tensor<256x128xbf16>) -> tensor<256x256xbf16> {
  %k = "trn.kernel"() ({
    %t = "trn.transpose"(%w) {permutation = array<i64: 1, 0>} : (tensor<256x128xbf16>) -> tensor<128x256xbf16>
    %y = "trn.matmul"(%x, %t) : (tensor<256x128xbf16>, tensor<128x256xbf16>) -> tensor<256x256xf32>
    %r = "trn.convert"(%y) : (tensor<256x256xf32>) -> tensor<256x256xbf16>
    "trn.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x256xbf16>) -> ()
  }) {gemm_block = 2 : i64, gemm_resident = "p", kind = "matmul", orientation = "nm", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x256xbf16>
  return %k : tensor<256x256xbf16>
}

// -----

// Tests that PSUM evacuations that only round (an epilogue of one trn.convert) are shared by
// DVE and ACT: each goes to the engine that would finish it first given the work it has had
// (the cost model's busy time at each engine's clock), so the four [128, 512] banks alternate.
// CHECK-LABEL: func.func @evacuations_shared
// CHECK: "nisa.matmul"
// CHECK: "nisa.tensor_copy"({{.*}}engine = "dve"} : (memref<128x512xbf16, "sbuf">, memref<128x512xf32, "psum">)
// CHECK: "nisa.matmul"
// CHECK: "nisa.tensor_copy"({{.*}}engine = "act"} : (memref<128x512xbf16, "sbuf">, memref<128x512xf32, "psum">)
// CHECK: "nisa.matmul"
// CHECK: "nisa.tensor_copy"({{.*}}engine = "dve"} : (memref<128x512xbf16, "sbuf">, memref<128x512xf32, "psum">)
// CHECK: "nisa.matmul"
// CHECK: "nisa.tensor_copy"({{.*}}engine = "act"} : (memref<128x512xbf16, "sbuf">, memref<128x512xf32, "psum">)
func.func @evacuations_shared(%a: tensor<256x128xbf16>, %b: tensor<128x1024xbf16>) -> tensor<256x1024xbf16> {
  %k = "trn.kernel"() ({
    %mm = "trn.matmul"(%a, %b) : (tensor<256x128xbf16>, tensor<128x1024xbf16>) -> tensor<256x1024xf32>
    %r = "trn.convert"(%mm) : (tensor<256x1024xf32>) -> tensor<256x1024xbf16>
    "trn.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x1024xbf16>) -> ()
  }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x1024xbf16>
  return %k : tensor<256x1024xbf16>
}

// -----

// Tests that fp32 scores of one PSUM bank stay in PSUM in an attention kernel: the scaling
// rewrites them in place (no evacuation copy) and the mask add reads them from PSUM (one
// cycle per element instead of two for two SBUF operands).
// CHECK-LABEL: func.func @attention_scores_in_psum
// CHECK: "nisa.matmul"(%[[S:[0-9]+]], {{.*}} : (memref<128x128xf32, "psum">
// CHECK-NOT: "nisa.tensor_copy"(%{{[0-9]+}}, %[[S]])
// CHECK: "nisa.{{tensor_scalar|activation}}"(%[[S]], %[[S]]) {{.*}}1.250000e-01
// CHECK-NOT: "nisa.tensor_copy"(%{{[0-9]+}}, %[[S]])
// CHECK: "nisa.tensor_tensor"(%{{[0-9]+}}, %[[S]], %{{[0-9]+}}) {{.*}}op = "add"
func.func @attention_scores_in_psum(%q: tensor<2x128x64xbf16>, %kt: tensor<2x64x128xbf16>, %v: tensor<2x128x64xf32>, %mask: tensor<128x128xf32>) -> tensor<2x128x64xbf16> {
  %k0 = "trn.kernel"() ({
    %s = "trn.matmul"(%q, %kt) : (tensor<2x128x64xbf16>, tensor<2x64x128xbf16>) -> tensor<2x128x128xf32>
    %sc = "trn.tensor_scalar"(%s) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %s4 = "trn.reshape"(%sc) : (tensor<2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %mb = "trn.broadcast"(%mask) {dimensions = array<i64: 0, 1>} : (tensor<128x128xf32>) -> tensor<1x2x128x128xf32>
    %a = "trn.tensor_tensor"(%s4, %mb) {op = "add"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %m = "trn.reduce"(%a) {op = "max", dimensions = array<i64: 3>} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
    %mm = "trn.broadcast"(%m) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
    %d = "trn.tensor_tensor"(%a, %mm) {op = "sub"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %e = "trn.activation"(%d) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 3>} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
    %zb = "trn.broadcast"(%z) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
    %p = "trn.tensor_tensor"(%e, %zb) {op = "div"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %p3 = "trn.reshape"(%p) : (tensor<1x2x128x128xf32>) -> tensor<2x128x128xf32>
    %o = "trn.matmul"(%p3, %v) : (tensor<2x128x128xf32>, tensor<2x128x64xf32>) -> tensor<2x128x64xf32>
    %ob = "trn.convert"(%o) : (tensor<2x128x64xf32>) -> tensor<2x128x64xbf16>
    "trn.yield"(%ob) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2x128x64xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x64xbf16>
  return %k0 : tensor<2x128x64xbf16>
}

// -----

// Tests that an attention kernel whose heads lie side by side in each token row (a projection
// viewed per head) loads Q, K and V once for all heads, in whole rows, and gives each head
// its columns of those tiles: head 1 transposes Q and K from column 32 and multiplies the
// values from column 32; nothing is loaded per head.
// CHECK-LABEL: func.func @attention_heads
// CHECK: "nisa.dma"(%[[Q:[0-9]+]], %arg0) {aps = [array<i64: 0, 64, 128, 1, 64>
// CHECK: "nisa.dma"(%[[K:[0-9]+]], %arg1) {aps = [array<i64: 0, 64, 128, 1, 64>
// CHECK: "nisa.dma"(%[[V:[0-9]+]], %arg2) {aps = [array<i64: 0, 64, 128, 1, 64>
// CHECK: "nisa.transpose"(%{{.*}}, %[[Q]]) {aps = [{{.*}}, array<i64: 32, 64, 128, 1, 32>]
// CHECK: "nisa.transpose"(%{{.*}}, %[[K]]) {aps = [{{.*}}, array<i64: 32, 64, 128, 1, 32>]
// CHECK: "nisa.matmul"(%{{.*}}, %{{.*}}, %[[V]]) {{.*}}array<i64: 32, 64, 128, 1, 32>]
// CHECK-NOT: "nisa.dma"(%{{[0-9]+}}, %arg
// CHECK: return
func.func @attention_heads(%q: tensor<128x64xbf16>, %k: tensor<128x64xbf16>, %v: tensor<128x64xbf16>) -> tensor<2x128x32xbf16> {
  %k0 = "trn.kernel"() ({
    %qr = "trn.reshape"(%q) : (tensor<128x64xbf16>) -> tensor<128x2x32xbf16>
    %qh = "trn.transpose"(%qr) {permutation = array<i64: 1, 0, 2>} : (tensor<128x2x32xbf16>) -> tensor<2x128x32xbf16>
    %kr = "trn.reshape"(%k) : (tensor<128x64xbf16>) -> tensor<128x2x32xbf16>
    %kh = "trn.transpose"(%kr) {permutation = array<i64: 1, 2, 0>} : (tensor<128x2x32xbf16>) -> tensor<2x32x128xbf16>
    %vr = "trn.reshape"(%v) : (tensor<128x64xbf16>) -> tensor<128x2x32xbf16>
    %vh = "trn.transpose"(%vr) {permutation = array<i64: 1, 0, 2>} : (tensor<128x2x32xbf16>) -> tensor<2x128x32xbf16>
    %s = "trn.matmul"(%qh, %kh) : (tensor<2x128x32xbf16>, tensor<2x32x128xbf16>) -> tensor<2x128x128xf32>
    %m = "trn.reduce"(%s) {op = "max", dimensions = array<i64: 2>} : (tensor<2x128x128xf32>) -> tensor<2x128xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x128xf32>
    %d = "trn.tensor_tensor"(%s, %mb) {op = "sub"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %e = "trn.activation"(%d) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 2>} : (tensor<2x128x128xf32>) -> tensor<2x128xf32>
    %zb = "trn.broadcast"(%z) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x128xf32>
    %p = "trn.tensor_tensor"(%e, %zb) {op = "div"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %pb = "trn.convert"(%p) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    %o = "trn.matmul"(%pb, %vh) : (tensor<2x128x128xbf16>, tensor<2x128x32xbf16>) -> tensor<2x128x32xf32>
    %ob = "trn.convert"(%o) : (tensor<2x128x32xf32>) -> tensor<2x128x32xbf16>
    "trn.yield"(%ob) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2x128x32xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x32xbf16>
  return %k0 : tensor<2x128x32xbf16>
}

// -----

// Tests the lowering of an mlp kernel (Linear - GELU - Linear): per 128 hidden units, the
// first matmul accumulates [hidden, tokens] in PSUM (128 tokens at a time: two blocks of
// 256 would be fewer than mlp.tokens_per_block wants), ACT evacuates it with the bias on its
// bias port and GELU into a bf16 SBUF tile, and that tile is the stationary operand of the
// second matmul; the hidden activation gets no HBM buffer, and each weight row is loaded once.
// The bias column's widening to fp32, SBUF to SBUF, goes to POOL, idle beside the PSUM
// evacuations on ACT and DVE.
// CHECK-LABEL: func.func @mlp
// CHECK-NOT: memory = "hbm"
// CHECK: "nisa.tensor_copy"({{.*}}engine = "pool"{{.*}} : (memref<128x1xf32, "sbuf">, memref<128x1xbf16, "sbuf">)
// CHECK: "nisa.activation"(%[[H:[0-9]+]], %{{[0-9]+}}, %{{[0-9]+}}) {{.*}}func = "gelu"{{.*}} : (memref<128x128xbf16, "sbuf">, memref<128x128xf32, "psum">, memref<128x1xf32, "sbuf">)
// CHECK: "nisa.matmul"(%{{[0-9]+}}, %[[H]], %{{[0-9]+}})
// CHECK-COUNT-3: "nisa.dma"(%{{[0-9]+}}, %arg1)
// CHECK-NOT: "nisa.dma"(%{{[0-9]+}}, %arg1)
// CHECK-NOT: memory = "hbm"
// CHECK: return
func.func @mlp(%arg0: tensor<256x128xbf16>, %arg1: tensor<512x128xbf16>, %arg2: tensor<512xbf16>, %arg3: tensor<128x512xbf16>) -> tensor<256x128xbf16> {
  %0 = "trn.kernel"() ({
    %1 = "trn.transpose"(%arg1) {permutation = array<i64: 1, 0>} : (tensor<512x128xbf16>) -> tensor<128x512xbf16>
    %2 = "trn.broadcast"(%arg2) {dimensions = array<i64: 0>} : (tensor<512xbf16>) -> tensor<256x512xbf16>
    %3 = "trn.matmul"(%arg0, %1) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
    %4 = "trn.tensor_tensor"(%3, %2) {op = "add"} : (tensor<256x512xf32>, tensor<256x512xbf16>) -> tensor<256x512xf32>
    %5 = "trn.activation"(%4) {bias = 0.000000e+00 : f32, func = "gelu", scale = 1.000000e+00 : f32} : (tensor<256x512xf32>) -> tensor<256x512xf32>
    %6 = "trn.convert"(%5) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
    %7 = "trn.transpose"(%arg3) {permutation = array<i64: 1, 0>} : (tensor<128x512xbf16>) -> tensor<512x128xbf16>
    %8 = "trn.matmul"(%6, %7) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
    %9 = "trn.convert"(%8) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
    "trn.yield"(%9) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x128xbf16>) -> ()
  }) {kind = "mlp", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x128xbf16>
  return %0 : tensor<256x128xbf16>
}

// ERRWG: trn_to_nisa-invalid-weight-gradient.mlir:7:10: error: convert-trn-to-nisa: a weight_gradient kernel's second matmul reads the transpose of the first's result
// ERRMLP: trn_to_nisa-invalid-mlp.mlir:5:10: error: convert-trn-to-nisa: an mlp kernel holds two matmuls
// ERRRES: trn_to_nisa-invalid-results.mlir:3:10: error: convert-trn-to-nisa: a 'reduce' kernel has one result; only matmul, elementwise, weight_gradient, attention, rows and mlp_saved kernels store more
// ERRROWRES: trn_to_nisa-invalid-row-results.mlir:{{[0-9]+}}:{{[0-9]+}}: error: convert-trn-to-nisa: a row-wise kernel's further results are per-row values
// ERRCOLS: trn_to_nisa-invalid-column-sum.mlir:8:{{[0-9]+}}: error: convert-trn-to-nisa: a row-wise kernel's sum over its rows is a float sum over every kept dim of a row value
// ERRCOLS: trn_to_nisa-invalid-column-sum.mlir:22:{{[0-9]+}}: error: convert-trn-to-nisa: a row-wise kernel's first result is over its rows, not a column sum
// ERRCOLS: trn_to_nisa-invalid-column-sum.mlir:38:{{[0-9]+}}: error: convert-trn-to-nisa: a row-wise kernel computes on its column sums only with elementwise ops of them alone, not 'trn.broadcast'
// ERRCOLS: trn_to_nisa-invalid-column-sum.mlir:54:{{[0-9]+}}: error: convert-trn-to-nisa: a row-wise kernel computes on its column sums only with elementwise ops of them alone, not 'trn.tensor_tensor'

// -----

// Tests the lowering of an mlp_rows kernel (an mlp, then the bias and residual adds and a
// mean subtraction over its output rows): each token block's output accumulators are
// evacuated into bf16 SBUF row tiles that the rows' ops read on chip; the mlp's output gets
// no HBM buffer, and only the rows' result is stored.
// CHECK-LABEL: func.func @mlp_rows
// CHECK-NOT: memory = "hbm"
// CHECK: "nisa.matmul"(%[[ACC:[0-9]+]], {{.*}}accumulate = true
// CHECK: "nisa.tensor_copy"(%[[Y:[0-9]+]], %[[ACC]]) {{.*}} : (memref<128x128xbf16, "sbuf">, memref<128x128xf32, "psum">)
// CHECK: "nisa.tensor_tensor"(%{{[0-9]+}}, %{{[0-9]+}}, %[[Y]]) {{.*}}op = "add"
// CHECK: "nisa.dma"(%arg4,
// CHECK: "nisa.dma"(%arg4,
// CHECK-NOT: "nisa.dma"(%arg4,
// CHECK-NOT: memory = "hbm"
// CHECK: return
func.func @mlp_rows(%arg0: tensor<256x128xbf16>, %arg1: tensor<128x512xbf16>, %arg2: tensor<512x128xbf16>, %arg3: tensor<128xbf16>) -> tensor<256x128xbf16> {
  %0 = "trn.kernel"() ({
    %1 = "trn.matmul"(%arg0, %arg1) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
    %2 = "trn.activation"(%1) {bias = 0.000000e+00 : f32, func = "gelu", scale = 1.000000e+00 : f32} : (tensor<256x512xf32>) -> tensor<256x512xf32>
    %3 = "trn.convert"(%2) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
    %4 = "trn.matmul"(%3, %arg2) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
    %5 = "trn.convert"(%4) {trn.producer_result} : (tensor<256x128xf32>) -> tensor<256x128xbf16>
    %6 = "trn.broadcast"(%arg3) {dimensions = array<i64: 0>} : (tensor<128xbf16>) -> tensor<256x128xbf16>
    %7 = "trn.tensor_tensor"(%6, %5) {op = "add"} : (tensor<256x128xbf16>, tensor<256x128xbf16>) -> tensor<256x128xf32>
    %8 = "trn.tensor_tensor"(%arg0, %7) {op = "add"} : (tensor<256x128xbf16>, tensor<256x128xf32>) -> tensor<256x128xf32>
    %9 = "trn.reduce"(%8) {dimensions = array<i64: 1>, op = "add"} : (tensor<256x128xf32>) -> tensor<256xf32>
    %10 = "trn.tensor_scalar"(%9) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<256xf32>) -> tensor<256xf32>
    %11 = "trn.broadcast"(%10) {dimensions = array<i64: 1>} : (tensor<256xf32>) -> tensor<256x128xf32>
    %12 = "trn.tensor_tensor"(%8, %11) {op = "sub"} : (tensor<256x128xf32>, tensor<256x128xf32>) -> tensor<256x128xf32>
    %13 = "trn.convert"(%12) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
    "trn.yield"(%13) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x128xbf16>) -> ()
  }) {kind = "mlp_rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x128xbf16>
  return %0 : tensor<256x128xbf16>
}

// ERRMLPROWS: trn_to_nisa-invalid-mlp-rows.mlir:3:8: error: convert-trn-to-nisa: an mlp_rows kernel needs one op marked trn.producer_result, not its last

// -----

// Tests the lowering of a linear_rows kernel (a Linear with its bias, then the residual add
// and a mean subtraction over its output rows): the staged X^T tiles are the stationary
// operands of the Linear's matmuls, whose accumulators are evacuated with the bias into bf16
// SBUF row tiles that the rows' ops read on chip; the Linear's output gets no HBM buffer.
// CHECK-LABEL: func.func @linear_rows
// CHECK-NOT: memory = "hbm"
// CHECK: "nisa.matmul"(%[[ACC:[0-9]+]], {{.*}}accumulate = true
// CHECK: "nisa.tensor_tensor"(%[[Y:[0-9]+]], %{{[0-9]+}}, %[[ACC]]) {{.*}}op = "add"{{.*}} : (memref<128x128xbf16, "sbuf">,
// CHECK: "nisa.tensor_tensor"(%{{[0-9]+}}, %{{[0-9]+}}, %[[Y]]) {{.*}}op = "add"
// CHECK: "nisa.dma"(%arg4,
// CHECK-NOT: memory = "hbm"
// CHECK: return
func.func @linear_rows(%arg0: tensor<256x256xbf16>, %arg1: tensor<256x128xbf16>, %arg2: tensor<128xbf16>, %arg3: tensor<2x128x128xbf16>) -> tensor<2x128x128xbf16> {
  %0 = "trn.kernel"() ({
    %1 = "trn.broadcast"(%arg2) {dimensions = array<i64: 0>} : (tensor<128xbf16>) -> tensor<256x128xbf16>
    %2 = "trn.matmul"(%arg0, %arg1) : (tensor<256x256xbf16>, tensor<256x128xbf16>) -> tensor<256x128xf32>
    %3 = "trn.tensor_tensor"(%1, %2) {op = "add"} : (tensor<256x128xbf16>, tensor<256x128xf32>) -> tensor<256x128xf32>
    %4 = "trn.convert"(%3) {trn.producer_result} : (tensor<256x128xf32>) -> tensor<256x128xbf16>
    %5 = "trn.reshape"(%4) : (tensor<256x128xbf16>) -> tensor<2x128x128xbf16>
    %6 = "trn.tensor_tensor"(%arg3, %5) {op = "add"} : (tensor<2x128x128xbf16>, tensor<2x128x128xbf16>) -> tensor<2x128x128xf32>
    %7 = "trn.reduce"(%6) {dimensions = array<i64: 2>, op = "add"} : (tensor<2x128x128xf32>) -> tensor<2x128xf32>
    %8 = "trn.tensor_scalar"(%7) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<2x128xf32>) -> tensor<2x128xf32>
    %9 = "trn.broadcast"(%8) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x128xf32>
    %10 = "trn.tensor_tensor"(%6, %9) {op = "sub"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %11 = "trn.convert"(%10) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    "trn.yield"(%11) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2x128x128xbf16>) -> ()
  }) {kind = "linear_rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x128xbf16>
  return %0 : tensor<2x128x128xbf16>
}

// -----

// Tests that an mlp kernel's resident weight stored row-major ([features, hidden], as GPT-2's
// Conv1D keeps it) is loaded in whole K-tile rows, one [128, 512] tile that the four hidden
// chunks' matmuls read columns of, not four [128, 128] tiles of 256-byte runs (each run
// costs the DMA as much as 512 bytes). The load is split by partitions over four queues.
// CHECK-LABEL: func.func @mlp_row_major_weights
// CHECK: "nisa.dma"(%[[A:[0-9]+]], %arg1) {{.*}}: (memref<128x512xbf16, "sbuf">, memref<128x512xbf16, "hbm">)
// CHECK-COUNT-3: "nisa.dma"(%[[A]], %arg1)
// CHECK-NOT: "nisa.dma"(%{{[0-9]+}}, %arg1)
func.func @mlp_row_major_weights(%arg0: tensor<256x128xbf16>, %arg1: tensor<128x512xbf16>, %arg2: tensor<512x128xbf16>) -> tensor<256x128xbf16> {
  %0 = "trn.kernel"() ({
    %1 = "trn.matmul"(%arg0, %arg1) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
    %2 = "trn.activation"(%1) {bias = 0.000000e+00 : f32, func = "gelu", scale = 1.000000e+00 : f32} : (tensor<256x512xf32>) -> tensor<256x512xf32>
    %3 = "trn.convert"(%2) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
    %4 = "trn.matmul"(%3, %arg2) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
    %5 = "trn.convert"(%4) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
    "trn.yield"(%5) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x128xbf16>) -> ()
  }) {kind = "mlp", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x128xbf16>
  return %0 : tensor<256x128xbf16>
}

// -----

// Tests that a row-wise kernel's leaf broadcast over a loop (a causal mask over 4 heads) is
// loaded once per block of 128 rows, when the first head reaches it, and read again by the
// other heads: two tiles, each split by partitions over two queues, not eight.
// CHECK-LABEL: func.func @mask_over_heads
// CHECK-COUNT-4: "nisa.dma"(%{{[0-9]+}}, %arg1)
// CHECK-NOT: "nisa.dma"(%{{[0-9]+}}, %arg1)
func.func @mask_over_heads(%x: tensor<4x256x128xf32>, %mask: tensor<256x128xf32>) -> tensor<4x256x128xf32> {
  %k = "trn.kernel"() ({
    %mb = "trn.broadcast"(%mask) {dimensions = array<i64: 0>} : (tensor<256x128xf32>) -> tensor<4x256x128xf32>
    %s = "trn.tensor_tensor"(%x, %mb) {op = "add"} : (tensor<4x256x128xf32>, tensor<4x256x128xf32>) -> tensor<4x256x128xf32>
    %m = "trn.reduce"(%s) {op = "max", dimensions = array<i64: 2>} : (tensor<4x256x128xf32>) -> tensor<4x256xf32>
    %mm = "trn.broadcast"(%m) {dimensions = array<i64: 2>} : (tensor<4x256xf32>) -> tensor<4x256x128xf32>
    %d = "trn.tensor_tensor"(%s, %mm) {op = "sub"} : (tensor<4x256x128xf32>, tensor<4x256x128xf32>) -> tensor<4x256x128xf32>
    %e = "trn.activation"(%d) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<4x256x128xf32>) -> tensor<4x256x128xf32>
    %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 2>} : (tensor<4x256x128xf32>) -> tensor<4x256xf32>
    %zb = "trn.broadcast"(%z) {dimensions = array<i64: 2>} : (tensor<4x256xf32>) -> tensor<4x256x128xf32>
    %r = "trn.tensor_tensor"(%e, %zb) {op = "div"} : (tensor<4x256x128xf32>, tensor<4x256x128xf32>) -> tensor<4x256x128xf32>
    "trn.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<4x256x128xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<4x256x128xf32>
  return %k : tensor<4x256x128xf32>
}

// -----

// Tests that a bias over the output features of an "mn" matmul (constant along the
// partitions) is loaded once, as a tile broadcast across partitions, and read by the
// evacuating add of every 128-row block, not loaded again for each block.
// CHECK-LABEL: func.func @bias_mn
// CHECK: "nisa.dma"(%[[BIAS:[0-9]+]], %arg2) {aps = [array<i64: 0, 128, 64, 1, 128>, array<i64: 0, 0, 64, 1, 128>]
// CHECK: "nisa.dma"(%[[BIAS]], %arg2) {aps = [array<i64: 8192, 128, 64, 1, 128>, array<i64: 0, 0, 64, 1, 128>]
// CHECK: "nisa.tensor_tensor"(%{{[0-9]+}}, %[[BIAS]], %{{[0-9]+}}) {{{.*}}engine = "dve", op = "add"}
// CHECK-NOT: "nisa.dma"({{.*}}, %arg2)
// CHECK: "nisa.tensor_tensor"(%{{[0-9]+}}, %[[BIAS]], %{{[0-9]+}}) {{{.*}}engine = "dve", op = "add"}
// CHECK: return
func.func @bias_mn(%x: tensor<256x128xf32>, %w: tensor<128x128xf32>, %b: tensor<128xf32>) -> tensor<256x128xf32> {
  %k = "trn.kernel"() ({
    %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<128xf32>) -> tensor<256x128xf32>
    %y = "trn.matmul"(%x, %w) : (tensor<256x128xf32>, tensor<128x128xf32>) -> tensor<256x128xf32>
    %z = "trn.tensor_tensor"(%bb, %y) {op = "add"} : (tensor<256x128xf32>, tensor<256x128xf32>) -> tensor<256x128xf32>
    "trn.yield"(%z) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x128xf32>) -> ()
  }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x128xf32>
  return %k : tensor<256x128xf32>
}

// -----

// Tests that heads narrower than a K-tile share its transposes: Q and K of four heads of 32
// are each transposed once as one [128, 128] block (the PE and the copy out of PSUM cost no
// more for 128 rows than for 32), and head h's scores matmul reads its rows of the transposed
// blocks from partition 32 h, stationary and moving alike.
// CHECK-LABEL: func.func @attention_heads_share_transposes
// CHECK: "nisa.dma"(%[[Q:[0-9]+]], %arg0)
// CHECK: "nisa.transpose"(%{{[0-9]+}}, %[[Q]]) {aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]
// CHECK: "nisa.dma"(%[[K:[0-9]+]], %arg1)
// CHECK: "nisa.transpose"(%{{[0-9]+}}, %[[K]]) {aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]
// CHECK: "nisa.matmul"(%{{[0-9]+}}, %[[QT:[0-9]+]], %[[KT:[0-9]+]]) {accumulate = false, aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 32, 1, 128>, array<i64: 0, 128, 32, 1, 128>]
// CHECK-NOT: "nisa.transpose"(%{{[0-9]+}}, %[[Q]])
// CHECK: "nisa.matmul"(%{{[0-9]+}}, %[[QT]], %[[KT]]) {accumulate = false, aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 4096, 128, 32, 1, 128>, array<i64: 4096, 128, 32, 1, 128>]
// CHECK-NOT: "nisa.transpose"(%{{[0-9]+}}, %[[K]])
// CHECK: "nisa.matmul"(%{{[0-9]+}}, %[[QT]], %[[KT]]) {accumulate = false, aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 8192, 128, 32, 1, 128>, array<i64: 8192, 128, 32, 1, 128>]
// CHECK-NOT: "nisa.transpose"(%{{[0-9]+}}, %[[Q]])
// CHECK: "nisa.matmul"(%{{[0-9]+}}, %[[QT]], %[[KT]]) {accumulate = false, aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 12288, 128, 32, 1, 128>, array<i64: 12288, 128, 32, 1, 128>]
// CHECK: return
func.func @attention_heads_share_transposes(%q: tensor<128x128xbf16>, %k: tensor<128x128xbf16>, %v: tensor<128x128xbf16>) -> tensor<4x128x32xbf16> {
  %k0 = "trn.kernel"() ({
    %qr = "trn.reshape"(%q) : (tensor<128x128xbf16>) -> tensor<128x4x32xbf16>
    %qh = "trn.transpose"(%qr) {permutation = array<i64: 1, 0, 2>} : (tensor<128x4x32xbf16>) -> tensor<4x128x32xbf16>
    %kr = "trn.reshape"(%k) : (tensor<128x128xbf16>) -> tensor<128x4x32xbf16>
    %kh = "trn.transpose"(%kr) {permutation = array<i64: 1, 2, 0>} : (tensor<128x4x32xbf16>) -> tensor<4x32x128xbf16>
    %vr = "trn.reshape"(%v) : (tensor<128x128xbf16>) -> tensor<128x4x32xbf16>
    %vh = "trn.transpose"(%vr) {permutation = array<i64: 1, 0, 2>} : (tensor<128x4x32xbf16>) -> tensor<4x128x32xbf16>
    %s = "trn.matmul"(%qh, %kh) : (tensor<4x128x32xbf16>, tensor<4x32x128xbf16>) -> tensor<4x128x128xf32>
    %m = "trn.reduce"(%s) {op = "max", dimensions = array<i64: 2>} : (tensor<4x128x128xf32>) -> tensor<4x128xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 2>} : (tensor<4x128xf32>) -> tensor<4x128x128xf32>
    %d = "trn.tensor_tensor"(%s, %mb) {op = "sub"} : (tensor<4x128x128xf32>, tensor<4x128x128xf32>) -> tensor<4x128x128xf32>
    %e = "trn.activation"(%d) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<4x128x128xf32>) -> tensor<4x128x128xf32>
    %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 2>} : (tensor<4x128x128xf32>) -> tensor<4x128xf32>
    %zb = "trn.broadcast"(%z) {dimensions = array<i64: 2>} : (tensor<4x128xf32>) -> tensor<4x128x128xf32>
    %p = "trn.tensor_tensor"(%e, %zb) {op = "div"} : (tensor<4x128x128xf32>, tensor<4x128x128xf32>) -> tensor<4x128x128xf32>
    %pb = "trn.convert"(%p) : (tensor<4x128x128xf32>) -> tensor<4x128x128xbf16>
    %o = "trn.matmul"(%pb, %vh) : (tensor<4x128x128xbf16>, tensor<4x128x32xbf16>) -> tensor<4x128x32xf32>
    %ob = "trn.convert"(%o) : (tensor<4x128x32xf32>) -> tensor<4x128x32xbf16>
    "trn.yield"(%ob) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<4x128x32xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<4x128x32xbf16>
  return %k0 : tensor<4x128x32xbf16>
}

// -----

// Tests that an attention kernel whose softmax scales its scores by other than a power of two
// evacuates them as they are rounded (the scaling would not commute with the rounding): a
// copy, the max of the rounded scores, and the exp's bias -0.2 max as one [128, 1] multiply,
// the exp applying the scale.
// CHECK-LABEL: func.func @attention_scale_not_a_power_of_two
// CHECK-NOT: "nisa.tensor_scalar_reduce"
// CHECK: "nisa.matmul"(%[[S:[0-9]+]],
// CHECK: "nisa.tensor_copy"(%[[X:[0-9]+]], %[[S]])
// CHECK: "nisa.tensor_reduce"(%[[M:[0-9]+]], %[[X]]) {{{.*}}op = "max"
// CHECK: "nisa.tensor_scalar"(%[[B:[0-9]+]], %[[M]]) {{{.*}}imm0 = -2.000000e-01 : f32{{.*}}op0 = "mul"
// CHECK: "nisa.activation"(%{{[0-9]+}}, %[[X]], %[[B]], %{{[0-9]+}}) {{.*}}func = "exp"{{.*}}scale = 2.000000e-01 : f32}
func.func @attention_scale_not_a_power_of_two(%q: tensor<1x128x32xbf16>, %kt: tensor<1x32x128xbf16>, %v: tensor<1x128x32xbf16>) -> tensor<1x128x32xbf16> {
  %k = "trn.kernel"() ({
    %s = "trn.matmul"(%q, %kt) : (tensor<1x128x32xbf16>, tensor<1x32x128xbf16>) -> tensor<1x128x128xf32>
    %sb = "trn.convert"(%s) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
    %x = "trn.tensor_scalar"(%sb) {op = "mul", reverse = false, scalar = 2.000000e-01 : f32} : (tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %m = "trn.reduce"(%x) {op = "max", dimensions = array<i64: 2>} : (tensor<1x128x128xf32>) -> tensor<1x128xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 2>} : (tensor<1x128xf32>) -> tensor<1x128x128xf32>
    %d = "trn.tensor_tensor"(%x, %mb) {op = "sub"} : (tensor<1x128x128xf32>, tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
    %e = "trn.activation"(%d) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
    %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 2>} : (tensor<1x128x128xf32>) -> tensor<1x128xf32>
    %zb = "trn.broadcast"(%z) {dimensions = array<i64: 2>} : (tensor<1x128xf32>) -> tensor<1x128x128xf32>
    %p = "trn.tensor_tensor"(%e, %zb) {op = "div"} : (tensor<1x128x128xf32>, tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
    %pb = "trn.convert"(%p) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
    %o = "trn.matmul"(%pb, %v) : (tensor<1x128x128xbf16>, tensor<1x128x32xbf16>) -> tensor<1x128x32xf32>
    %ob = "trn.convert"(%o) : (tensor<1x128x32xf32>) -> tensor<1x128x32xbf16>
    "trn.yield"(%ob) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x32xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x32xbf16>
  return %k : tensor<1x128x32xbf16>
}

// -----

// Tests that an elementwise kernel over a permuted view (heads merged back: [B, H, S, D] read
// as [B, S, H, D]) tiles S on partitions and walks H and D along the free axis (a 3-D DMA
// pattern), instead of putting the 4 heads on partitions and moving 64-element rows: each
// tile's store is one contiguous run per partition and there are 4 tiles, not 512.
// CHECK-LABEL: func.func @heads_merged
// CHECK: "nisa.dma"(%[[T:.*]], %arg0) {aps = [array<i64: 0, 256, 64, 1, 256>, array<i64: 0, 64, 64, 16384, 4, 1, 64>]
// CHECK: "nisa.activation"(%[[E:.*]], %[[T]]) {aps = [array<i64: 0, 256, 128, 1, 256>, array<i64: 0, 256, 128, 1, 256>]
// CHECK: "nisa.dma"(%arg1, %[[E]]) {aps = [array<i64: 0, 256, 64, 64, 4, 1, 64>, array<i64: 0, 256, 64, 1, 256>]
// CHECK-COUNT-3: "nisa.activation"
// CHECK-NOT: "nisa.activation"
// CHECK: return
func.func @heads_merged(%x: tensor<2x4x256x64xbf16>) -> tensor<2x256x4x64xbf16> {
  %v = "trn.transpose"(%x) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x4x256x64xbf16>) -> tensor<2x256x4x64xbf16>
  %e = "trn.activation"(%v) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<2x256x4x64xbf16>) -> tensor<2x256x4x64xbf16>
  return %e : tensor<2x256x4x64xbf16>
}

// -----

// Tests that a kernel whose reshape is returned writes that output buffer itself (the same
// bytes: no copy after it), and that a returned transpose of it is copied after the kernel
// that follows (which reads it: placed before, the copy's tiles take memory that kernel's
// reuse), not after the last one.
// CHECK-LABEL: func.func @returned_views
// CHECK-SAME: (%[[X:.*]]: memref<128x64xf32, "hbm">, %[[R:.*]]: memref<2x64x64xf32, "hbm">, %[[T:.*]]: memref<64x128xf32, "hbm">, %[[E:.*]]: memref<128x64xf32, "hbm">, %[[F:.*]]: memref<128x64xf32, "hbm">)
// CHECK: "nisa.activation"{{.*}}func = "relu"
// CHECK: "nisa.dma"(%[[R]], %{{.*}})
// CHECK-NOT: "nisa.dma"(%[[T]]
// CHECK: "nisa.activation"{{.*}}func = "exp"
// CHECK: "nisa.dma"(%[[E]], %{{.*}})
// CHECK-NOT: "nisa.activation"
// CHECK: "nisa.dma"(%[[T]], %{{.*}})
// CHECK: "nisa.activation"{{.*}}func = "tanh"
// CHECK: "nisa.dma"(%[[F]], %{{.*}})
// CHECK-NOT: "nisa.dma"(%[[R]]
// CHECK-NOT: "nisa.dma"(%[[T]]
// CHECK: return
func.func @returned_views(%x: tensor<128x64xf32>) -> (tensor<2x64x64xf32>, tensor<64x128xf32>, tensor<128x64xf32>, tensor<128x64xf32>) {
  %a = "trn.kernel"() ({
    %r = "trn.activation"(%x) {func = "relu", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x64xf32>) -> tensor<128x64xf32>
    "trn.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x64xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x64xf32>
  %e = "trn.kernel"() ({
    %s = "trn.activation"(%a) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x64xf32>) -> tensor<128x64xf32>
    "trn.yield"(%s) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x64xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x64xf32>
  %f = "trn.kernel"() ({
    %u = "trn.activation"(%e) {func = "tanh", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x64xf32>) -> tensor<128x64xf32>
    "trn.yield"(%u) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x64xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x64xf32>
  %v = "trn.reshape"(%a) : (tensor<128x64xf32>) -> tensor<2x64x64xf32>
  %t = "trn.transpose"(%a) {permutation = array<i64: 1, 0>} : (tensor<128x64xf32>) -> tensor<64x128xf32>
  return %v, %t, %e, %f : tensor<2x64x64xf32>, tensor<64x128xf32>, tensor<128x64xf32>, tensor<128x64xf32>
}

// -----

// Tests that a matmul operand (K on partitions) is loaded a row panel of up to one moving tile
// (512 columns) at a time, here [128, 256] in runs of 512 B (split over two queues by
// partitions), and each output tile's matmul reads its columns from that panel, instead of one
// [128, 128] load in runs of 256 B per output tile.
// CHECK-LABEL: func.func @whole_rows
// CHECK: "nisa.dma"(%[[PANEL:.*]], %arg0) {aps = [array<i64: 0, 256, 64, 1, 256>, array<i64: 0, 256, 64, 1, 256>]
// CHECK-NEXT: "nisa.dma"(%[[PANEL]], %arg0) {aps = [array<i64: 16384, 256, 64, 1, 256>, array<i64: 16384, 256, 64, 1, 256>]
// CHECK: "nisa.matmul"({{.*}}, %[[PANEL]], {{.*}}aps = [{{.*}}, array<i64: 0, 256, 128, 1, 128>,
// CHECK: "nisa.matmul"({{.*}}, %[[PANEL]], {{.*}}aps = [{{.*}}, array<i64: 128, 256, 128, 1, 128>,
// CHECK-NOT: "nisa.dma"({{.*}}, %arg0)
func.func @whole_rows(%p: tensor<128x256xbf16>, %v: tensor<128x64xbf16>) -> tensor<256x64xbf16> {
  %0 = "trn.kernel"() ({
    %t = "trn.transpose"(%p) {permutation = array<i64: 1, 0>} : (tensor<128x256xbf16>) -> tensor<256x128xbf16>
    %m = "trn.matmul"(%t, %v) : (tensor<256x128xbf16>, tensor<128x64xbf16>) -> tensor<256x64xf32>
    %c = "trn.convert"(%m) : (tensor<256x64xf32>) -> tensor<256x64xbf16>
    "trn.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x64xbf16>) -> ()
  }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x64xbf16>
  return %0 : tensor<256x64xbf16>
}

// -----

// Tests that a row-wise kernel's fp32 sum goes to ACT, as an identity activation accumulating
// its results (its bf16 output unread), where DVE has more work already: here the second of
// the two products it sums (two cycles per fp32 element; POOL took the first).
// CHECK-LABEL: func.func @sum_on_act
// CHECK: "nisa.tensor_tensor"({{.*}}engine = "pool", op = "mul"
// CHECK: "nisa.tensor_tensor"(%[[T:[0-9]+]], %{{[0-9]+}}, %{{[0-9]+}}) {{.*}}engine = "dve", op = "mul"
// CHECK-NOT: "nisa.tensor_reduce"
// CHECK: "nisa.activation"(%{{[0-9]+}}, %[[T]], %{{[0-9]+}}) {{.*}}engine = "act", func = "identity", operandSegmentSizes = array<i32: 1, 1, 0, 0, 1>
// CHECK-NOT: "nisa.tensor_reduce"
// CHECK: return
func.func @sum_on_act(%g: tensor<128x256xf32>, %p: tensor<128x256xf32>) -> tensor<128x256xf32> {
  %0 = "trn.kernel"() ({
    %gp = "trn.tensor_tensor"(%g, %p) {op = "mul"} : (tensor<128x256xf32>, tensor<128x256xf32>) -> tensor<128x256xf32>
    %t = "trn.tensor_tensor"(%gp, %g) {op = "mul"} : (tensor<128x256xf32>, tensor<128x256xf32>) -> tensor<128x256xf32>
    %s = "trn.reduce"(%t) {op = "add", dimensions = array<i64: 1>} : (tensor<128x256xf32>) -> tensor<128xf32>
    %sb = "trn.broadcast"(%s) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x256xf32>
    %ps = "trn.tensor_tensor"(%p, %sb) {op = "mul"} : (tensor<128x256xf32>, tensor<128x256xf32>) -> tensor<128x256xf32>
    %d = "trn.tensor_tensor"(%t, %ps) {op = "sub"} : (tensor<128x256xf32>, tensor<128x256xf32>) -> tensor<128x256xf32>
    "trn.yield"(%d) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x256xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x256xf32>
  return %0 : tensor<128x256xf32>
}

// -----

// Tests that a kernel with two results stores both from the same tiles: the bias add's
// result (returned first) and the GELU of it (returned second), each evacuated once, with one
// matmul per tile.
// CHECK-LABEL: func.func @saved_linear_gelu
// CHECK-SAME: %[[SAVED:[^:]*]]: memref<64x128xf32, "hbm">, %[[ACT:[^:]*]]: memref<64x128xf32, "hbm">)
// CHECK-COUNT-1: "nisa.matmul"(%[[ACC:[^,]*]],
// CHECK-NOT: "nisa.matmul"
// CHECK: "nisa.tensor_tensor"(%[[Z:[^,]*]], %{{[^,]*}}, %[[ACC]]) {{.*}}op = "add"
// CHECK: "nisa.activation"(%[[G:[^,]*]], %[[Z]]) {{.*}}func = "gelu"
// CHECK-DAG: "nisa.dma"(%[[ACT]], %[[G]])
// CHECK-DAG: "nisa.dma"(%[[SAVED]], %[[Z]])
// CHECK: return
func.func @saved_linear_gelu(%w: tensor<128x128xf32>, %b: tensor<128xf32>, %x: tensor<64x128xf32>) -> (tensor<64x128xf32>, tensor<64x128xf32>) {
  %k:2 = "trn.kernel"() ({
    %t = "trn.transpose"(%w) {permutation = array<i64: 1, 0>} : (tensor<128x128xf32>) -> tensor<128x128xf32>
    %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<128xf32>) -> tensor<64x128xf32>
    %y = "trn.matmul"(%x, %t) : (tensor<64x128xf32>, tensor<128x128xf32>) -> tensor<64x128xf32>
    %z = "trn.tensor_tensor"(%bb, %y) {op = "add"} : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>
    %g = "trn.activation"(%z) {func = "gelu", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<64x128xf32>) -> tensor<64x128xf32>
    "trn.yield"(%g, %z) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<64x128xf32>, tensor<64x128xf32>) -> ()
  }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<64x128xf32>, tensor<64x128xf32>)
  return %k#1, %k#0 : tensor<64x128xf32>, tensor<64x128xf32>
}

// -----

// Tests that a matmul kernel yielding the sum over dim 0 of the tensor its left operand
// transposes (a Linear's weight and bias gradients) computes the sums on PE from the tiles the
// matmul loads: where the features are not whole 128-row tiles (192 here), a column of ones
// (set once) stationary against each loaded K-tile [128, 128 features] of dY, accumulating
// over K-tiles into one PSUM row per 128 features, stored in one contiguous run; dY is loaded
// once (two rows per partition, K-tile j the rows 2p + j).
// CHECK-LABEL: func.func @linear_backward
// CHECK-SAME: (%[[DY:[^:]*]]: memref<256x192xbf16, "hbm">, %{{[^:]*}}: memref<256x64xbf16, "hbm">, %{{[^:]*}}: memref<192x64xbf16, "hbm">, %[[DB:[^:]*]]: memref<192xbf16, "hbm">)
// CHECK: "nisa.memset"(%[[ONES:[^)]*]]) {{.*}}value = 1.000000e+00
// CHECK: "nisa.dma"(%[[DYT:[^,]*]], %[[DY]])
// CHECK: "nisa.matmul"(%[[S:[^,]*]], %[[ONES]], %[[DYT]]) {accumulate = false, {{.*}}array<i64: 0, 384, 128, 1, 128>]
// CHECK-NEXT: "nisa.matmul"(%[[S]], %[[ONES]], %[[DYT]]) {accumulate = true, {{.*}}array<i64: 192, 384, 128, 1, 128>]
// CHECK: "nisa.tensor_copy"(%[[SB:[^,]*]], %[[S]])
// CHECK-NEXT: "nisa.dma"(%[[DB]], %[[SB]]) {aps = [array<i64: 0, 128, 1, 1, 128>
// CHECK: "nisa.matmul"(%[[S2:[^,]*]], %[[ONES]], %[[DYT]]) {accumulate = false, {{.*}}array<i64: 128, 384, 128, 1, 64>]
// CHECK: "nisa.dma"(%[[DB]], %{{[^)]*}}) {aps = [array<i64: 128, 64, 1, 1, 64>
// CHECK-NOT: "nisa.dma"(%{{[^,]*}}, %[[DY]])
// CHECK: return
func.func @linear_backward(%dy: tensor<256x192xbf16>, %x: tensor<256x64xbf16>) -> (tensor<192x64xbf16>, tensor<192xbf16>) {
  %k:2 = "trn.kernel"() ({
    %t = "trn.transpose"(%dy) {permutation = array<i64: 1, 0>} : (tensor<256x192xbf16>) -> tensor<192x256xbf16>
    %w = "trn.matmul"(%t, %x) : (tensor<192x256xbf16>, tensor<256x64xbf16>) -> tensor<192x64xf32>
    %wc = "trn.convert"(%w) : (tensor<192x64xf32>) -> tensor<192x64xbf16>
    %b = "trn.reduce"(%dy) {op = "add", dimensions = array<i64: 0>} : (tensor<256x192xbf16>) -> tensor<192xbf16>
    "trn.yield"(%wc, %b) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<192x64xbf16>, tensor<192xbf16>) -> ()
  }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<192x64xbf16>, tensor<192xbf16>)
  return %k#0, %k#1 : tensor<192x64xbf16>, tensor<192xbf16>
}

// -----

// Tests that where the features are whole 128-row tiles, the sums of dY's columns are one more
// column of the product: each K-tile of X gets a copy with a column of ones after its 64
// columns (made once, kept for both feature tiles), so each feature tile's PSUM tile
// [128, 65] ends in its sums, gathered as a column of one fp32 tile [128, 2] and stored,
// rounded once and turned on PE, as two rows of 128.
// CHECK-LABEL: func.func @linear_backward_ones_column
// CHECK: %[[SUMS:.*]] = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x2xf32, "sbuf">
// CHECK: %[[ACC:.*]] = "nisa.alloc"() {memory = "psum"} : () -> memref<128x65xf32, "psum">
// CHECK: %[[X0:.*]] = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x65xbf16, "sbuf">
// CHECK-NEXT: "nisa.tensor_copy"(%[[X0]]
// CHECK-NEXT: "nisa.memset"(%[[X0]]) {aps = [array<i64: 64, 65, 128, 1, 1>]{{.*}}value = 1.000000e+00
// CHECK-NEXT: "nisa.matmul"(%[[ACC]], %{{.*}}, %[[X0]]) {accumulate = false
// CHECK: "nisa.tensor_copy"(%[[SUMS]], %[[ACC]]) {aps = [array<i64: 0, 2, 128, 1, 1>, array<i64: 64, 65, 128, 1, 1>]
// CHECK-NOT: "nisa.memset"
// CHECK: "nisa.matmul"(%{{.*}}, %{{.*}}, %[[X0]]) {accumulate = false
// CHECK: "nisa.tensor_copy"(%[[SUMS]], %{{.*}}) {aps = [array<i64: 1, 2, 128, 1, 1>, array<i64: 64, 65, 128, 1, 1>]
// CHECK: "nisa.transpose"(%{{.*}}, %{{.*}}) {{.*}} : (memref<2x128xf32, "psum">, memref<128x2xbf16, "sbuf">)
// CHECK: "nisa.dma"(%arg3, %{{.*}}) {aps = [array<i64: 0, 128, 2, 1, 128>
func.func @linear_backward_ones_column(%dy: tensor<256x256xbf16>, %x: tensor<256x64xbf16>) -> (tensor<256x64xbf16>, tensor<256xbf16>) {
  %k:2 = "trn.kernel"() ({
    %t = "trn.transpose"(%dy) {permutation = array<i64: 1, 0>} : (tensor<256x256xbf16>) -> tensor<256x256xbf16>
    %w = "trn.matmul"(%t, %x) : (tensor<256x256xbf16>, tensor<256x64xbf16>) -> tensor<256x64xf32>
    %wc = "trn.convert"(%w) : (tensor<256x64xf32>) -> tensor<256x64xbf16>
    %b = "trn.reduce"(%dy) {op = "add", dimensions = array<i64: 0>} : (tensor<256x256xbf16>) -> tensor<256xbf16>
    "trn.yield"(%wc, %b) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<256x64xbf16>, tensor<256xbf16>) -> ()
  }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<256x64xbf16>, tensor<256xbf16>)
  return %k#0, %k#1 : tensor<256x64xbf16>, tensor<256xbf16>
}

// -----

// Tests that two operands stored with K along their rows, one of short rows (A^T [512, 64]
// bf16: 128 B), are loaded four rows per partition: partition p holds rows 4p..4p+3 of each
// (256 and 2048 contiguous elements), and K-tile j is rows 4p + j of both, columns
// [64 j, 64 j + 64) of A^T's tile and [512 j, 512 j + 512) of B's.
// CHECK-LABEL: func.func @interleaved_k
// CHECK-SAME: (%[[AT:[^:]*]]: memref<512x64xbf16, "hbm">, %[[B:[^:]*]]: memref<512x512xbf16, "hbm">
// CHECK: "nisa.dma"(%[[AG:[^,]*]], %[[AT]]) {aps = [array<i64: 0, 256, 64, 1, 256>, array<i64: 0, 256, 64, 64, 4, 1, 64>]
// CHECK: "nisa.dma"(%[[BG:[^,]*]], %[[B]]) {aps = [array<i64: 0, 2048, 8, 1, 2048>, array<i64: 0, 2048, 8, 512, 4, 1, 512>]
// CHECK: "nisa.matmul"(%[[ACC:[^,]*]], %[[AG]], %[[BG]]) {accumulate = false, aps = [array<i64: 0, 512, 64, 1, 512>, array<i64: 0, 256, 128, 1, 64>, array<i64: 0, 2048, 128, 1, 512>]
// CHECK-NEXT: "nisa.matmul"(%[[ACC]], %[[AG]], %[[BG]]) {accumulate = true, aps = [array<i64: 0, 512, 64, 1, 512>, array<i64: 64, 256, 128, 1, 64>, array<i64: 512, 2048, 128, 1, 512>]
// CHECK-NEXT: "nisa.matmul"(%[[ACC]], %[[AG]], %[[BG]]) {accumulate = true, aps = [array<i64: 0, 512, 64, 1, 512>, array<i64: 128, 256, 128, 1, 64>, array<i64: 1024, 2048, 128, 1, 512>]
// CHECK-NEXT: "nisa.matmul"(%[[ACC]], %[[AG]], %[[BG]]) {accumulate = true, aps = [array<i64: 0, 512, 64, 1, 512>, array<i64: 192, 256, 128, 1, 64>, array<i64: 1536, 2048, 128, 1, 512>]
// CHECK-NOT: "nisa.matmul"
// CHECK: return
func.func @interleaved_k(%at: tensor<512x64xbf16>, %b: tensor<512x512xbf16>) -> tensor<64x512xbf16> {
  %k = "trn.kernel"() ({
    %a = "trn.transpose"(%at) {permutation = array<i64: 1, 0>} : (tensor<512x64xbf16>) -> tensor<64x512xbf16>
    %y = "trn.matmul"(%a, %b) : (tensor<64x512xbf16>, tensor<512x512xbf16>) -> tensor<64x512xf32>
    %c = "trn.convert"(%y) : (tensor<64x512xf32>) -> tensor<64x512xbf16>
    "trn.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<64x512xbf16>) -> ()
  }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<64x512xbf16>
  return %k : tensor<64x512xbf16>
}

// -----

// Tests the lowering of a weight_gradient kernel (a first Linear's weight and bias gradients
// computing the gradient T they read): per 128-token tile, T's tile accumulates in PSUM, the
// epilogue (times GELU's derivative) evacuates it into SBUF, and that tile is at once the
// stationary operand of the weight gradient's two accumulators (hidden units 0..127 and
// 128..255 of its columns) against X's tile, and the moving one of the ones column summing
// it; the next token tile accumulates into the same three. T is never stored: no HBM
// scratch, and the only stores are W's and the sums'.
// CHECK-LABEL: func.func @first_linear_backward
// CHECK-SAME: %[[X:[^:]*]]: memref<384x64xf32, "hbm">, %[[W:[^:]*]]: memref<256x64xf32, "hbm">, %[[B:[^:]*]]: memref<256xf32, "hbm">)
// CHECK-NOT: memory = "hbm"
// CHECK: "nisa.memset"(%[[ONES:[^)]*]]) {{.*}}value = 1.000000e+00
// CHECK: "nisa.matmul"(%[[ACC:[^,]*]], {{.*}}) {accumulate = false
// CHECK: "nisa.activation"(%[[D:[^,]*]], {{.*}}func = "gelu_dx"
// CHECK: "nisa.tensor_tensor"(%[[T:[^,]*]], %[[ACC]], %[[D]]) {{.*}}op = "mul"
// CHECK: "nisa.dma"(%[[XT:[^,]*]], %[[X]])
// CHECK-NEXT: "nisa.matmul"(%[[W0:[^,]*]], %[[T]], %[[XT]]) {accumulate = false, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 256, 128, 1, 128>
// CHECK-NEXT: "nisa.matmul"(%[[W1:[^,]*]], %[[T]], %[[XT]]) {accumulate = false, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 128, 256, 128, 1, 128>
// CHECK-NEXT: "nisa.matmul"(%[[S:[^,]*]], %[[ONES]], %[[T]]) {accumulate = false
// CHECK: "nisa.matmul"(%[[W0]], %{{[^,]*}}, %{{[^)]*}}) {accumulate = true
// CHECK-NEXT: "nisa.matmul"(%[[W1]], %{{[^,]*}}, %{{[^)]*}}) {accumulate = true
// CHECK-NEXT: "nisa.matmul"(%[[S]], %[[ONES]], %{{[^)]*}}) {accumulate = true
// CHECK: "nisa.tensor_copy"(%[[WS:[^,]*]], %[[W0]])
// CHECK-NEXT: "nisa.dma"(%[[W]], %[[WS]])
// CHECK: "nisa.tensor_copy"(%[[SS:[^,]*]], %[[S]])
// CHECK-NEXT: "nisa.dma"(%[[B]], %[[SS]])
// CHECK-NOT: "nisa.dma"
// CHECK: return
func.func @first_linear_backward(%h: tensor<384x256xf32>, %dy: tensor<384x128xf32>, %w2: tensor<128x256xf32>, %x: tensor<384x64xf32>) -> (tensor<256x64xf32>, tensor<256xf32>) {
  %k:2 = "trn.kernel"() ({
    %d = "trn.activation"(%h) {bias = 0.000000e+00 : f32, func = "gelu_dx", scale = 1.000000e+00 : f32} : (tensor<384x256xf32>) -> tensor<384x256xf32>
    %g = "trn.matmul"(%dy, %w2) : (tensor<384x128xf32>, tensor<128x256xf32>) -> tensor<384x256xf32>
    %t = "trn.tensor_tensor"(%g, %d) {op = "mul"} : (tensor<384x256xf32>, tensor<384x256xf32>) -> tensor<384x256xf32>
    %tt = "trn.transpose"(%t) {permutation = array<i64: 1, 0>} : (tensor<384x256xf32>) -> tensor<256x384xf32>
    %w = "trn.matmul"(%tt, %x) : (tensor<256x384xf32>, tensor<384x64xf32>) -> tensor<256x64xf32>
    %b = "trn.reduce"(%t) {dimensions = array<i64: 0>, op = "add"} : (tensor<384x256xf32>) -> tensor<256xf32>
    "trn.yield"(%w, %b) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<256x64xf32>, tensor<256xf32>) -> ()
  }) {kind = "weight_gradient", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<256x64xf32>, tensor<256xf32>)
  return %k#0, %k#1 : tensor<256x64xf32>, tensor<256xf32>
}

// -----

// Tests that a row-wise kernel reads a loaded bf16 row that the graph widens to fp32 (a saved
// softmax in its backward) as loaded, with no copy into an fp32 tile: the engines widen
// their inputs exactly as they read them. Both products read the bf16 tile itself.
// CHECK-LABEL: func.func @softmax_backward_bf16_saved
// CHECK: "nisa.dma"(%[[P:[^,]*]], %arg0) {{.*}} : (memref<128x64xbf16, "sbuf">, memref<128x64xbf16, "hbm">)
// CHECK-NOT: "nisa.tensor_copy"
// CHECK: "nisa.tensor_tensor"(%[[GP:[^,]*]], %{{[^,]*}}, %[[P]]) {{.*}}op = "mul"
// CHECK: "nisa.activation"(%[[PS:[^,]*]], %[[P]], %{{[^)]*}})
// CHECK: "nisa.tensor_tensor"(%{{[^,]*}}, %[[GP]], %[[PS]]) {{.*}}op = "sub"
// CHECK-NOT: "nisa.tensor_copy"
// CHECK: return
func.func @softmax_backward_bf16_saved(%p: tensor<128x64xbf16>, %g: tensor<128x64xf32>) -> tensor<128x64xf32> {
  %k = "trn.kernel"() ({
    %pf = "trn.convert"(%p) : (tensor<128x64xbf16>) -> tensor<128x64xf32>
    %gp = "trn.tensor_tensor"(%g, %pf) {op = "mul"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
    %s = "trn.reduce"(%gp) {dimensions = array<i64: 1>, op = "add"} : (tensor<128x64xf32>) -> tensor<128xf32>
    %sb = "trn.broadcast"(%s) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x64xf32>
    %ps = "trn.tensor_tensor"(%pf, %sb) {op = "mul"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
    %d = "trn.tensor_tensor"(%gp, %ps) {op = "sub"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
    "trn.yield"(%d) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x64xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x64xf32>
  return %k : tensor<128x64xf32>
}

// -----

// Tests that an elementwise kernel reads a value broadcast along every free dim (a row's
// mean beside the row) as one column per partition: the subtraction is a tensor_scalar with
// that column as its per-partition operand (reversed: mean - x), widened once to fp32, not
// a spread copy of the column across the tile and a tensor_tensor.
// CHECK-LABEL: func.func @centre_rows
// CHECK: "nisa.dma"(%[[M:[^,]*]], %arg1) {{.*}} : (memref<128x1xbf16, "sbuf">, memref<256xbf16, "hbm">)
// CHECK-NOT: "nisa.tensor_tensor"
// CHECK: "nisa.tensor_copy"(%[[MF:[^,]*]], %[[M]]) {{.*}} : (memref<128x1xf32, "sbuf">, memref<128x1xbf16, "sbuf">)
// CHECK-NEXT: "nisa.tensor_scalar"(%{{[^,]*}}, %{{[^,]*}}, %[[MF]]) {{.*}}op0 = "sub", {{.*}}reverse0 = true
// CHECK-NOT: "nisa.tensor_tensor"
// CHECK: return
func.func @centre_rows(%x: tensor<256x64xf32>, %m: tensor<256xbf16>) -> tensor<256x64xf32> {
  %k = "trn.kernel"() ({
    %b = "trn.broadcast"(%m) {dimensions = array<i64: 1>} : (tensor<256xbf16>) -> tensor<256x64xbf16>
    %bf = "trn.convert"(%b) : (tensor<256x64xbf16>) -> tensor<256x64xf32>
    %d = "trn.tensor_tensor"(%bf, %x) {op = "sub"} : (tensor<256x64xf32>, tensor<256x64xf32>) -> tensor<256x64xf32>
    "trn.yield"(%d) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x64xf32>) -> ()
  }) {kind = "elementwise", free_tile = 64 : i64, resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x64xf32>
  return %k : tensor<256x64xf32>
}

// -----

// Tests that an attention kernel whose softmax adds a constant mask skips the keys that the
// mask hides from every row of a query tile (here keys 128..255, -inf in the whole [256]
// mask: a padding mask; a causal one hides the keys after each tile's last row): the scores
// matmul's moving operand is the 128 keys seen (of K^T staged whole, which query tiles of
// every width share), the row ops run on [128, 128] tiles (the mask read through its first
// 128 columns; the mask is 0 on all of them, so nothing is added), and P @ V takes one
// 128-key block: one transpose and one matmul, against the values' first 128 rows only.
// CHECK-LABEL: func.func @attention_masked_keys
// CHECK: "nisa.matmul"(%[[S:[0-9]+]], {{.*}}aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 64, 1, 128>, array<i64: 0, 256, 64, 1, 128>]{{.*}} : (memref<128x128xf32, "psum">
// CHECK-NOT: op = "add"
// CHECK: "nisa.activation"(%[[E:[0-9]+]], {{.*}}func = "exp"{{.*}} : (memref<128x128xbf16, "sbuf">
// CHECK: "nisa.transpose"(%{{[0-9]+}}, %[[E]])
// CHECK-NOT: "nisa.transpose"
// CHECK: "nisa.dma"(%{{[0-9]+}}, %arg2) {aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]
// CHECK: "nisa.matmul"({{.*}}accumulate = false
// CHECK-NOT: "nisa.matmul"
// CHECK-NOT: "nisa.transpose"
// CHECK: return
// With masked-keys=false, every key: 256-key scores and two P @ V blocks.
// NOMASK-LABEL: func.func @attention_masked_keys
// NOMASK: "nisa.matmul"({{.*}} : (memref<128x256xf32, "psum">
// NOMASK: "nisa.matmul"({{.*}}accumulate = false
// NOMASK: "nisa.matmul"({{.*}}accumulate = true
func.func @attention_masked_keys(%q: tensor<1x128x64xbf16>, %kt: tensor<1x64x256xbf16>, %v: tensor<1x256x64xbf16>) -> tensor<1x128x64xbf16> {
  %bias = arith.constant dense<"0x0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF"> : tensor<256xf32>
  %k = "trn.kernel"() ({
    %s = "trn.matmul"(%q, %kt) : (tensor<1x128x64xbf16>, tensor<1x64x256xbf16>) -> tensor<1x128x256xf32>
    %x = "trn.tensor_scalar"(%s) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %bb = "trn.broadcast"(%bias) {dimensions = array<i64: 0, 1>} : (tensor<256xf32>) -> tensor<1x128x256xf32>
    %y = "trn.tensor_tensor"(%x, %bb) {op = "add"} : (tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %m = "trn.reduce"(%y) {op = "max", dimensions = array<i64: 2>} : (tensor<1x128x256xf32>) -> tensor<1x128xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 2>} : (tensor<1x128xf32>) -> tensor<1x128x256xf32>
    %d = "trn.tensor_tensor"(%y, %mb) {op = "sub"} : (tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %e = "trn.activation"(%d) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 2>} : (tensor<1x128x256xf32>) -> tensor<1x128xf32>
    %zb = "trn.broadcast"(%z) {dimensions = array<i64: 2>} : (tensor<1x128xf32>) -> tensor<1x128x256xf32>
    %p = "trn.tensor_tensor"(%e, %zb) {op = "div"} : (tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %pb = "trn.convert"(%p) : (tensor<1x128x256xf32>) -> tensor<1x128x256xbf16>
    %o = "trn.matmul"(%pb, %v) : (tensor<1x128x256xbf16>, tensor<1x256x64xbf16>) -> tensor<1x128x64xf32>
    %ob = "trn.convert"(%o) : (tensor<1x128x64xf32>) -> tensor<1x128x64xbf16>
    "trn.yield"(%ob) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x64xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x64xbf16>
  return %k : tensor<1x128x64xbf16>
}

// -----

// Tests that a constant mask of 0 and -inf is added before the scores' scaling (c s + m is
// c (s + m) exactly for c > 0), only on the columns where it is not 0, in place in PSUM:
// here keys 100..127 of 256. The scaling then happens in the max's pass, which overwrites
// the masked scores with c (s + m) and yields -max, the exp's bias: no pass of its own over
// the scores, no [P, 1] op between the max and the exp.
// CHECK-LABEL: func.func @attention_mask_added_where_nonzero
// CHECK: "nisa.matmul"(%[[S:[0-9]+]], {{.*}} : (memref<128x256xf32, "psum">
// CHECK-NOT: func = "identity"
// CHECK: "nisa.tensor_tensor"(%[[S]], %[[S]], %{{[0-9]+}}) {aps = [array<i64: 100, 256, 128, 1, 28>, array<i64: 100, 256, 128, 1, 28>, array<i64: 100, 256, 128, 1, 28>]{{.*}}op = "add"
// CHECK: "nisa.tensor_scalar_reduce"(%[[S]], %[[S]], %[[B:[0-9]+]]) {aps = [array<i64: 0, 256, 128, 1, 256>, array<i64: 0, 256, 128, 1, 256>, array<i64: 0, 1, 128, 1, 1>]{{.*}}imm0 = 1.250000e-01 : f32, negate = true, op0 = "mul"{{.*}}reduce_op = "max"
// CHECK-NOT: "nisa.tensor_scalar"(
// CHECK: "nisa.activation"(%{{[0-9]+}}, %[[S]], %[[B]], {{.*}}func = "exp"{{.*}}scale = 1.000000e+00 : f32
// With masked-keys=false, the scaled scores get the whole mask added.
// NOMASK-LABEL: func.func @attention_mask_added_where_nonzero
// NOMASK: "nisa.tensor_tensor"({{.*}}aps = [array<i64: 0, 256, 128, 1, 256>, array<i64: 0, 256, 128, 1, 256>, array<i64: 0, 256, 128, 1, 256>]{{.*}}op = "add"
// NOMASK: "nisa.activation"({{.*}}func = "exp"{{.*}}scale = 1.000000e+00 : f32
func.func @attention_mask_added_where_nonzero(%q: tensor<1x128x64xbf16>, %kt: tensor<1x64x256xbf16>, %v: tensor<1x256x64xbf16>) -> tensor<1x128x64xbf16> {
  %bias = arith.constant dense<"0x00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"> : tensor<256xf32>
  %k = "trn.kernel"() ({
    %s = "trn.matmul"(%q, %kt) : (tensor<1x128x64xbf16>, tensor<1x64x256xbf16>) -> tensor<1x128x256xf32>
    %x = "trn.tensor_scalar"(%s) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %bb = "trn.broadcast"(%bias) {dimensions = array<i64: 0, 1>} : (tensor<256xf32>) -> tensor<1x128x256xf32>
    %y = "trn.tensor_tensor"(%x, %bb) {op = "add"} : (tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %m = "trn.reduce"(%y) {op = "max", dimensions = array<i64: 2>} : (tensor<1x128x256xf32>) -> tensor<1x128xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 2>} : (tensor<1x128xf32>) -> tensor<1x128x256xf32>
    %d = "trn.tensor_tensor"(%y, %mb) {op = "sub"} : (tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %e = "trn.activation"(%d) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 2>} : (tensor<1x128x256xf32>) -> tensor<1x128xf32>
    %zb = "trn.broadcast"(%z) {dimensions = array<i64: 2>} : (tensor<1x128xf32>) -> tensor<1x128x256xf32>
    %p = "trn.tensor_tensor"(%e, %zb) {op = "div"} : (tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %pb = "trn.convert"(%p) : (tensor<1x128x256xf32>) -> tensor<1x128x256xbf16>
    %o = "trn.matmul"(%pb, %v) : (tensor<1x128x256xbf16>, tensor<1x256x64xbf16>) -> tensor<1x128x64xf32>
    %ob = "trn.convert"(%o) : (tensor<1x128x64xf32>) -> tensor<1x128x64xbf16>
    "trn.yield"(%ob) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x64xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x64xbf16>
  return %k : tensor<1x128x64xbf16>
}

// -----

// Tests that a safe softmax (PyTorch's zeroing of rows masked whole: a select on max == -inf)
// drops its guards where the constant mask lets every row of the query tile see a key: no
// clamp of the exp's bias to the largest float, and the sum divides the product as it is,
// not its max with the smallest normal float.
// CHECK-LABEL: func.func @attention_safe_softmax_rows_see_a_key
// CHECK: "nisa.tensor_scalar_reduce"
// CHECK-NOT: "nisa.tensor_scalar"(
// CHECK: "nisa.activation"({{.*}}func = "exp"
// CHECK-NOT: op0 = "max"
// CHECK: "nisa.tensor_scalar"({{.*}}op0 = "div"
// With masked-keys=false, both guards.
// NOMASK-LABEL: func.func @attention_safe_softmax_rows_see_a_key
// NOMASK: "nisa.tensor_scalar"({{.*}}imm1 = 3.40282347E+38 : f32, op0 = "mul", op1 = "min"
// NOMASK: "nisa.activation"({{.*}}func = "exp"
// NOMASK: "nisa.tensor_scalar"({{.*}}imm0 = 1.17549435E-38 : f32{{.*}}op0 = "max"
// NOMASK: "nisa.tensor_scalar"({{.*}}op0 = "div"
func.func @attention_safe_softmax_rows_see_a_key(%q: tensor<1x128x64xbf16>, %kt: tensor<1x64x256xbf16>, %v: tensor<1x256x64xbf16>) -> tensor<1x128x64xbf16> {
  %bias = arith.constant dense<"0x00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"> : tensor<256xf32>
  %zero = arith.constant dense<0.000000e+00> : tensor<1x128x256xf32>
  %k = "trn.kernel"() ({
    %s = "trn.matmul"(%q, %kt) : (tensor<1x128x64xbf16>, tensor<1x64x256xbf16>) -> tensor<1x128x256xf32>
    %x = "trn.tensor_scalar"(%s) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %bb = "trn.broadcast"(%bias) {dimensions = array<i64: 0, 1>} : (tensor<256xf32>) -> tensor<1x128x256xf32>
    %y = "trn.tensor_tensor"(%x, %bb) {op = "add"} : (tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %m = "trn.reduce"(%y) {op = "max", dimensions = array<i64: 2>} : (tensor<1x128x256xf32>) -> tensor<1x128xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 2>} : (tensor<1x128xf32>) -> tensor<1x128x256xf32>
    %d = "trn.tensor_tensor"(%y, %mb) {op = "sub"} : (tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %e = "trn.activation"(%d) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 2>} : (tensor<1x128x256xf32>) -> tensor<1x128xf32>
    %zb = "trn.broadcast"(%z) {dimensions = array<i64: 2>} : (tensor<1x128xf32>) -> tensor<1x128x256xf32>
    %q0 = "trn.tensor_tensor"(%e, %zb) {op = "div"} : (tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %c = "trn.tensor_scalar"(%m) {op = "eq", reverse = false, scalar = 0xFF800000 : f32} : (tensor<1x128xf32>) -> tensor<1x128xi1>
    %cb = "trn.broadcast"(%c) {dimensions = array<i64: 2>} : (tensor<1x128xi1>) -> tensor<1x128x256xi1>
    %p = "trn.select"(%cb, %zero, %q0) : (tensor<1x128x256xi1>, tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %pb = "trn.convert"(%p) : (tensor<1x128x256xf32>) -> tensor<1x128x256xbf16>
    %o = "trn.matmul"(%pb, %v) : (tensor<1x128x256xbf16>, tensor<1x256x64xbf16>) -> tensor<1x128x64xf32>
    %ob = "trn.convert"(%o) : (tensor<1x128x64xf32>) -> tensor<1x128x64xbf16>
    "trn.yield"(%ob) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x64xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x64xbf16>
  return %k : tensor<1x128x64xbf16>
}

// -----

// Tests that the keys stay whole where one row sees the last key (the same mask with its
// last key 0): 256-key scores, and P @ V over two 128-key blocks.
// CHECK-LABEL: func.func @attention_last_key_seen
// CHECK: "nisa.matmul"({{.*}} : (memref<128x256xf32, "psum">
// CHECK: "nisa.transpose"
// CHECK: "nisa.transpose"
// CHECK: "nisa.matmul"({{.*}}accumulate = false
// CHECK: "nisa.matmul"({{.*}}accumulate = true
func.func @attention_last_key_seen(%q: tensor<1x128x64xbf16>, %kt: tensor<1x64x256xbf16>, %v: tensor<1x256x64xbf16>) -> tensor<1x128x64xbf16> {
  %bias = arith.constant dense<"0x0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF00000000"> : tensor<256xf32>
  %k = "trn.kernel"() ({
    %s = "trn.matmul"(%q, %kt) : (tensor<1x128x64xbf16>, tensor<1x64x256xbf16>) -> tensor<1x128x256xf32>
    %x = "trn.tensor_scalar"(%s) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %bb = "trn.broadcast"(%bias) {dimensions = array<i64: 0, 1>} : (tensor<256xf32>) -> tensor<1x128x256xf32>
    %y = "trn.tensor_tensor"(%x, %bb) {op = "add"} : (tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %m = "trn.reduce"(%y) {op = "max", dimensions = array<i64: 2>} : (tensor<1x128x256xf32>) -> tensor<1x128xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 2>} : (tensor<1x128xf32>) -> tensor<1x128x256xf32>
    %d = "trn.tensor_tensor"(%y, %mb) {op = "sub"} : (tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %e = "trn.activation"(%d) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 2>} : (tensor<1x128x256xf32>) -> tensor<1x128xf32>
    %zb = "trn.broadcast"(%z) {dimensions = array<i64: 2>} : (tensor<1x128xf32>) -> tensor<1x128x256xf32>
    %p = "trn.tensor_tensor"(%e, %zb) {op = "div"} : (tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %pb = "trn.convert"(%p) : (tensor<1x128x256xf32>) -> tensor<1x128x256xbf16>
    %o = "trn.matmul"(%pb, %v) : (tensor<1x128x256xbf16>, tensor<1x256x64xbf16>) -> tensor<1x128x64xf32>
    %ob = "trn.convert"(%o) : (tensor<1x128x64xf32>) -> tensor<1x128x64xbf16>
    "trn.yield"(%ob) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x64xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x64xbf16>
  return %k : tensor<1x128x64xbf16>
}

// -----

// Tests that the keys stay whole where the row part is not a softmax the analysis knows
// (e * sum instead of e / sum; constant_mask_hooks proves softmax's ops only): 256-key scores.
// CHECK-LABEL: func.func @attention_masked_not_softmax
// CHECK: "nisa.matmul"({{.*}} : (memref<128x256xf32, "psum">
func.func @attention_masked_not_softmax(%q: tensor<1x128x64xbf16>, %kt: tensor<1x64x256xbf16>, %v: tensor<1x256x64xbf16>) -> tensor<1x128x64xbf16> {
  %bias = arith.constant dense<"0x0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF000080FF"> : tensor<256xf32>
  %k = "trn.kernel"() ({
    %s = "trn.matmul"(%q, %kt) : (tensor<1x128x64xbf16>, tensor<1x64x256xbf16>) -> tensor<1x128x256xf32>
    %x = "trn.tensor_scalar"(%s) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %bb = "trn.broadcast"(%bias) {dimensions = array<i64: 0, 1>} : (tensor<256xf32>) -> tensor<1x128x256xf32>
    %y = "trn.tensor_tensor"(%x, %bb) {op = "add"} : (tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %m = "trn.reduce"(%y) {op = "max", dimensions = array<i64: 2>} : (tensor<1x128x256xf32>) -> tensor<1x128xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 2>} : (tensor<1x128xf32>) -> tensor<1x128x256xf32>
    %d = "trn.tensor_tensor"(%y, %mb) {op = "sub"} : (tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %e = "trn.activation"(%d) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 2>} : (tensor<1x128x256xf32>) -> tensor<1x128xf32>
    %zb = "trn.broadcast"(%z) {dimensions = array<i64: 2>} : (tensor<1x128xf32>) -> tensor<1x128x256xf32>
    %p = "trn.tensor_tensor"(%e, %zb) {op = "mul"} : (tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %pb = "trn.convert"(%p) : (tensor<1x128x256xf32>) -> tensor<1x128x256xbf16>
    %o = "trn.matmul"(%pb, %v) : (tensor<1x128x256xbf16>, tensor<1x256x64xbf16>) -> tensor<1x128x64xf32>
    %ob = "trn.convert"(%o) : (tensor<1x128x64xf32>) -> tensor<1x128x64xbf16>
    "trn.yield"(%ob) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x64xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x64xbf16>
  return %k : tensor<1x128x64xbf16>
}

// -----

// Tests the same skipping where a bool mask selects -inf for the hidden keys (as
// scaled_dot_product_attention's is_causal does once the frontend folds its mask).
// CHECK-LABEL: func.func @attention_masked_keys_select
// CHECK: "nisa.matmul"({{.*}} : (memref<128x128xf32, "psum">
// CHECK: "nisa.transpose"(%{{[0-9]+}}, %{{[0-9]+}}) {{.*}} : (memref<128x128xf32, "psum">, memref<128x128xbf16, "sbuf">)
// CHECK-NOT: "nisa.transpose"
// CHECK: "nisa.matmul"({{.*}}accumulate = false
// CHECK-NOT: "nisa.matmul"
// CHECK: return
func.func @attention_masked_keys_select(%q: tensor<1x128x64xbf16>, %kt: tensor<1x64x256xbf16>, %v: tensor<1x256x64xbf16>) -> tensor<1x128x64xbf16> {
  %hidden = arith.constant dense<"0x00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101"> : tensor<256xi1>
  %ninf = arith.constant dense<0xFF800000> : tensor<f32>
  %k = "trn.kernel"() ({
    %s = "trn.matmul"(%q, %kt) : (tensor<1x128x64xbf16>, tensor<1x64x256xbf16>) -> tensor<1x128x256xf32>
    %x = "trn.tensor_scalar"(%s) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %hb = "trn.broadcast"(%hidden) {dimensions = array<i64: 0, 1>} : (tensor<256xi1>) -> tensor<1x128x256xi1>
    %nb = "trn.broadcast"(%ninf) {dimensions = array<i64: 0, 1, 2>} : (tensor<f32>) -> tensor<1x128x256xf32>
    %y = "trn.select"(%hb, %nb, %x) : (tensor<1x128x256xi1>, tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %m = "trn.reduce"(%y) {op = "max", dimensions = array<i64: 2>} : (tensor<1x128x256xf32>) -> tensor<1x128xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 2>} : (tensor<1x128xf32>) -> tensor<1x128x256xf32>
    %d = "trn.tensor_tensor"(%y, %mb) {op = "sub"} : (tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %e = "trn.activation"(%d) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 2>} : (tensor<1x128x256xf32>) -> tensor<1x128xf32>
    %zb = "trn.broadcast"(%z) {dimensions = array<i64: 2>} : (tensor<1x128xf32>) -> tensor<1x128x256xf32>
    %p = "trn.tensor_tensor"(%e, %zb) {op = "div"} : (tensor<1x128x256xf32>, tensor<1x128x256xf32>) -> tensor<1x128x256xf32>
    %pb = "trn.convert"(%p) : (tensor<1x128x256xf32>) -> tensor<1x128x256xbf16>
    %o = "trn.matmul"(%pb, %v) : (tensor<1x128x256xbf16>, tensor<1x256x64xbf16>) -> tensor<1x128x64xf32>
    %ob = "trn.convert"(%o) : (tensor<1x128x64xf32>) -> tensor<1x128x64xbf16>
    "trn.yield"(%ob) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x64xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x64xbf16>
  return %k : tensor<1x128x64xbf16>
}

// -----

// Tests that an attention kernel's engine choices count only a quarter of the work earlier
// kernels gave each engine (ATTENTION_CARRY_OVER): after an exp over [128, 1024], all on ACT,
// the full running totals would put every copy of the attention on DVE; discounted, the
// kernel balances its own work, and the second batch's copies out of PSUM (its Q^T staging,
// its P^T evacuation) go to ACT.
// CHECK-LABEL: func.func @attention_balances_its_own_work
// CHECK: "nisa.activation"({{.*}}func = "exp"{{.*}} : (memref<128x1024xf32, "sbuf">
// CHECK: "nisa.tensor_copy"({{.*}}engine = "dve"{{.*}} : (memref<32x128xbf16, "sbuf">, memref<32x128xf32, "psum">)
// CHECK: "nisa.tensor_copy"({{.*}}engine = "dve"{{.*}} : (memref<128x128xbf16, "sbuf">, memref<128x128xf32, "psum">)
// CHECK: "nisa.tensor_copy"({{.*}}engine = "act"{{.*}} : (memref<32x128xbf16, "sbuf">, memref<32x128xf32, "psum">)
// CHECK: "nisa.tensor_copy"({{.*}}engine = "act"{{.*}} : (memref<128x128xbf16, "sbuf">, memref<128x128xf32, "psum">)
func.func @attention_balances_its_own_work(%a: tensor<128x1024xf32>, %q: tensor<2x128x32xbf16>, %kt: tensor<2x32x128xbf16>, %v: tensor<2x128x32xbf16>) -> (tensor<128x1024xf32>, tensor<2x128x32xbf16>) {
  %k0 = "trn.kernel"() ({
    %e0 = "trn.activation"(%a) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<128x1024xf32>) -> tensor<128x1024xf32>
    "trn.yield"(%e0) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x1024xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x1024xf32>
  %k = "trn.kernel"() ({
    %s = "trn.matmul"(%q, %kt) : (tensor<2x128x32xbf16>, tensor<2x32x128xbf16>) -> tensor<2x128x128xf32>
    %sb = "trn.convert"(%s) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    %x = "trn.tensor_scalar"(%sb) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<2x128x128xbf16>) -> tensor<2x128x128xf32>
    %m = "trn.reduce"(%x) {op = "max", dimensions = array<i64: 2>} : (tensor<2x128x128xf32>) -> tensor<2x128xf32>
    %mb = "trn.broadcast"(%m) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x128xf32>
    %d = "trn.tensor_tensor"(%x, %mb) {op = "sub"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %e = "trn.activation"(%d) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 2>} : (tensor<2x128x128xf32>) -> tensor<2x128xf32>
    %zb = "trn.broadcast"(%z) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x128xf32>
    %p = "trn.tensor_tensor"(%e, %zb) {op = "div"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %pb = "trn.convert"(%p) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    %o = "trn.matmul"(%pb, %v) : (tensor<2x128x128xbf16>, tensor<2x128x32xbf16>) -> tensor<2x128x32xf32>
    %ob = "trn.convert"(%o) : (tensor<2x128x32xf32>) -> tensor<2x128x32xbf16>
    "trn.yield"(%ob) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2x128x32xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x32xbf16>
  return %k0, %k : tensor<128x1024xf32>, tensor<2x128x32xbf16>
}

// -----

// Tests that a transposed operand of short rows lying one after another ([512, 64] bf16, a
// saved key read as K^T) is loaded four rows to a partition, [128, 256] (one 512 B run per
// partition, not four of 128 B), and that each 64-column quarter is PE-transposed into every
// fourth column of the staged K^T [64, 512], starting at column 0, 1, 2 and 3.
// CHECK-LABEL: func.func @short_rows_transposed
// CHECK: "nisa.dma"(%[[PANEL:[0-9]+]], %arg1) {{.*}} : (memref<128x256xbf16, "sbuf">, memref<512x64xbf16, "hbm">)
// CHECK: "nisa.transpose"(%{{[0-9]+}}, %[[PANEL]]) {aps = [array<i64: 0, 128, 64, 1, 128>, array<i64: 0, 256, 128, 1, 64>]
// CHECK-NEXT: "nisa.tensor_copy"(%[[KT:[0-9]+]], %{{[0-9]+}}) {aps = [array<i64: 0, 512, 64, 4, 128>
// CHECK: "nisa.transpose"(%{{[0-9]+}}, %[[PANEL]]) {aps = [array<i64: 0, 128, 64, 1, 128>, array<i64: 64, 256, 128, 1, 64>]
// CHECK-NEXT: "nisa.tensor_copy"(%[[KT]], %{{[0-9]+}}) {aps = [array<i64: 1, 512, 64, 4, 128>
// CHECK: "nisa.transpose"(%{{[0-9]+}}, %[[PANEL]]) {aps = [array<i64: 0, 128, 64, 1, 128>, array<i64: 192, 256, 128, 1, 64>]
// CHECK-NEXT: "nisa.tensor_copy"(%[[KT]], %{{[0-9]+}}) {aps = [array<i64: 3, 512, 64, 4, 128>
// CHECK: "nisa.matmul"(%{{[0-9]+}}, %{{[0-9]+}}, %[[KT]])
func.func @short_rows_transposed(%q: tensor<128x64xbf16>, %k: tensor<512x64xbf16>) -> tensor<128x512xbf16> {
  %0 = "trn.kernel"() ({
    %kt = "trn.transpose"(%k) {permutation = array<i64: 1, 0>} : (tensor<512x64xbf16>) -> tensor<64x512xbf16>
    %s = "trn.matmul"(%q, %kt) : (tensor<128x64xbf16>, tensor<64x512xbf16>) -> tensor<128x512xf32>
    %c = "trn.convert"(%s) : (tensor<128x512xf32>) -> tensor<128x512xbf16>
    "trn.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x512xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x512xbf16>
  return %0 : tensor<128x512xbf16>
}

// -----

// Tests that a copy between layouts that share only their innermost dim (heads split out of
// token rows: [S, H, D] stored as [H, S, D]) loads four tokens to a partition in the
// source's order (one 4 KiB run each), reorders them on an engine into the destination's
// order and stores runs of four tokens' 64 elements (512 B), where one layout for both sides
// (regroup-copies=false) stores 128 B runs.
// CHECK-LABEL: func.func @heads_split_copy
// CHECK: "nisa.dma"(%[[T:.*]], %arg0) {aps = [array<i64: 0, 2048, 8, 1, 2048>, array<i64: 0, 2048, 8, 512, 4, 64, 8, 1, 64>]
// CHECK: "nisa.tensor_copy"(%[[R:.*]], %[[T]]) {aps = [array<i64: 0, 2048, 128, 1, 2048>, array<i64: 0, 2048, 128, 64, 8, 512, 4, 1, 64>]
// CHECK: "nisa.dma"(%arg1, %[[R]]) {aps = [array<i64: 0, 256, 8, 32768, 8, 64, 4, 1, 64>, array<i64: 0, 2048, 8, 1, 2048>]
// NOREGROUP-LABEL: func.func @heads_split_copy
// NOREGROUP: "nisa.dma"(%{{.*}}, %arg0) {aps = [array<i64: 0, 512, 32, 1, 512>, array<i64: 0, 512, 32, 64, 8, 1, 64>]
// NOREGROUP: "nisa.dma"(%arg1, %{{.*}}) {aps = [array<i64: 0, 64, 32, 32768, 8, 1, 64>, array<i64: 0, 512, 32, 1, 512>]
// NOREGROUP-NOT: "nisa.tensor_copy"
// NOREGROUP: return
func.func @heads_split_copy(%x: tensor<512x8x64xbf16>) -> tensor<8x512x64xbf16> {
  %t = "trn.transpose"(%x) {permutation = array<i64: 1, 0, 2>} : (tensor<512x8x64xbf16>) -> tensor<8x512x64xbf16>
  return %t : tensor<8x512x64xbf16>
}

// -----

// Tests that kernel results whose only reader is an insert_slice into a concatenation built
// from trn.empty (per-head gradients gathered into one tensor) are computed straight into
// their slices of its buffer: each kernel stores at its slice's offset in the returned
// buffer, and no copy follows.
// CHECK-LABEL: func.func @concat_in_place
// CHECK: "nisa.activation"{{.*}}func = "relu"
// CHECK: "nisa.dma"(%arg2, %{{.*}}) {aps = [array<i64: 0, 64, 128, 1, 64>
// CHECK: "nisa.activation"{{.*}}func = "exp"
// CHECK: "nisa.dma"(%arg2, %{{.*}}) {aps = [array<i64: 8192, 64, 128, 1, 64>
// CHECK-NOT: "nisa.dma"
// CHECK: return
func.func @concat_in_place(%a: tensor<128x64xf32>, %b: tensor<128x64xf32>) -> tensor<2x128x64xf32> {
  %x = "trn.kernel"() ({
    %r = "trn.activation"(%a) {func = "relu", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x64xf32>) -> tensor<128x64xf32>
    "trn.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x64xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x64xf32>
  %y = "trn.kernel"() ({
    %r = "trn.activation"(%b) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x64xf32>) -> tensor<128x64xf32>
    "trn.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x64xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x64xf32>
  %rx = "trn.reshape"(%x) : (tensor<128x64xf32>) -> tensor<1x128x64xf32>
  %ry = "trn.reshape"(%y) : (tensor<128x64xf32>) -> tensor<1x128x64xf32>
  %e = "trn.empty"() : () -> tensor<2x128x64xf32>
  %c0 = "trn.insert_slice"(%e, %rx) {offsets = array<i64: 0, 0, 0>, strides = array<i64: 1, 1, 1>} : (tensor<2x128x64xf32>, tensor<1x128x64xf32>) -> tensor<2x128x64xf32>
  %c1 = "trn.insert_slice"(%c0, %ry) {offsets = array<i64: 1, 0, 0>, strides = array<i64: 1, 1, 1>} : (tensor<2x128x64xf32>, tensor<1x128x64xf32>) -> tensor<2x128x64xf32>
  return %c1 : tensor<2x128x64xf32>
}

// -----

// Tests that slices which overlap (the second overwrites half of the first) are not
// computed in place: each kernel stores to a buffer of its own and the inserts copy them into
// the result in program order.
// CHECK-LABEL: func.func @overlapping_slices_copied
// CHECK: "nisa.activation"{{.*}}func = "relu"
// CHECK-NOT: "nisa.dma"(%arg2
// CHECK: "nisa.activation"{{.*}}func = "exp"
// CHECK: "nisa.dma"(%arg2, %{{.*}}) {aps = [array<i64: 0, 64, 128, 1, 64>
// CHECK: "nisa.dma"(%arg2, %{{.*}}) {aps = [array<i64: 4096, 64, 128, 1, 64>
func.func @overlapping_slices_copied(%a: tensor<128x64xf32>, %b: tensor<128x64xf32>) -> tensor<192x64xf32> {
  %x = "trn.kernel"() ({
    %r = "trn.activation"(%a) {func = "relu", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x64xf32>) -> tensor<128x64xf32>
    "trn.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x64xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x64xf32>
  %y = "trn.kernel"() ({
    %r = "trn.activation"(%b) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x64xf32>) -> tensor<128x64xf32>
    "trn.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x64xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x64xf32>
  %e = "trn.empty"() : () -> tensor<192x64xf32>
  %c0 = "trn.insert_slice"(%e, %x) {offsets = array<i64: 0, 0>, strides = array<i64: 1, 1>} : (tensor<192x64xf32>, tensor<128x64xf32>) -> tensor<192x64xf32>
  %c1 = "trn.insert_slice"(%c0, %y) {offsets = array<i64: 64, 0>, strides = array<i64: 1, 1>} : (tensor<192x64xf32>, tensor<128x64xf32>) -> tensor<192x64xf32>
  return %c1 : tensor<192x64xf32>
}

// -----

// Tests that an attention kernel that also yields its probabilities (a training step saves
// them) stores each query block's probabilities, divided and rounded by the softmax, into
// the second output and turns that same tile around on PE for P @ V: no deferred division.
// The division of whole rows goes to POOL, which would finish it before DVE (busy with the
// scores' scaled max); without POOL sharing, to DVE.
// CHECK-LABEL: func.func @attention_saving_probabilities
// CHECK-SAME: %[[P:arg4]]: memref<2x128x128xbf16, "hbm">
// CHECK: "nisa.tensor_scalar"(%[[T:.*]], %{{.*}}, %{{.*}}) {{.*}}engine = "pool"{{.*}}op0 = "div"
// CHECK-NEXT: "nisa.dma"(%[[P]], %[[T]]) {aps = [array<i64: 0, 128, 128, 1, 128>
// CHECK: "nisa.transpose"(%{{.*}}, %[[T]])
// CHECK: "nisa.dma"(%[[P]], %{{.*}}) {aps = [array<i64: 16384, 128, 128, 1, 128>
// NOPOOL-LABEL: func.func @attention_saving_probabilities
// NOPOOL: "nisa.tensor_scalar"{{.*}}engine = "dve"{{.*}}op0 = "div"
func.func @attention_saving_probabilities(%arg0: tensor<2x128x32xbf16>, %arg1: tensor<2x32x128xbf16>, %arg2: tensor<2x128x32xbf16>) -> (tensor<2x128x32xbf16>, tensor<2x128x128xbf16>) {
  %0:2 = "trn.kernel"() ({
    %1 = "trn.matmul"(%arg0, %arg1) : (tensor<2x128x32xbf16>, tensor<2x32x128xbf16>) -> tensor<2x128x128xf32>
    %2 = "trn.convert"(%1) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    %3 = "trn.tensor_scalar"(%2) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<2x128x128xbf16>) -> tensor<2x128x128xf32>
    %4 = "trn.reduce"(%3) {dimensions = array<i64: 2>, op = "max"} : (tensor<2x128x128xf32>) -> tensor<2x128xf32>
    %5 = "trn.broadcast"(%4) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x128xf32>
    %6 = "trn.tensor_tensor"(%3, %5) {op = "sub"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %7 = "trn.activation"(%6) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %8 = "trn.reduce"(%7) {dimensions = array<i64: 2>, op = "add"} : (tensor<2x128x128xf32>) -> tensor<2x128xf32>
    %9 = "trn.broadcast"(%8) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x128xf32>
    %10 = "trn.tensor_tensor"(%7, %9) {op = "div"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %11 = "trn.convert"(%10) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    %12 = "trn.matmul"(%11, %arg2) : (tensor<2x128x128xbf16>, tensor<2x128x32xbf16>) -> tensor<2x128x32xf32>
    %13 = "trn.convert"(%12) : (tensor<2x128x32xf32>) -> tensor<2x128x32xbf16>
    "trn.yield"(%13, %11) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<2x128x32xbf16>, tensor<2x128x128xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<2x128x32xbf16>, tensor<2x128x128xbf16>)
  return %0#0, %0#1 : tensor<2x128x32xbf16>, tensor<2x128x128xbf16>
}

// -----

// Tests that an attention kernel whose third matmul contracts its rows over their row dim
// (dK^T = Q^T @ dS: trn-fuse's row contractions) accumulates that product over the query
// blocks of each batch index in one PSUM tile [32, 128] -- the first block's matmul starts
// it, the second's accumulates -- and stores it once per batch index, after the last block;
// the rows themselves are never stored.
// CHECK-LABEL: func.func @attention_with_row_contraction
// CHECK: "nisa.matmul"(%[[ACC:.*]], %{{.*}}, %{{.*}}) {accumulate = false, aps = [array<i64: 0, 128, 32, 1, 128>
// CHECK-NOT: "nisa.dma"(%arg4
// CHECK: "nisa.matmul"(%[[ACC]], %{{.*}}, %{{.*}}) {accumulate = true, aps = [array<i64: 0, 128, 32, 1, 128>
// CHECK: "nisa.dma"(%arg4, %{{.*}}) {aps = [array<i64: 0, 128, 32, 1, 128>
// CHECK: "nisa.dma"(%arg4, %{{.*}}) {aps = [array<i64: 4096, 128, 32, 1, 128>
func.func @attention_with_row_contraction(%arg0: tensor<2x256x32xbf16>, %arg1: tensor<2x32x128xbf16>, %arg2: tensor<2x128x32xbf16>, %arg3: tensor<2x32x256xbf16>) -> (tensor<2x32x128xbf16>, tensor<2x256x32xbf16>) {
  %0:2 = "trn.kernel"() ({
    %1 = "trn.matmul"(%arg0, %arg1) : (tensor<2x256x32xbf16>, tensor<2x32x128xbf16>) -> tensor<2x256x128xf32>
    %2 = "trn.convert"(%1) : (tensor<2x256x128xf32>) -> tensor<2x256x128xbf16>
    %3 = "trn.tensor_scalar"(%2) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<2x256x128xbf16>) -> tensor<2x256x128xf32>
    %4 = "trn.reduce"(%3) {dimensions = array<i64: 2>, op = "max"} : (tensor<2x256x128xf32>) -> tensor<2x256xf32>
    %5 = "trn.broadcast"(%4) {dimensions = array<i64: 2>} : (tensor<2x256xf32>) -> tensor<2x256x128xf32>
    %6 = "trn.tensor_tensor"(%3, %5) {op = "sub"} : (tensor<2x256x128xf32>, tensor<2x256x128xf32>) -> tensor<2x256x128xf32>
    %7 = "trn.activation"(%6) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<2x256x128xf32>) -> tensor<2x256x128xf32>
    %8 = "trn.reduce"(%7) {dimensions = array<i64: 2>, op = "add"} : (tensor<2x256x128xf32>) -> tensor<2x256xf32>
    %9 = "trn.broadcast"(%8) {dimensions = array<i64: 2>} : (tensor<2x256xf32>) -> tensor<2x256x128xf32>
    %10 = "trn.tensor_tensor"(%7, %9) {op = "div"} : (tensor<2x256x128xf32>, tensor<2x256x128xf32>) -> tensor<2x256x128xf32>
    %11 = "trn.convert"(%10) : (tensor<2x256x128xf32>) -> tensor<2x256x128xbf16>
    %12 = "trn.matmul"(%11, %arg2) : (tensor<2x256x128xbf16>, tensor<2x128x32xbf16>) -> tensor<2x256x32xf32>
    %13 = "trn.convert"(%12) : (tensor<2x256x32xf32>) -> tensor<2x256x32xbf16>
    %14 = "trn.matmul"(%arg3, %11) : (tensor<2x32x256xbf16>, tensor<2x256x128xbf16>) -> tensor<2x32x128xf32>
    %15 = "trn.convert"(%14) : (tensor<2x32x128xf32>) -> tensor<2x32x128xbf16>
    "trn.yield"(%13, %15) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<2x256x32xbf16>, tensor<2x32x128xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<2x256x32xbf16>, tensor<2x32x128xbf16>)
  return %0#1, %0#0 : tensor<2x32x128xbf16>, tensor<2x256x32xbf16>
}

// -----

// Tests that a kernel trn-order paired with another marks its on-chip tiles with the pair
// and its role, for trn-plan-memory; its HBM result buffer and the tiles of the op after it
// are not marked.
// CHECK-LABEL: func.func @co_run_tiles
// CHECK: "nisa.alloc"() {memory = "hbm"}
// CHECK-COUNT-2: "nisa.alloc"() {co_run = 3 : i64, co_run_role = "partner", memory = "sbuf"}
// CHECK-NOT: co_run
// CHECK: return
func.func @co_run_tiles(%x: tensor<128x64xf32>) -> tensor<128x64xf32> {
  %k = "trn.kernel"() ({
    %e = "trn.activation"(%x) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x64xf32>) -> tensor<128x64xf32>
    "trn.yield"(%e) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x64xf32>) -> ()
  }) {co_run = 3 : i64, co_run_role = "partner", kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x64xf32>
  %y = "trn.activation"(%k) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x64xf32>) -> tensor<128x64xf32>
  return %y : tensor<128x64xf32>
}

// -----

// Tests that an attention kernel whose Q lies token-major ([B, S, H, D], heads side by side in
// each token's row) but whose K^T and V are per head (as a training step's backward reads the
// saved ones) loads each query block's Q of all heads as whole token rows (one DMA of 128
// elements per row, not one of 64 per head), turns each head's columns on PE from partition
// 0, where that head's K^T lies, and stores each query block's outputs of all heads as whole
// token rows once the last head's are in.
// CHECK-LABEL: func.func @q_token_rows_kv_per_head
// CHECK: "nisa.dma"(%{{.*}}, %arg0) {aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]
// CHECK-NOT: "nisa.dma"(%{{.*}}, %arg0)
// CHECK: "nisa.transpose"({{.*}}) {aps = [array<i64: 0, 128, 64, 1, 128>, array<i64: 0, 128, 128, 1, 64>]
// CHECK: "nisa.transpose"({{.*}}) {aps = [array<i64: 0, 128, 64, 1, 128>, array<i64: 64, 128, 128, 1, 64>]
// CHECK: "nisa.dma"(%arg3, %{{.*}}) {aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]
// CHECK-NOT: "nisa.dma"(%arg3
// CHECK: return
func.func @q_token_rows_kv_per_head(%q: tensor<1x128x2x64xbf16>, %kt: tensor<2x64x128xbf16>, %v: tensor<2x128x64xbf16>) -> tensor<1x128x2x64xbf16> {
  %0 = "trn.kernel"() ({
    %1 = "trn.transpose"(%q) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x128x2x64xbf16>) -> tensor<1x2x128x64xbf16>
    %2 = "trn.reshape"(%1) : (tensor<1x2x128x64xbf16>) -> tensor<2x128x64xbf16>
    %11 = "trn.matmul"(%2, %kt) : (tensor<2x128x64xbf16>, tensor<2x64x128xbf16>) -> tensor<2x128x128xf32>
    %12 = "trn.convert"(%11) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    %13 = "trn.reshape"(%12) : (tensor<2x128x128xbf16>) -> tensor<1x2x128x128xbf16>
    %14 = "trn.tensor_scalar"(%13) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<1x2x128x128xbf16>) -> tensor<1x2x128x128xf32>
    %15 = "trn.reduce"(%14) {dimensions = array<i64: 3>, op = "max"} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
    %16 = "trn.broadcast"(%15) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
    %17 = "trn.tensor_tensor"(%14, %16) {op = "sub"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %18 = "trn.activation"(%17) {bias = 0.000000e+00 : f32, func = "exp", scale = 1.000000e+00 : f32} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %19 = "trn.reduce"(%18) {dimensions = array<i64: 3>, op = "add"} : (tensor<1x2x128x128xf32>) -> tensor<1x2x128xf32>
    %20 = "trn.broadcast"(%19) {dimensions = array<i64: 3>} : (tensor<1x2x128xf32>) -> tensor<1x2x128x128xf32>
    %21 = "trn.tensor_tensor"(%18, %20) {op = "div"} : (tensor<1x2x128x128xf32>, tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xf32>
    %22 = "trn.convert"(%21) : (tensor<1x2x128x128xf32>) -> tensor<1x2x128x128xbf16>
    %23 = "trn.reshape"(%22) : (tensor<1x2x128x128xbf16>) -> tensor<2x128x128xbf16>
    %28 = "trn.matmul"(%23, %v) : (tensor<2x128x128xbf16>, tensor<2x128x64xbf16>) -> tensor<2x128x64xf32>
    %29 = "trn.convert"(%28) : (tensor<2x128x64xf32>) -> tensor<2x128x64xbf16>
    %30 = "trn.reshape"(%29) : (tensor<2x128x64xbf16>) -> tensor<1x2x128x64xbf16>
    %31 = "trn.transpose"(%30) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x2x128x64xbf16>) -> tensor<1x128x2x64xbf16>
    "trn.yield"(%31) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x2x64xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x2x64xbf16>
  return %0 : tensor<1x128x2x64xbf16>
}

// -----

// Tests that an attention kernel whose rows compute a softmax backward's gradient of the
// scaled scores, dS = (dP * P - P * rowsum(dP * P)) * 0.125 with dP = dO @ V^T, linear in
// dP, applies the scaling to dO^T as its block leaves PSUM (turned on PE) instead of in a
// pass over the rows: the difference is written in bf16 directly. With scale-into-q=false,
// a plain copy takes dO^T out of PSUM and ACT scales the rows.
// CHECK-LABEL: func.func @attention_softmax_backward_scale
// CHECK: "nisa.transpose"(%[[PT:.*]], %{{.*}}) {{.*}} : (memref<64x128xf32, "psum">
// CHECK-NEXT: "nisa.activation"(%[[QT:.*]], %[[PT]]) {{.*}}scale = 1.250000e-01
// CHECK: "nisa.matmul"(%{{.*}}, %[[QT]], %{{.*}})
// CHECK-NOT: 1.250000e-01
// CHECK: "nisa.tensor_tensor"{{.*}}op = "sub"{{.*}} : (memref<128x128xbf16, "sbuf">
// CHECK-NOT: 1.250000e-01
// CHECK: return
// NOSCALE-LABEL: func.func @attention_softmax_backward_scale
// NOSCALE: "nisa.transpose"{{.*}} : (memref<64x128xf32, "psum">
// NOSCALE-NEXT: "nisa.tensor_copy"
// NOSCALE: "nisa.tensor_tensor"{{.*}}op = "sub"{{.*}} : (memref<128x128xf32, "sbuf">
// NOSCALE: "nisa.activation"{{.*}}scale = 1.250000e-01{{.*}} : (memref<128x128xbf16, "sbuf">, memref<128x128xf32, "sbuf">)
func.func @attention_softmax_backward_scale(%do: tensor<1x128x64xbf16>, %vt: tensor<1x64x128xbf16>, %p: tensor<1x128x128xbf16>, %k: tensor<1x128x64xbf16>) -> tensor<1x128x64xbf16> {
  %0 = "trn.kernel"() ({
    %1 = "trn.matmul"(%do, %vt) : (tensor<1x128x64xbf16>, tensor<1x64x128xbf16>) -> tensor<1x128x128xf32>
    %2 = "trn.convert"(%p) : (tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %3 = "trn.tensor_tensor"(%1, %2) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
    %4 = "trn.reduce"(%3) {dimensions = array<i64: 2>, op = "add"} : (tensor<1x128x128xf32>) -> tensor<1x128xf32>
    %5 = "trn.broadcast"(%4) {dimensions = array<i64: 2>} : (tensor<1x128xf32>) -> tensor<1x128x128xf32>
    %6 = "trn.tensor_tensor"(%2, %5) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
    %7 = "trn.tensor_tensor"(%3, %6) {op = "sub"} : (tensor<1x128x128xf32>, tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
    %8 = "trn.tensor_scalar"(%7) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
    %9 = "trn.convert"(%8) : (tensor<1x128x128xf32>) -> tensor<1x128x128xbf16>
    %10 = "trn.matmul"(%9, %k) : (tensor<1x128x128xbf16>, tensor<1x128x64xbf16>) -> tensor<1x128x64xf32>
    %11 = "trn.convert"(%10) : (tensor<1x128x64xf32>) -> tensor<1x128x64xbf16>
    "trn.yield"(%11) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x64xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x64xbf16>
  return %0 : tensor<1x128x64xbf16>
}

// -----

// Tests that where the scaled value is itself what the kernel yields (a matmul_rows kernel
// storing the softmax backward's gradient), the scaling stays in the rows: Q^T leaves PSUM
// by a plain copy.
// CHECK-LABEL: func.func @matmul_rows_scaled_result
// CHECK: "nisa.transpose"{{.*}} : (memref<64x128xf32, "psum">
// CHECK-NEXT: "nisa.tensor_copy"
// CHECK: "nisa.activation"{{.*}}scale = 1.250000e-01{{.*}} : (memref<128x128xf32, "sbuf">, memref<128x128xf32, "sbuf">)
func.func @matmul_rows_scaled_result(%do: tensor<1x128x64xbf16>, %vt: tensor<1x64x128xbf16>, %p: tensor<1x128x128xbf16>) -> tensor<1x128x128xf32> {
  %0 = "trn.kernel"() ({
    %1 = "trn.matmul"(%do, %vt) : (tensor<1x128x64xbf16>, tensor<1x64x128xbf16>) -> tensor<1x128x128xf32>
    %2 = "trn.convert"(%p) : (tensor<1x128x128xbf16>) -> tensor<1x128x128xf32>
    %3 = "trn.tensor_tensor"(%1, %2) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
    %4 = "trn.reduce"(%3) {dimensions = array<i64: 2>, op = "add"} : (tensor<1x128x128xf32>) -> tensor<1x128xf32>
    %5 = "trn.broadcast"(%4) {dimensions = array<i64: 2>} : (tensor<1x128xf32>) -> tensor<1x128x128xf32>
    %6 = "trn.tensor_tensor"(%2, %5) {op = "mul"} : (tensor<1x128x128xf32>, tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
    %7 = "trn.tensor_tensor"(%3, %6) {op = "sub"} : (tensor<1x128x128xf32>, tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
    %8 = "trn.tensor_scalar"(%7) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<1x128x128xf32>) -> tensor<1x128x128xf32>
    "trn.yield"(%8) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x128x128xf32>) -> ()
  }) {kind = "matmul_rows", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1x128x128xf32>
  return %0 : tensor<1x128x128xf32>
}

// -----

// Tests that an mlp_saved kernel stores the hidden activation and the pre-activation it
// yields after its result (each [128, 512] tile; a transfer is split over queues), and that
// the second Linear reads the hidden activation on chip: nothing loads a [256, 512] buffer.
// An mlp_saved kernel without its op marked trn.producer_result is an error naming it.
// CHECK-LABEL: func.func @mlp_saved
// CHECK-COUNT-16: "nisa.dma"(%{{.*}}) {{.*}} : (memref<256x512xbf16, "hbm">, memref<128x512xbf16, "sbuf">)
// CHECK-NOT: memref<256x512xbf16, "hbm">)
// CHECK: return
// Merged kernels whose marks or results their lowering cannot take are errors naming the
// kernel (or, for the mlp_saved kernel, its first Linear's last op).
// ERRMERGED: trn_to_nisa-invalid-merged.mlir:7:10: error: convert-trn-to-nisa: an attention kernel that computes its operands needs one op marked trn.attention_input, not its last
// ERRMERGED: trn_to_nisa-invalid-merged.mlir:59:10: error: convert-trn-to-nisa: an attention kernel with an output projection yields no projection
// ERRMERGED: trn_to_nisa-invalid-merged.mlir:118:{{[0-9]+}}: error: convert-trn-to-nisa: an mlp_saved kernel stores the first Linear's result
// ERRMERGED: trn_to_nisa-invalid-merged.mlir:130:10: error: convert-trn-to-nisa: an attention kernel that computes its operands has at most one op marked trn.attention_output, after its attention's ops
// ERRMERGED: trn_to_nisa-invalid-merged.mlir:182:8: error: convert-trn-to-nisa: only an mlp or attention kernel has an op marked trn.input_rows
// ERRMERGED: trn_to_nisa-invalid-merged.mlir:193:10: error: convert-trn-to-nisa: an mlp_saved kernel has at most one op marked trn.saved_gradient, after its second Linear's
// ERRMERGED: trn_to_nisa-invalid-merged.mlir:209:10: error: convert-trn-to-nisa: an mlp_saved kernel's weight-gradient part holds one matmul
// ERRMERGED: trn_to_nisa-invalid-merged.mlir:229:10: error: convert-trn-to-nisa: an mlp_saved kernel's weight gradient reads the transpose of its hidden value
// ERRMERGED: trn_to_nisa-invalid-merged.mlir:239:10: error: convert-trn-to-nisa: an mlp_saved kernel's weight-gradient part yields the gradient and at most the hidden value's sums over its rows
// ERRMERGED: trn_to_nisa-invalid-merged.mlir:272:11: error: convert-trn-to-nisa: an attention kernel's fourth matmul contracts the transpose of an input its row part reads, laid out as the scores
// ERRMLPSAVED: trn_to_nisa-invalid-mlp-saved.mlir:3:{{[0-9]+}}: error: convert-trn-to-nisa: an mlp_saved kernel needs one op marked trn.producer_result, not its last
func.func @mlp_saved(%arg0: tensor<256x128xbf16>, %arg1: tensor<512x128xbf16>, %arg2: tensor<512xbf16>, %arg3: tensor<128x512xbf16>) -> (tensor<256x128xbf16>, tensor<256x512xbf16>, tensor<256x512xbf16>) {
  %0:3 = "trn.kernel"() ({
    %1 = "trn.transpose"(%arg1) {permutation = array<i64: 1, 0>} : (tensor<512x128xbf16>) -> tensor<128x512xbf16>
    %2 = "trn.broadcast"(%arg2) {dimensions = array<i64: 0>} : (tensor<512xbf16>) -> tensor<256x512xbf16>
    %3 = "trn.matmul"(%arg0, %1) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
    %4 = "trn.tensor_tensor"(%3, %2) {op = "add"} : (tensor<256x512xf32>, tensor<256x512xbf16>) -> tensor<256x512xf32>
    %5 = "trn.convert"(%4) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
    %6 = "trn.activation"(%5) {bias = 0.000000e+00 : f32, func = "gelu", scale = 1.000000e+00 : f32} : (tensor<256x512xbf16>) -> tensor<256x512xf32>
    %7 = "trn.convert"(%6) {trn.producer_result} : (tensor<256x512xf32>) -> tensor<256x512xbf16>
    %8 = "trn.transpose"(%arg3) {permutation = array<i64: 1, 0>} : (tensor<128x512xbf16>) -> tensor<512x128xbf16>
    %9 = "trn.matmul"(%7, %8) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
    %10 = "trn.convert"(%9) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
    "trn.yield"(%10, %7, %5) {operandSegmentSizes = array<i32: 1, 2, 0>} : (tensor<256x128xbf16>, tensor<256x512xbf16>, tensor<256x512xbf16>) -> ()
  }) {kind = "mlp_saved", resultSegmentSizes = array<i32: 1, 2, 0>} : () -> (tensor<256x128xbf16>, tensor<256x512xbf16>, tensor<256x512xbf16>)
  return %0#0, %0#2, %0#1 : tensor<256x128xbf16>, tensor<256x512xbf16>, tensor<256x512xbf16>
}

// -----

// Tests that an mlp_saved kernel with the weight gradient of its hidden value H (trn-fuse
// mlp-saved-gradient) neither stores H nor loads it: the gradient's matmuls take H's row
// tiles [128 tokens, 512] as they are as their stationary operand, against X's tiles widened
// by a column of ones for the bias gradient (2 token tiles x 4 hidden tiles), after the
// second Linear's; H gets no HBM buffer.
// CHECK-LABEL: func.func @mlp_saved_gradient
// CHECK-NOT: memref<256x512xbf16, "hbm">
// CHECK: "nisa.matmul"{{.*}} : (memref<128x128xf32, "psum">, memref<128x128xbf16, "sbuf">, memref<128x128xbf16, "sbuf">)
// CHECK-COUNT-8: "nisa.matmul"{{.*}} : (memref<128x129xf32, "psum">, memref<128x512xbf16, "sbuf">, memref<128x129xbf16, "sbuf">)
// CHECK-NOT: memref<256x512xbf16, "hbm">
// CHECK: return
func.func @mlp_saved_gradient(%arg0: tensor<256x128xbf16>, %arg1: tensor<128x512xbf16>, %arg2: tensor<512x128xbf16>, %arg3: tensor<256x128xbf16>) -> (tensor<256x128xbf16>, tensor<512x128xbf16>, tensor<512xbf16>) {
  %0:3 = "trn.kernel"() ({
    %1 = "trn.matmul"(%arg0, %arg1) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
    %2 = "trn.convert"(%1) {trn.producer_result} : (tensor<256x512xf32>) -> tensor<256x512xbf16>
    %3 = "trn.matmul"(%2, %arg2) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
    %4 = "trn.convert"(%3) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
    %5 = "trn.transpose"(%2) {permutation = array<i64: 1, 0>, trn.saved_gradient} : (tensor<256x512xbf16>) -> tensor<512x256xbf16>
    %6 = "trn.matmul"(%5, %arg3) : (tensor<512x256xbf16>, tensor<256x128xbf16>) -> tensor<512x128xf32>
    %7 = "trn.convert"(%6) : (tensor<512x128xf32>) -> tensor<512x128xbf16>
    %8 = "trn.reduce"(%2) {dimensions = array<i64: 0>, op = "add"} : (tensor<256x512xbf16>) -> tensor<512xf32>
    %9 = "trn.convert"(%8) : (tensor<512xf32>) -> tensor<512xbf16>
    "trn.yield"(%4, %7, %9) {operandSegmentSizes = array<i32: 1, 1, 1>} : (tensor<256x128xbf16>, tensor<512x128xbf16>, tensor<512xbf16>) -> ()
  }) {kind = "mlp_saved", resultSegmentSizes = array<i32: 1, 1, 1>} : () -> (tensor<256x128xbf16>, tensor<512x128xbf16>, tensor<512xbf16>)
  return %0#0, %0#1, %0#2 : tensor<256x128xbf16>, tensor<512x128xbf16>, tensor<512xbf16>
}

// -----

// Tests that an attention kernel's fourth matmul, dV = P^T @ dO (trn-fuse
// attention-input-contractions), takes P's row tiles as the row part loads them: each is
// loaded once and is the stationary operand of dV's matmul.
// CHECK-LABEL: func.func @softmax_backward_with_dv
// CHECK: "nisa.dma"(%[[P0:.*]], %arg2) {aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 0, 128, 128, 1, 128>]
// CHECK-NOT: "nisa.dma"(%{{.*}}, %arg2)
// CHECK: "nisa.matmul"(%{{.*}}, %[[P0]], %{{.*}}) {accumulate = false, aps = [array<i64: 0, 32, 128, 1, 32>
// CHECK: "nisa.dma"(%[[P1:.*]], %arg2) {aps = [array<i64: 0, 128, 128, 1, 128>, array<i64: 16384, 128, 128, 1, 128>]
// CHECK-NOT: "nisa.dma"(%{{.*}}, %arg2)
// CHECK: "nisa.matmul"(%{{.*}}, %[[P1]], %{{.*}}) {accumulate = false, aps = [array<i64: 0, 32, 128, 1, 32>
// CHECK-NOT: "nisa.dma"(%{{.*}}, %arg2)
// CHECK: return
func.func @softmax_backward_with_dv(%arg0: tensor<2x128x32xbf16>, %arg1: tensor<2x32x128xbf16>, %arg2: tensor<2x128x128xbf16>, %arg3: tensor<2x128x32xbf16>, %arg4: tensor<2x32x128xbf16>) -> (tensor<2x128x32xbf16>, tensor<2x32x128xbf16>, tensor<2x128x32xbf16>) {
  %0:3 = "trn.kernel"() ({
    %1 = "trn.matmul"(%arg0, %arg1) : (tensor<2x128x32xbf16>, tensor<2x32x128xbf16>) -> tensor<2x128x128xf32>
    %2 = "trn.convert"(%arg2) : (tensor<2x128x128xbf16>) -> tensor<2x128x128xf32>
    %3 = "trn.tensor_tensor"(%1, %2) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %4 = "trn.reduce"(%3) {dimensions = array<i64: 2>, op = "add"} : (tensor<2x128x128xf32>) -> tensor<2x128xf32>
    %5 = "trn.broadcast"(%4) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x128xf32>
    %6 = "trn.tensor_tensor"(%2, %5) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %7 = "trn.tensor_tensor"(%3, %6) {op = "sub"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %8 = "trn.tensor_scalar"(%7) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
    %9 = "trn.convert"(%8) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
    %10 = "trn.matmul"(%9, %arg3) : (tensor<2x128x128xbf16>, tensor<2x128x32xbf16>) -> tensor<2x128x32xf32>
    %11 = "trn.convert"(%10) : (tensor<2x128x32xf32>) -> tensor<2x128x32xbf16>
    %12 = "trn.matmul"(%arg4, %9) : (tensor<2x32x128xbf16>, tensor<2x128x128xbf16>) -> tensor<2x32x128xf32>
    %13 = "trn.convert"(%12) : (tensor<2x32x128xf32>) -> tensor<2x32x128xbf16>
    %14 = "trn.transpose"(%arg2) {permutation = array<i64: 0, 2, 1>} : (tensor<2x128x128xbf16>) -> tensor<2x128x128xbf16>
    %15 = "trn.matmul"(%14, %arg0) : (tensor<2x128x128xbf16>, tensor<2x128x32xbf16>) -> tensor<2x128x32xf32>
    %16 = "trn.convert"(%15) : (tensor<2x128x32xf32>) -> tensor<2x128x32xbf16>
    "trn.yield"(%11, %13, %16) {operandSegmentSizes = array<i32: 1, 1, 1>} : (tensor<2x128x32xbf16>, tensor<2x32x128xbf16>, tensor<2x128x32xbf16>) -> ()
  }) {kind = "attention", resultSegmentSizes = array<i32: 1, 1, 1>} : () -> (tensor<2x128x32xbf16>, tensor<2x32x128xbf16>, tensor<2x128x32xbf16>)
  return %0#0, %0#1, %0#2 : tensor<2x128x32xbf16>, tensor<2x32x128xbf16>, tensor<2x128x32xbf16>
}
