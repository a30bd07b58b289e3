"""A replay's instructions spread over two host threads.

A replay (sim/replay.py) executes the verified run's instructions one after another. Each
instruction's result depends only on the bytes it reads, so any order that keeps every
instruction after the earlier ones it depends on -- it reads bytes they wrote, or writes
bytes they read or wrote -- computes the same bytes, bit for bit. Instructions with no such
path between them can run at the same time, and numpy releases the GIL inside BLAS calls and
its array loops, where a replay spends its time. `plan` assigns each instruction to one of
two threads by list scheduling on an estimate of its host cost, and records, for every
instruction that depends on the other thread's work, the last instruction there it must
wait for. Each thread runs its instructions in the replay's order, so waits point only
backwards in that order and cannot deadlock.

Which bytes an operand touches is taken conservatively: on chip, its bounding box in
blocks of partitions and bytes; in HBM, a tensor with bytes of its own (an input, output or
constant) is one block, and scratch tensors, which the compiler lets share bytes, are
tracked in blocks of the byte range their pattern spans (for an indirect DMA's data-chosen
rows, the whole tensor). A false dependency costs parallelism, never correctness; blocks
this coarse keep the planning of a 77,000-instruction GPT-2 program to seconds.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

import numpy as np

from torchneuron.format import isa
from torchneuron.sim import host_gemm
from torchneuron.sim.memory import Access
from torchneuron.sim.rules import WRITE_SLOTS, pattern_extent
from torchneuron.sim.semantics import EXACT_IN_FP32

PARTITION_BLOCK = 32        # partitions per dependency-tracking block
ONCHIP_GRANULE = 512        # bytes of a partition per block
SCRATCH_GRANULE = 65536     # bytes of HBM scratch per block

# Host-cost estimate (microseconds) that the list scheduling balances: a fixed cost per
# instruction (the Python around its numpy calls), a matmul's FLOPs at about one core's
# single-precision BLAS rate, other instructions by the elements they move.
FIXED_US = 2.0
MATMUL_FLOPS_PER_US = 50_000.0
BF16_GEMM_FLOPS_PER_US = 2 * MATMUL_FLOPS_PER_US     # bf16 operands on the host's bf16 GEMM
ELEMENTS_PER_US = 1_000.0
FLOAT64_FUNCTION_ELEMENTS_PER_US = 100.0    # ACTIVATE evaluating in float64 (sim/semantics)
# What a wait on the other thread costs when the awaited instruction is not done yet.
WAIT_US = 40.0
# A replay goes on two threads only when the plan's estimate saves at least this fraction and
# this much time: handing work over and joining costs tens of microseconds, and each wait
# that finds its instruction not done yet costs a thread wake-up (tens of microseconds on
# this kind of host), which the estimate counts only roughly.
MIN_SAVING_FRACTION = 0.2
MIN_SAVING_US = 100.0


def worth_two_threads(p: "Plan") -> bool:
    one, two = p.estimated_us
    return one - two >= max(MIN_SAVING_US, MIN_SAVING_FRACTION * one)


@dataclass
class Plan:
    """Per thread: the positions (in the replay's order) it executes, in order, and for each
    of them the position in the other thread's list it waits for first (-1: none)."""
    lists: tuple[list[int], list[int]]
    waits: tuple[list[int], list[int]]
    estimated_us: tuple[float, float]           # one thread, two threads


def estimate_us(ins) -> float:
    op = ins.opcode
    if op == isa.Opcode.MATMUL:
        st, mv = ins.ops[1], ins.ops[2]
        rate = MATMUL_FLOPS_PER_US
        if host_gemm.for_operands(st.dtype, mv.dtype) is not None:
            rate = BF16_GEMM_FLOPS_PER_US
        return FIXED_US + 2.0 * st.partitions * st.free_size * mv.free_size / rate
    elements = max((a.partitions * a.free_size for a in ins.ops if a is not None), default=0)
    if op == isa.Opcode.ACTIVATE and ins.func not in EXACT_IN_FP32:
        return FIXED_US + elements / FLOAT64_FUNCTION_ELEMENTS_PER_US
    return FIXED_US + elements / ELEMENTS_PER_US


def _blocks(a: Access, indirect: bool, scratch_extent) -> list[tuple]:
    if a.memory == isa.Memory.HBM:
        whole = scratch_extent(a.tensor)
        if whole is None:
            return [("tensor", a.tensor)]
        if indirect:
            lo, hi = whole
        else:
            lo, hi = pattern_extent(a.shape, a.strides)      # (an Access's strides are bytes)
            lo, hi = a.offset + lo, a.offset + hi + a.dtype.itemsize
        return [("scratch", g)
                for g in range(lo // SCRATCH_GRANULE, (hi - 1) // SCRATCH_GRANULE + 1)]
    return onchip_blocks(a)


def onchip_blocks(a: Access) -> list[tuple]:
    """The blocks of partitions and bytes that an on-chip operand's bounding box covers."""
    return [(a.memory, pb, g)
            for pb in range(a.p0 // PARTITION_BLOCK, (a.p1 - 1) // PARTITION_BLOCK + 1)
            for g in range(a.b0 // ONCHIP_GRANULE, (a.b1 - 1) // ONCHIP_GRANULE + 1)]


def plan(order: list, scratch_extent) -> Plan:
    """Two threads' share of `order` (instructions in a valid execution order).
    `scratch_extent(tid)` is the HBM byte range [lo, hi) of tensor tid if it is scratch
    (may share bytes with other scratch tensors), None for a tensor with bytes of its own."""
    last_writer: dict[tuple, int] = {}
    readers: dict[tuple, list[int]] = {}
    thread_of: list[int] = []
    position: list[int] = []            # index in its thread's list
    finish: list[float] = []
    free = [0.0, 0.0]
    lists: tuple[list[int], list[int]] = ([], [])
    waits: tuple[list[int], list[int]] = ([], [])
    total = 0.0
    for i, ins in enumerate(order):
        writes = WRITE_SLOTS[ins.opcode]
        indirect = ins.opcode == isa.Opcode.DMA and bool(ins.flags & isa.FLAG_INDIRECT)
        deps: set[int] = set()
        read_blocks, write_blocks = [], []
        for slot, a in enumerate(ins.ops):
            if a is None:
                continue
            blocks = _blocks(a, indirect, scratch_extent)
            (write_blocks if slot in writes else read_blocks).append(blocks)
        for blocks in read_blocks:
            for b in blocks:
                w = last_writer.get(b)
                if w is not None:
                    deps.add(w)
        for blocks in write_blocks:
            for b in blocks:
                w = last_writer.get(b)
                if w is not None:
                    deps.add(w)
                deps.update(readers.get(b, ()))
        for blocks in read_blocks:
            for b in blocks:
                readers.setdefault(b, []).append(i)
        for blocks in write_blocks:
            for b in blocks:
                last_writer[b] = i
                readers[b] = []
        deps.discard(i)
        cost = estimate_us(ins)
        total += cost
        ready = max((finish[d] for d in deps), default=0.0)
        # On each thread: when it could start, counting a wait for the other thread's work.
        best = None
        for t in (0, 1):
            crosses = any(thread_of[d] != t for d in deps)
            start = max(free[t], ready + (WAIT_US if crosses else 0.0))
            if best is None or start < best[0]:
                best = (start, t)
        start, t = best
        other = 1 - t
        wait = max((position[d] for d in deps if thread_of[d] == other), default=-1)
        thread_of.append(t)
        position.append(len(lists[t]))
        lists[t].append(i)
        waits[t].append(wait)
        finish.append(start + cost)
        free[t] = start + cost
    return Plan(lists, waits, (total, max(free)))


class _Aborted(Exception):
    """The other thread failed; this one stops."""


class TwoThreadRunner:
    """Executes a `Plan` with the calling thread and one worker thread.

    The worker is one daemon thread for the whole process, lent to one replay at a time;
    `try_run` returns False (and runs nothing) when another replay holds it."""

    _worker_lock = threading.Lock()
    _jobs: queue.SimpleQueue | None = None

    def __init__(self, steps: list, plan_: Plan):
        self.steps = steps          # per position in the replay's order: a call doing its work
        self.plan = plan_
        # Per thread: one event per position of its list that the other thread waits for.
        self.events = tuple({pos: threading.Event() for pos in plan_.waits[1 - t] if pos >= 0}
                            for t in (0, 1))
        self._failed = False

    @classmethod
    def _ensure_worker(cls) -> queue.SimpleQueue:
        if cls._jobs is None:
            cls._jobs = queue.SimpleQueue()
            threading.Thread(target=cls._serve, args=(cls._jobs,), daemon=True,
                             name="torchneuron-sim-replay").start()
        return cls._jobs

    @staticmethod
    def _serve(jobs: queue.SimpleQueue) -> None:
        while True:
            job, done = jobs.get()
            try:
                job()
                done.put(None)
            except BaseException as exc:         # handed to the replay's thread
                done.put(exc)

    def try_run(self) -> bool:
        if not self._worker_lock.acquire(blocking=False):
            return False
        try:
            jobs = self._ensure_worker()
            for events in self.events:
                for event in events.values():
                    event.clear()
            self._failed = False
            done: queue.SimpleQueue = queue.SimpleQueue()
            jobs.put((lambda: self._run_thread(1), done))
            error = None
            try:
                self._run_thread(0)
            except BaseException as exc:
                error = exc
            worker_error = done.get()
            if isinstance(error, _Aborted):
                error = None
            if error is None and worker_error is not None and \
                    not isinstance(worker_error, _Aborted):
                error = worker_error
            if error is not None:
                raise error
            return True
        finally:
            self._worker_lock.release()

    def _run_thread(self, t: int) -> None:
        steps = self.steps
        mine, waits = self.plan.lists[t], self.plan.waits[t]
        signal, awaited = self.events[t], self.events[1 - t]
        try:
            with np.errstate(all="ignore"):
                for pos, (i, wait) in enumerate(zip(mine, waits)):
                    if wait >= 0:
                        awaited[wait].wait()
                        if self._failed:
                            raise _Aborted()
                    steps[i]()
                    event = signal.get(pos)
                    if event is not None:
                        event.set()
        except BaseException:
            # Release the other thread from any wait on this one, then stop.
            self._failed = True
            for event in signal.values():
                event.set()
            raise
