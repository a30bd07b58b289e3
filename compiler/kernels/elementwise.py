"""Tiled lowering of elementwise kernels: DMA tiles in, compute on ACT/DVE/POOL, DMA out."""

from __future__ import annotations

import dataclasses
import itertools
import math

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.kernels.emitter import Emitter, Tile
from torchneuron.compiler.kernels.tile_ops import (
    ConstantVectors, emit_elementwise, rounding_writes, widening_aliases,
)
from torchneuron.compiler.kernels.views import HbmView
from torchneuron.cost_model import strided_runs

# Smallest free extent (elements) worth spreading a 1-D tensor over partitions for.
_MIN_FREE_PER_PARTITION = 32


def lower_elementwise(em: Emitter, compute: list[ir.Operation], views: dict,
                      outputs: list[tuple[ir.Value, HbmView]], free_tile: int) -> None:
    """`compute`: elementwise trn ops (one iteration shape); `views`: HbmView of every value
    they read from HBM; `outputs`: (value, destination view) pairs. With the emitter's
    `regroup_copies`, a plain copy between layouts may be reordered on chip
    (`_lower_regrouped_copy`)."""
    shape = tuple(outputs[0][1].shape)
    for op in compute:
        if tuple(U.shape(op.results[0])) != shape:
            raise CompileError(f"elementwise kernel mixes shapes {list(shape)} and "
                               f"{U.shape(op.results[0])}", op.location)
    leaves: list[ir.Value] = []
    for op in compute:
        for v in op.operands:
            if v in views and v not in leaves:
                leaves.append(v)
    for v, _ in outputs:
        if v in views and v not in leaves:
            leaves.append(v)
    all_views = [views[v] for v in leaves] + [view for _, view in outputs]
    for view in all_views:
        if tuple(view.shape) != shape:
            raise CompileError(f"elementwise kernel operand of shape {list(view.shape)} in an "
                               f"iteration space of shape {list(shape)}")

    shape2, strides = _tiling_layout(shape, [v.strides for v in all_views])
    if em.regroup_copies and not compute and len(leaves) == 1 and len(outputs) == 1 and \
            _lower_regrouped_copy(em, all_views[0], all_views[1], shape2, strides, free_tile):
        return
    free_rank = 1
    if all(v.buffer is not None for v in all_views):
        permuted = _permuted_layout(shape2, strides, [U.element_bytes(v.element_type)
                                                      for v in all_views], free_tile, em.target)
        if permuted is not None:
            shape2, strides, free_rank = permuted
    merged = [v.relaid(v.offset, shape2, s) for v, s in zip(all_views, strides)]
    leaf_views = dict(zip(leaves, merged[:len(leaves)]))
    out_views = [(v, view) for (v, _), view in zip(outputs, merged[len(leaves):])]

    loops = shape2[:-1 - free_rank]
    parts, free = shape2[-1 - free_rank], math.prod(shape2[-free_rank:])
    tp = min(parts, em.target.num_partitions)
    tf = min(free, free_tile)       # several free dims: whole (_permuted_layout keeps free <= tile)
    free_dims = list(range(1, free_rank + 1))
    consts = ConstantVectors(em)
    storage, aliases = rounding_writes(compute, {v for v, _ in outputs})
    aliases.update(widening_aliases(compute, {v for v, _ in outputs}))
    # Leaves stored as they are loaded, or standing in for a value that is (an alias).
    stored = set()
    for v, _ in outputs:
        stored.add(v)
        while v in aliases:
            v = aliases[v]
            stored.add(v)

    for outer in itertools.product(*(range(n) for n in loops)):
        def at(view: HbmView, p0: int, pn: int, f0: int, fn: int) -> HbmView:
            for index in outer:
                view = view.select(0, index)
            view = view.slice(0, p0, pn)
            return view.slice(1, f0, fn) if free_rank == 1 else view

        for p0 in range(0, parts, tp):
            pn = min(tp, parts - p0)
            for f0 in range(0, free, tf):
                fn = min(tf, free - f0)
                tiles: dict[ir.Value, Tile] = {}
                for v, view in leaf_views.items():
                    tiles[v] = load_leaf(em, at(view, p0, pn, f0, fn),
                                         computed_on=v not in stored, column=v not in stored)
                for op in compute:
                    result = op.results[0]
                    if result in aliases:
                        tiles[result] = tiles[aliases[result]]
                        continue
                    dst = em.alloc("sbuf", pn, fn,
                                   storage.get(result, U.element_type(result)))
                    emit_with_columns(em, op, [tiles[v] for v in op.operands], dst, consts,
                                      share=True)
                    tiles[result] = dst
                for v, view in out_views:
                    em.store(at(view, p0, pn, f0, fn), 0, free_dims, tiles[v])


def load_leaf(em: Emitter, view: HbmView, computed_on: bool = False,
              column: bool = False) -> Tile:
    """A view [P, free dims...] into a new SBUF tile [P, F]: by DMA, or generated on chip
    (MEMSET for a constant, IOTA for a loop index) when the view has no storage.

    A view broadcast along its innermost free dim is spread on chip from its distinct
    elements (`_load_spread`) where an engine's copy is exact: floats, and integers of up to
    16 bits; wider integers too when `computed_on` (the tile is only read by ACT/DVE ops,
    which read it through fp32 anyway, so a copy through fp32 changes nothing they see).
    With `column`, a float view broadcast along every free dim (one value per partition: a
    row's mean beside the row) is returned as that [P, 1] column, not spread: the ops
    reading it take it per partition (`emit_with_columns`)."""
    parts, free = view.shape[0], math.prod(view.shape[1:])
    etype = view.element_type
    if column and free > 1 and view.buffer is not None and isinstance(etype, ir.FloatType) \
            and all(s == 0 for s in view.strides[1:]):
        compact = view
        for dim in range(1, view.rank):
            compact = compact.slice(dim, 0, 1)
        return load_leaf(em, compact)
    exact_copy = computed_on or not isinstance(etype, ir.IntegerType) or etype.width <= 16
    if view.buffer is not None and view.rank >= 2 and view.strides[-1] == 0 and \
            view.shape[-1] > 1 and exact_copy:
        return _load_spread(em, view)
    tile = em.alloc("sbuf", parts, free, view.element_type)
    if view.buffer is not None and view.rank == 2 and transposed_access(view):
        load_transposed(em, tile, view)
    elif view.buffer is not None:
        em.load(tile, view, 0, list(range(1, view.rank)))
    elif view.fill is not None:
        em.memset(tile, view.fill)
    else:
        # A loop index is affine along the flattened run of the innermost free dims whose
        # strides nest; one IOTA per position of the free dims outside that run.
        inner = [(s, n) for s, n in zip(view.strides[1:], view.shape[1:]) if n > 1]
        split = len(inner) - 1 if inner else 0
        while split > 0 and inner[split - 1][0] == inner[split][0] * inner[split][1]:
            split -= 1
        outer, run = inner[:split], inner[split:]
        width = math.prod(n for _, n in run)
        step = run[-1][0] if run else 0
        for k, position in enumerate(itertools.product(*(range(n) for _, n in outer))):
            base = view.offset + sum(i * s for i, (s, _) in zip(position, outer))
            em.iota(tile.columns(k * width, width), base, view.strides[0], step)
    return tile


# tensor_tensor ALU ops a tensor_scalar computes the same way with one operand per partition.
_PER_PARTITION_ALUS = ("add", "sub", "mul", "div", "max", "min")


def emit_with_columns(em: Emitter, op: ir.Operation, operands: list[Tile], dst: Tile,
                      consts: ConstantVectors, share: bool = False) -> None:
    """`emit_elementwise` where an operand may be a [P, 1] column (`load_leaf(column=True)`)
    of a tile that is one value per partition: a tensor_tensor between such a column and a
    full tile is a tensor_scalar with the column as its per-partition operand (one pass at
    one cycle per element, where the full tensor_tensor took a spread copy and, in fp32, two
    cycles per element; the same fp32 arithmetic). Any other op reads the column spread over
    the tile."""
    columns = [t.free == 1 and dst.free > 1 for t in operands]
    if op.name == "trn.tensor_tensor" and sum(columns) == 1 and \
            U.str_attr(op, "op") in _PER_PARTITION_ALUS:
        index = columns.index(True)
        em.tensor_scalar(dst, operands[1 - index], U.str_attr(op, "op"),
                         em.in_sbuf(operands[index], ir.F32Type.get()), reverse0=index == 0)
        return
    operands = [spread_column(em, t, dst.free) if is_column else t
                for t, is_column in zip(operands, columns)]
    emit_elementwise(em, op, operands, dst, consts, share=share)


def spread_column(em: Emitter, column: Tile, width: int) -> Tile:
    """A [P, 1] column copied across a [P, width] tile (a stride-0 read)."""
    tile = em.alloc("sbuf", column.partitions, width, column.element_type)
    em.copy(tile, column.pattern(0, [(0, width)]))
    return tile


def _load_spread(em: Emitter, view: HbmView) -> Tile:
    """A view broadcast along its innermost free dim (stride 0: a DMA would move one element
    per descriptor, each paying the per-run overhead): its distinct elements are loaded
    compactly and copied across the tile on chip with stride-0 reads."""
    compact = view
    for dim in range(1, view.rank):
        if view.strides[dim] == 0:
            compact = compact.slice(dim, 0, 1)
    parts = view.shape[0]
    distinct = load_leaf(em, compact)
    dims, stride = [], 1
    for dim in reversed(range(1, view.rank)):
        dims.append((0 if view.strides[dim] == 0 else stride, view.shape[dim]))
        if view.strides[dim] != 0:
            stride *= view.shape[dim]
    tile = em.alloc("sbuf", parts, math.prod(view.shape[1:]), view.element_type)
    em.copy(tile, distinct.pattern(0, dims[::-1]))
    return tile


def transposed_access(view: HbmView) -> bool:
    """A 2-D view [P, F] whose DMA would move one element per descriptor (partition stride 1,
    free stride > 1), i.e. that should be transposed on PE instead."""
    return (view.shape[0] > 1 and view.shape[1] > 1 and view.strides[0] == 1
            and view.strides[1] != 1)


def load_transposed(em: Emitter, tile: Tile, view: HbmView) -> None:
    """Fill `tile` [P, F] from a transposed-access view: its [<=128, P] row blocks (contiguous
    along P) are loaded by DMA and turned around on PE, then copied (casting) into place."""
    parts, free = view.shape
    step = em.target.pe_rows
    for c0 in range(0, free, step):
        cn = min(step, free - c0)
        rows = em.alloc("sbuf", cn, parts, view.element_type)
        em.load(rows, view.slice(1, c0, cn).transpose([1, 0]), 0, [1])
        psum = em.alloc("psum", parts, cn, ir.F32Type.get())
        em.transpose(psum, rows)
        em.copy(tile.columns(c0, cn), psum)


def _tiling_layout(shape: tuple[int, ...], strides: list[tuple[int, ...]]):
    """Drop unit dims, merge adjacent dims that are contiguous in every view, then shape the
    space as [outer loops..., partitions, free]."""
    keep = [i for i, n in enumerate(shape) if n != 1]
    dims = [shape[i] for i in keep]
    sts = [[s[i] for i in keep] for s in strides]
    i = len(dims) - 2
    while i >= 0:
        if all(s[i] == s[i + 1] * dims[i + 1] for s in sts):
            dims[i + 1] *= dims[i]     # the merged dim keeps the inner stride
            del dims[i]
            for s in sts:
                del s[i]
        i -= 1
    if not dims:
        dims, sts = [1], [[1] for _ in sts]
    if len(dims) == 1:
        n = dims[0]
        parts = _partition_split(n)
        dims = [parts, n // parts]
        sts = [[s[0] * (n // parts), s[0]] for s in sts]
    elif dims[-2] < 128:
        # Few rows (a broadcast operand kept e.g. 12 heads from merging with the rest): the
        # innermost extent, split over partitions, keeps more lanes busy; the rows loop.
        n = dims[-1]
        parts = _partition_split(n)
        if parts > dims[-2]:
            dims = dims[:-1] + [parts, n // parts]
            sts = [s[:-1] + [s[-1] * (n // parts), s[-1]] for s in sts]
    return tuple(dims), [tuple(s) for s in sts]


# Free dims a permuted tiling may walk in one DMA (the ISA allows MAX_FREE_DIMS = 4).
_MAX_TILE_FREE_DIMS = 3


def _layout_dma_bytes(dims, strides, itemsizes, part: int, free: list[int], target) -> int:
    """What the DMAs of all views cost, in bytes plus each contiguous run's overhead
    (cost_model.dma_transfer_ns's formula), when tiles take `part` on partitions and the
    `free` dims (whole) along the free axis; the other dims loop. A descriptor pays for the
    larger run count of its two sides, and the SBUF side is one run per partition at least."""
    tp = min(dims[part], target.num_partitions)
    tiles = math.prod(n for i, n in enumerate(dims) if i != part and i not in free) * \
        math.ceil(dims[part] / tp)
    sizes = (tp, *(dims[i] for i in free))
    runs = sum(max(tp, strided_runs(sizes, (s[part], *(s[i] for i in free))))
               for s in strides)
    return math.prod(dims) * sum(itemsizes) + runs * tiles * target.dma_chunk_overhead_bytes


def _permuted_layout(dims: tuple[int, ...], strides: list[tuple[int, ...]], itemsizes: list[int],
                     free_tile: int, target):
    """A better tiling of a permuting elementwise space (a transpose copy such as heads split
    out of a projection), or None to keep [loops..., partitions, free].

    The default takes the innermost dim as the free axis, so when views disagree on which dim
    is contiguous each DMA moves a few short rows (12 heads x 64 elements: 128 B a run, 12
    partitions). Elementwise work is indifferent to iteration order, so any dim may go on
    partitions and several inner dims (whole, at most free_tile elements) along the free axis;
    the cheapest choice by the DMA cost formula wins if it saves at least a fifth. Returns
    (dims, strides, free_rank) with the dims reordered as [loops..., partition, free...]."""
    k = len(dims)
    if k < 3 or any(0 in s for s in strides):
        return None
    base = _layout_dma_bytes(dims, strides, itemsizes, k - 2, [k - 1], target)
    best = None
    for part in range(k):
        if dims[part] < 2:
            continue
        tp = min(dims[part], target.num_partitions)
        free: list[int] = []
        size = 1
        for i in reversed(range(k)):
            if i == part:
                continue
            if size * dims[i] > free_tile or len(free) == _MAX_TILE_FREE_DIMS:
                break
            free.insert(0, i)
            size *= dims[i]
            if part == k - 2 and free == [k - 1]:
                continue            # the default layout
            cost = _layout_dma_bytes(dims, strides, itemsizes, part, free, target)
            if 5 * cost > 4 * base:
                continue
            # At equal cost: more partitions (compute lanes), then the smaller tile, so that
            # there are tiles enough for loads, compute and stores to overlap.
            key = (cost, -tp, size)
            if best is None or key < best[0]:
                best = (key, part, list(free))
    if best is None:
        return None
    _, part, free = best
    order = [i for i in range(k) if i != part and i not in free] + [part] + free
    return (tuple(dims[i] for i in order), [tuple(s[i] for i in order) for s in strides],
            len(free))


# Consecutive elements of the partition dim a regrouped copy may give each partition.
_COPY_GROUPS = (1, 2, 4, 8)


@dataclasses.dataclass(frozen=True)
class _CopyPlan:
    """How `_lower_regrouped_copy` tiles a copy over merged dims [d0, d1, ...]: dim `part` on
    partitions, `group` consecutive elements of it to each partition (pseudo-dim GROUP of the
    orders below), the dims `free` whole along the free axis, the rest looped over. A tile is
    loaded with its free axis in `load_order` and stored in `store_order` (each the order of
    that side's strides, so that its runs are as long as they can be), and copied on chip
    from the one to the other where they differ."""
    part: int
    group: int
    partitions: int
    free: tuple[int, ...]
    load_order: tuple[int, ...]
    store_order: tuple[int, ...]


def _regrouped_copy_plan(dims: tuple[int, ...], strides: list[tuple[int, ...]], itemsize: int,
                         free_tile: int, em: Emitter) -> _CopyPlan | None:
    """The cheapest regrouped tiling of a copy from a view with strides `strides[0]` to one
    with `strides[1]`, or None where it does not save a fifth of what the tilings with one
    layout for both sides cost (`_layout_dma_bytes`, `_permuted_layout`).

    With one layout, a copy between views that disagree on which dim is contiguous (a
    head-to-token permutation: [qkv, batch, head, seq, d] read as [batch, seq, qkv, head, d])
    moves runs as short as the innermost dim they share (64 elements: 128 B runs, each paying
    the DMA's per-run overhead, four times their bytes). Loaded in the source's order and
    stored in the destination's, with `group` consecutive elements of the partition dim per
    partition, both sides move longer runs; the reorder between them costs a copy on an
    engine, counted here at the bytes the DMA queues move in that time, shared by the
    engines that may take it."""
    target = em.target
    k = len(dims)
    src, dst = strides
    # (Both sides contiguous along the innermost dim: one whose source is strided there is a
    # transpose, which load_leaf turns around on PE.)
    if k < 2 or any(st <= 0 for s in strides for st in s) or src[-1] != 1 or dst[-1] != 1:
        return None
    group_dim = k        # the pseudo-dim of the group (see _grouped_dims)
    base = _layout_dma_bytes(dims, strides, [itemsize] * 2, k - 2, [k - 1], target)
    permuted = _permuted_layout(dims, strides, [itemsize] * 2, free_tile, target)
    if permuted is not None:
        pdims, pstrides, free_rank = permuted
        base = min(base, _layout_dma_bytes(pdims, pstrides, [itemsize] * 2, k - 1 - free_rank,
                                           list(range(k - free_rank, k)), target))
    engines = 3 if em.pool_sharing else 2
    queue_bytes_per_ns = target.dma_queues * target.dma_queue_bytes_per_ns
    total_bytes = 2 * math.prod(dims) * itemsize
    best = None
    for part in range(k):
        others = [i for i in range(k) if i != part]
        for group in _COPY_GROUPS:
            if dims[part] % group:
                continue
            rows = dims[part] // group
            tp = min(rows, target.num_partitions)
            # (Grouping only where every partition still takes a share: the engine's copy
            # costs per element of a partition.)
            if rows % tp or (group > 1 and rows < target.num_partitions):
                continue
            size, src_of, dst_of = _grouped_dims(dims, strides, part, group)
            for r in range(len(others) + 1):
                for free in itertools.combinations(others, r):
                    axis = list(free) + ([group_dim] if group > 1 else [])
                    width = math.prod(size[d] for d in axis)
                    if not axis or width > free_tile or len(axis) > _MAX_TILE_FREE_DIMS:
                        continue
                    load = tuple(sorted(axis, key=lambda d: -src_of[d]))
                    store = tuple(sorted(axis, key=lambda d: -dst_of[d]))
                    tiles = math.prod(dims) // (tp * width)

                    def runs(of, order):
                        return max(tp, strided_runs((tp, *(size[d] for d in order)),
                                                    (group * of[part], *(of[d] for d in order))))
                    cost = total_bytes + tiles * target.dma_chunk_overhead_bytes * (
                        runs(src_of, load) + runs(dst_of, store))
                    if load != store:
                        cost += tiles * em.busy_ns("dve", width) / engines * queue_bytes_per_ns
                    key = (cost, -tp, width)
                    if best is None or key < best[0]:
                        best = (key, _CopyPlan(part, group, tp, free, load, store))
    if best is None or 5 * best[0][0] > 4 * base:
        return None
    return best[1]


def _grouped_dims(dims: tuple[int, ...], strides: list[tuple[int, ...]], part: int,
                  group: int) -> tuple[dict, dict, dict]:
    """Size, source stride and destination stride of each dim of a regrouped copy, with the
    group (the consecutive elements of dim `part` a partition takes) as pseudo-dim
    len(dims)."""
    k = len(dims)
    size = {**dict(enumerate(dims)), k: group}
    src_of = {**dict(enumerate(strides[0])), k: strides[0][part]}
    dst_of = {**dict(enumerate(strides[1])), k: strides[1][part]}
    return size, src_of, dst_of


def _lower_regrouped_copy(em: Emitter, src: HbmView, dst: HbmView, dims: tuple[int, ...],
                          strides: list[tuple[int, ...]], free_tile: int) -> bool:
    """Copy `src` to `dst` (the same element type; merged to `dims` with `strides`) by the
    tiling `_regrouped_copy_plan` finds, if it finds one; False where it does not (or where an
    engine's copy, through fp32, would not be exact: integers wider than 16 bits)."""
    etype = src.element_type
    if src.buffer is None or dst.buffer is None or etype != dst.element_type or \
            (isinstance(etype, ir.IntegerType) and etype.width > 16):
        return False
    plan = _regrouped_copy_plan(dims, strides, U.element_bytes(etype), free_tile, em)
    if plan is None:
        return False
    k, part, group, tp = len(dims), plan.part, plan.group, plan.partitions
    size, src_of, dst_of = _grouped_dims(dims, strides, part, group)
    # Element strides of the loaded tile's free axis (row-major in load order).
    in_tile, stride = {}, 1
    for d in reversed(plan.load_order):
        in_tile[d] = stride
        stride *= size[d]
    width = stride
    loops = [i for i in range(k) if i != part and i not in plan.free]
    chunk = tp * group
    for outer in itertools.product(*(range(dims[i]) for i in loops),
                                   range(dims[part] // chunk)):
        *index, c = outer
        src_offset = src.offset + sum(i * strides[0][d] for i, d in zip(index, loops)) + \
            c * chunk * strides[0][part]
        dst_offset = dst.offset + sum(i * strides[1][d] for i, d in zip(index, loops)) + \
            c * chunk * strides[1][part]
        tile = em.alloc("sbuf", tp, width, etype)
        em.load(tile, src.relaid(src_offset, (tp, *(size[d] for d in plan.load_order)),
                                 (group * strides[0][part],
                                  *(src_of[d] for d in plan.load_order))),
                0, list(range(1, len(plan.load_order) + 1)))
        if plan.store_order != plan.load_order:
            reordered = em.alloc("sbuf", tp, width, etype)
            em.copy(reordered, tile.pattern(0, [(in_tile[d], size[d])
                                                for d in plan.store_order]))
            tile = reordered
        em.store(dst.relaid(dst_offset, (tp, *(size[d] for d in plan.store_order)),
                            (group * strides[1][part], *(dst_of[d] for d in plan.store_order))),
                 0, list(range(1, len(plan.store_order) + 1)), tile)
    return True


def _partition_split(n: int) -> int:
    """How many partitions to spread a 1-D extent of n over: the largest divisor of n that
    is at most 128 and leaves at least a useful run per partition (else 1)."""
    for p in range(min(128, n), 1, -1):
        if n % p == 0 and n // p >= _MIN_FREE_PER_PARTITION:
            return p
    return 1


def choose_free_tile(num_buffers: int, itemsize: int, sbuf_partition_bytes: int) -> int:
    """Free elements per tile so that about three iterations' buffers fit in a third of SBUF
    (leaving room for prefetch), capped to keep instruction counts sane."""
    budget = sbuf_partition_bytes // 3
    per_iteration = max(1, num_buffers) * itemsize * 3
    size = min(8192, budget // per_iteration)
    granule = 512 if size >= 512 else 64      # whole 2 KiB fp32 DMA runs where possible
    return max(granule, size // granule * granule)

