// RUN: neuron-opt --split-input-file --trn-fuse %s | FileCheck %s
// RUN: neuron-opt --split-input-file --trn-fuse="matmul-epilogue=false elementwise=false" %s | FileCheck %s --check-prefix=OFF
// RUN: neuron-opt --split-input-file --trn-fuse="keep-roundings=true" %s | FileCheck %s --check-prefix=KEEP
// RUN: neuron-opt --split-input-file --trn-fuse="rows=false" %s | FileCheck %s --check-prefix=NOROWS
// RUN: neuron-opt --split-input-file --trn-fuse="attention=false" %s | FileCheck %s --check-prefix=NOATTN
// RUN: neuron-opt --split-input-file --trn-fuse="attention=false matmul-rows=false" %s | FileCheck %s --check-prefix=NONE
// RUN: neuron-opt --split-input-file --trn-fuse="epilogue-producers=false" %s | FileCheck %s --check-prefix=NOPROD
// RUN: neuron-opt --split-input-file --trn-fuse="mlp=false" %s | FileCheck %s --check-prefix=NOMLP
// RUN: neuron-opt --split-input-file --trn-fuse="mlp-rows=false" %s | FileCheck %s --check-prefix=NOMLPROWS
// RUN: neuron-opt --split-input-file --trn-fuse="mlp-saved=false" %s | FileCheck %s --check-prefix=NOMLPSAVED
// RUN: neuron-opt --split-input-file --trn-fuse="mlp-saved-gradient=false" %s | FileCheck %s --check-prefix=NOSAVEDGRAD
// RUN: neuron-opt --split-input-file --trn-fuse="linear-rows=false" %s | FileCheck %s --check-prefix=NOLINROWS
// RUN: neuron-opt --split-input-file --trn-fuse="epilogue-results=false" %s | FileCheck %s --check-prefix=RES
// RUN: neuron-opt --split-input-file --trn-fuse="bias-gradients=false" %s | FileCheck %s --check-prefix=BIAS
// RUN: neuron-opt --split-input-file --trn-fuse="weight-gradients=false" %s | FileCheck %s --check-prefix=WG
// RUN: neuron-opt --split-input-file --trn-fuse="epilogue-residuals=false" %s | FileCheck %s --check-prefix=NORES
// RUN: neuron-opt --split-input-file --trn-fuse="attention-saved=false" %s | FileCheck %s --check-prefix=NOSAVED
// RUN: neuron-opt --split-input-file --trn-fuse="attention-contractions=false" %s | FileCheck %s --check-prefix=NOCONTRACT
// RUN: neuron-opt --split-input-file --trn-fuse="attention-input-contractions=false" %s | FileCheck %s --check-prefix=NOINPUT
// RUN: neuron-opt --split-input-file --trn-fuse="row-results=false" %s | FileCheck %s --check-prefix=NOROWRES
// RUN: neuron-opt --split-input-file --trn-fuse="column-sums=false" %s | FileCheck %s --check-prefix=NOCOLS
// RUN: neuron-opt --split-input-file --trn-fuse="input-rows=false" %s | FileCheck %s --check-prefix=NOINPUTROWS
// RUN: not neuron-opt --trn-fuse %S/Inputs/fuse-invalid.mlir 2>&1 | FileCheck %s --check-prefix=ERR

// Tests that a matmul, its bias add and activation become one kernel, and that the views
// feeding it (weight transpose, bias broadcast) are copied into the kernel.
// CHECK-LABEL: func.func @linear_relu
// CHECK: %[[K:.*]] = "trn.kernel"() ({
// CHECK-NEXT: "trn.transpose"(%arg0)
// CHECK-NEXT: "trn.broadcast"(%arg1)
// CHECK-NEXT: "trn.matmul"
// CHECK-NEXT: "trn.tensor_tensor"
// CHECK-NEXT: "trn.activation"
// CHECK-NEXT: "trn.yield"
// CHECK-NEXT: }) {kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NEXT: return %[[K]]
// OFF-LABEL: func.func @linear_relu
// OFF-COUNT-3: "trn.kernel"
func.func @linear_relu(%w: tensor<16x8xf32>, %b: tensor<16xf32>, %x: tensor<4x8xf32>) -> tensor<4x16xf32> {
  %t = "trn.transpose"(%w) {permutation = array<i64: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %y = "trn.matmul"(%x, %t) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<16xf32>) -> tensor<4x16xf32>
  %z = "trn.tensor_tensor"(%bb, %y) {op = "add"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %r = "trn.activation"(%z) {func = "relu", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}

// -----

// Tests that elementwise ops reading one another become one kernel even where a value has
// two users inside the group (a DAG: exp is read by the mul and the add), so exp's result
// never leaves the chip. elementwise=false keeps them apart.
// CHECK-LABEL: func.func @chain
// CHECK: %[[K:.*]] = "trn.kernel"() ({
// CHECK-NEXT: %[[E:.*]] = "trn.activation"(%arg0) {{.*}}func = "exp"
// CHECK-NEXT: %[[S:.*]] = "trn.tensor_scalar"(%[[E]])
// CHECK-NEXT: "trn.tensor_tensor"(%[[S]], %[[E]])
// CHECK-NEXT: "trn.yield"
// CHECK: return %[[K]]
// OFF-LABEL: func.func @chain
// OFF-COUNT-3: "trn.kernel"
func.func @chain(%x: tensor<8xf32>) -> tensor<8xf32> {
  %e = "trn.activation"(%x) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<8xf32>) -> tensor<8xf32>
  %s = "trn.tensor_scalar"(%e) {op = "mul", scalar = 2.0 : f32, reverse = false} : (tensor<8xf32>) -> tensor<8xf32>
  %t = "trn.tensor_tensor"(%s, %e) {op = "add"} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %t : tensor<8xf32>
}

// -----

// Tests that an op joining two chains lands in exactly one kernel: the first chain takes the
// join, and the second, a cheap op of the input read only there, is computed in that kernel
// rather than stored by one of its own.
// CHECK-LABEL: func.func @join
// CHECK: %[[J:.*]] = "trn.kernel"() ({
// CHECK-NEXT: "trn.activation"(%arg0)
// CHECK-NEXT: "trn.tensor_tensor"({{.*}}, %arg0) {op = "mul"}
// CHECK-NEXT: %[[S:.*]] = "trn.tensor_scalar"(%arg0)
// CHECK-NEXT: "trn.tensor_tensor"({{.*}}, %[[S]]) {op = "add"}
// CHECK-NEXT: "trn.yield"
// CHECK-NOT: "trn.kernel"
// CHECK: return %[[J]]
func.func @join(%x: tensor<8xf32>) -> tensor<8xf32> {
  %e = "trn.activation"(%x) {func = "sigmoid", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<8xf32>) -> tensor<8xf32>
  %m = "trn.tensor_tensor"(%e, %x) {op = "mul"} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %s = "trn.tensor_scalar"(%x) {op = "mul", scalar = 2.0 : f32, reverse = false} : (tensor<8xf32>) -> tensor<8xf32>
  %t = "trn.tensor_tensor"(%m, %s) {op = "add"} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %t : tensor<8xf32>
}

// -----

// Tests that inside a kernel a bf16 rounding read only by the next elementwise op is dropped
// (the bias add reads the fp32 matmul result), while the rounding of the stored result stays;
// keep-roundings=true keeps both.
// CHECK-LABEL: func.func @bf16_linear
// CHECK: %[[Y:.*]] = "trn.matmul"
// CHECK-NEXT: %[[Z:.*]] = "trn.tensor_tensor"(%{{.*}}, %[[Y]]) {op = "add"} : (tensor<4x16xbf16>, tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[R:.*]] = "trn.convert"(%[[Z]]) : (tensor<4x16xf32>) -> tensor<4x16xbf16>
// CHECK-NEXT: "trn.yield"(%[[R]])
// KEEP-LABEL: func.func @bf16_linear
// KEEP-COUNT-2: "trn.convert"
func.func @bf16_linear(%x: tensor<4x8xbf16>, %w: tensor<8x16xbf16>, %b: tensor<16xbf16>) -> tensor<4x16xbf16> {
  %y = "trn.matmul"(%x, %w) : (tensor<4x8xbf16>, tensor<8x16xbf16>) -> tensor<4x16xf32>
  %yb = "trn.convert"(%y) : (tensor<4x16xf32>) -> tensor<4x16xbf16>
  %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<16xbf16>) -> tensor<4x16xbf16>
  %z = "trn.tensor_tensor"(%bb, %yb) {op = "add"} : (tensor<4x16xbf16>, tensor<4x16xbf16>) -> tensor<4x16xf32>
  %r = "trn.convert"(%z) : (tensor<4x16xf32>) -> tensor<4x16xbf16>
  return %r : tensor<4x16xbf16>
}

// -----

// Tests that a softmax (max, subtract, exp, sum, divide over the last dim) is one row-wise
// kernel: both reductions and both broadcasts back over the rows are inside, so the rows are
// read once; the scaling before it joins too. rows=false leaves the reductions in separate
// kernels.
// CHECK-LABEL: func.func @softmax
// CHECK: %[[K:.*]] = "trn.kernel"() ({
// CHECK-NEXT: "trn.tensor_scalar"(%arg0)
// CHECK-NEXT: "trn.reduce"({{.*}}op = "max"
// CHECK-NEXT: "trn.broadcast"
// CHECK-NEXT: "trn.tensor_tensor"({{.*}}op = "sub"
// CHECK-NEXT: "trn.activation"({{.*}}func = "exp"
// CHECK-NEXT: "trn.reduce"({{.*}}op = "add"
// CHECK-NEXT: "trn.broadcast"
// CHECK-NEXT: "trn.tensor_tensor"({{.*}}op = "div"
// CHECK-NEXT: "trn.yield"
// CHECK-NEXT: }) {kind = "rows", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NEXT: return %[[K]]
// NOROWS-LABEL: func.func @softmax
// NOROWS-NOT: kind = "rows"
// NOROWS: kind = "reduce"
func.func @softmax(%x: tensor<2x64x96xf32>) -> tensor<2x64x96xf32> {
  %s = "trn.tensor_scalar"(%x) {op = "mul", scalar = 0.125 : f32, reverse = false} : (tensor<2x64x96xf32>) -> tensor<2x64x96xf32>
  %m = "trn.reduce"(%s) {op = "max", dimensions = array<i64: 2>} : (tensor<2x64x96xf32>) -> tensor<2x64xf32>
  %mb = "trn.broadcast"(%m) {dimensions = array<i64: 2>} : (tensor<2x64xf32>) -> tensor<2x64x96xf32>
  %d = "trn.tensor_tensor"(%s, %mb) {op = "sub"} : (tensor<2x64x96xf32>, tensor<2x64x96xf32>) -> tensor<2x64x96xf32>
  %e = "trn.activation"(%d) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<2x64x96xf32>) -> tensor<2x64x96xf32>
  %z = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 2>} : (tensor<2x64x96xf32>) -> tensor<2x64xf32>
  %zb = "trn.broadcast"(%z) {dimensions = array<i64: 2>} : (tensor<2x64xf32>) -> tensor<2x64x96xf32>
  %r = "trn.tensor_tensor"(%e, %zb) {op = "div"} : (tensor<2x64x96xf32>, tensor<2x64x96xf32>) -> tensor<2x64x96xf32>
  return %r : tensor<2x64x96xf32>
}

// -----

// Tests that a per-row member also needed outside the group (a norm's mean, saved for the
// backward pass) is the row-wise kernel's second result, read from it outside (the rows
// are read once); row-results=false: it stays in place for that use, becoming a reduction
// kernel of its own that reads the rows again, while the row-wise kernel computes it again
// inside. The weight's broadcast is copied into the kernel.
// CHECK-LABEL: func.func @norm_with_saved_mean
// CHECK-NOT: kind = "reduce"
// CHECK: %[[K:.*]]:2 = "trn.kernel"() ({
// CHECK-NEXT: "trn.broadcast"(%arg1) {dimensions = array<i64: 0>}
// CHECK-NEXT: "trn.reduce"(%arg0)
// CHECK-NEXT: %[[M:.*]] = "trn.tensor_scalar"
// CHECK: %[[Y:.*]] = "trn.tensor_tensor"({{.*}}op = "mul"
// CHECK-NEXT: "trn.yield"(%[[Y]], %[[M]])
// CHECK-NEXT: }) {kind = "rows", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK: return %[[K]]#0, %[[K]]#1
// NOROWRES-LABEL: func.func @norm_with_saved_mean
// NOROWRES: %[[MEAN:.*]] = "trn.kernel"() ({
// NOROWRES-NEXT: "trn.reduce"(%arg0)
// NOROWRES-NEXT: "trn.tensor_scalar"
// NOROWRES-NEXT: "trn.yield"
// NOROWRES-NEXT: }) {kind = "reduce", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NOROWRES-NEXT: %[[K:.*]] = "trn.kernel"() ({
// NOROWRES-NEXT: "trn.broadcast"(%arg1) {dimensions = array<i64: 0>}
// NOROWRES-NEXT: "trn.reduce"(%arg0)
// NOROWRES: "trn.tensor_tensor"({{.*}}op = "mul"
// NOROWRES-NEXT: "trn.yield"
// NOROWRES-NEXT: }) {kind = "rows", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NOROWRES: return %[[K]], %[[MEAN]]
func.func @norm_with_saved_mean(%x: tensor<128x64xf32>, %w: tensor<64xf32>) -> (tensor<128x64xf32>, tensor<128xf32>) {
  %sum = "trn.reduce"(%x) {op = "add", dimensions = array<i64: 1>} : (tensor<128x64xf32>) -> tensor<128xf32>
  %mean = "trn.tensor_scalar"(%sum) {op = "mul", scalar = 0.015625 : f32, reverse = false} : (tensor<128xf32>) -> tensor<128xf32>
  %mb = "trn.broadcast"(%mean) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x64xf32>
  %c = "trn.tensor_tensor"(%x, %mb) {op = "sub"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
  %wb = "trn.broadcast"(%w) {dimensions = array<i64: 0>} : (tensor<64xf32>) -> tensor<128x64xf32>
  %y = "trn.tensor_tensor"(%c, %wb) {op = "mul"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
  return %y, %mean : tensor<128x64xf32>, tensor<128xf32>
}

// -----

// Tests that the row-wise group takes the bias add of a matmul feeding it, and the matmul
// then joins it as a matmul_rows kernel (matmul-rows=false: the matmul keeps its own kernel);
// and that rows too long for the SBUF budget (65536 fp32 = 256 KiB per partition) are not
// grouped: that softmax keeps separate reduction kernels.
// CHECK-LABEL: func.func @scores_softmax
// CHECK: "trn.kernel"() ({
// CHECK: %[[MM:.*]] = "trn.matmul"
// CHECK: "trn.tensor_tensor"({{.*}}%[[MM]]) {op = "add"}
// CHECK: "trn.reduce"
// CHECK: }) {kind = "matmul_rows", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NONE-LABEL: func.func @scores_softmax
// NONE: %[[MM:.*]] = "trn.kernel"() ({
// NONE-NEXT: "trn.matmul"
// NONE-NEXT: "trn.yield"
// NONE-NEXT: }) {kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NONE: "trn.kernel"() ({
// NONE-NEXT: "trn.broadcast"(%arg2)
// NONE-NEXT: "trn.tensor_tensor"({{.*}}%[[MM]]) {op = "add"}
// NONE: }) {kind = "rows", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-LABEL: func.func @long_rows
// CHECK-NOT: kind = "rows"
// CHECK: return
func.func @scores_softmax(%q: tensor<64x32xf32>, %k: tensor<32x64xf32>, %b: tensor<64xf32>) -> tensor<64x64xf32> {
  %s = "trn.matmul"(%q, %k) : (tensor<64x32xf32>, tensor<32x64xf32>) -> tensor<64x64xf32>
  %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<64xf32>) -> tensor<64x64xf32>
  %a = "trn.tensor_tensor"(%bb, %s) {op = "add"} : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %m = "trn.reduce"(%a) {op = "max", dimensions = array<i64: 1>} : (tensor<64x64xf32>) -> tensor<64xf32>
  %mb = "trn.broadcast"(%m) {dimensions = array<i64: 1>} : (tensor<64xf32>) -> tensor<64x64xf32>
  %d = "trn.tensor_tensor"(%a, %mb) {op = "sub"} : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  return %d : tensor<64x64xf32>
}
func.func @long_rows(%x: tensor<4x65536xf32>) -> tensor<4x65536xf32> {
  %m = "trn.reduce"(%x) {op = "max", dimensions = array<i64: 1>} : (tensor<4x65536xf32>) -> tensor<4xf32>
  %mb = "trn.broadcast"(%m) {dimensions = array<i64: 1>} : (tensor<4xf32>) -> tensor<4x65536xf32>
  %d = "trn.tensor_tensor"(%x, %mb) {op = "sub"} : (tensor<4x65536xf32>, tensor<4x65536xf32>) -> tensor<4x65536xf32>
  return %d : tensor<4x65536xf32>
}

// -----

// Tests that scores -> softmax -> @ values become one attention kernel: the scores matmul,
// the row-wise body and the values matmul in order, each reading the one before it on chip;
// with attention=false they stay three kernels (matmul, rows, matmul).
// CHECK-LABEL: func.func @attention
// CHECK: "trn.kernel"() ({
// CHECK-NEXT: "trn.matmul"(%arg0, %arg1)
// CHECK: "trn.reduce"({{.*}}op = "max"
// CHECK: "trn.activation"({{.*}}func = "exp"
// CHECK: %[[P:.*]] = "trn.convert"
// CHECK-NEXT: "trn.matmul"(%[[P]], %arg2)
// CHECK: }) {kind = "attention", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NOT: "trn.kernel"
// Without attention kernels the scores still stay on chip: the scores matmul and the softmax
// form a matmul_rows kernel, which the values' matmul reads from HBM; with neither, three
// kernels.
// NOATTN-LABEL: func.func @attention
// NOATTN: "trn.kernel"() ({
// NOATTN-NEXT: "trn.matmul"(%arg0, %arg1)
// NOATTN: "trn.reduce"({{.*}}op = "max"
// NOATTN: }) {kind = "matmul_rows", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NOATTN: kind = "matmul"
// NOATTN-NOT: kind = "attention"
// NONE-LABEL: func.func @attention
// NONE: kind = "matmul"
// NONE: kind = "rows"
// NONE: kind = "matmul"
// NONE-NOT: kind = "matmul_rows"
func.func @attention(%q: tensor<2x128x32xbf16>, %kt: tensor<2x32x128xbf16>, %v: tensor<2x128x32xbf16>) -> tensor<2x128x32xbf16> {
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
  return %ob : tensor<2x128x32xbf16>
}

// -----

// Tests that an attention kernel forms also where its probabilities are returned (a training
// step saves them for the backward): the kernel yields them second, after its output, and
// the function returns both from it; with attention-saved=false the scores and softmax form
// a matmul_rows kernel whose stored probabilities a matmul kernel reads back.
// CHECK-LABEL: func.func @attention_saving_probabilities
// CHECK: %[[K:.*]]:2 = "trn.kernel"() ({
// CHECK: "trn.matmul"(%[[P:.*]], %arg2)
// CHECK: %[[O:.*]] = "trn.convert"
// CHECK-NEXT: "trn.yield"(%[[O]], %[[P]])
// CHECK: }) {kind = "attention", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NEXT: return %[[K]]#0, %[[K]]#1
// NOSAVED-LABEL: func.func @attention_saving_probabilities
// NOSAVED: }) {kind = "matmul_rows", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NOSAVED: }) {kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NOSAVED-NOT: kind = "attention"
func.func @attention_saving_probabilities(%q: tensor<2x128x32xbf16>, %kt: tensor<2x32x128xbf16>, %v: tensor<2x128x32xbf16>) -> (tensor<2x128x32xbf16>, tensor<2x128x128xbf16>) {
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
  return %ob, %pb : tensor<2x128x32xbf16>, tensor<2x128x128xbf16>
}

// -----

// Tests that an attention kernel forms where another kernel reads the rows result too, and
// before it (a softmax gradient read by the matmuls of both dQ and dK): the attention kernel
// goes where the rows kernel was, since nothing its values' matmul reads is computed after
// that. The other reader contracts the rows over their row dim (dK^T = Q^T @ dS), so it
// joins the kernel, which yields its result second instead of the rows; with
// attention-contractions=false the kernel yields the rows for the other matmul kernel to
// read; with attention-saved=false, a matmul_rows kernel and two matmul kernels.
// CHECK-LABEL: func.func @attention_rows_read_by_two_matmuls
// CHECK: %[[K:.*]]:2 = "trn.kernel"() ({
// CHECK: "trn.matmul"(%[[P:.*]], %arg2)
// CHECK: %[[O:.*]] = "trn.convert"
// CHECK-NEXT: "trn.matmul"(%arg3, %[[P]])
// CHECK-NEXT: %[[G:.*]] = "trn.convert"
// CHECK-NEXT: "trn.yield"(%[[O]], %[[G]])
// CHECK: }) {kind = "attention", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NEXT: return %[[K]]#1, %[[K]]#0
// NOCONTRACT-LABEL: func.func @attention_rows_read_by_two_matmuls
// NOCONTRACT: %[[K:.*]]:2 = "trn.kernel"() ({
// NOCONTRACT: "trn.matmul"(%[[P:.*]], %arg2)
// NOCONTRACT: "trn.yield"(%{{.*}}, %[[P]])
// NOCONTRACT: }) {kind = "attention", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NOCONTRACT-NEXT: %[[G:.*]] = "trn.kernel"() ({
// NOCONTRACT-NEXT: "trn.matmul"(%arg3, %[[K]]#1)
// NOCONTRACT: return %[[G]], %[[K]]#0
// NOSAVED-LABEL: func.func @attention_rows_read_by_two_matmuls
// NOSAVED: }) {kind = "matmul_rows", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NOSAVED: }) {kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NOSAVED: }) {kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NOSAVED-NOT: kind = "attention"
func.func @attention_rows_read_by_two_matmuls(%q: tensor<2x128x32xbf16>, %kt: tensor<2x32x128xbf16>, %v: tensor<2x128x32xbf16>, %qt: tensor<2x32x128xbf16>) -> (tensor<2x32x128xbf16>, tensor<2x128x32xbf16>) {
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
  %g = "trn.matmul"(%qt, %pb) : (tensor<2x32x128xbf16>, tensor<2x128x128xbf16>) -> tensor<2x32x128xf32>
  %gb = "trn.convert"(%g) : (tensor<2x32x128xf32>) -> tensor<2x32x128xbf16>
  %o = "trn.matmul"(%pb, %v) : (tensor<2x128x128xbf16>, tensor<2x128x32xbf16>) -> tensor<2x128x32xf32>
  %ob = "trn.convert"(%o) : (tensor<2x128x32xf32>) -> tensor<2x128x32xbf16>
  return %gb, %ob : tensor<2x32x128xbf16>, tensor<2x128x32xbf16>
}

// -----

// Tests that in a softmax backward the matmul contracting the probabilities P over their rows
// (dV = P^T @ dO), P being an input the attention kernel's row part reads, joins the kernel
// after its own ops: the kernel then yields dQ, dK^T and dV, and P is read by one kernel.
// The dV kernel stood before the attention kernel; the merged kernel stands where the
// attention kernel does. With attention-input-contractions=false, dV keeps its own kernel.
// CHECK-LABEL: func.func @softmax_backward_with_dv
// CHECK: %[[K:.*]]:3 = "trn.kernel"() ({
// CHECK: "trn.convert"(%arg2) : (tensor<2x128x128xbf16>) -> tensor<2x128x128xf32>
// CHECK: "trn.matmul"(%arg4, %{{.*}}) : (tensor<2x32x128xbf16>, tensor<2x128x128xbf16>) -> tensor<2x32x128xf32>
// CHECK: %[[PT:.*]] = "trn.transpose"(%arg2) {permutation = array<i64: 0, 2, 1>}
// CHECK-NEXT: "trn.matmul"(%[[PT]], %arg0) : (tensor<2x128x128xbf16>, tensor<2x128x32xbf16>) -> tensor<2x128x32xf32>
// CHECK: }) {kind = "attention", resultSegmentSizes = array<i32: 1, 1, 1>} : () -> (tensor<2x128x32xbf16>, tensor<2x32x128xbf16>, tensor<2x128x32xbf16>)
// CHECK-NEXT: return %[[K]]#0, %[[K]]#1, %[[K]]#2
// NOINPUT-LABEL: func.func @softmax_backward_with_dv
// NOINPUT: %[[DV:.*]] = "trn.kernel"() ({
// NOINPUT: }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x32xbf16>
// NOINPUT: %[[K:.*]]:2 = "trn.kernel"() ({
// NOINPUT: }) {kind = "attention", resultSegmentSizes = array<i32: 1, 1, 0>}
// NOINPUT-NEXT: return %[[K]]#0, %[[K]]#1, %[[DV]]
func.func @softmax_backward_with_dv(%do: tensor<2x128x32xbf16>, %vt: tensor<2x32x128xbf16>, %p: tensor<2x128x128xbf16>, %k: tensor<2x128x32xbf16>, %qt: tensor<2x32x128xbf16>) -> (tensor<2x128x32xbf16>, tensor<2x32x128xbf16>, tensor<2x128x32xbf16>) {
  %pt = "trn.transpose"(%p) {permutation = array<i64: 0, 2, 1>} : (tensor<2x128x128xbf16>) -> tensor<2x128x128xbf16>
  %dv = "trn.matmul"(%pt, %do) : (tensor<2x128x128xbf16>, tensor<2x128x32xbf16>) -> tensor<2x128x32xf32>
  %dvb = "trn.convert"(%dv) : (tensor<2x128x32xf32>) -> tensor<2x128x32xbf16>
  %dp = "trn.matmul"(%do, %vt) : (tensor<2x128x32xbf16>, tensor<2x32x128xbf16>) -> tensor<2x128x128xf32>
  %pf = "trn.convert"(%p) : (tensor<2x128x128xbf16>) -> tensor<2x128x128xf32>
  %a = "trn.tensor_tensor"(%dp, %pf) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
  %r = "trn.reduce"(%a) {op = "add", dimensions = array<i64: 2>} : (tensor<2x128x128xf32>) -> tensor<2x128xf32>
  %rb = "trn.broadcast"(%r) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x128xf32>
  %b = "trn.tensor_tensor"(%pf, %rb) {op = "mul"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
  %c = "trn.tensor_tensor"(%a, %b) {op = "sub"} : (tensor<2x128x128xf32>, tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
  %s = "trn.tensor_scalar"(%c) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<2x128x128xf32>) -> tensor<2x128x128xf32>
  %sb = "trn.convert"(%s) : (tensor<2x128x128xf32>) -> tensor<2x128x128xbf16>
  %dq = "trn.matmul"(%sb, %k) : (tensor<2x128x128xbf16>, tensor<2x128x32xbf16>) -> tensor<2x128x32xf32>
  %dqb = "trn.convert"(%dq) : (tensor<2x128x32xf32>) -> tensor<2x128x32xbf16>
  %dkt = "trn.matmul"(%qt, %sb) : (tensor<2x32x128xbf16>, tensor<2x128x128xbf16>) -> tensor<2x32x128xf32>
  %dktb = "trn.convert"(%dkt) : (tensor<2x32x128xf32>) -> tensor<2x32x128xbf16>
  return %dqb, %dktb, %dvb : tensor<2x128x32xbf16>, tensor<2x32x128xbf16>, tensor<2x128x32xbf16>
}

// -----

// Tests that a reshape between a matmul and a unary elementwise op sinks below the op, so the
// op joins the matmul's epilogue (Linear -> view -> GELU), while a reshape whose unary chain
// is reduced stays where it is (the rows keep the reduction's shape); and that a convert of a
// broadcast per-channel vector converts the vector, then broadcasts it.
// CHECK-LABEL: func.func @linear_view_gelu
// CHECK: "trn.kernel"() ({
// CHECK-NEXT: "trn.matmul"
// CHECK-NEXT: "trn.activation"({{.*}}func = "gelu"
// CHECK: }) {kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NEXT: "trn.reshape"
// CHECK-NEXT: return
// CHECK-LABEL: func.func @view_scaled_then_reduced
// CHECK: %[[MM:.*]] = "trn.kernel"() ({
// CHECK-NEXT: "trn.matmul"
// CHECK-NEXT: "trn.yield"
// CHECK: "trn.reshape"(%[[MM]])
// CHECK-NEXT: "trn.tensor_scalar"
// CHECK-LABEL: func.func @convert_of_broadcast
// CHECK: "trn.convert"(%arg1) {{.*}} -> tensor<8xf32>
// CHECK: "trn.broadcast"
// CHECK-SAME: -> tensor<2x8x16xf32>
func.func @linear_view_gelu(%x: tensor<64x32xf32>, %w: tensor<32x96xf32>) -> tensor<2x32x96xf32> {
  %y = "trn.matmul"(%x, %w) : (tensor<64x32xf32>, tensor<32x96xf32>) -> tensor<64x96xf32>
  %v = "trn.reshape"(%y) : (tensor<64x96xf32>) -> tensor<2x32x96xf32>
  %g = "trn.activation"(%v) {bias = 0.000000e+00 : f32, func = "gelu", scale = 1.000000e+00 : f32} : (tensor<2x32x96xf32>) -> tensor<2x32x96xf32>
  return %g : tensor<2x32x96xf32>
}
func.func @view_scaled_then_reduced(%x: tensor<64x32xf32>, %w: tensor<32x96xf32>) -> tensor<2x32xf32> {
  %y = "trn.matmul"(%x, %w) : (tensor<64x32xf32>, tensor<32x96xf32>) -> tensor<64x96xf32>
  %v = "trn.reshape"(%y) : (tensor<64x96xf32>) -> tensor<2x32x96xf32>
  %s = "trn.tensor_scalar"(%v) {op = "mul", reverse = false, scalar = 1.250000e-01 : f32} : (tensor<2x32x96xf32>) -> tensor<2x32x96xf32>
  %m = "trn.reduce"(%s) {op = "max", dimensions = array<i64: 2>} : (tensor<2x32x96xf32>) -> tensor<2x32xf32>
  return %m : tensor<2x32xf32>
}
func.func @convert_of_broadcast(%x: tensor<2x8x16xf32>, %scale: tensor<8xbf16>) -> tensor<2x8x16xf32> {
  %b = "trn.broadcast"(%scale) {dimensions = array<i64: 0, 2>} : (tensor<8xbf16>) -> tensor<2x8x16xbf16>
  %c = "trn.convert"(%b) : (tensor<2x8x16xbf16>) -> tensor<2x8x16xf32>
  %y = "trn.tensor_tensor"(%x, %c) {op = "mul"} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return %y : tensor<2x8x16xf32>
}

// -----

// Tests that a matmul of bf16 values widened to fp32 (then viewed) reads the bf16 values
// through the same views: PE widens its inputs exactly and accumulates in fp32 either way.
// The widening converts, read by nothing else, go away.
// CHECK-LABEL: func.func @widened
// CHECK-NOT: "trn.convert"
// CHECK: "trn.transpose"(%arg1) {{.*}} -> tensor<2x8x16xbf16>
// CHECK-NEXT: "trn.matmul"(%arg0, %{{.*}}) : (tensor<2x16x8xbf16>, tensor<2x8x16xbf16>) -> tensor<2x16x16xf32>
func.func @widened(%q: tensor<2x16x8xbf16>, %k: tensor<2x16x8xbf16>) -> tensor<2x16x16xf32> {
  %qf = "trn.convert"(%q) : (tensor<2x16x8xbf16>) -> tensor<2x16x8xf32>
  %kf = "trn.convert"(%k) : (tensor<2x16x8xbf16>) -> tensor<2x16x8xf32>
  %kt = "trn.transpose"(%kf) {permutation = array<i64: 0, 2, 1>} : (tensor<2x16x8xf32>) -> tensor<2x8x16xf32>
  %s = "trn.matmul"(%qf, %kt) : (tensor<2x16x8xf32>, tensor<2x8x16xf32>) -> tensor<2x16x16xf32>
  return %s : tensor<2x16x16xf32>
}

// -----

// Tests that beside an fp32 operand a widened bf16 one is read narrow (PE widens it exactly;
// the product stays fp32 x fp32), so no widening kernel runs; an fp32 operand is kept as is.
// CHECK-LABEL: func.func @widened_beside_fp32
// CHECK-NOT: "trn.convert"
// CHECK: "trn.matmul"(%arg0, %arg1) : (tensor<2x16x16xf32>, tensor<2x16x8xbf16>) -> tensor<2x16x8xf32>
func.func @widened_beside_fp32(%p: tensor<2x16x16xf32>, %v: tensor<2x16x8xbf16>) -> tensor<2x16x8xf32> {
  %vf = "trn.convert"(%v) : (tensor<2x16x8xbf16>) -> tensor<2x16x8xf32>
  %o = "trn.matmul"(%p, %vf) : (tensor<2x16x16xf32>, tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  return %o : tensor<2x16x8xf32>
}


// -----

// Tests that an elementwise kernel read only by a matmul's epilogue (GELU's derivative at the
// pre-activation, multiplied into the gradient dY @ W) is merged into the matmul kernel, its
// ops first; that a multiply by a constant feeding an activation of scale 1 becomes that
// activation's scale; and that the bf16 -> fp32 -> (rounding elided) chain leaves no convert
// to the value's own type. Off, the two kernels stay apart.
// CHECK-LABEL: func.func @gelu_backward
// CHECK: "trn.kernel"() ({
// CHECK-NEXT: %[[X:.*]] = "trn.convert"(%arg2) : (tensor<128x256xbf16>) -> tensor<128x256xf32>
// CHECK-NEXT: "trn.activation"(%[[X]]) {{.*}}func = "erf", scale = 0.707106769
// CHECK-NEXT: "trn.tensor_tensor"(%[[X]], %[[X]]) {op = "mul"}
// CHECK-NEXT: %[[D:.*]] = "trn.tensor_tensor"
// CHECK-NEXT: "trn.transpose"(%arg0)
// CHECK-NEXT: %[[MM:.*]] = "trn.matmul"
// CHECK-NEXT: %[[G:.*]] = "trn.tensor_tensor"(%[[MM]], %[[D]]) {op = "mul"}
// CHECK-NEXT: %[[R:.*]] = "trn.convert"(%[[G]]) : (tensor<128x256xf32>) -> tensor<128x256xbf16>
// CHECK-NEXT: "trn.yield"(%[[R]])
// CHECK-NEXT: }) {kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NOT: "trn.kernel"
// NOPROD-LABEL: func.func @gelu_backward
// NOPROD-DAG: kind = "matmul"
// NOPROD-DAG: kind = "elementwise"
func.func @gelu_backward(%w: tensor<256x128xbf16>, %dy: tensor<128x128xbf16>, %x: tensor<128x256xbf16>) -> tensor<128x256xbf16> {
  %t = "trn.transpose"(%w) {permutation = array<i64: 1, 0>} : (tensor<256x128xbf16>) -> tensor<128x256xbf16>
  %mm = "trn.matmul"(%dy, %t) : (tensor<128x128xbf16>, tensor<128x256xbf16>) -> tensor<128x256xf32>
  %mmb = "trn.convert"(%mm) : (tensor<128x256xf32>) -> tensor<128x256xbf16>
  %mmf = "trn.convert"(%mmb) : (tensor<128x256xbf16>) -> tensor<128x256xf32>
  %c = "trn.convert"(%x) : (tensor<128x256xbf16>) -> tensor<128x256xf32>
  %m = "trn.tensor_scalar"(%c) {op = "mul", reverse = false, scalar = 0.707106769 : f32} : (tensor<128x256xf32>) -> tensor<128x256xf32>
  %e = "trn.activation"(%m) {bias = 0.0 : f32, func = "erf", scale = 1.0 : f32} : (tensor<128x256xf32>) -> tensor<128x256xf32>
  %sq = "trn.tensor_tensor"(%c, %c) {op = "mul"} : (tensor<128x256xf32>, tensor<128x256xf32>) -> tensor<128x256xf32>
  %d = "trn.tensor_tensor"(%e, %sq) {op = "add"} : (tensor<128x256xf32>, tensor<128x256xf32>) -> tensor<128x256xf32>
  %g = "trn.tensor_tensor"(%mmf, %d) {op = "mul"} : (tensor<128x256xf32>, tensor<128x256xf32>) -> tensor<128x256xf32>
  %r = "trn.convert"(%g) : (tensor<128x256xf32>) -> tensor<128x256xbf16>
  return %r : tensor<128x256xbf16>
}


// Tests that an elementwise kernel read through a reshape to the matmul's shape (GELU's
// derivative over [batch, tokens, hidden] in a backward) is rebuilt in that shape, its input
// read through a reshape, and joins the epilogue.
// CHECK-LABEL: func.func @gelu_backward_batched
// CHECK: "trn.kernel"() ({
// CHECK-NEXT: %[[X:.*]] = "trn.reshape"(%arg2) : (tensor<2x64x256xbf16>) -> tensor<128x256xbf16>
// CHECK-NEXT: %[[C:.*]] = "trn.convert"(%[[X]]) : (tensor<128x256xbf16>) -> tensor<128x256xf32>
// CHECK-NEXT: "trn.activation"(%[[C]]) {{.*}}func = "erf"
// CHECK-NEXT: "trn.tensor_tensor"(%[[C]], %[[C]]) {op = "mul"}
// CHECK-NEXT: %[[D:.*]] = "trn.tensor_tensor"
// CHECK-NEXT: "trn.transpose"(%arg0)
// CHECK-NEXT: %[[MM:.*]] = "trn.matmul"
// CHECK-NEXT: "trn.tensor_tensor"(%[[MM]], %[[D]]) {op = "mul"}
// CHECK: }) {kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NOT: "trn.kernel"
// NOPROD-LABEL: func.func @gelu_backward_batched
// NOPROD: kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x64x256xf32>
// NOPROD: kind = "matmul"
func.func @gelu_backward_batched(%w: tensor<256x128xbf16>, %dy: tensor<128x128xbf16>, %x: tensor<2x64x256xbf16>) -> tensor<128x256xbf16> {
  %t = "trn.transpose"(%w) {permutation = array<i64: 1, 0>} : (tensor<256x128xbf16>) -> tensor<128x256xbf16>
  %mm = "trn.matmul"(%dy, %t) : (tensor<128x128xbf16>, tensor<128x256xbf16>) -> tensor<128x256xf32>
  %c = "trn.convert"(%x) : (tensor<2x64x256xbf16>) -> tensor<2x64x256xf32>
  %e = "trn.activation"(%c) {bias = 0.0 : f32, func = "erf", scale = 0.707106769 : f32} : (tensor<2x64x256xf32>) -> tensor<2x64x256xf32>
  %sq = "trn.tensor_tensor"(%c, %c) {op = "mul"} : (tensor<2x64x256xf32>, tensor<2x64x256xf32>) -> tensor<2x64x256xf32>
  %d = "trn.tensor_tensor"(%e, %sq) {op = "add"} : (tensor<2x64x256xf32>, tensor<2x64x256xf32>) -> tensor<2x64x256xf32>
  %dr = "trn.reshape"(%d) : (tensor<2x64x256xf32>) -> tensor<128x256xf32>
  %g = "trn.tensor_tensor"(%mm, %dr) {op = "mul"} : (tensor<128x256xf32>, tensor<128x256xf32>) -> tensor<128x256xf32>
  %r = "trn.convert"(%g) : (tensor<128x256xf32>) -> tensor<128x256xbf16>
  return %r : tensor<128x256xbf16>
}

// -----

// Tests that Linear - GELU - Linear becomes one mlp kernel: the first matmul with its bias
// (constant along the token rows) and activation, then the second matmul reading the hidden
// activation inside the kernel. Off, the two matmul kernels stay apart.
// CHECK-LABEL: func.func @mlp
// CHECK: "trn.kernel"() ({
// CHECK: "trn.matmul"(%arg0,
// CHECK: "trn.activation"({{.*}}func = "gelu"
// CHECK: %[[H:.*]] = "trn.convert"({{.*}}) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
// CHECK: "trn.matmul"(%[[H]],
// CHECK: }) {kind = "mlp", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NOT: "trn.kernel"
// NOMLP-LABEL: func.func @mlp
// NOMLP-COUNT-2: kind = "matmul"
// NOMLP-NOT: kind = "mlp"
func.func @mlp(%x: tensor<256x128xbf16>, %w1: tensor<512x128xbf16>, %b1: tensor<512xbf16>, %w2: tensor<128x512xbf16>) -> tensor<256x128xbf16> {
  %w1t = "trn.transpose"(%w1) {permutation = array<i64: 1, 0>} : (tensor<512x128xbf16>) -> tensor<128x512xbf16>
  %h = "trn.matmul"(%x, %w1t) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
  %bb = "trn.broadcast"(%b1) {dimensions = array<i64: 0>} : (tensor<512xbf16>) -> tensor<256x512xbf16>
  %hb = "trn.tensor_tensor"(%h, %bb) {op = "add"} : (tensor<256x512xf32>, tensor<256x512xbf16>) -> tensor<256x512xf32>
  %g = "trn.activation"(%hb) {bias = 0.0 : f32, func = "gelu", scale = 1.0 : f32} : (tensor<256x512xf32>) -> tensor<256x512xf32>
  %gb = "trn.convert"(%g) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
  %w2t = "trn.transpose"(%w2) {permutation = array<i64: 1, 0>} : (tensor<128x512xbf16>) -> tensor<512x128xbf16>
  %y = "trn.matmul"(%gb, %w2t) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
  %yb = "trn.convert"(%y) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
  return %yb : tensor<256x128xbf16>
}

// -----

// Tests that Linear - GELU - Linear whose hidden activation and pre-activation the function
// also returns (a training step's forward saves them) becomes one mlp_saved kernel: the
// first Linear's ops (the op computing the hidden activation marked trn.producer_result),
// then the second's; it yields the second's result, then the first kernel's results. Off,
// the two matmul kernels stay apart.
// CHECK-LABEL: func.func @mlp_saved
// CHECK-NEXT: %[[K:.*]]:3 = "trn.kernel"() ({
// CHECK: %[[PRE:.*]] = "trn.convert"(%{{.*}}) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
// CHECK-NEXT: "trn.activation"(%[[PRE]]) {{.*}}func = "gelu"
// CHECK-NEXT: %[[H:.*]] = "trn.convert"(%{{.*}}) {trn.producer_result} : (tensor<256x512xf32>) -> tensor<256x512xbf16>
// CHECK: %[[Y:.*]] = "trn.matmul"(%[[H]], %{{.*}})
// CHECK-NEXT: %[[YB:.*]] = "trn.convert"(%[[Y]])
// CHECK-NEXT: "trn.yield"(%[[YB]], %[[H]], %[[PRE]])
// CHECK-NEXT: }) {kind = "mlp_saved", resultSegmentSizes = array<i32: 1, 2, 0>} : () -> (tensor<256x128xbf16>, tensor<256x512xbf16>, tensor<256x512xbf16>)
// CHECK-NEXT: return %[[K]]#0, %[[K]]#2, %[[K]]#1
// NOMLPSAVED-LABEL: func.func @mlp_saved
// NOMLPSAVED: }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<256x512xbf16>, tensor<256x512xbf16>)
// NOMLPSAVED: }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x128xbf16>
func.func @mlp_saved(%x: tensor<256x128xbf16>, %w1: tensor<512x128xbf16>, %b1: tensor<512xbf16>, %w2: tensor<128x512xbf16>) -> (tensor<256x128xbf16>, tensor<256x512xbf16>, tensor<256x512xbf16>) {
  %w1t = "trn.transpose"(%w1) {permutation = array<i64: 1, 0>} : (tensor<512x128xbf16>) -> tensor<128x512xbf16>
  %h = "trn.matmul"(%x, %w1t) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
  %bb = "trn.broadcast"(%b1) {dimensions = array<i64: 0>} : (tensor<512xbf16>) -> tensor<256x512xbf16>
  %hb = "trn.tensor_tensor"(%h, %bb) {op = "add"} : (tensor<256x512xf32>, tensor<256x512xbf16>) -> tensor<256x512xf32>
  %hr = "trn.convert"(%hb) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
  %g = "trn.activation"(%hr) {bias = 0.0 : f32, func = "gelu", scale = 1.0 : f32} : (tensor<256x512xbf16>) -> tensor<256x512xf32>
  %gb = "trn.convert"(%g) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
  %w2t = "trn.transpose"(%w2) {permutation = array<i64: 1, 0>} : (tensor<128x512xbf16>) -> tensor<512x128xbf16>
  %y = "trn.matmul"(%gb, %w2t) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
  %yb = "trn.convert"(%y) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
  return %yb, %hr, %gb : tensor<256x128xbf16>, tensor<256x512xbf16>, tensor<256x512xbf16>
}

// -----

// Tests that where a kernel standing between the two Linears reads the first one's result
// too (a backward's bias gradient of the hidden activation's gradient), the mlp_saved kernel
// takes the first Linear's place, ahead of that reader, the second Linear reading nothing
// computed in between.
// CHECK-LABEL: func.func @mlp_saved_before_a_reader
// CHECK-NEXT: %[[K:.*]]:2 = "trn.kernel"() ({
// CHECK: }) {kind = "mlp_saved", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<256x128xbf16>, tensor<256x512xbf16>)
// CHECK-NEXT: %[[S:.*]] = "trn.kernel"() ({
// CHECK-NEXT: "trn.reduce"(%[[K]]#1)
// CHECK: return %[[K]]#0, %[[S]]
// NOMLPSAVED-LABEL: func.func @mlp_saved_before_a_reader
// NOMLPSAVED-NOT: mlp_saved
// NOMLPSAVED: return
func.func @mlp_saved_before_a_reader(%dy: tensor<256x128xbf16>, %w2: tensor<128x512xbf16>, %w1: tensor<512x128xbf16>) -> (tensor<256x128xbf16>, tensor<512xf32>) {
  %h = "trn.matmul"(%dy, %w2) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
  %hb = "trn.convert"(%h) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
  %s = "trn.reduce"(%hb) {dimensions = array<i64: 0>, op = "add"} : (tensor<256x512xbf16>) -> tensor<512xf32>
  %y = "trn.matmul"(%hb, %w1) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
  %yb = "trn.convert"(%y) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
  return %yb, %s : tensor<256x128xbf16>, tensor<512xf32>
}

// -----

// Tests that where the only other reader of an mlp_saved kernel's hidden value H is its weight
// gradient (a backward's dW1 = H^T @ X, with its bias gradient, H summed over the tokens),
// the gradient joins the kernel: its ops come after the second Linear's, the first marked
// trn.saved_gradient, reading H as the kernel computes it; the kernel yields the second
// Linear's result, then the gradient and the sums, and H is no result of it.
// CHECK-LABEL: func.func @mlp_saved_gradient
// CHECK-NEXT: %[[K:.*]]:3 = "trn.kernel"() ({
// CHECK: %[[H:.*]] = "trn.convert"({{.*}}) {trn.producer_result}
// CHECK: %[[Y:.*]] = "trn.matmul"(%[[H]], %arg2)
// CHECK: %[[HT:.*]] = "trn.transpose"(%[[H]]) {permutation = array<i64: 1, 0>, trn.saved_gradient}
// CHECK-NEXT: %[[G:.*]] = "trn.matmul"(%[[HT]], %arg3)
// CHECK: "trn.reduce"(%[[H]])
// CHECK: }) {kind = "mlp_saved", resultSegmentSizes = array<i32: 1, 1, 1>} : () -> (tensor<256x128xbf16>, tensor<512x128xbf16>, tensor<512xbf16>)
// CHECK-NEXT: return %[[K]]#0, %[[K]]#1, %[[K]]#2
// NOSAVEDGRAD-LABEL: func.func @mlp_saved_gradient
// NOSAVEDGRAD: }) {kind = "mlp_saved", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<256x128xbf16>, tensor<256x512xbf16>)
// NOSAVEDGRAD: }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<512x128xbf16>, tensor<512xbf16>)
// NOSAVEDGRAD-NOT: saved_gradient
// NOSAVEDGRAD: return
func.func @mlp_saved_gradient(%dy: tensor<256x128xbf16>, %w2: tensor<128x512xbf16>, %w1: tensor<512x128xbf16>, %x: tensor<256x128xbf16>) -> (tensor<256x128xbf16>, tensor<512x128xbf16>, tensor<512xbf16>) {
  %h = "trn.matmul"(%dy, %w2) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
  %hb = "trn.convert"(%h) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
  %y = "trn.matmul"(%hb, %w1) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
  %yb = "trn.convert"(%y) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
  %ht = "trn.transpose"(%hb) {permutation = array<i64: 1, 0>} : (tensor<256x512xbf16>) -> tensor<512x256xbf16>
  %g = "trn.matmul"(%ht, %x) : (tensor<512x256xbf16>, tensor<256x128xbf16>) -> tensor<512x128xf32>
  %gb = "trn.convert"(%g) : (tensor<512x128xf32>) -> tensor<512x128xbf16>
  %s = "trn.reduce"(%hb) {dimensions = array<i64: 0>, op = "add"} : (tensor<256x512xbf16>) -> tensor<512xf32>
  %sb = "trn.convert"(%s) : (tensor<512xf32>) -> tensor<512xbf16>
  return %yb, %gb, %sb : tensor<256x128xbf16>, tensor<512x128xbf16>, tensor<512xbf16>
}

// -----

// Tests that the weight gradient stays a kernel of its own where all of H's rows would not
// fit SBUF beside the resident weights (8192 tokens of 1536 hidden units: 192 KiB of rows per
// partition): H is stored by the mlp_saved kernel and loaded by the gradient's.
// CHECK-LABEL: func.func @mlp_saved_gradient_rows_too_large
// CHECK: }) {kind = "mlp_saved", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<8192x256xbf16>, tensor<8192x1536xbf16>)
// CHECK: }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<1536x256xbf16>
// CHECK-NOT: saved_gradient
// CHECK: return
func.func @mlp_saved_gradient_rows_too_large(%dy: tensor<8192x256xbf16>, %w2: tensor<256x1536xbf16>, %w1: tensor<1536x256xbf16>, %x: tensor<8192x256xbf16>) -> (tensor<8192x256xbf16>, tensor<1536x256xbf16>) {
  %h = "trn.matmul"(%dy, %w2) : (tensor<8192x256xbf16>, tensor<256x1536xbf16>) -> tensor<8192x1536xf32>
  %hb = "trn.convert"(%h) : (tensor<8192x1536xf32>) -> tensor<8192x1536xbf16>
  %y = "trn.matmul"(%hb, %w1) : (tensor<8192x1536xbf16>, tensor<1536x256xbf16>) -> tensor<8192x256xf32>
  %yb = "trn.convert"(%y) : (tensor<8192x256xf32>) -> tensor<8192x256xbf16>
  %ht = "trn.transpose"(%hb) {permutation = array<i64: 1, 0>} : (tensor<8192x1536xbf16>) -> tensor<1536x8192xbf16>
  %g = "trn.matmul"(%ht, %x) : (tensor<1536x8192xbf16>, tensor<8192x256xbf16>) -> tensor<1536x256xf32>
  %gb = "trn.convert"(%g) : (tensor<1536x256xf32>) -> tensor<1536x256xbf16>
  return %yb, %gb : tensor<8192x256xbf16>, tensor<1536x256xbf16>
}

// -----

// Tests that the mlp kernel also forms over batched tokens ([batch, tokens, features], as
// Linear - GELU - Linear on a 3-D input traces): the GELU runs on a 3-D view of the first
// addmm's result, and the second addmm reads a 2-D view of that. Once the GELU moves into the
// matmul's shape, the two views are a round trip that folds away.
// CHECK-LABEL: func.func @mlp_batched_tokens
// CHECK: "trn.kernel"() ({
// CHECK: "trn.activation"({{.*}}func = "gelu"
// CHECK: %[[H:.*]] = "trn.convert"({{.*}}) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
// CHECK-NEXT: "trn.matmul"(%[[H]],
// CHECK: }) {kind = "mlp", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NOT: "trn.kernel"
// NOMLP-LABEL: func.func @mlp_batched_tokens
// NOMLP-NOT: kind = "mlp"
func.func @mlp_batched_tokens(%x: tensor<2x128x128xbf16>, %w1: tensor<128x512xbf16>, %w2: tensor<512x128xbf16>) -> tensor<2x128x128xbf16> {
  %x2 = "trn.reshape"(%x) : (tensor<2x128x128xbf16>) -> tensor<256x128xbf16>
  %h = "trn.matmul"(%x2, %w1) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
  %hb = "trn.convert"(%h) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
  %h3 = "trn.reshape"(%hb) : (tensor<256x512xbf16>) -> tensor<2x128x512xbf16>
  %h3f = "trn.convert"(%h3) : (tensor<2x128x512xbf16>) -> tensor<2x128x512xf32>
  %g = "trn.activation"(%h3f) {bias = 0.0 : f32, func = "gelu", scale = 1.0 : f32} : (tensor<2x128x512xf32>) -> tensor<2x128x512xf32>
  %gb = "trn.convert"(%g) : (tensor<2x128x512xf32>) -> tensor<2x128x512xbf16>
  %g2 = "trn.reshape"(%gb) : (tensor<2x128x512xbf16>) -> tensor<256x512xbf16>
  %y = "trn.matmul"(%g2, %w2) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
  %yb = "trn.convert"(%y) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
  %y3 = "trn.reshape"(%yb) : (tensor<256x128xbf16>) -> tensor<2x128x128xbf16>
  return %y3 : tensor<2x128x128xbf16>
}

// -----

// Tests that an mlp kernel whose output only a row-wise kernel reads, over rows of its output
// features (a post-norm FFN: the bias and residual adds and a norm after it), joins that
// kernel: the mlp's ops first, the last one marked trn.producer_result, then the rows'.
// (The hidden dim is too wide
// to stage for matmul_rows, which would take the second matmul first.) Off, the mlp and
// rows kernels stay apart.
// CHECK-LABEL: func.func @mlp_rows
// CHECK: "trn.kernel"() ({
// CHECK: "trn.matmul"(%arg0, %arg1)
// CHECK: %[[H:.*]] = "trn.convert"({{.*}}) : (tensor<1024x3072xf32>) -> tensor<1024x3072xbf16>
// CHECK: %[[Y:.*]] = "trn.matmul"(%[[H]], %arg2)
// CHECK: %[[YB:.*]] = "trn.convert"(%[[Y]]) {trn.producer_result}
// CHECK: "trn.tensor_tensor"({{.*}}, %[[YB]]) {op = "add"}
// CHECK: "trn.reduce"
// CHECK: }) {kind = "mlp_rows", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NOT: "trn.kernel"
// NOMLPROWS-LABEL: func.func @mlp_rows
// NOMLPROWS: kind = "mlp"
// NOMLPROWS: kind = "rows"
// NOMLPROWS-NOT: kind = "mlp_rows"
func.func @mlp_rows(%x: tensor<1024x256xbf16>, %w1: tensor<256x3072xbf16>, %w2: tensor<3072x256xbf16>, %b2: tensor<256xbf16>) -> tensor<1024x256xbf16> {
  %h = "trn.matmul"(%x, %w1) : (tensor<1024x256xbf16>, tensor<256x3072xbf16>) -> tensor<1024x3072xf32>
  %hb = "trn.convert"(%h) : (tensor<1024x3072xf32>) -> tensor<1024x3072xbf16>
  %g = "trn.activation"(%hb) {bias = 0.0 : f32, func = "gelu", scale = 1.0 : f32} : (tensor<1024x3072xbf16>) -> tensor<1024x3072xf32>
  %gb = "trn.convert"(%g) : (tensor<1024x3072xf32>) -> tensor<1024x3072xbf16>
  %y = "trn.matmul"(%gb, %w2) : (tensor<1024x3072xbf16>, tensor<3072x256xbf16>) -> tensor<1024x256xf32>
  %yb = "trn.convert"(%y) : (tensor<1024x256xf32>) -> tensor<1024x256xbf16>
  %bb = "trn.broadcast"(%b2) {dimensions = array<i64: 0>} : (tensor<256xbf16>) -> tensor<1024x256xbf16>
  %z = "trn.tensor_tensor"(%bb, %yb) {op = "add"} : (tensor<1024x256xbf16>, tensor<1024x256xbf16>) -> tensor<1024x256xf32>
  %zb = "trn.convert"(%z) : (tensor<1024x256xf32>) -> tensor<1024x256xbf16>
  %r = "trn.tensor_tensor"(%x, %zb) {op = "add"} : (tensor<1024x256xbf16>, tensor<1024x256xbf16>) -> tensor<1024x256xf32>
  %rb = "trn.convert"(%r) : (tensor<1024x256xf32>) -> tensor<1024x256xbf16>
  %s = "trn.reduce"(%rb) {dimensions = array<i64: 1>, op = "add"} : (tensor<1024x256xbf16>) -> tensor<1024xbf16>
  %m = "trn.tensor_scalar"(%s) {op = "mul", reverse = false, scalar = 3.906250e-03 : f32} : (tensor<1024xbf16>) -> tensor<1024xf32>
  %mb = "trn.convert"(%m) : (tensor<1024xf32>) -> tensor<1024xbf16>
  %mm = "trn.broadcast"(%mb) {dimensions = array<i64: 1>} : (tensor<1024xbf16>) -> tensor<1024x256xbf16>
  %c = "trn.tensor_tensor"(%rb, %mm) {op = "sub"} : (tensor<1024x256xbf16>, tensor<1024x256xbf16>) -> tensor<1024x256xf32>
  %cb = "trn.convert"(%c) : (tensor<1024x256xf32>) -> tensor<1024x256xbf16>
  return %cb : tensor<1024x256xbf16>
}

// -----

// Tests that a Linear (a matmul kernel with its bias) whose output only a row-wise kernel
// reads, through a reshape, over rows of its output features (an attention block's output
// projection, then the residual add and a norm) joins that kernel, its last op marked
// trn.producer_result. Off, the two stay apart.
// CHECK-LABEL: func.func @linear_rows
// CHECK: "trn.kernel"() ({
// CHECK: %[[Y:.*]] = "trn.matmul"(%arg0, %arg1)
// CHECK: %[[Z:.*]] = "trn.tensor_tensor"({{.*}}, %[[Y]]) {op = "add"}
// CHECK: %[[ZB:.*]] = "trn.convert"(%[[Z]]) {trn.producer_result}
// CHECK: "trn.reshape"(%[[ZB]])
// CHECK: "trn.reduce"
// CHECK: }) {kind = "linear_rows", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NOT: "trn.kernel"
// NOLINROWS-LABEL: func.func @linear_rows
// NOLINROWS: kind = "matmul"
// NOLINROWS: kind = "rows"
// NOLINROWS-NOT: kind = "linear_rows"
func.func @linear_rows(%a: tensor<1024x768xbf16>, %w: tensor<768x256xbf16>, %b: tensor<256xbf16>, %x: tensor<4x256x256xbf16>) -> tensor<4x256x256xbf16> {
  %y = "trn.matmul"(%a, %w) : (tensor<1024x768xbf16>, tensor<768x256xbf16>) -> tensor<1024x256xf32>
  %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<256xbf16>) -> tensor<1024x256xbf16>
  %z = "trn.tensor_tensor"(%bb, %y) {op = "add"} : (tensor<1024x256xbf16>, tensor<1024x256xf32>) -> tensor<1024x256xf32>
  %zb = "trn.convert"(%z) : (tensor<1024x256xf32>) -> tensor<1024x256xbf16>
  %z3 = "trn.reshape"(%zb) : (tensor<1024x256xbf16>) -> tensor<4x256x256xbf16>
  %r = "trn.tensor_tensor"(%x, %z3) {op = "add"} : (tensor<4x256x256xbf16>, tensor<4x256x256xbf16>) -> tensor<4x256x256xf32>
  %rb = "trn.convert"(%r) : (tensor<4x256x256xf32>) -> tensor<4x256x256xbf16>
  %s = "trn.reduce"(%rb) {dimensions = array<i64: 2>, op = "add"} : (tensor<4x256x256xbf16>) -> tensor<4x256xbf16>
  %m = "trn.tensor_scalar"(%s) {op = "mul", reverse = false, scalar = 3.906250e-03 : f32} : (tensor<4x256xbf16>) -> tensor<4x256xf32>
  %mb = "trn.convert"(%m) : (tensor<4x256xf32>) -> tensor<4x256xbf16>
  %mm = "trn.broadcast"(%mb) {dimensions = array<i64: 2>} : (tensor<4x256xbf16>) -> tensor<4x256x256xbf16>
  %c = "trn.tensor_tensor"(%rb, %mm) {op = "sub"} : (tensor<4x256x256xbf16>, tensor<4x256x256xbf16>) -> tensor<4x256x256xf32>
  %cb = "trn.convert"(%c) : (tensor<4x256x256xf32>) -> tensor<4x256x256xbf16>
  return %cb : tensor<4x256x256xbf16>
}

// -----

// Tests that a matmul whose result the row-wise kernel reads through a reshape and then a
// transpose does not join it as a matmul_rows kernel: the lowering locates a row tile's
// values by their row-major position, which the transpose does not keep.
// CHECK-LABEL: func.func @matmul_rows_transposed
// CHECK: kind = "matmul"
// CHECK: kind = "rows"
// CHECK-NOT: kind = "matmul_rows"
func.func @matmul_rows_transposed(%a: tensor<256x64xf32>, %w: tensor<64x64xf32>) -> tensor<2x128x64xf32> {
  %y = "trn.matmul"(%a, %w) : (tensor<256x64xf32>, tensor<64x64xf32>) -> tensor<256x64xf32>
  %y3 = "trn.reshape"(%y) : (tensor<256x64xf32>) -> tensor<128x2x64xf32>
  %yt = "trn.transpose"(%y3) {permutation = array<i64: 1, 0, 2>} : (tensor<128x2x64xf32>) -> tensor<2x128x64xf32>
  %m = "trn.reduce"(%yt) {op = "max", dimensions = array<i64: 2>} : (tensor<2x128x64xf32>) -> tensor<2x128xf32>
  %mb = "trn.broadcast"(%m) {dimensions = array<i64: 2>} : (tensor<2x128xf32>) -> tensor<2x128x64xf32>
  %d = "trn.tensor_tensor"(%yt, %mb) {op = "sub"} : (tensor<2x128x64xf32>, tensor<2x128x64xf32>) -> tensor<2x128x64xf32>
  return %d : tensor<2x128x64xf32>
}

// -----

// Tests that a Linear whose output the row-wise kernel reads through a reshape and then a
// transpose is not joined to it: the rows' tiles would not be whole rows of the Linear's
// output one after another.
// CHECK-LABEL: func.func @linear_rows_transposed
// CHECK: kind = "matmul"
// CHECK: kind = "rows"
// CHECK-NOT: kind = "linear_rows"
func.func @linear_rows_transposed(%a: tensor<1024x768xbf16>, %w: tensor<768x256xbf16>, %b: tensor<256xbf16>, %x: tensor<8x128x256xbf16>) -> tensor<8x128x256xbf16> {
  %y = "trn.matmul"(%a, %w) : (tensor<1024x768xbf16>, tensor<768x256xbf16>) -> tensor<1024x256xf32>
  %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<256xbf16>) -> tensor<1024x256xbf16>
  %z = "trn.tensor_tensor"(%bb, %y) {op = "add"} : (tensor<1024x256xbf16>, tensor<1024x256xf32>) -> tensor<1024x256xf32>
  %zb = "trn.convert"(%z) : (tensor<1024x256xf32>) -> tensor<1024x256xbf16>
  %z3 = "trn.reshape"(%zb) : (tensor<1024x256xbf16>) -> tensor<128x8x256xbf16>
  %zt = "trn.transpose"(%z3) {permutation = array<i64: 1, 0, 2>} : (tensor<128x8x256xbf16>) -> tensor<8x128x256xbf16>
  %r = "trn.tensor_tensor"(%x, %zt) {op = "add"} : (tensor<8x128x256xbf16>, tensor<8x128x256xbf16>) -> tensor<8x128x256xf32>
  %rb = "trn.convert"(%r) : (tensor<8x128x256xf32>) -> tensor<8x128x256xbf16>
  %s = "trn.reduce"(%rb) {dimensions = array<i64: 2>, op = "add"} : (tensor<8x128x256xbf16>) -> tensor<8x128xbf16>
  %m = "trn.tensor_scalar"(%s) {op = "mul", reverse = false, scalar = 3.906250e-03 : f32} : (tensor<8x128xbf16>) -> tensor<8x128xf32>
  %mb = "trn.convert"(%m) : (tensor<8x128xf32>) -> tensor<8x128xbf16>
  %mm = "trn.broadcast"(%mb) {dimensions = array<i64: 2>} : (tensor<8x128xbf16>) -> tensor<8x128x256xbf16>
  %c = "trn.tensor_tensor"(%rb, %mm) {op = "sub"} : (tensor<8x128x256xbf16>, tensor<8x128x256xbf16>) -> tensor<8x128x256xf32>
  %cb = "trn.convert"(%c) : (tensor<8x128x256xf32>) -> tensor<8x128x256xbf16>
  return %cb : tensor<8x128x256xbf16>
}

// -----

// Tests that a first matmul whose epilogue reads a value varying along the token rows (a
// residual) is not made an mlp kernel: with hidden units on partitions that operand would be
// read a column at a time.
// CHECK-LABEL: func.func @mlp_residual_first
// CHECK-NOT: kind = "mlp"
// CHECK: return
func.func @mlp_residual_first(%x: tensor<256x128xbf16>, %w1: tensor<128x512xbf16>, %r: tensor<256x512xbf16>, %w2: tensor<512x128xbf16>) -> tensor<256x128xbf16> {
  %h = "trn.matmul"(%x, %w1) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
  %hr = "trn.tensor_tensor"(%h, %r) {op = "add"} : (tensor<256x512xf32>, tensor<256x512xbf16>) -> tensor<256x512xf32>
  %hb = "trn.convert"(%hr) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
  %y = "trn.matmul"(%hb, %w2) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
  %yb = "trn.convert"(%y) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
  return %yb : tensor<256x128xbf16>
}

// ERR: fuse-invalid.mlir:3:8: error: 'trn.tensor_tensor' op operand #1 shape [4] differs from result shape [8]

// -----

// Tests that a DAG of GELU's tanh form after a Linear whose output is viewed 3-D joins the
// matmul's epilogue (its cubic coefficient is 0.0447, not GELU's 0.044715, so that it stays
// written out rather than becoming ACT's gelu_tanh): the view moves below the ops that read
// it (x^3, x + ..., 0.5 x: several users, each other operand a reshape from the same shape),
// and the DAG of ops that together consume every use of the matmul's value is evaluated with
// it, so only the DAG's result leaves the chip (and is viewed 3-D for the caller).
// CHECK-LABEL: func.func @gelu_new
// CHECK: "trn.kernel"() ({
// CHECK-NEXT: %[[M:.*]] = "trn.matmul"
// CHECK-DAG: "trn.tensor_scalar"(%[[M]]) {op = "mul"{{.*}}scalar = 5.000000e-01
// CHECK-DAG: "trn.tensor_scalar"(%[[M]]) {op = "pow"
// CHECK: "trn.tensor_tensor"(%[[M]], %{{.*}}) {op = "add"} : (tensor<256x512xf32>
// CHECK: "trn.activation"({{.*}}func = "tanh"
// CHECK: "trn.tensor_tensor"({{.*}}op = "mul"} : (tensor<256x512xf32>, tensor<256x512xf32>)
// CHECK: "trn.convert"
// CHECK-NEXT: "trn.yield"
// CHECK-NEXT: }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x512xbf16>
// CHECK-NEXT: %[[R:.*]] = "trn.reshape"
// CHECK-NEXT: return %[[R]] : tensor<1x256x512xbf16>
// KEEP-LABEL: func.func @gelu_new
// KEEP: "trn.kernel"
// KEEP: "trn.convert"(%{{.*}}) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
// KEEP: "trn.activation"({{.*}}func = "tanh"
// KEEP: }) {kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// KEEP-NEXT: "trn.reshape"
// KEEP-NEXT: return
// OFF-LABEL: func.func @gelu_new
// OFF-COUNT-10: "trn.kernel"
func.func @gelu_new(%x: tensor<256x128xbf16>, %w: tensor<128x512xbf16>) -> tensor<1x256x512xbf16> {
  %m = "trn.matmul"(%x, %w) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
  %c = "trn.convert"(%m) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
  %r = "trn.reshape"(%c) : (tensor<256x512xbf16>) -> tensor<1x256x512xbf16>
  %h = "trn.tensor_scalar"(%r) {op = "mul", reverse = false, scalar = 5.000000e-01 : f32} : (tensor<1x256x512xbf16>) -> tensor<1x256x512xf32>
  %p = "trn.tensor_scalar"(%r) {op = "pow", reverse = false, scalar = 3.000000e+00 : f32} : (tensor<1x256x512xbf16>) -> tensor<1x256x512xf32>
  %q = "trn.tensor_scalar"(%p) {op = "mul", reverse = false, scalar = 4.470000e-02 : f32} : (tensor<1x256x512xf32>) -> tensor<1x256x512xf32>
  %a = "trn.tensor_tensor"(%r, %q) {op = "add"} : (tensor<1x256x512xbf16>, tensor<1x256x512xf32>) -> tensor<1x256x512xf32>
  %b = "trn.tensor_scalar"(%a) {op = "mul", reverse = false, scalar = 0.797884583 : f32} : (tensor<1x256x512xf32>) -> tensor<1x256x512xf32>
  %t = "trn.activation"(%b) {bias = 0.000000e+00 : f32, func = "tanh", scale = 1.000000e+00 : f32} : (tensor<1x256x512xf32>) -> tensor<1x256x512xf32>
  %o = "trn.tensor_scalar"(%t) {op = "add", reverse = false, scalar = 1.000000e+00 : f32} : (tensor<1x256x512xf32>) -> tensor<1x256x512xf32>
  %g = "trn.tensor_tensor"(%h, %o) {op = "mul"} : (tensor<1x256x512xf32>, tensor<1x256x512xf32>) -> tensor<1x256x512xf32>
  %y = "trn.convert"(%g) : (tensor<1x256x512xf32>) -> tensor<1x256x512xbf16>
  return %y : tensor<1x256x512xbf16>
}

// -----

// Tests that a residual add of a Linear's output viewed 3-D joins the matmul's epilogue: the
// view moves below the add, whose other operand (an argument here) is read through a new
// 2-D reshape inside the kernel.
// CHECK-LABEL: func.func @residual_in_epilogue
// CHECK: "trn.kernel"() ({
// CHECK-NEXT: %[[R:.*]] = "trn.reshape"(%arg2) : (tensor<1x256x256xbf16>) -> tensor<256x256xbf16>
// CHECK-NEXT: %[[M:.*]] = "trn.matmul"
// CHECK-NEXT: "trn.tensor_tensor"(%[[R]], %[[M]]) {op = "add"} : (tensor<256x256xbf16>, tensor<256x256xf32>)
// CHECK: }) {kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NEXT: "trn.reshape"
// CHECK-NOT: "trn.kernel"
func.func @residual_in_epilogue(%x: tensor<256x128xbf16>, %w: tensor<128x256xbf16>, %res: tensor<1x256x256xbf16>) -> tensor<1x256x256xbf16> {
  %m = "trn.matmul"(%x, %w) : (tensor<256x128xbf16>, tensor<128x256xbf16>) -> tensor<256x256xf32>
  %c = "trn.convert"(%m) : (tensor<256x256xf32>) -> tensor<256x256xbf16>
  %v = "trn.reshape"(%c) : (tensor<256x256xbf16>) -> tensor<1x256x256xbf16>
  %a = "trn.tensor_tensor"(%res, %v) {op = "add"} : (tensor<1x256x256xbf16>, tensor<1x256x256xbf16>) -> tensor<1x256x256xf32>
  %y = "trn.convert"(%a) : (tensor<1x256x256xf32>) -> tensor<1x256x256xbf16>
  return %y : tensor<1x256x256xbf16>
}

// -----

// Tests that the same add read only by a reduction over its rows keeps the reduction's shape
// (a layer norm's rows take it in, as BERT's residual add).
// CHECK-LABEL: func.func @residual_into_norm
// CHECK: }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x256xbf16>
// CHECK: "trn.tensor_tensor"(%arg2, %{{.*}}) {op = "add"} : (tensor<1x256x256xbf16>, tensor<1x256x256xbf16>)
func.func @residual_into_norm(%x: tensor<256x128xbf16>, %w: tensor<128x256xbf16>, %res: tensor<1x256x256xbf16>) -> tensor<1x256xf32> {
  %m = "trn.matmul"(%x, %w) : (tensor<256x128xbf16>, tensor<128x256xbf16>) -> tensor<256x256xf32>
  %c = "trn.convert"(%m) : (tensor<256x256xf32>) -> tensor<256x256xbf16>
  %v = "trn.reshape"(%c) : (tensor<256x256xbf16>) -> tensor<1x256x256xbf16>
  %a = "trn.tensor_tensor"(%res, %v) {op = "add"} : (tensor<1x256x256xbf16>, tensor<1x256x256xbf16>) -> tensor<1x256x256xf32>
  %s = "trn.reduce"(%a) {op = "add", dimensions = array<i64: 2>} : (tensor<1x256x256xf32>) -> tensor<1x256xf32>
  return %s : tensor<1x256xf32>
}

// -----

// Tests that a residual sum read by a layer-norm-like row group and also outside it (GPT-2's,
// which the next residual add reads as well) is recomputed inside the row group (the add and
// its rounding), so the rows do not wait for the kernel that keeps it for the outside use.
// CHECK-LABEL: func.func @shared_residual
// CHECK: %[[KEPT:.*]] = "trn.kernel"() ({
// CHECK-NEXT: "trn.tensor_tensor"(%arg0, %arg1) {op = "add"}
// CHECK: }) {kind = "elementwise", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK: %[[ROWS:.*]] = "trn.kernel"() ({
// CHECK-NEXT: "trn.tensor_tensor"(%arg0, %arg1) {op = "add"}
// CHECK-NEXT: "trn.convert"
// CHECK-NEXT: "trn.reduce"
// CHECK: }) {kind = "rows", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK: return %[[ROWS]], %[[KEPT]]
func.func @shared_residual(%a: tensor<4x64xbf16>, %b: tensor<4x64xbf16>) -> (tensor<4x64xf32>, tensor<4x64xbf16>) {
  %s = "trn.tensor_tensor"(%a, %b) {op = "add"} : (tensor<4x64xbf16>, tensor<4x64xbf16>) -> tensor<4x64xf32>
  %c = "trn.convert"(%s) : (tensor<4x64xf32>) -> tensor<4x64xbf16>
  %m = "trn.reduce"(%c) {op = "add", dimensions = array<i64: 1>} : (tensor<4x64xbf16>) -> tensor<4xf32>
  %mb = "trn.broadcast"(%m) {dimensions = array<i64: 1>} : (tensor<4xf32>) -> tensor<4x64xf32>
  %d = "trn.tensor_tensor"(%c, %mb) {op = "sub"} : (tensor<4x64xbf16>, tensor<4x64xf32>) -> tensor<4x64xf32>
  return %d, %c : tensor<4x64xf32>, tensor<4x64xbf16>
}

// -----

// Tests that a residual sum read by a layer-norm-like row group and also outside it, one of
// whose operands is a Linear's output (GPT-2's), is added in that matmul's epilogue and
// stored once: the view moves below the add, the rows read the matmul kernel's result, and
// no kernel of its own loads both operands again. With epilogue-residuals=false the rows
// recompute the sum and an elementwise kernel stores it, as for @shared_residual.
// CHECK-LABEL: func.func @shared_residual_in_epilogue
// CHECK: %[[MM:.*]] = "trn.kernel"() ({
// CHECK-NEXT: %[[R:.*]] = "trn.reshape"(%arg2) : (tensor<1x256x256xbf16>) -> tensor<256x256xbf16>
// CHECK-NEXT: %[[M:.*]] = "trn.matmul"(%arg0, %arg1)
// CHECK-NEXT: "trn.tensor_tensor"(%[[M]], %[[R]]) {op = "add"}
// CHECK-NEXT: "trn.convert"
// CHECK-NEXT: "trn.yield"
// CHECK-NEXT: }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x256xbf16>
// CHECK-NEXT: %[[SUM:.*]] = "trn.reshape"(%[[MM]]) : (tensor<256x256xbf16>) -> tensor<1x256x256xbf16>
// CHECK-NEXT: %[[ROWS:.*]] = "trn.kernel"() ({
// CHECK-NEXT: "trn.reduce"(%[[SUM]])
// CHECK-NOT: "trn.tensor_tensor"({{.*}}) {op = "add"}
// CHECK: }) {kind = "rows", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NEXT: return %[[ROWS]], %[[SUM]]
// NORES-LABEL: func.func @shared_residual_in_epilogue
// NORES: }) {kind = "matmul", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NORES: %[[KEPT:.*]] = "trn.kernel"() ({
// NORES: "trn.tensor_tensor"({{.*}}, %arg2) {op = "add"}
// NORES: }) {kind = "elementwise", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NORES: %[[ROWS:.*]] = "trn.kernel"() ({
// NORES: "trn.tensor_tensor"({{.*}}, %arg2) {op = "add"}
// NORES: "trn.reduce"
// NORES: }) {kind = "rows", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NORES: return %[[ROWS]], %[[KEPT]]
func.func @shared_residual_in_epilogue(%x: tensor<256x128xbf16>, %w: tensor<128x256xbf16>, %res: tensor<1x256x256xbf16>) -> (tensor<1x256x256xf32>, tensor<1x256x256xbf16>) {
  %m = "trn.matmul"(%x, %w) : (tensor<256x128xbf16>, tensor<128x256xbf16>) -> tensor<256x256xf32>
  %c = "trn.convert"(%m) : (tensor<256x256xf32>) -> tensor<256x256xbf16>
  %v = "trn.reshape"(%c) : (tensor<256x256xbf16>) -> tensor<1x256x256xbf16>
  %a = "trn.tensor_tensor"(%v, %res) {op = "add"} : (tensor<1x256x256xbf16>, tensor<1x256x256xbf16>) -> tensor<1x256x256xf32>
  %s = "trn.convert"(%a) : (tensor<1x256x256xf32>) -> tensor<1x256x256xbf16>
  %r = "trn.reduce"(%s) {op = "add", dimensions = array<i64: 2>} : (tensor<1x256x256xbf16>) -> tensor<1x256xf32>
  %rb = "trn.broadcast"(%r) {dimensions = array<i64: 2>} : (tensor<1x256xf32>) -> tensor<1x256x256xf32>
  %d = "trn.tensor_tensor"(%s, %rb) {op = "sub"} : (tensor<1x256x256xbf16>, tensor<1x256x256xf32>) -> tensor<1x256x256xf32>
  return %d, %s : tensor<1x256x256xf32>, tensor<1x256x256xbf16>
}

// -----

// Tests layer norm's backward: one row-wise kernel holds both row reductions and computes
// the fp32 gradient and the normalised input from the bf16 inputs; it also sums dy * xhat and
// dy over the rows (the weight and bias gradients) and yields them after the input gradient.
// With column-sums=false, the weight and bias gradients are one reduction kernel each,
// reading the bf16 inputs again (the values read by several kernels are recomputed in each).
// CHECK-LABEL: func.func @norm_backward
// CHECK-NOT: kind = "elementwise"
// CHECK: %[[K:.*]]:3 = "trn.kernel"() ({
// CHECK-DAG: %[[G:.*]] = "trn.convert"(%arg0)
// CHECK-DAG: "trn.convert"(%arg1)
// CHECK: "trn.reduce"({{.*}}) {dimensions = array<i64: 1>
// CHECK: "trn.reduce"({{.*}}) {dimensions = array<i64: 1>
// CHECK: %[[GX:.*]] = "trn.tensor_tensor"(%[[G]], %{{.*}}) {op = "mul"}
// CHECK-NEXT: %[[DW:.*]] = "trn.reduce"(%[[GX]]) {dimensions = array<i64: 0>
// CHECK-NEXT: %[[DB:.*]] = "trn.reduce"(%[[G]]) {dimensions = array<i64: 0>
// CHECK-NEXT: %[[DX:.*]] = "trn.tensor_tensor"
// CHECK-NEXT: "trn.yield"(%[[DX]], %[[DW]], %[[DB]])
// CHECK-NEXT: }) {kind = "rows", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NEXT: return %[[K]]#0, %[[K]]#1, %[[K]]#2
// NOCOLS-LABEL: func.func @norm_backward
// NOCOLS-NOT: kind = "elementwise"
// NOCOLS: %[[DX:.*]] = "trn.kernel"() ({
// NOCOLS-DAG: "trn.convert"(%arg0)
// NOCOLS-DAG: "trn.convert"(%arg1)
// NOCOLS: "trn.reduce"({{.*}}) {dimensions = array<i64: 1>
// NOCOLS: "trn.reduce"({{.*}}) {dimensions = array<i64: 1>
// NOCOLS-NOT: dimensions = array<i64: 0>
// NOCOLS: }) {kind = "rows", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NOCOLS-NEXT: %[[DW:.*]] = "trn.kernel"() ({
// NOCOLS-NEXT: "trn.convert"(%arg0)
// NOCOLS-NEXT: "trn.convert"(%arg1)
// NOCOLS: "trn.reduce"({{.*}}) {dimensions = array<i64: 0>
// NOCOLS-NEXT: "trn.yield"
// NOCOLS-NEXT: }) {kind = "reduce", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NOCOLS-NEXT: %[[DB:.*]] = "trn.kernel"() ({
// NOCOLS-NEXT: %[[G:.*]] = "trn.convert"(%arg0)
// NOCOLS-NEXT: "trn.reduce"(%[[G]]) {dimensions = array<i64: 0>
// NOCOLS-NEXT: "trn.yield"
// NOCOLS-NEXT: }) {kind = "reduce", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// NOCOLS-NEXT: return %[[DX]], %[[DW]], %[[DB]]
func.func @norm_backward(%dy: tensor<128x64xbf16>, %x: tensor<128x64xbf16>, %mean: tensor<128xf32>, %rstd: tensor<128xf32>, %w: tensor<64xf32>) -> (tensor<128x64xf32>, tensor<64xf32>, tensor<64xf32>) {
  %dyf = "trn.convert"(%dy) : (tensor<128x64xbf16>) -> tensor<128x64xf32>
  %xf = "trn.convert"(%x) : (tensor<128x64xbf16>) -> tensor<128x64xf32>
  %mb = "trn.broadcast"(%mean) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x64xf32>
  %c = "trn.tensor_tensor"(%xf, %mb) {op = "sub"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
  %rb = "trn.broadcast"(%rstd) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x64xf32>
  %xhat = "trn.tensor_tensor"(%c, %rb) {op = "mul"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
  %wb = "trn.broadcast"(%w) {dimensions = array<i64: 0>} : (tensor<64xf32>) -> tensor<128x64xf32>
  %g = "trn.tensor_tensor"(%dyf, %wb) {op = "mul"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
  %s1 = "trn.reduce"(%g) {op = "add", dimensions = array<i64: 1>} : (tensor<128x64xf32>) -> tensor<128xf32>
  %gx = "trn.tensor_tensor"(%g, %xhat) {op = "mul"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
  %s2 = "trn.reduce"(%gx) {op = "add", dimensions = array<i64: 1>} : (tensor<128x64xf32>) -> tensor<128xf32>
  %s1b = "trn.broadcast"(%s1) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x64xf32>
  %s2b = "trn.broadcast"(%s2) {dimensions = array<i64: 1>} : (tensor<128xf32>) -> tensor<128x64xf32>
  %t = "trn.tensor_tensor"(%g, %s1b) {op = "sub"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
  %u = "trn.tensor_tensor"(%xhat, %s2b) {op = "mul"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
  %dx = "trn.tensor_tensor"(%t, %u) {op = "sub"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
  %dgx = "trn.tensor_tensor"(%dyf, %xhat) {op = "mul"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
  %dw = "trn.reduce"(%dgx) {op = "add", dimensions = array<i64: 0>} : (tensor<128x64xf32>) -> tensor<64xf32>
  %db = "trn.reduce"(%dyf) {op = "add", dimensions = array<i64: 0>} : (tensor<128x64xf32>) -> tensor<64xf32>
  return %dx, %dw, %db : tensor<128x64xf32>, tensor<64xf32>, tensor<64xf32>
}

// -----

// Tests that a rounding read by several kernels is not recomputed from its wider source (the
// readers would move twice the bytes): it is stored once, rounded, and both reductions read it.
// CHECK-LABEL: func.func @shared_rounding
// CHECK: %[[R:.*]] = "trn.kernel"() ({
// CHECK-NEXT: "trn.convert"(%arg0)
// CHECK-NEXT: "trn.yield"
// CHECK: "trn.reduce"(%[[R]]) {dimensions = array<i64: 0>
// CHECK: "trn.reduce"(%[[R]]) {dimensions = array<i64: 1>
func.func @shared_rounding(%x: tensor<128x64xf32>) -> (tensor<64xf32>, tensor<128xf32>) {
  %r = "trn.convert"(%x) : (tensor<128x64xf32>) -> tensor<128x64xbf16>
  %a = "trn.reduce"(%r) {op = "add", dimensions = array<i64: 0>} : (tensor<128x64xbf16>) -> tensor<64xf32>
  %b = "trn.reduce"(%r) {op = "max", dimensions = array<i64: 1>} : (tensor<128x64xbf16>) -> tensor<128xf32>
  return %a, %b : tensor<64xf32>, tensor<128xf32>
}

// -----

// Tests that an elementwise op read only by a reduction, and the ops after the reduction,
// are one kernel: the reduced input never reaches HBM.
// CHECK-LABEL: func.func @through_reduce
// CHECK: %[[K:.*]] = "trn.kernel"() ({
// CHECK-NEXT: "trn.activation"(%arg0)
// CHECK-NEXT: "trn.reduce"
// CHECK-NEXT: "trn.tensor_scalar"
// CHECK-NEXT: "trn.yield"
// CHECK-NEXT: }) {kind = "reduce", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NEXT: return %[[K]]
func.func @through_reduce(%x: tensor<128x64xf32>) -> tensor<64xf32> {
  %e = "trn.activation"(%x) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x64xf32>) -> tensor<128x64xf32>
  %s = "trn.reduce"(%e) {op = "add", dimensions = array<i64: 0>} : (tensor<128x64xf32>) -> tensor<64xf32>
  %m = "trn.tensor_scalar"(%s) {op = "mul", scalar = 0.0078125 : f32, reverse = false} : (tensor<64xf32>) -> tensor<64xf32>
  return %m : tensor<64xf32>
}

// -----

// Tests that GPT-2's tanh GELU written out, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// with a bf16 model's rounding after every step, becomes one activation of the table's
// gelu_tanh (the rounded steps would be elided inside the kernel anyway); with
// keep-roundings it stays written out.
// CHECK-LABEL: func.func @gelu_tanh_written_out
// CHECK: "trn.kernel"() ({
// CHECK-NEXT: %[[G:.*]] = "trn.activation"(%arg0) {bias = 0.000000e+00 : f32, func = "gelu_tanh", scale = 1.000000e+00 : f32} : (tensor<4x64xbf16>) -> tensor<4x64xf32>
// CHECK-NEXT: "trn.convert"(%[[G]])
// CHECK-NEXT: "trn.yield"
// CHECK-NOT: "trn.tensor_scalar"
// KEEP-LABEL: func.func @gelu_tanh_written_out
// KEEP: "trn.activation"({{.*}}func = "tanh"
func.func @gelu_tanh_written_out(%x: tensor<4x64xbf16>) -> tensor<4x64xbf16> {
  %m = "trn.tensor_scalar"(%x) {op = "mul", reverse = false, scalar = 5.000000e-01 : f32} : (tensor<4x64xbf16>) -> tensor<4x64xf32>
  %mr = "trn.convert"(%m) : (tensor<4x64xf32>) -> tensor<4x64xbf16>
  %p = "trn.tensor_scalar"(%x) {op = "pow", reverse = false, scalar = 3.000000e+00 : f32} : (tensor<4x64xbf16>) -> tensor<4x64xf32>
  %pr = "trn.convert"(%p) : (tensor<4x64xf32>) -> tensor<4x64xbf16>
  %q = "trn.tensor_scalar"(%pr) {op = "mul", reverse = false, scalar = 4.471500e-02 : f32} : (tensor<4x64xbf16>) -> tensor<4x64xf32>
  %qr = "trn.convert"(%q) : (tensor<4x64xf32>) -> tensor<4x64xbf16>
  %s = "trn.tensor_tensor"(%x, %qr) {op = "add"} : (tensor<4x64xbf16>, tensor<4x64xbf16>) -> tensor<4x64xf32>
  %sr = "trn.convert"(%s) : (tensor<4x64xf32>) -> tensor<4x64xbf16>
  %t = "trn.tensor_scalar"(%sr) {op = "mul", reverse = false, scalar = 0.797884583 : f32} : (tensor<4x64xbf16>) -> tensor<4x64xf32>
  %tr = "trn.convert"(%t) : (tensor<4x64xf32>) -> tensor<4x64xbf16>
  %h = "trn.activation"(%tr) {bias = 0.000000e+00 : f32, func = "tanh", scale = 1.000000e+00 : f32} : (tensor<4x64xbf16>) -> tensor<4x64xf32>
  %hr = "trn.convert"(%h) : (tensor<4x64xf32>) -> tensor<4x64xbf16>
  %a = "trn.tensor_scalar"(%hr) {op = "add", reverse = false, scalar = 1.000000e+00 : f32} : (tensor<4x64xbf16>) -> tensor<4x64xf32>
  %ar = "trn.convert"(%a) : (tensor<4x64xf32>) -> tensor<4x64xbf16>
  %y = "trn.tensor_tensor"(%mr, %ar) {op = "mul"} : (tensor<4x64xbf16>, tensor<4x64xbf16>) -> tensor<4x64xf32>
  %yr = "trn.convert"(%y) : (tensor<4x64xf32>) -> tensor<4x64xbf16>
  return %yr : tensor<4x64xbf16>
}

// -----

// Tests that the written-out tanh GELU is left alone where a step is read elsewhere too (here
// the tanh, also returned): the activation would not compute it.
// CHECK-LABEL: func.func @gelu_tanh_step_read_twice
// CHECK: func = "tanh"
// CHECK-NOT: gelu_tanh
func.func @gelu_tanh_step_read_twice(%x: tensor<4x64xf32>) -> (tensor<4x64xf32>, tensor<4x64xf32>) {
  %m = "trn.tensor_scalar"(%x) {op = "mul", reverse = false, scalar = 5.000000e-01 : f32} : (tensor<4x64xf32>) -> tensor<4x64xf32>
  %p = "trn.tensor_scalar"(%x) {op = "pow", reverse = false, scalar = 3.000000e+00 : f32} : (tensor<4x64xf32>) -> tensor<4x64xf32>
  %q = "trn.tensor_scalar"(%p) {op = "mul", reverse = false, scalar = 4.471500e-02 : f32} : (tensor<4x64xf32>) -> tensor<4x64xf32>
  %s = "trn.tensor_tensor"(%q, %x) {op = "add"} : (tensor<4x64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32>
  %h = "trn.activation"(%s) {bias = 0.000000e+00 : f32, func = "tanh", scale = 0.797884583 : f32} : (tensor<4x64xf32>) -> tensor<4x64xf32>
  %a = "trn.tensor_scalar"(%h) {op = "add", reverse = false, scalar = 1.000000e+00 : f32} : (tensor<4x64xf32>) -> tensor<4x64xf32>
  %y = "trn.tensor_tensor"(%a, %m) {op = "mul"} : (tensor<4x64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32>
  return %y, %h : tensor<4x64xf32>, tensor<4x64xf32>
}

// -----

// Tests that GELU of a Linear's output that is also returned (a training step's forward
// saves it) runs in the matmul's epilogue: one kernel yields the activation and the saved
// output, and the return reads both from it. epilogue-results=false keeps GELU a kernel of
// its own, reading the output back.
// CHECK-LABEL: func.func @saved_linear_gelu
// CHECK: %[[K:.*]]:2 = "trn.kernel"() ({
// CHECK: %[[MM:.*]] = "trn.matmul"
// CHECK-NEXT: %[[Z:.*]] = "trn.tensor_tensor"(%{{.*}}, %[[MM]]) {op = "add"}
// CHECK-NEXT: %[[G:.*]] = "trn.activation"(%[[Z]]) {{.*}}func = "gelu"
// CHECK-NEXT: "trn.yield"(%[[G]], %[[Z]])
// CHECK-NEXT: }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<4x16xf32>, tensor<4x16xf32>)
// CHECK-NEXT: return %[[K]]#1, %[[K]]#0
// RES-LABEL: func.func @saved_linear_gelu
// RES: kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<4x16xf32>
// RES-NEXT: "trn.kernel"
// RES: kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<4x16xf32>
// RES-NEXT: return
func.func @saved_linear_gelu(%w: tensor<16x8xf32>, %b: tensor<16xf32>, %x: tensor<4x8xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %t = "trn.transpose"(%w) {permutation = array<i64: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %y = "trn.matmul"(%x, %t) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %bb = "trn.broadcast"(%b) {dimensions = array<i64: 0>} : (tensor<16xf32>) -> tensor<4x16xf32>
  %z = "trn.tensor_tensor"(%bb, %y) {op = "add"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %g = "trn.activation"(%z) {func = "gelu", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return %z, %g : tensor<4x16xf32>, tensor<4x16xf32>
}

// -----

// Tests that the epilogue does not take a reader of the Linear's output when another kernel
// between the two reads that output too (the merged kernel would come after it).
// CHECK-LABEL: func.func @read_in_between
// CHECK-COUNT-3: "trn.kernel"
// CHECK-NOT: "trn.kernel"
// CHECK: return
func.func @read_in_between(%w: tensor<16x8xf32>, %x: tensor<4x8xf32>) -> (tensor<1x16xf32>, tensor<4x16xf32>) {
  %t = "trn.transpose"(%w) {permutation = array<i64: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %y = "trn.matmul"(%x, %t) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %s = "trn.reduce"(%y) {op = "add", dimensions = array<i64: 0>} : (tensor<4x16xf32>) -> tensor<16xf32>
  %sb = "trn.broadcast"(%s) {dimensions = array<i64: 0>} : (tensor<16xf32>) -> tensor<4x16xf32>
  %g = "trn.tensor_tensor"(%y, %sb) {op = "mul"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %s2 = "trn.reshape"(%s) {map = affine_map<(d0, d1) -> (d1)>} : (tensor<16xf32>) -> tensor<1x16xf32>
  return %s2, %g : tensor<1x16xf32>, tensor<4x16xf32>
}

// -----

// Tests that a Linear's bias gradient (the output gradient summed over tokens) joins the
// kernel of its weight gradient (dY^T @ X): one kernel yields both, the sum reading the
// tensor the matmul's left operand transposes. bias-gradients=false keeps a reduction kernel.
// CHECK-LABEL: func.func @linear_backward
// CHECK: %[[K:.*]]:2 = "trn.kernel"() ({
// CHECK-NEXT: %[[T:.*]] = "trn.transpose"(%arg0)
// CHECK-NEXT: %[[MM:.*]] = "trn.matmul"(%[[T]], %arg1)
// CHECK-NEXT: %[[S:.*]] = "trn.reduce"(%arg0) {dimensions = array<i64: 0>, op = "add"}
// CHECK-NEXT: "trn.yield"(%[[MM]], %[[S]])
// CHECK-NEXT: }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<32x16xf32>, tensor<32xf32>)
// CHECK-NEXT: return %[[K]]#0, %[[K]]#1
// BIAS-LABEL: func.func @linear_backward
// BIAS: kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<32x16xf32>
// BIAS: kind = "reduce", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<32xf32>
func.func @linear_backward(%dy: tensor<64x32xf32>, %x: tensor<64x16xf32>) -> (tensor<32x16xf32>, tensor<32xf32>) {
  %t = "trn.transpose"(%dy) {permutation = array<i64: 1, 0>} : (tensor<64x32xf32>) -> tensor<32x64xf32>
  %w = "trn.matmul"(%t, %x) : (tensor<32x64xf32>, tensor<64x16xf32>) -> tensor<32x16xf32>
  %b = "trn.reduce"(%dy) {op = "add", dimensions = array<i64: 0>} : (tensor<64x32xf32>) -> tensor<32xf32>
  return %w, %b : tensor<32x16xf32>, tensor<32xf32>
}

// -----

// Tests that the gradient T of a first Linear's output (dY @ W2 times GELU's derivative), read
// only by that Linear's weight gradient T^T @ X and bias gradient (T summed over tokens),
// joins their kernel: one weight_gradient kernel computes T and both gradients, yielding the
// two gradients. weight-gradients=false keeps T's matmul kernel apart.
// CHECK-LABEL: func.func @first_linear_backward
// CHECK: %[[K:.*]]:2 = "trn.kernel"() ({
// CHECK-NEXT: %[[D:.*]] = "trn.activation"(%arg0) {{.*}}func = "gelu_dx"
// CHECK-NEXT: %[[G:.*]] = "trn.matmul"(%arg1, %arg2)
// CHECK-NEXT: %[[T:.*]] = "trn.tensor_tensor"(%[[G]], %[[D]]) {op = "mul"}
// CHECK-NEXT: %[[TT:.*]] = "trn.transpose"(%[[T]])
// CHECK-NEXT: %[[W:.*]] = "trn.matmul"(%[[TT]], %arg3)
// CHECK-NEXT: %[[S:.*]] = "trn.reduce"(%[[T]]) {dimensions = array<i64: 0>, op = "add"}
// CHECK-NEXT: "trn.yield"(%[[W]], %[[S]])
// CHECK-NEXT: }) {kind = "weight_gradient", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<256x64xf32>, tensor<256xf32>)
// CHECK-NEXT: return %[[K]]#0, %[[K]]#1
// WG-LABEL: func.func @first_linear_backward
// WG: kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<384x256xf32>
// WG: kind = "matmul", resultSegmentSizes = array<i32: 1, 1, 0>} : () -> (tensor<256x64xf32>, tensor<256xf32>)
func.func @first_linear_backward(%h: tensor<384x256xf32>, %dy: tensor<384x128xf32>, %w2: tensor<128x256xf32>, %x: tensor<384x64xf32>) -> (tensor<256x64xf32>, tensor<256xf32>) {
  %g = "trn.matmul"(%dy, %w2) : (tensor<384x128xf32>, tensor<128x256xf32>) -> tensor<384x256xf32>
  %d = "trn.activation"(%h) {func = "gelu_dx", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<384x256xf32>) -> tensor<384x256xf32>
  %t = "trn.tensor_tensor"(%g, %d) {op = "mul"} : (tensor<384x256xf32>, tensor<384x256xf32>) -> tensor<384x256xf32>
  %tt = "trn.transpose"(%t) {permutation = array<i64: 1, 0>} : (tensor<384x256xf32>) -> tensor<256x384xf32>
  %w = "trn.matmul"(%tt, %x) : (tensor<256x384xf32>, tensor<384x64xf32>) -> tensor<256x64xf32>
  %b = "trn.reduce"(%t) {op = "add", dimensions = array<i64: 0>} : (tensor<384x256xf32>) -> tensor<256xf32>
  return %w, %b : tensor<256x64xf32>, tensor<256xf32>
}

// -----

// Tests that T stays a kernel's result stored to HBM where something else reads it too (here
// the function returns it: the block's input gradient T @ W1 would read it likewise).
// CHECK-LABEL: func.func @gradient_read_elsewhere
// CHECK: kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<384x256xf32>
// CHECK: kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x64xf32>
// CHECK-NOT: weight_gradient
func.func @gradient_read_elsewhere(%dy: tensor<384x128xf32>, %w2: tensor<128x256xf32>, %x: tensor<384x64xf32>) -> (tensor<256x64xf32>, tensor<384x256xf32>) {
  %t = "trn.matmul"(%dy, %w2) : (tensor<384x128xf32>, tensor<128x256xf32>) -> tensor<384x256xf32>
  %tt = "trn.transpose"(%t) {permutation = array<i64: 1, 0>} : (tensor<384x256xf32>) -> tensor<256x384xf32>
  %w = "trn.matmul"(%tt, %x) : (tensor<256x384xf32>, tensor<384x64xf32>) -> tensor<256x64xf32>
  return %w, %t : tensor<256x64xf32>, tensor<384x256xf32>
}

// -----

// Tests that a sum over the other dim (the features of each token) is not a bias gradient of
// the matmul: it stays a reduction kernel.
// CHECK-LABEL: func.func @sum_over_features
// CHECK: kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<32x16xf32>
// CHECK: kind = "reduce", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<64xf32>
func.func @sum_over_features(%dy: tensor<64x32xf32>, %x: tensor<64x16xf32>) -> (tensor<32x16xf32>, tensor<64xf32>) {
  %t = "trn.transpose"(%dy) {permutation = array<i64: 1, 0>} : (tensor<64x32xf32>) -> tensor<32x64xf32>
  %w = "trn.matmul"(%t, %x) : (tensor<32x64xf32>, tensor<64x16xf32>) -> tensor<32x16xf32>
  %b = "trn.reduce"(%dy) {op = "add", dimensions = array<i64: 1>} : (tensor<64x32xf32>) -> tensor<64xf32>
  return %w, %b : tensor<32x16xf32>, tensor<64xf32>
}

// -----

// Tests that GELU's derivative written out as its backward decomposes it, 0.5 (1 + erf(x /
// sqrt 2)) + x * exp(-x^2 / 2) / sqrt(2 pi), becomes one activation gelu_dx of x, multiplied
// into the gradient in the same kernel.
// CHECK-LABEL: func.func @gelu_derivative
// CHECK: "trn.kernel"() ({
// CHECK-NEXT: %[[D:.*]] = "trn.activation"(%arg0) {bias = 0.000000e+00 : f32, func = "gelu_dx", scale = 1.000000e+00 : f32}
// CHECK-NEXT: "trn.tensor_tensor"(%arg1, %[[D]]) {op = "mul"}
// CHECK-NEXT: "trn.yield"
// CHECK-NOT: "trn.activation"
// CHECK: return
func.func @gelu_derivative(%x: tensor<8x16xf32>, %g: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %m = "trn.tensor_scalar"(%x) {op = "mul", reverse = false, scalar = 0.707106769 : f32} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %e = "trn.activation"(%m) {func = "erf", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %a = "trn.tensor_scalar"(%e) {op = "add", reverse = false, scalar = 1.0 : f32} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %h = "trn.tensor_scalar"(%a) {op = "mul", reverse = false, scalar = 0.5 : f32} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %sq = "trn.tensor_tensor"(%x, %x) {op = "mul"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %n = "trn.tensor_scalar"(%sq) {op = "mul", reverse = false, scalar = -0.5 : f32} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %ex = "trn.activation"(%n) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %pd = "trn.tensor_scalar"(%ex) {op = "mul", reverse = false, scalar = 0.398942292 : f32} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %xp = "trn.tensor_tensor"(%x, %pd) {op = "mul"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %d = "trn.tensor_tensor"(%h, %xp) {op = "add"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %r = "trn.tensor_tensor"(%g, %d) {op = "mul"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %r : tensor<8x16xf32>
}

// -----

// Tests that the derivative's formula stays written out where one of its steps is needed
// elsewhere too (here the CDF term).
// CHECK-LABEL: func.func @gelu_derivative_shared_step
// CHECK-NOT: "gelu_dx"
// CHECK: func = "erf"
// CHECK: return
func.func @gelu_derivative_shared_step(%x: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %m = "trn.tensor_scalar"(%x) {op = "mul", reverse = false, scalar = 0.707106769 : f32} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %e = "trn.activation"(%m) {func = "erf", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %a = "trn.tensor_scalar"(%e) {op = "add", reverse = false, scalar = 1.0 : f32} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %h = "trn.tensor_scalar"(%a) {op = "mul", reverse = false, scalar = 0.5 : f32} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %sq = "trn.tensor_tensor"(%x, %x) {op = "mul"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %n = "trn.tensor_scalar"(%sq) {op = "mul", reverse = false, scalar = -0.5 : f32} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %ex = "trn.activation"(%n) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %pd = "trn.tensor_scalar"(%ex) {op = "mul", reverse = false, scalar = 0.398942292 : f32} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %xp = "trn.tensor_tensor"(%x, %pd) {op = "mul"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %d = "trn.tensor_tensor"(%h, %xp) {op = "add"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %d, %h : tensor<8x16xf32>, tensor<8x16xf32>
}

// -----

// Tests that a row-wise kernel whose result only an mlp kernel's first Linear reads (a
// pre-norm FFN's norm) joins the mlp kernel in front, the op computing its result marked
// trn.input_rows: one kernel of kind mlp. Off, the rows kernel stays apart.
// CHECK-LABEL: func.func @norm_then_mlp
// CHECK-NEXT: %[[K:.*]] = "trn.kernel"() ({
// CHECK: "trn.reduce"
// CHECK: %[[N:.*]] = "trn.convert"(%{{.*}}) {trn.input_rows} : (tensor<256x128xf32>) -> tensor<256x128xbf16>
// CHECK: "trn.matmul"(%[[N]],
// CHECK: "trn.matmul"
// CHECK: }) {kind = "mlp", resultSegmentSizes = array<i32: {{[0-9, ]+}}>}
// CHECK-NEXT: return %[[K]]
// NOINPUTROWS-LABEL: func.func @norm_then_mlp
// NOINPUTROWS: kind = "rows"
// NOINPUTROWS: kind = "mlp"
// NOINPUTROWS-NOT: trn.input_rows
func.func @norm_then_mlp(%x: tensor<256x128xbf16>, %w1: tensor<512x128xbf16>, %b1: tensor<512xbf16>, %w2: tensor<128x512xbf16>) -> tensor<256x128xbf16> {
  %sq = "trn.tensor_tensor"(%x, %x) {op = "mul"} : (tensor<256x128xbf16>, tensor<256x128xbf16>) -> tensor<256x128xf32>
  %s = "trn.reduce"(%sq) {dimensions = array<i64: 1>, op = "add"} : (tensor<256x128xf32>) -> tensor<256xf32>
  %m = "trn.tensor_scalar"(%s) {op = "mul", reverse = false, scalar = 7.812500e-03 : f32} : (tensor<256xf32>) -> tensor<256xf32>
  %r = "trn.activation"(%m) {bias = 0.0 : f32, func = "rsqrt", scale = 1.0 : f32} : (tensor<256xf32>) -> tensor<256xf32>
  %rb = "trn.broadcast"(%r) {dimensions = array<i64: 1>} : (tensor<256xf32>) -> tensor<256x128xf32>
  %n = "trn.tensor_tensor"(%x, %rb) {op = "mul"} : (tensor<256x128xbf16>, tensor<256x128xf32>) -> tensor<256x128xf32>
  %nb = "trn.convert"(%n) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
  %w1t = "trn.transpose"(%w1) {permutation = array<i64: 1, 0>} : (tensor<512x128xbf16>) -> tensor<128x512xbf16>
  %h = "trn.matmul"(%nb, %w1t) : (tensor<256x128xbf16>, tensor<128x512xbf16>) -> tensor<256x512xf32>
  %bb = "trn.broadcast"(%b1) {dimensions = array<i64: 0>} : (tensor<512xbf16>) -> tensor<256x512xbf16>
  %hb = "trn.tensor_tensor"(%h, %bb) {op = "add"} : (tensor<256x512xf32>, tensor<256x512xbf16>) -> tensor<256x512xf32>
  %g = "trn.activation"(%hb) {bias = 0.0 : f32, func = "gelu", scale = 1.0 : f32} : (tensor<256x512xf32>) -> tensor<256x512xf32>
  %gb = "trn.convert"(%g) : (tensor<256x512xf32>) -> tensor<256x512xbf16>
  %w2t = "trn.transpose"(%w2) {permutation = array<i64: 1, 0>} : (tensor<128x512xbf16>) -> tensor<512x128xbf16>
  %y = "trn.matmul"(%gb, %w2t) : (tensor<256x512xbf16>, tensor<512x128xbf16>) -> tensor<256x128xf32>
  %yb = "trn.convert"(%y) : (tensor<256x128xf32>) -> tensor<256x128xbf16>
  return %yb : tensor<256x128xbf16>
}
