// RUN: neuron-opt --split-input-file --trn-tile %s | FileCheck %s
// RUN: neuron-opt --split-input-file --trn-tile="target=trn1" %s | FileCheck %s --check-prefix=TRN1
// RUN: not neuron-opt --trn-tile %S/Inputs/tile-invalid.mlir 2>&1 | FileCheck %s --check-prefix=ERR

// Tests that a bias constant along M puts N on partitions ("nm"), so the activation engine
// can add it per partition.
// CHECK-LABEL: func.func @bias_over_features
// CHECK: }) {kind = "matmul", orientation = "nm"}
func.func @bias_over_features(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %k = "trn.kernel"() ({
    %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<16xf32>) -> tensor<4x16xf32>
    %y = "trn.matmul"(%x, %w) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    %z = "trn.tensor_tensor"(%bb, %y) {op = "add"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    "trn.yield"(%z) : (tensor<4x16xf32>) -> ()
  }) {kind = "matmul"} : () -> tensor<4x16xf32>
  return %k : tensor<4x16xf32>
}

// -----

// Tests that a plain matmul keeps M on partitions ("mn").
// CHECK-LABEL: func.func @plain
// CHECK: }) {kind = "matmul", orientation = "mn"}
func.func @plain(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %k = "trn.kernel"() ({
    %y = "trn.matmul"(%x, %w) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    "trn.yield"(%y) : (tensor<4x16xf32>) -> ()
  }) {kind = "matmul"} : () -> tensor<4x16xf32>
  return %k : tensor<4x16xf32>
}

// -----

// Tests that an elementwise kernel gets a free tile size derived from the target's SBUF.
// CHECK-LABEL: func.func @elementwise
// CHECK: }) {free_tile = 3072 : i64, kind = "elementwise"}
// TRN1-LABEL: func.func @elementwise
// TRN1: }) {free_tile = 2560 : i64, kind = "elementwise"}
func.func @elementwise(%x: tensor<128x8192xf32>) -> tensor<128x8192xf32> {
  %k = "trn.kernel"() ({
    %e = "trn.activation"(%x) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x8192xf32>) -> tensor<128x8192xf32>
    "trn.yield"(%e) : (tensor<128x8192xf32>) -> ()
  }) {kind = "elementwise"} : () -> tensor<128x8192xf32>
  return %k : tensor<128x8192xf32>
}

// ERR: tile-invalid.mlir:3:8: error: trn-tile: unknown matmul orientation 'km' (expected mn or nm)
