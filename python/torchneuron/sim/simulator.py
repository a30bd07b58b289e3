"""The event loop: runs a prepared program's streams in parallel, in simulated time.

Timing rules (all figures from the `Target`; durations from torchneuron/cost_model.py):
- Every stream (pe, act, dve, pool, sp, q0..q15) is an in-order timeline.
- Semaphores start at 0. An instruction that signals increments its semaphore by one at its
  completion time. "Semaphore s reached value v" happens at the v-th earliest completion time
  among its increments.
- A compute-engine instruction starts when the previous instruction of its stream has
  finished and every wait is met, and occupies the engine for its duration.
- A DMA instruction on queue q: its descriptor is issued at
  t_issue = max(waits met, t_issue of the previous DMA on q); the transfer starts at
  max(t_issue + dma_latency_ns, end of the previous transfer on q) and lasts its transfer
  time; it completes (signals) when the transfer ends. The fixed latency thus overlaps
  earlier transfers of the queue, but the queue's bandwidth is serialised. Queues are
  independent of each other (contention for the core's HBM bandwidth is not modelled; on
  trn2 16 queues x 23 B/ns is within 2% of the core's HBM share).
- A NOP on a DMA queue is a fence: it completes (and signals) once its waits are met and
  every earlier transfer of the queue has ended; it takes no time.

The loop repeatedly takes, among the streams whose next instruction has every wait met by
signals already recorded, the one that can start earliest (ties: engine order, then queue
number), runs it functionally, and records its completion. Starts are non-decreasing in this
order, so no later signal can make an already-taken instruction start earlier, and the
functional effects happen in a causally consistent order. When no stream can proceed but
instructions remain, the program is deadlocked and `DeadlockError` says which stream waits on
which semaphore for which value. Each step consumes one instruction, so the loop ends.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import threading

import numpy as np

from torchneuron.format import isa
from torchneuron.sim.errors import DeadlockError
from torchneuron.sim.memory import Hbm, Store
from torchneuron.sim.profile import ENGINE_STREAMS, Profile, StreamStats, TraceEvent
from torchneuron.sim.program import PreparedProgram
from torchneuron.sim.semantics import Machine


_blas_libraries = None


@contextlib.contextmanager
def blas_single_thread():
    """A context that holds numpy's BLAS to one thread: an instruction's matmul is at most
    128 x 128 x 512, too small to gain from threads, and threads spinning on a busy machine
    made such matmuls a hundred times slower. (The BLAS libraries are found once; setting
    and restoring their thread counts is then a few microseconds, where threadpoolctl's
    `limit` inspects every loaded library on each use, tens of microseconds a replay.)"""
    global _blas_libraries
    if _blas_libraries is None:
        from threadpoolctl import ThreadpoolController
        _blas_libraries = ThreadpoolController().select(user_api="blas").lib_controllers
    previous = [library.num_threads for library in _blas_libraries]
    for library in _blas_libraries:
        library.set_num_threads(1)
    try:
        yield
    finally:
        for library, threads in zip(_blas_libraries, previous):
            library.set_num_threads(threads)


def run(program: PreparedProgram, hbm: Hbm) -> Profile:
    """Execute `program` against `hbm` (inputs and constants already stored there); outputs
    are left in `hbm`. Returns the profile of the run."""
    onchip = _take_onchip(program)
    try:
        with blas_single_thread():
            return _run(program, Machine(program.target, hbm, onchip))
    finally:
        _give_back_onchip(program.target, onchip)


# SBUF and PSUM are reused from run to run: allocating them afresh touches (and faults in)
# tens of MB of pages per run. Only the written-masks of the bytes a program can touch are
# cleared, which is all the never-written checks need; stale data is never readable.
_onchip_pool: dict[tuple, list[tuple[Store, Store]]] = {}
_onchip_lock = threading.Lock()


def _take_onchip(program: PreparedProgram) -> tuple[Store, Store]:
    target = program.target
    key = (target.num_partitions, target.sbuf_partition_bytes, target.psum_partition_bytes)
    with _onchip_lock:
        pool = _onchip_pool.get(key)
        stores = pool.pop() if pool else None
    if stores is None:
        stores = (Store.onchip(isa.Memory.SBUF, key[0], key[1]),
                  Store.onchip(isa.Memory.PSUM, key[0], key[2]))
    for store in stores:
        store.written[:, :program.onchip_extent[store.kind]] = 0
    return stores


def _give_back_onchip(target, stores: tuple[Store, Store]) -> None:
    key = (target.num_partitions, target.sbuf_partition_bytes, target.psum_partition_bytes)
    with _onchip_lock:
        _onchip_pool.setdefault(key, []).append(stores)


def _run(program: PreparedProgram, machine: Machine) -> Profile:
    target = program.target
    streams = program.streams
    n = len(streams)
    instrs = [s.instrs for s in streams]
    is_dma = [s.is_dma for s in streams]
    pos = [0] * n
    # Engines: when the previous instruction finished. Queues: previous descriptor issue.
    free = [0.0] * n
    transfer_end = [0.0] * n          # DMA queues: end of the previous transfer
    sem_times: list[list[float]] = [[] for _ in range(program.neff.num_semaphores)]
    ready = [math.inf] * n            # earliest start of each stream's next instruction
    latency = target.dma_latency_ns

    def ready_time(i: int) -> float:
        if pos[i] >= len(instrs[i]):
            return math.inf
        t = free[i]
        for sem, value in instrs[i][pos[i]].waits:
            times = sem_times[sem]
            if len(times) < value:
                return math.inf
            if times[value - 1] > t:
                t = times[value - 1]
        return t

    # Which streams' next instruction waits on each semaphore (recomputed as streams move).
    waiters: list[set[int]] = [set() for _ in sem_times]

    def advance(i: int) -> None:
        if pos[i] < len(instrs[i]):
            for sem, _ in instrs[i][pos[i]].waits:
                waiters[sem].add(i)
        ready[i] = ready_time(i)

    stats = {name: StreamStats(name) for name in ENGINE_STREAMS}
    for s in streams:
        stats.setdefault(s.name, StreamStats(s.name))
    stream_stats = [stats[s.name] for s in streams]
    profile = Profile(program=program.neff.name, target=target, streams=stats,
                      compulsory_bytes=compulsory_bytes(program.neff))
    events = profile.events
    opcode_counts: dict[str, int] = {}
    pe_flops = 0
    flops_by_class: dict[str, int] = {}
    end_time = 0.0

    for i in range(n):
        advance(i)
    remaining = sum(len(x) for x in instrs)
    with np.errstate(all="ignore"):
        while remaining:
            t = min(ready)
            if t == math.inf:
                raise _deadlock(program, instrs, pos, sem_times)
            i = ready.index(t)
            ins = instrs[i][pos[i]]
            if is_dma[i]:
                issue = t
                free[i] = issue
                if ins.opcode == isa.Opcode.DMA:
                    start = max(issue + latency, transfer_end[i])
                    end = start + ins.duration_ns
                    transfer_end[i] = end
                else:
                    start = end = max(issue, transfer_end[i])
            else:
                issue = start = t
                end = start + ins.duration_ns
                free[i] = end
            ins.semantics(ins, machine)

            st = stream_stats[i]
            st.instructions += 1
            st.busy_ns += end - start
            st.dma_bytes += ins.nbytes
            opname = ins.opname
            opcode_counts[opname] = opcode_counts.get(opname, 0) + 1
            st.opcodes[opname] = st.opcodes.get(opname, 0) + 1
            if ins.flops:
                pe_flops += ins.flops
                flops_by_class[ins.flops_class] = flops_by_class.get(ins.flops_class, 0) \
                    + ins.flops
            events.append(TraceEvent(ins.stream, ins.index, opname, ins.location, start, end,
                                     issue, ins.nbytes))
            if end > end_time:
                end_time = end

            for sem, _ in ins.waits:
                waiters[sem].discard(i)
            pos[i] += 1
            remaining -= 1
            advance(i)
            if ins.signal != isa.NO_SIGNAL:
                bisect.insort(sem_times[ins.signal], end)
                for j in waiters[ins.signal]:
                    ready[j] = ready_time(j)

    profile.total_ns = end_time
    profile.opcode_counts = opcode_counts
    profile.pe_flops = pe_flops
    profile.pe_flops_by_class = flops_by_class
    return profile


def compulsory_bytes(neff) -> int:
    """Bytes every execution must move between HBM and the core at least once: all input,
    constant and output tensors (scratch tensors are the program's own choice)."""
    return sum(t.nbytes for t in neff.tensors if t.kind in ("input", "constant", "output"))


def _deadlock(program: PreparedProgram, instrs, pos, sem_times) -> DeadlockError:
    blocked = []
    lines = []
    for s, stream_instrs, p in zip(program.streams, instrs, pos):
        if p >= len(stream_instrs):
            continue
        ins = stream_instrs[p]
        for sem, value in ins.waits:
            current = len(sem_times[sem])
            if current >= value:
                continue
            total = program.increments[sem]
            blocked.append((s.name, ins.index, ins.opname, ins.location, sem, value,
                            current, total))
            if total < value:
                why = (f"only {total} instruction(s) of the program increment it, so it can "
                       "never get there")
            else:
                why = (f"the program increments it {total} times, but the instructions that "
                       "would are blocked too")
            lines.append(f"  {ins.label} waits for semaphore {sem} >= {value}; it is at "
                         f"{current} and {why}")
    done = sum(pos)
    total_instrs = sum(len(x) for x in instrs)
    return DeadlockError(
        f"deadlock after {done} of {total_instrs} instructions: no engine or DMA queue can "
        f"proceed\n" + "\n".join(lines), blocked)
