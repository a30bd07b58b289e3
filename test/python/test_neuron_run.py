"""neuron-run, run in-process on hand-built programs and npz files."""

import json

import ml_dtypes
import numpy as np
import pytest

from neff_builder import NeffBuilder, sbuf
from torchneuron.tools.neuron_run import main


@pytest.fixture
def files(tmp_path):
    """relu(x) + 1 on [128, 32]; writes the .neff, inputs and expected outputs."""
    b = NeffBuilder("relu_plus_one")
    x = b.input("x", (128, 32))
    y = b.output("y", (128, 32))
    loaded, act, done = b.semaphore(), b.semaphore(), b.semaphore()
    b.dma(sbuf(128, [32]), b.view(x), queue=0, signal=loaded)
    b.activate(sbuf(128, [32], offset=128), sbuf(128, [32]), "relu", waits=[(loaded, 1)],
               signal=act)
    b.tensor_scalar(sbuf(128, [32], offset=256), sbuf(128, [32], offset=128), "add", 1.0,
                    waits=[(act, 1)], signal=done)
    b.dma(b.view(y), sbuf(128, [32], offset=256), queue=1, waits=[(done, 1)])
    xv = np.random.default_rng(0).standard_normal((128, 32)).astype(np.float32)
    paths = {name: tmp_path / f"relu.{name}" for name in
             ("neff", "inputs.npz", "expected.npz", "wrong.npz", "named.npz")}
    paths["neff"].write_bytes(b.to_bytes())
    np.savez(paths["inputs.npz"], arg0=xv)
    np.savez(paths["named.npz"], x=xv)
    np.savez(paths["expected.npz"], out0=np.maximum(xv, 0) + 1)
    np.savez(paths["wrong.npz"], out0=np.maximum(xv, 0) + 1.01)
    paths["dir"] = tmp_path
    return paths


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_prints_time_and_per_engine_table(files, capsys):
    code, out, err = run(capsys, files["neff"], "--inputs", files["inputs.npz"])
    assert code == 0, err
    assert "program: relu_plus_one (target trn2, NeuronCore-v3)" in out
    assert "simulated time:" in out and " us" in out
    for stream in ("pe", "act", "dve", "pool", "q0", "q1"):
        assert any(line.startswith(stream + " ") for line in out.splitlines()), stream
    assert "DMA bytes: 32768" in out
    assert "PE:" in out and "% busy" in out


def test_expect_pass_and_inputs_by_name(files, capsys):
    code, out, err = run(capsys, files["neff"], "--inputs", files["named.npz"], "--expect",
                         files["expected.npz"])
    assert code == 0, err
    assert "out0 (y): max abs error 0 ok" in out
    assert "all outputs match" in out


def test_expect_mismatch_exits_1(files, capsys):
    code, out, _ = run(capsys, files["neff"], "--inputs", files["inputs.npz"], "--expect",
                       files["wrong.npz"])
    assert code == 1
    assert "out0 (y): max abs error 0.01 MISMATCH" in out


def test_tolerances_are_options(files, capsys):
    code, out, _ = run(capsys, files["neff"], "--inputs", files["inputs.npz"], "--expect",
                       files["wrong.npz"], "--atol", "0.02")
    assert code == 0 and "ok" in out


def test_out_and_trace_are_written(files, capsys):
    out_path, trace_path = files["dir"] / "out.npz", files["dir"] / "trace.json"
    code, _, err = run(capsys, files["neff"], "--inputs", files["inputs.npz"], "--out",
                       out_path, "--trace", trace_path, "--target", "trn2")
    assert code == 0, err
    with np.load(out_path) as f:
        expected = np.maximum(np.load(files["inputs.npz"])["arg0"], 0) + 1
        np.testing.assert_array_equal(f["out0"], expected)
    trace = json.loads(trace_path.read_text())
    tracks = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
              if e["ph"] == "M" and e["name"] == "thread_name"}
    assert set(tracks.values()) == {"pe", "act", "dve", "pool", "sp", "q0", "q1"}
    assert len(set(tracks)) == len(tracks)
    for tid in tracks:
        track = sorted((e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] == tid),
                       key=lambda e: e["ts"])
        for a, b in zip(track, track[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-9


@pytest.mark.parametrize("case", ["corrupt", "missing", "bad inputs", "wrong target",
                                  "extra key", "not npz"])
def test_errors_are_one_line_on_stderr(files, capsys, case):
    neff, inputs, extra = files["neff"], files["inputs.npz"], []
    if case == "corrupt":
        data = bytearray(neff.read_bytes())
        data[-20] ^= 1
        neff = files["dir"] / "corrupt.neff"
        neff.write_bytes(bytes(data))
    elif case == "missing":
        neff = files["dir"] / "missing.neff"
    elif case == "bad inputs":
        inputs = files["dir"] / "bad.npz"
        np.savez(inputs, arg0=np.zeros((3, 3), np.float32))
    elif case == "wrong target":
        extra = ["--target", "trn1"]
    elif case == "extra key":
        inputs = files["dir"] / "extra.npz"
        np.savez(inputs, arg0=np.zeros((128, 32), np.float32), arg1=np.zeros(3))
    elif case == "not npz":
        inputs = files["dir"] / "junk.npz"
        inputs.write_bytes(b"junk")
    code, out, err = run(capsys, neff, "--inputs", inputs, *extra)
    assert code == 1
    assert err.startswith("neuron-run: error: ")
    assert len(err.strip().splitlines()) == 1, err


def test_simulation_error_is_reported(tmp_path, capsys):
    b = NeffBuilder("uninit")
    b.input("x", (2, 2))
    y = b.output("y", (2, 2))
    b.dma(b.view(y), sbuf(2, [2]), loc="store.py:3")
    neff, inputs = tmp_path / "u.neff", tmp_path / "u.npz"
    neff.write_bytes(b.to_bytes())
    np.savez(inputs, arg0=np.zeros((2, 2), np.float32))
    code, _, err = run(capsys, neff, "--inputs", inputs)
    assert code == 1
    assert "neuron-run: error: q0[0] dma (loc: store.py:3)" in err
    assert "never written" in err


def test_usage_errors_exit_2(files, capsys):
    code, _, err = run(capsys, files["neff"])
    assert code == 2 and "--inputs" in err
    code, _, err = run(capsys, files["neff"], "--inputs", files["inputs.npz"], "--target",
                       "trn7")
    assert code == 2


def test_bf16_arrays_round_trip_through_npz(tmp_path, capsys):
    """npz keeps bf16 as raw 2-byte values; inputs and expected values are read as bf16."""
    b = NeffBuilder("bf16_copy")
    x = b.input("x", (4, 8), "bf16")
    y = b.output("y", (4, 8), "bf16")
    s = b.semaphore()
    b.dma(sbuf(4, [8], "bf16"), b.view(x), signal=s)
    b.dma(b.view(y), sbuf(4, [8], "bf16"), waits=[(s, 1)])
    xv = (np.arange(32, dtype=np.float32).reshape(4, 8) / 3).astype(ml_dtypes.bfloat16)
    neff, inputs, expected, out = (tmp_path / n for n in ("b.neff", "i.npz", "e.npz", "o.npz"))
    neff.write_bytes(b.to_bytes())
    np.savez(inputs, arg0=xv)
    np.savez(expected, out0=xv)
    code, stdout, err = run(capsys, neff, "--inputs", inputs, "--expect", expected, "--out", out)
    assert code == 0, err
    assert "all outputs match" in stdout
    with np.load(out) as f:
        np.testing.assert_array_equal(f["out0"].view(ml_dtypes.bfloat16), xv)
