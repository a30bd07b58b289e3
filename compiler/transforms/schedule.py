"""trn-schedule: synchronise the engines' instruction streams with semaphores.

Each engine and DMA queue runs its instructions in program order, so only dependencies between
different streams need synchronisation. Dependencies come from memory: an instruction depends
on earlier instructions of other streams that wrote what it reads (RAW) or that read or wrote
what it writes (WAR, WAW), judged by the bytes each access pattern touches in its buffer, and,
where trn-plan-memory reused memory, on every access to the buffer that lived there before.

Semaphore s counts completed, depended-upon instructions of stream s (streams are numbered
pe, act, dve, pool, sp, q0, q1, ...). A dependent instruction waits until that count reaches
the producer's ordinal; because a stream completes in order, the wait covers every earlier
producer of that stream too. An instruction that needs more waits than one record holds gets
`nisa.nop`s in front of it on its own engine.
"""

from __future__ import annotations

import dataclasses

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.passes import Pass, register
from torchneuron.dialects.nisa import INSTRUCTION_OPS, instruction_roles

ENGINE_STREAMS = ("pe", "act", "dve", "pool", "sp")
MAX_WAITS = 4


def stream_names(num_queues: int) -> list[str]:
    return list(ENGINE_STREAMS) + [f"q{i}" for i in range(num_queues)]


def stream_of(op: ir.Operation) -> str:
    engine = U.str_attr(op, "engine")
    return f"q{U.int_attr(op, 'queue')}" if engine == "dma" else engine


@register
@dataclasses.dataclass
class Schedule(Pass):
    NAME = "trn-schedule"
    SUMMARY = "Insert semaphore waits and signals between engine instruction streams"

    def run(self, module: ir.Operation) -> None:
        for func in U.functions(module):
            schedule_function(func)


@dataclasses.dataclass
class _Access:
    box: tuple[int, int, int, int]   # partitions [p0, p1), bytes [b0, b1)
    index: int
    stream: str
    write: bool


def _overlaps(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


class _BufferState:
    def __init__(self):
        self.writes: list[_Access] = []
        self.reads: list[_Access] = []
        self.last_by_stream: dict[str, int] = {}


def _box(buffer: ir.Value, ap: list[int]) -> tuple[int, int, int, int]:
    """Partition and byte extent an access pattern touches within its buffer."""
    mtype = ir.MemRefType(buffer.type)
    itemsize = U.element_bytes(mtype.element_type)
    shape = list(mtype.shape)
    offset, dims = ap[0], [(ap[i], ap[i + 1]) for i in range(1, len(ap), 2)]
    space = ir.StringAttr(mtype.memory_space).value
    if space == "hbm":
        extent = sum(s * (n - 1) for s, n in dims)
        return (0, 1, offset * itemsize, (offset + extent + 1) * itemsize)
    row = shape[1]
    p0 = offset // row
    partitions = dims[0][1]
    col = offset % row
    extent = sum(s * (n - 1) for s, n in dims[1:])
    return (p0, p0 + partitions, col * itemsize, (col + extent + 1) * itemsize)


def _address_range(alloc: ir.Operation) -> tuple[str, int, int] | None:
    if "address" not in alloc.attributes:
        return None
    memory = U.str_attr(alloc, "memory")
    mtype = ir.MemRefType(alloc.results[0].type)
    itemsize = U.element_bytes(mtype.element_type)
    shape = list(mtype.shape)
    size = itemsize * (shape[1] if memory != "hbm" else _prod(shape))
    start = U.int_attr(alloc, "address")
    return memory, start, start + size


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def schedule_function(func: ir.Operation) -> None:
    ops = U.body_ops(func)
    instructions = [op for op in ops if op.name in INSTRUCTION_OPS]
    allocs = {op.results[0]: op for op in ops if op.name == "nisa.alloc"}
    states: dict = {}
    # Occupants of on-chip/scratch memory: (start, end, buffer) per memory, for reuse edges.
    occupants: dict[str, list[tuple[int, int, ir.Value]]] = {"sbuf": [], "psum": [], "hbm": []}
    deps: list[dict[str, int]] = []
    streams = [stream_of(op) for op in instructions]

    for index, op in enumerate(instructions):
        stream = streams[index]
        needs: dict[str, int] = {}

        def depend(other_stream: str, other_index: int) -> None:
            if other_stream != stream and needs.get(other_stream, -1) < other_index:
                needs[other_stream] = other_index

        aps = [list(ir.DenseI64ArrayAttr(a)) for a in ir.ArrayAttr(op.attributes["aps"])]
        roles = instruction_roles(op)
        for role, buffer, ap in zip(roles, op.operands, aps):
            state = states.get(buffer)
            if state is None:
                state = states[buffer] = _BufferState()
                alloc = allocs.get(buffer)
                placed = _address_range(alloc) if alloc is not None else None
                if placed is not None:
                    for previous in _take_over(occupants[placed[0]], placed[1], placed[2],
                                               buffer):
                        for s, i in states[previous].last_by_stream.items():
                            depend(s, i)
            box = _box(buffer, ap)
            write = role == "dst" or role == "accum"
            for access in state.writes:
                if _overlaps(access.box, box):
                    depend(access.stream, access.index)
            if write:
                for access in state.reads:
                    if _overlaps(access.box, box):
                        depend(access.stream, access.index)
            access = _Access(box, index, stream, write)
            (state.writes if write else state.reads).append(access)
            state.last_by_stream[stream] = index
            if write and role == "dst":
                # Accesses this write fully covers can no longer be the latest conflict.
                state.writes = [a for a in state.writes if a is access or not _covers(box, a.box)]
                state.reads = [a for a in state.reads if not _covers(box, a.box)]
        deps.append(needs)

    # Which instructions are depended upon, and their ordinal in their stream's semaphore.
    signalled = set()
    for needs in deps:
        for s, i in needs.items():
            signalled.add(i)
    names = stream_names(_num_queues(func, streams))
    sem_of = {name: k for k, name in enumerate(names)}
    ordinal: dict[int, int] = {}
    counts: dict[str, int] = {}
    for index in sorted(signalled):
        s = streams[index]
        counts[s] = counts.get(s, 0) + 1
        ordinal[index] = counts[s]

    # What each stream already knows has completed (a vector clock): its own waits and,
    # transitively, what the producers it waited for knew when they signalled. A wait implied
    # by that knowledge, or by another wait of the same instruction, is dropped.
    known: dict[str, dict[str, int]] = {}
    snapshot: dict[int, dict[str, int]] = {}
    for index, (op, needs) in enumerate(zip(instructions, deps)):
        stream = streams[index]
        mine = known.setdefault(stream, {})
        candidates = {s: ordinal[i] for s, i in needs.items() if mine.get(s, 0) < ordinal[i]}
        implied = {s for s, v in candidates.items()
                   if any(snapshot[needs[o]].get(s, 0) >= v for o in candidates if o != s)}
        waits = []
        for s in sorted(set(candidates) - implied):
            waits += [sem_of[s], candidates[s]]
            for t, v in snapshot[needs[s]].items():
                if mine.get(t, 0) < v:
                    mine[t] = v
        if index in signalled:
            snapshot[index] = {**mine, stream: ordinal[index]}
        if index in signalled:
            op.attributes["signal"] = U.i64(sem_of[stream])
        while len(waits) > 2 * MAX_WAITS:
            extra, waits = waits[:2 * MAX_WAITS], waits[2 * MAX_WAITS:]
            with ir.InsertionPoint(op), op.location:
                attrs = {"engine": op.attributes["engine"], "aps": ir.ArrayAttr.get([]),
                         "waits": U.i64_array(extra)}
                if "queue" in op.attributes:
                    attrs["queue"] = op.attributes["queue"]
                U.create("nisa.nop", [], [], attrs)
        if waits:
            op.attributes["waits"] = U.i64_array(waits)
    func.attributes["nisa.num_semaphores"] = U.i64(len(names))


def _covers(outer, inner) -> bool:
    return outer[0] <= inner[0] and inner[1] <= outer[1] and outer[2] <= inner[2] \
        and inner[3] <= outer[3]


def _take_over(occupied: list[tuple[int, int, ir.Value]], start: int, end: int,
               buffer: ir.Value) -> list[ir.Value]:
    """Record `buffer` as the occupant of [start, end); return the buffers it displaces."""
    displaced = []
    kept = []
    for s, e, other in occupied:
        if s < end and start < e:
            displaced.append(other)
            if s < start:
                kept.append((s, start, other))
            if end < e:
                kept.append((end, e, other))
        else:
            kept.append((s, e, other))
    kept.append((start, end, buffer))
    occupied[:] = kept
    return displaced


def _num_queues(func: ir.Operation, streams: list[str]) -> int:
    queues = [int(s[1:]) for s in streams if s.startswith("q")]
    from torchneuron.target import get_target

    name = ir.StringAttr(func.attributes["nisa.target"]).value \
        if "nisa.target" in func.attributes else None
    return max([get_target(name).dma_queues] + [q + 1 for q in queues])
