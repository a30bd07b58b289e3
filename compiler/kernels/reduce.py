"""Tiled lowering of reduction kernels: [elementwise ops ->] trn.reduce [-> elementwise ops].

Layout: one kept (not reduced) dim goes on partitions, the reduced dims on the free axis, the
other kept dims become loops. Each tile [P, chunk of the reduced elements] is loaded (and the
producing elementwise ops run on it), reduced along the free axis on DVE into a per-partition
partial, and the partials of successive chunks are combined. The ops after the reduction run
on the [P, 1] results before they are stored.

A reduction over every dim first reduces per partition (the largest reduced dim on
partitions), then across partitions: the [P, 1] partials are transposed on PE to [1, P] and
reduced once more.

A sum over the leading dims of a tensor whose trailing (kept) dims are contiguous -- a bias
gradient, a mean over the batch -- would put the reduced elements on the free axis one
element per DMA descriptor. Instead its natural row tiles [128 rows, 512 columns] are summed
across partitions on PE: a matmul of a ones column (stationary [rows, 1]) with the tile
accumulates the column sums into one PSUM row over all row tiles.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.kernels.elementwise import emit_with_columns, load_leaf
from torchneuron.compiler.kernels.emitter import Emitter, Tile
from torchneuron.compiler.kernels.tile_ops import ConstantVectors, emit_elementwise
from torchneuron.compiler.kernels.views import HbmView
from torchneuron.dialects.nisa import MAX_FREE_DIMS


def lower_reduce(em: Emitter, pre: list[ir.Operation], reduce: ir.Operation,
                 post: list[ir.Operation], views: dict, output: tuple[ir.Value, HbmView],
                 free_tile: int) -> None:
    shape = tuple(U.shape(reduce.operands[0]))
    reduced = U.array_attr(reduce, "dimensions")
    kind = U.str_attr(reduce, "op")
    kept = [d for d in range(len(shape)) if d not in reduced]
    leaves = _leaves(pre, reduce.operands[0], views)
    if _leading_sum(em, pre, reduce, post, views, output, leaves):
        return

    full = not kept
    if full:
        # Spread the largest reduced dim over partitions first.
        part_dim = max(reduced, key=lambda d: shape[d])
        free_dims = [d for d in reduced if d != part_dim]
        loop_dims: list[int] = []
    else:
        part_dim = max(kept, key=lambda d: (shape[d], d))
        free_dims = list(reduced)
        loop_dims = [d for d in kept if d != part_dim]
    free_dims = _merge(free_dims, shape, [views[v].strides for v in leaves])
    if len(free_dims) > MAX_FREE_DIMS:
        raise CompileError(f"reduction over {len(free_dims)} non-contiguous dims "
                           f"(at most {MAX_FREE_DIMS})", reduce.location)
    # Free dims [looped..., chunked, whole...]: the innermost dims that fit one tile are
    # taken whole, the next is chunked, outer ones loop (accumulating).
    sizes = [math.prod(shape[d] for d in group) for group in free_dims]
    whole = len(sizes)
    inner = 1
    while whole > 0 and inner * sizes[whole - 1] <= free_tile:
        whole -= 1
        inner *= sizes[whole]
    chunked = whole - 1 if whole > 0 else None
    chunk = max(1, free_tile // inner) if chunked is not None else 1
    looped_free = free_dims[:max(chunked, 0)] if chunked is not None else []

    consts = ConstantVectors(em)
    f32 = ir.F32Type.get()
    tp = em.target.num_partitions
    parts = shape[part_dim]

    for outer in itertools.product(*(range(shape[d]) for d in loop_dims)):
        final = em.alloc("sbuf", 1, 1, f32) if full else None
        for p0 in range(0, parts, tp):
            pn = min(tp, parts - p0)
            acc = em.alloc("sbuf", pn, 1, f32)
            first = True
            for fixed in itertools.product(*(range(sizes[i]) for i in range(len(looped_free)))):
                steps = range(0, sizes[chunked], chunk) if chunked is not None else [0]
                for c0 in steps:
                    cn = min(chunk, sizes[chunked] - c0) if chunked is not None else 1
                    fn = cn * inner
                    window = _Window(shape, part_dim, p0, pn, free_dims, loop_dims, outer,
                                     fixed, chunked, c0, cn)
                    tiles = {v: load_leaf(em, window.view(views[v]),
                                          column=v != reduce.operands[0]) for v in leaves}
                    for op in pre:
                        dst = em.alloc("sbuf", pn, fn, U.element_type(op.results[0]))
                        emit_with_columns(em, op, [tiles[v] for v in op.operands], dst, consts)
                        tiles[op.results[0]] = dst
                    source = tiles[reduce.operands[0]]
                    if first:
                        em.tensor_reduce(acc, source, kind)
                        first = False
                    else:
                        partial = em.alloc("sbuf", pn, 1, f32)
                        em.tensor_reduce(partial, source, kind)
                        em.tensor_tensor(acc, acc, partial, kind)
            if full:
                _across_partitions(em, acc, final, kind, first_tile=p0 == 0)
            else:
                index = dict(zip(loop_dims, outer))
                _finish(em, post, acc, reduce.results[0], views, output, consts,
                        lambda view, p0=p0, pn=pn: _kept_view(view, kept, index, part_dim, p0,
                                                              pn), pn)
        if full:
            _finish(em, post, final, reduce.results[0], views, output, consts, _scalar_view, 1)


_PSUM_ROW = 512        # fp32 elements of one PSUM bank row: the matmul's N limit


def _leading_sum(em: Emitter, pre: list[ir.Operation], reduce: ir.Operation,
                 post: list[ir.Operation], views: dict, output: tuple[ir.Value, HbmView],
                 leaves: list[ir.Value]) -> bool:
    """Lower a float sum over the leading dims whose kept trailing dims are contiguous as
    ones-vector matmuls (see the module docstring); False when the reduction is not one."""
    shape = tuple(U.shape(reduce.operands[0]))
    reduced = sorted(U.array_attr(reduce, "dimensions"))
    source_type = U.element_type(reduce.operands[0])
    if U.str_attr(reduce, "op") != "add" or reduced != list(range(len(reduced))) or \
            len(reduced) == len(shape) or not isinstance(source_type, ir.FloatType):
        return False
    rows = math.prod(shape[:len(reduced)])
    cols = math.prod(shape[len(reduced):])
    flat = {}
    for v in leaves:
        # Contiguous rows, or a per-row value broadcast along them (layer norm's mean and
        # rstd in its weight gradient): load_leaf spreads that from one element per row.
        view = views[v].reshape((rows, cols))
        if view is None or view.buffer is None or view.strides[1] not in (0, 1):
            return False
        flat[v] = view
    out_value, out_view = output
    out_row = out_view.reshape((1, cols))
    if out_row is None:
        return False
    post_views = {}
    for op in post:
        for v in op.operands:
            if v in views and v not in post_views:
                post_views[v] = views[v].reshape((1, cols))
                if post_views[v] is None:
                    return False

    f32 = ir.F32Type.get()
    tp = em.target.num_partitions
    consts = ConstantVectors(em)
    ones_type = f32 if source_type == f32 else ir.BF16Type.get()
    ones = em.alloc("sbuf", min(tp, rows), 1, ones_type)
    em.memset(ones, 1.0)
    for c0 in range(0, cols, _PSUM_ROW):
        cn = min(_PSUM_ROW, cols - c0)
        sums = em.alloc("psum", 1, cn, f32)
        for i, p0 in enumerate(range(0, rows, tp)):
            pn = min(tp, rows - p0)
            tiles = {v: load_leaf(em, view.slice(0, p0, pn).slice(1, c0, cn),
                                  column=v != reduce.operands[0])
                     for v, view in flat.items()}
            for op in pre:
                dst = em.alloc("sbuf", pn, cn, U.element_type(op.results[0]))
                emit_with_columns(em, op, [tiles[v] for v in op.operands], dst, consts)
                tiles[op.results[0]] = dst
            source = tiles[reduce.operands[0]]
            if source.element_type != ones_type:
                cast = em.alloc("sbuf", pn, cn, ones_type)
                em.copy(cast, source)
                source = cast
            em.matmul(sums, ones.rows(pn), source, accumulate=i > 0)
        results = {reduce.results[0]: em.alloc("sbuf", 1, cn, f32)}
        em.copy(results[reduce.results[0]], sums)
        for op in post:
            operands = []
            for v in op.operands:
                if v not in results:
                    results[v] = load_leaf(em, post_views[v].slice(1, c0, cn))
                operands.append(results[v])
            dst = em.alloc("sbuf", 1, cn, U.element_type(op.results[0]))
            emit_elementwise(em, op, operands, dst, consts)
            results[op.results[0]] = dst
        tile = results[out_value]
        if tile.element_type != out_view.element_type:
            cast = em.alloc("sbuf", 1, cn, out_view.element_type)
            em.copy(cast, tile)
            tile = cast
        em.store(out_row.slice(1, c0, cn), 0, [1], tile)
    return True


def _finish(em: Emitter, post: list[ir.Operation], reduced: Tile, reduced_value: ir.Value,
            views: dict, output: tuple[ir.Value, HbmView], consts: ConstantVectors, locate,
            pn: int) -> None:
    """Run the ops after the reduction on the [pn, 1] results and store the kernel's output;
    `locate(view)` gives the [pn, 1] part of a view over the reduced shape."""
    results = {reduced_value: reduced}
    for op in post:
        operands = []
        for v in op.operands:
            if v not in results:
                results[v] = load_leaf(em, locate(views[v]))
            operands.append(results[v])
        dst = em.alloc("sbuf", pn, 1, U.element_type(op.results[0]))
        emit_elementwise(em, op, operands, dst, consts)
        results[op.results[0]] = dst
    out_value, out_view = output
    tile = results[out_value]
    if tile.element_type != out_view.element_type:
        cast = em.alloc("sbuf", pn, 1, out_view.element_type)
        em.copy(cast, tile)
        tile = cast
    em.store(locate(out_view), 0, [1], tile)


def _leaves(pre: list[ir.Operation], source: ir.Value, views: dict) -> list[ir.Value]:
    """Values a tile loads (or generates): views read by the ops before the reduction, or by
    the reduction itself."""
    leaves: list[ir.Value] = []
    for v in [v for op in pre for v in op.operands] + [source]:
        if v in views and v not in leaves:
            leaves.append(v)
    return leaves


def _merge(dims: list[int], shape, strides_list) -> list[list[int]]:
    """Group consecutive dims that are contiguous in every view (so one DMA dim covers them)."""
    groups: list[list[int]] = []
    for d in dims:
        if groups and groups[-1][-1] == d - 1 and all(
                st[d - 1] == st[d] * shape[d] for st in strides_list):
            groups[-1].append(d)
        else:
            groups.append([d])
    return groups


@dataclasses.dataclass
class _Window:
    """Which elements one tile covers: a partition range, fixed loop indices, a chunk of the
    reduced elements."""
    shape: tuple
    part_dim: int
    p0: int
    pn: int
    free_dims: list
    loop_dims: list
    outer: tuple
    fixed: tuple
    chunked: int | None
    c0: int
    cn: int

    def view(self, view: HbmView) -> HbmView:
        """The tile's part of an iteration-space view, as [partitions, free dims...]."""
        # Order the dims partition, free groups, loops; each free group becomes one dim.
        order = [self.part_dim] + [g for group in self.free_dims for g in group] + \
            list(self.loop_dims)
        view = view.transpose(order)
        index = {d: i for i, d in enumerate(order)}
        shape = [self.shape[self.part_dim]]
        strides = [view.strides[0]]
        pos = 1
        for group in self.free_dims:
            n = math.prod(self.shape[d] for d in group)
            shape.append(n)
            strides.append(view.strides[pos + len(group) - 1])
            pos += len(group)
        offset = view.offset + sum(view.strides[index[d]] * i
                                   for d, i in zip(self.loop_dims, self.outer))
        flat = view.relaid(offset, tuple(shape), tuple(strides))
        flat = flat.slice(0, self.p0, self.pn)
        for k, i in enumerate(self.fixed):
            flat = flat.slice(1 + k, i, 1)
        if self.chunked is not None:
            flat = flat.slice(1 + self.chunked, self.c0, self.cn)
        return flat


def _kept_view(view: HbmView, kept: list[int], kept_index: dict, part_dim: int, p0: int,
               pn: int) -> HbmView:
    """The [pn, 1] slice of a view over the kept dims (in kept order) at the loop indices."""
    position = {d: i for i, d in enumerate(kept)}
    offset = view.offset + sum(view.strides[position[d]] * i for d, i in kept_index.items())
    pstride = view.strides[position[part_dim]]
    return view.relaid(offset + p0 * pstride, (pn, 1), (pstride, 1))


def _scalar_view(view: HbmView) -> HbmView:
    return view.relaid(view.offset, (1, 1), (0, 1))


def _across_partitions(em: Emitter, partials: Tile, final: Tile, kind: str,
                       first_tile: bool) -> None:
    """Reduce a [P, 1] column to [1, 1]: transpose it on PE to one partition, reduce there."""
    row = em.alloc("psum", 1, partials.partitions, ir.F32Type.get())
    em.transpose(row, partials)
    if first_tile:
        em.tensor_reduce(final, row, kind)
    else:
        partial = em.alloc("sbuf", 1, 1, ir.F32Type.get())
        em.tensor_reduce(partial, row, kind)
        em.tensor_tensor(final, final, partial, kind)
