"""HuggingFace transformers models (small configs, random weights, nothing downloaded) through
torch.compile(backend="neuron"): forward (eval) and one training step against eager, with
every graph on the NeuronCore. bench/models.py builds the models and prints their compile
time, simulated time, FLOP fraction and fallback ops (the README's table)."""

import copy
import importlib.util
import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torchneuron import backend  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The models and inputs are bench/models.py's (one definition of the small configs).
_spec = importlib.util.spec_from_file_location("bench_models", os.path.join(ROOT, "bench",
                                                                             "models.py"))
bench_models = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_models)
make_model, inputs, MODELS = bench_models.make_model, bench_models.make_inputs, \
    list(bench_models.MODELS)

FORWARD_TOL = dict(rtol=1e-4, atol=1e-5)     # fp32 logits
WEIGHT_TOL = dict(rtol=1e-4, atol=1e-5)      # fp32 weights after one SGD step
GRAD_RTOL = 1e-4                             # gradients: relative, and absolute relative to
GRAD_ATOL_SCALE = 1e-5                       # the largest gradient of the model


def _fully_compiled(reports):
    assert reports
    for report in reports:
        assert report.fully_compiled and report.flop_fraction == 1.0, str(report)


@pytest.mark.parametrize("name", MODELS)
def test_forward_matches_eager(name):
    torch._dynamo.reset()
    model = make_model(name).eval()
    ids, _ = inputs()
    first = len(backend.graph_reports())
    with torch.no_grad():
        got = torch.compile(model, backend="neuron")(input_ids=ids).logits
        expected = model(input_ids=ids).logits
    torch.testing.assert_close(got, expected, **FORWARD_TOL)
    _fully_compiled(backend.graph_reports()[first:])


@pytest.mark.parametrize("name", MODELS)
def test_training_step_matches_eager(name):
    torch._dynamo.reset()
    eager = make_model(name).train()
    mine = copy.deepcopy(eager)
    ids, labels = inputs()
    first = len(backend.graph_reports())
    out_eager = eager(input_ids=ids, labels=labels)
    out_mine = torch.compile(mine, backend="neuron")(input_ids=ids, labels=labels)
    torch.testing.assert_close(out_mine.logits, out_eager.logits, **FORWARD_TOL)
    torch.testing.assert_close(out_mine.loss, out_eager.loss, **FORWARD_TOL)
    out_eager.loss.backward()
    out_mine.loss.backward()
    params = list(zip(eager.named_parameters(), mine.parameters()))
    scale = max(a.grad.abs().max().item() for (_, a), _ in params if a.grad is not None)
    for (pname, a), b in params:
        assert (a.grad is None) == (b.grad is None), pname
        if a.grad is not None:
            torch.testing.assert_close(b.grad, a.grad, rtol=GRAD_RTOL,
                                       atol=GRAD_ATOL_SCALE * scale, msg=lambda m: f"{pname}: {m}")
    # SGD: the update is proportional to the gradient. (A first AdamW step is ~lr * sign(g),
    # which turns a 1e-12 difference in a ~1e-8 gradient into a visible one.)
    for model in (eager, mine):
        torch.optim.SGD(model.parameters(), lr=0.1).step()
    for (pname, a), b in params:
        torch.testing.assert_close(b, a, **WEIGHT_TOL, msg=lambda m: f"{pname}: {m}")
    reports = backend.graph_reports()[first:]
    assert {r.kind for r in reports} == {"forward", "backward"}
    _fully_compiled(reports)


def test_bench_row_comes_from_explain():
    """bench/models.py's row for one model: figures from torchneuron.explain's report."""
    row = bench_models.measure("llama", "forward")
    assert (row["model"], row["step"], row["graphs"], row["graph_breaks"]) == \
        ("llama", "forward", 1, 0)
    assert row["compile_s"] > 0 and row["simulated_us"] > 0 and row["mflop"] > 0
    assert row["neuron_flop_fraction"] == 1.0 and row["fallback_ops"] == {}
    cells = bench_models.row_cells(row)
    assert len(cells) == len(bench_models.HEADER) and cells[-1] == "none"
