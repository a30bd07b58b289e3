"""Target selection: the table matches TARGET.md, timing follows the selected target, and the
target is chosen by Device(name), TORCHNEURON_TARGET, and neuron-run/neuron-profile --target."""

import numpy as np
import pytest

from neff_builder import NeffBuilder, psum, sbuf
from torchneuron.runtime import Device, NeffFormatError, load
from torchneuron.sim import ConstraintError
from torchneuron.target import TARGETS, TRN1, TRN2, UnknownTargetError, get_target
from torchneuron.tools.neuron_profile import main as neuron_profile
from torchneuron.tools.neuron_run import main as neuron_run

GIB = 1024**3


def test_table_matches_target_md():
    """TARGET.md's table, figure by figure (trn2 = NeuronCore-v3, trn1 = NeuronCore-v2)."""
    expected = {
        "trn2": dict(core="NeuronCore-v3", pe_ghz=2.4, dve_ghz=0.96, act_ghz=1.2, pool_ghz=1.2,
                     sbuf_partition_bytes=224 * 1024, dma_queue_bytes_per_ns=23.0,
                     hbm_bytes=12 * GIB, hbm_chip_bytes_per_ns=2900.0, cores_per_chip=8,
                     pe_fp8_speedup=2),
        "trn1": dict(core="NeuronCore-v2", pe_ghz=2.8, dve_ghz=1.12, act_ghz=1.4, pool_ghz=1.4,
                     sbuf_partition_bytes=192 * 1024, dma_queue_bytes_per_ns=17.0,
                     hbm_bytes=16 * GIB, hbm_chip_bytes_per_ns=820.0, cores_per_chip=2,
                     pe_fp8_speedup=1),
    }
    common = dict(num_partitions=128, psum_partition_bytes=16 * 1024, psum_banks=8, pe_rows=128,
                  pe_cols=128, matmul_max_moving=512, pe_fp32_slowdown=4, min_ii=64,
                  fixed_overhead_cycles=100, pool_iota_base_cycles=150, dma_queues=16,
                  dma_latency_ns=1300.0)
    assert set(TARGETS) == set(expected)
    for name, figures in expected.items():
        t = TARGETS[name]
        for field, value in {**common, **figures}.items():
            assert getattr(t, field) == value, (name, field)
    assert TRN2.pe_peak_flops_per_ns(2) / 1e3 == pytest.approx(78.6, abs=0.05)
    assert TRN1.pe_peak_flops_per_ns(2) / 1e3 == pytest.approx(91.8, abs=0.05)
    assert TRN2.sbuf_bytes == 28 * 1024**2 and TRN1.sbuf_bytes == 24 * 1024**2
    assert TRN2.psum_bank_bytes == 2048 == 512 * 4
    assert TRN2.dma_queues * TRN2.dma_queue_bytes_per_ns == pytest.approx(368.0)
    assert TRN1.dma_queues * TRN1.dma_queue_bytes_per_ns == pytest.approx(272.0)


def mixed_program(target):
    """One instruction on each engine and a DMA on a queue, independent of each other."""
    b = NeffBuilder("mixed", target)
    x = b.input("x", (128, 512))
    ready = b.semaphore()
    b.memset(sbuf(128, [640], "bf16", offset=8192), 1.0, engine="act", signal=ready)
    b.memset(sbuf(128, [256], offset=4096), 2.0, engine="pool", signal=ready)
    b.matmul(psum(128, [512]), sbuf(128, [128], "bf16", offset=8192),
             sbuf(128, [512], "bf16", offset=8448), waits=[(ready, 2)])
    b.activate(sbuf(128, [256], offset=6144), sbuf(128, [256], offset=4096), "exp",
               waits=[(ready, 2)])
    b.tensor_scalar(sbuf(128, [256], offset=16384), sbuf(128, [256], offset=4096), "mul", 3.0,
                    waits=[(ready, 2)])
    b.iota(sbuf(128, [256], "i32", offset=20480), waits=[(ready, 2)])
    b.dma(sbuf(128, [512]), b.view(x), queue=5)
    return b.to_bytes()


def durations(target):
    program = load(mixed_program(target))
    profile = Device(target).execute(program, [np.ones((128, 512), np.float32)]).profile
    out = {}
    for e in profile.events:
        out.setdefault((e.stream, e.opcode), []).append(e.end_ns - e.start_ns)
    return out, profile


def test_timing_follows_the_target_clocks_and_dma_bandwidth():
    """The same program on trn2 and trn1: each engine's instruction takes its cycles / that
    target's clock, a DMA transfer its bytes / that target's queue bandwidth."""
    d2, p2 = durations("trn2")
    d1, p1 = durations("trn1")
    assert p2.target is TRN2 and p1.target is TRN1
    clocks = {"pe": "pe_ghz", "act": "act_ghz", "dve": "dve_ghz", "pool": "pool_ghz"}
    for (stream, opcode), times in d2.items():
        other = d1[(stream, opcode)]
        if stream in clocks:
            ratio = getattr(TRN2, clocks[stream]) / getattr(TRN1, clocks[stream])
        else:
            ratio = TRN2.dma_queue_bytes_per_ns / TRN1.dma_queue_bytes_per_ns
        for t2, t1 in zip(times, other):
            assert t1 == pytest.approx(t2 * ratio), (stream, opcode)
    # Absolute figures: a bf16 matmul of N = 512 is 512 PE cycles; the 256 KiB DMA moves at
    # 23 vs 17 B/ns plus 128 chunks of 512 B overhead.
    assert d2[("pe", "matmul")][0] == pytest.approx(512 / 2.4)
    assert d1[("pe", "matmul")][0] == pytest.approx(512 / 2.8)
    assert d2[("q5", "dma")][0] == pytest.approx((128 * 512 * 4 + 128 * 512) / 23.0)
    assert d1[("q5", "dma")][0] == pytest.approx((128 * 512 * 4 + 128 * 512) / 17.0)
    assert p1.total_ns != p2.total_ns


def test_capacity_follows_the_target():
    """200 KiB into a partition fits trn2's 224 KiB SBUF partitions but not trn1's 192 KiB."""
    def program(target):
        b = NeffBuilder("big tile", target)
        b.memset(sbuf(128, [1024], offset=200 * 1024), 0.0)
        return b.to_bytes()

    Device("trn2").execute(load(program("trn2")), [])
    with pytest.raises(ConstraintError, match="sbuf overflow"):
        Device("trn1").execute(load(program("trn1")), [])


def test_device_default_follows_torchneuron_target(monkeypatch):
    monkeypatch.delenv("TORCHNEURON_TARGET", raising=False)
    assert Device().target is TRN2 and get_target() is TRN2
    monkeypatch.setenv("TORCHNEURON_TARGET", "trn1")
    assert Device().target is TRN1
    assert Device("trn2").target is TRN2        # an explicit name wins
    result = Device().execute(load(mixed_program("trn1")), [np.zeros((128, 512), np.float32)])
    assert result.profile.target is TRN1


def test_unknown_target_is_a_clear_error(monkeypatch):
    with pytest.raises(UnknownTargetError, match="unknown target 'trn7'; known targets: "
                                                 "trn2, trn1"):
        Device("trn7")
    with pytest.raises(UnknownTargetError, match="trn7"):
        load(mixed_program("trn2"), target="trn7")
    monkeypatch.setenv("TORCHNEURON_TARGET", "trn7")
    with pytest.raises(UnknownTargetError, match=r"unknown target 'trn7' \(from "
                                                 r"TORCHNEURON_TARGET\)"):
        Device()
    with pytest.raises(NeffFormatError, match="compiled for unknown target 'trn7'"):
        load(NeffBuilder("p", "trn7").to_bytes())


@pytest.fixture
def files(tmp_path):
    paths = {}
    for target in ("trn1", "trn2"):
        neff = tmp_path / f"{target}.neff"
        neff.write_bytes(mixed_program(target))
        paths[target] = neff
    paths["inputs"] = tmp_path / "inputs.npz"
    np.savez(paths["inputs"], arg0=np.ones((128, 512), np.float32))
    return paths


def run(capsys, tool, *argv):
    code = tool([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.mark.parametrize("tool, header", [(neuron_run, "program: mixed (target {t}, {core})"),
                                          (neuron_profile, "program: mixed on {t} ({core})")])
def test_tools_select_the_target(files, capsys, monkeypatch, tool, header):
    monkeypatch.delenv("TORCHNEURON_TARGET", raising=False)
    trn1 = header.format(t="trn1", core="NeuronCore-v2")
    trn2 = header.format(t="trn2", core="NeuronCore-v3")
    name = "neuron-run" if tool is neuron_run else "neuron-profile"

    # No choice made: each program runs on its own target.
    code, out, err = run(capsys, tool, files["trn1"], "--inputs", files["inputs"])
    assert code == 0 and out.startswith(trn1), err
    code, out, err = run(capsys, tool, files["trn2"], "--inputs", files["inputs"])
    assert code == 0 and out.startswith(trn2), err

    # --target trn1 selects trn1: a trn1 program runs, a trn2 program is refused.
    code, out, err = run(capsys, tool, files["trn1"], "--inputs", files["inputs"],
                         "--target", "trn1")
    assert code == 0 and out.startswith(trn1), err
    code, out, err = run(capsys, tool, files["trn2"], "--inputs", files["inputs"],
                         "--target", "trn1")
    assert code == 1 and out == ""
    assert err == f"{name}: error: {files['trn2']}: compiled for trn2, but trn1 was requested\n"

    # TORCHNEURON_TARGET=trn1 does the same; --target overrides it.
    monkeypatch.setenv("TORCHNEURON_TARGET", "trn1")
    code, out, err = run(capsys, tool, files["trn1"], "--inputs", files["inputs"])
    assert code == 0 and out.startswith(trn1), err
    code, out, err = run(capsys, tool, files["trn2"], "--inputs", files["inputs"])
    assert code == 1 and "compiled for trn2, but trn1 was requested" in err
    code, out, err = run(capsys, tool, files["trn2"], "--inputs", files["inputs"],
                         "--target", "trn2")
    assert code == 0 and out.startswith(trn2), err

    # An unknown name: a usage error for the option, a one-line error for the variable.
    code, _, err = run(capsys, tool, files["trn2"], "--inputs", files["inputs"],
                       "--target", "trn7")
    assert code == 2 and "invalid choice: 'trn7'" in err
    monkeypatch.setenv("TORCHNEURON_TARGET", "trn7")
    code, out, err = run(capsys, tool, files["trn2"], "--inputs", files["inputs"])
    assert code == 1 and out == ""
    assert err == (f"{name}: error: unknown target 'trn7' (from TORCHNEURON_TARGET); known "
                   "targets: trn2, trn1\n")


@pytest.mark.parametrize("options, env, expected", [
    (None, None, "trn2"),                      # the default
    ({"target": "trn1"}, None, "trn1"),        # torch.compile(..., options={"target": ...})
    (None, "trn1", "trn1"),                    # TORCHNEURON_TARGET
    ({"target": "trn2"}, "trn1", "trn2"),      # the option wins over the environment
])
def test_torch_compile_selects_the_target(monkeypatch, options, env, expected):
    """The compiler tiles for, and the program records and runs on, the selected target: the
    simulated time of the same matmul follows that target's PE clock."""
    torch = pytest.importorskip("torch")
    from torchneuron import backend

    if env is None:
        monkeypatch.delenv("TORCHNEURON_TARGET", raising=False)
    else:
        monkeypatch.setenv("TORCHNEURON_TARGET", env)

    def f(x, w):
        return torch.relu(x @ w)

    torch._dynamo.reset()
    x, w = torch.randn(128, 128), torch.randn(128, 256)
    got = torch.compile(f, backend="neuron", options=options)(x, w)
    torch.testing.assert_close(got, f(x, w), rtol=1e-4, atol=1e-4)
    graph = backend.compiled_graphs()[-1]
    assert graph.program.target.name == graph.device.target.name == expected
    assert graph.program.neff.target == expected
    # every PE instruction lasts a whole number of the selected target's PE cycles
    pe = [e for e in graph.last_profile.events if e.stream == "pe"]
    cycles = [(e.end_ns - e.start_ns) * get_target(expected).pe_ghz for e in pe]
    assert pe and all(abs(c - round(c)) < 1e-6 and c >= 1 for c in cycles), cycles
    other = get_target("trn1" if expected == "trn2" else "trn2").pe_ghz
    assert any(abs(c - round(c)) > 1e-3 for c in
               ((e.end_ns - e.start_ns) * other for e in pe))
