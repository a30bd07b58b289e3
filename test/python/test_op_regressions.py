"""Ops the OpInfo sweep once found wrong, compiled with fallback off so they run natively."""

import pytest

torch = pytest.importorskip("torch")


def _native(fn, *args):
    torch._dynamo.reset()
    return torch.compile(fn, backend="neuron", options={"fallback": False})(*args)


def test_logcumsumexp_of_large_values_does_not_overflow():
    # log(cumsum(exp(x))) overflows to inf from x ~ 89; the logaddexp scan does not.
    x = torch.randn(3, 10, generator=torch.Generator().manual_seed(0)) * 1e4
    got = _native(lambda a: torch.logcumsumexp(a, 1), x)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, torch.logcumsumexp(x, 1), rtol=1e-5, atol=1e-3)


def test_bf16_round_is_computed_in_fp32():
    # Adding 2^23 to a bf16 value to round it would lose the value itself.
    x = (torch.randn(4, 16, generator=torch.Generator().manual_seed(1)) * 50).bfloat16()
    torch.testing.assert_close(_native(torch.round, x), torch.round(x), rtol=0, atol=0)


def test_bf16_op_computes_in_fp32_and_rounds_once():
    # Eager computes a bf16 gelu in fp32 and rounds the result; the fused body must too
    # (its constant sqrt(1/2) folds rather than failing to compile).
    x = (torch.randn(64, 64, generator=torch.Generator().manual_seed(3)) * 3).bfloat16()
    fn = torch.nn.functional.gelu
    got = _native(fn, x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, fn(x), rtol=0, atol=2 ** -14)


def test_integer_floor_division():
    a = torch.tensor([7, -7, 9, -9, 100, 0], dtype=torch.int32)
    b = torch.tensor([2, 2, -4, -4, 7, 3], dtype=torch.int32)
    got = _native(lambda p, q: torch.div(p, q, rounding_mode="floor"), a, b)
    assert torch.equal(got, torch.div(a, b, rounding_mode="floor"))
    got = _native(lambda p, q: torch.div(p, q, rounding_mode="trunc"), a, b)
    assert torch.equal(got, torch.div(a, b, rounding_mode="trunc"))
