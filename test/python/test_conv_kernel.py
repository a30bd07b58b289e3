"""Convolution kernels end to end: a ResNet basic block in inference (convolution, batch
norm as per-channel epilogue steps, ReLU, residual) against eager PyTorch."""

import pytest

torch = pytest.importorskip("torch")

from torchneuron import backend  # noqa: E402


class BasicBlock(torch.nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(channels)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(channels)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


def _block(channels: int, seed: int) -> BasicBlock:
    """Eval mode with running statistics and affine parameters away from their defaults, so
    that every per-channel step of the batch norm changes the values."""
    torch.manual_seed(seed)
    block = BasicBlock(channels).eval()
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
