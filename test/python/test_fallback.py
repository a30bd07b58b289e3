"""CPU fallback: unsupported nodes run in PyTorch, the rest on the NeuronCore, and the report
says which and why (torchneuron.partition, torchneuron.report, torchneuron.explain)."""

import json
import logging
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import torchneuron  # noqa: E402
from torchneuron import backend, partition  # noqa: E402
from torchneuron.compiler import pipeline  # noqa: E402
from torchneuron.compiler.errors import CompileError  # noqa: E402

THIS = __file__


def compile_and_check(fn, *args, options=None, dynamic=False, **tol):
    """Compile fn with backend="neuron", check it against eager and return the reports of the
    graphs compiled meanwhile."""
    torch._dynamo.reset()
    first = len(backend.graph_reports())
    got = torch.compile(fn, backend="neuron", options=options, dynamic=dynamic)(*args)
    torch.testing.assert_close(got, fn(*args), **tol)
    return backend.graph_reports()[first:]


def fallback(report, node):
    matches = [n for n in report.fallbacks if n.node == node]
    assert matches, f"{node} did not fall back:\n{report}"
    return matches[0]


class SortInTheMiddle(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 16)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h, _ = torch.sort(h, dim=-1)      # no NeuronCore lowering: runs in PyTorch
        return self.fc2(h * 2.0)


def test_unsupported_op_in_the_middle_runs_in_pytorch(caplog):
    torch.manual_seed(0)
    model = SortInTheMiddle().eval()
    x = torch.randn(8, 32)
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="torchneuron"):
        (report,) = compile_and_check(model, x, rtol=1e-5, atol=1e-5)
    sort = fallback(report, "sort")
    assert sort.op == "aten.sort"
    assert sort.category in ("import", "compile") and "tm_tensor.sort" in sort.reason   # the op, not its yield
    assert sort.source["file"] == THIS and "torch.sort(h, dim=-1)" in sort.source["code"]
    assert len(report.fallbacks) == 1
    ops = report.compiled_ops
    assert ops["aten.addmm"] == 2 and ops["aten.relu"] == 1 and ops["aten.mul"] == 1
    assert report.partitions == 2                      # before and after the sort
    assert 0.9 < report.flop_fraction < 1.0
    # the compiled partitions really ran on the simulator
    assert backend.compiled_graphs()[-1].last_profile.total_ns > 0
    # the report is logged when the graph is compiled
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "fell back to PyTorch" in logged and "sort (aten.sort)" in logged
    assert f"{THIS}:" in logged


# -- dynamic attribution: failures found only when compiling ------------------------------------

def _failing_compile(monkeypatch, when, error):
    """Make the compiler fail on every linalg module containing `when`."""
    real = pipeline.compile_linalg

    def compile_linalg(text, *args, **kwargs):
        if when(text):
            raise error
        return real(text, *args, **kwargs)

    monkeypatch.setattr(pipeline, "compile_linalg", compile_linalg)


def mm_tanh_mul(x, w):
    y = x @ w
    z = torch.tanh(y)
    return z * 3.0 + 1.0


def test_compile_failure_naming_a_node_falls_back_only_that_node(monkeypatch):
    loc = f'loc("tanh"("{THIS}":1:0))'
    _failing_compile(monkeypatch, lambda t: "math.tanh" in t,
                     CompileError("no lowering for tanh (injected)", loc))
    x, w = torch.randn(16, 32), torch.randn(32, 8)
    (report,) = compile_and_check(mm_tanh_mul, x, w, rtol=1e-5, atol=1e-5)
    tanh = fallback(report, "tanh")
    assert tanh.category == "compile" and tanh.reason == "no lowering for tanh (injected)"
    assert "torch.tanh(y)" in tanh.source["code"]
    assert [n.node for n in report.fallbacks] == ["tanh"]
    assert {"mm", "mul", "add"} <= {n.node for n in report.compiled}
    assert report.partitions == 2 and report.rounds == 2


def test_failure_naming_no_node_is_attributed_by_compiling_nodes_alone(monkeypatch):
    _failing_compile(monkeypatch, lambda t: "math.tanh" in t,
                     CompileError("stage trn failed somewhere (injected)"))
    (report,) = compile_and_check(mm_tanh_mul, torch.randn(16, 32), torch.randn(32, 8),
                                  rtol=1e-5, atol=1e-5)
    assert [n.node for n in report.fallbacks] == ["tanh"]
    assert fallback(report, "tanh").reason == "stage trn failed somewhere (injected)"


def test_failure_no_single_node_explains_falls_back_the_partition(monkeypatch):
    _failing_compile(monkeypatch, lambda t: "math.tanh" in t and "linalg.matmul" in t,
                     CompileError("matmul next to tanh (injected)"))
    (report,) = compile_and_check(mm_tanh_mul, torch.randn(16, 32), torch.randn(32, 8),
                                  rtol=1e-5, atol=1e-5)
    nodes = {n.node: n for n in report.fallbacks}
    assert {"mm", "tanh", "mul", "add"} <= set(nodes)
    assert all(n.category == "partition" and "matmul next to tanh" in n.reason
               for n in nodes.values())
    assert report.partitions == 0 and report.flop_fraction == 0.0


def test_internal_compiler_error_falls_back(monkeypatch):
    _failing_compile(monkeypatch, lambda t: "math.tanh" in t, KeyError("oops"))
    (report,) = compile_and_check(mm_tanh_mul, torch.randn(16, 32), torch.randn(32, 8),
                                  rtol=1e-5, atol=1e-5)
    tanh = fallback(report, "tanh")
    assert tanh.category == "compile" and "internal compiler error: KeyError" in tanh.reason


def test_failure_on_the_device_falls_back_at_run_time(monkeypatch, caplog):
    def broken(self, *args):
        raise RuntimeError("SBUF overflow (injected)")

    monkeypatch.setattr(backend.CompiledGraph, "__call__", broken)
    torch._dynamo.reset()
    first = len(backend.graph_reports())
    f = torch.compile(mm_tanh_mul, backend="neuron")
    x, w = torch.randn(16, 32), torch.randn(32, 8)
    with caplog.at_level(logging.WARNING, logger="torchneuron"):
        for _ in range(2):
            torch.testing.assert_close(f(x, w), mm_tanh_mul(x, w))
    (report,) = backend.graph_reports()[first:]
    assert report.partitions == 0
    assert {n.category for n in report.fallbacks} == {"runtime"}
    assert "SBUF overflow (injected)" in report.fallbacks[0].reason
    assert "failed on the device" in caplog.text


@pytest.mark.parametrize("fn", [lambda w, i: torch.gather(w, 1, i) * 2.0,
                                lambda w, i: torch.nn.functional.embedding(i[:, 0], w.t()) * 2.0],
                         ids=["gather", "embedding"])
def test_index_out_of_range_raises_as_eager_and_keeps_the_device(fn, caplog):
    # Index 10 of a row of 10 lands inside the tensor (the next row's first element): the
    # gather's bounds check sends it outside, the DMA reports it, PyTorch runs that call and
    # raises as eager does; the next call runs on the device again.
    w = torch.arange(40.0).reshape(4, 10)
    good, bad = torch.tensor([[0], [9], [3], [1]]), torch.tensor([[0], [10], [3], [1]])
    torch._dynamo.reset()
    first = len(backend.graph_reports())
    f = torch.compile(fn, backend="neuron")
    with torch.no_grad():
        torch.testing.assert_close(f(w, good), fn(w, good))
        with caplog.at_level(logging.INFO, logger="torchneuron"), \
                pytest.raises((IndexError, RuntimeError)):
            f(w, bad)
        assert "index out of range" in caplog.text
        torch.testing.assert_close(f(w, good), fn(w, good))
    (report,) = backend.graph_reports()[first:]
    assert not report.fallbacks and report.partitions == 1
    with torch.no_grad():
        torch._dynamo.reset()
        strict = torch.compile(fn, backend="neuron", options={"fallback": False})
        strict(w, good)
        with pytest.raises(Exception, match="takes a row outside tensor"):
            strict(w, bad)


# -- torch-mlir import failures -------------------------------------------------------------------

@torch.library.custom_op("torchneuron_test::shuffle", mutates_args=())
def shuffle(x: torch.Tensor) -> torch.Tensor:
    return x.flip(-1).clone()


@shuffle.register_fake
def _(x):
    return torch.empty_like(x)


def test_import_failure_falls_back_the_node_torch_mlir_cannot_lower():
    def f(x):
        y = torch.exp(x)
        z = shuffle(y)
        return z * 2.0

    (report,) = compile_and_check(f, torch.randn(8, 16))
    node = fallback(report, "shuffle")
    assert node.category == "import" and "torch-mlir" in node.reason
    assert "shuffle" in node.reason and "z = shuffle(y)" in node.source["code"]
    assert {"exp", "mul"} <= {n.node for n in report.compiled}


@pytest.mark.parametrize("pool", [torch.nn.functional.adaptive_avg_pool1d,
                                  torch.nn.functional.adaptive_max_pool1d])
def test_lowering_torch_mlir_asserts_wrong_falls_back(pool):
    # Windows of 12 inputs over 5 outputs differ in size (2 or 3): torch-mlir lowers the
    # pooling to one fixed window and asserts false; computed as lowered, the values are wrong.
    x = torch.arange(12.0).reshape(1, 1, 12)
    with torch.no_grad():
        (report,) = compile_and_check(lambda t: pool(t, 5) * 2.0, x)
    (node,) = report.fallbacks
    assert node.category == "compile" and "fixed stride size" in node.reason
    assert "aten.mul" in {n.op for n in report.compiled}
    # Windows of one size (12 over 4) are lowered correctly, and run on the NeuronCore.
    with torch.no_grad():
        (report,) = compile_and_check(lambda t: pool(t, 4) * 2.0, x)
    assert not report.fallbacks


def test_import_runs_torch_ops_in_the_child_after_the_thread_pool_started(monkeypatch):
    """torch-mlir's importer runs torch ops of its own (as_strided is rewritten with index
    tensors from torch.full and arange) in the forked child. After a parallel op in this
    process started PyTorch's OpenMP pool, a parallel op there waited for workers the fork
    did not copy until the import timed out, and the graph fell back to the CPU."""
    if not backend.IMPORT_IN_CHILD or torch.get_num_threads() < 2:
        pytest.skip("needs the forked import and two threads")
    monkeypatch.setattr(backend, "IMPORT_TIMEOUT_S", 60)
    torch.ones(1 << 22).mul_(2.0)          # a parallel op: the pool is started

    def f(b):
        return torch.relu(b.as_strided((512, 256), (128, 1))) * 2.0

    (report,) = compile_and_check(f, torch.randn(600 * 256))
    assert not report.fallbacks, str(report)


def test_import_child_that_dies_is_reported_and_every_child_is_collected():
    """The forked import hands back what the importer returned; a child killed by a signal
    (torch-mlir aborting) becomes an ImportFailure naming the signal, not cached. A child
    that sent its result is collected by a thread after the result is in, so that its exit
    (unmapping its copy of this process) does not hold up the compilation: none is left
    behind either way."""
    import os
    import threading

    if not backend.IMPORT_IN_CHILD:
        pytest.skip("needs the forked import")

    def reapers():
        return [t for t in threading.enumerate() if t.name == "torchneuron-import-reaper"]

    text, error, _ = backend._import(lambda sub, name: f"module @{name} {{}}", None, "g")
    assert error is None and text == "module @g {}"
    for thread in reapers():
        thread.join(timeout=30)

    def abort(sub, name):
        os.abort()

    text, error, _ = backend._import(abort, None, "g")
    assert text is None and isinstance(error, backend.ImportFailure)
    assert "crashed (killed by signal 6)" in str(error) and error.transient
    assert not reapers()
    with pytest.raises(ChildProcessError):       # no child left, not even a zombie
        os.waitpid(-1, os.WNOHANG)


def test_integer_matmul_falls_back():
    # PE multiplies floating-point values only, and the engines compute integers in fp32:
    # an int64 matmul runs in PyTorch, found before anything runs on the device (lit's
    # linalg_to_trn.mlir checks the compiler's own rejection of an integer matmul).
    a = torch.randint(-5, 5, (4, 6), generator=torch.Generator().manual_seed(0))
    b = torch.randint(-5, 5, (6, 3), generator=torch.Generator().manual_seed(1))
    (report,) = compile_and_check(lambda p, q: (p @ q) * 2.0, a, b)
    node = fallback(report, "mm")
    assert node.category == "dtype" and "2^24" in node.reason
    assert [n.op for n in report.compiled] == ["aten.mul"]


# -- the static deny-list -----------------------------------------------------------------------

def test_float64_falls_back_as_dtype():
    def f(x):
        return (x.double() * 2).float() + 1

    (report,) = compile_and_check(f, torch.randn(4, 8))
    mul = fallback(report, "mul")
    assert mul.category == "dtype" and "float64" in mul.reason
    assert [n.op for n in report.compiled] == ["aten.add"]


def test_complex_falls_back_as_dtype():
    def f(x):
        c = torch.view_as_complex(x.view(4, 4, 2)) * 2
        return torch.view_as_real(c) + 1

    (report,) = compile_and_check(f, torch.randn(4, 8))
    assert fallback(report, "mul").category == "dtype"
    assert "complex64" in fallback(report, "mul").reason


def test_tensors_with_no_elements_compile():
    # Empty tensors are no reason to fall back: they compute nothing (a sum over an empty dim
    # is its zero fill), and an output with no elements is written by no instruction.
    def f(x, y):
        return x.exp() * 2, x.sum(0), torch.cat([y, x]), torch.zeros(2, 0) + 1

    (report,) = compile_and_check(f, torch.randn(0, 4), torch.randn(3, 4))
    assert not report.fallbacks, report
    assert {"exp", "sum_1", "cat"} <= {n.node for n in report.compiled}


def test_random_op_falls_back():
    def f(x):
        return x * 2 + torch.rand_like(x) * 0

    (report,) = compile_and_check(f, torch.randn(4, 8))
    assert fallback(report, "rand_like").category == "random"


def _run_graph(fn, *args):
    """Trace `fn` (written with torch.ops.aten calls) to an FX graph without Dynamo or
    functionalization, record each node's value as its meta "val", and run it through the
    backend directly; returns (result, report)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    gm = torch.fx.symbolic_trace(fn)
    fake = FakeTensorMode()

    class Record(torch.fx.Interpreter):
        def run_node(self, node):
            value = super().run_node(node)
            node.meta["val"] = torch.utils._pytree.tree_map_only(torch.Tensor, fake.from_tensor,
                                                                 value)
            return value

    Record(gm).run(*[a.clone() for a in args])
    compiled = backend.compile_fx_graph(gm, list(args), "handmade", None)
    return compiled(*args), compiled.report


aten = torch.ops.aten


def test_mutation_falls_back():
    def f(x):
        y = aten.mul.Tensor(x, 2.0)
        aten.add_.Tensor(y, 1.0)
        return aten.mul.Tensor(y, 3.0)

    x = torch.randn(4, 8)
    got, report = _run_graph(f, x)
    torch.testing.assert_close(got, (x * 2 + 1) * 3)
    # the in-place op and what follows it stay in PyTorch, in order
    assert [(n.op, n.category) for n in report.fallbacks] == [("aten.add_", "mutation"),
                                                              ("aten.mul", "mutation")]
    assert [n.op for n in report.compiled] == ["aten.mul"]


def test_non_tensor_values_and_python_calls_fall_back():
    def f(x):
        s = aten._local_scalar_dense.default(aten.amax.default(x))
        t = s * 2.0
        return aten.add.Tensor(aten.exp.default(x), 1.0), aten.mul.Tensor(x, t)

    x = torch.randn(4, 8)
    got, report = _run_graph(f, x)
    torch.testing.assert_close(got, (x.exp() + 1, x * x.max() * 2))
    categories = {n.op: n.category for n in report.fallbacks}
    assert categories["aten._local_scalar_dense"] == "non-tensor"   # returns a Python float
    assert categories["mul"] == "not-aten"                          # operator.mul on it
    assert categories["aten.mul"] == "non-tensor"                   # takes it at run time
    assert {"aten.exp", "aten.add"} <= {n.op for n in report.compiled}


def test_sparse_layout_is_denied():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.randn(3, 3).to_sparse()
    y = graph.call_function(torch.ops.aten.mul.Tensor, (x, x))
    y.meta["val"] = x.meta["val"]
    graph.output((y,))
    assert partition.static_reason(y).category == "layout"


# -- values that cross the boundary ---------------------------------------------------------------

def test_returned_views_still_alias_their_inputs():
    def f(x):
        return x.t(), x @ x.t(), (x * 2).view(-1)

    x = torch.randn(4, 8)
    torch._dynamo.reset()
    got = torch.compile(f, backend="neuron")(x)
    torch.testing.assert_close(got, f(x))
    assert got[0].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert got[0].stride() == x.t().stride()


def test_bool_and_zero_dim_tensors_cross_the_boundary():
    def f(x, mask, scale):
        return torch.where(mask, x, 0.0) * scale, x > 0, scale * 2

    x = torch.randn(4, 8)
    (report,) = compile_and_check(f, x, x > 0.5, torch.tensor(3.0))
    assert not report.fallbacks


def test_unsigned_integers_keep_their_dtype():
    # linalg is signless: the program stores uint8 as i8; the boundary restores uint8. Moving
    # uint8 elements is exact (bit patterns are copied); computing on them is not (the
    # compiler's integers are signed: 200 would read as -56), so that falls back, visibly.
    def f(x, y):
        return (x * 3).to(torch.uint8) + 1, y.t().contiguous(), y.float() / 255, y + 100

    x = torch.arange(0, 80, dtype=torch.float32).reshape(8, 10)
    y = torch.arange(100, 180, dtype=torch.uint8).reshape(8, 10)
    (report,) = compile_and_check(f, x, y)
    fallen = {n.op for n in report.fallbacks}
    assert {"aten._to_copy", "aten.add"} <= fallen and "aten.t" not in fallen
    assert "aten.clone" not in fallen and "aten.mul" not in fallen
    assert all(n.category == "dtype" and "uint8" in n.reason for n in report.fallbacks)


def test_graph_aotautograd_cannot_trace_runs_in_pytorch():
    def f(x, sections):
        return [t * 2 for t in torch.tensor_split(x + 1, sections)]

    torch._dynamo.reset()
    first = len(backend.graph_reports())
    x, sections = torch.randn(5, 5), torch.tensor(2)
    torch.testing.assert_close(torch.compile(f, backend="neuron")(x, sections), f(x, sections))
    reports = backend.graph_reports()[first:]
    assert reports and all(n.category == "trace" for r in reports for n in r.fallbacks)
    assert "AOTAutograd could not trace" in reports[0].fallbacks[0].reason


def test_dynamic_shapes_with_a_fallback():
    def f(x):
        return torch.sort(x * 2, dim=-1).values + 1

    torch._dynamo.reset()
    first = len(backend.graph_reports())
    compiled = torch.compile(f, backend="neuron", dynamic=True)
    for shape in [(4, 8), (5, 3)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(compiled(x), f(x))
    reports = backend.graph_reports()[first:]
    assert [r.name.rsplit("_", 1)[1] for r in reports] == ["v0", "v1"]
    assert all([n.node for n in r.fallbacks] == ["sort"] for r in reports)
    assert all("torch.sort(x * 2" in r.fallbacks[0].source["code"] for r in reports)


def test_strict_mode_raises_instead_of_falling_back():
    def f(x):
        return torch.sort(x * 2).values

    torch._dynamo.reset()
    with pytest.raises(Exception) as info:
        torch.compile(f, backend="neuron", options={"fallback": False})(torch.randn(4, 8))
    assert "FX node 'sort'" in str(info.value) and f"{THIS}:" in str(info.value)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="dtype float64"):
        torch.compile(lambda x: x.double() * 2, backend="neuron",
                      options={"fallback": False})(torch.randn(4, 8))



def doubled(x):
    return x.double() * 2


def sort_doubled(x):
    return torch.sort(x * 2).values


@pytest.mark.parametrize("case", ["deny-list", "import", "compile"])
def test_strict_error_names_op_node_source_line_and_how_to_fall_back(monkeypatch, case):
    """Issue 5.6: whichever stage refuses a node (the partitioner's deny-list, torch-mlir's
    import, the compiler), the error names the ATen op, the FX node and the Python line, and
    says how to fall back instead."""
    fn, args, op, node, code = {
        "deny-list": (doubled, (torch.randn(4, 8),), "aten._to_copy", "_to_copy",
                      "return x.double() * 2"),
        "import": (sort_doubled, (torch.randn(4, 8),), "aten.sort", "sort",
                   "return torch.sort(x * 2).values"),
        "compile": (mm_tanh_mul, (torch.randn(16, 32), torch.randn(32, 8)), "aten.tanh", "tanh",
                    "z = torch.tanh(y)"),
    }[case]
    if case == "compile":
        _failing_compile(monkeypatch, lambda t: "math.tanh" in t,
                         CompileError("no lowering for tanh (injected)",
                                      f'loc("tanh"("{THIS}":1:0))'))
    torch._dynamo.reset()
    with pytest.raises(Exception) as info:
        torch.compile(fn, backend="neuron", options={"fallback": False})(*args)
    message = str(info.value)
    assert f"{op} (FX node '{node}') at {THIS}:" in message, message
    assert code in message, message
    assert "options={'fallback': False}" in message and "PyTorch on the CPU" in message
    # and with the default options the same function falls back and runs
    (report,) = compile_and_check(fn, *args, rtol=1e-5, atol=1e-5)
    assert node in {n.node for n in report.fallbacks}

# -- explain --------------------------------------------------------------------------------------

class Breaks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        torch._dynamo.graph_break()
        return torch.sort(h, dim=-1).values * 2


def test_explain_reports_graphs_fallbacks_breaks_and_flops():
    torch.manual_seed(0)
    model = Breaks()
    x = torch.randn(4, 16, requires_grad=True)
    report = torchneuron.explain(model, x)
    assert model.fc.weight.grad is None and x.grad is None       # .grad restored
    assert report.dynamo_graph_count == 2 and len(report.graph_breaks) == 1
    brk = report.graph_breaks[0]
    assert brk.source["file"] == THIS and "graph_break" in brk.source["code"]
    kinds = sorted(g.kind for g in report.graphs)
    assert kinds == ["backward", "backward", "forward", "forward"]
    sorts = [n for n in report.fallbacks if n.op == "aten.sort"]
    assert len(sorts) == 1 and "torch.sort(h, dim=-1)" in sorts[0].source["code"]
    assert report.compiled_ops["aten.addmm"] == 1 and report.compiled_ops["aten.mm"] >= 1
    assert 0.5 < report.flop_fraction < 1.0
    data = json.loads(report.to_json())
    assert data["graph_breaks"][0]["source"]["line"] == brk.source["line"]
    assert {g["kind"] for g in data["graphs"]} == {"forward", "backward"}
    assert any(f["op"] == "aten.sort" for g in data["graphs"] for f in g["fallbacks"])
    text = str(report)
    assert "graph break" in text and "aten.sort" in text and "% of" in text


def test_importing_torchneuron_does_not_import_torch():
    code = ("import sys, torchneuron\n"
            "assert 'torch' not in sys.modules and 'torchneuron.compiler' not in sys.modules\n"
            "assert callable(torchneuron.explain)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
