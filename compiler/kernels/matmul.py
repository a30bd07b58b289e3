"""Tiled lowering of a matmul kernel: K-tiles accumulate in a PSUM bank on PE, the epilogue
(bias, activation, other elementwise ops) runs while evacuating PSUM, results go back by DMA.

Layout. PE computes psum[P, F] = stationary[K, P]^T @ moving[K, F]: the contraction dim K sits
on partitions for both operands, the output's P dim on PSUM partitions. For C[M, N] = A @ B the
kernel either computes C ("mn": P = M, F = N; stationary = A^T, moving = B) or C^T ("nm":
P = N, F = M; stationary = B, moving = A^T). "nm" puts N on partitions, so a bias along N is a
per-partition vector that the activation engine adds for free while it reads PSUM.

Operands whose K dim is not on the partition side of their HBM layout (A^T of a row-major A)
are loaded contiguously and transposed on PE; results whose HBM layout is transposed relative
to the tile are transposed back on PE before the store, so DMAs always move contiguous rows.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Callable

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.kernels.emitter import Emitter, Tile
from torchneuron.compiler.kernels.epilogue import Epilogue
from torchneuron.compiler.kernels.transfers import load_tile, store_tile, transposed_access
from torchneuron.compiler.kernels.views import HbmView


# Contiguous bytes per partition a DMA should move at least to run near full bandwidth
# (TARGET.md: 2 KiB+ per partition is efficient).
_EFFICIENT_RUN_BYTES = 2048


class _Staged:
    """The tiles [K-tile, F-chunk] of one matmul operand X[K, F] (K on partitions), loaded once
    and reused while they stay cached.

    When X is stored transposed (K contiguous, as A^T of a row-major A), its rows are loaded
    as wide panels [128 rows of F, a chunk of K] -- 2 KiB or more per partition, one DMA for
    several K-tiles -- and each [128, 128] block is transposed on PE."""

    def __init__(self, em: Emitter, view: HbmView, element_type: ir.Type,
                 row_panels: bool = False):
        """`row_panels`: every column of X will be used (a resident weight), so a K-tile's
        rows are loaded in runs of at least 2 KiB (`panel_f` columns) for all the column
        tiles they hold, not one run of a tile's columns (256 B for 128 bf16) per tile."""
        self.em, self.view, self.element_type = em, view, element_type
        self.cache: dict[tuple[int, int, int, int], Tile] = {}   # (k0, kn, f0, fn) -> tile
        self.panels: dict[tuple[int, int, int], Tile] = {}
        self.transposed = transposed_access(view)
        tk = em.target.pe_rows
        per_run = max(1, _EFFICIENT_RUN_BYTES // U.element_bytes(view.element_type))
        self.panel_k = -(-per_run // tk) * tk
        self.panel_f = self.panel_k if row_panels and not self.transposed else 0
        self.row_panels: dict[tuple[int, int], Tile] = {}
        # K-tiles interleaved by partition (see `interleave_k`): 1 = K-tile j is rows
        # [128 j, 128 j + 128).
        self.interleave = 1
        # A part of a K-tile (`_part_of_k_tile`) may be read from the partition it lies at;
        # False: every tile starts at partition 0 (its other operand's rows do).
        self.parts_in_place = True
        # A factor the tiles of a transposed operand are multiplied by as they are copied out
        # of PSUM (no extra pass): an attention kernel's scaling folded into Q.
        self.scale: float | None = None
        # Rows that an earlier part of the kernel computed on chip, by first row, in place of
        # loads (they outlive `release`): of a transposed operand X^T, rows of X [rows, all
        # of K], turned on PE (an attention's token rows for the output projection); of
        # another, its own rows [K-tile, all of F] (the QKV projection's rows for an
        # attention, `ComputedRows`). Anything with `get(first row)`.
        self.given_rows: dict[int, Tile] = {}

    def tile(self, k0: int, kn: int, f0: int, fn: int) -> Tile:
        key = (k0, kn, f0, fn)
        tile = self.cache.get(key)
        if tile is None:
            if self.transposed:
                tile = (self._part_of_k_tile(k0, kn, f0, fn) if self.parts_in_place
                        else None) or self._transposed_tile(k0, kn, f0, fn)
            elif self.interleave > 1:
                tile = self._part_of_group(k0, kn, f0, fn)
            elif self.given_rows:
                tile = self._part_of_given_rows(k0, kn, f0, fn)
            else:
                tile = self._part_of_row_panel(k0, kn, f0, fn) or \
                    load_tile(self.em, self.view.slice(0, k0, kn).slice(1, f0, fn),
                              self.element_type)
            self.cache[key] = tile
        return tile

    def _part_of_k_tile(self, k0: int, kn: int, f0: int, fn: int) -> Tile | None:
        """Rows k0..k0+kn of the 128-aligned K-tile holding them, when they are only part of
        it (one head's d = 64 rows of Q^T, its neighbour's in the other half): the whole
        K-tile is transposed and copied out of PSUM, which costs the PE and ACT/DVE no more
        than a part of it (TARGET.md: neither cost shrinks with fewer partitions), and the
        rows are read where they lie, from their start partition (None where that is not
        an allowed start, or the K-tile runs past K)."""
        tk = self.em.target.pe_rows
        kb = k0 // tk * tk
        if kn >= tk or k0 + kn > kb + tk or kb + tk > self.view.shape[0] or \
                k0 - kb not in self.em.target.allowed_start_partitions(kn):
            return None
        return self.tile(kb, tk, f0, fn).partition_slice(k0 - kb, kn)

    def _part_of_given_rows(self, k0: int, kn: int, f0: int, fn: int) -> Tile:
        """Columns f0..f0+fn of rows k0..k0+kn from the given row tile holding them, in the
        operand's element type (a copy converts them where the tile holds another: a load
        would have converted them on the way, as DMA does)."""
        given = self.given_rows.get(k0)
        if given is None or given.partitions != kn or f0 + fn > given.free:
            raise CompileError(f"rows {k0}..{k0 + kn} of a matmul operand are not a row tile "
                               "computed on chip")
        tile = given.columns(f0, fn)
        if tile.element_type != self.element_type:
            converted = self.em.alloc("sbuf", kn, fn, self.element_type)
            self.em.copy(converted, tile)
            return converted
        return tile

    def _part_of_row_panel(self, k0: int, kn: int, f0: int, fn: int) -> Tile | None:
        """Columns f0..f0+fn of rows k0..k0+kn, from the row panel [kn, panel_f columns]
        holding them (loaded by one DMA on first use); None without row panels, or where
        the columns cross a panel's edge."""
        width = self.panel_f
        if not width or fn >= width:
            return None
        c0 = f0 // width * width
        cn = min(width, self.view.shape[1] - c0)
        if f0 + fn > c0 + cn:
            return None
        panel = self.row_panels.get((k0, c0))
        if panel is None:
            panel = load_tile(self.em, self.view.slice(0, k0, kn).slice(1, c0, cn),
                              self.element_type)
            self.row_panels[k0, c0] = panel
        return panel.columns(f0 - c0, fn)

    def _part_of_group(self, k0: int, kn: int, f0: int, fn: int) -> Tile:
        """K-tile (k0, kn) of an interleaved operand: the rows g p + j (p < 128) of its block
        of 128 g rows, j = its index in the block; columns f0..f0+fn. The block's rows are
        loaded by one DMA into [128, g x panel columns], partition p holding rows g p ..
        g p + g - 1 (consecutive in HBM: g rows in one run where a panel spans whole rows)."""
        tk, g = self.em.target.pe_rows, self.interleave
        block, j = divmod(k0, tk * g)
        j //= tk
        width = self.panel_f or self.view.shape[1]
        c0 = f0 // width * width
        cn = min(width, self.view.shape[1] - c0)
        if kn != tk or f0 + fn > c0 + cn:
            raise CompileError("an interleaved K-tile must be whole and within one panel")
        key = ("group", block, c0)
        group = self.panels.get(key)
        if group is None:
            rows = self.view.slice(0, block * tk * g, tk * g).reshape(
                (tk, g) + self.view.shape[1:])
            group = self.em.alloc("sbuf", tk, g * cn, self.element_type)
            self.em.load(group, rows.slice(2, c0, cn), 0, [1, 2])
            self.panels[key] = group
        return group.columns(j * cn + f0 - c0, fn)

    def _transposed_tile(self, k0: int, kn: int, f0: int, fn: int) -> Tile:
        em = self.em
        tile = em.alloc("sbuf", kn, fn, self.element_type)
        step = em.target.pe_rows
        group = self._rows_per_partition(k0, kn, fn)
        if group > 1:
            self._transposed_groups(tile, k0, kn, f0, fn, group)
            return tile
        for c0 in range(f0, f0 + fn, step):
            cn = min(step, f0 + fn - c0)
            panel, start = self._panel(c0, cn, k0)
            psum = em.alloc("psum", kn, cn, ir.F32Type.get())
            em.transpose(psum, panel.pattern(k0 - start, [(1, kn)]))
            self._evacuate(tile.columns(c0 - f0, cn), psum)
        return tile

    def _evacuate(self, dst, psum: Tile) -> None:
        """Copy a transposed block out of PSUM, multiplied by `scale` where it is set (on
        whichever of DVE and ACT would finish first, as a copy)."""
        em = self.em
        if self.scale is None:
            em.copy(dst, psum)
        elif em.sooner_engine(dict.fromkeys(("dve", "act"), dst.free)) == "act":
            em.activation(dst, psum, "identity", scale=self.scale)
        else:
            em.tensor_scalar(dst, psum, "mul", self.scale)

    def _rows_per_partition(self, k0: int, kn: int, fn: int) -> int:
        """How many consecutive rows of X^T (`group`) each partition of a panel takes: more
        than one where those rows are short (all of K, under 2 KiB) and lie one after
        another in HBM, so that a partition's run holds several of them -- a [512, 64] bf16
        slice of a saved Q or V, loaded [128, 64] at a time, moves 128 B per partition per
        run, each run paying the DMA's per-chunk cost (TARGET.md) four times its bytes."""
        view, tk = self.view, self.em.target.pe_rows
        k = view.shape[0]
        itemsize = U.element_bytes(view.element_type)
        if view.buffer is None or k0 != 0 or kn != k or view.strides[0] != 1 or \
                view.strides[1] != k:
            return 1
        return _rows_per_run(k * itemsize, fn, tk)

    def _transposed_groups(self, tile: Tile, k0: int, kn: int, f0: int, fn: int,
                           group: int) -> None:
        """Columns f0..f0+fn of X [K, F] (K contiguous) into `tile` [kn, fn], `group`
        consecutive rows of X^T per partition: each block of 128 x `group` rows is one DMA
        [128, group x K]; the PE transposes its `group` column slices, slice i holding rows
        group p + i, and each goes to the tile's columns i, i + group, ... . The same values
        land where the per-128-row panels put them."""
        em, tk = self.em, self.em.target.pe_rows
        k = self.view.shape[0]
        span = tk * group
        for c0 in range(f0, f0 + fn, span):
            rows = self.view.slice(1, c0, span).transpose([1, 0]).reshape((tk, group * k))
            panel = em.alloc("sbuf", tk, group * k, self.view.element_type)
            em.load(panel, rows, 0, [1])
            for i in range(group):
                psum = em.alloc("psum", kn, tk, ir.F32Type.get())
                em.transpose(psum, panel.pattern(i * k + k0, [(1, kn)]))
                self._evacuate(tile.pattern(c0 - f0 + i, [(group, tk)]), psum)

    def _panel(self, c0: int, cn: int, k0: int) -> tuple[Tile, int]:
        """Rows c0..c0+cn of X^T over the K chunk holding k0, in SBUF."""
        start = k0 // self.panel_k * self.panel_k
        key = (c0, cn, start)
        panel = self.panels.get(key)
        if panel is None:
            k = self.view.shape[0]
            width = min(self.panel_k, k - start)
            given = self.given_rows.get(c0)
            if given is not None:
                if given.partitions != cn or given.free != k:
                    raise CompileError(f"rows {c0}..{c0 + cn} of a matmul operand computed on "
                                       f"chip as [{given.partitions}, {given.free}], not "
                                       f"[{cn}, {k}]")
                panel = self.panels[key] = given.columns(start, width)
                return panel, start
            rows = self.view.slice(0, start, width).slice(1, c0, cn).transpose([1, 0])
            panel = self.em.alloc("sbuf", cn, width, self.view.element_type)
            self.em.load(panel, rows, 0, [1])
            self.panels[key] = panel
        return panel, start

    def release(self) -> None:
        """Forget every cached tile (their buffers die after their last use)."""
        self.cache.clear()
        self.panels.clear()
        self.row_panels.clear()

    def bytes_per_partition(self) -> int:
        k, f = self.view.shape
        tiles_k = -(-k // self.em.target.pe_rows)
        return tiles_k * f * U.element_bytes(self.element_type)


# Most rows one partition takes of an interleaved operand block.
_MAX_INTERLEAVE = 4


def interleave_k(target, k: int, x_p: _Staged, x_f: _Staged) -> int:
    """How many consecutive K rows each partition takes (g), for two operands both stored
    with K along rows (neither transposed) where some row is short: a batched matmul over
    [512, 64] bf16 slices loaded [128, 64] at a time moves 128 B per partition per DMA,
    each run paying the DMA's per-chunk cost (TARGET.md) several times its bytes. With g
    rows per partition, K-tile j of a block of 128 g rows is the rows g p + j: both
    operands number K the same way, so the products sum the same terms. 1 where K is not
    whole blocks or the rows are long enough already."""
    if x_p.transposed or x_f.transposed or x_p.view.buffer is None or \
            x_f.view.buffer is None:
        return 1
    tk = target.pe_rows

    def run_bytes(x: _Staged) -> int:
        x = getattr(x, "whole", x)        # a head's columns are loaded with all heads'
        width = min(x.panel_f or x.view.shape[1], x.view.shape[1])
        contiguous = x.view.strides[1] == 1
        return width * U.element_bytes(x.view.element_type) if contiguous else 0

    return _rows_per_run(min(run_bytes(x_p), run_bytes(x_f)), k, tk)


def _rows_per_run(row_bytes: int, rows: int, tk: int) -> int:
    """How many rows of `row_bytes` each partition takes into one run: doubling (up to
    _MAX_INTERLEAVE) while a run stays under _EFFICIENT_RUN_BYTES and `rows` still splits
    into whole blocks of 128 x that many; 1 for rows of unknown length (0)."""
    g = 1
    while g < _MAX_INTERLEAVE and 0 < g * row_bytes < _EFFICIENT_RUN_BYTES and \
            rows % (tk * g * 2) == 0:
        g *= 2
    return g


def matmul_element_type(lhs: ir.Type, rhs: ir.Type) -> ir.Type:
    """PE input type: fp32 pairs only with fp32, so any fp32 operand makes both fp32."""
    f32 = ir.F32Type.get()
    return f32 if f32 in (lhs, rhs) else lhs


def lower_matmul(em: Emitter, matmul: ir.Operation, chain: list[ir.Operation], views: dict,
                 outputs: list[tuple[ir.Value, HbmView]], orientation: str,
                 column_sums: HbmView | None = None,
                 given_a_rows: Callable[[HbmView], object] | None = None) -> None:
    """`column_sums`: a 1-D [M] view to store the sums of A's columns over K in as well (for
    C = A @ B with A [M, K], 2-D): a Linear's bias gradient beside its weight gradient.
    `given_a_rows(view)`: for a 2-D product whose A^T [K, M] an earlier part of the kernel
    computed on chip as row tiles (A^T's rows, K-tile by K-tile, all of M), the
    `_Staged.given_rows` of that view: A^T is not loaded, and stays resident whole."""
    lhs, rhs = (views.get(v) for v in matmul.operands)
    if lhs is None or rhs is None:
        raise CompileError("matmul operands must come from HBM", matmul.location)
    if (column_sums is not None or given_a_rows is not None) and lhs.rank != 2:
        raise CompileError("column sums of a batched matmul's operand" if given_a_rows is None
                           else "a batched matmul's operand given as rows", matmul.location)
    # Operand movement chosen by trn-tile or the autotuner (attributes of the kernel).
    kernel = matmul.parent
    resident = U.str_attr(kernel, "gemm_resident") if "gemm_resident" in kernel.attributes \
        else None
    block = U.int_attr(kernel, "gemm_block") if "gemm_block" in kernel.attributes else None
    if given_a_rows is not None:
        _lower_2d(em, matmul, chain, lhs, rhs, views, outputs, orientation, None, None,
                  column_sums, given_a_rows=given_a_rows)
        return
    batch = lhs.shape[:-2]
    batches = math.prod(batch)
    heads = _HeadsSideBySide.make(em, lhs, rhs, outputs, orientation) \
        if column_sums is None else None
    for index in itertools.product(*(range(n) for n in batch)):
        def pick(view: HbmView) -> HbmView:
            for i in index:
                view = view.select(0, i)
            return view
        _lower_2d(em, matmul, chain, pick(lhs), pick(rhs),
                  {v: pick(w) for v, w in views.items() if w.rank == lhs.rank},
                  [(v, pick(w)) for v, w in outputs], orientation, resident, block,
                  column_sums, batches, heads.at(index) if heads is not None else None)
    if heads is not None:
        heads.finish(matmul)


class _HeadsSideBySide:
    """A batched matmul over heads ([..., H] batch dims) whose right operand B ([K, n] per
    head) and outputs ([M, n] per head) lie with each head's n columns right after the
    previous head's in one row (heads split out of a projection, results stored token-major,
    as an attention's backward has dV = P^T @ dO): B is staged once per outer batch index for
    all heads, its rows loaded in runs of H * n elements, and each head's product reads its
    columns; the outputs of all heads gather in SBUF tiles of whole rows [M-tile, H * n],
    stored once the last head's are in. Per head, n = 64 bf16 columns are runs of 128 B,
    which the per-run DMA cost (TARGET.md) makes five times dearer than their bytes."""

    # SBUF per partition the staged rows, and the gathered outputs, may each take.
    BUDGET_SHARE = 8

    def __init__(self, em: Emitter, rhs: HbmView | None, outputs: list, heads: int):
        self.em, self.rhs, self.heads = em, rhs, heads
        self.outputs = outputs             # [(value, merged view [..outer, M, H * n])]
        self.staged: dict = {}             # outer index -> _Staged of B's rows, all heads
        self.gathered: dict = {}           # (output, outer index, m0) -> [tile, heads in]

    @classmethod
    def make(cls, em: Emitter, lhs: HbmView, rhs: HbmView, outputs: list,
             orientation: str) -> "_HeadsSideBySide | None":
        if orientation != "mn" or lhs.rank < 4 or lhs.shape[-3] < 2:
            return None
        heads, n = lhs.shape[-3], rhs.shape[-1]
        budget = em.target.sbuf_partition_bytes // cls.BUDGET_SHARE
        tiles = lambda rows: -(-rows // em.target.pe_rows)      # noqa: E731

        def merged(view: HbmView, row_bytes: int, rows: int) -> HbmView | None:
            if view.buffer is None or view.strides[-1] != 1 or \
                    n * U.element_bytes(view.element_type) >= _EFFICIENT_RUN_BYTES or \
                    tiles(rows) * row_bytes > budget:
                return None
            return view.merge_heads(-1)

        whole_rhs = merged(rhs, heads * n * U.element_bytes(rhs.element_type),
                           rhs.shape[-2])
        whole_outputs = [(value, merged(out, heads * n * sum(
            U.element_bytes(o.element_type) for _, o in outputs), out.shape[-2]))
            for value, out in outputs]
        if any(out is None for _, out in whole_outputs):
            whole_outputs = []
        if whole_rhs is None and not whole_outputs:
            return None
        return cls(em, whole_rhs, whole_outputs, heads)

    def at(self, index: tuple[int, ...]) -> "_HeadsSideBySide._Head":
        return self._Head(self, index[:-1], index[-1])

    def finish(self, matmul: ir.Operation) -> None:
        if self.gathered:
            raise CompileError("a batched matmul left the rows of some heads unstored",
                               matmul.location)

    class _Head:
        """One head's product: its B columns, and where its output tiles go."""

        def __init__(self, heads: "_HeadsSideBySide", outer: tuple[int, ...], head: int):
            self.heads, self.outer, self.head = heads, outer, head

        def pick(self, view: HbmView) -> HbmView:
            for i in self.outer:
                view = view.select(0, i)
            return view

        def operand(self, b: HbmView, element_type: ir.Type) -> "_HeadColumns | None":
            heads = self.heads
            if heads.rhs is None:
                return None
            whole = heads.staged.get(self.outer)
            if whole is None:
                for old in heads.staged.values():
                    old.release()
                heads.staged.clear()
                whole = heads.staged[self.outer] = _Staged(heads.em, self.pick(heads.rhs),
                                                           element_type)
                # (whole rows per K-tile, as one run each)
                whole.panel_f = whole.view.shape[1]
            n = b.shape[1]
            return _HeadColumns(whole, self.head * n, n)

        def store(self, value: ir.Value, m0: int, mn: int, n0: int, nn: int,
                  tile: Tile) -> bool:
            """Put output tile [mn rows from m0, nn columns from n0] of `value` in its rows
            tile (False: this output is not gathered)."""
            heads = self.heads
            whole = next((out for v, out in heads.outputs if v == value), None)
            if whole is None:
                return False
            em = heads.em
            key = (value, self.outer, m0)
            entry = heads.gathered.get(key)
            if entry is None:
                entry = heads.gathered[key] = [em.alloc("sbuf", mn, whole.shape[-1],
                                                        whole.element_type), 0]
            n = whole.shape[-1] // heads.heads
            em.copy(entry[0].columns(self.head * n + n0, nn), tile)
            if n0 + nn == n:
                entry[1] += 1
            if entry[1] == heads.heads:
                store_tile(em, self.pick(whole).slice(0, m0, mn), entry[0])
                del heads.gathered[key]
            return True


class _HeadColumns:
    """Columns [c0, c0 + n) of an operand staged for all heads (`whole`, [K, H * n]): the
    tiles of one head's B, read from the whole rows' tiles (_HeadsSideBySide)."""

    transposed = False

    def __init__(self, whole: _Staged, c0: int, n: int):
        self.whole, self.c0 = whole, c0
        self.view = whole.view.slice(1, c0, n)
        self.element_type = whole.element_type
        self.panel_f = 0
        # (What _lower_2d forgets between tiles: the whole rows stay for the other heads.)
        self.cache: dict = {}
        self.panels: dict = {}

    @property
    def interleave(self) -> int:
        return self.whole.interleave

    @interleave.setter
    def interleave(self, g: int) -> None:
        self.whole.interleave = g

    def tile(self, k0: int, kn: int, f0: int, fn: int) -> Tile:
        return self.whole.tile(k0, kn, self.c0 + f0, fn)


def _lower_2d(em: Emitter, matmul, chain, a: HbmView, b: HbmView, views, outputs,
              orientation: str, resident: str | None = None, block: int | None = None,
              column_sums: HbmView | None = None, batches: int = 1,
              head: "_HeadsSideBySide._Head | None" = None,
              given_a_rows: Callable[[HbmView], object] | None = None) -> None:
    """One matrix product of a matmul kernel (of `batches` such products, each lowered by a
    call of its own; `head`: one head's, its B and outputs shared with the other heads';
    `given_a_rows`: see `lower_matmul`)."""
    target = em.target
    etype = matmul_element_type(a.element_type, b.element_type)
    a_t = a.transpose([1, 0])                                  # [K, M]

    def staged(view: HbmView) -> _Staged:
        # Every column of an operand is used, so a K-tile's row of it is loaded a panel of
        # one moving tile's width (512 columns) at a time: a [128, 512] bf16 probabilities
        # block of a batched matmul in runs of 1 KiB, not four [128, 128] tiles in runs of
        # 256 B, each run paying the DMA's fixed cost per chunk. (Panels of whole 2 KiB rows
        # made the first matmuls of gemm_1024 wait longer: 42.4 -> 45.0 us.)
        x = _Staged(em, view, etype)
        if not x.transposed:
            x.panel_f = target.matmul_max_moving
        return x

    if orientation == "nm":
        x_p, x_f = staged(b), staged(a_t)
        x_a = x_f

        def orient(view: HbmView) -> HbmView:
            return view.transpose([1, 0])
    elif orientation == "mn":
        x_p = staged(a_t)
        x_f = (head.operand(b, etype) if head is not None else None) or staged(b)
        x_a = x_p

        def orient(view: HbmView) -> HbmView:
            return view
    else:
        raise CompileError(f"unknown matmul orientation '{orientation}'", matmul.location)
    if given_a_rows is not None:
        if x_a.transposed:
            raise CompileError("a matmul operand given as rows is read along them",
                               matmul.location)
        x_a.given_rows = given_a_rows(a_t)

    k = a.shape[1]
    parts, free = x_p.view.shape[1], x_f.view.shape[1]
    tp, tf, tk = target.pe_cols, target.matmul_max_moving, target.pe_rows
    x_p.interleave = x_f.interleave = interleave_k(target, k, x_p, x_f)
    p_tiles = [(p0, min(tp, parts - p0)) for p0 in range(0, parts, tp)]
    f_tiles = [(f0, min(tf, free - f0)) for f0 in range(0, free, tf)]
    k_tiles = [(k0, min(tk, k - k0)) for k0 in range(0, k, tk)]
    out_bytes = sum(U.element_bytes(out.element_type) for _, out in outputs)
    if given_a_rows is not None:
        # A^T is on chip whole: resident in one block, the other operand streamed once.
        resident = "p" if x_a is x_p else "f"
        block = len(p_tiles if x_a is x_p else f_tiles)
    plan = plan_gemm(target, len(k_tiles), p_tiles, f_tiles, U.element_bytes(etype),
                     x_p.transposed, x_f.transposed, out_bytes, resident, block)
    epilogue = Epilogue(em, chain, views, matmul.results[0], {v for v, _ in outputs})
    group = _row_group(target, orientation, a, b, x_p, k, free, chain, outputs, batches) \
        if column_sums is None and head is None and given_a_rows is None else 1
    if group > 1:
        _lower_grouped(em, a, x_f, k_tiles, free, outputs, etype, group)
        return

    # The resident operand's tiles (a block of them, with every K-tile) stay on chip while
    # the other operand's tiles stream past them, one column of K-tiles at a time.
    if plan.resident == "p":
        resident, streamed, r_tiles, s_tiles = x_p, x_f, p_tiles, f_tiles
    else:
        resident, streamed, r_tiles, s_tiles = x_f, x_p, f_tiles, p_tiles
    r_blocks = _balanced(r_tiles, plan.block)
    rows = _RowGather.make(em, orientation, plan.resident, r_blocks, tf, outputs)
    ones = _OnesColumn.make(em, column_sums, orientation, x_f, p_tiles, f_tiles, tf)
    sums = _ColumnSums(em, column_sums, etype, k_tiles) \
        if column_sums is not None and ones is None else None

    def compute(p0: int, pn: int, f0: int, fn: int) -> None:
        extended = ones is not None and f0 == ones.f0
        acc = em.alloc("psum", pn, fn + extended, ir.F32Type.get())
        for k0, kn in k_tiles:
            stationary = x_p.tile(k0, kn, p0, pn)
            moving = ones.tile(k0, kn) if extended else x_f.tile(k0, kn, f0, fn)
            em.matmul(acc, stationary, moving, accumulate=k0 > 0)
        if extended:
            ones.take(p0, pn, acc.columns(fn, 1))
            acc = acc.columns(0, fn)
        if sums is not None:
            if orientation == "mn":
                sums.add(p0, pn, lambda k0, kn: x_p.tile(k0, kn, p0, pn))
            else:
                sums.add(f0, fn, lambda k0, kn: x_f.tile(k0, kn, f0, fn))
        results = epilogue.run(
            acc, lambda view, p0=p0, pn=pn, f0=f0, fn=fn:
            orient(view).slice(0, p0, pn).slice(1, f0, fn))
        for value, out in outputs:
            if head is not None and head.store(value, p0, pn, f0, fn, results[value]):
                continue
            if rows is not None:
                rows.add(out, p0, pn, f0, fn, results[value])
            else:
                store_tile(em, orient(out).slice(0, p0, pn).slice(1, f0, fn), results[value])

    def stage(staged: _Staged, c0: int, cn: int, ks) -> None:
        """Load (and transpose, where needed) K-tiles `ks` of column tile c0 ahead of use."""
        for k0, kn in ks:
            staged.tile(k0, kn, c0, cn)

    def forget(staged: _Staged, c0: int, cn: int) -> None:
        for k0, kn in k_tiles:
            staged.cache.pop((k0, kn, c0, cn), None)

    # Tiles are loaded where the matmuls first use them, K-tile by K-tile, so the first
    # matmuls wait for one K-tile of each operand, not for whole panels. Program order then
    # decides what each buffer may reuse (trn-plan-memory works by liveness in program
    # order), so prefetches are placed where the memory they take has just been freed:
    # - the next streamed tile's K-tiles are spread over the computes of this one;
    # - the next block's resident tile j is staged right after the last use of this block's
    #   tile j, in the same memory.
    for bi, block in enumerate(r_blocks):
        nxt = r_blocks[bi + 1] if bi + 1 < len(r_blocks) else None
        for si, (s0, sn) in enumerate(s_tiles):
            following = s_tiles[si + 1] if si + 1 < len(s_tiles) else \
                (s_tiles[0] if nxt is not None else None)
            for j, (r0, rn) in enumerate(block):
                if plan.resident == "p":
                    compute(r0, rn, s0, sn)
                else:
                    compute(s0, sn, r0, rn)
                last = si + 1 == len(s_tiles)
                if last:
                    forget(resident, r0, rn)
                    if nxt is not None and j < len(nxt):
                        stage(resident, *nxt[j], k_tiles)
                if last and nxt is not None and j + 1 == len(block):
                    for extra in nxt[len(block):]:
                        stage(resident, *extra, k_tiles)
                if following is not None:
                    share = k_tiles[j * len(k_tiles) // len(block):
                                    (j + 1) * len(k_tiles) // len(block)]
                    if si + 1 == len(s_tiles):
                        streamed.panels.clear()
                    stage(streamed, *following, share)
            forget(streamed, s0, sn)
            streamed.panels.clear()
        resident.panels.clear()


def column_sum_ops(value: ir.Value, inside) -> list[ir.Operation] | None:
    """[reduce] or [reduce, convert]: the ops computing `value` as the sum over dim 0 of a
    2-D tensor (a trn.reduce add), converted at most once to another float type, all of them
    in `inside`; None where `value` is not such a sum. The matmul lowerings compute such a
    sum on PE beside the product (_ColumnSums) and round it once as they store it."""
    ops = []
    producer = U.defining_op(value)
    if producer is not None and producer in inside and producer.name == "trn.convert" and \
            isinstance(U.element_type(value), ir.FloatType):
        ops.append(producer)
        producer = U.defining_op(producer.operands[0])
    if producer is None or producer not in inside or producer.name != "trn.reduce" or \
            U.str_attr(producer, "op") != "add" or \
            list(U.array_attr(producer, "dimensions")) != [0] or \
            len(U.shape(producer.operands[0])) != 2:
        return None
    return [producer] + ops


class _ColumnSums:
    """Sums over K of A's columns (C = A @ B, A [M, K]) where _OnesColumn cannot take them
    (an "nm" product, an M-tile short of 128, a last column tile already 512 wide), computed
    on PE from the A^T tiles [K-tile, M-tile] the matmul loads anyway: a column of ones as
    the stationary operand and the A^T tile as the moving one give the sums as one PSUM row
    [1, M-tile], stored in one contiguous run. (A^T stationary against a ones column would cost MIN_II plus the fixed
    overhead of a one-element free size per K-tile instead of M-tile cycles, and leave the
    sums one per partition.) Each M-tile's sums are computed the first time one of its output
    tiles is: fp32 in PSUM, rounded once as they are stored."""

    def __init__(self, em: Emitter, out: HbmView, etype: ir.Type, k_tiles: list):
        self.em, self.out, self.k_tiles = em, out, k_tiles
        self.ones = em.alloc("sbuf", em.target.pe_rows, 1, etype)
        em.memset(self.ones, 1.0)
        self.done: set = set()

    def add(self, m0: int, mn: int, a_t_tile) -> None:
        """Sum columns [m0, m0 + mn) of A, whose A^T tile [kn, mn] of K-tile (k0, kn)
        `a_t_tile(k0, kn)` gives, unless done already."""
        if m0 in self.done:
            return
        self.done.add(m0)
        em = self.em
        acc = em.alloc("psum", 1, mn, ir.F32Type.get())
        for k0, kn in self.k_tiles:
            em.matmul(acc, self.ones.rows(kn), a_t_tile(k0, kn), accumulate=k0 > 0)
        store_tile(em, self.out.slice(0, m0, mn).reshape((1, mn)), acc)


class _OnesColumn:
    """Sums over K of A's columns (C = A @ B, A [M, K], "mn") as one more column of the
    product: the moving operand's last column tile [K-tile, n] gets a column of ones, so
    each M-tile's PSUM tile [M-tile, n + 1] ends in its sums, at one more PE cycle per matmul
    of that column tile instead of a matmul of M-tile cycles per K-tile (_ColumnSums: a
    Linear's bias gradient beside its weight gradient, 16 K-tiles of 2048 tokens x 24 M-tiles
    of a 3072-wide layer, 20 us of PE). Each M-tile's sums land in a column of one fp32 SBUF
    tile, stored once all are in (turned on PE into rows, rounded once)."""

    def __init__(self, em: Emitter, rows: HbmView, x_f: _Staged, f0: int, fn: int,
                 p_tiles: list):
        """`rows`: the sums' view as [M-tiles, 128]."""
        self.em, self.rows, self.x_f, self.f0, self.fn = em, rows, x_f, f0, fn
        self.extended: dict = {}              # K-tile -> [kn, fn + 1] tile, ones last
        self.column = {p0: j for j, (p0, _) in enumerate(p_tiles)}
        self.sums = em.alloc("sbuf", em.target.pe_cols, len(p_tiles), ir.F32Type.get())
        self.left = len(p_tiles)

    @classmethod
    def make(cls, em: Emitter, out: HbmView | None, orientation: str, x_f: _Staged,
             p_tiles: list, f_tiles: list, tf: int) -> "_OnesColumn | None":
        """Where the last column tile has room for one more column and every M-tile is whole
        (the sums then fill [128, M-tiles], stored as M-tile rows); None elsewhere."""
        tp = em.target.pe_cols
        if out is None or orientation != "mn" or x_f.transposed or \
                any(pn != tp for _, pn in p_tiles) or f_tiles[-1][1] >= tf:
            return None
        rows = out.reshape((len(p_tiles), tp))
        return cls(em, rows, x_f, *f_tiles[-1], p_tiles) if rows is not None else None

    def tile(self, k0: int, kn: int) -> Tile:
        """The moving operand's tile of K-tile k0 over the last column tile, ones appended
        (made once: its copy and the column's memset are kept for every M-tile)."""
        tile = self.extended.get(k0)
        if tile is None:
            em, fn = self.em, self.fn
            source = self.x_f.tile(k0, kn, self.f0, fn)
            tile = self.extended[k0] = em.alloc("sbuf", kn, fn + 1, source.element_type)
            em.copy(tile.columns(0, fn), source)
            em.memset(tile.columns(fn, 1), 1.0)
        return tile

    def take(self, p0: int, pn: int, sums: Tile) -> None:
        """M-tile p0's sums, a PSUM column [pn, 1]; after the last M-tile's, the store."""
        em = self.em
        em.copy(self.sums.columns(self.column[p0], 1).rows(pn), sums)
        self.left -= 1
        if not self.left:
            store_tile(em, self.rows.transpose([1, 0]), self.sums)


class _RowGather:
    """Output rows of a transposed ("nm") matmul gathered across a block of feature tiles.

    "nm" computes C^T tiles [features, tokens]; each is turned back on PE into [tokens,
    features] row blocks of 128 features. Stored one by one, every partition's run is 128
    elements (256 B in bf16), which the per-run DMA cost (TARGET.md: under 512 B per partition
    is overhead-bound) makes several times dearer than its bytes. With the stationary
    ("p", feature) tiles resident, a block's feature tiles are computed one after another
    for each token tile, so the turned blocks gather in one SBUF tile [tokens, the block's
    features] per 128 tokens, stored once when the block's last feature tile is in."""

    # SBUF per partition the gathered rows of one token tile may take.
    BUDGET_SHARE = 8

    def __init__(self, em: Emitter, blocks: list[list[tuple[int, int]]]):
        self.em = em
        self.span = {}                     # feature tile p0 -> (block start, block width)
        self.last = set()                  # p0 of each block's last feature tile
        for block in blocks:
            start = block[0][0]
            width = block[-1][0] + block[-1][1] - start
            for p0, _ in block:
                self.span[p0] = (start, width)
            self.last.add(block[-1][0])
        self.tiles: dict = {}

    @classmethod
    def make(cls, em: Emitter, orientation: str, resident: str, blocks: list, tf: int,
             outputs: list) -> "_RowGather | None":
        if orientation != "nm" or resident != "p" or not outputs:
            return None
        if any(out.buffer is None or out.rank != 2 or out.strides[1] != 1 or
               not transposed_access(out.transpose([1, 0])) for _, out in outputs):
            return None
        widest = max(block[-1][0] + block[-1][1] - block[0][0] for block in blocks)
        step = em.target.pe_rows
        row_bytes = sum(widest * U.element_bytes(out.element_type) for _, out in outputs)
        if len(blocks[0]) < 2 or \
                -(-tf // step) * row_bytes > em.target.sbuf_partition_bytes // cls.BUDGET_SHARE:
            return None
        return cls(em, blocks)

    def add(self, out: HbmView, p0: int, pn: int, f0: int, fn: int, tile: Tile) -> None:
        """C^T tile [pn features from p0, fn tokens from f0] of output `out` ([tokens,
        features] in HBM)."""
        em = self.em
        tile = em.in_sbuf(tile, out.element_type)
        start, width = self.span[p0]
        step = em.target.pe_rows
        for c0 in range(0, fn, step):
            cn = min(step, fn - c0)
            key = (id(out), f0 + c0)
            rows = self.tiles.get(key)
            if rows is None:
                rows = self.tiles[key] = em.alloc("sbuf", cn, width, out.element_type)
            psum = em.alloc("psum", cn, pn, ir.F32Type.get())
            em.transpose(psum, tile.columns(c0, cn))
            em.copy(rows.columns(p0 - start, pn), psum)
            if p0 in self.last:
                em.store(out.slice(0, f0 + c0, cn).slice(1, start, width), 0, [1], rows)
                del self.tiles[key]


def _row_group(target, orientation: str, a: HbmView, b: HbmView, x_p: "_Staged", k: int,
               free: int, chain: list, outputs: list, batches: int = 1) -> int:
    """How many row tiles of C = A @ B to interleave by partition (see `_lower_grouped`), or 1.

    Only where it makes DMA runs longer and is simple: "mn" with A row-major (transposed on
    PE) whose rows fit one panel, one output written in whole contiguous rows of N, no
    epilogue but the rounding to the output type, rows a multiple of the group. The blocks
    of all `batches` products of a batched matmul count towards the several that let stores
    overlap the next blocks' compute (a [512, 512] @ [512, 64] per head is one block of 512
    rows, 48 heads 48 blocks)."""
    tp = target.pe_cols
    m = a.shape[0]
    if orientation != "mn" or not x_p.transposed or len(outputs) != 1 or a.buffer is None:
        return 1
    out = outputs[0][1]
    if out.buffer is None or tuple(out.strides) != (free, 1) or a.strides != (k, 1):
        return 1
    if len(chain) > 1 or any(op.name != "trn.convert" for op in chain):
        return 1
    runs = (k * U.element_bytes(a.element_type), free * U.element_bytes(out.element_type))
    row_bytes = max(runs)
    if k > x_p.panel_k or free > target.matmul_max_moving or min(runs) >= _EFFICIENT_RUN_BYTES:
        return 1
    for group in (4, 2):
        # Several blocks at least, so that stores overlap the next blocks' compute.
        if m % (tp * group) == 0 and m // (tp * group) * batches >= 4 and \
                group * row_bytes <= 4 * _EFFICIENT_RUN_BYTES:
            return group
    return 1


def _lower_grouped(em: Emitter, a: HbmView, x_f: "_Staged", k_tiles: list, free: int,
                   outputs: list, etype: ir.Type, group: int) -> None:
    """C = A @ B with partition p of each block of `group` x 128 rows holding the `group`
    consecutive rows group*p .. group*p + group - 1: A's rows arrive as one run of group x K
    per partition and C's leave as one run of group x N, instead of runs of K and N that the
    per-run DMA cost (TARGET.md: under 2 KiB per partition is inefficient) makes expensive.
    Output tile j of a block holds rows group*p + j: its stationary operand is the PE transpose
    of panel columns [j*K, (j+1)*K). The K order and the arithmetic are those of the plain
    lowering, so results are identical."""
    tp = em.target.pe_cols
    k = a.shape[1]
    out = outputs[0][1]
    span = tp * group
    for s0 in range(0, a.shape[0], span):
        panel = em.alloc("sbuf", tp, group * k, a.element_type)
        em.load(panel, a.slice(0, s0, span).reshape((tp, group * k)), 0, [1])
        stored = em.alloc("sbuf", tp, group * free, out.element_type)
        for j in range(group):
            acc = em.alloc("psum", tp, free, ir.F32Type.get())
            for k0, kn in k_tiles:
                psum = em.alloc("psum", kn, tp, ir.F32Type.get())
                em.transpose(psum, panel.pattern(j * k + k0, [(1, kn)]))
                stationary = em.alloc("sbuf", kn, tp, etype)
                em.copy(stationary, psum)
                em.matmul(acc, stationary, x_f.tile(k0, kn, 0, free), accumulate=k0 > 0)
            em.copy(stored.columns(j * free, free), acc)     # rounds to the output type
        em.store(out.slice(0, s0, span).reshape((tp, group * free)), 0, [1], stored)


def _balanced(tiles: list, block: int) -> list[list]:
    """`tiles` split into the fewest blocks of at most `block`, of nearly equal sizes."""
    count = -(-len(tiles) // max(1, block))
    size, extra = divmod(len(tiles), count)
    blocks, start = [], 0
    for i in range(count):
        n = size + (i < extra)
        blocks.append(tiles[start:start + n])
        start += n
    return blocks


@dataclasses.dataclass(frozen=True)
class GemmPlan:
    """How a matmul's operand tiles move: the `resident` operand ("p": the stationary one,
    "f": the moving one) is loaded `block` output tiles (all their K-tiles) at a time and kept
    on chip while every tile of the other operand streams past it; the streamed operand is
    thus loaded once per block. `estimate_ns`: the cost model's estimate (the larger of PE
    time and DMA time)."""
    resident: str
    block: int
    estimate_ns: float = 0.0
    dma_bytes: int = 0


def plan_gemm(target, k_tiles: int, p_tiles: list, f_tiles: list, itemsize: int,
              p_transposed: bool, f_transposed: bool, out_bytes: int,
              resident: str | None = None, block: int | None = None,
              first: str = "p") -> GemmPlan:
    """Among the plans whose resident block and two streamed tiles (one being prefetched) fit three quarters of SBUF (the rest is for transposes, the
    epilogue and staging), the one the cost model says is fastest: PE time (matmuls plus
    the transposes of every load of a transposed operand) against DMA time (every operand
    byte loaded, with the per-run overhead of its rows, over all queues). Loading the
    transposed operand once -- resident -- saves PE time; blocks as large as fit save DMA.
    `resident` / `block` restrict the search (the autotuner's choices); on a tie the plan
    with `first` resident is kept."""
    budget = target.sbuf_partition_bytes * 3 // 4
    tk, tp, tf = target.pe_rows, target.pe_cols, target.matmul_max_moving
    k_size = k_tiles * tk
    parts = sum(n for _, n in p_tiles)
    free = sum(n for _, n in f_tiles)
    matmul_cycles = sum(max(min(64, pn), fn) for _, pn in p_tiles for _, fn in f_tiles) * k_tiles
    if itemsize >= 4:
        matmul_cycles *= target.pe_fp32_slowdown
    pe_ns = matmul_cycles / target.pe_ghz
    # A transposed operand [K, X]: one PE transpose per 128 x 128 block, per load.
    transpose_ns = {"p": k_tiles * -(-parts // tp) * tp / target.pe_ghz if p_transposed else 0.0,
                    "f": k_tiles * -(-free // tp) * tp / target.pe_ghz if f_transposed else 0.0}
    overhead = target.dma_chunk_overhead_bytes
    panel_run = max(_EFFICIENT_RUN_BYTES, tk * itemsize)

    def load_bytes(transposed: bool, width: int) -> float:
        """Bytes a full load of an operand costs on the queues, per-run overhead included."""
        run = panel_run if transposed else min(tf, width) * itemsize
        raw = k_size * width * itemsize
        return raw * (1 + overhead / max(1, min(run, (k_size if transposed else width) *
                                                 itemsize)))

    sizes = {"p": (p_tiles, parts, p_transposed), "f": (f_tiles, free, f_transposed)}
    out_run = min(tf, free) * out_bytes
    store = parts * free * out_bytes * (1 + overhead / max(1, out_run))
    bandwidth = target.dma_queues * target.dma_queue_bytes_per_ns
    best = None
    sides = ("p", "f") if first == "p" else ("f", "p")
    for side in (sides if resident is None else (resident,)):
        other = "f" if side == "p" else "p"
        r_list, r_size, r_tr = sizes[side]
        s_list, s_size, s_tr = sizes[other]
        r_tile_bytes = k_tiles * (tp if side == "p" else tf) * itemsize
        s_tile_bytes = k_tiles * (tp if other == "p" else tf) * itemsize
        blocks = range(len(r_list), 0, -1) if block is None else [min(block, len(r_list))]
        for b in blocks:
            n_blocks = -(-len(r_list) // b)
            memory = b * r_tile_bytes + 2 * s_tile_bytes
            if memory > budget and block is None:
                continue
            pe = pe_ns + transpose_ns[side] + transpose_ns[other] * n_blocks
            dma_bytes = load_bytes(r_tr, r_size) + load_bytes(s_tr, s_size) * n_blocks + store
            dma = dma_bytes / bandwidth
            estimate = max(pe, dma)
            key = (estimate, dma_bytes)
            if best is None or key < best[0]:
                best = (key, GemmPlan(side, b, estimate, int(dma_bytes)))
            break       # larger blocks only move fewer bytes
    if best is None:
        return GemmPlan("p", 1)
    return best[1]
