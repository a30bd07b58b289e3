"""bench/perf.py on its smallest workload: the row it prints is computed from a real
compilation and simulation, --write replaces only the generated section of a document, and
--critical-path adds each graph's critical path over the same simulated time."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_gemm_row_and_written_section(tmp_path):
    doc = tmp_path / "perf.md"
    doc.write_text("# Performance\n\nintro\n\n<!-- perf table: begin -->\nold\n"
                   "<!-- perf table: end -->\n\n## Kept\n")
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "perf.py"), "--only", "gemm_512",
         "--no-inductor", "--write", str(doc), "--critical-path"],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    header, row = [line for line in result.stdout.splitlines() if " | " in line][:2]
    cells = dict(zip(header.split(" | "), row.split(" | ")))
    assert cells["workload"] == "gemm_512"
    # 2 * 512^3 FLOPs; compulsory bytes: A, B and C in bf16.
    assert float(cells["GFLOP"]) == pytest.approx(0.27, abs=0.05)
    assert float(cells["compulsory MB"]) == pytest.approx(3 * 512 * 512 * 2 / 1e6, abs=0.05)
    simulated, bound = float(cells["simulated us"]), float(cells["bound us"])
    assert simulated >= bound > 0
    # (the printed times are rounded to 0.1 us)
    assert float(cells["efficiency"].rstrip("%")) == pytest.approx(100 * bound / simulated,
                                                                   rel=0.03)
    text = doc.read_text()
    assert "old" not in text and "gemm_512" in text
    assert text.startswith("# Performance\n\nintro") and text.endswith("## Kept\n")
    assert "critical path" not in text            # the path is printed, not written
    # The one graph's critical path spans the simulated time, all of it charged to the
    # matmul's instructions (at 512^3 its loads take most: the DMA latency is not hidden).
    path = result.stdout.split("gemm_512, graph0_forward: critical path: ")[1]
    assert float(path.split(" us")[0].split()[-1]) == pytest.approx(simulated, abs=0.1)
    table = path.split("location / engine")[1].strip().splitlines()
    assert all(" mm (perf.py:" in line for line in table)
    assert sum(float(line.split()[1].rstrip("%")) for line in table) == pytest.approx(100, abs=0.5)


def test_tuned_columns_in_written_table(tmp_path):
    """--tuned --tune NAME: that workload is tuned by neuron-tune, its tuned time (never
    slower than the default: the tuner keeps the default where nothing beats it) is in the
    printed row and in the written table, whose header records the command."""
    doc = tmp_path / "perf.md"
    db = tmp_path / "tuning.json"
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "perf.py"), "--only", "gemm_512",
         "--no-inductor", "--tuned", str(db), "--tune", "gemm_512", "--write", str(doc)],
        capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    header, row = [line for line in result.stdout.splitlines() if " | " in line][:2]
    cells = dict(zip(header.split(" | "), row.split(" | ")))
    tuned, default = float(cells["tuned us"]), float(cells["simulated us"])
    assert 0 < tuned <= default
    assert float(cells["tuned / default"]) == pytest.approx(tuned / default, abs=0.002)
    assert db.exists()
    text = doc.read_text()
    assert "| tuned us | tuned eff | tuned / default |" in text
    assert f"--tuned {db} --tune gemm_512" in text


def test_a_workload_with_nodes_on_the_cpu_is_an_error_row():
    """A node that falls back to PyTorch runs outside the simulated time: the row would
    report a speed the chip never showed. It is an error naming the node instead."""
    import torch

    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import perf
    finally:
        sys.path.pop(0)

    def build():
        def fn(x):
            return torch.sort(x @ x, dim=-1).values * 2.0
        return fn, (torch.randn(128, 128).bfloat16(),)

    result = perf.measure(perf.Workload("sorted", "matmul then sort", build),
                          with_inductor=False)
    assert result.error is not None and "ran on the CPU" in result.error
    assert "aten.sort" in result.error
    cells = perf.row(result)
    assert cells[0] == "sorted" and cells[-1].startswith("error: ")


def test_compile_columns_are_medians_of_alternating_pairs(monkeypatch):
    """Our compile seconds and Inductor's are measured COMPILE_PAIRS times, alternately (the
    row's own compile first): the columns are the medians and the ratio the median of the
    pairs' ratios, so that one slow moment of the machine does not decide the row. The
    repeats compile the workload's Dynamo graphs through our backend again, cache off."""
    import torch

    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import perf
    finally:
        sys.path.pop(0)

    calls = []
    ours = iter([4.0, 9.0])
    theirs = iter([2.0, 8.0, 10.0])
    monkeypatch.setattr(perf, "_inductor_compile_seconds",
                        lambda *a: calls.append("inductor") or next(theirs))
    real = perf._neuron_compile_seconds
    seconds = []

    def neuron(*args):
        seconds.append(real(*args))             # a real compile, timed
        calls.append("neuron")
        return next(ours)
    monkeypatch.setattr(perf, "_neuron_compile_seconds", neuron)

    def build():
        return (lambda a, b: a @ b), (torch.randn(128, 128).bfloat16(),
                                      torch.randn(128, 128).bfloat16())

    result = perf.measure(perf.Workload("tiny", "128^3 GEMM", build), compile_pairs=3)
    assert result.error is None
    assert calls == ["inductor", "neuron", "inductor", "neuron", "inductor"]
    assert seconds and all(s > 0 for s in seconds)
    # Ours: the row's own compile of a 128^3 GEMM (well under a second), 4 and 9 s; Inductor's
    # 2, 8 and 10 s. Pairs' ratios: under 0.5, 0.5 and 0.9.
    assert result.compile_s == 4.0 and result.inductor_s == 8.0
    assert result.compile_ratio == pytest.approx(0.5)
    cells = perf.row(result)
    assert cells[perf.COLUMNS.index("compile ratio")] == "0.50"
    assert "compile <= 0.5x met" in cells[perf.COLUMNS.index("target")]
    result.compile_ratio = 0.51
    assert "compile <= 0.5x MISSED" in perf.row(result)[perf.COLUMNS.index("target")]


def test_dma_by_location_splits_the_programs_dma_bytes(tmp_path, monkeypatch):
    """bench/dma_by_location.py: a Linear + LayerNorm program's DMA bytes by source location
    add up to what the simulator counted, and the norm's gamma and beta, read by every
    partition, show as broadcast loads."""
    import torch

    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        from dma_by_location import dma_bytes, dma_bytes_per_tensor
    finally:
        sys.path.remove(os.path.join(ROOT, "bench"))
    from torchneuron import backend

    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))
    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", "off")
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.LayerNorm(96)).eval()
    with torch.no_grad():
        torch.compile(model, backend="neuron")(torch.randn(256, 64))
    graph = backend.compiled_graphs()[-1]
    by_location = dma_bytes(str(tmp_path / f"{graph.name}.neff"))
    assert sum(c["load"] + c["store"] for c in by_location.values()) == \
        graph.last_profile.dma_bytes
    assert sum(c["store"] for c in by_location.values()) == 256 * 96 * 4
    assert sum(c["broadcast"] for c in by_location.values()) > 0
    # Per tensor (--per-tensor): the same total; the output stored once; the input loaded.
    tensors, moved, where = dma_bytes_per_tensor(str(tmp_path / f"{graph.name}.neff"))
    assert sum(c["load"] + c["store"] for c in moved.values()) == graph.last_profile.dma_bytes
    output = next(t for t in tensors if t.kind == "output")
    assert moved[output.id] == {"store": output.nbytes}
    x = next(t for t in tensors if t.kind == "input" and list(t.shape) == [256, 64])
    assert moved[x.id]["load"] >= x.nbytes and where[x.id]
