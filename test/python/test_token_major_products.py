"""A batched matmul kernel whose result is read only token-major ([B, S, H, D]) stores it so
(trn-layout attention-token-major), writing each product through the inverse view. Where
the view cannot take the batch split the kernel's operands impose (here an operand whose
batch dims are [3, 2] in the order the result numbers them [2, 3]), the products go to a
buffer of their own and are copied after: the same values either way. No torch: the MLIR
side and the simulator run without it."""

import re

import ml_dtypes
import numpy as np
from torch_mlir import ir

from torchneuron.compiler.codegen.neff_writer import emit_neff
from torchneuron.compiler.passes import build_pass_manager, parse_pipeline
from torchneuron.dialects import make_context
from torchneuron.dialects.common import memref_info_cache
from torchneuron.runtime import load
from torchneuron.runtime.device import Device

SOURCE = """
func.func @product(%a: tensor<2x3x128x128xbf16>, %b: tensor<6x128x64xbf16>) -> tensor<2x128x192xbf16> {
  %0 = "trn.kernel"() ({
    %t = "trn.transpose"(%a) {permutation = array<i64: 1, 0, 2, 3>} : (tensor<2x3x128x128xbf16>) -> tensor<3x2x128x128xbf16>
    %l = "trn.reshape"(%t) : (tensor<3x2x128x128xbf16>) -> tensor<6x128x128xbf16>
    %m = "trn.matmul"(%l, %b) : (tensor<6x128x128xbf16>, tensor<6x128x64xbf16>) -> tensor<6x128x64xf32>
    %c = "trn.convert"(%m) : (tensor<6x128x64xf32>) -> tensor<6x128x64xbf16>
    "trn.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<6x128x64xbf16>) -> ()
  }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<6x128x64xbf16>
  %1 = "trn.kernel"() ({
    %r = "trn.reshape"(%0) : (tensor<6x128x64xbf16>) -> tensor<2x3x128x64xbf16>
    %t = "trn.transpose"(%r) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x3x128x64xbf16>) -> tensor<2x128x3x64xbf16>
    %s = "trn.reshape"(%t) : (tensor<2x128x3x64xbf16>) -> tensor<2x128x192xbf16>
    %n = "trn.tensor_scalar"(%s) {op = "mul", reverse = false, scalar = -1.0 : f32} : (tensor<2x128x192xbf16>) -> tensor<2x128x192xbf16>
    "trn.yield"(%n) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2x128x192xbf16>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x128x192xbf16>
  return %1 : tensor<2x128x192xbf16>
}
"""


def _compile(token_major: bool) -> tuple[bytes, str]:
    pipeline = (f"trn-layout{{attention-token-major={str(token_major).lower()}}},"
                "trn-tile{target=trn2},convert-trn-to-nisa{target=trn2},trn-plan-memory,"
                "trn-schedule")
    context = make_context()
    with context, memref_info_cache():
        module = ir.Module.parse(SOURCE)
        build_pass_manager(parse_pipeline(pipeline), context).run(module.operation)
        return emit_neff(module), str(module)


def test_token_major_product_whose_view_cannot_take_the_batch_split():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 128, 128)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((6, 128, 64)).astype(ml_dtypes.bfloat16)
    outputs = {}
    for token_major in (True, False):
        neff, isa = _compile(token_major)
        if token_major:
            # The products' own buffer, copied into the token-major result, and the operand
            # copied to a contiguous one (as without the token-major result).
            assert 'memref<6x128x64xbf16, "hbm">' in isa
            assert 'memref<2x128x3x64xbf16, "hbm">' in isa
            assert 'memref<3x2x128x128xbf16, "hbm">' in isa
        outputs[token_major] = Device("trn2").execute(load(neff), [a, b]).outputs[0]
    assert outputs[True].tobytes() == outputs[False].tobytes()
    lhs = a.astype(np.float32).transpose(1, 0, 2, 3).reshape(6, 128, 128)
    product = (lhs @ b.astype(np.float32)).astype(ml_dtypes.bfloat16).astype(np.float32)
    want = -product.reshape(2, 3, 128, 64).transpose(0, 2, 1, 3).reshape(2, 128, 192)
    np.testing.assert_allclose(outputs[True].astype(np.float32), want, rtol=2e-2, atol=2e-2)


HEADS_SOURCE = """
func.func @values_gradient(%p: tensor<2x3x256x256xbf16>, %g: tensor<2x256x192xbf16>) -> tensor<2x256x3x64xbf16> {
  %0 = "trn.kernel"() ({
    %pt = "trn.transpose"(%p) {permutation = array<i64: 0, 1, 3, 2>} : (tensor<2x3x256x256xbf16>) -> tensor<2x3x256x256xbf16>
    %pr = "trn.reshape"(%pt) : (tensor<2x3x256x256xbf16>) -> tensor<6x256x256xbf16>
    %gr = "trn.reshape"(%g) : (tensor<2x256x192xbf16>) -> tensor<2x256x3x64xbf16>
    %gt = "trn.transpose"(%gr) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x256x3x64xbf16>) -> tensor<2x3x256x64xbf16>
    %gb = "trn.reshape"(%gt) : (tensor<2x3x256x64xbf16>) -> tensor<6x256x64xbf16>
    %m = "trn.matmul"(%pr, %gb) : (tensor<6x256x256xbf16>, tensor<6x256x64xbf16>) -> tensor<6x256x64xf32>
    %c = "trn.convert"(%m) : (tensor<6x256x64xf32>) -> tensor<6x256x64xbf16>
    %r = "trn.reshape"(%c) : (tensor<6x256x64xbf16>) -> tensor<2x3x256x64xbf16>
    %t = "trn.transpose"(%r) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x3x256x64xbf16>) -> tensor<2x256x3x64xbf16>
    "trn.yield"(%t) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<2x256x3x64xbf16>) -> ()
  }) {kind = "matmul", orientation = "mn", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<2x256x3x64xbf16>
  return %0 : tensor<2x256x3x64xbf16>
}
"""


def _hbm_accesses(isa: str, buffer: str) -> list[tuple[int, int]]:
    """(bytes of each contiguous run, bytes in all) of each DMA reading or writing `buffer`
    (a bf16 HBM argument), from the access patterns ([offset, stride, size, ...]) in the
    ISA."""
    accesses = []
    for line in isa.splitlines():
        match = re.search(r'"nisa.dma"\((%\w+), (%\w+)\) \{aps = \[array<i64: ([^>]*)>, '
                          r'array<i64: ([^>]*)>\]', line)
        if match is None or buffer not in match.group(1, 2):
            continue
        ap = [int(x) for x in match.group(3 if match.group(1) == buffer else 4).split(", ")]
        sizes, strides = [ap[2]] + ap[4::2], [ap[1]] + ap[3::2]
        run = 1
        for size, stride in zip(reversed(sizes), reversed(strides)):
            if size == 1:
                continue
            if stride != run:
                break
            run *= size
        accesses.append((run * 2, int(np.prod(sizes)) * 2))
    return accesses


def test_per_head_products_read_and_write_whole_token_rows():
    # dV = P^T @ dO per head, dO's heads side by side in its token rows and dV stored so:
    # dO is loaded once per batch index for all heads (runs of 3 x 64 elements, not 64), and
    # each token block's results of all heads are stored together, as whole rows.
    context = make_context()
    with context, memref_info_cache():
        module = ir.Module.parse(HEADS_SOURCE)
        build_pass_manager(parse_pipeline(
            "trn-tile{target=trn2},convert-trn-to-nisa{target=trn2},trn-plan-memory,"
            "trn-schedule"), context).run(module.operation)
        neff, isa = emit_neff(module), str(module)
    assert re.search(r'@values_gradient\(%arg0: memref<2x3x256x256xbf16, "hbm">, '
                     r'%arg1: memref<2x256x192xbf16, "hbm">, '
                     r'%arg2: memref<2x256x3x64xbf16, "hbm">\)', isa), isa
    row = 3 * 64 * 2
    for buffer in ("%arg1", "%arg2"):
        accesses = _hbm_accesses(isa, buffer)
        assert accesses and all(run % row == 0 for run, _ in accesses), (buffer, accesses)
        # every row moved once
        assert sum(total for _, total in accesses) == 2 * 256 * row, (buffer, accesses)
    rng = np.random.default_rng(1)
    p = rng.standard_normal((2, 3, 256, 256)).astype(ml_dtypes.bfloat16)
    g = rng.standard_normal((2, 256, 192)).astype(ml_dtypes.bfloat16)
    got = Device("trn2").execute(load(neff), [p, g]).outputs[0].astype(np.float32)
    per_head = g.astype(np.float32).reshape(2, 256, 3, 64).transpose(0, 2, 1, 3)
    want = np.swapaxes(p.astype(np.float32), -1, -2) @ per_head
    want = want.astype(ml_dtypes.bfloat16).astype(np.float32).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=5e-2)
