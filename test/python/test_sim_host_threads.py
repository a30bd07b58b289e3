"""Replays on two host threads (sim/host_threads.py): the plan keeps every instruction after
those it depends on, and two-thread replays give checked runs' outputs bit for bit."""

import re

import numpy as np
import pytest
import torch

from neff_builder import NeffBuilder, gather_program, sbuf
from torchneuron import backend, config
from torchneuron.format import isa
from torchneuron.runtime import Device, OutOfBoundsError, Program, load
from torchneuron.sim import host_threads
from torchneuron.sim.replay import Replay
from torchneuron.sim.rules import WRITE_SLOTS, pattern_extent


class Block(torch.nn.Module):
    """Two independent matmul chains, an elementwise join and a reduction."""

    def __init__(self):
        super().__init__()
        self.left = torch.nn.Linear(256, 256)
        self.right = torch.nn.Linear(256, 256)

    def forward(self, x):
        return torch.softmax(torch.relu(self.left(x)) * torch.sigmoid(self.right(x)), dim=-1)


@pytest.fixture
def always_two_threads(monkeypatch):
    monkeypatch.setattr(host_threads, "MIN_SAVING_US", 0.0)
    monkeypatch.setattr(host_threads, "MIN_SAVING_FRACTION", 0.0)
    monkeypatch.setenv("TORCHNEURON_SIM_THREADS", "2")


def _program(dtype=torch.float32) -> Program:
    """The compiled Block, as a program not run yet (no replay planned yet)."""
    torch.manual_seed(0)
    model = Block().to(dtype)
    compiled = torch.compile(model, backend="neuron")
    with torch.no_grad():
        compiled(torch.randn(128, 256, dtype=dtype))
    program = backend.compiled_graphs()[-1].program
    return Program(program.neff, program.target)


def _inputs(program: Program, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(spec.shape).astype(spec.dtype) for spec in program.inputs]


def _extent(a) -> tuple[int, int]:
    lo, hi = pattern_extent(a.shape, a.strides)
    return a.offset + lo, a.offset + hi + a.dtype.itemsize


def _conflict(x, y) -> bool:
    """Whether two operands may touch a common byte (checked the slow way: bounding boxes on
    chip, byte ranges in HBM)."""
    if x.memory != y.memory:
        return False
    if x.memory != isa.Memory.HBM:
        return x.overlaps(y)
    (a0, a1), (b0, b1) = _extent(x), _extent(y)
    return a0 < b1 and b0 < a1


def _overwrite_after_read() -> Program:
    """A slow read of an SBUF tile, then a DMA that overwrites the tile and depends on
    nothing else: only the write-after-read dependency keeps the DMA behind the read."""
    b = NeffBuilder("overwrite_after_read")
    x, y = b.input("x", (128, 512)), b.input("y", (128, 512))
    out = b.output("out", (128, 512))
    s = b.semaphore()
    tile, result, total = sbuf(128, [512]), sbuf(128, [512], offset=4096), \
        sbuf(128, [512], offset=8192)
    b.dma(tile, b.view(x), signal=s)
    b.activate(result, tile, "exp", waits=[(s, 1)], signal=s)
    b.dma(tile, b.view(y), queue=1, waits=[(s, 2)], signal=s)
    b.tensor_tensor(total, result, tile, "add", waits=[(s, 3)], signal=s)
    b.dma(b.view(out), total, waits=[(s, 4)])
    return load(b.to_bytes())


def _replayed(program: Program) -> Replay:
    device = Device(program.target)
    device.execute(program, _inputs(program, 0))
    device.execute(program, _inputs(program, 1))
    replay = program.prepared().replay
    assert isinstance(replay, Replay) and replay.runner is not None
    return replay


MAKERS = pytest.mark.parametrize(
    "make", [lambda: _program(torch.float32), lambda: _program(torch.bfloat16),
             _overwrite_after_read], ids=["block-f32", "block-bf16", "overwrite-after-read"])


@MAKERS
def test_the_plan_keeps_every_instruction_after_those_it_depends_on(make, always_two_threads):
    replay = _replayed(make())
    order, plan = replay.order, replay.runner.plan
    assert sorted(plan.lists[0] + plan.lists[1]) == list(range(len(order)))
    assert all(lst == sorted(lst) for lst in plan.lists)
    where = {i: (t, pos) for t in (0, 1) for pos, i in enumerate(plan.lists[t])}
    # The latest position of the other thread each instruction's thread has waited for.
    covered = {}
    for t in (0, 1):
        seen = -1
        for pos, i in enumerate(plan.lists[t]):
            seen = max(seen, plan.waits[t][pos])
            covered[i] = seen
    pairs = 0
    for j, later in enumerate(order):
        for i in range(j):
            earlier = order[i]
            depends = any(
                _conflict(a, b) and (sa in WRITE_SLOTS[earlier.opcode]
                                                     or sb in WRITE_SLOTS[later.opcode])
                for sa, a in enumerate(earlier.ops) if a is not None
                for sb, b in enumerate(later.ops) if b is not None)
            if not depends:
                continue
            pairs += 1
            (ti, pi), (tj, _) = where[i], where[j]
            if ti != tj:
                assert covered[j] >= pi, (f"{later.label} runs on thread {tj} without waiting "
                                          f"for {earlier.label} on thread {ti}")
    assert pairs > 0


@MAKERS
def test_two_thread_replays_give_the_outputs_of_checked_runs(make, always_two_threads,
                                                             monkeypatch):
    program = make()
    runs = [_inputs(program, seed) for seed in range(4)]
    device = Device(program.target)
    replayed = [device.execute(program, inputs) for inputs in runs]
    assert program.prepared().replay.runner is not None
    monkeypatch.setenv("TORCHNEURON_SIM_REPLAY", "0")
    checked_program = Program(program.neff, program.target)
    for got, inputs in zip(replayed, runs):
        want = device.execute(checked_program, inputs)
        for g, w in zip(got.outputs, want.outputs):
            np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))
        assert got.profile.events == want.profile.events


def test_a_replays_error_reaches_the_caller_and_the_replay_goes_on(always_two_threads):
    program = load(gather_program(10, 8, 5).to_bytes())
    device = Device(program.target)
    table = np.arange(80, dtype=np.float32).reshape(10, 8)
    device.execute(program, [table, np.zeros((5, 1), np.int32)])
    device.execute(program, [table, np.ones((5, 1), np.int32)])
    assert program.prepared().replay.runner is not None
    bad = np.array([[1], [10], [2], [0], [0]], np.int32)
    with pytest.raises(OutOfBoundsError, match="index 10 of partition 1"):
        device.execute(program, [table, bad])
    # The replay is usable afterwards.
    ids = np.array([[3], [0], [9], [3], [7]], np.int32)
    np.testing.assert_array_equal(device.execute(program, [table, ids]).outputs[0],
                                  table[ids[:, 0]])


def test_a_failing_instruction_on_the_worker_thread_stops_both(always_two_threads):
    program = _program()
    device = Device(program.target)
    device.execute(program, _inputs(program, 0))
    device.execute(program, _inputs(program, 1))
    replay = program.prepared().replay
    runner = replay.runner
    position = runner.plan.lists[1][len(runner.plan.lists[1]) // 2]
    victim = replay.order[position]

    def fail():
        raise RuntimeError(f"{victim.label} failed")

    original = runner.steps[position]
    runner.steps[position] = fail
    try:
        with pytest.raises(RuntimeError, match=re.escape(f"{victim.label} failed")):
            device.execute(program, _inputs(program, 2))
    finally:
        runner.steps[position] = original
    expected = Device(program.target).execute(Program(program.neff, program.target),
                                              _inputs(program, 3)).outputs
    got = device.execute(program, _inputs(program, 3)).outputs
    for g, w in zip(got, expected):
        np.testing.assert_array_equal(g, w)


def test_one_thread_when_asked(always_two_threads, monkeypatch):
    monkeypatch.setenv("TORCHNEURON_SIM_THREADS", "1")
    program = _program()
    device = Device(program.target)
    device.execute(program, _inputs(program, 0))
    device.execute(program, _inputs(program, 1))
    assert program.prepared().replay.runner is None
    monkeypatch.setenv("TORCHNEURON_SIM_THREADS", "3")
    with pytest.raises(config.ConfigError, match="TORCHNEURON_SIM_THREADS='3': expected 1 or 2"):
        config.SIM_THREADS.get()
