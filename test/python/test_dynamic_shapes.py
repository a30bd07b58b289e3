"""Dynamic shapes. The strategy (README, "Dynamic shapes"): a NEFF's shapes are static, so a
graph Dynamo hands over with symbolic sizes (dynamic=True, mark_dynamic, or its automatic
dynamic shapes once a size has changed) is compiled once per concrete input signature, on first
use, and a signature seen before reuses its compiled variant. Every compile of a new signature
is logged on the "torchneuron" logger, with the number of recompiles so far."""

import copy
import importlib.util
import logging
import os
import re

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from torchneuron import backend  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOL = dict(rtol=1e-4, atol=1e-5)


def compiles_logged(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "torchneuron" and re.search(r": (new )?input shapes .*compiling",
                                                     r.getMessage())]


def new_reports(first: int) -> list:
    return backend.graph_reports()[first:]


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(32, 64), torch.nn.Linear(64, 8)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


def test_new_batch_size_compiles_once_then_reuses(caplog):
    """Without dynamic=...: the first batch size is compiled static; the first new one makes
    Dynamo trace a symbolic graph, compiled per batch size; repeats compile nothing. Forward
    and backward graphs alike, with gradients that match eager."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = MLP()
    mine = copy.deepcopy(eager)
    compiled = torch.compile(mine, backend="neuron")
    first = len(backend.graph_reports())
    counts = []
    with caplog.at_level(logging.INFO, logger="torchneuron"):
        for batch in (4, 8, 8, 16, 16, 8):
            x = torch.randn(batch, 32)
            for model, fn in ((eager, eager), (mine, compiled)):
                model.zero_grad()
                fn(x).square().mean().backward()
            torch.testing.assert_close(compiled(x), eager(x), **TOL)
            for a, b in zip(eager.parameters(), mine.parameters()):
                torch.testing.assert_close(b.grad, a.grad, **TOL)
            counts.append(len(new_reports(first)))
    # a forward and a backward graph compiled per new batch size, nothing for a repeat
    assert counts == [2, 4, 4, 6, 6, 6]
    names = [r.name for r in new_reports(first)]       # graph numbers are per process
    static, dynamic = names[0].split("_")[0], names[2].split("_")[0]
    assert names == [f"{static}_forward", f"{static}_backward",
                     f"{dynamic}_forward_v0", f"{dynamic}_backward_v0",
                     f"{dynamic}_forward_v1", f"{dynamic}_backward_v1"]
    assert all(r.fully_compiled for r in new_reports(first))
    logged = compiles_logged(caplog)
    assert len(logged) == 4
    assert sum("recompile 1 of this dynamic-shape graph" in m for m in logged) == 2
    assert any("float32[16, 32]" in m for m in logged)
    assert any("has symbolic sizes" in r.getMessage() for r in caplog.records)


def test_dynamic_true_compiles_each_shape_once(caplog):
    def f(x, y):
        return torch.softmax(x @ y, dim=-1) * 2.0

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="neuron", dynamic=True)
    first = len(backend.graph_reports())
    with caplog.at_level(logging.INFO, logger="torchneuron"):
        for m, k, n in ((4, 8, 16), (6, 8, 16), (4, 8, 16), (6, 12, 10), (6, 8, 16)):
            x, y = torch.randn(m, k), torch.randn(k, n)
            torch.testing.assert_close(compiled(x, y), f(x, y), **TOL)
    reports = new_reports(first)
    assert [r.name.rsplit("_", 1)[1] for r in reports] == ["v0", "v1", "v2"]
    assert all(r.fully_compiled for r in reports)
    assert len(compiles_logged(caplog)) == 3
    assert "recompile 2 of this dynamic-shape graph" in compiles_logged(caplog)[-1]


def test_mark_dynamic_sequence_length_in_training():
    """The small transformer of test_training.py with its sequence length marked dynamic:
    forward and backward per length, losses and gradients as eager's."""
    from test_training import Transformer

    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = Transformer()
    mine = copy.deepcopy(eager)
    compiled = torch.compile(mine, backend="neuron")
    first = len(backend.graph_reports())
    g = torch.Generator().manual_seed(1)
    for length in (8, 12, 8, 16):
        ids = torch.randint(0, 64, (2, length), generator=g)
        targets = torch.randint(0, 64, (2, length), generator=g)
        torch._dynamo.mark_dynamic(ids, 1)
        torch._dynamo.mark_dynamic(targets, 1)
        losses = []
        for model, fn in ((eager, eager), (mine, compiled)):
            model.zero_grad()
            loss = fn(ids, targets)
            loss.backward()
            losses.append(loss)
        torch.testing.assert_close(losses[1], losses[0], **TOL)
        for a, b in zip(eager.parameters(), mine.parameters()):
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6)
    reports = new_reports(first)
    # lengths 8, 12 and 16: a forward and a backward variant each; the second 8 reused
    assert sorted(r.name.rsplit("_", 1)[1] for r in reports) == ["v0", "v0", "v1", "v1",
                                                                  "v2", "v2"]
    assert all(r.fully_compiled for r in reports), "\n".join(map(str, reports))


def _bench_models():
    spec = importlib.util.spec_from_file_location("bench_models",
                                                  os.path.join(ROOT, "bench", "models.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("dynamic", [None, True])
def test_hf_gpt2_new_sequence_lengths(dynamic):
    """GPT-2 (small config) at sequence lengths 8, 16, 12, 16, 8. dynamic=None: 8 compiles
    static, 16 and 12 as variants of Dynamo's symbolic graph, and 8 once more as one (after
    Dynamo's switch to a symbolic graph, that graph's guards match first). dynamic=True: one
    variant per length. Python floats Dynamo turns into 0-d float64 inputs under dynamic=True
    are computed in PyTorch (reported as dtype fallbacks); everything else is native."""
    pytest.importorskip("transformers")
    models = _bench_models()
    torch._dynamo.reset()
    model = models.make_model("gpt2").eval()
    compiled = torch.compile(model, backend="neuron", dynamic=dynamic)
    first = len(backend.graph_reports())
    with torch.no_grad():
        for length in (8, 16, 12, 16, 8):
            ids, _ = models.make_inputs(2, length)
            torch.testing.assert_close(compiled(input_ids=ids).logits,
                                       model(input_ids=ids).logits, **TOL)
    reports = new_reports(first)
    suffixes = [r.name.rsplit("_", 1)[1] for r in reports]
    if dynamic:
        assert suffixes == ["v0", "v1", "v2"]
        for r in reports:
            assert {n.category for n in r.fallbacks} <= {"dtype"}, str(r)
            assert r.flop_fraction > 0.99, str(r)
    else:
        assert suffixes == ["forward", "v0", "v1", "v2"]
        assert all(r.fully_compiled for r in reports), "\n".join(map(str, reports))
