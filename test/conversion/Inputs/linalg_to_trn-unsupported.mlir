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
