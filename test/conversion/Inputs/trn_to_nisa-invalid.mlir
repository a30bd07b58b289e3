// A linalg op left for convert-trn-to-nisa (checked by ../trn_to_nisa.mlir).
func.func @not_trn() -> tensor<4xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  return %f : tensor<4xf32>
}
