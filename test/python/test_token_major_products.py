"""A batched matmul kernel whose result is read only token-major ([B, S, H, D]) stores it so
(trn-layout attention-token-major), writing each product through the inverse view. Where
the view cannot take the batch split the kernel's operands impose (here an operand whose
batch dims are [3, 2] in the order the result numbers them [2, 3]), the products go to a
buffer of their own and are copied after: the same values either way. No torch: the MLIR
side and the simulator run without it."""

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
    "trn.yield"(%c) : (tensor<6x128x64xbf16>) -> ()
  }) {kind = "matmul", orientation = "mn"} : () -> tensor<6x128x64xbf16>
  %1 = "trn.kernel"() ({
    %r = "trn.reshape"(%0) : (tensor<6x128x64xbf16>) -> tensor<2x3x128x64xbf16>
    %t = "trn.transpose"(%r) {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x3x128x64xbf16>) -> tensor<2x128x3x64xbf16>
    %s = "trn.reshape"(%t) : (tensor<2x128x3x64xbf16>) -> tensor<2x128x192xbf16>
    %n = "trn.tensor_scalar"(%s) {op = "mul", reverse = false, scalar = -1.0 : f32} : (tensor<2x128x192xbf16>) -> tensor<2x128x192xbf16>
    "trn.yield"(%n) : (tensor<2x128x192xbf16>) -> ()
  }) {kind = "elementwise"} : () -> tensor<2x128x192xbf16>
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
