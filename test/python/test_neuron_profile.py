"""neuron-profile (and neuron-run --profile), run in-process on hand-built programs; the
roofline of `Profile.roofline()` against hand computations."""

import json
import math
import struct

import numpy as np
import pytest

from neff_builder import NeffBuilder, execute, psum, sbuf
from torchneuron.tools.neuron_profile import main
from torchneuron.tools.neuron_run import main as neuron_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def matmul_program(fp32_matmuls=1, target="trn2"):
    """y = relu(w^T @ x) with bf16 x [128, 512] and w [128, 128] (one bf16 matmul), plus
    `fp32_matmuls` fp32 matmuls [K=128, M=128, N=128] of an fp32 copy of w into another PSUM
    bank (extra PE work that changes neither inputs nor outputs)."""
    b = NeffBuilder("mm_relu", target)
    x = b.input("x", (128, 512), "bf16")
    w = b.input("w", (128, 128), "bf16")
    y = b.output("y", (128, 512))
    loaded, copied, mm, act = (b.semaphore() for _ in range(4))
    b.dma(sbuf(128, [512], "bf16"), b.view(x), queue=0, signal=loaded, loc="load x")
    b.dma(sbuf(128, [128], "bf16", offset=1024), b.view(w), queue=1, signal=loaded,
          loc="load w")
    b.matmul(psum(128, [512]), sbuf(128, [128], "bf16", offset=1024), sbuf(128, [512], "bf16"),
             waits=[(loaded, 2)], signal=mm, loc="matmul bf16")
    if fp32_matmuls:
        b.copy(sbuf(128, [128], offset=2048), sbuf(128, [128], "bf16", offset=1024),
               waits=[(loaded, 2)], signal=copied)
        for i in range(fp32_matmuls):
            b.matmul(psum(128, [128], offset=2048), sbuf(128, [128], offset=2048),
                     sbuf(128, [128], offset=2048), accumulate=i > 0,
                     waits=[(copied, 1)] if i == 0 else [], loc="matmul fp32")
    b.activate(sbuf(128, [512], offset=4096), psum(128, [512]), "relu", waits=[(mm, 1)],
               signal=act)
    b.dma(b.view(y), sbuf(128, [512], offset=4096), queue=2, waits=[(act, 1)], loc="store y")
    return b


def write_files(tmp_path, builder):
    rng = np.random.default_rng(0)
    inputs = {}
    for i, tid in enumerate(builder.inputs):
        t = builder.tensors[tid]
        inputs[f"arg{i}"] = rng.standard_normal(t.shape).astype(t.dtype.numpy())
    neff, npz = tmp_path / f"{builder.name}.neff", tmp_path / f"{builder.name}.inputs.npz"
    neff.write_bytes(builder.to_bytes())
    np.savez(npz, **inputs)
    return neff, npz, list(inputs.values())


def run(capsys, tool, *argv):
    code = tool([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


# -- the roofline, by hand ------------------------------------------------------------------

# trn2 (TARGET.md): PE 128x128 at 2.4 GHz, 2 FLOP per MAC -> bf16 peak 78643.2 FLOP/ns, fp32
# a quarter of that, fp8 twice; HBM 2900 B/ns per chip shared by 8 cores.
TRN2_BF16_PEAK = 128 * 128 * 2 * 2.4
TRN2_HBM = 2900 / 8
BF16_FLOPS = 2 * 128 * 128 * 512            # one matmul K=128, M=128, N=512
FP32_FLOPS = 2 * 128 * 128 * 128            # each fp32 matmul K=M=N=128
COMPULSORY = 128 * 512 * 2 + 128 * 128 * 2 + 128 * 512 * 4    # x, w (bf16) and y (f32)


@pytest.mark.parametrize("fp32_matmuls, binding", [(1, "memory"), (24, "compute")])
def test_roofline_matches_a_hand_computation(tmp_path, fp32_matmuls, binding):
    builder = matmul_program(fp32_matmuls)
    _, _, inputs = write_files(tmp_path, builder)
    profile = execute(builder, inputs).profile
    roof = profile.roofline()

    assert roof.flops == BF16_FLOPS + fp32_matmuls * FP32_FLOPS == profile.pe_flops
    assert roof.flops_by_class == {"bf16": BF16_FLOPS, "fp32": fp32_matmuls * FP32_FLOPS}
    compute = BF16_FLOPS / TRN2_BF16_PEAK + fp32_matmuls * FP32_FLOPS / (TRN2_BF16_PEAK / 4)
    memory = COMPULSORY / TRN2_HBM
    assert roof.compulsory_bytes == COMPULSORY
    assert roof.compute_bound_ns == pytest.approx(compute, rel=1e-12)
    assert roof.memory_bound_ns == pytest.approx(memory, rel=1e-12)
    assert roof.bound_ns == pytest.approx(max(compute, memory), rel=1e-12)
    assert roof.binding == binding
    assert roof.simulated_ns == profile.total_ns
    assert roof.efficiency == pytest.approx(roof.bound_ns / profile.total_ns)
    assert roof.ratio == pytest.approx(profile.total_ns / roof.bound_ns)
    assert 0 < roof.efficiency <= 1       # nothing beats the roofline


def test_roofline_fp8_rate_depends_on_the_target():
    """Both-fp8 matmuls run at 2x the bf16 rate on trn2 and at the bf16 rate on trn1."""
    def fp8_matmul(target):
        b = NeffBuilder("fp8", target)
        ready, done = b.semaphore(), b.semaphore()
        b.memset(sbuf(128, [640], "f8E4M3FN"), 1.0, signal=ready)
        b.matmul(psum(128, [512]), sbuf(128, [128], "f8E4M3FN"),
                 sbuf(128, [512], "f8E4M3FN", offset=128), waits=[(ready, 1)], signal=done)
        return execute(b, []).profile.roofline()

    trn2, trn1 = fp8_matmul("trn2"), fp8_matmul("trn1")
    assert trn2.flops_by_class == trn1.flops_by_class == {"fp8": BF16_FLOPS}
    assert trn2.compute_bound_ns == pytest.approx(BF16_FLOPS / (2 * TRN2_BF16_PEAK))
    assert trn1.compute_bound_ns == pytest.approx(BF16_FLOPS / (128 * 128 * 2 * 2.8))
    assert trn2.compulsory_bytes == 0 and trn2.binding == "compute"


def test_roofline_of_an_empty_program():
    roof = execute(NeffBuilder("empty"), []).profile.roofline()
    assert (roof.flops, roof.compulsory_bytes, roof.bound_ns, roof.binding) == (0, 0, 0.0, "none")
    assert math.isnan(roof.efficiency) and math.isnan(roof.ratio)


# -- the report -----------------------------------------------------------------------------

def test_report_has_table_bandwidth_roofline_and_ratio(tmp_path, capsys):
    builder = matmul_program(fp32_matmuls=2)
    neff, npz, inputs = write_files(tmp_path, builder)
    code, out, err = run(capsys, main, neff, "--inputs", npz)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "program: mm_relu on trn2 (NeuronCore-v3)"
    assert lines[1].startswith("simulated time: ") and "(8 instructions)" in lines[1]

    header = next(i for i, line in enumerate(lines) if line.startswith("engine/queue"))
    assert "busy us" in lines[header] and "util %" in lines[header]
    assert "instrs" in lines[header] and "instruction mix" in lines[header]
    rows = {line.split()[0]: line for line in lines[header + 1:header + 9]}
    assert list(rows) == ["pe", "act", "dve", "pool", "sp", "q0", "q1", "q2"]
    assert rows["pe"].split()[3] == "3" and rows["pe"].endswith("matmul 3")
    assert rows["dve"].endswith("tensor_copy 1") and rows["pool"].endswith("-")
    assert rows["q2"].endswith("dma 1")

    profile = execute(builder, inputs).profile
    pe = profile.streams["pe"]
    assert float(rows["pe"].split()[1]) == pytest.approx(pe.busy_ns / 1000, abs=1e-3)
    assert float(rows["pe"].split()[2]) == pytest.approx(
        100 * pe.busy_ns / profile.total_ns, abs=0.05)

    dma = next(line for line in lines if line.startswith("DMA: "))
    assert f"DMA: {COMPULSORY} bytes in" in dma
    assert f"= {COMPULSORY / profile.total_ns:.2f} GB/s achieved" in dma
    assert "1.00x the compulsory bytes" in dma
    q0 = next(line for line in lines if line.startswith("  q0 "))   # the per-queue table
    assert q0.split()[1] == str(128 * 512 * 2)
    assert float(q0.split()[3]) == pytest.approx(128 * 512 * 2 / profile.total_ns, abs=0.01)

    roof = profile.roofline()
    roofline = next(line for line in lines if line.startswith("roofline: "))
    assert f"({COMPULSORY} compulsory bytes at 362.5 GB/s)" in roofline
    assert f"bound {roof.bound_ns / 1000:.3f} us, memory-bound" in roofline
    ratio = next(line for line in lines if line.startswith("simulated / bound: "))
    assert ratio == (f"simulated / bound: {profile.total_ns / roof.bound_ns:.2f}x "
                     f"(efficiency {100 * roof.bound_ns / profile.total_ns:.1f}%)")
    assert "PE: " in out and "bf16 0.016777" in out and "fp32 0.00838861" in out


def test_neuron_run_profile_prints_the_same_report(tmp_path, capsys):
    neff, npz, _ = write_files(tmp_path, matmul_program())
    code, report, err = run(capsys, main, neff, "--inputs", npz)
    assert code == 0, err
    code, out, err = run(capsys, neuron_run, neff, "--inputs", npz, "--profile")
    assert code == 0, err
    assert out == report


def test_trace_json_structure(tmp_path, capsys):
    neff, npz, _ = write_files(tmp_path, matmul_program(fp32_matmuls=3))
    trace_path = tmp_path / "trace.json"
    code, out, err = run(capsys, main, neff, "--inputs", npz, "--trace", trace_path)
    assert code == 0, err
    assert f"trace written to {trace_path}" in out

    trace = json.loads(trace_path.read_text())
    assert isinstance(trace["traceEvents"], list)
    tracks = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
              if e["ph"] == "M" and e["name"] == "thread_name"}
    # One track per engine and per DMA queue the program uses (q0, q1, q2), each named once.
    assert sorted(tracks.values()) == sorted(["pe", "act", "dve", "pool", "sp", "q0", "q1", "q2"])
    assert len(set(tracks.values())) == len(tracks)
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == 9
    for e in complete:
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float))
        assert math.isfinite(e["ts"]) and e["ts"] >= 0 and e["dur"] >= 0
        assert e["tid"] in tracks and e["cat"] == tracks[e["tid"]]
    for tid in tracks:
        track = sorted((e for e in complete if e["tid"] == tid), key=lambda e: e["ts"])
        for a, b in zip(track, track[1:]):
            assert a["ts"] + a["dur"] <= b["ts"], (a, b)
    assert sum(e["name"] == "matmul" for e in complete) == 4


def test_png_timeline_is_a_valid_png(tmp_path, capsys):
    neff, npz, _ = write_files(tmp_path, matmul_program())
    png = tmp_path / "timeline.png"
    code, out, err = run(capsys, main, neff, "--inputs", npz, "--png", png)
    assert code == 0, err
    assert f"timeline written to {png}" in out
    data = png.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000
    # IHDR: a picture wide enough to read (width, height in pixels).
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 800 and height >= 200


def test_console_script_is_registered():
    import importlib
    import pathlib
    import tomllib

    pyproject = pathlib.Path(__file__).resolve().parents[2] / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text())["project"]
    entry = project["scripts"]["neuron-profile"]
    assert entry == "torchneuron.tools.neuron_profile:main"
    module, func = entry.split(":")
    assert getattr(importlib.import_module(module), func) is main
    assert any(dep.startswith("matplotlib") for dep in project["dependencies"])


@pytest.mark.parametrize("case", ["missing", "corrupt", "not a neff", "bad inputs",
                                  "missing input", "not npz", "deadlock"])
def test_errors_are_one_line_on_stderr(tmp_path, capsys, case):
    neff, npz, _ = write_files(tmp_path, matmul_program())
    if case == "missing":
        neff = tmp_path / "missing.neff"
    elif case == "corrupt":
        data = bytearray(neff.read_bytes())
        data[len(data) // 2] ^= 0x40
        neff.write_bytes(bytes(data))
    elif case == "not a neff":
        neff.write_bytes(b"hello world" * 40)
    elif case == "bad inputs":
        np.savez(npz, arg0=np.zeros((3, 3), np.float32), arg1=np.zeros((3, 3), np.float32))
    elif case == "missing input":
        np.savez(npz, arg0=np.zeros((128, 512), np.float32))
    elif case == "not npz":
        npz.write_bytes(b"junk")
    elif case == "deadlock":
        b = NeffBuilder("stuck")
        b.nop(engine="act", waits=[(b.semaphore(), 1)])
        neff.write_bytes(b.to_bytes())
        np.savez(npz)
    code, out, err = run(capsys, main, neff, "--inputs", npz)
    assert code == 1 and out == ""
    assert err.startswith("neuron-profile: error: ")
    if case != "deadlock":          # a deadlock lists each blocked stream on its own line
        assert len(err.strip().splitlines()) == 1, err


def test_usage_errors_exit_2(tmp_path, capsys):
    neff, npz, _ = write_files(tmp_path, matmul_program())
    assert run(capsys, main, neff)[0] == 2
    assert run(capsys, main, neff, "--inputs", npz, "--target", "trn7")[0] == 2


def test_neuron_profile_imports_matplotlib_only_for_png(tmp_path):
    import subprocess
    import sys

    neff, npz, _ = write_files(tmp_path, matmul_program())
    code = f"""
import sys
from torchneuron.tools.neuron_profile import main
assert main([{str(neff)!r}, "--inputs", {str(npz)!r}]) == 0
bad = [m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'torch', 'torch_mlir')
       or m.startswith('torchneuron.compiler') or m.startswith('torchneuron.dialects')]
assert not bad, bad
"""
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
