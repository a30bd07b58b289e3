// Inputs with ops convert-linalg-to-trn has no lowering for (checked by ../linalg_to_trn.mlir).
func.func @scalar_read(%x: tensor<4xf32>) -> f32 {
  %c1 = arith.constant 1 : index
  %e = tensor.extract %x[%c1] : tensor<4xf32>
  return %e : f32
}

// -----

#map = affine_map<(d0) -> (d0)>
func.func @atan2(%x: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.atan2 %in, %in : f32
    linalg.yield %0 : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}
