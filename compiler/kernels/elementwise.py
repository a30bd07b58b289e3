"""Tiled lowering of elementwise kernels: DMA tiles in, compute on ACT/DVE/POOL, DMA out."""

from __future__ import annotations

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

# Smallest free extent (elements) worth spreading a 1-D tensor over partitions for.
_MIN_FREE_PER_PARTITION = 32


def lower_elementwise(em: Emitter, compute: list[ir.Operation], views: dict,
                      outputs: list[tuple[ir.Value, HbmView]], free_tile: int) -> None:
    """`compute`: elementwise trn ops (one iteration shape); `views`: HbmView of every value
    they read from HBM; `outputs`: (value, destination view) pairs."""
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
    merged = [v.relaid(v.offset, shape2, s) for v, s in zip(all_views, strides)]
    leaf_views = dict(zip(leaves, merged[:len(leaves)]))
    out_views = [(v, view) for (v, _), view in zip(outputs, merged[len(leaves):])]

    parts, free = shape2[-2], shape2[-1]
    tp = min(parts, em.target.num_partitions)
    tf = min(free, free_tile)
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

    for outer in itertools.product(*(range(n) for n in shape2[:-2])):
        def at(view: HbmView, p0: int, pn: int, f0: int, fn: int) -> HbmView:
            for index in outer:
                view = view.select(0, index)
            return view.slice(0, p0, pn).slice(1, f0, fn)

        for p0 in range(0, parts, tp):
            pn = min(tp, parts - p0)
            for f0 in range(0, free, tf):
                fn = min(tf, free - f0)
                tiles: dict[ir.Value, Tile] = {}
                for v, view in leaf_views.items():
                    tiles[v] = load_leaf(em, at(view, p0, pn, f0, fn),
                                         computed_on=v not in stored)
                for op in compute:
                    result = op.results[0]
                    if result in aliases:
                        tiles[result] = tiles[aliases[result]]
                        continue
                    dst = em.alloc("sbuf", pn, fn,
                                   storage.get(result, U.element_type(result)))
                    emit_elementwise(em, op, [tiles[v] for v in op.operands], dst, consts,
                                     share=True)
                    tiles[result] = dst
                for v, view in out_views:
                    em.store(at(view, p0, pn, f0, fn), 0, [1], tiles[v])


def load_leaf(em: Emitter, view: HbmView, computed_on: bool = False) -> Tile:
    """A view [P, free dims...] into a new SBUF tile [P, F]: by DMA, or generated on chip
    (MEMSET for a constant, IOTA for a loop index) when the view has no storage.

    A view broadcast along its innermost free dim is spread on chip from its distinct
    elements (`_load_spread`) where an engine's copy is exact: floats, and integers of up to
    16 bits; wider integers too when `computed_on` (the tile is only read by ACT/DVE ops,
    which read it through fp32 anyway, so a copy through fp32 changes nothing they see)."""
    parts, free = view.shape[0], math.prod(view.shape[1:])
    etype = view.element_type
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

