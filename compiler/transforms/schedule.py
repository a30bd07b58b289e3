"""trn-schedule: synchronise the engines' instruction streams with semaphores.

Each engine and DMA queue runs its instructions in program order, so only dependencies between
different streams need synchronisation. Dependencies come from memory: an instruction depends
on earlier instructions of other streams that wrote what it reads (RAW) or that read or wrote
what it writes (WAR, WAW), judged by the box each access pattern touches in its buffer (on
chip: partitions x bytes; in HBM: rows x bytes of a row length chosen per buffer), and,
where trn-plan-memory reused memory, on every access to the buffer that lived there before
(through that buffer's last accesses: an edge implied by others is not added).

Semaphore s counts completed, depended-upon instructions of stream s (streams are numbered
pe, act, dve, pool, sp, q0, q1, ...). A dependent instruction waits until that count reaches
the producer's ordinal; because a stream completes in order, the wait covers every earlier
producer of that stream too. An instruction that needs more waits than one record holds gets
`nisa.nop`s in front of it on its own engine.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.passes import Pass, register
from torchneuron.dialects.common import access_patterns, memo, memref_info
from torchneuron.dialects.nisa import INSTRUCTION_OPS, WRITTEN_ROLES, instruction_roles

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
    SUMMARY = "Order each engine's instructions, pick DMA queues, insert semaphores"
    reorder: bool = True
    # After the list schedule, a backward pass and a second forward pass (list_schedule)
    justify: bool = True

    def run(self, module: ir.Operation) -> None:
        for func in U.functions(module):
            schedule_function(func, self.reorder, self.justify)


# An access of a buffer: (p0, p1, b0, b1, index): it touches partitions [p0, p1) and bytes
# [b0, b1) (its box: the first four), and is instruction `index`'s. (A plain tuple, its tests
# inlined: dependency analysis makes one per operand and tests it against every candidate.)
_Access = tuple


# _ByteIndex granules: level k buckets bytes in blocks of 2 ** (GRANULE_BITS + LEVEL_BITS * k).
GRANULE_BITS = 10
LEVEL_BITS = 4
MAX_SPAN = 4          # an access sits at the finest level where it spans at most this many
LINEAR_MAX = 16       # accesses kept in a plain list (scanned) before they are bucketed


class _ByteIndex:
    """Accesses of one buffer, found by the bytes they touch.

    A buffer in HBM takes thousands of DMAs (a [2048, 768] activation written 1.5 KB at a
    time, read back by wide strided patterns); scanning every earlier access of the buffer for
    each new one made dependency analysis quadratic (most of a BERT training step's compile
    time). Past LINEAR_MAX accesses, each is filed in the buckets its byte range spans at the
    finest of several granularities (1 KiB, 16 KiB, 256 KiB, ...) where that is at most
    MAX_SPAN buckets; a query looks, at every level in use, in the buckets its own range
    spans. Two byte ranges that overlap share a byte, so an overlapping access is always
    among the candidates; the exact test (the boxes overlap, partitions included) then
    decides, so the result is the same as scanning every access."""

    def __init__(self):
        self.linear: list[_Access] | None = []     # None once bucketed
        self.levels: list[dict[int, list[_Access]]] = []

    @staticmethod
    def _span(box, level: int) -> tuple[int, int]:
        shift = GRANULE_BITS + LEVEL_BITS * level
        return box[2] >> shift, (box[3] - 1) >> shift

    def add(self, access: _Access) -> None:
        if self.linear is None:
            self._file(access)
            return
        self.linear.append(access)
        if len(self.linear) > LINEAR_MAX:
            accesses, self.linear = self.linear, None
            for a in accesses:
                self._file(a)

    def _file(self, access: _Access) -> None:
        level = 0
        while True:
            first, last = self._span(access, level)
            if last - first < MAX_SPAN:
                break
            level += 1
        while len(self.levels) <= level:
            self.levels.append({})
        buckets = self.levels[level]
        for b in range(first, last + 1):
            bucket = buckets.get(b)
            if bucket is None:
                buckets[b] = [access]
            else:
                bucket.append(access)

    def _buckets(self, box, levels):
        for level in levels:
            buckets = self.levels[level]
            if not buckets:
                continue
            first, last = self._span(box, level)
            if last - first + 1 <= len(buckets):
                for b in range(first, last + 1):
                    bucket = buckets.get(b)
                    if bucket:
                        yield buckets, b, bucket
            else:
                for b, bucket in list(buckets.items()):
                    if first <= b <= last:
                        yield buckets, b, bucket

    def overlapping(self, box, needs: set[int]) -> None:
        """Add to `needs` the index of every access overlapping `box`."""
        p0, p1, b0, b1 = box
        if self.linear is not None:
            for a in self.linear:
                if a[0] < p1 and p0 < a[1] and a[2] < b1 and b0 < a[3]:
                    needs.add(a[4])
            return
        for _, _, bucket in self._buckets(box, range(len(self.levels))):
            for a in bucket:
                if a[0] < p1 and p0 < a[1] and a[2] < b1 and b0 < a[3]:
                    needs.add(a[4])

    def drop_covered(self, box, keep: _Access | None = None) -> None:
        """Forget the accesses (but `keep`) that `box` covers: a later access that conflicts
        with one of them conflicts with the covering one, which comes after it."""
        p0, p1, b0, b1 = box
        if self.linear is not None:
            if self.linear:
                self.linear = [a for a in self.linear if a is keep or not (
                    p0 <= a[0] and a[1] <= p1 and b0 <= a[2] and a[3] <= b1)]
            return
        width = b1 - b0
        # An access filed at level k spans more than MAX_SPAN buckets of level k - 1, so it
        # is wider than (MAX_SPAN - 1) of them; a box no wider covers none of them.
        levels = [k for k in range(len(self.levels))
                  if k == 0 or width > (MAX_SPAN - 1) << (GRANULE_BITS + LEVEL_BITS * (k - 1))]
        for buckets, b, bucket in self._buckets(box, levels):
            kept = [a for a in bucket if a is keep or not (
                p0 <= a[0] and a[1] <= p1 and b0 <= a[2] and a[3] <= b1)]
            if len(kept) != len(bucket):
                if kept:
                    buckets[b] = kept
                else:
                    del buckets[b]


class _BufferState:
    def __init__(self):
        self.writes = _ByteIndex()
        self.reads = _ByteIndex()
        # The accesses of the buffer no later access of it depends on: waiting for these
        # is waiting for every access of it (each other one is an ancestor of one of them).
        self.frontier: set[int] = set()
        # The frontier of the buffers that lived at this one's address before it: every
        # access of this buffer waits for them (not only the first: DMA pieces that write
        # disjoint partitions of a buffer do not depend on each other).
        self.inherited: set[int] = set()


def _box(buffer_type: ir.Type, ap: tuple[int, ...],
         row: int | None = None) -> tuple[int, int, int, int]:
    """Partition and byte extent an access pattern touches within a buffer of the type. In
    HBM, "partitions" are rows of `row` elements (default: the last dim's): a pattern whose
    dims each step whole rows or stay within the row it starts in touches only the rectangle
    of those rows and columns; any other, the whole rows it spans."""
    info = memref_info(buffer_type)
    itemsize, shape = info.itemsize, info.shape
    offset, dims = ap[0], [(ap[i], ap[i + 1]) for i in range(1, len(ap), 2)]
    if info.memory == "hbm":
        row = row or (shape[-1] if shape else 1)
        r0, c0 = divmod(offset, row)
        # (Each dim's reach from the start, below and above it: a flipped view's stride is
        # negative.)
        rows_lo = rows_hi = cols_lo = cols_hi = 0
        for s, n in dims:
            reach = s * (n - 1)
            if s % row == 0:
                rows_lo, rows_hi = rows_lo + min(0, reach // row), rows_hi + max(0, reach // row)
            else:
                cols_lo, cols_hi = cols_lo + min(0, reach), cols_hi + max(0, reach)
        if 0 <= c0 + cols_lo and c0 + cols_hi < row:
            return (r0 + rows_lo, r0 + rows_hi + 1, (c0 + cols_lo) * itemsize,
                    (c0 + cols_hi + 1) * itemsize)
        low = offset + sum(min(0, s * (n - 1)) for s, n in dims)
        high = offset + sum(max(0, s * (n - 1)) for s, n in dims)
        return (low // row, high // row + 1, 0, row * itemsize)
    row = shape[1]
    p0 = offset // row
    partitions = dims[0][1]
    col = offset % row
    extent = sum(s * (n - 1) for s, n in dims[1:])
    return (p0, p0 + partitions, col * itemsize, (col + extent + 1) * itemsize)


def _whole(buffer_type: ir.Type, row: int | None = None) -> tuple[int, int, int, int]:
    """The box of every element of a buffer: what an indirect DMA may read, whose rows its
    index tensor chooses when it runs (its pattern's row dim says how many, not which)."""
    info = memref_info(buffer_type)
    shape = info.shape
    if info.memory == "hbm":
        row = row or (shape[-1] if shape else 1)
        return (0, -(-_prod(shape) // row), 0, row * info.itemsize)
    return (0, shape[0], 0, shape[1] * info.itemsize)


def _hbm_rows(accesses: dict) -> dict:
    """Per HBM buffer (its type and the patterns it is accessed with), the row length of its
    boxes: among the products of its trailing dims, the one whose boxes cover the fewest
    bytes in all (a [B, S, 3, H, D] gradient whose heads' columns are written apart: rows
    of 3*H*D, not D, so that the pieces of one token row do not conflict)."""
    rows = {}
    for buffer, (buffer_type, aps) in accesses.items():
        shape = memref_info(buffer_type).shape
        best = None
        size = 1
        for d in reversed(shape[1:]):
            size *= d
            area = 0
            for ap in aps:
                p0, p1, b0, b1 = _box(buffer_type, ap, size)
                area += (p1 - p0) * (b1 - b0)
            if best is None or area < best[0]:
                best = (area, size)
        if best is not None:
            rows[buffer] = best[1]
    return rows


def _address_range(alloc: ir.Operation) -> tuple[str, int, int] | None:
    attributes = alloc.attributes
    if "address" not in attributes:
        return None
    info = memref_info(alloc.results[0].type)
    shape = info.shape
    size = info.itemsize * (shape[1] if info.memory != "hbm" else _prod(shape))
    start = ir.IntegerAttr(attributes["address"]).value
    return info.memory, start, start + size


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


class _Decoded:
    """What scheduling reads of an instruction op, read from the IR once."""
    __slots__ = ("op", "engine", "roles", "operands", "types", "aps")

    def __init__(self, op: ir.Operation):
        self.op = op
        self.engine = U.str_attr(op, "engine")
        self.roles = instruction_roles(op)
        self.operands = list(op.operands)
        self.types = tuple(v.type for v in self.operands)
        self.aps = access_patterns(op)


def dependencies(decoded: list[_Decoded], allocs: dict) -> list[list[int]]:
    """For each instruction (in the given order), the earlier instructions it must wait for:
    writers of what it reads, readers and writers of what it writes (by the bytes the access
    patterns touch), and every access to a buffer that lived before at its address (as the
    accesses of that buffer no other access of it waits for, which the rest precede)."""
    boxes = memo("schedule.boxes")
    if boxes is None:
        boxes = {}

    def box(buffer_type: ir.Type, ap: tuple[int, ...], row: int | None = None
            ) -> tuple[int, int, int, int]:
        key = (buffer_type, ap, row)
        found = boxes.get(key)
        if found is None:
            found = boxes[key] = _box(buffer_type, ap, row)
        return found

    hbm: dict = {}
    for d in decoded:
        for buffer, t, ap in zip(d.operands, d.types, d.aps):
            if memref_info(t).memory == "hbm":
                hbm.setdefault(buffer, (t, set()))[1].add(ap)
    rows = _hbm_rows(hbm)
    records = [[(buffer, role, _whole(t, rows.get(buffer))
                 if role == "src" and d.op.name == "nisa.dma_indirect"
                 else box(t, ap, rows.get(buffer)))
                for role, buffer, t, ap in zip(d.roles, d.operands, d.types, d.aps)]
               for d in decoded]
    return box_dependencies(records, lambda buffer: _address_range(allocs[buffer])
                            if buffer in allocs else None)


def box_dependencies(records: list[list[tuple]], address_range) -> list[list[int]]:
    """`dependencies` over decoded accesses: per instruction, its (buffer, role, box)
    operands; `address_range(buffer)` is (memory, start, end) where the buffer was placed,
    None for a buffer of its own (an argument)."""
    states: dict = {}
    # Occupants of on-chip/scratch memory: (start, end, buffer) per memory, for reuse edges.
    occupants: dict[str, list[tuple[int, int, object]]] = {"sbuf": [], "psum": [], "hbm": []}
    preds: list[list[int]] = []
    for index, operands in enumerate(records):
        needs: set[int] = set()
        touched = []
        for buffer, role, box in operands:
            state = states.get(buffer)
            if state is None:
                state = states[buffer] = _BufferState()
                placed = address_range(buffer)
                if placed is not None:
                    for previous in _take_over(occupants[placed[0]], placed[1], placed[2],
                                               buffer):
                        state.inherited.update(states[previous].frontier)
            write = role in WRITTEN_ROLES
            conflicts: set[int] = set()
            state.writes.overlapping(box, conflicts)
            if write:
                state.reads.overlapping(box, conflicts)
            # Every access of the buffer waits for the inherited frontier, directly or
            # through an earlier access of the buffer it conflicts with.
            needs.update(conflicts if conflicts else state.inherited)
            access = (*box, index)
            (state.writes if write else state.reads).add(access)
            state.frontier.add(index)
            touched.append(state)
            if write and role == "dst":
                # Accesses this write fully covers can no longer be the latest conflict.
                state.writes.drop_covered(box, keep=access)
                state.reads.drop_covered(box)
        needs.discard(index)
        for state in touched:
            state.frontier -= needs
        preds.append(sorted(needs))
    return preds


def schedule_function(func: ir.Operation, reorder: bool = True, justify: bool = True) -> None:
    ops = U.body_ops(func)
    decoded = [_Decoded(op) for op in ops if op.name in INSTRUCTION_OPS]
    allocs = {op.results[0]: op for op in ops if op.name == "nisa.alloc"}
    target = _target_of(func)
    preds = dependencies(decoded, allocs)
    if reorder and decoded:
        order, queues = list_schedule(decoded, preds, target, justify)
        decoded = [decoded[i] for i in order]
        _apply_order(func, ops, [d.op for d in decoded])
        # The same edges, renumbered: dependent pairs keep their order in a schedule.
        position = {old: new for new, old in enumerate(order)}
        preds = [sorted(position[p] for p in preds[old]) for old in order]
        streams = [d.engine if d.engine != "dma" else f"q{queues[i]}"
                   for i, d in zip(order, decoded)]
    else:
        streams = [stream_of(d.op) for d in decoded]
    _synchronise(func, [d.op for d in decoded], streams, preds, target)


def _synchronise(func: ir.Operation, instructions: list[ir.Operation], streams: list[str],
                 preds: list[list[int]], target) -> None:
    """Give the instructions (in their final order, on `streams`) the semaphore signals and
    waits their dependencies `preds` (each in increasing order) need."""
    # Per instruction, the latest instruction of each other stream it waits for.
    deps: list[dict[str, int]] = []
    for own, needs in zip(streams, preds):
        latest: dict[str, int] = {}
        for i in needs:          # (increasing: the last one of a stream is its latest)
            s = streams[i]
            if s != own:
                latest[s] = i
        deps.append(latest)

    # Which instructions are depended upon, and their ordinal in their stream's semaphore.
    signalled = set()
    for needs in deps:
        signalled.update(needs.values())
    names = stream_names(max([target.dma_queues] + [int(x[1:]) + 1 for x in streams
                                                    if x.startswith("q")]))
    sem_of = {name: k for k, name in enumerate(names)}
    ordinal: dict[int, int] = {}
    counts: dict[str, int] = {}
    for index in sorted(signalled):
        s = streams[index]
        counts[s] = counts.get(s, 0) + 1
        ordinal[index] = counts[s]

    # The attributes set, built once per value: building one through the bindings costs
    # more than the rest of an instruction's synchronisation.
    signal_attrs = {name: U.i64(k) for k, name in enumerate(names)}
    waits_attrs: dict[tuple[int, ...], ir.Attribute] = {}

    def waits_attr(waits: list[int]) -> ir.Attribute:
        key = tuple(waits)
        found = waits_attrs.get(key)
        if found is None:
            found = waits_attrs[key] = U.i64_array(waits)
        return found

    # What each stream already knows has completed (a vector clock, per semaphore the count
    # reached): its own waits and, transitively, what the producers it waited for knew when
    # they signalled (`snapshot`). A wait implied by that knowledge, or by another wait of the
    # same instruction, is dropped.
    known: dict[str, list[int]] = {}
    snapshot: dict[int, list[int]] = {}
    for index, (op, needs) in enumerate(zip(instructions, deps)):
        stream = streams[index]
        mine = known.get(stream)
        if mine is None:
            mine = [0] * len(names)
        waits = []
        if needs:
            # (stream, semaphore, value to wait for, what its producer knew)
            candidates = [(s, sem_of[s], ordinal[i], snapshot[i]) for s, i in needs.items()
                          if mine[sem_of[s]] < ordinal[i]]
            if len(candidates) > 1:     # (a single candidate has no other wait to imply it)
                candidates = [c for c in candidates
                              if not any(other[3][c[1]] >= c[2]
                                         for other in candidates if other is not c)]
                candidates.sort()       # by stream name (unique)
            for _, sem, value, knew in candidates:
                waits += [sem, value]
                mine = [a if a >= b else b for a, b in zip(mine, knew)]
        known[stream] = mine
        if index in signalled:
            own = mine.copy()
            own[sem_of[stream]] = ordinal[index]
            snapshot[index] = own
            op.attributes["signal"] = signal_attrs[stream]
        while len(waits) > 2 * MAX_WAITS:
            extra, waits = waits[:2 * MAX_WAITS], waits[2 * MAX_WAITS:]
            with ir.InsertionPoint(op), op.location:
                attrs = {"engine": op.attributes["engine"], "aps": ir.ArrayAttr.get([]),
                         "waits": U.i64_array(extra)}
                if "queue" in op.attributes:
                    attrs["queue"] = op.attributes["queue"]
                U.create("nisa.nop", [], [], attrs)
        if waits:
            op.attributes["waits"] = waits_attr(waits)
    func.attributes["nisa.num_semaphores"] = U.i64(len(names))


def _take_over(occupied: list[tuple[int, int, ir.Value]], start: int, end: int,
               buffer: ir.Value) -> list[ir.Value]:
    """Record `buffer` as the occupant of [start, end); return the buffers it displaces.
    `occupied` is kept sorted by start, its ranges disjoint, so the displaced ones are found
    by bisection (a function holds tens of thousands of tiles)."""
    i = bisect.bisect_right(occupied, start, key=_range_start) - 1
    if i < 0 or occupied[i][1] <= start:
        i += 1
    j = i
    while j < len(occupied) and occupied[j][0] < end:
        j += 1
    displaced = [other for _, _, other in occupied[i:j]]
    replacement = []
    if i < j and occupied[i][0] < start:
        replacement.append((occupied[i][0], start, occupied[i][2]))
    replacement.append((start, end, buffer))
    if i < j and end < occupied[j - 1][1]:
        replacement.append((end, occupied[j - 1][1], occupied[j - 1][2]))
    occupied[i:j] = replacement
    return displaced


def _range_start(occupant: tuple[int, int, ir.Value]) -> int:
    return occupant[0]


def _target_of(func: ir.Operation):
    from torchneuron.target import get_target

    name = ir.StringAttr(func.attributes["nisa.target"]).value \
        if "nisa.target" in func.attributes else None
    return get_target(name)


def _apply_order(func: ir.Operation, ops: list[ir.Operation],
                 instructions: list[ir.Operation]) -> None:
    """Put the function's buffers and constants first, then the instructions in `order`."""
    terminator = ops[-1]
    for op in ops[:-1]:
        if op.name not in INSTRUCTION_OPS:
            op.move_before(terminator)
    for op in instructions:
        op.move_before(terminator)


def list_schedule(decoded: list[_Decoded], preds: list[list[int]], target,
                  justify: bool = True) -> tuple[list[int], dict[int, int]]:
    """An order of the instructions that keeps every engine busy, by list scheduling with the
    cost model: repeatedly take the engine or DMA queue that can start an instruction soonest
    and start there, among the instructions whose predecessors are all placed and finished by
    then, the one with the longest chain of dependent work still behind it (its upward rank:
    its cost plus the largest rank of its successors; ties in program order). Ranks put
    the work that holds up the most on the critical path first, where the order in which
    instructions became ready would let a concurrent kernel's loads delay the one the next
    kernel waits for. Each DMA also gets the queue where it would finish first (queues issue
    in order and overlap the fixed latency with earlier transfers, as the simulator does).
    A DMA is given to a queue only once some queue could start its transfer then (its
    previous transfer ends within the fixed latency): a queue runs its transfers in order, so
    one committed far ahead, such as a load of a later kernel's weights, would hold up a
    more urgent DMA that becomes ready in the meantime; committed as queues free up, the
    urgent one overtakes the loads not yet given a queue.

    Ranks ignore that engines are shared. With `justify`, the schedule is then improved as
    in forward-backward improvement of resource-constrained schedules: the same list
    scheduling run backwards in time from the end (`_backward_pass`, latest-finishing first)
    packs every instruction as late as its successors and its engine allow, and a second
    forward pass takes instructions by how early that right-justified schedule starts them,
    which accounts for the engine time the work behind them needs. The order whose
    estimated end is earlier is kept (the first on a tie).
    Returns the order and, per DMA, its queue (also set on the op)."""
    from torchneuron import cost_model

    n = len(decoded)
    known: dict = {}       # one target's costs: not kept beyond this schedule
    costs = [_cost(d, target, cost_model, known) for d in decoded]
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    rank = [0.0] * n
    for i in range(n - 1, -1, -1):      # successors come later in program order
        after = succs[i]
        rank[i] = costs[i] + (max([rank[s] for s in after]) if after else 0.0)
    engines = [d.engine for d in decoded]
    pred_sets = [set(ps) for ps in preds]
    best = _forward_pass(engines, costs, pred_sets, succs, rank, target)
    if justify and n:
        # (A larger reverse-time end is an earlier start in the right-justified schedule.)
        reverse_end = _backward_pass(engines, costs, preds, succs, best.finish, target)
        second = _forward_pass(engines, costs, pred_sets, succs, reverse_end, target)
        if second.makespan < best.makespan:
            best = second
    for i, q in best.queues.items():
        decoded[i].op.attributes["queue"] = U.i64(q)
    return best.order, best.queues


@dataclasses.dataclass
class _ListSchedule:
    order: list[int]
    queues: dict[int, int]         # DMA -> its queue
    finish: list[float]            # estimated end of each instruction, ns
    makespan: float


class _ReadyQueues:
    """A list scheduling pass's instructions that wait for nothing unplaced any more (their
    predecessors, going forward; their successors, going backward), per engine: by the
    time they become ready (`pending`), and those already taken into account as ready by an
    engine's next start by priority (`available`), so an engine picks its highest-priority
    instruction among those ready when it starts."""

    def __init__(self, engines: list[str], waiting_on: list[int]):
        """`waiting_on[i]`: how many instructions i waits for to be placed; those waiting for
        none are ready at 0."""
        self.engines = engines
        self.waiting_on = list(waiting_on)
        self.ready_at = [0.0] * len(engines)      # when each instruction's inputs are done
        # Per engine, in first-use order: its (pending, available) heaps, the first of
        # (ready time, instruction), the second of (-priority, instruction).
        self.queues: dict[str, tuple[list, list]] = {}
        for i, count in enumerate(waiting_on):
            if count == 0:
                self._pend(engines[i], (0.0, i))

    def _pend(self, engine: str, entry: tuple[float, int]) -> None:
        queues = self.queues.get(engine)
        if queues is None:
            queues = self.queues[engine] = ([], [])
        heapq.heappush(queues[0], entry)

    def placed(self, waiting: list[int], done: float) -> None:
        """An instruction is placed, done at `done` for each of the instructions `waiting`
        for it; one that waits for nothing more becomes pending."""
        ready_at, waiting_on = self.ready_at, self.waiting_on
        for s in waiting:
            if done > ready_at[s]:
                ready_at[s] = done
            left = waiting_on[s] - 1
            waiting_on[s] = left
            if not left:
                self._pend(self.engines[s], (ready_at[s], s))

    def soonest(self, engine_free: dict[str, float], dma_free: float) -> tuple[float, str]:
        """(start, engine): the engine that can start an instruction soonest, given when each
        engine is free (`engine_free`, the DMA queues: `dma_free`) and when its instructions
        are or become ready (what is available became ready by an earlier start). Engines
        are tried in first-use order, not a set's: ties between them must not depend on the
        process's string hash seed, or one graph compiles differently from run to run."""
        best_start, best_engine = None, None
        for engine, (pending, available) in self.queues.items():
            if available:
                ready = 0.0
            elif pending:
                ready = pending[0][0]
            else:
                continue
            free = dma_free if engine == "dma" else engine_free.get(engine, 0.0)
            start = ready if ready > free else free
            if best_start is None or start < best_start:
                best_start, best_engine = start, engine
        return best_start, best_engine

    def take(self, engine: str, start: float, priority: list[float]) -> int:
        """The highest-priority instruction ready by `start` (ties in program order)."""
        pending, available = self.queues[engine]
        while pending and pending[0][0] <= start:
            i = heapq.heappop(pending)[1]
            heapq.heappush(available, (-priority[i], i))
        return heapq.heappop(available)[1]


_CHAINED_OVERHEAD_ENGINES = ("act", "dve", "pool")


def _forward_pass(engines: list[str], costs: list[float], preds: list[set[int]],
                  succs: list[list[int]], priority: list[float], target) -> _ListSchedule:
    """List scheduling (see list_schedule), the highest `priority` first among the ready.
    `preds[i]`: the instructions i depends on, as a set."""
    n = len(engines)
    finish = [0.0] * n
    ready = _ReadyQueues(engines, [len(p) for p in preds])
    soonest, take, placed, ready_at = ready.soonest, ready.take, ready.placed, ready.ready_at
    engine_free: dict[str, float] = {}
    queues = range(target.dma_queues)
    issue = [0.0] * len(queues)
    transfer_end = [0.0] * len(queues)
    latency = target.dma_latency_ns
    order: list[int] = []
    chosen_queue: dict[int, int] = {}
    # Per queue, when it could next start a transfer (its previous one ends within the
    # latency), and the soonest of those.
    could_start = [0.0] * len(queues)
    queue_free = 0.0

    # The fixed overhead of a dependent back-to-back pair (TARGET.md), which the simulator
    # charges an ACT, DVE or POOL instruction that reads what the one before it on its engine
    # wrote: charged here where the instruction placed before it on its engine is one it
    # depends on (a dependency also counts a write after a read, which the simulator does not
    # charge: an estimate, on the side of caution). PE's accumulating matmuls pipeline.
    overhead_ns = {e: target.fixed_overhead_cycles / target.engine_ghz(e)
                   for e in _CHAINED_OVERHEAD_ENGINES}
    last_placed: dict[str, int] = {}
    # (`a if a > b else b` is max(b, a) exactly, without the call: this loop runs three
    # times per instruction and compile time is the budget.)
    for _ in range(n):
        start, engine = soonest(engine_free, queue_free)
        i = take(engine, start, priority)
        duration = costs[i]
        if engine == "dma":
            # The queue where the transfer would end first (the first such queue on a tie).
            ready_i = ready_at[i]
            end = q = start_issue = None
            for p in queues:
                s = issue[p]
                if not s > ready_i:
                    s = ready_i
                e = s + latency
                t = transfer_end[p]
                e = (t if t > e else e) + duration
                if end is None or e < end:
                    end, q, start_issue = e, p, s
            issue[q] = start_issue
            transfer_end[q] = end
            chosen_queue[i] = q
            t = end - latency
            could_start[q] = t if t > start_issue else start_issue
            queue_free = min(could_start)
        else:
            r = ready_at[i]
            end = (r if r > start else start) + duration
            overhead = overhead_ns.get(engine)
            if overhead is not None:
                if last_placed.get(engine, -1) in preds[i]:
                    end += overhead
                last_placed[engine] = i
            engine_free[engine] = end
        finish[i] = end
        order.append(i)
        placed(succs[i], end)
    return _ListSchedule(order, chosen_queue, finish, max(finish, default=0.0))


def _backward_pass(engines: list[str], costs: list[float], preds: list[list[int]],
                   succs: list[list[int]], finish: list[float], target) -> list[float]:
    """List scheduling in reverse time on the reversed dependencies: an instruction is placed
    once all its successors are, the one that finishes latest in `finish` first, each engine
    one instruction at a time and the DMAs on the target's queues, a DMA's fixed latency
    between its transfer and its predecessors. Returns each instruction's end in reverse
    time (its start, counted back from the end of the right-justified schedule)."""
    n = len(engines)
    latency = target.dma_latency_ns
    reverse_end = [0.0] * n
    ready = _ReadyQueues(engines, [len(s) for s in succs])
    soonest, take, placed, ready_at = ready.soonest, ready.take, ready.placed, ready.ready_at
    engine_free: dict[str, float] = {}
    queue_free = [0.0] * target.dma_queues
    first_free = 0.0             # min(queue_free), changed only by a DMA
    for _ in range(n):
        start, engine = soonest(engine_free, first_free)
        i = take(engine, start, finish)
        r = ready_at[i]
        if engine == "dma":
            q = queue_free.index(first_free)
            end = (r if r > first_free else first_free) + costs[i]
            queue_free[q] = end
            first_free = min(queue_free)
            done = end + latency
        else:
            end = (r if r > start else start) + costs[i]
            engine_free[engine] = end
            done = end
        reverse_end[i] = end
        placed(preds[i], done)
    return reverse_end


def _cost(decoded: _Decoded, target, cost_model, known: dict) -> float:
    """Estimated ns an instruction occupies its engine (a DMA: its transfer time). `known`
    remembers the answer per what the cost model reads (cost_view): the op's name, engine,
    ALU op, operand roles, buffer types and access patterns but their offsets (the cost
    model reads the shape of what an operand touches, not where it starts; keyed with the
    offsets, nearly every instruction of a program missed)."""
    from torchneuron.compiler.codegen.neff_writer import cost_alu_attribute, instruction_cost

    op, engine = decoded.op, decoded.engine
    name, alu = op.name, cost_alu_attribute(op)
    key = (name, engine, alu, tuple(decoded.roles), tuple([ap[1:] for ap in decoded.aps]),
           decoded.types)
    found = known.get(key)
    if found is not None:
        return found
    # (cost_view(op), from what is decoded already)
    ins = instruction_cost(name, alu, decoded.roles, decoded.types, decoded.aps)
    if engine == "dma":
        found = cost_model.dma_transfer_ns(ins.ops, target,
                                           indirect=name == "nisa.dma_indirect")[0]
    else:
        found = cost_model.compute_cycles(ins, target) / target.engine_ghz(engine)
    known[key] = found
    return found


