"""Builds `nisa` instruction ops on on-chip tiles: the vocabulary the kernel generators use."""

from __future__ import annotations

import dataclasses
import math

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.kernels.views import HbmView
from torchneuron.dialects.common import memo, memref_info
from torchneuron.cost_model import strided_runs
from torchneuron.target import Target


@dataclasses.dataclass(frozen=True)
class Tile:
    """A rectangle [partitions, free] of an on-chip buffer (a `nisa.alloc` result), starting at
    free element `col` of every partition."""
    buffer: ir.Value
    partitions: int
    free: int
    col: int = 0

    @property
    def row(self) -> int:
        return memref_info(self.buffer.type).shape[1]

    @property
    def element_type(self) -> ir.Type:
        return ir.MemRefType(self.buffer.type).element_type

    @property
    def memory(self) -> str:
        return memref_info(self.buffer.type).memory

    def ap(self, free_shape: tuple[int, ...] | None = None) -> list[int]:
        """[offset, row, partitions, 1, free] (or the free extent split as `free_shape`)."""
        ap = [self.col, self.row, self.partitions]
        shape = free_shape or (self.free,)
        stride = 1
        dims = []
        for size in reversed(shape):
            dims.append((stride, size))
            stride *= size
        for stride, size in reversed(dims):
            ap += [stride, size]
        return ap

    def pattern(self, offset: int, dims: list[tuple[int, int]]) -> "TilePattern":
        """This tile's partitions read with a free access pattern of (stride, size) pairs
        starting `offset` elements into each partition (e.g. a convolution window)."""
        return TilePattern(self.buffer, self.partitions, self.col + offset, tuple(dims))

    def columns(self, start: int, width: int) -> "Tile":
        return Tile(self.buffer, self.partitions, width, self.col + start)

    def rows(self, count: int) -> "Tile":
        return Tile(self.buffer, count, self.free, self.col)

    def partition_slice(self, start: int, count: int) -> "Tile":
        """Partitions [start, start + count) of this tile (an access pattern's offset counts
        whole partition rows, then elements within the row)."""
        return Tile(self.buffer, count, self.free, self.col + start * self.row)


@dataclasses.dataclass(frozen=True)
class TilePattern:
    """An arbitrary free access pattern over the partitions of an on-chip buffer."""
    buffer: ir.Value
    partitions: int
    offset: int
    dims: tuple[tuple[int, int], ...]

    @property
    def row(self) -> int:
        return memref_info(self.buffer.type).shape[1]

    @property
    def element_type(self) -> ir.Type:
        return ir.MemRefType(self.buffer.type).element_type

    @property
    def memory(self) -> str:
        return memref_info(self.buffer.type).memory

    @property
    def free(self) -> int:
        n = 1
        for _, size in self.dims:
            n *= size
        return n

    def ap(self) -> list[int]:
        ap = [self.offset, self.row, self.partitions]
        for stride, size in self.dims:
            ap += [stride, size]
        return ap


def tensor_tensor_cycles(dst: Tile, lhs: Tile, rhs: Tile, op: str) -> int:
    """Cycles per partition of a DVE tensor_tensor (TARGET.md): one per element when an input
    is in PSUM, or every operand is bf16 in SBUF and the op is add, sub or mul; else two."""
    fast = "psum" in (lhs.memory, rhs.memory) or (
        op in ("add", "sub", "mul") and
        all(t.memory == "sbuf" and str(t.element_type) == "bf16" for t in (dst, lhs, rhs)))
    return dst.free if fast else 2 * dst.free


def _in_sbuf(*tiles) -> bool:
    """Whether every tile is in SBUF (the only memory POOL reads and writes)."""
    return all(t.memory == "sbuf" for t in tiles)


class Emitter:
    """Emits nisa ops at the current MLIR insertion point. Each DMA goes to the queue with the
    least transfer time queued so far (bytes plus per-run overhead, as the cost model
    charges); a copy goes to whichever of DVE and ACT would finish it first given the work
    each has had so far (`engine_work`: ns of busy time by the cost model, each engine at its
    own clock), so independent work spreads over the machine. With `pool_sharing`, POOL
    (GpSimd) shares the work that touches only SBUF -- tensor_tensor ops and copies -- the
    same way: it reads no PSUM (TARGET.md), and otherwise runs them by DVE's cost table at its
    own clock."""

    def __init__(self, target: Target, pool_sharing: bool = True, regroup_copies: bool = True):
        self.target = target
        self.pool_sharing = pool_sharing
        # A copy between layouts loads in the source's order and stores in the
        # destination's, reordered on chip, where that moves longer DMA runs
        # (kernels/elementwise.py, _lower_regrouped_copy).
        self.regroup_copies = regroup_copies
        # An mlp kernel may compute its hidden activation for a span of two token blocks
        # (kernels/mlp.py, hidden_tokens_per_block), a weight_gradient kernel its T for two
        # blocks of hidden units (kernels/weight_gradient.py, hidden_span).
        self.hidden_spans = True
        self._queued_bytes = [0] * target.dma_queues
        # Loads and stores use disjoint queues: a store waiting for compute must not hold up
        # the prefetch of later tiles queued behind it in an in-order queue.
        loads = max(1, target.dma_queues * 3 // 4)
        self._load_queues = range(loads)
        self._store_queues = range(loads, target.dma_queues) or self._load_queues
        self.engine_work = {"act": 0, "dve": 0, "pool": 0}
        # Set while a row-wise kernel is lowered: its SBUF tiles get this `reuse_group`, so
        # that trn-plan-memory reuses their own bytes first (a small footprint).
        self.reuse_group: int | None = None
        # Set while a kernel trn-order paired with another is lowered: (pair, role), put on
        # its SBUF and PSUM tiles
        self.co_run: tuple[int, str] | None = None

    def _next_queue(self, buffer: ir.Value, ap: list[int], store: bool,
                    hbm_ap: list[int] | None = None) -> int:
        """The queue of its kind (load or store) with the least transfer time queued. `ap`
        is the on-chip side's pattern; `hbm_ap`, the HBM side's, whose short rows may make
        more runs than the on-chip side's one per partition (a transposing copy)."""
        nbytes = _nbytes(buffer, ap)
        runs = ap[2]      # one run per partition at least
        if hbm_ap is not None:
            runs = max(runs, strided_runs(hbm_ap[2::2], hbm_ap[1::2]))
        queues = self._store_queues if store else self._load_queues
        queue = min(queues, key=self._queued_bytes.__getitem__)
        self._queued_bytes[queue] += nbytes + runs * self.target.dma_chunk_overhead_bytes
        return queue

    def busy_ns(self, engine: str, cycles: float) -> float:
        """ns that `engine` (DVE, ACT or POOL) is busy with an instruction of `cycles` (the cost
        table's count): at least MIN_II, plus the fixed overhead of a tiny free size."""
        t = self.target
        if cycles < t.tiny_free_size:
            cycles += t.fixed_overhead_cycles
        return max(t.min_ii, cycles) / t.engine_ghz(engine)

    def discount_engine_work(self, carried: float) -> None:
        """Keep only the share `carried` of the work each engine has been given: a kernel that
        runs mostly after the ones before it balances its own work, not theirs, which is
        done by the time it runs."""
        for engine in self.engine_work:
            self.engine_work[engine] *= carried

    def sooner_engine(self, cycles: dict[str, float]) -> str:
        """Of the engines in `cycles` (engine -> the instruction's cycles there), the one that
        would finish it first after the work it has had so far; DVE on a tie."""
        return min(cycles, key=lambda e: (self.engine_work[e] + self.busy_ns(e, cycles[e]),
                                          e != "dve"))

    # -- buffers -----------------------------------------------------------------------------

    def alloc(self, memory: str, partitions: int, free: int, element_type: ir.Type) -> Tile:
        mtype = ir.MemRefType.get([partitions, free], element_type,
                                  memory_space=ir.StringAttr.get(memory))
        attributes = {"memory": U.string(memory)}
        if self.reuse_group is not None and memory == "sbuf":
            attributes["reuse_group"] = U.i64(self.reuse_group)
        if self.co_run is not None and memory != "hbm":
            attributes["co_run"] = U.i64(self.co_run[0])
            attributes["co_run_role"] = U.string(self.co_run[1])
        op = U.create("nisa.alloc", [mtype], [], attributes)
        return Tile(op.results[0], partitions, free)

    def alloc_hbm(self, shape: list[int], element_type: ir.Type) -> ir.Value:
        mtype = ir.MemRefType.get(list(shape), element_type, memory_space=ir.StringAttr.get("hbm"))
        return U.create("nisa.alloc", [mtype], [], {"memory": U.string("hbm")}).results[0]

    # -- instructions ------------------------------------------------------------------------

    def _instr(self, name: str, engine: str, operands: list[tuple[ir.Value, list[int]]],
               segments: list[int] | None = None, cycles: int | None = None,
               **attrs) -> ir.Operation:
        """`cycles`: the engine's work in cycles per partition as TARGET.md's cost table counts
        N (default: one per element of the destination's free pattern), for `engine_work`."""
        if engine in self.engine_work:
            self.engine_work[engine] += self.busy_ns(
                engine, cycles if cycles is not None else math.prod(operands[0][1][4::2]))
        attributes = {
            "engine": U.string(engine),
            "aps": _aps_attribute(tuple([tuple(ap) for _, ap in operands])),
            **attrs,
        }
        if segments is not None:
            attributes["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get(segments)
        return U.create(name, [], [v for v, _ in operands], attributes)

    def dma(self, dst: ir.Value, dst_ap: list[int], src: ir.Value, src_ap: list[int]) -> None:
        """One transfer; a large one is split by partitions into pieces of at least
        `_DMA_PIECE_BYTES` on different queues, whose bandwidths then add up."""
        store = _memory(dst) == "hbm"
        onchip = (src, src_ap) if store else (dst, dst_ap)
        parts = dst_ap[2]
        pieces = 1
        if parts == src_ap[2] and parts > 1:
            pieces = min(parts, self.target.dma_queues,
                         max(1, _nbytes(*onchip) // _DMA_PIECE_BYTES))
        per = -(-parts // pieces)
        for p0 in range(0, parts, per):
            count = min(per, parts - p0)
            d = [dst_ap[0] + p0 * dst_ap[1], dst_ap[1], count] + dst_ap[3:]
            s_ = [src_ap[0] + p0 * src_ap[1], src_ap[1], count] + src_ap[3:]
            hbm_side = d if store else s_ if _memory(src) == "hbm" else None
            queue = self._next_queue(*((src, s_) if store else (dst, d)), store, hbm_side)
            self._instr("nisa.dma", "dma", [(dst, d), (src, s_)], queue=U.i64(queue))

    def dma_indirect(self, dst: ir.Value, dst_ap: list[int], src: ir.Value, src_ap: list[int],
                     index: Tile) -> None:
        """A row gather (src in HBM) or scatter (dst in HBM): partition p of the HBM side is
        the row index[p] (times the access pattern's partition stride)."""
        self._instr("nisa.dma_indirect", "dma",
                    [(dst, dst_ap), (src, src_ap), (index.buffer, index.ap())],
                    queue=U.i64(self._next_queue(*((src, src_ap, True) if _memory(dst) == "hbm"
                                                   else (dst, dst_ap, False)))))

    def load(self, tile: Tile, view: HbmView, partition_dim: int | None,
             free_dims: list[int]) -> None:
        """DMA `view` (already sliced to the tile) into `tile`, partition dim first."""
        src_ap = view.access_pattern(partition_dim, free_dims)
        self.dma(tile.buffer, tile.ap(), view.buffer, src_ap)

    def store(self, view: HbmView, partition_dim: int | None, free_dims: list[int],
              tile: Tile) -> None:
        dst_ap = view.access_pattern(partition_dim, free_dims)
        self.dma(view.buffer, dst_ap, tile.buffer, tile.ap())

    def matmul(self, dst: Tile, stationary: Tile, moving: Tile, accumulate: bool) -> None:
        self._instr("nisa.matmul", "pe",
                    [(dst.buffer, dst.ap()), (stationary.buffer, stationary.ap()),
                     (moving.buffer, moving.ap())],
                    accumulate=U.bool_attr(accumulate))

    def transpose(self, dst: Tile, src: Tile) -> None:
        self._instr("nisa.transpose", "pe", [(dst.buffer, dst.ap()), (src.buffer, src.ap())])

    def activation(self, dst: Tile, src: Tile, func: str, scale: float | Tile = 1.0,
                   bias: Tile | None = None, accum: Tile | None = None) -> None:
        """dst = func(src * scale + bias) (scale an immediate or, like bias, a per-partition
        [P, 1] tile); with `accum`, also the fp32 sum of each partition's results into the
        [P, 1] tile `accum`."""
        scale_tile = scale if isinstance(scale, Tile) else None
        operands = [(dst.buffer, dst.ap()), (src.buffer, src.ap())]
        for extra in (bias, scale_tile, accum):
            if extra is not None:
                operands.append((extra.buffer, extra.ap()))
        self._instr("nisa.activation", "act", operands,
                    cycles=dst.free + (self.target.min_ii if accum is not None else 0),
                    segments=[1, 1, int(bias is not None), int(scale_tile is not None),
                              int(accum is not None)],
                    func=U.string(func),
                    scale=U.f32(1.0 if scale_tile is not None else scale))

    def tensor_tensor(self, dst: Tile, lhs: Tile, rhs: Tile, op: str,
                      engine: str | None = None) -> None:
        """On `engine`, or DVE -- or POOL where every operand is in SBUF and POOL would finish
        it first. An update in place (dst = dst op x, a chain such as a pooling window's max
        or a convolution's accumulation) stays on DVE: each link handed between engines
        would wait on a semaphore for the one before."""
        cycles = tensor_tensor_cycles(dst, lhs, rhs, op)
        if engine is None:
            in_place = dst.buffer in (lhs.buffer, rhs.buffer)
            engine = self.sooner_engine({"dve": cycles, "pool": cycles}) \
                if self.pool_sharing and _in_sbuf(dst, lhs, rhs) and not in_place else "dve"
        self._instr("nisa.tensor_tensor", engine,
                    [(dst.buffer, dst.ap()), (lhs.buffer, lhs.ap()), (rhs.buffer, rhs.ap())],
                    cycles=cycles, op=U.string(op))

    def tensor_scalar(self, dst: Tile, src: Tile, op0: str,
                      operand0: float | Tile | TilePattern, reverse0: bool = False,
                      op1: str = "bypass", operand1: float | Tile | TilePattern = 0.0,
                      reverse1: bool = False, engine: str = "dve") -> None:
        operands = [(dst.buffer, dst.ap()), (src.buffer, src.ap())]
        segments = [1, 1, 0, 0]
        imms = []
        for i, operand in enumerate((operand0, operand1)):
            if isinstance(operand, (Tile, TilePattern)):   # a per-partition scalar column
                operands.append((operand.buffer, operand.ap()))
                segments[2 + i] = 1
                imms.append(0.0)
            else:
                imms.append(float(operand))
        self._instr("nisa.tensor_scalar", engine, operands, segments=segments,
                    op0=U.string(op0), imm0=U.f32(imms[0]), op1=U.string(op1),
                    imm1=U.f32(imms[1]), reverse0=U.bool_attr(reverse0),
                    reverse1=U.bool_attr(reverse1))

    def tensor_scalar_reduce(self, dst: Tile, src: Tile, op0: str, operand0: float | Tile,
                             reduce_op: str, reduced: Tile, negate: bool = False,
                             reverse0: bool = False) -> None:
        """DVE: dst = src <op0> operand0 and `reduced` [P, 1] = the `reduce_op` reduction of
        what dst receives (negated with `negate`), in one pass."""
        operands = [(dst.buffer, dst.ap()), (src.buffer, src.ap()),
                    (reduced.buffer, reduced.ap())]
        imm = 0.0
        if isinstance(operand0, Tile):
            operands.append((operand0.buffer, operand0.ap()))
        else:
            imm = float(operand0)
        self._instr("nisa.tensor_scalar_reduce", "dve", operands,
                    segments=[1, 1, 1, int(isinstance(operand0, Tile))],
                    cycles=dst.free + self.target.min_ii,
                    op0=U.string(op0), imm0=U.f32(imm), reverse0=U.bool_attr(reverse0),
                    reduce_op=U.string(reduce_op), negate=U.bool_attr(negate))

    def copy(self, dst: Tile, src: Tile, engine: str | None = None) -> None:
        """Copy (with dtype conversion), on `engine` or whichever of DVE and ACT (and POOL,
        from SBUF to SBUF) would finish it first."""
        if engine is None:
            engines = ("dve", "act", "pool") if self.pool_sharing and _in_sbuf(dst, src) \
                else ("dve", "act")
            engine = self.sooner_engine(dict.fromkeys(engines, dst.free))
        self._instr("nisa.tensor_copy", engine, [(dst.buffer, dst.ap()), (src.buffer, src.ap())])

    def in_sbuf(self, tile: Tile, element_type: ir.Type) -> Tile:
        """`tile` where it is an SBUF tile of `element_type` (what DMA stores and PE operands
        read), else a copy of it into a new one (out of PSUM, converted)."""
        if tile.memory == "sbuf" and tile.element_type == element_type:
            return tile
        staged = self.alloc("sbuf", tile.partitions, tile.free, element_type)
        self.copy(staged, tile)
        return staged

    def memset(self, dst: Tile, value: float, engine: str = "pool") -> None:
        self._instr("nisa.memset", engine, [(dst.buffer, dst.ap())], value=U.f32(value))

    def iota(self, dst: Tile, base: float, partition_step: float, free_step: float) -> None:
        """dst[p, i] = base + partition_step * p + free_step * i (on POOL)."""
        self._instr("nisa.iota", "pool", [(dst.buffer, dst.ap())], base=U.f32(base),
                    partition_step=U.f32(partition_step), free_step=U.f32(free_step))

    def tensor_reduce(self, dst: Tile, src: Tile, op: str, engine: str = "dve") -> None:
        """dst[p, 0] = reduction of src[p, :] with `op`."""
        halved = op in ("add", "max") and str(src.element_type) == "bf16"
        self._instr("nisa.tensor_reduce", engine, [(dst.buffer, dst.ap()), (src.buffer, src.ap())],
                    cycles=src.free / 2 if halved else src.free,
                    op=U.string(op), reduce_dims=U.i64(1))

    def select(self, dst: Tile, mask: Tile, on_true: Tile, on_false: Tile) -> None:
        self._instr("nisa.select", "dve",
                    [(dst.buffer, dst.ap()), (mask.buffer, mask.ap()),
                     (on_true.buffer, on_true.ap()), (on_false.buffer, on_false.ap())])


# A DMA larger than this is split over several queues (the ~1.3 us fixed latency is paid per
# piece, but overlaps; a queue moves ~23 B/ns, so 32 KiB takes about as long as the latency).
_DMA_PIECE_BYTES = 32 * 1024


def _nbytes(buffer: ir.Value, ap: list[int]) -> int:
    elements = 1
    for size in ap[2::2]:
        elements *= size
    info = memref_info(buffer.type)
    if not info.itemsize:
        raise ValueError(f"no storage size for element type {info.element}")
    return elements * info.itemsize


def _memory(buffer: ir.Value) -> str:
    return memref_info(buffer.type).memory


def _aps_attribute(aps: tuple[tuple[int, ...], ...]) -> ir.ArrayAttr:
    """An instruction's `aps` attribute (remembered per value within a memref_info_cache
    block: kernels emit the same few pattern lists thousands of times, and building one
    through the bindings took half of an instruction's emission; convert-trn-to-nisa
    0.89x on mlp_fwd's and GPT-2's dumped graphs)."""
    table = memo("emitter.aps")
    found = table.get(aps) if table is not None else None
    if found is None:
        found = ir.ArrayAttr.get([U.i64_array(ap) for ap in aps])
        if table is not None:
            table[aps] = found
    return found
