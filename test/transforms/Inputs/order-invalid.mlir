// A kernel that yields a value of another type than it returns (checked by ../order.mlir).
func.func @bad(%x: tensor<8xf32>) -> tensor<8xbf16> {
  %k = "trn.kernel"() ({
    %y = "trn.tensor_scalar"(%x) {op = "mul", reverse = false, scalar = 2.0 : f32} : (tensor<8xf32>) -> tensor<8xf32>
    "trn.yield"(%y) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<8xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<8xbf16>
  return %k : tensor<8xbf16>
}
