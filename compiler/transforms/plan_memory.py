"""trn-plan-memory: give every `nisa.alloc` an address, reusing memory of dead buffers.

Liveness is taken in program order (from a buffer's first to its last use). SBUF tiles get a
byte range of every partition; PSUM tiles a range inside one 2 KiB bank (a matmul accumulation
group must not straddle banks); HBM scratch a range of the scratch arena. Reusing bytes makes
the new buffer's first writer wait for the old buffer's last reader, so memory freed long ago
is reused first: consecutive loop iterations land in different buffers and the next tile's
DMA can overlap this tile's compute (multi-buffering) without the schedule having to wait for
the reuse. On chip the bytes taken are those whose most recent use ended earliest in program
order (`OldestFreedArena`): a kernel that follows a long one then reuses the SBUF and PSUM
that one finished with first, not what it uses until its end, and so can start while it
runs. HBM scratch rotates through its space (`Arena`); option `oldest-freed=false` makes SBUF
and PSUM rotate too (`Banks`: PSUM banks round-robin).

A buffer with a `reuse_group` (a row-wise kernel's tiles) first takes bytes its own group
freed at least `group-distance` (32) releases ago, oldest first, and only when there are
none the bytes freed longest ago of all. Such a kernel's tiles are independent and short:
reusing its own bytes from a few tiles back keeps it multi-buffered within a footprint of a
few tiles, where taking the oldest bytes of all for each of its tiles (hundreds of KiB for a
LayerNorm over 2048 tokens, more than SBUF) runs it through the bytes the kernel beside it
in the schedule (a matmul kernel it follows) uses until its end, and its tiles wait for that
end. Option `group-reuse=false` turns it off.

The tiles of a pair of kernels trn-order set to run side by side (`co_run`, an attention
kernel or a DMA-bound matmul kernel, the "primary", and an independent PE-bound kernel, the
"partner"; or, inside one attention kernel, the attention part and the QKV projection that
computes the next batch index's rows beside it, convert-trn-to-nisa overlap-projection) take
their bytes in disjoint parts of SBUF and PSUM: the partner the top of each (SBUF: its peak
live bytes in program order twice over, at most half; PSUM: the banks its peak fills, at
least one, at most half: an attention kernel needs most banks), the primary the rest.
Otherwise whichever of the two comes second in program order takes the bytes the first one's
tiles left, each of its tiles waiting for one of the first's, and the two run one after the
other. A tile that does not fit in its part takes bytes anywhere.

Peak use is recorded on the function (`nisa.sbuf_bytes`, `nisa.psum_bytes`,
`nisa.scratch_bytes`, bytes per partition for the on-chip memories).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.passes import Pass, register
from torchneuron.dialects.common import memref_info
from torchneuron.target import get_target

_ALIGN = {"sbuf": 64, "psum": 4, "hbm": 64}
# A group's own bytes are reused once this many releases (of any buffer of that memory) have
# passed since they were freed: about two 128-row tiles of a LayerNorm (each frees a dozen).
GROUP_REUSE_DISTANCE = 32


@register
@dataclasses.dataclass
class PlanMemory(Pass):
    NAME = "trn-plan-memory"
    SUMMARY = "Assign SBUF/PSUM/HBM-scratch addresses to nisa.alloc buffers by liveness"
    target: str = ""
    # SBUF and PSUM bytes whose last use ended earliest are reused first (false: they rotate,
    # as HBM scratch does).
    oldest_freed: bool = True
    # With oldest_freed, a buffer with a reuse_group first reuses its own group's bytes ...
    group_reuse: bool = True
    # ... those freed at least this many releases ago
    group_distance: int = GROUP_REUSE_DISTANCE

    def run(self, module: ir.Operation) -> None:
        for func in U.functions(module):
            name = func.attributes["nisa.target"] if "nisa.target" in func.attributes else None
            target = get_target(self.target or (ir.StringAttr(name).value if name else None))
            if self.group_distance < 1:
                raise CompileError(f"group-distance must be at least 1, got "
                                   f"{self.group_distance}", func.location)
            plan_function(func, target, self.oldest_freed,
                          self.group_distance if self.group_reuse else None)


class Arena:
    """Next-fit allocator over [0, capacity): each allocation starts at the first free block
    at or after where the previous one ended, wrapping around. Allocations rotate through the
    whole memory, so a freed block is reused as late as possible."""

    def __init__(self, capacity: int | None):
        self.capacity = capacity if capacity is not None else 1 << 62
        self.free: list[list[int]] = [[0, self.capacity]]    # sorted [start, end) blocks
        self.cursor = 0
        self.peak = 0

    def allocate(self, size: int, align: int) -> int | None:
        candidates = sorted(self.free, key=lambda b: (b[1] <= self.cursor, b[0]))
        for block in candidates:
            start = max(block[0], self.cursor if block[0] < self.cursor < block[1] else block[0])
            start = -(-start // align) * align
            if start + size > block[1]:
                start = -(-block[0] // align) * align
                if start + size > block[1]:
                    continue
            self.free.remove(block)
            if block[0] < start:
                self.free.append([block[0], start])
            if start + size < block[1]:
                self.free.append([start + size, block[1]])
            self.free.sort()
            self.cursor = start + size
            self.peak = max(self.peak, start + size)
            return start
        return None

    def release(self, start: int, size: int) -> None:
        self.free.append([start, start + size])
        self.free.sort()
        merged = [self.free[0]]
        for block in self.free[1:]:
            if block[0] == merged[-1][1]:
                merged[-1][1] = block[1]
            else:
                merged.append(block)
        self.free = merged


class OldestFreedArena:
    """[0, capacity) as granules of `granule` bytes (the memory's alignment), each stamped
    with when it was last freed (a count of releases; -1: never used). An allocation takes
    the run of whole granules whose most recently freed granule was freed longest ago, the
    lowest such run among equals: the reuse whose previous reader most likely finished long
    before. With `bank` (PSUM), a run stays inside one bank of that many bytes and starts at
    a multiple of its own size rounded up to a power of two (at most a bank), so that a tile
    shares its bytes with few earlier ones. Exact over every run, in a few numpy passes per
    allocation (a sliding maximum by doubling; PSUM's aligned runs, in banks of a power of two
    granules, do not overlap, so one maximum over a reshape)."""

    _TAKEN = np.iinfo(np.int64).max

    def __init__(self, capacity: int, granule: int, bank: int | None = None,
                 group_distance: int = GROUP_REUSE_DISTANCE):
        self.granule = granule
        self.group_distance = group_distance
        self.stamps = np.full(capacity // granule, -1, np.int64)
        self.groups = np.full(capacity // granule, -1, np.int64)   # who freed each granule
        self.bank_granules = bank // granule if bank else None
        if self.bank_granules and self.bank_granules & (self.bank_granules - 1):
            raise ValueError(f"a bank of {bank} bytes is not a power of two {granule}-byte "
                             "granules")
        self.releases = 0
        self.peak = 0

    def allocate(self, size: int, align: int, group: int | None = None,
                 window: tuple[int, int] | None = None) -> int | None:
        """The address of `size` bytes; with `group`, bytes that group freed at least
        `group_distance` releases ago where some run of them fits; with `window`, bytes in
        [window[0], window[1]) only."""
        if self.granule % align:
            raise ValueError(f"alignment {align} does not divide the {self.granule}-byte "
                             "granule")
        width = max(1, -(-size // self.granule))
        bank = self.bank_granules
        if width > len(self.stamps) or (bank and width > bank):
            return None
        if bank:
            # Runs start at multiples of `step`, which divides a bank, and are no longer:
            # each run's newest stamp is the maximum of one row of a reshape.
            step = min(1 << (width - 1).bit_length(), bank)

            def runs(values, combine):
                return combine.reduce(values.reshape(-1, step)[:, :width], axis=1)
        else:
            step = 1

            def runs(values, combine):
                # runs(v)[g]: v's granules g .. g+width-1 combined, by doubling spans
                span = 1
                while span * 2 <= width:
                    values = combine(values[:-span], values[span:])
                    span *= 2
                if span < width:
                    values = combine(values[:len(values) - (width - span)],
                                     values[width - span:])
                return values
        newest = runs(self.stamps, np.maximum)
        if window is not None:
            starts = np.arange(len(newest)) * step
            lo, hi = window[0] // self.granule, window[1] // self.granule
            newest = np.where((starts >= lo) & (starts + width <= hi), newest, self._TAKEN)
        if group is not None:
            own = (self.groups == group) & \
                (self.stamps <= self.releases - self.group_distance)
            own_runs = runs(own, np.logical_and)
            if own_runs.any():
                newest = np.where(own_runs, newest, self._TAKEN)
        first = int(np.argmin(newest))
        if newest[first] == self._TAKEN:
            return None
        first *= step
        self.stamps[first:first + width] = self._TAKEN
        start = first * self.granule
        self.peak = max(self.peak, start + size)
        return start

    def release(self, start: int, size: int, group: int | None = None) -> None:
        self.releases += 1
        first = start // self.granule
        end = first + max(1, -(-size // self.granule))
        self.stamps[first:end] = self.releases
        self.groups[first:end] = -1 if group is None else group


class Banks:
    """PSUM: a tile lives inside one bank; banks are tried round-robin so that consecutive
    accumulation groups use different banks."""

    def __init__(self, count: int, bank_bytes: int):
        self.bank_bytes = bank_bytes
        self.banks = [Arena(bank_bytes) for _ in range(count)]
        self.next = 0
        self.peak = 0

    def allocate(self, size: int, align: int) -> int | None:
        for k in range(len(self.banks)):
            index = (self.next + k) % len(self.banks)
            address = self.banks[index].allocate(size, align)
            if address is not None:
                self.next = (index + 1) % len(self.banks)
                self.peak = max(self.peak, index * self.bank_bytes + address + size)
                return index * self.bank_bytes + address
        return None

    def release(self, address: int, size: int) -> None:
        self.banks[address // self.bank_bytes].release(address % self.bank_bytes, size)


def plan_function(func: ir.Operation, target, oldest_freed: bool = True,
                  group_distance: int | None = GROUP_REUSE_DISTANCE) -> None:
    """Place every buffer of `func`; `group_distance` None: reuse_group is ignored."""
    ops = U.body_ops(func)
    allocs = [op for op in ops if op.name == "nisa.alloc"]
    first: dict = {}
    last: dict = {}
    index_of_alloc = {}
    for i, op in enumerate(ops):
        if op.name == "nisa.alloc":
            index_of_alloc[op.results[0]] = i
            continue
        for v in op.operands:
            if v in index_of_alloc:
                first.setdefault(v, i)
                last[v] = i
    unused = [op for op in allocs if op.results[0] not in first]
    allocs = [op for op in allocs if op.results[0] in first]
    for op in unused:
        op.erase()

    bank = target.psum_bank_bytes
    distance = group_distance or GROUP_REUSE_DISTANCE
    memories = {
        "sbuf": OldestFreedArena(target.sbuf_partition_bytes, _ALIGN["sbuf"],
                                 group_distance=distance) if oldest_freed
        else Arena(target.sbuf_partition_bytes),
        "psum": OldestFreedArena(target.psum_banks * bank, _ALIGN["psum"], bank, distance)
        if oldest_freed else Banks(target.psum_banks, bank),
        "hbm": Arena(None),
    }
    windows = _co_run_windows(allocs, first, last, target) if oldest_freed else {}
    starts: dict[int, list[ir.Operation]] = {}
    ends: dict[int, list[ir.Operation]] = {}
    for op in allocs:
        v = op.results[0]
        starts.setdefault(first[v], []).append(op)
        ends.setdefault(last[v], []).append(op)
    placed: dict = {}
    for i in sorted(set(starts) | set(ends)):
        for op in starts.get(i, []):
            memory = U.str_attr(op, "memory")
            size = _bytes(op.results[0], memory)
            space = memories[memory]
            group = U.int_attr(op, "reuse_group") if group_distance is not None and \
                "reuse_group" in op.attributes and isinstance(space, OldestFreedArena) \
                else None
            window = windows.get(op.results[0])
            address = None
            if window is not None:
                address = space.allocate(size, _ALIGN[memory], group, window)
            if address is None:
                address = space.allocate(size, _ALIGN[memory]) if group is None else \
                    space.allocate(size, _ALIGN[memory], group)
            if address is None:
                raise CompileError(_overflow_message(memory, size, space, target),
                                   op.location)
            op.attributes["address"] = U.i64(address)
            placed[op.results[0]] = (memory, address, size, group)
        for op in ends.get(i, []):
            memory, address, size, group = placed[op.results[0]]
            if group is None:
                memories[memory].release(address, size)
            else:
                memories[memory].release(address, size, group)
    func.attributes["nisa.sbuf_bytes"] = U.i64(memories["sbuf"].peak)
    func.attributes["nisa.psum_bytes"] = U.i64(memories["psum"].peak)
    func.attributes["nisa.scratch_bytes"] = U.i64(memories["hbm"].peak)


def _co_run_windows(allocs: list[ir.Operation], first: dict, last: dict,
                    target) -> dict:
    """Per on-chip tile of a co-running pair, the [start, end) bytes it is placed in."""
    pairs: dict[tuple[int, str, str], list[ir.Operation]] = {}
    for op in allocs:
        if "co_run" in op.attributes:
            key = (U.int_attr(op, "co_run"), U.str_attr(op, "co_run_role"),
                   U.str_attr(op, "memory"))
            pairs.setdefault(key, []).append(op)
    bank = target.psum_bank_bytes
    capacity = {"sbuf": target.sbuf_partition_bytes, "psum": target.psum_banks * bank}
    windows: dict = {}
    for (pair, role, memory), partner in pairs.items():
        primary = pairs.get((pair, "primary", memory))
        if role != "partner" or not primary:
            continue
        peak = _peak_live(partner, first, last, memory)
        cap = capacity[memory]
        if memory == "psum":
            banks = min(target.psum_banks // 2, max(1, -(-peak // bank)))
            split = cap - banks * bank
        else:
            split = cap - min(cap // 2, -(-2 * peak // _ALIGN[memory]) * _ALIGN[memory])
        if _peak_live(primary, first, last, memory) > split:
            continue
        for op in primary:
            windows[op.results[0]] = (0, split)
        for op in partner:
            windows[op.results[0]] = (split, cap)
    return windows


def _peak_live(allocs: list[ir.Operation], first: dict, last: dict, memory: str) -> int:
    """The most bytes per partition of `allocs` live at once, in program order."""
    events = []
    for op in allocs:
        v = op.results[0]
        size = -(-_bytes(v, memory) // _ALIGN[memory]) * _ALIGN[memory]
        events += [(first[v], 0, size), (last[v], 1, -size)]
    live = peak = 0
    for _, _, size in sorted(events):
        live += size
        peak = max(peak, live)
    return peak


def _bytes(buffer: ir.Value, memory: str) -> int:
    info = memref_info(buffer.type)
    if not info.itemsize:
        raise ValueError(f"no storage size for element type {info.element}")
    shape = info.shape
    if memory == "hbm":
        n = 1
        for s in shape:
            n *= s
        return n * info.itemsize
    return shape[1] * info.itemsize      # bytes per partition of a [partitions, free] tile


def _overflow_message(memory: str, size: int, space, target) -> str:
    if memory == "psum":
        return (f"a PSUM tile of {size} bytes per partition does not fit in a "
                f"{target.psum_bank_bytes}-byte bank, or all {target.psum_banks} banks are busy")
    return (f"out of SBUF: a tile needs {size} more bytes per partition; {target.name} has "
            f"{target.sbuf_partition_bytes} per partition and live tiles already reach "
            f"{space.peak}")
