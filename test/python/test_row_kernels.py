"""Row-wise kernels (trn-fuse rows): softmax, norms and their backward compiled natively, each
reduction group in one kernel, against eager."""

import glob
import re

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.fixture
def dump_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))
    return tmp_path


def _native(fn, *args, dump_dir):
    torch._dynamo.reset()
    return torch.compile(fn, backend="neuron", options={"fallback": False})(*args)


def _trn(dump_dir, kind="*") -> str:
    return "".join(open(p).read() for p in glob.glob(str(dump_dir / f"*{kind}.trn.mlir")))


CASES = {
    # 3000 rows: 23 full tiles of 128 and one of 56; the scale joins the kernel.
    "softmax": (lambda x: torch.softmax(x * 0.125, -1), [(3, 5, 200, 96)]),
    # rows whose kept dims are not contiguous (a transposed input): the kept dims loop.
    "softmax_transposed": (lambda x: torch.softmax(x.transpose(1, 2), -1), [(2, 48, 3, 40)]),
    "log_softmax": (lambda x: F.log_softmax(x, -1), [(130, 77)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (96,), w, b), [(4, 130, 96), (96,), (96,)]),
    "rms_norm": (lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
                 [(2, 7, 64), (64,)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_row_kernel_matches_eager(name, dump_dir):
    fn, shapes = CASES[name]
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(s, generator=g) * 3 for s in shapes]
    got = _native(fn, *args, dump_dir=dump_dir)
    assert 'kind = "rows"' in _trn(dump_dir)
    torch.testing.assert_close(got, fn(*args), rtol=1e-5, atol=1e-5)


def test_bf16_layer_norm(dump_dir):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 64, 256, generator=g).bfloat16()
    w, b = torch.randn(256, generator=g).bfloat16(), torch.randn(256, generator=g).bfloat16()
    fn = lambda *a: F.layer_norm(*a[:1], (256,), *a[1:])
    got = _native(fn, x, w, b, dump_dir=dump_dir)
    assert 'kind = "rows"' in _trn(dump_dir)
    # bf16 output: one rounding of the fp32-computed value, as eager's fp32-internal kernel.
    torch.testing.assert_close(got.float(), fn(x, w, b).float(), rtol=1.6e-2, atol=2e-2)


def test_layer_norm_and_softmax_backward(dump_dir):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, 50, 64, generator=g)
    w = torch.randn(64, generator=g)
    b = torch.randn(64, generator=g)

    def loss(x, w, b):
        return (torch.softmax(F.layer_norm(x, (64,), w, b), -1) * torch.arange(64.0)).sum()

    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    out = _native(loss, *leaves, dump_dir=dump_dir)
    out.backward()
    ref_leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    ref = loss(*ref_leaves)
    ref.backward()
    assert 'kind = "rows"' in _trn(dump_dir, "forward")
    assert 'kind = "rows"' in _trn(dump_dir, "backward")
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-4)
    for got, want in zip(leaves, ref_leaves):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-4)


def _bf16_layer_norm_step(seed: int, dump_dir):
    """A bf16 layer norm over 256 features, forward and backward compiled natively: its leaves
    (x, weight, bias, with their gradients) and the output gradient."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 128, 256, generator=g).bfloat16()
    w, b = torch.randn(256, generator=g).bfloat16(), torch.randn(256, generator=g).bfloat16()
    dy = torch.randn(4, 128, 256, generator=g).bfloat16()
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    _native(lambda *a: F.layer_norm(a[0], (256,), *a[1:]), *leaves, dump_dir=dump_dir) \
        .backward(dy)
    return leaves, dy


def _assert_bf16_layer_norm_gradients(leaves, dy):
    ref = [t.detach().float().requires_grad_() for t in leaves]
    F.layer_norm(ref[0], (256,), *ref[1:]).backward(dy.float())
    for got, want in zip(leaves, ref):
        # Within a bf16 rounding (2^-8 relative) or two of each gradient's largest magnitude:
        # the sums over 512 rows are rounded once, from fp32.
        scale = want.grad.abs().max().item()
        torch.testing.assert_close(got.grad.float(), want.grad, rtol=2 ** -7,
                                   atol=scale * 2 ** -7)


def test_bf16_layer_norm_backward_keeps_its_rows_on_chip(dump_dir):
    # The whole backward is one row-wise kernel: it computes the normalised input and the fp32
    # input gradient from the bf16 inputs, and sums the weight and bias gradients over its rows
    # as it goes (column sums on the PE), so no full-size intermediate is stored for other
    # kernels to read.
    leaves, dy = _bf16_layer_norm_step(4, dump_dir)
    backward = _trn(dump_dir, "backward")
    # Each kernel's closing line: }) {..., kind = "...", resultSegmentSizes = ...} : () ->
    # <result types>
    kernels = re.findall(r'kind = "(\w+)", resultSegmentSizes = array<i32: [0-9, ]+>\} : \(\) -> '
                         r'\(?([^\n]*?)\)? loc', backward)
    rows = [results for kind, results in kernels if kind == "rows"]
    assert rows == ["tensor<4x128x256xbf16>, tensor<256xbf16>, tensor<256xbf16>"], kernels
    # Besides it at most the weight's widening to fp32: nothing of the rows' size.
    assert all(kind == "elementwise" and "4x128" not in results
               for kind, results in kernels if kind != "rows"), kernels
    _assert_bf16_layer_norm_gradients(leaves, dy)


def test_layer_norm_weight_gradients_summed_over_partial_tiles_and_wide_rows(dump_dir):
    # 300 rows (tiles of 128, 128 and 44) of 640 columns (PSUM accumulators of 512 and 128):
    # the weight and bias gradients, summed over the rows by the row-wise kernel, match eager.
    g = torch.Generator().manual_seed(6)
    x, dy = torch.randn(3, 100, 640, generator=g), torch.randn(3, 100, 640, generator=g)
    w, b = torch.randn(640, generator=g), torch.randn(640, generator=g)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    _native(lambda *a: F.layer_norm(a[0], (640,), *a[1:]), *leaves, dump_dir=dump_dir) \
        .backward(dy)
    assert re.search(r'kind = "rows", resultSegmentSizes = array<i32: 1, 2, 0>\} : \(\) -> '
                     r'\(tensor<3x100x640xf32>, tensor<640xf32>, tensor<640xf32>\)',
                     _trn(dump_dir, "backward"))
    ref = [t.clone().requires_grad_() for t in (x, w, b)]
    F.layer_norm(ref[0], (640,), *ref[1:]).backward(dy)
    for got, want in zip(leaves, ref):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-4)


def test_layer_norm_forward_stores_its_saved_statistics_from_the_rows_kernel(dump_dir):
    # A training step's layer norm saves each row's mean and 1/std for the backward: the
    # row-wise kernel that normalises the rows stores them too, so no other kernel reads the
    # rows again to recompute them.
    leaves, dy = _bf16_layer_norm_step(5, dump_dir)
    forward = _trn(dump_dir, "forward")
    assert re.findall(r'kind = "(\w+)", resultSegmentSizes', forward) == ["rows"], forward
    assert re.search(r'= "trn.kernel"\(\) \(\{.*?\}\) \{.*?kind = "rows", '
                     r'resultSegmentSizes = array<i32: 1, 2, 0>\} : \(\) -> '
                     r'\(tensor<4x128x256xbf16>, tensor<4x128x1xbf16>, tensor<4x128x1xbf16>\)',
                     forward, re.S), forward
    _assert_bf16_layer_norm_gradients(leaves, dy)


def test_multi_head_attention_block(dump_dir):
    # Heads split out of a fused QKV projection (batch x heads spans no single stride), the
    # scaled softmax as a row-wise kernel, heads merged back.
    B, S, H, D = 2, 64, 3, 32
    g = torch.Generator().manual_seed(3)
    qkv = torch.randn(B * S, 3 * H * D, generator=g)

    def attention(qkv):
        q, k, v = qkv.view(B, S, 3, H, D).permute(2, 0, 3, 1, 4)
        p = torch.softmax(q @ k.transpose(-1, -2) * D ** -0.5, -1)
        return (p @ v).transpose(1, 2).reshape(B * S, H * D)

    got = _native(attention, qkv, dump_dir=dump_dir)
    assert 'kind = "rows"' in _trn(dump_dir)
    torch.testing.assert_close(got, attention(qkv), rtol=1e-5, atol=1e-5)
