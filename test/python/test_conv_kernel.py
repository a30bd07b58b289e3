"""Convolution kernels end to end: a ResNet basic block in inference (convolution, batch
norm as per-channel epilogue steps, ReLU, residual) against eager PyTorch."""

import os
import sys

import pytest

torch = pytest.importorskip("torch")

from torchneuron import backend  # noqa: E402


def _basic_block_class():
    """The performance suite's ResNet basic block (bench/perf.py), so that the block tested
    is the block measured."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    try:
        import perf
    finally:
        sys.path.pop(0)
    return perf.ConvBlock


def _block(channels: int, seed: int) -> torch.nn.Module:
    """Eval mode with running statistics and affine parameters away from their defaults, so
    that every per-channel step of the batch norm changes the values."""
    torch.manual_seed(seed)
    block = _basic_block_class()(channels).eval()
    with torch.no_grad():
        for bn in (block.bn1, block.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
    return block


def _compiled_graphs(fn):
    first = len(backend.compiled_graphs())
    result = fn()
    return result, backend.compiled_graphs()[first:]


@pytest.mark.parametrize("channels", [8, 64])
def test_basic_block_inference_matches_eager(channels):
    block = _block(channels, seed=channels)
    x = torch.randn(2, channels, 10, 10, generator=torch.Generator().manual_seed(1))
    torch._dynamo.reset()
    with torch.no_grad():
        got, graphs = _compiled_graphs(
            lambda: torch.compile(block, backend="neuron", options={"fallback": False})(x))
        expected = block(x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert len(graphs) == 1        # the whole block in one program


# Convolutions whose input-channel tiles leave PE's rows free share matmuls between
# neighbouring kernel positions (each reading a shifted copy of the plane; with two per
# matmul, the positions left at the end of the kernel's rows pair up across rows): strides,
# dilations, padding on one side only, groups, 1-D and 3-D kernels, and a kernel as wide as
# the input, against eager.
@pytest.mark.parametrize("case", [
    dict(shape=(2, 3, 23, 23), weight=(16, 3, 7, 7), stride=2, padding=3),      # an RGB stem
    dict(shape=(1, 8, 12, 12), weight=(8, 8, 3, 3), dilation=2, padding=2),
    dict(shape=(1, 16, 9, 9), weight=(16, 8, 3, 3), groups=2, padding=1),
    dict(shape=(2, 4, 7, 7), weight=(6, 4, 3, 2), padding=(0, 1)),
    dict(shape=(1, 4, 5, 5), weight=(4, 4, 5, 5)),
    dict(shape=(2, 40, 6, 6), weight=(8, 40, 1, 1)),
    dict(shape=(2, 5, 17), weight=(7, 5, 4), stride=3, padding=2),
    dict(shape=(1, 4, 5, 6, 7), weight=(3, 4, 2, 3, 3), padding=1),
    dict(shape=(1, 64, 11, 11), weight=(32, 64, 3, 3), stride=2, dilation=(2, 1), padding=2),
    dict(shape=(1, 48, 9, 10), weight=(16, 48, 5, 5), padding=(2, 1)),
], ids=["stem_7x7_s2", "dilated", "grouped", "uneven_padding", "kernel_as_wide", "1x1",
        "conv1d", "conv3d", "rows_paired_strided_dilated", "rows_paired_5x5"])
def test_convolutions_sharing_matmuls_between_positions_match_eager(case):
    case = dict(case)
    x = torch.randn(*case.pop("shape"), generator=torch.Generator().manual_seed(2))
    w = torch.randn(*case.pop("weight"), generator=torch.Generator().manual_seed(3))
    conv = {3: torch.nn.functional.conv1d, 4: torch.nn.functional.conv2d,
            5: torch.nn.functional.conv3d}[x.dim()]
    fn = lambda a, b: conv(a, b, **case)     # noqa: E731
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron", options={"fallback": False})(x, w)
    torch.testing.assert_close(got, fn(x, w), rtol=1e-5, atol=1e-4)
