// Inputs with ops convert-linalg-to-trn has no lowering for (checked by ../linalg_to_trn.mlir).
func.func @scalar_read(%x: tensor<4xf32>) -> f32 {
  %c1 = arith.constant 1 : index
  %e = tensor.extract %x[%c1] : tensor<4xf32>
  return %e : f32
}

// -----

#map = affine_map<(d0) -> (d0)>
func.func @popcount(%x: tensor<8xi32>) -> tensor<8xi32> {
  %e = tensor.empty() : tensor<8xi32>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<8xi32>) outs(%e : tensor<8xi32>) {
  ^bb0(%in: i32, %out: i32):
    %0 = math.ctpop %in : i32
    linalg.yield %0 : i32
  } -> tensor<8xi32>
  return %r : tensor<8xi32>
}

// -----

// torch-mlir's lowering of an adaptive pooling whose windows differ in size: one fixed window,
// and an assertion on a constant false that says the result is wrong.
func.func @unimplemented_assertion(%x: tensor<1x1x1x12xf32>) -> tensor<1x1x1x5xf32> {
  %false = arith.constant false
  %cst = arith.constant 0.000000e+00 : f32
  cf.assert %false, "unimplemented: only support cases with fixed stride size."
  %0 = tensor.empty() : tensor<1x1x1x5xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<1x1x1x5xf32>) -> tensor<1x1x1x5xf32>
  %2 = tensor.empty() : tensor<1x3xf32>
  %3 = linalg.pooling_nchw_sum {dilations = dense<1> : vector<2xi64>, strides = dense<[1, 2]> : vector<2xi64>} ins(%x, %2 : tensor<1x1x1x12xf32>, tensor<1x3xf32>) outs(%1 : tensor<1x1x1x5xf32>) -> tensor<1x1x1x5xf32>
  return %3 : tensor<1x1x1x5xf32>
}

// -----

func.func @integer_matmul(%a: tensor<4x6xi64>, %b: tensor<6x3xi64>) -> tensor<4x3xi64> {
  %c0 = arith.constant 0 : i64
  %e = tensor.empty() : tensor<4x3xi64>
  %z = linalg.fill ins(%c0 : i64) outs(%e : tensor<4x3xi64>) -> tensor<4x3xi64>
  %r = linalg.matmul ins(%a, %b : tensor<4x6xi64>, tensor<6x3xi64>) outs(%z : tensor<4x3xi64>) -> tensor<4x3xi64>
  return %r : tensor<4x3xi64>
}

// -----

// A row index over more than 2^24 rows, which fp32 engine arithmetic cannot compute exactly.
#map = affine_map<(d0) -> (d0)>
func.func @gather_beyond_exact_indices(%x: tensor<16777224xf32>, %i: tensor<4xi64>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%i : tensor<4xi64>) outs(%e : tensor<4xf32>) {
  ^bb0(%in: i64, %out: f32):
    %k = arith.index_cast %in : i64 to index
    %v = tensor.extract %x[%k] : tensor<16777224xf32>
    linalg.yield %v : f32
  } -> tensor<4xf32>
  return %r : tensor<4xf32>
}
