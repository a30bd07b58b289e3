"""A copy between layouts that share only their innermost dim (heads split out of token rows,
or merged back) is loaded in the source's order and stored in the destination's, reordered
on an engine (kernels/elementwise.py, _lower_regrouped_copy): the same bytes as eager, less
simulated time than one layout for both sides (option `regroup_copies`)."""

import pytest

torch = pytest.importorskip("torch")

from torchneuron import backend  # noqa: E402


def _run(fn, x, options=None):
    torch._dynamo.reset()
    first = len(backend.compiled_graphs())
    y = torch.compile(fn, backend="neuron", options=options)(x)
    (graph,) = backend.compiled_graphs()[first:]
    return y, graph


def _engine_copies(graph) -> int:
    streams = graph.last_profile.streams
    return sum(streams[e].opcodes.get("tensor_copy", 0) for e in ("act", "dve", "pool")
               if e in streams)


def _heads_to_tokens(x):
    # A QKV projection's gradient laid out per head [3, B, H, S, D], read per token.
    return x.permute(1, 3, 0, 2, 4).contiguous()


def test_head_to_token_copy_is_regrouped_and_exact():
    torch.manual_seed(0)
    x = torch.randn(3, 2, 4, 512, 64).to(torch.bfloat16)
    y, graph = _run(_heads_to_tokens, x)
    y_off, graph_off = _run(_heads_to_tokens, x, options={"regroup_copies": False})
    expected = _heads_to_tokens(x)
    assert torch.equal(y.view(torch.int16), expected.view(torch.int16))
    assert torch.equal(y_off.view(torch.int16), expected.view(torch.int16))
    assert _engine_copies(graph) > 0 and _engine_copies(graph_off) == 0
    assert graph.last_profile.total_ns < graph_off.last_profile.total_ns


def test_wide_integers_are_not_copied_through_an_engine():
    # An engine's copy goes through fp32, exact for 16-bit integers but not for int32.
    x = torch.arange(3 * 2 * 4 * 512 * 64, dtype=torch.int32).reshape(3, 2, 4, 512, 64)
    x = x * 4099 + (1 << 30)
    y, graph = _run(_heads_to_tokens, x)
    assert torch.equal(y, _heads_to_tokens(x))
    assert _engine_copies(graph) == 0
