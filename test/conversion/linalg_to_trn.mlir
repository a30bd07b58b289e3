// RUN: neuron-opt --split-input-file --convert-linalg-to-trn %s | FileCheck %s
// RUN: not neuron-opt --split-input-file --convert-linalg-to-trn %S/Inputs/linalg_to_trn-unsupported.mlir 2>&1 | FileCheck %s --check-prefix=ERR

// Tests that a matmul with a zero-filled accumulator becomes trn.matmul, and a transposed
// operand trn.transpose.
// CHECK-LABEL: func.func @linear
// CHECK: %[[T:.*]] = "trn.transpose"(%arg0) {permutation = array<i64: 1, 0>}
// CHECK: "trn.matmul"(%arg1, %[[T]]) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK-NOT: linalg
func.func @linear(%w: tensor<16x8xf32>, %x: tensor<4x8xf32>) -> tensor<4x16xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e0 = tensor.empty() : tensor<8x16xf32>
  %t = linalg.transpose ins(%w : tensor<16x8xf32>) outs(%e0 : tensor<8x16xf32>) permutation = [1, 0]
  %e1 = tensor.empty() : tensor<4x16xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e1 : tensor<4x16xf32>) -> tensor<4x16xf32>
  %y = linalg.matmul ins(%x, %t : tensor<4x8xf32>, tensor<8x16xf32>) outs(%z : tensor<4x16xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Tests that a generic's broadcast operand becomes trn.broadcast and its body trn ops.
// CHECK-LABEL: func.func @bias_add
// CHECK: %[[B:.*]] = "trn.broadcast"(%arg0) {dimensions = array<i64: 0>} : (tensor<16xf32>) -> tensor<4x16xf32>
// CHECK: "trn.tensor_tensor"(%[[B]], %arg1) {op = "add"}
#map = affine_map<(d0, d1) -> (d1)>
#map1 = affine_map<(d0, d1) -> (d0, d1)>
func.func @bias_add(%b: tensor<16xf32>, %x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %e = tensor.empty() : tensor<4x16xf32>
  %r = linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%b, %x : tensor<16xf32>, tensor<4x16xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %s = arith.addf %in, %in_0 : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}

// -----

// Tests that torch-mlir's relu body (an unordered cmpf ugt + select: a NaN is selected, as relu
// keeps it) is recognised as one activation.
// CHECK-LABEL: func.func @relu
// CHECK: "trn.activation"(%arg0) {bias = 0.000000e+00 : f32, func = "relu", scale = 1.000000e+00 : f32}
// CHECK-NOT: trn.select
#map = affine_map<(d0) -> (d0)>
func.func @relu(%x: tensor<8xf32>) -> tensor<8xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.cmpf ugt, %in, %cst : f32
    %s = arith.select %c, %in, %cst : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

// Tests that the erf form of GELU is recognised as the scalar engine's gelu.
// CHECK-LABEL: func.func @gelu
// CHECK: "trn.activation"(%arg0) {bias = 0.000000e+00 : f32, func = "gelu", scale = 1.000000e+00 : f32}
// CHECK-NOT: "erf"
#map = affine_map<(d0) -> (d0)>
func.func @gelu(%x: tensor<8xf32>) -> tensor<8xf32> {
  %one = arith.constant 1.000000e+00 : f32
  %half = arith.constant 5.000000e-01 : f32
  %sqrt2 = arith.constant 1.41421354 : f32
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.divf %in, %sqrt2 : f32
    %1 = math.erf %0 : f32
    %2 = arith.addf %1, %one : f32
    %3 = arith.mulf %2, %half : f32
    %4 = arith.mulf %in, %3 : f32
    linalg.yield %4 : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

// Tests that scalar operands become trn.tensor_scalar (reversed when the scalar is on the
// left of a non-commutative op), and that scaling folds into an activation.
// CHECK-LABEL: func.func @scalars
// CHECK: %[[S:.*]] = "trn.tensor_scalar"(%arg0) {op = "sub", reverse = true, scalar = 1.000000e+00 : f32}
// CHECK: "trn.activation"(%[[S]]) {bias = 0.000000e+00 : f32, func = "exp", scale = 2.000000e+00 : f32}
#map = affine_map<(d0) -> (d0)>
func.func @scalars(%x: tensor<8xf32>) -> tensor<8xf32> {
  %one = arith.constant 1.000000e+00 : f32
  %two = arith.constant 2.000000e+00 : f32
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.subf %one, %in : f32
    %1 = arith.mulf %0, %two : f32
    %2 = math.exp %1 : f32
    linalg.yield %2 : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

// Tests that a transposed input map becomes trn.transpose into the iteration space.
// CHECK-LABEL: func.func @transposed_input
// CHECK: %[[T:.*]] = "trn.transpose"(%arg0) {permutation = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
// CHECK: "trn.tensor_tensor"(%[[T]], %arg1) {op = "mul"}
#mapT = affine_map<(d0, d1) -> (d1, d0)>
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @transposed_input(%a: tensor<8x4xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %r = linalg.generic {indexing_maps = [#mapT, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<8x4xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %y: f32, %out: f32):
    %0 = arith.mulf %x, %y : f32
    linalg.yield %0 : f32
  } -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// -----

// Tests that a reduction loop becomes trn.reduce of the combining op's operand (here the
// square), and that the output map's unit dim becomes a reshape.
// CHECK-LABEL: func.func @sum_of_squares
// CHECK: %[[SQ:.*]] = "trn.tensor_tensor"(%arg0, %arg0) {op = "mul"}
// CHECK: %[[R:.*]] = "trn.reduce"(%[[SQ]]) {dimensions = array<i64: 1>, op = "add"} : (tensor<4x16xf32>) -> tensor<4xf32>
// CHECK: "trn.reshape"(%[[R]]) : (tensor<4xf32>) -> tensor<4x1xf32>
#map = affine_map<(d0, d1) -> (d0, d1)>
#mapk = affine_map<(d0, d1) -> (d0, 0)>
func.func @sum_of_squares(%x: tensor<4x16xf32>) -> tensor<4x1xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<4x1xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<4x1xf32>) -> tensor<4x1xf32>
  %r = linalg.generic {indexing_maps = [#map, #mapk], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<4x16xf32>) outs(%z : tensor<4x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.mulf %in, %in : f32
    %1 = arith.addf %0, %out : f32
    linalg.yield %1 : f32
  } -> tensor<4x1xf32>
  return %r : tensor<4x1xf32>
}

// -----

// Tests that an ordered compare and select (x >o 0 ? x : 0, where(x > 0, x, 0): 0 for a NaN) is
// not taken for relu, and that an unordered one (x <u c: true for a NaN) tests NaN itself.
// CHECK-LABEL: func.func @ordered_select
// CHECK: "trn.tensor_scalar"(%arg0) {op = "gt", reverse = false, scalar = 0.000000e+00 : f32}
// CHECK: "trn.select"
// CHECK-NOT: "relu"
// CHECK-LABEL: func.func @unordered_compare
// CHECK: %[[LT:.*]] = "trn.tensor_scalar"(%arg0) {op = "lt", reverse = false, scalar = 5.000000e-01 : f32}
// CHECK: %[[NAN:.*]] = "trn.tensor_tensor"(%arg0, %arg0) {op = "ne"}
// CHECK: "trn.tensor_tensor"(%[[LT]], %[[NAN]]) {op = "or"}
#map = affine_map<(d0) -> (d0)>
func.func @ordered_select(%x: tensor<8xf32>) -> tensor<8xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.cmpf ogt, %in, %cst : f32
    %s = arith.select %c, %in, %cst : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}
func.func @unordered_compare(%x: tensor<8xf32>) -> tensor<8xi1> {
  %cst = arith.constant 5.000000e-01 : f32
  %e = tensor.empty() : tensor<8xi1>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<8xf32>) outs(%e : tensor<8xi1>) {
  ^bb0(%in: f32, %out: i1):
    %c = arith.cmpf ult, %in, %cst : f32
    linalg.yield %c : i1
  } -> tensor<8xi1>
  return %r : tensor<8xi1>
}

// -----

// Tests that a max reduction whose second output tracks the index of the maximum (strict >
// keeps the first occurrence) becomes argmax: the smallest index where the input equals its
// maximum or is NaN (PyTorch's argmax takes a NaN as the maximum), from trn.iota.
// CHECK-LABEL: func.func @argmax
// CHECK: %[[M:.*]] = "trn.reduce"(%arg0) {dimensions = array<i64: 1>, op = "max"}
// CHECK: %[[B:.*]] = "trn.broadcast"(%[[M]]) {dimensions = array<i64: 1>}
// CHECK: %[[EQ:.*]] = "trn.tensor_tensor"(%arg0, %[[B]]) {op = "eq"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xi1>
// CHECK: %[[NAN:.*]] = "trn.tensor_tensor"(%arg0, %arg0) {op = "ne"}
// CHECK: %[[HIT:.*]] = "trn.tensor_tensor"(%[[EQ]], %[[NAN]]) {op = "or"}
// CHECK: %[[I:.*]] = "trn.iota"() {dimension = 1 : i64} : () -> tensor<4x16xi64>
// CHECK: "trn.select"(%[[HIT]]
// CHECK: "trn.reduce"({{.*}}) {dimensions = array<i64: 1>, op = "min"}
// CHECK: "trn.convert"({{.*}}) : (tensor<4xf32>) -> tensor<4xi64>
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @argmax(%x: tensor<4x16xf32>) -> tensor<4xi64> {
  %c0 = arith.constant 0 : i64
  %ninf = arith.constant 0xFF800000 : f32
  %e0 = tensor.empty() : tensor<4xi64>
  %i0 = linalg.fill ins(%c0 : i64) outs(%e0 : tensor<4xi64>) -> tensor<4xi64>
  %e1 = tensor.empty() : tensor<4xf32>
  %m0 = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<4xf32>) -> tensor<4xf32>
  %r:2 = linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<4x16xf32>) outs(%m0, %i0 : tensor<4xf32>, tensor<4xi64>) {
  ^bb0(%in: f32, %out: f32, %idx: i64):
    %k = linalg.index 1 : index
    %ki = arith.index_cast %k : index to i64
    %mx = arith.maximumf %in, %out : f32
    %gt = arith.cmpf ogt, %in, %out : f32
    %sel = arith.select %gt, %ki, %idx : i64
    linalg.yield %mx, %sel : f32, i64
  } -> (tensor<4xf32>, tensor<4xi64>)
  return %r#1 : tensor<4xi64>
}

// -----

// Tests that floor, which no engine instruction computes, expands into exact engine ops:
// trunc(x) = x - fmod(x, 1) where |x| < 2^23 (larger values, +-inf included, are integers
// already: fmod(inf, 1) is NaN), then one less where x < trunc(x).
// CHECK-LABEL: func.func @floor
// CHECK: %[[ABS:.*]] = "trn.activation"(%arg0) {bias = 0.000000e+00 : f32, func = "abs"
// CHECK: %[[SMALL:.*]] = "trn.tensor_scalar"(%[[ABS]]) {op = "lt", reverse = false, scalar = 0x4B000000 : f32}
// CHECK: %[[MOD:.*]] = "trn.tensor_scalar"(%arg0) {op = "mod", reverse = false, scalar = 1.000000e+00 : f32}
// CHECK: %[[D:.*]] = "trn.tensor_tensor"(%arg0, %[[MOD]]) {op = "sub"}
// CHECK: %[[T:.*]] = "trn.select"(%[[SMALL]], %[[D]], %arg0)
// CHECK: %[[LT:.*]] = "trn.tensor_tensor"(%arg0, %[[T]]) {op = "lt"}
// CHECK: %[[F:.*]] = "trn.convert"(%[[LT]]) : (tensor<8xi1>) -> tensor<8xf32>
// CHECK: "trn.tensor_tensor"(%[[T]], %[[F]]) {op = "sub"}
#map = affine_map<(d0) -> (d0)>
func.func @floor(%x: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.floor %in : f32
    linalg.yield %0 : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

// Tests that a strided, rank-reducing tensor.extract_slice becomes one trn.view whose map
// holds offsets and strides (the dropped unit dim becomes a constant index).
// CHECK: #[[SMAP:.*]] = affine_map<(d0) -> (1, d0 * 2 + 1)>
// CHECK-LABEL: func.func @slices
// CHECK: "trn.view"(%arg0) {indexing_map = #[[SMAP]]} : (tensor<4x16xf32>) -> tensor<8xf32>
func.func @slices(%x: tensor<4x16xf32>) -> tensor<8xf32> {
  %s = tensor.extract_slice %x[1, 1] [1, 8] [1, 2] : tensor<4x16xf32> to tensor<8xf32>
  return %s : tensor<8xf32>
}

// -----

// Tests that tensor.concat becomes insert_slices into a trn.empty destination, and
// tensor.pad a fill of the padding value with the source inserted at the low padding.
// CHECK-LABEL: func.func @concat_pad
// CHECK: %[[E:.*]] = "trn.empty"() : () -> tensor<4x32xf32>
// CHECK: %[[C1:.*]] = "trn.insert_slice"(%[[E]], %arg0) {offsets = array<i64: 0, 0>, strides = array<i64: 1, 1>}
// CHECK: %[[C2:.*]] = "trn.insert_slice"(%[[C1]], %arg0) {offsets = array<i64: 0, 16>, strides = array<i64: 1, 1>}
// CHECK: %[[F:.*]] = "trn.fill"() {value = -1.500000e+00 : f32} : () -> tensor<4x35xf32>
// CHECK: "trn.insert_slice"(%[[F]], %[[C2]]) {offsets = array<i64: 0, 1>, strides = array<i64: 1, 1>}
func.func @concat_pad(%x: tensor<4x16xf32>) -> tensor<4x35xf32> {
  %c = tensor.concat dim(1) %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x32xf32>
  %v = arith.constant -1.500000e+00 : f32
  %p = tensor.pad %c low[0, 1] high[0, 2] {
  ^bb0(%i: index, %j: index):
    tensor.yield %v : f32
  } : tensor<4x32xf32> to tensor<4x35xf32>
  return %p : tensor<4x35xf32>
}

// -----

// Tests that tensor.extract at indices affine in the loop indices (a flip) becomes a
// trn.view, and that the index check torch-mlir adds (cf.assert) is dropped.
// CHECK: #[[FMAP:.*]] = affine_map<(d0, d1) -> (d0, -d1 + 15)>
// CHECK-LABEL: func.func @flip
// CHECK: "trn.view"(%arg0) {indexing_map = #[[FMAP]]} : (tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NOT: cf.assert
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @flip(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %c15 = arith.constant 15 : index
  %e = tensor.empty() : tensor<4x16xf32>
  %r = linalg.generic {indexing_maps = [#map], iterator_types = ["parallel", "parallel"]} outs(%e : tensor<4x16xf32>) {
  ^bb0(%out: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %k = arith.subi %c15, %j : index
    %ok = arith.cmpi slt, %k, %c15 : index
    cf.assert %ok, "index out of range"
    %v = tensor.extract %x[%i, %k] : tensor<4x16xf32>
    linalg.yield %v : f32
  } -> tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}

// -----

// Tests that a convolution whose accumulator starts from a broadcast bias becomes trn.conv
// plus the bias add, and a grouped convolution folds its group dim into the channels.
// CHECK-LABEL: func.func @conv_bias
// CHECK: %[[C:.*]] = "trn.conv"(%arg0, %arg1) {dilations = array<i64: 1, 1>, groups = 1 : i64, strides = array<i64: 2, 2>} : (tensor<2x3x10x10xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x4x4xf32>
// CHECK: "trn.tensor_tensor"(%[[C]], %{{.*}}) {op = "add"}
func.func @conv_bias(%x: tensor<2x3x10x10xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf32>) -> tensor<2x4x4x4xf32> {
  %e = tensor.empty() : tensor<2x4x4x4xf32>
  %bb = linalg.broadcast ins(%b : tensor<4xf32>) outs(%e : tensor<2x4x4x4xf32>) dimensions = [0, 2, 3]
  %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%x, %w : tensor<2x3x10x10xf32>, tensor<4x3x3x3xf32>) outs(%bb : tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  return %c : tensor<2x4x4x4xf32>
}

// -----

// CHECK-LABEL: func.func @conv_grouped
// CHECK: "trn.reshape"(%arg0) : (tensor<2x3x1x8x8xf32>) -> tensor<2x3x8x8xf32>
// CHECK: "trn.reshape"(%arg1) : (tensor<3x2x1x3x3xf32>) -> tensor<6x1x3x3xf32>
// CHECK: "trn.conv"({{.*}}) {dilations = array<i64: 2, 2>, groups = 3 : i64, strides = array<i64: 1, 1>} : (tensor<2x3x8x8xf32>, tensor<6x1x3x3xf32>) -> tensor<2x6x4x4xf32>
// CHECK: "trn.reshape"({{.*}}) : (tensor<2x6x4x4xf32>) -> tensor<2x3x2x4x4xf32>
func.func @conv_grouped(%x: tensor<2x3x1x8x8xf32>, %w: tensor<3x2x1x3x3xf32>) -> tensor<2x3x2x4x4xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<2x3x2x4x4xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<2x3x2x4x4xf32>) -> tensor<2x3x2x4x4xf32>
  %c = linalg.conv_2d_ngchw_gfchw {dilations = dense<2> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<2x3x1x8x8xf32>, tensor<3x2x1x3x3xf32>) outs(%z : tensor<2x3x2x4x4xf32>) -> tensor<2x3x2x4x4xf32>
  return %c : tensor<2x3x2x4x4xf32>
}

// -----

// Tests that max pooling from a -inf accumulator becomes trn.pool with its window.
// CHECK-LABEL: func.func @maxpool
// CHECK: "trn.pool"(%arg0) {dilations = array<i64: 1, 1>, op = "max", strides = array<i64: 2, 2>, window = array<i64: 2, 2>} : (tensor<2x3x8x8xf32>) -> tensor<2x3x4x4xf32>
// CHECK-NOT: trn.tensor_tensor
func.func @maxpool(%x: tensor<2x3x8x8xf32>) -> tensor<2x3x4x4xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<2x3x4x4xf32>
  %m = linalg.fill ins(%ninf : f32) outs(%e : tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %w = tensor.empty() : tensor<2x2xf32>
  %p = linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%x, %w : tensor<2x3x8x8xf32>, tensor<2x2xf32>) outs(%m : tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  return %p : tensor<2x3x4x4xf32>
}

// -----

// Tests that indexing by tensor values (an embedding lookup) becomes trn.gather of rows:
// the index scaled by the row length is left to the DMA (row_stride), the embedding dim is
// the gather's free dim.
// CHECK-LABEL: func.func @embedding
// CHECK: %[[I:.*]] = "trn.view"(%{{.*}}) {indexing_map = #{{.*}}} : (tensor<2x5x8xi64>) -> tensor<2x5xi64>
// CHECK: "trn.gather"(%arg0, %[[I]]) {free_strides = array<i64: 1>, offset = 0 : i64, row_stride = 8 : i64} : (tensor<10x8xf32>, tensor<2x5xi64>) -> tensor<2x5x8xf32>
#map = affine_map<(d0, d1, d2) -> (d0, d1)>
#map1 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @embedding(%table: tensor<10x8xf32>, %ids: tensor<2x5xi64>) -> tensor<2x5x8xf32> {
  %e = tensor.empty() : tensor<2x5x8xf32>
  %r = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%ids : tensor<2x5xi64>) outs(%e : tensor<2x5x8xf32>) {
  ^bb0(%id: i64, %out: f32):
    %row = arith.index_cast %id : i64 to index
    %col = linalg.index 2 : index
    %v = tensor.extract %table[%row, %col] : tensor<10x8xf32>
    linalg.yield %v : f32
  } -> tensor<2x5x8xf32>
  return %r : tensor<2x5x8xf32>
}

// -----

// Tests that the index check torch-mlir puts in a gather's body (cf.assert: the index below
// the size of the dim it indexes) gates the gather's row index: where it fails, the index is
// -2^24, which takes the row outside the tensor and the DMA reports it, instead of the
// flattened offset reading the next row (index 10 of a row of 10).
// CHECK-LABEL: func.func @checked_gather
// CHECK: %[[OK:.*]] = "trn.tensor_scalar"(%{{.*}}) {op = "lt", reverse = false, scalar = 1.000000e+01 : f32}
// CHECK: %[[SENTINEL:.*]] = "trn.fill"() {value = 0xCB800000 : f32} : () -> tensor<4x1xi64>
// CHECK: %[[I:.*]] = "trn.select"(%[[OK]], %{{.*}}, %[[SENTINEL]])
// CHECK: "trn.gather"(%arg0, %{{.*}}) {free_strides = array<i64>, offset = 0 : i64, row_stride = 1 : i64}
// CHECK-NOT: cf.assert
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @checked_gather(%w: tensor<4x10xf32>, %i: tensor<4x1xi64>) -> tensor<4x1xf32> {
  %c10 = arith.constant 10 : index
  %e = tensor.empty() : tensor<4x1xf32>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%i : tensor<4x1xi64>) outs(%e : tensor<4x1xf32>) {
  ^bb0(%in: i64, %out: f32):
    %row = linalg.index 0 : index
    %col = arith.index_cast %in : i64 to index
    %ok = arith.cmpi slt, %col, %c10 : index
    cf.assert %ok, "index must be smaller than dim size"
    %v = tensor.extract %w[%row, %col] : tensor<4x10xf32>
    linalg.yield %v : f32
  } -> tensor<4x1xf32>
  return %r : tensor<4x1xf32>
}

// -----

// Tests that log(cumsum(exp(x))), torch-mlir's logcumsumexp, becomes one logaddexp scan: the
// exp of a large input would overflow.
// CHECK-LABEL: func.func @logcumsumexp
// CHECK-NEXT: %[[S:.*]] = "trn.scan"(%arg0) {dimension = 1 : i64, op = "logaddexp"}
// CHECK-NEXT: return %[[S]]
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @logcumsumexp(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = tensor.empty() : tensor<4x8xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %7 = math.exp %in : f32
    linalg.yield %7 : f32
  } -> tensor<4x8xf32>
  %5 = "trn.scan"(%1) {dimension = 1 : i64, op = "add"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%5 : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %7 = math.log %in : f32
    linalg.yield %7 : f32
  } -> tensor<4x8xf32>
  return %6 : tensor<4x8xf32>
}

// -----

// Tests that bf16 logcumsumexp, whose exp(x) is rounded to bf16 before the cumsum, still
// becomes one logaddexp scan, computed in fp32 up to the log and rounded once after it.
// CHECK-LABEL: func.func @logcumsumexp_bf16
// CHECK-NEXT: %[[S:.*]] = "trn.scan"(%arg0) {dimension = 1 : i64, op = "logaddexp"} : (tensor<4x8xbf16>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[R:.*]] = "trn.convert"(%[[S]]) : (tensor<4x8xf32>) -> tensor<4x8xbf16>
// CHECK-NEXT: return %[[R]]
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @logcumsumexp_bf16(%x: tensor<4x8xbf16>) -> tensor<4x8xbf16> {
  %e = tensor.empty() : tensor<4x8xbf16>
  %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x8xbf16>) outs(%e : tensor<4x8xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %7 = math.exp %in : bf16
    linalg.yield %7 : bf16
  } -> tensor<4x8xbf16>
  %5 = "trn.scan"(%1) {dimension = 1 : i64, op = "add"} : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
  %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%5 : tensor<4x8xbf16>) outs(%e : tensor<4x8xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %7 = math.log %in : bf16
    linalg.yield %7 : bf16
  } -> tensor<4x8xbf16>
  return %6 : tensor<4x8xbf16>
}

// -----

// Tests that torch-mlir's bf16 gelu body (x * (erf(x / sqrt(2)) + 1) * 0.5, with sqrt(2) a bf16
// constant) is recognised as the scalar engine's gelu, computed in fp32 and rounded once.
// CHECK-LABEL: func.func @gelu_bf16
// CHECK-NEXT: %[[G:.*]] = "trn.activation"(%arg0) {bias = 0.000000e+00 : f32, func = "gelu", scale = 1.000000e+00 : f32} : (tensor<4x8xbf16>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[R:.*]] = "trn.convert"(%[[G]]) : (tensor<4x8xf32>) -> tensor<4x8xbf16>
// CHECK-NEXT: return %[[R]]
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @gelu_bf16(%x: tensor<4x8xbf16>) -> tensor<4x8xbf16> {
  %two = arith.constant 2.000000e+00 : bf16
  %one = arith.constant 1.000000e+00 : bf16
  %half = arith.constant 5.000000e-01 : bf16
  %e = tensor.empty() : tensor<4x8xbf16>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x8xbf16>) outs(%e : tensor<4x8xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %s = math.sqrt %two : bf16
    %d = arith.divf %in, %s : bf16
    %f = math.erf %d : bf16
    %a = arith.addf %f, %one : bf16
    %m = arith.mulf %a, %half : bf16
    %g = arith.mulf %in, %m : bf16
    linalg.yield %g : bf16
  } -> tensor<4x8xbf16>
  return %r : tensor<4x8xbf16>
}

// ERR: linalg_to_trn-unsupported.mlir:{{[0-9]+}}:{{[0-9]+}}: error: convert-linalg-to-trn: no lowering to the NeuronCore for 'tensor.extract'
// ERR: linalg_to_trn-unsupported.mlir:{{[0-9]+}}:{{[0-9]+}}: error: convert-linalg-to-trn: no lowering to the NeuronCore for 'math.ctpop' inside linalg.generic
// ERR: linalg_to_trn-unsupported.mlir:{{[0-9]+}}:{{[0-9]+}}: error: convert-linalg-to-trn: torch-mlir has no correct lowering for this op's arguments: unimplemented: only support cases with fixed stride size.
// ERR: linalg_to_trn-unsupported.mlir:{{[0-9]+}}:{{[0-9]+}}: error: convert-linalg-to-trn: a matmul of i64 tensors (PE multiplies floating-point values only)
// ERR: linalg_to_trn-unsupported.mlir:{{[0-9]+}}:{{[0-9]+}}: error: convert-linalg-to-trn: a gather over 16777224 rows (its row index is computed in fp32, exact up to 2^24 rows)

// -----

// Tests that math.atan is the scalar engine's arctan, and that acos, which no engine function
// computes, expands into exact engine ops around it: 2 arctan(sqrt((1 - x) / (1 + x))).
// CHECK-LABEL: func.func @inverse_trig
// CHECK: "trn.activation"(%arg0) {bias = 0.000000e+00 : f32, func = "arctan", scale = 1.000000e+00 : f32}
// CHECK: %[[NUM:.*]] = "trn.tensor_scalar"(%arg0) {op = "sub", reverse = true, scalar = 1.000000e+00 : f32}
// CHECK: %[[DEN:.*]] = "trn.tensor_scalar"(%arg0) {op = "add", reverse = false, scalar = 1.000000e+00 : f32}
// CHECK: %[[Q:.*]] = "trn.tensor_tensor"(%[[NUM]], %[[DEN]]) {op = "div"}
// CHECK: %[[R:.*]] = "trn.activation"(%[[Q]]) {bias = 0.000000e+00 : f32, func = "sqrt", scale = 1.000000e+00 : f32}
// CHECK: %[[A:.*]] = "trn.activation"(%[[R]]) {bias = 0.000000e+00 : f32, func = "arctan", scale = 1.000000e+00 : f32}
// CHECK: "trn.tensor_scalar"(%[[A]]) {op = "mul", reverse = false, scalar = 2.000000e+00 : f32}
#map = affine_map<(d0) -> (d0)>
func.func @inverse_trig(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %e = tensor.empty() : tensor<8xf32>
  %a = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.atan %in : f32
    linalg.yield %0 : f32
  } -> tensor<8xf32>
  %c = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.acos %in : f32
    linalg.yield %0 : f32
  } -> tensor<8xf32>
  return %a, %c : tensor<8xf32>, tensor<8xf32>
}

// -----

// Tests that tensors with no elements compute nothing: an elementwise op producing none
// becomes trn.empty, a sum over an empty dim is its zero fill (its iteration space is empty),
// and an insert of an empty slice (a concat operand) leaves the destination as it was.
// CHECK-LABEL: func.func @zero_elements
// CHECK-DAG: %[[E:.*]] = "trn.empty"() : () -> tensor<0x4xf32>
// CHECK-DAG: %[[F:.*]] = "trn.fill"() {value = 0.000000e+00 : f32} : () -> tensor<4xf32>
// CHECK-NOT: trn.insert_slice
// CHECK: return %[[E]], %[[F]], %arg1 : tensor<0x4xf32>, tensor<4xf32>, tensor<3x4xf32>
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
func.func @zero_elements(%x: tensor<0x4xf32>, %y: tensor<3x4xf32>) -> (tensor<0x4xf32>, tensor<4xf32>, tensor<3x4xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<0x4xf32>
  %exp = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<0x4xf32>) outs(%e : tensor<0x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.exp %in : f32
    linalg.yield %0 : f32
  } -> tensor<0x4xf32>
  %e1 = tensor.empty() : tensor<4xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4xf32>) -> tensor<4xf32>
  %sum = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction", "parallel"]} ins(%x : tensor<0x4xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  } -> tensor<4xf32>
  %cat = tensor.concat dim(0) %y, %x : (tensor<3x4xf32>, tensor<0x4xf32>) -> tensor<3x4xf32>
  return %exp, %sum, %cat : tensor<0x4xf32>, tensor<4xf32>, tensor<3x4xf32>
}

// -----

// Tests that a tensor.empty that is returned (torch.empty) is written, with zeros: its
// contents are unspecified, but every output must be written.
// CHECK-LABEL: func.func @returned_empty
// CHECK: %[[F:.*]] = "trn.fill"() {value = 0.000000e+00 : f32} : () -> tensor<3x2xf32>
// CHECK: return %[[F]]
func.func @returned_empty() -> tensor<3x2xf32> {
  %e = tensor.empty() : tensor<3x2xf32>
  return %e : tensor<3x2xf32>
}

// -----

// Tests that an input read through a non-permutation affine map (a sliding window
// d1 * 2 + d2) becomes a trn.view of the iteration space, and that a reduction keeping the
// index of the first iteration where a condition holds (max-pool indices: acc starts at -1,
// select(acc == -1, select(hit, i, acc), acc)) becomes a min over the positions that hit,
// the value picked where the position equals it, and the initial value where none hit.
// CHECK-LABEL: func.func @window_first_match
// CHECK: %[[INIT:.*]] = "trn.fill"() {value = -1.000000e+00 : f32} : () -> tensor<2x4xi64>
// CHECK: %[[WIN:.*]] = "trn.view"(%arg0) {indexing_map = #map} : (tensor<2x9xf32>) -> tensor<2x4x3xf32>
// CHECK: %[[HIT:.*]] = "trn.tensor_tensor"(%[[WIN]], %{{.*}}) {op = "eq"}
// CHECK: %[[POS:.*]] = "trn.convert"(%{{.*}}) : (tensor<2x4x3xi64>) -> tensor<2x4x3xf32>
// CHECK: %[[NONE:.*]] = "trn.fill"() {value = 3.000000e+00 : f32} : () -> tensor<2x4x3xf32>
// CHECK: %[[CAND:.*]] = "trn.select"(%{{.*}}, %[[POS]], %[[NONE]])
// CHECK: %[[FIRST:.*]] = "trn.reduce"(%[[CAND]]) {dimensions = array<i64: 2>, op = "min"}
// CHECK: %[[SPREAD:.*]] = "trn.broadcast"(%[[FIRST]]) {dimensions = array<i64: 2>}
// CHECK: %[[AT:.*]] = "trn.tensor_tensor"(%[[POS]], %[[SPREAD]]) {op = "eq"}
// CHECK: %[[PICKED:.*]] = "trn.reduce"(%{{.*}}) {dimensions = array<i64: 2>, op = "max"}
// CHECK: %[[FOUND:.*]] = "trn.tensor_scalar"(%[[FIRST]]) {op = "ne", reverse = false, scalar = 3.000000e+00 : f32}
// CHECK: %[[START:.*]] = "trn.convert"(%[[INIT]])
// CHECK: "trn.select"(%[[FOUND]], %[[PICKED]], %[[START]])
#win_in = affine_map<(d0, d1, d2) -> (d0, d1 * 2 + d2)>
#win_k = affine_map<(d0, d1, d2) -> (d2)>
#win_out = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @window_first_match(%x: tensor<2x9xf32>, %m: tensor<2x4xf32>) -> tensor<2x4xi64> {
  %c-1 = arith.constant -1 : i64
  %e = tensor.empty() : tensor<2x4xi64>
  %init = linalg.fill ins(%c-1 : i64) outs(%e : tensor<2x4xi64>) -> tensor<2x4xi64>
  %w = tensor.empty() : tensor<3xi64>
  %r = linalg.generic {indexing_maps = [#win_in, #win_out, #win_k, #win_out], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %m, %w : tensor<2x9xf32>, tensor<2x4xf32>, tensor<3xi64>) outs(%init : tensor<2x4xi64>) {
  ^bb0(%v: f32, %mx: f32, %unused: i64, %acc: i64):
    %k = linalg.index 2 : index
    %i = arith.index_cast %k : index to i64
    %hit = arith.cmpf oeq, %v, %mx : f32
    %s = arith.select %hit, %i, %acc : i64
    %none = arith.cmpi eq, %acc, %c-1 : i64
    %y = arith.select %none, %s, %acc : i64
    linalg.yield %y : i64
  } -> tensor<2x4xi64>
  return %r : tensor<2x4xi64>
}

// -----

// Tests that a channels-last pooling pools its input transposed to channels-first and
// transposes the result back.
// CHECK-LABEL: func.func @pool_channels_last
// CHECK: %[[X:.*]] = "trn.transpose"(%arg0) {permutation = array<i64: 0, 4, 1, 2, 3>} : (tensor<2x4x6x6x3xf32>) -> tensor<2x3x4x6x6xf32>
// CHECK: %[[P:.*]] = "trn.pool"(%[[X]]) {dilations = array<i64: 1, 1, 1>, op = "add", strides = array<i64: 2, 2, 2>, window = array<i64: 2, 2, 2>} : (tensor<2x3x4x6x6xf32>) -> tensor<2x3x2x3x3xf32>
// CHECK: "trn.transpose"(%[[P]]) {permutation = array<i64: 0, 2, 3, 4, 1>} : (tensor<2x3x2x3x3xf32>) -> tensor<2x2x3x3x3xf32>
func.func @pool_channels_last(%x: tensor<2x4x6x6x3xf32>) -> tensor<2x2x3x3x3xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %w = tensor.empty() : tensor<2x2x2xf32>
  %e = tensor.empty() : tensor<2x2x3x3x3xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<2x2x3x3x3xf32>) -> tensor<2x2x3x3x3xf32>
  %p = linalg.pooling_ndhwc_sum {dilations = dense<1> : vector<3xi64>, strides = dense<2> : vector<3xi64>} ins(%x, %w : tensor<2x4x6x6x3xf32>, tensor<2x2x2xf32>) outs(%z : tensor<2x2x3x3x3xf32>) -> tensor<2x2x3x3x3xf32>
  return %p : tensor<2x2x3x3x3xf32>
}
