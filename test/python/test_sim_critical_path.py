"""The critical path of a simulated run (`torchneuron.sim.critical_path`) on hand-built
programs whose binding chain is known, and `neuron-profile --critical-path`."""

import numpy as np
import pytest

from neff_builder import NeffBuilder, execute, psum, sbuf
from test_neuron_profile import matmul_program, run, write_files
from torchneuron.runtime import load
from torchneuron.sim.critical_path import critical_path, report, source_label
from torchneuron.tools.neuron_profile import main


def path_of(builder, inputs=()):
    loaded = load(builder.to_bytes())
    profile = execute(builder, list(inputs)).profile
    return critical_path(profile, loaded.prepared(profile.target)), profile


def steps(path):
    return [(s.event.stream, s.event.opcode, s.cause) for s in path]


def test_a_chain_of_waits_is_the_path_and_an_idle_side_stream_is_not():
    """load -> matmul -> relu -> store, each waiting for the one before, while POOL runs a
    shorter independent stream: the path is the chain, each step held by a wait."""
    b = matmul_program(fp32_matmuls=0)
    b.memset(sbuf(128, [64], offset=8192), 0.0, engine="pool")
    ones = [np.ones(b.tensors[t].shape, b.tensors[t].dtype.numpy()) for t in b.inputs]
    path, profile = path_of(b, ones)
    assert steps(path) == [("q0", "dma", "start"), ("pe", "matmul", "wait"),
                           ("act", "activate", "wait"), ("q2", "dma", "wait")]
    # The load of w (queue 1) ends no later than that of x here; the matmul's wait for both
    # loads is met by whichever ended last.
    loads = {e.stream: e for e in profile.events if e.opcode == "dma" and e.stream in ("q0", "q1")}
    assert path[0].event.end_ns == max(e.end_ns for e in loads.values())
    assert sum(s.charged_ns for s in path) == pytest.approx(profile.total_ns)
    assert path[-1].event.end_ns == profile.total_ns
    # The matmul is charged its own duration: it started the moment the loads ended.
    mm = path[1]
    assert mm.charged_ns == pytest.approx(mm.event.end_ns - mm.event.start_ns)


def test_back_to_back_work_on_one_engine_is_charged_to_that_engine():
    b = NeffBuilder("dve_chain")
    b.memset(sbuf(128, [512], offset=8192), 1.0, loc="init")
    for i in range(3):
        b.tensor_scalar(sbuf(128, [512], offset=2048 * i), sbuf(128, [512], offset=8192), "add",
                        1.0, loc=f"step{i}")
    path, profile = path_of(b)
    assert steps(path) == [("dve", "memset", "start")] + \
        [("dve", "tensor_scalar", "engine")] * 3
    assert [source_label(s.event.location) for s in path] == ["init", "step0", "step1", "step2"]
    assert sum(s.charged_ns for s in path) == pytest.approx(profile.total_ns)


def test_a_transfer_queued_behind_another_is_held_by_its_queue():
    """Two large loads on one queue, the second issued once a short POOL instruction is done:
    its transfer starts when the first transfer ends, so the queue held it, not the wait."""
    b = NeffBuilder("queued")
    x = b.input("x", (128, 4096))
    ready = b.semaphore()
    b.dma(sbuf(128, [4096]), b.view(x), queue=3)
    b.memset(sbuf(128, [64], offset=40000), 0.0, engine="pool", signal=ready)
    b.dma(sbuf(128, [4096], offset=16384), b.view(x), queue=3, waits=[(ready, 1)])
    path, profile = path_of(b, [np.zeros((128, 4096), np.float32)])
    assert steps(path) == [("q3", "dma", "start"), ("q3", "dma", "queue")]
    first, second = path
    assert second.event.issue_ns > first.event.issue_ns      # issued after the wait
    assert second.event.start_ns == pytest.approx(first.event.end_ns)
    assert second.charged_ns == pytest.approx(second.event.end_ns - first.event.end_ns)


def test_a_wait_for_the_second_increment_follows_the_later_producer():
    """DVE and ACT both signal one semaphore; a wait for value 2 is met by whichever ends
    second in time. DVE's long instruction starts first, ACT's short one later (after POOL)
    but ends first: the wait follows DVE."""
    b = NeffBuilder("two_producers")
    sem, pool_done = b.semaphore(), b.semaphore()
    b.memset(sbuf(128, [4096], offset=4096), 1.0, engine="dve", signal=sem, loc="long")
    b.memset(sbuf(128, [64], offset=2048), 0.0, engine="pool", signal=pool_done)
    b.memset(sbuf(128, [64]), 1.0, engine="act", waits=[(pool_done, 1)], signal=sem,
             loc="short")
    b.memset(sbuf(128, [64], offset=3072), 0.0, engine="pool", waits=[(sem, 2)], loc="after")
    path, profile = path_of(b)
    act = next(e for e in profile.events if e.stream == "act")
    dve = next(e for e in profile.events if e.stream == "dve")
    assert dve.start_ns < act.start_ns and act.end_ns < dve.end_ns
    assert [(s.event.stream, source_label(s.event.location), s.cause) for s in path] == \
        [("dve", "long", "start"), ("pool", "after", "wait")]


def dve_then_act(first: tuple[str, int], second: tuple[str, int]):
    """A DVE memset, then an ACT memset that waits for it: (location, free size) each. Both
    are on the critical path. Returns its report."""
    b = NeffBuilder("two_steps")
    done = b.semaphore()
    b.memset(sbuf(128, [first[1]]), 1.0, engine="dve", signal=done, loc=first[0])
    b.memset(sbuf(128, [second[1]], offset=32768), 1.0, engine="act", waits=[(done, 1)],
             loc=second[0])
    path, profile = path_of(b)
    return report(path, profile.total_ns), profile


def test_report_names_locations_engines_and_shares():
    text, _ = dve_then_act(('loc("addmm"("/src/model.py":12:0))', 4096),
                           ('loc("gelu"("/src/model.py":13:0))', 512))
    assert text.startswith("critical path: 2 instructions over")
    assert "addmm (model.py:12)" in text and "gelu (model.py:13)" in text
    # Longest first in the per-location table: the DVE instruction of 4096 elements.
    table = text.split("location / engine")[1].strip().splitlines()
    assert table[0].endswith("addmm (model.py:12) / dve")
    shares = [float(line.split()[1].rstrip("%")) for line in table]
    assert sum(shares) == pytest.approx(100.0, abs=0.2)


def test_source_label_keeps_what_it_cannot_parse():
    assert source_label('loc("bmm_1"("/a/b/perf.py":139:0))') == "bmm_1 (perf.py:139)"
    assert source_label('loc("output")') == "output"
    assert source_label("unknown") == "unknown"
    assert source_label("") == "?"


def test_empty_program_has_an_empty_path():
    path, profile = path_of(NeffBuilder("empty"))
    assert path == [] and report(path, profile.total_ns) == "critical path: empty program"


def test_neuron_profile_prints_the_critical_path(tmp_path, capsys):
    neff, npz, _ = write_files(tmp_path, matmul_program(fp32_matmuls=2))
    code, out, err = run(capsys, main, neff, "--inputs", npz, "--critical-path")
    assert code == 0, err
    section = out.split("critical path:")[1]
    assert "matmul bf16 / pe" in section and "store y / dma" in section
    code, out, _ = run(capsys, main, neff, "--inputs", npz)
    assert code == 0 and "critical path" not in out


def test_report_sums_the_fx_nodes_of_one_source_line():
    """A model's layers run one source line under several FX node names: the second table
    gives the line's total."""
    text, profile = dve_then_act(('loc("addmm"("/src/layer.py":7:0))', 2048),
                                 ('loc("addmm_1"("/src/layer.py":7:0))', 2048))
    by_line = text.split("source line / engine")[1].strip().splitlines()[1:]
    rows = {line.split()[-1] + " " + line.split()[-3]: float(line.split()[0]) for line in by_line}
    assert set(rows) == {"dve layer.py:7", "act layer.py:7"}
    assert sum(rows.values()) == pytest.approx(profile.total_ns / 1000.0, abs=0.2)


def test_report_has_no_line_table_when_every_line_has_one_node():
    b = NeffBuilder("one")
    b.memset(sbuf(128, [512]), 1.0, loc='loc("addmm"("/src/model.py":3:0))')
    path, profile = path_of(b)
    assert "source line" not in report(path, profile.total_ns)
