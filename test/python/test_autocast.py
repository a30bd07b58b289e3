"""Mixed precision: models run under torch.autocast(bfloat16) compile to bf16 matmuls on the PE
(bf16 stationary and moving operands, fp32 accumulation in PSUM) and match eager autocast.

Stated bf16 tolerances (bf16 keeps 8 significant bits: one ulp is 2**-8 relative at most):
- outputs: rtol 1.6e-2 (torch.testing's bf16 default, 4 ulp) and atol 1e-2 of the output's
  largest magnitude; and the compiled result is no further from the fp32 model than eager
  autocast is, within a factor of 2 (plus one ulp of the output's scale): the compiler keeps
  fused intermediates in fp32, so it is usually closer.
- training: every step's loss within 4e-3 relative (one bf16 ulp) of eager autocast's loss.
"""

import copy
import importlib.util
import inspect
import os

import pytest

torch = pytest.importorskip("torch")

from torchneuron import backend  # noqa: E402
from torchneuron.format import isa  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_RTOL, OUT_ATOL_SCALE = 1.6e-2, 1e-2
LOSS_RTOL = 4e-3
STEPS = 10


def autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def matmuls(graphs) -> list[tuple[tuple[str, str, str], str]]:
    """((psum destination, stationary, moving) dtypes, source location) of every PE matmul of
    the programs the backend emitted for `graphs`."""
    found = []
    for graph in graphs:
        locations = graph.program.neff.locations
        for stream in graph.program.neff.streams:
            for record in stream.records:
                ins = isa.decode_instruction(record)
                if ins.opcode == isa.Opcode.MATMUL:
                    assert ins.engine == isa.Engine.PE
                    assert ins.operands[0].memory == isa.Memory.PSUM
                    found.append((tuple(op.dtype.label for op in ins.operands[:3]),
                                  locations[ins.loc]))
    return found


def matmul_dtypes(graphs) -> dict[tuple[str, str, str], int]:
    counts: dict[tuple[str, str, str], int] = {}
    for key, _ in matmuls(graphs):
        counts[key] = counts.get(key, 0) + 1
    return counts


def assert_bf16_close(got, expected, reference):
    """`got` (compiled autocast) against `expected` (eager autocast) and `reference` (fp32)."""
    assert got.dtype == expected.dtype == torch.bfloat16
    scale = reference.abs().max().item()
    torch.testing.assert_close(got.float(), expected.float(), rtol=OUT_RTOL,
                               atol=OUT_ATOL_SCALE * scale)
    ours = (got.float() - reference).abs().max().item()
    eager = (expected.float() - reference).abs().max().item()
    assert ours <= 2 * eager + 2 ** -8 * scale, (ours, eager)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(256, 512)
        self.fc2 = torch.nn.Linear(512, 128)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc2(torch.relu(self.fc1(x))))


def test_mlp_compiles_to_bf16_matmuls_with_fp32_accumulation():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, x = MLP().eval(), torch.randn(64, 256)
    first = len(backend.compiled_graphs())
    with torch.no_grad():
        with autocast():
            got = torch.compile(model, backend="neuron")(x)
            expected = model(x)
        reference = model(x)
    assert_bf16_close(got, expected, reference)
    graphs = backend.compiled_graphs()[first:]
    assert matmul_dtypes(graphs).keys() == {("f32", "bf16", "bf16")}


def _bench_models():
    spec = importlib.util.spec_from_file_location("bench_models",
                                                  os.path.join(ROOT, "bench", "models.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_hf_model_forward_under_autocast(name):
    pytest.importorskip("transformers")
    models = _bench_models()
    torch._dynamo.reset()
    model = models.make_model(name).eval()
    ids, _ = models.make_inputs()
    first, first_report = len(backend.compiled_graphs()), len(backend.graph_reports())
    with torch.no_grad():
        with autocast():
            got = torch.compile(model, backend="neuron")(input_ids=ids).logits
            expected = model(input_ids=ids).logits
        reference = model(input_ids=ids).logits
    assert_bf16_close(got, expected, reference)
    for report in backend.graph_reports()[first_report:]:
        assert report.fully_compiled, str(report)
    assert matmul_dtypes(backend.compiled_graphs()[first:]).keys() == {("f32", "bf16", "bf16")}


def test_training_under_autocast_tracks_eager_autocast():
    """The small transformer of test_training.py (embedding, attention, layernorm, GELU MLP,
    cross-entropy), AdamW, forward and backward under autocast."""
    from test_training import Transformer, _batches

    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = Transformer()
    mine = copy.deepcopy(eager)
    compiled = torch.compile(mine, backend="neuron")
    make = lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.01)  # noqa: E731
    opt_eager, opt_mine = make(eager.parameters()), make(mine.parameters())
    batches = _batches("transformer")
    first, first_report = len(backend.compiled_graphs()), len(backend.graph_reports())
    for step in range(STEPS):
        x, y = batches[step % len(batches)]
        losses = []
        for fn, opt in ((eager, opt_eager), (compiled, opt_mine)):
            opt.zero_grad()
            with autocast():
                loss = fn(x, y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        expected, got = losses
        assert abs(got - expected) <= LOSS_RTOL * abs(expected), (step, got, expected)
    reports = backend.graph_reports()[first_report:]
    assert sorted(r.kind for r in reports) == ["backward", "forward"]
    for report in reports:
        assert report.fully_compiled, str(report)
    # The linear and attention matmuls, forward and backward, are bf16 on the PE. fp32
    # matmuls remain only for fp32 work: sums over the partition axis (a ones-vector matmul;
    # the layernorm and bias gradients) and the embedding's backward (a one-hot matmul into
    # the fp32 weight's gradient), which eager autocast also computes in fp32.
    found = matmuls(backend.compiled_graphs()[first:])
    assert sum(1 for key, _ in found if key == ("f32", "bf16", "bf16")) >= 30
    lines, start = inspect.getsourcelines(Transformer.forward)
    embedding = f":{start + next(i for i, l in enumerate(lines) if 'self.emb(ids)' in l)}:"
    for key, location in found:
        if key != ("f32", "bf16", "bf16"):
            assert key == ("f32", "f32", "f32"), (key, location)
            assert location.startswith('loc("sum') or embedding in location, location


def test_log_softmax_of_a_bf16_matmul():
    # The matmul's kernel rounds its product to bf16 as it evacuates PSUM (half the bytes of
    # an fp32 product) and the log_softmax's row-wise kernel widens what it reads: the result
    # is eager's, the log_softmax of the rounded product, not of the fp32 accumulator.
    def f(x, w):
        return torch.log_softmax((x.bfloat16() @ w.bfloat16()).float(), -1)

    torch._dynamo.reset()
    x, w = torch.randn(32, 16), torch.randn(16, 64)
    got = torch.compile(f, backend="neuron", options={"fallback": False})(x, w)
    torch.testing.assert_close(got, f(x, w), rtol=1e-5, atol=1e-5)
    unrounded = torch.log_softmax(x.bfloat16().float() @ w.bfloat16().float(), -1)
    assert (got - unrounded).abs().max() > 1e-3      # the rounding is there to see
