"""Sums over leading dims (bias gradients, means over the batch) summed across partitions on
PE, against eager, fp32 and bf16, with ops before and after the reduction."""

import pytest

torch = pytest.importorskip("torch")

CASES = {
    "sum_two_leading_dims": lambda a: a.sum((0, 1)),
    "sum_then_affine": lambda a: a.sum(0) * 2 + 1,
    "mean_of_squares": lambda a: (a * a).mean(0),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(CASES))
def test_leading_sum_matches_eager(name, dtype):
    fn = CASES[name]
    # 1200 rows (9 full row tiles and one of 48) x 700 columns (a 512 chunk and one of 188).
    x = torch.randn(300, 4, 700, generator=torch.Generator().manual_seed(0)).to(dtype)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron", options={"fallback": False})(x)
    want = fn(x.float())
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    else:
        # fp32 sums of exact bf16 products, rounded once to bf16.
        torch.testing.assert_close(got.float(), want.to(dtype).float(), rtol=8e-3, atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_elementwise_with_a_transposed_operand(dtype):
    # The transposed operand is read in row blocks turned around on PE (its DMA would move
    # one element per descriptor otherwise); values pass through unchanged.
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 300, 200, generator=g).to(dtype)
    y = torch.randn(2, 200, 300, generator=g).to(dtype)
    fn = lambda a, b: a * 2 + b.transpose(1, 2)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron", options={"fallback": False})(x, y)
    torch.testing.assert_close(got, fn(x, y), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_per_row_operands_of_elementwise_and_reduction_kernels_match_eager(dtype):
    """A value broadcast along a row (one per partition) is read per partition: an elementwise
    kernel's (m - x) / s and a reduction over rows of (x - m) * s take tensor_scalars with the
    per-row value as their operand, in fp32 as eager computes each op: exact in fp32 (the sums
    as exact as PE's summation order allows); in bf16 within one rounding of eager, which
    rounds between the two ops where the fused kernel does not (the sums of bf16 terms are
    left to the fp32 case)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(384, 96, generator=g).to(dtype)
    m = torch.randn(384, generator=g).to(dtype)
    s = (torch.rand(384, generator=g) + 0.5).to(dtype)

    def rows(a, mean, scale):
        return (mean[:, None] - a) / scale[:, None]

    def column_sums(a, mean, scale):
        return ((a - mean[:, None]) * scale[:, None]).sum(0)

    cases = [(rows, dict(rtol=0, atol=0) if dtype == torch.float32 else
              dict(rtol=8e-3, atol=8e-3))]
    if dtype == torch.float32:
        cases.append((column_sums, dict(rtol=1e-4, atol=1e-4)))
    for fn, tolerance in cases:
        torch._dynamo.reset()
        got = torch.compile(fn, backend="neuron", options={"fallback": False})(x, m, s)
        torch.testing.assert_close(got, fn(x, m, s), **tolerance)
