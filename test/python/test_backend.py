"""torch.compile(backend="neuron") end to end: outputs, dumps, stage files, replay, errors."""

import glob
import os
import re
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torchneuron import backend  # noqa: E402
from torchneuron.tools import neuron_run  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(256, 512)
        self.fc2 = torch.nn.Linear(512, 128)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc2(torch.relu(self.fc1(x))))


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory):
    """Compile and run the MLP once with dumps on; the tests below inspect the result."""
    dump = tmp_path_factory.mktemp("dump")
    old = os.environ.get("TORCHNEURON_DUMP_DIR")
    os.environ["TORCHNEURON_DUMP_DIR"] = str(dump)
    try:
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = MLP().eval()
        x = torch.randn(64, 256)
        with torch.no_grad():
            y = torch.compile(model, backend="neuron")(x)
            expected = model(x)
    finally:
        if old is None:
            del os.environ["TORCHNEURON_DUMP_DIR"]
        else:
            os.environ["TORCHNEURON_DUMP_DIR"] = old
    graph = backend.compiled_graphs()[-1]
    return dump, y, expected, graph


def test_mlp_matches_eager(mlp_run):
    _, y, expected, graph = mlp_run
    assert torch.allclose(y, expected, rtol=1e-4, atol=1e-5)
    # The result was computed by the simulator executing the emitted streams.
    assert graph.last_profile.opcode_counts["matmul"] > 0
    assert graph.last_profile.total_ns > 0


def test_shapes_that_do_not_divide_the_tiles():
    torch._dynamo.reset()
    torch.manual_seed(1)
    x, w = torch.randn(100, 300), torch.randn(300, 77)
    got = torch.compile(lambda a, b: a @ b, backend="neuron")(x, w)
    assert torch.allclose(got, x @ w, rtol=1e-4, atol=1e-5)
    layer = torch.nn.Linear(300, 77)
    with torch.no_grad():
        got = torch.compile(layer, backend="neuron")(x)
        assert torch.allclose(got, layer(x), rtol=1e-4, atol=1e-5)


def test_dump_leaves_every_stage_and_replay_bundle(mlp_run):
    dump = mlp_run[0]
    names = {os.path.basename(p) for p in glob.glob(os.path.join(dump, "*"))}
    stem = "graph0_forward" if "graph0_forward.neff" in names else \
        sorted(n for n in names if n.endswith(".neff"))[0][:-len(".neff")]
    for ext in (".fx.txt", ".linalg.mlir", ".trn.mlir", ".isa.mlir", ".neff", ".inputs.npz",
                ".expected.npz"):
        assert stem + ext in names, f"missing {stem + ext}"


def _stem(dump) -> str:
    return glob.glob(os.path.join(dump, "*.neff"))[0][:-len(".neff")]


@pytest.mark.parametrize("stage", ["trn", "isa"])
def test_stage_files_parse_and_round_trip(mlp_run, stage):
    path = f"{_stem(mlp_run[0])}.{stage}.mlir"

    def opt(text):
        result = subprocess.run([sys.executable, "-m", "torchneuron.tools.neuron_opt", "-"],
                                input=text, capture_output=True, text=True, cwd=ROOT)
        assert result.returncode == 0, result.stderr
        return result.stdout

    once = opt(open(path).read())
    assert opt(once) == once


def test_isa_shows_the_hardware_mapping(mlp_run):
    isa = open(f"{_stem(mlp_run[0])}.isa.mlir").read()
    # 128-partition tiles
    assert re.search(r'memref<128x\d+xf32, "sbuf">', isa)
    # K-tiles accumulating into one PSUM bank: a first matmul, then accumulating ones
    assert '"nisa.matmul"' in isa and "accumulate = true" in isa and "accumulate = false" in isa
    # bias + activation on ACT, reading PSUM and writing SBUF, with a per-partition bias
    act = re.findall(r'"nisa.activation".*} : \((memref<[^>]*>), (memref<[^>]*>), '
                     r'(memref<[^>]*>)\)', isa)
    assert any('"sbuf"' in dst and '"psum"' in src and '"sbuf"' in bias
               for dst, src, bias in act), act
    assert 'func = "relu"' in isa and 'func = "gelu"' in isa
    # DMA in from and out to HBM
    assert re.search(r'"nisa.dma"\(%\w+, %arg\d+\)', isa)
    assert re.search(r'"nisa.dma"\(%arg\d+, %\w+\)', isa)
    # semaphores between engines
    assert "waits = array<i64:" in isa and "signal = " in isa


def test_neuron_run_replays_the_dump(mlp_run, capsys, tmp_path):
    stem = _stem(mlp_run[0])
    out = tmp_path / "out.npz"
    rc = neuron_run.main([f"{stem}.neff", "--inputs", f"{stem}.inputs.npz",
                          "--expect", f"{stem}.expected.npz", "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert "us" in printed
    got = np.load(out)["out0"]
    assert np.allclose(got, mlp_run[2].numpy(), rtol=1e-4, atol=1e-5)


def test_unsupported_op_error_names_node_and_source_line():
    """With fallback disabled, an op the compiler cannot take raises, naming the FX node and
    the Python line (by default it runs in PyTorch instead: test_fallback.py)."""
    torch._dynamo.reset()

    def sorted_rows(x):
        y = x * 2
        return torch.sort(y, dim=1).values   # sorts have no NeuronCore lowering

    with pytest.raises(Exception) as info:
        torch.compile(sorted_rows, backend="neuron", options={"fallback": False})(
            torch.randn(4, 8))
    message = str(info.value)
    assert "FX node 'sort" in message
    assert f"{__file__}:" in message
    assert "tm_tensor" in message


def test_unknown_option_is_rejected():
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown torchneuron option"):
        torch.compile(lambda x: x + 1, backend="neuron", options={"tarket": "trn1"})(
            torch.randn(2))


@pytest.mark.parametrize("options, env, message", [
    ({"target": "trn9"}, {}, "unknown target 'trn9'; known targets: trn2, trn1"),
    ({}, {"TORCHNEURON_TARGET": "trn9"}, "unknown target 'trn9' (from TORCHNEURON_TARGET)"),
    ({"fuse_mlp": None}, {}, "option fuse_mlp must be a bool, not None"),
    ({"tuning_db": 5}, {}, "option tuning_db must be a str, not 5"),
    (["target"], {}, "options must be a dict of option names to values, not list"),
    ({}, {"TORCHNEURON_SIM_THREADS": "abc"}, "TORCHNEURON_SIM_THREADS='abc': expected 1 or 2"),
    ({}, {"TORCHNEURON_DUMP_DIR": __file__}, "TORCHNEURON_DUMP_DIR=.*: not a directory"),
])
def test_bad_option_values_are_rejected_before_compiling(monkeypatch, options, env, message):
    # Not sent into each graph's compile, where they failed as internal compiler errors and
    # every op ran on the CPU.
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    torch._dynamo.reset()
    first = len(backend.graph_reports())
    with pytest.raises(Exception, match=message if "*" in message else re.escape(message)):
        torch.compile(lambda x: x + 1, backend="neuron", options=options)(torch.randn(2))
    assert len(backend.graph_reports()) == first


def test_neuron_translate_rebuilds_a_working_neff(mlp_run, tmp_path):
    from torchneuron import runtime
    from torchneuron.tools import neuron_translate

    stem = _stem(mlp_run[0])
    out = tmp_path / "rebuilt.neff"
    assert neuron_translate.main(["--isa-to-neff", f"{stem}.isa.mlir", "-o", str(out)]) == 0
    inputs = np.load(f"{stem}.inputs.npz")
    program = runtime.load(str(out))
    result = runtime.Device().execute(program, [inputs[f"arg{i}"] for i in range(len(inputs))])
    assert np.allclose(result.outputs[0], mlp_run[2].numpy(), rtol=1e-4, atol=1e-5)


def test_backend_is_found_by_name_with_only_torch_imported():
    code = ("import torch\n"
            "f = torch.compile(lambda x: x * 2 + 1, backend='neuron')\n"
            "y = f(torch.arange(6.0).reshape(2, 3))\n"
            "assert torch.equal(y, torch.arange(6.0).reshape(2, 3) * 2 + 1), y\n"
            "import sys; assert 'torchneuron.backend' in sys.modules\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def test_nested_set_aside_blocks_count_the_frozen_heap_once(monkeypatch):
    """Counting frozen objects walks them all (tens of ms with PyTorch loaded): only the
    outermost block counts; the heap stays frozen until the last block ends."""
    import gc

    from torchneuron import gc_pause

    counts = []
    real = gc.get_freeze_count

    def counting():
        counts.append(real())
        return counts[-1]

    monkeypatch.setattr(gc, "get_freeze_count", counting)
    assert real() == 0
    with gc_pause.older_objects_set_aside():
        frozen = real()
        assert frozen > 0
        with gc_pause.older_objects_set_aside():
            with gc_pause.older_objects_set_aside():
                assert real() > 0
        assert real() > 0                   # the outer block still holds the heap aside
    assert real() == 0
    assert counts == [0]
    # After an error inside, the heap is handed back all the same.
    with pytest.raises(RuntimeError):
        with gc_pause.older_objects_set_aside():
            with gc_pause.older_objects_set_aside():
                raise RuntimeError("inside")
    assert real() == 0 and gc_pause._set_aside_depth == 0


def test_compiling_sets_the_older_heap_aside_from_the_cycle_collector(monkeypatch):
    """While the backend compiles, objects that existed before are frozen (a full collection
    would walk all of PyTorch's); afterwards they are handed back. A heap the program froze
    itself stays frozen."""
    import gc

    seen = []
    real = backend._compile_fx_graph

    def spy(*args, **kwargs):
        seen.append(gc.get_freeze_count())
        return real(*args, **kwargs)

    monkeypatch.setattr(backend, "_compile_fx_graph", spy)
    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", "off")
    assert gc.get_freeze_count() == 0
    torch._dynamo.reset()
    x = torch.randn(8, 16)
    out = torch.compile(lambda a: torch.relu(a) * 2.0, backend="neuron")(x)
    torch.testing.assert_close(out, torch.relu(x) * 2.0)
    assert seen and all(count > 0 for count in seen)
    assert gc.get_freeze_count() == 0

    gc.freeze()
    try:
        torch._dynamo.reset()
        torch.compile(lambda a: torch.relu(a) + 1.0, backend="neuron")(x)
        # (Frozen objects that die leave the count; an unfreeze would empty it.)
        assert len(seen) == 2 and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_outputs_keep_the_strides_pytorch_gives_them():
    # A channels_last input's elementwise result and convolution are channels_last in eager;
    # the program's row-major outputs are laid out the same way.
    x = torch.randn(2, 4, 9, 9).to(memory_format=torch.channels_last)
    conv = torch.nn.Conv2d(4, 4, 3, padding=1).eval()
    with torch.no_grad():
        for fn in (lambda t: torch.relu(t) * 2, conv, lambda t: t.contiguous() + 1):
            torch._dynamo.reset()
            got, want = torch.compile(fn, backend="neuron")(x), fn(x)
            assert got.stride() == want.stride()
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
