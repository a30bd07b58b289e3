"""Lowering of convolutions and pooling.

Each input channel plane is loaded into SBUF once (channels on partitions, the spatial dims
flattened along the free axis); every kernel position then reads it through an access pattern
(offset and strides of the window), so HBM is read once however large the kernel.

- Convolution on PE: for each kernel position, psum[f, o] += W_k[c, f]^T @ X[c, window_k(o)],
  accumulating all positions and input-channel tiles in one PSUM bank (output channels on
  partitions, a block of output positions on the free axis). The weights are loaded as
  contiguous rows [f, c * kernel] and transposed on PE per kernel position. Where a tile of
  input channels fills at most half of PE's rows (a ResNet stage's 64 channels, an RGB
  image's 3), neighbouring positions along the kernel's last dim share a matmul: the plane is
  loaded once per position of such a group, each copy on its own block of partitions and
  shifted by that position's offset, so that one window pattern reads every position's
  window, and the group's weights are transposed together into one stationary operand
  [positions x channels, f]. PE's time follows the matmuls' moving columns, so a 3x3 kernel
  over 64 channels takes 6 matmuls per output block instead of 9 (over 3 channels, 3).
- Depthwise convolution (one channel per group) on DVE: per kernel position, the window times
  the channel's weight (a per-partition scalar), accumulated.
- Pooling on DVE: the max (or sum) of the windows.
The results then run through the kernel's epilogue (bias, activation, ...) and are stored.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.kernels.emitter import Emitter, Tile
from torchneuron.compiler.kernels.epilogue import Epilogue
from torchneuron.compiler.kernels.matmul import matmul_element_type
from torchneuron.compiler.kernels.views import HbmView, row_major_strides

# Free bytes per partition an input plane may take in SBUF.
_PLANE_BUDGET_FRACTION = 4


def _window(strides_in, out_sizes, starts, kernel_pos, strides, dilations):
    """Offset and (stride, size) dims of the window of one kernel position over output
    positions [starts[0] : starts[0] + out_sizes[0], all of the other dims]."""
    offset = sum((o * s + k * d) * st for o, k, s, d, st in
                 zip(starts, kernel_pos, strides, dilations, strides_in))
    dims = [(s * st, n) for s, st, n in zip(strides, strides_in, out_sizes)]
    return offset, dims


@dataclasses.dataclass(frozen=True)
class Padding:
    """An input that is `source` placed at `offsets` inside a tensor filled with `value`
    (a zero or -inf padding): each plane is filled on chip and the source DMA'd into its
    interior, instead of reading a padded copy from HBM."""
    source: HbmView
    offsets: tuple[int, ...]
    value: float


def _load_plane(em: Emitter, view: HbmView, element_type: ir.Type,
                padding: Padding | None = None, sample: int = 0, c0: int = 0,
                copies: int = 1, shift: int = 0) -> Tile:
    """Channels [C, spatial...] of one sample into SBUF as [C, prod(spatial)] (with
    `padding`, `view` is the padded plane and channels c0.. of `sample` come from the
    padding's source). With `copies`, the tile holds that many blocks of C partitions, block
    j the plane shifted by j * `shift` elements (its element i is the plane's i + j * shift;
    its last j * shift elements are not written, and no window reads them: see
    `packed_taps`)."""
    channels = view.shape[0]
    free = math.prod(view.shape[1:])
    if free * U.element_bytes(element_type) > em.target.sbuf_partition_bytes // \
            _PLANE_BUDGET_FRACTION:
        raise CompileError(f"an input plane of {free} elements per channel does not fit in "
                           "SBUF (spatial tiling of convolutions is not implemented)")
    tile = em.alloc("sbuf", copies * channels, free, element_type)
    plane = tile.rows(channels)
    if padding is None:
        em.load(plane, view, 0, list(range(1, view.rank)))
    else:
        source = padding.source.select(0, sample).slice(0, c0, channels)
        plane_strides = row_major_strides(tuple(view.shape[1:]))
        spatial = tuple(source.shape[1:])
        _fill_border(em, plane, tuple(view.shape[1:]), tuple(padding.offsets[2:]), spatial,
                     padding.value)
        inner = plane.pattern(sum(o * st for o, st in zip(padding.offsets[2:], plane_strides)),
                              [(st, n) for st, n in zip(plane_strides, spatial)])
        if tuple(source.strides[1:]) == row_major_strides(spatial) and len(spatial) > 1:
            # Loaded as it lies (one run per channel), then placed inside the padding on chip:
            # DMA'd straight into the interior, each of its rows would be a run of its own,
            # and a DMA pays per run (TARGET.md: short runs are overhead-bound).
            staged = em.alloc("sbuf", channels, math.prod(spatial), element_type)
            em.load(staged, source, 0, list(range(1, source.rank)))
            em.copy(inner, staged.pattern(0, [(st, n) for st, n in
                                              zip(row_major_strides(spatial), spatial)]))
        else:
            em.dma(tile.buffer, inner.ap(), source.buffer,
                   source.access_pattern(0, list(range(1, source.rank))))
    # The shifted copies from the first, on chip: one contiguous run per partition, where
    # the plane's load from HBM (a padded plane's interior, row by row) is many short ones.
    for j in range(1, copies):
        _copy_shifted(em, tile, j, plane, j * shift)
    return tile


def _copy_shifted(em: Emitter, tile: Tile, block: int, plane: Tile, shift: int) -> None:
    """Partition block `block` of `tile` := `plane` shifted by `shift` elements (its element
    i is the plane's i + shift; its last `shift` are not written), by SBUF-to-SBUF DMA: the
    block is on other partitions than the plane, which no engine can write across."""
    length = plane.free - shift
    em.dma(tile.buffer,
           tile.partition_slice(block * plane.partitions, plane.partitions).columns(0, length)
           .ap(), plane.buffer, plane.columns(shift, length).ap())


def _position_groups(kernel: list[int], taps: int) -> list[tuple[int, int, int]]:
    """The kernel positions a matmul takes together: (first position's flat index, count,
    index step between them). Runs of `taps` neighbours along the last dim (step 1); with
    two per matmul and an odd 2-D kernel width, the positions left alone at the end of each
    kernel row pair up with the next row's (step: the width), a 3x3 kernel's 9 positions
    making 5 matmuls instead of 6."""
    last = kernel[-1] if kernel else 1
    kernel_size = math.prod(kernel)
    groups = [(kk, min(taps, last - kk % last), 1)
              for kk in range(kernel_size) if kk % last % taps == 0]
    if taps != 2 or len(kernel) != 2 or last % 2 == 0:
        return groups
    pairs = [group for group in groups if group[1] == 2]
    singles = [group[0] for group in groups if group[1] == 1]
    for i in range(0, len(singles) - 1, 2):
        pairs.append((singles[i], 2, last))
    if len(singles) % 2:
        pairs.append((singles[-1], 1, 1))
    return sorted(pairs)


def _shifted_pair(em: Emitter, plane: Tile, shift: int) -> Tile:
    """A tile of two partition blocks: `plane`, then `plane` shifted by `shift` elements
    (its last `shift` elements not written; see `packed_taps`). The first block sits on the
    plane's own partitions, so an engine copies it; the second moves across partitions, by
    DMA (SBUF to SBUF)."""
    tile = em.alloc("sbuf", 2 * plane.partitions, plane.free, plane.element_type)
    em.copy(tile.rows(plane.partitions), plane)
    _copy_shifted(em, tile, 1, plane, shift)
    return tile


def _fill_border(em: Emitter, plane: Tile, shape: tuple[int, ...],
                 offsets: tuple[int, ...], interior: tuple[int, ...], value: float) -> None:
    """Set the padding of `plane` (a padded plane of `shape` whose part of size `interior`
    at `offsets` is written afterwards) to `value`. A 2-D plane's padding is three runs in
    its flat layout -- up to the interior's first element, the gaps between its rows (each
    row's right padding and the next one's left padding), after its last element -- so
    only those are set (a 58 x 58 plane around 56 x 56: 228 elements instead of 3364);
    other planes are set whole."""
    if len(shape) != 2:
        em.memset(plane, value)
        return
    (rows, width), (top, left), (height, inner_width) = shape, offsets, interior
    first = top * width + left                       # the interior's first element
    last = (top + height - 1) * width + left + inner_width     # just after its last
    gap = width - inner_width                       # between two rows of the interior
    if first > 0:
        em.memset(plane.pattern(0, [(1, first)]), value)
    if height > 1 and gap > 0:
        em.memset(plane.pattern(first + inner_width, [(width, height - 1), (1, gap)]), value)
    if last < rows * width:
        em.memset(plane.pattern(last, [(1, rows * width - last)]), value)


def packed_taps(em: Emitter, channels: int, kernel: list[int]) -> int:
    """How many neighbouring kernel positions along the last kernel dim one matmul takes for
    a tile of `channels` input channels: as many as fit PE's rows. (Copy j of the plane is
    the plane shifted by j positions; the last j shifts of it are never written, and never
    read: a window of the group's position j reads copy j where the window of the group's
    first position would read the plane, and that window ends j shifts before the plane's
    end, as position j's own window in the plane does.)"""
    if not kernel:
        return 1
    taps = min(em.target.pe_rows // channels, kernel[-1])
    return taps if taps >= 2 else 1


def _store(em: Emitter, tile: Tile, view: HbmView) -> None:
    tile = em.in_sbuf(tile, view.element_type)
    em.store(view, 0, list(range(1, view.rank)), tile)


def lower_conv(em: Emitter, conv: ir.Operation, chain: list[ir.Operation], views: dict,
               output: tuple[ir.Value, HbmView], padding: Padding | None = None) -> None:
    """`chain`: the kernel's epilogue; `output`: the value it yields and where it goes;
    `padding`: how the input is padded when it is not in HBM as such."""
    yielded, out = output
    x, w = views[conv.operands[0]], views[conv.operands[1]]
    strides, dilations = U.array_attr(conv, "strides"), U.array_attr(conv, "dilations")
    groups = U.int_attr(conv, "groups")
    n_batch, _, *in_sizes = x.shape
    f_total, c_group, *kernel = w.shape
    f_group = f_total // groups
    out_sizes = list(out.shape[2:])
    in_strides = row_major_strides(tuple(in_sizes))
    epilogue = Epilogue(em, chain, views, conv.results[0], {yielded})
    if c_group == 1 and f_group == 1:
        _depthwise(em, x, w, output, in_strides, out_sizes, kernel, strides, dilations,
                   epilogue, padding)
        return
    inner = math.prod(out_sizes[1:])
    bank = em.target.matmul_max_moving
    if inner > bank:
        raise CompileError(f"output rows of {inner} positions exceed one PSUM bank ({bank})",
                           conv.location)
    rows = max(1, bank // inner)
    etype = matmul_element_type(x.element_type, w.element_type)
    tk, tm = em.target.pe_rows, em.target.pe_cols
    positions = list(itertools.product(*(range(k) for k in kernel)))
    kernel_size = math.prod(kernel)
    f32 = ir.F32Type.get()
    shift = dilations[-1] if kernel else 0
    # (between vertically neighbouring positions of a 2-D kernel: one kernel row apart)
    row_shift = in_strides[-2] * dilations[-2] if len(kernel) == 2 else 0
    for g in range(groups):
        # Per input-channel tile: its channel count and how many positions a matmul takes;
        # the groups of positions (first position's index, count), each along the last
        # kernel dim.
        c_tiles = {}
        for c0 in range(0, c_group, tk):
            cn = min(tk, c_group - c0)
            taps = packed_taps(em, cn, kernel)
            c_tiles[c0] = (cn, taps, _position_groups(kernel, taps))
        stationary: dict[tuple[int, int, int], Tile] = {}
        for f0 in range(0, f_group, tm):
            fn = min(tm, f_group - f0)
            # Weight rows [fn, c_group * kernel], transposed per (c tile, group of positions)
            # on PE: row j * cn + c of a group's stationary operand is channel c's weight at
            # the group's position j.
            w_rows_view = w.slice(0, g * f_group + f0, fn)
            w_rows = em.alloc("sbuf", fn, c_group * kernel_size, w.element_type)
            em.load(w_rows, w_rows_view, 0, list(range(1, w.rank)))
            for c0, (cn, _, taps_of) in c_tiles.items():
                for kk, count, step in taps_of:
                    psum = em.alloc("psum", count * cn, fn, f32)
                    em.transpose(psum, w_rows.pattern(c0 * kernel_size + kk,
                                                      [(step, count), (kernel_size, cn)]))
                    tile = em.alloc("sbuf", count * cn, fn, etype)
                    em.copy(tile, psum)
                    stationary[(f0, c0, kk)] = tile
        for b in range(n_batch):
            planes, columns = {}, {}
            for c0, (cn, taps, taps_of) in c_tiles.items():
                plane_view = x.select(0, b).slice(0, g * c_group + c0, cn)
                planes[c0] = _load_plane(em, plane_view, etype, padding, b, g * c_group + c0,
                                         copies=taps, shift=shift)
                if any(step != 1 for _, count, step in taps_of if count > 1):
                    columns[c0] = _shifted_pair(em, planes[c0].rows(cn), row_shift)
            for f0 in range(0, f_group, tm):
                fn = min(tm, f_group - f0)
                for o0 in range(0, out_sizes[0], rows):
                    on = min(rows, out_sizes[0] - o0)
                    acc = em.alloc("psum", fn, on * inner, f32)
                    first = True
                    for c0, plane in planes.items():
                        cn, _, taps_of = c_tiles[c0]
                        for kk, count, step in taps_of:
                            offset, dims = _window(in_strides, [on] + out_sizes[1:],
                                                   [o0] + [0] * (len(out_sizes) - 1),
                                                   positions[kk], strides, dilations)
                            source = plane if step == 1 or count == 1 else columns[c0]
                            em.matmul(acc, stationary[(f0, c0, kk)],
                                      source.rows(count * cn).pattern(offset, dims),
                                      accumulate=not first)
                            first = False
                    channel0 = g * f_group + f0

                    def locate(view: HbmView, b=b, channel0=channel0, fn=fn, o0=o0, on=on):
                        return view.select(0, b).slice(0, channel0, fn).slice(1, o0, on)

                    results = epilogue.run(acc, locate)
                    _store(em, results[yielded], locate(out))


def _depthwise(em: Emitter, x: HbmView, w: HbmView, output: tuple[ir.Value, HbmView],
               in_strides, out_sizes, kernel, strides, dilations, epilogue: Epilogue,
               padding: Padding | None) -> None:
    yielded, out = output
    channels = x.shape[1]
    positions = list(itertools.product(*(range(k) for k in kernel)))
    kernel_size = math.prod(kernel)
    f32 = ir.F32Type.get()
    free = math.prod(out_sizes)
    for c0 in range(0, channels, em.target.num_partitions):
        cn = min(em.target.num_partitions, channels - c0)
        weights = em.alloc("sbuf", cn, kernel_size, w.element_type)
        em.load(weights, w.slice(0, c0, cn), 0, list(range(1, w.rank)))
        for b in range(x.shape[0]):
            plane = _load_plane(em, x.select(0, b).slice(0, c0, cn), x.element_type,
                                padding, b, c0)
            acc = em.alloc("sbuf", cn, free, f32)
            for kk, pos in enumerate(positions):
                offset, dims = _window(in_strides, out_sizes, [0] * len(out_sizes), pos,
                                       strides, dilations)
                tap = weights.pattern(kk, [(1, 1)])
                if kk == 0:
                    em.tensor_scalar(acc, plane.pattern(offset, dims), "mul", tap)
                else:
                    term = em.alloc("sbuf", cn, free, f32)
                    em.tensor_scalar(term, plane.pattern(offset, dims), "mul", tap)
                    em.tensor_tensor(acc, acc, term, "add")

            def locate(view: HbmView, b=b, c0=c0, cn=cn):
                return view.select(0, b).slice(0, c0, cn)

            results = epilogue.run(acc, locate)
            _store(em, results[yielded], locate(out))


def lower_pool(em: Emitter, pool: ir.Operation, chain: list[ir.Operation], views: dict,
               output: tuple[ir.Value, HbmView], padding: Padding | None = None) -> None:
    yielded, out = output
    x = views[pool.operands[0]]
    kind = U.str_attr(pool, "op")
    window = U.array_attr(pool, "window")
    strides, dilations = U.array_attr(pool, "strides"), U.array_attr(pool, "dilations")
    out_sizes = list(out.shape[2:])
    in_strides = row_major_strides(tuple(x.shape[2:]))
    positions = list(itertools.product(*(range(k) for k in window)))
    free = math.prod(out_sizes)
    epilogue = Epilogue(em, chain, views, pool.results[0], {yielded})
    f32 = ir.F32Type.get()
    for c0 in range(0, x.shape[1], em.target.num_partitions):
        cn = min(em.target.num_partitions, x.shape[1] - c0)
        for b in range(x.shape[0]):
            plane = _load_plane(em, x.select(0, b).slice(0, c0, cn), x.element_type,
                                padding, b, c0)
            acc = em.alloc("sbuf", cn, free, f32)
            for kk, pos in enumerate(positions):
                offset, dims = _window(in_strides, out_sizes, [0] * len(out_sizes), pos,
                                       strides, dilations)
                if kk == 0:
                    em.copy(acc, plane.pattern(offset, dims), engine="dve")
                else:
                    em.tensor_tensor(acc, acc, plane.pattern(offset, dims), kind)

            def locate(view: HbmView, b=b, c0=c0, cn=cn):
                return view.select(0, b).slice(0, c0, cn)

            results = epilogue.run(acc, locate)
            _store(em, results[yielded], locate(out))
