"""The cost model of TARGET.md, parallel timelines, semaphores, DMA queues and deadlocks."""

import dataclasses
import json

import numpy as np
import pytest

from neff_builder import NeffBuilder, execute, hbm, psum, sbuf
from torchneuron.format import isa
from torchneuron.format.container import stream_name
from torchneuron.sim import DeadlockError
from torchneuron.sim.rules import WRITE_SLOTS
from torchneuron.target import TRN1, TRN2

T = TRN2
GHZ = {"pe": T.pe_ghz, "act": T.act_ghz, "dve": T.dve_ghz, "pool": T.pool_ghz, "sp": T.act_ghz}


def events(profile, stream):
    return [e for e in profile.events if e.stream == stream]


def duration_of(add_instruction, target="trn2"):
    """Duration (ns) of one instruction whose inputs were written by memsets on another
    engine first (POOL; ACT or DVE for PSUM, which POOL cannot access), so that it has no
    same-stream predecessor (no dependent back-to-back overhead)."""
    b = NeffBuilder("cost", target)
    ins = add_instruction(b)
    b.streams = {}
    ready = b.semaphore()
    written = WRITE_SLOTS[ins.opcode]
    reads = [op for slot, op in enumerate(ins.operands) if op is not None and slot not in written]
    psum_writer = "dve" if ins.engine.label == "act" else "act"
    for op in reads:
        b.memset(op, 1.0, engine=psum_writer if op.memory == isa.Memory.PSUM else "pool",
                 signal=ready)
    ins.waits = [(ready, len(reads))] if reads else []
    b.add(ins)
    profile = execute(b, []).profile
    (event,) = events(profile, stream_name(ins.engine, ins.queue))
    return event.end_ns - event.start_ns


def bf16(partitions, sizes, offset=0):
    return sbuf(partitions, sizes, "bf16", offset=offset)


# (description, instruction, expected cycles on trn2). N: free size of the main input.
COSTS = [
    ("matmul bf16 M=128 N=512", lambda b: b.matmul(psum(128, [512]), bf16(128, [128]),
                                                   bf16(128, [512], 256)), 512),
    ("matmul bf16 small M=32 N=20", lambda b: b.matmul(psum(32, [20]), bf16(128, [32]),
                                                       bf16(128, [20], 256)), 32),
    ("matmul bf16 M=128 N=100 -> min(64, M)", lambda b: b.matmul(
        psum(128, [100]), bf16(128, [128]), bf16(128, [100], 256)), 100),
    ("matmul bf16 M=128 N=40 -> 64", lambda b: b.matmul(
        psum(128, [40]), bf16(128, [128]), bf16(128, [40], 256)), 64),
    ("matmul tiny N=8 pays the fixed overhead", lambda b: b.matmul(
        psum(128, [8]), bf16(128, [128]), bf16(128, [8], 256)), 64 + 100),
    ("matmul fp32 is 4x", lambda b: b.matmul(psum(128, [128]), sbuf(128, [128]),
                                             sbuf(128, [128], offset=512)), 4 * 128),
    ("matmul fp8 is 2x on trn2", lambda b: b.matmul(
        psum(128, [512]), sbuf(128, [128], "f8E4M3FN"),
        sbuf(128, [512], "f8E5M2", offset=128)), 256),
    ("matmul fp8 x bf16 runs at the bf16 rate", lambda b: b.matmul(
        psum(128, [512]), sbuf(128, [128], "f8E4M3FN"), bf16(128, [512], 128)), 512),
    ("PE transpose max(P, min(64, F)): P wins", lambda b: b.transpose(psum(32, [128]),
                                                                       sbuf(128, [32])), 128),
    ("PE transpose max(P, min(64, F)): 64 wins", lambda b: b.transpose(psum(100, [16]),
                                                                        sbuf(16, [100])), 64),
    ("activate N=256", lambda b: b.activate(sbuf(128, [256]), sbuf(128, [256], offset=1024),
                                            "exp"), 256),
    ("activate N=32 -> MIN_II", lambda b: b.activate(sbuf(128, [32]),
                                                      sbuf(128, [32], offset=1024), "exp"), 64),
    ("activate with accumulation + MIN_II", lambda b: b.activate(
        sbuf(128, [256]), sbuf(128, [256], offset=1024), "exp",
        accum=sbuf(128, [1], offset=4096)), 256 + 64),
    ("tensor_scalar N=512", lambda b: b.tensor_scalar(
        sbuf(128, [512]), sbuf(128, [512], offset=2048), "add", 1.0), 512),
    ("tensor_scalar_reduce N=512: + MIN_II", lambda b: b.tensor_scalar_reduce(
        bf16(128, [512]), psum(128, [512]), "mul", 0.125, "max", sbuf(128, [1], offset=4096),
        negate=True), 512 + 64),
    ("tensor_scalar_reduce N=32: MIN_II + MIN_II", lambda b: b.tensor_scalar_reduce(
        sbuf(128, [32]), sbuf(128, [32], offset=512), "add", 1.0, "add",
        sbuf(128, [1], offset=4096)), 64 + 64),
    ("tensor_copy N=100", lambda b: b.copy(sbuf(128, [100]), sbuf(128, [100], offset=512)),
     100),
    ("memset tiny N=8: MIN_II + overhead", lambda b: b.memset(sbuf(128, [8]), 0.0), 64 + 100),
    ("tensor_tensor fp32 SBUF: 2N", lambda b: b.tensor_tensor(
        sbuf(128, [256]), sbuf(128, [256], offset=1024), sbuf(128, [256], offset=2048),
        "add"), 512),
    ("tensor_tensor with a PSUM input: N", lambda b: b.tensor_tensor(
        sbuf(128, [256]), psum(128, [256]), sbuf(128, [256], offset=2048), "mul"), 256),
    ("tensor_tensor all-bf16 SBUF add: N", lambda b: b.tensor_tensor(
        bf16(128, [256]), bf16(128, [256], 512), bf16(128, [256], 1024), "add"), 256),
    ("tensor_tensor all-bf16 SBUF max: 2N", lambda b: b.tensor_tensor(
        bf16(128, [256]), bf16(128, [256], 512), bf16(128, [256], 1024), "max"), 512),
    ("tensor_tensor N=20: MIN_II", lambda b: b.tensor_tensor(
        sbuf(128, [20]), sbuf(128, [20], offset=128), sbuf(128, [20], offset=256), "add"), 64),
    ("select in SBUF: 2N", lambda b: b.select(
        sbuf(128, [100]), sbuf(128, [100], offset=512), sbuf(128, [100], offset=1024),
        sbuf(128, [100], offset=1536)), 200),
    ("select with a PSUM input: N", lambda b: b.select(
        sbuf(128, [100]), psum(128, [100]), sbuf(128, [100], offset=1024),
        sbuf(128, [100], offset=1536)), 100),
    ("tensor_reduce fp32: N", lambda b: b.tensor_reduce(sbuf(128, [1]),
                                                       sbuf(128, [256], offset=64), "add"), 256),
    ("tensor_reduce bf16 add: N/2", lambda b: b.tensor_reduce(
        sbuf(128, [1]), bf16(128, [256], 64), "add"), 128),
    ("tensor_reduce bf16 min: N", lambda b: b.tensor_reduce(
        sbuf(128, [1]), bf16(128, [256], 64), "min"), 256),
    ("iota: base + N", lambda b: b.iota(sbuf(128, [256], "i32")), 150 + 256),
    ("nop", lambda b: b.nop(engine="sp"), 1),
]


@pytest.mark.parametrize("what, make, cycles", COSTS, ids=[c[0] for c in COSTS])
def test_single_instruction_cost(what, make, cycles):
    engine = make(NeffBuilder()).engine.label
    assert duration_of(make) == pytest.approx(cycles / GHZ[engine])


def test_cost_model_reads_the_target_table():
    memset = lambda b: b.memset(sbuf(128, [512]), 0.0)     # noqa: E731
    assert duration_of(memset, "trn2") == pytest.approx(512 / TRN2.dve_ghz)
    assert duration_of(memset, "trn1") == pytest.approx(512 / TRN1.dve_ghz)
    fp8 = lambda b: b.matmul(psum(128, [512]), sbuf(128, [128], "f8E4M3FN"),  # noqa: E731
                             sbuf(128, [512], "f8E4M3FN", offset=128))
    assert duration_of(fp8, "trn2") == pytest.approx(512 / TRN2.pe_fp8_speedup / TRN2.pe_ghz)
    assert duration_of(fp8, "trn1") == pytest.approx(512 / TRN1.pe_ghz)


def test_a_target_variant_answers_what_if_questions():
    from torchneuron.runtime import Device, load

    b = NeffBuilder("what if")
    x = b.input("x", (128, 512))
    b.dma(sbuf(128, [512]), b.view(x))
    program, xv = load(b.to_bytes()), np.zeros((128, 512), np.float32)
    base = Device(T).execute(program, [xv]).profile
    fast = Device(dataclasses.replace(T, dma_queue_bytes_per_ns=2 * T.dma_queue_bytes_per_ns))
    faster = fast.execute(program, [xv]).profile
    transfer = base.total_ns - T.dma_latency_ns
    assert faster.total_ns == pytest.approx(T.dma_latency_ns + transfer / 2)


def test_dependent_back_to_back_pays_fixed_overhead_independent_does_not():
    b = NeffBuilder("dep")
    b.memset(sbuf(128, [128]), 1.0)                                          # writes A
    b.tensor_scalar(sbuf(128, [128], offset=512), sbuf(128, [128]), "mul", 2.0)  # reads A
    b.memset(sbuf(128, [128], offset=1024), 1.0)                             # writes C
    b.tensor_scalar(sbuf(128, [128], offset=2048), sbuf(128, [128], offset=512), "mul", 2.0)
    d = [e.end_ns - e.start_ns for e in execute(b, []).profile.events]
    assert d[1] == pytest.approx((128 + T.fixed_overhead_cycles) / T.dve_ghz)
    assert d[3] == pytest.approx(128 / T.dve_ghz)    # reads B, written two instructions ago


def test_accumulating_matmuls_pipeline_without_overhead():
    b = NeffBuilder("acc")
    ready = b.semaphore()
    b.memset(bf16(128, [128 + 512]), 1.0, engine="pool", signal=ready)
    for k in range(3):
        b.matmul(psum(128, [512]), bf16(128, [128]), bf16(128, [512], 256), accumulate=k > 0,
                 waits=[(ready, 1)] if k == 0 else [])
    pe = events(execute(b, []).profile, "pe")
    assert [e.end_ns - e.start_ns for e in pe] == pytest.approx([512 / T.pe_ghz] * 3)
    assert pe[1].start_ns == pe[0].end_ns and pe[2].start_ns == pe[1].end_ns


def test_independent_engines_run_in_parallel():
    b = NeffBuilder("parallel")
    b.memset(sbuf(128, [1024]), 0.0)                                 # DVE
    b.memset(sbuf(128, [1024], offset=4096), 0.0, engine="act")      # ACT
    profile = execute(b, []).profile
    dve, act = 1024 / T.dve_ghz, 1024 / T.act_ghz
    assert profile.total_ns == pytest.approx(max(dve, act))
    assert profile.busy_ns["dve"] == pytest.approx(dve)
    assert profile.busy_ns["act"] == pytest.approx(act)
    assert profile.utilisation["dve"] == pytest.approx(1.0)
    assert profile.utilisation["act"] == pytest.approx(act / dve)


def test_semaphore_makes_the_consumer_wait_for_the_producer():
    b = NeffBuilder("sync")
    s = b.semaphore()
    b.memset(sbuf(128, [2048]), 0.0, engine="act", signal=s)
    b.tensor_scalar(sbuf(128, [64], offset=8192), sbuf(128, [64]), "add", 1.0, waits=[(s, 1)])
    profile = execute(b, []).profile
    (producer,) = events(profile, "act")
    (consumer,) = events(profile, "dve")
    assert consumer.start_ns == producer.end_ns
    assert profile.total_ns == pytest.approx(producer.end_ns + 64 / T.dve_ghz)


def test_semaphore_value_counts_completions_in_time_order():
    # Two producers increment the same semaphore; a wait for 1 is met by the earlier one.
    b = NeffBuilder("count")
    s = b.semaphore()
    b.memset(sbuf(128, [4096]), 0.0, engine="act", signal=s)            # slow
    b.memset(sbuf(128, [64], offset=32768), 0.0, engine="pool", signal=s)  # fast
    b.tensor_scalar(sbuf(128, [64], offset=40000), sbuf(128, [64], offset=32768), "add", 1.0,
                    waits=[(s, 1)])
    b.tensor_scalar(sbuf(128, [64], offset=50000), sbuf(128, [64]), "add", 1.0,
                    waits=[(s, 2)])
    profile = execute(b, []).profile
    (slow,), (fast,) = events(profile, "act"), events(profile, "pool")
    first, second = events(profile, "dve")
    assert first.start_ns == fast.end_ns
    assert second.start_ns == slow.end_ns


def _dma_ns(nbytes, chunks, target=T):
    return (nbytes + chunks * target.dma_chunk_overhead_bytes) / target.dma_queue_bytes_per_ns


def test_dma_latency_and_bandwidth():
    b = NeffBuilder("dma")
    x = b.input("x", (128, 512))
    b.dma(sbuf(128, [512]), b.view(x), queue=0)
    profile = execute(b, [np.zeros((128, 512), np.float32)]).profile
    (e,) = events(profile, "q0")
    # 256 KiB; HBM side contiguous (1 run), SBUF side one run per partition (128).
    expected = _dma_ns(128 * 512 * 4, 128)
    assert e.start_ns == pytest.approx(T.dma_latency_ns)
    assert e.end_ns - e.start_ns == pytest.approx(expected)
    assert profile.total_ns == pytest.approx(T.dma_latency_ns + expected)
    assert profile.dma_bytes == profile.dma_bytes_per_queue["q0"] == 128 * 512 * 4


def test_dma_chunks_count_contiguous_runs_on_the_worse_side():
    b = NeffBuilder("dma")
    x = b.input("x", (8, 16))
    y = b.output("y", (8, 16))
    # Column-wise read: every element is its own run in HBM (128 runs); SBUF has 16.
    b.dma(sbuf(16, [8]), hbm(x, 16, [8], partition_stride=1, strides=[16]), queue=0)
    # HBM -> HBM, both contiguous: one run.
    b.dma(b.view(y), b.view(x), queue=1)
    profile = execute(b, [np.zeros((8, 16), np.float32)]).profile
    (strided,), (contiguous,) = events(profile, "q0"), events(profile, "q1")
    assert strided.end_ns - strided.start_ns == pytest.approx(_dma_ns(512, 128))
    assert contiguous.end_ns - contiguous.start_ns == pytest.approx(_dma_ns(512, 1))


def test_dma_queue_overlaps_latency_but_serialises_bandwidth():
    b = NeffBuilder("queues")
    x = b.input("x", (128, 512))
    for offset in (0, 4096):
        b.dma(sbuf(128, [512], offset=offset), b.view(x), queue=0)
    b.dma(sbuf(128, [512], offset=8192), b.view(x), queue=5)
    profile = execute(b, [np.zeros((128, 512), np.float32)]).profile
    transfer = _dma_ns(128 * 512 * 4, 128)
    first, second = events(profile, "q0")
    (other,) = events(profile, "q5")
    assert second.issue_ns == 0.0
    assert second.start_ns == pytest.approx(first.end_ns)       # latency hidden
    assert second.end_ns == pytest.approx(T.dma_latency_ns + 2 * transfer)
    assert other.end_ns == pytest.approx(T.dma_latency_ns + transfer)   # queues in parallel
    assert profile.total_ns == pytest.approx(T.dma_latency_ns + 2 * transfer)


def test_dma_waits_then_pays_latency_and_queue_issues_in_order():
    b = NeffBuilder("dma wait")
    s = b.semaphore()
    y = b.output("y", (128, 64))
    z = b.output("z", (128, 64))
    b.memset(sbuf(128, [64]), 3.0, engine="act", signal=s)
    b.dma(b.view(y), sbuf(128, [64]), queue=2, waits=[(s, 1)])
    b.dma(b.view(z), sbuf(128, [64]), queue=2)      # no waits, but issued after the first
    profile = execute(b, []).profile
    (act,) = events(profile, "act")
    first, second = events(profile, "q2")
    assert first.issue_ns == act.end_ns
    assert first.start_ns == pytest.approx(act.end_ns + T.dma_latency_ns)
    assert second.issue_ns == act.end_ns
    assert second.start_ns == pytest.approx(first.end_ns)


def test_dma_queue_nop_is_a_fence():
    b = NeffBuilder("fence")
    x = b.input("x", (128, 64))
    s = b.semaphore()
    b.dma(sbuf(128, [64]), b.view(x), queue=4)
    b.nop(engine="dma", queue=4, signal=s)
    b.tensor_scalar(sbuf(128, [64], offset=512), sbuf(128, [64]), "add", 1.0, waits=[(s, 1)])
    profile = execute(b, [np.zeros((128, 64), np.float32)]).profile
    dma, nop = events(profile, "q4")
    (dve,) = events(profile, "dve")
    assert nop.start_ns == nop.end_ns == dma.end_ns
    assert dve.start_ns == dma.end_ns


def test_wait_on_a_semaphore_nobody_increments_is_a_deadlock():
    b = NeffBuilder("stuck")
    never = b.semaphore()
    b.memset(sbuf(128, [64]), 0.0)
    b.memset(sbuf(128, [64], offset=512), 0.0, engine="act", waits=[(never, 1)], loc="f.py:9")
    with pytest.raises(DeadlockError) as info:
        execute(b, [])
    message = str(info.value)
    assert "deadlock after 1 of 2 instructions" in message
    assert "act[0] memset (loc: f.py:9) waits for semaphore 0 >= 1" in message
    assert "it is at 0" in message and "can never get there" in message
    assert info.value.blocked == [("act", 0, "memset", "f.py:9", 0, 1, 0, 0)]


def test_cycle_between_two_engines_is_a_deadlock():
    b = NeffBuilder("cycle")
    s0, s1 = b.semaphore(), b.semaphore()
    b.memset(sbuf(128, [64]), 0.0, waits=[(s1, 1)], signal=s0, loc="dve side")
    b.memset(sbuf(128, [64], offset=512), 0.0, engine="act", waits=[(s0, 1)], signal=s1,
             loc="act side")
    with pytest.raises(DeadlockError) as info:
        execute(b, [])
    message = str(info.value)
    assert "act[0] memset (loc: act side) waits for semaphore 0 >= 1" in message
    assert "dve[0] memset (loc: dve side) waits for semaphore 1 >= 1" in message
    assert "blocked too" in message
    assert {entry[0] for entry in info.value.blocked} == {"act", "dve"}


def test_deadlock_after_progress_on_a_dma_queue():
    b = NeffBuilder("short")
    s = b.semaphore()
    b.memset(sbuf(128, [64]), 0.0, signal=s)
    y = b.output("y", (128, 64))
    b.dma(b.view(y), sbuf(128, [64]), queue=7, waits=[(s, 2)], loc="store")
    with pytest.raises(DeadlockError, match=r"q7\[0\] dma \(loc: store\) waits for semaphore "
                                            r"0 >= 2; it is at 1 and only 1 instruction"):
        execute(b, [])


def test_profile_counts_and_chrome_trace(tmp_path):
    b = NeffBuilder("trace")
    x = b.input("x", (128, 64))
    y = b.output("y", (128, 64))
    loaded, done = b.semaphore(), b.semaphore()
    b.dma(sbuf(128, [32]), hbm(x, 128, [32]), queue=0, signal=loaded, loc="load a")
    b.dma(sbuf(128, [32], offset=128), hbm(x, 128, [32], offset=32, partition_stride=64),
          queue=0, signal=loaded, loc="load b")
    b.dma(sbuf(128, [32], offset=1024), hbm(x, 128, [32], partition_stride=64), queue=3,
          signal=loaded)
    b.activate(sbuf(128, [64], offset=256), sbuf(128, [64]), "exp", waits=[(loaded, 3)])
    b.tensor_scalar(sbuf(128, [64], offset=512), sbuf(128, [64]), "mul", 2.0,
                    waits=[(loaded, 3)])
    b.tensor_scalar(sbuf(128, [64], offset=768), sbuf(128, [64], offset=512), "add", 1.0,
                    signal=done)
    b.dma(b.view(y), sbuf(128, [64], offset=768), queue=3, waits=[(done, 1)])
    result = execute(b, [np.ones((128, 64), np.float32)])
    np.testing.assert_array_equal(result.outputs[0], np.full((128, 64), 3.0, np.float32))
    profile = result.profile

    assert profile.instruction_count == 7
    assert profile.opcode_counts == {"dma": 4, "activate": 1, "tensor_scalar": 2}
    assert list(profile.streams) == ["pe", "act", "dve", "pool", "sp", "q0", "q3"]
    assert profile.streams["dve"].instructions == 2
    assert profile.dma_bytes_per_queue == {"q0": 2 * 128 * 32 * 4, "q3": 128 * (32 + 64) * 4}
    assert profile.total_ns == max(e.end_ns for e in profile.events)
    for name, util in profile.utilisation.items():
        assert 0.0 <= util <= 1.0, name
    assert "simulated time" in profile.summary()

    path = tmp_path / "trace.json"
    profile.write_chrome_trace(path)
    trace = json.loads(path.read_text())
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(names.values()) == sorted(profile.streams)
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == 7
    for tid, name in names.items():
        track = sorted((e for e in complete if e["tid"] == tid), key=lambda e: e["ts"])
        assert all(e["cat"] == name for e in track)
        for a, c in zip(track, track[1:]):
            assert a["ts"] + a["dur"] <= c["ts"] + 1e-9
    load_a = next(e for e in complete if e["args"]["loc"] == "load a")
    assert load_a["ts"] == pytest.approx(T.dma_latency_ns / 1000.0)
    assert load_a["args"]["bytes"] == 128 * 32 * 4


def test_empty_program():
    profile = execute(NeffBuilder("empty"), []).profile
    assert profile.total_ns == 0.0 and profile.instruction_count == 0
    assert profile.utilisation["pe"] == 0.0
