"""The frontend's constant folding (compiler/frontend/fx_import.py, fold_constants): values
computed from no graph input become constants of the program, as eager computes them."""

import pytest

torch = pytest.importorskip("torch")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from torchneuron.compiler.frontend import fx_import  # noqa: E402
from torchneuron.compiler.frontend.fx_import import fold_constants  # noqa: E402


def causal_bias_added(x):
    i = torch.arange(x.shape[-1])
    return x + torch.where(i[None, :] <= i[:, None], 0.0, float("-inf"))


def _targets(gm):
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def test_a_mask_built_from_aranges_becomes_one_constant():
    x = torch.randn(6, 6)
    gm = make_fx(causal_bias_added)(x)
    folded = fold_constants(gm)
    assert not any("arange" in t or "where" in t for t in _targets(folded))
    constants = [n for n in folded.graph.nodes if n.op == "get_attr"]
    assert len(constants) == 1
    torch.testing.assert_close(getattr(folded, constants[0].target),
                               torch.full((6, 6), float("-inf")).triu(1))
    torch.testing.assert_close(folded(x), causal_bias_added(x), rtol=0, atol=0)
    assert any("arange" in t for t in _targets(gm))          # the caller's graph as it was


def test_a_value_repeated_throughout_becomes_a_fill():
    def f(x):
        return x * (torch.ones(4, 4) * 3.0)

    folded = fold_constants(make_fx(f)(torch.randn(4, 4)))
    fills = [n for n in folded.graph.nodes if n.target == torch.ops.aten.full.default]
    assert [list(n.args) for n in fills] == [[[4, 4], 3.0]]
    assert not any(n.op == "get_attr" for n in folded.graph.nodes)


def test_random_values_graph_results_and_large_values_stay_computed(monkeypatch):
    def noisy(x):
        return x + torch.rand(4, 4) * 2.0

    def returns_it(x):
        return x + 1, torch.arange(4) * 2

    for fn in (noisy, returns_it):
        gm = make_fx(fn)(torch.randn(4, 4))
        assert fold_constants(gm) is gm, fn.__name__
    monkeypatch.setattr(fx_import, "FOLD_MAX_ELEMENTS", 16)
    gm = make_fx(causal_bias_added)(torch.randn(6, 6))
    assert fold_constants(gm) is gm


@pytest.mark.parametrize("fold", [True, False])
def test_folded_mask_compiles_and_matches_eager(fold, tmp_path, monkeypatch):
    """With the option on, the program holds the mask as a constant; off, it computes it."""
    from torchneuron import backend

    x = torch.randn(2, 8, 8)
    model = lambda v: torch.softmax(causal_bias_added(v), -1)  # noqa: E731
    torch._dynamo.reset()
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))
    out = torch.compile(model, backend="neuron", options={"fold_constants": fold})(x)
    assert backend.graph_reports()[-1].fully_compiled
    torch.testing.assert_close(out, model(x))
    linalg = next(tmp_path.glob("*.linalg.mlir")).read_text()
    assert ("arith.constant dense<[[0.000000e+00, 0xFF800000" in linalg) == fold
    assert ("arith.cmpi" in linalg) != fold          # the arange comparison


def test_a_bool_mask_folds_and_imports_as_i1_constant():
    """scaled_dot_product_attention's is_causal mask (bool): folded, and imported as i1
    dense elements (torch-mlir's own bool import would run PyTorch in the forked child)."""
    from torchneuron.compiler.frontend.fx_import import import_fx_graph

    def f(x):
        i = torch.arange(x.shape[-1])
        return torch.where(i[None, :] <= i[:, None], x, 0.0)

    x = torch.randn(6, 6)
    folded = fold_constants(make_fx(f)(x))
    (constant,) = [n for n in folded.graph.nodes if n.op == "get_attr"]
    assert getattr(folded, constant.target).dtype == torch.bool
    torch.testing.assert_close(folded(x), f(x), rtol=0, atol=0)
    linalg = import_fx_graph(fold_constants(make_fx(f, tracing_mode="fake")(x)), "g")
    assert "arith.constant dense<" in linalg and "tensor<6x6xi1>" in linalg
    assert "dense_resource" not in linalg


def _scaled_by_one_constant(a, b):
    c = torch.arange(5, dtype=torch.float32) * 0.5      # folded, then read twice
    return a * c + b * c


@pytest.mark.parametrize("fn", [
    _scaled_by_one_constant,
    lambda a, b: torch.nn.functional.interpolate(a.reshape(1, 1, 3, 5), scale_factor=2,
                                                 mode="bilinear", align_corners=False) + b.sum(),
], ids=["two_readers", "bilinear"])
def test_a_folded_constant_read_by_two_ops_imports(fn):
    # torch-mlir imported a get_attr constant again at its second use and failed binding it
    # ("Node already has a value"): the whole graph fell back to PyTorch.
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron", options={"fallback": False})(a, b)
    torch.testing.assert_close(got, fn(a, b), rtol=1e-5, atol=1e-6)
