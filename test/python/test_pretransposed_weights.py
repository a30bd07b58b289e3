"""Inference graphs take the weights they read transposed as transposed inputs
(torchneuron/pretransposed_weights.py): the device program reads W^T laid out, and the
results stay those of eager PyTorch, also after the weights change."""

import pytest

torch = pytest.importorskip("torch")

from torchneuron import backend  # noqa: E402


class TwoLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(256, 512)
        self.fc2 = torch.nn.Linear(512, 128)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _compile_and_run(model, x, options=None, grad=False):
    torch._dynamo.reset()
    first = len(backend.compiled_graphs())
    compiled = torch.compile(model, backend="neuron", options=options)
    with torch.set_grad_enabled(grad):
        y = compiled(x)
        expected = model(x)
    graphs = backend.compiled_graphs()[first:]
    return compiled, y, expected, graphs


def _pe_transposes(graph) -> int:
    return graph.last_profile.streams["pe"].opcodes.get("transpose", 0)


def _input_shapes(graph) -> list:
    return sorted(tuple(spec.shape) for spec in graph.program.inputs)


def test_inference_reads_weights_transposed_and_matches_eager():
    torch.manual_seed(0)
    model = TwoLinear().eval()
    x = torch.randn(64, 256)
    _, y, expected, graphs = _compile_and_run(model, x)
    off_model = TwoLinear().eval()
    off_model.load_state_dict(model.state_dict())
    _, y_off, _, graphs_off = _compile_and_run(off_model, x,
                                               options={"pretransposed_weights": False})
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y_off, expected, rtol=1e-5, atol=1e-5)
    (graph,), (graph_off,) = graphs, graphs_off
    # The program's weight inputs are W^T [in, out]; without the rewrite, W [out, in].
    assert (256, 512) in _input_shapes(graph) and (512, 128) in _input_shapes(graph)
    assert (512, 256) not in _input_shapes(graph)
    assert (512, 256) in _input_shapes(graph_off) and (128, 512) in _input_shapes(graph_off)
    # The device no longer transposes the weights (only x, which is not static).
    assert _pe_transposes(graph) < _pe_transposes(graph_off)
    assert graph.last_profile.total_ns < graph_off.last_profile.total_ns


def test_weights_changed_between_calls_are_read_afresh():
    torch.manual_seed(0)
    model = TwoLinear().eval()
    x = torch.randn(64, 256)
    compiled, _, _, _ = _compile_and_run(model, x)
    with torch.no_grad():
        model.fc1.weight.mul_(2)                          # in place: the version changes
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        model.fc2.weight.data.copy_(torch.randn(128, 512))   # through .data: it does not
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


def test_training_graphs_keep_the_weights_as_they_are():
    torch.manual_seed(0)
    model = TwoLinear()
    x = torch.randn(64, 256)
    _, y, expected, graphs = _compile_and_run(model, x, grad=True)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
    forward = [g for g in graphs if g.name.endswith("_forward")]
    assert forward and (512, 256) in _input_shapes(forward[0])
    assert (256, 512) not in _input_shapes(forward[0])


class TiedHead(torch.nn.Module):
    """An embedding whose table is also the output projection (as GPT-2's LM head)."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(1000, 128)

    def forward(self, ids):
        return self.table(ids) @ self.table.weight.t()


def test_a_tied_weight_keeps_its_other_uses():
    torch.manual_seed(0)
    model = TiedHead().eval()
    ids = torch.randint(0, 1000, (64,))
    _, y, expected, graphs = _compile_and_run(model, ids)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
    shapes = [s for g in graphs for s in _input_shapes(g)]
    # The lookup reads the table, the product its transpose.
    assert (1000, 128) in shapes and (128, 1000) in shapes
