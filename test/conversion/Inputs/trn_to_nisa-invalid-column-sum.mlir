// A row-wise kernel summing its rows over one of its two kept dims only, which its tiles of
// rows cannot accumulate (checked by ../trn_to_nisa.mlir).
func.func @bad(%x: tensor<4x128x64xf32>) -> (tensor<4x128x64xf32>, tensor<128x64xf32>) {
  %k:2 = "trn.kernel"() ({
    %sum = "trn.reduce"(%x) {op = "add", dimensions = array<i64: 2>} : (tensor<4x128x64xf32>) -> tensor<4x128xf32>
    %sb = "trn.broadcast"(%sum) {dimensions = array<i64: 2>} : (tensor<4x128xf32>) -> tensor<4x128x64xf32>
    %c = "trn.tensor_tensor"(%x, %sb) {op = "sub"} : (tensor<4x128x64xf32>, tensor<4x128x64xf32>) -> tensor<4x128x64xf32>
    %part = "trn.reduce"(%c) {op = "add", dimensions = array<i64: 0>} : (tensor<4x128x64xf32>) -> tensor<128x64xf32>
    "trn.yield"(%c, %part) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<4x128x64xf32>, tensor<128x64xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<4x128x64xf32>, tensor<128x64xf32>)
  return %k#0, %k#1 : tensor<4x128x64xf32>, tensor<128x64xf32>
}

// -----

// A row-wise kernel whose first result is a column sum, not a value over its rows.
func.func @first_result_a_column_sum(%x: tensor<4x128x64xf32>) -> (tensor<64xf32>, tensor<4x128x64xf32>) {
  %k:2 = "trn.kernel"() ({
    %sum = "trn.reduce"(%x) {op = "add", dimensions = array<i64: 2>} : (tensor<4x128x64xf32>) -> tensor<4x128xf32>
    %sb = "trn.broadcast"(%sum) {dimensions = array<i64: 2>} : (tensor<4x128xf32>) -> tensor<4x128x64xf32>
    %c = "trn.tensor_tensor"(%x, %sb) {op = "sub"} : (tensor<4x128x64xf32>, tensor<4x128x64xf32>) -> tensor<4x128x64xf32>
    %cols = "trn.reduce"(%c) {op = "add", dimensions = array<i64: 0, 1>} : (tensor<4x128x64xf32>) -> tensor<64xf32>
    "trn.yield"(%cols, %c) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<64xf32>, tensor<4x128x64xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<64xf32>, tensor<4x128x64xf32>)
  return %k#0, %k#1 : tensor<64xf32>, tensor<4x128x64xf32>
}

// -----

// A row-wise kernel broadcasting its column sum back over its rows: a column sum is ready
// only once every tile has gone by.
func.func @column_sum_broadcast(%x: tensor<4x128x64xf32>) -> (tensor<4x128x64xf32>, tensor<4x128x64xf32>) {
  %k:2 = "trn.kernel"() ({
    %sum = "trn.reduce"(%x) {op = "add", dimensions = array<i64: 2>} : (tensor<4x128x64xf32>) -> tensor<4x128xf32>
    %sb = "trn.broadcast"(%sum) {dimensions = array<i64: 2>} : (tensor<4x128xf32>) -> tensor<4x128x64xf32>
    %c = "trn.tensor_tensor"(%x, %sb) {op = "sub"} : (tensor<4x128x64xf32>, tensor<4x128x64xf32>) -> tensor<4x128x64xf32>
    %cols = "trn.reduce"(%c) {op = "add", dimensions = array<i64: 0, 1>} : (tensor<4x128x64xf32>) -> tensor<64xf32>
    %back = "trn.broadcast"(%cols) {dimensions = array<i64: 0, 1>} : (tensor<64xf32>) -> tensor<4x128x64xf32>
    "trn.yield"(%c, %back) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<4x128x64xf32>, tensor<4x128x64xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<4x128x64xf32>, tensor<4x128x64xf32>)
  return %k#0, %k#1 : tensor<4x128x64xf32>, tensor<4x128x64xf32>
}

// -----

// A row-wise kernel combining its column sum with a value of another shape: the ops after
// the sums compute on column sums alone.
func.func @column_sum_with_a_row_value(%x: tensor<4x128x64xf32>, %w: tensor<64xf32>) -> (tensor<4x128x64xf32>, tensor<64xf32>) {
  %k:2 = "trn.kernel"() ({
    %sum = "trn.reduce"(%x) {op = "add", dimensions = array<i64: 2>} : (tensor<4x128x64xf32>) -> tensor<4x128xf32>
    %sb = "trn.broadcast"(%sum) {dimensions = array<i64: 2>} : (tensor<4x128xf32>) -> tensor<4x128x64xf32>
    %c = "trn.tensor_tensor"(%x, %sb) {op = "sub"} : (tensor<4x128x64xf32>, tensor<4x128x64xf32>) -> tensor<4x128x64xf32>
    %cols = "trn.reduce"(%c) {op = "add", dimensions = array<i64: 0, 1>} : (tensor<4x128x64xf32>) -> tensor<64xf32>
    %scaled = "trn.tensor_tensor"(%cols, %w) {op = "mul"} : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
    "trn.yield"(%c, %scaled) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<4x128x64xf32>, tensor<64xf32>) -> ()
  }) {kind = "rows", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<4x128x64xf32>, tensor<64xf32>)
  return %k#0, %k#1 : tensor<4x128x64xf32>, tensor<64xf32>
}
