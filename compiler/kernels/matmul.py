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

import itertools

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

    def __init__(self, em: Emitter, view: HbmView, element_type: ir.Type):
        self.em, self.view, self.element_type = em, view, element_type
        self.cache: dict[tuple[int, int, int], Tile] = {}
        self.panels: dict[tuple[int, int, int], Tile] = {}
        self.transposed = transposed_access(view)
        tk = em.target.pe_rows
        per_run = max(1, _EFFICIENT_RUN_BYTES // U.element_bytes(view.element_type))
        self.panel_k = -(-per_run // tk) * tk

    def tile(self, k0: int, kn: int, f0: int, fn: int) -> Tile:
        key = (k0, f0, fn)
        tile = self.cache.get(key)
        if tile is None:
            if self.transposed:
                tile = self._transposed_tile(k0, kn, f0, fn)
            else:
                tile = load_tile(self.em, self.view.slice(0, k0, kn).slice(1, f0, fn),
                                 self.element_type)
            self.cache[key] = tile
        return tile

    def _transposed_tile(self, k0: int, kn: int, f0: int, fn: int) -> Tile:
        em = self.em
        tile = em.alloc("sbuf", kn, fn, self.element_type)
        step = em.target.pe_rows
        for c0 in range(f0, f0 + fn, step):
            cn = min(step, f0 + fn - c0)
            panel, start = self._panel(c0, cn, k0)
            psum = em.alloc("psum", kn, cn, ir.F32Type.get())
            em.transpose(psum, panel.pattern(k0 - start, [(1, kn)]))
            em.copy(tile.columns(c0 - f0, cn), psum)
        return tile

    def _panel(self, c0: int, cn: int, k0: int) -> tuple[Tile, int]:
        """Rows c0..c0+cn of X^T over the K chunk holding k0, in SBUF."""
        start = k0 // self.panel_k * self.panel_k
        key = (c0, cn, start)
        panel = self.panels.get(key)
        if panel is None:
            k = self.view.shape[0]
            width = min(self.panel_k, k - start)
            rows = self.view.slice(0, start, width).slice(1, c0, cn).transpose([1, 0])
            panel = self.em.alloc("sbuf", cn, width, self.view.element_type)
            self.em.load(panel, rows, 0, [1])
            self.panels[key] = panel
        return panel, start

    def release(self) -> None:
        """Forget every cached tile (their buffers die after their last use)."""
        self.cache.clear()
        self.panels.clear()

    def bytes_per_partition(self) -> int:
        k, f = self.view.shape
        tiles_k = -(-k // self.em.target.pe_rows)
        return tiles_k * f * U.element_bytes(self.element_type)


def matmul_element_type(lhs: ir.Type, rhs: ir.Type) -> ir.Type:
    """PE input type: fp32 pairs only with fp32, so any fp32 operand makes both fp32."""
    f32 = ir.F32Type.get()
    return f32 if f32 in (lhs, rhs) else lhs


def lower_matmul(em: Emitter, matmul: ir.Operation, chain: list[ir.Operation], views: dict,
                 outputs: list[tuple[ir.Value, HbmView]], orientation: str) -> None:
    lhs, rhs = (views.get(v) for v in matmul.operands)
    if lhs is None or rhs is None:
        raise CompileError("matmul operands must come from HBM", matmul.location)
    batch = lhs.shape[:-2]
    for index in itertools.product(*(range(n) for n in batch)):
        def pick(view: HbmView) -> HbmView:
            for i in index:
                view = view.select(0, i)
            return view
        _lower_2d(em, matmul, chain, pick(lhs), pick(rhs),
                  {v: pick(w) for v, w in views.items() if w.rank == lhs.rank},
                  [(v, pick(w)) for v, w in outputs], orientation)


def _lower_2d(em: Emitter, matmul, chain, a: HbmView, b: HbmView, views, outputs,
              orientation: str) -> None:
    target = em.target
    etype = matmul_element_type(a.element_type, b.element_type)
    a_t = a.transpose([1, 0])                                  # [K, M]
    if orientation == "nm":
        x_p, x_f = _Staged(em, b, etype), _Staged(em, a_t, etype)

        def orient(view: HbmView) -> HbmView:
            return view.transpose([1, 0])
    elif orientation == "mn":
        x_p, x_f = _Staged(em, a_t, etype), _Staged(em, b, etype)

        def orient(view: HbmView) -> HbmView:
            return view
    else:
        raise CompileError(f"unknown matmul orientation '{orientation}'", matmul.location)

    k = a.shape[1]
    parts, free = x_p.view.shape[1], x_f.view.shape[1]
    tp, tf, tk = target.pe_cols, target.matmul_max_moving, target.pe_rows
    p_tiles = [(p0, min(tp, parts - p0)) for p0 in range(0, parts, tp)]
    f_tiles = [(f0, min(tf, free - f0)) for f0 in range(0, free, tf)]
    k_tiles = [(k0, min(tk, k - k0)) for k0 in range(0, k, tk)]
    p_block, f_block = choose_blocks(len(k_tiles), len(p_tiles), len(f_tiles), tp, tf,
                                     U.element_bytes(etype), target.sbuf_partition_bytes)
    p_blocks = [p_tiles[i:i + p_block] for i in range(0, len(p_tiles), p_block)]
    epilogue = Epilogue(em, chain, views, matmul.results[0], {v for v, _ in outputs})

    def stage(block) -> None:
        """Load (and transpose, where needed) the stationary tiles of a block of output
        partitions, ahead of the matmuls that use them."""
        for p0, pn in block:
            for k0, kn in k_tiles:
                x_p.tile(k0, kn, p0, pn)

    for fb in range(0, len(f_tiles), f_block):
        x_f.release()       # a new panel of moving tiles
        x_p.release()
        stage(p_blocks[0])
        for bi, block in enumerate(p_blocks):
            if bi + 1 < len(p_blocks):
                # Prefetch: the next block's DMAs, transposes and copies are issued before
                # this block's matmuls, so the PE never waits for them in program order.
                stage(p_blocks[bi + 1])
            for p0, pn in block:
                for f0, fn in f_tiles[fb:fb + f_block]:
                    acc = em.alloc("psum", pn, fn, ir.F32Type.get())
                    for k0, kn in k_tiles:
                        em.matmul(acc, x_p.tile(k0, kn, p0, pn), x_f.tile(k0, kn, f0, fn),
                                  accumulate=k0 > 0)
                    results = epilogue.run(
                        acc, (p0, pn), lambda view, p0=p0, pn=pn, f0=f0, fn=fn:
                        orient(view).slice(0, p0, pn).slice(1, f0, fn))
                    for value, out in outputs:
                        tile = results[value]
                        out_type = out.element_type
                        if tile.memory != "sbuf" or tile.element_type != out_type:
                            staged = em.alloc("sbuf", pn, fn, out_type)
                            em.copy(staged, tile)
                            tile = staged
                        store_tile(em, orient(out).slice(0, p0, pn).slice(1, f0, fn), tile)
            for p0, pn in block:       # this block's stationary tiles are done
                for k0, kn in k_tiles:
                    x_p.cache.pop((k0, p0, pn), None)


def choose_blocks(k_tiles: int, p_tiles: int, f_tiles: int, tp: int, tf: int, itemsize: int,
                  partition_bytes: int) -> tuple[int, int]:
    """Output tiles per block along P and F: the moving panel (k_tiles x f_block tiles) stays
    on chip while blocks of stationary tiles stream past it, two blocks at a time (one being
    prefetched). Among the blockings that fit three quarters of SBUF (the rest is for the
    epilogue and staging), the one moving the fewest operand bytes from HBM: stationary bytes
    x (number of F blocks) + moving bytes x (number of P blocks)."""
    budget = partition_bytes * 3 // 4
    best = None
    for f_block in range(f_tiles, 0, -1):
        moving = k_tiles * f_block * tf * itemsize
        for p_block in range(p_tiles, 0, -1):
            stationary = 2 * k_tiles * p_block * tp * itemsize
            if moving + stationary > budget:
                continue
            traffic = p_tiles * tp * -(-f_tiles // f_block) + f_tiles * tf * -(-p_tiles // p_block)
            if best is None or traffic < best[0]:
                best = (traffic, p_block, f_block)
            break
    if best is None:
        return 1, 1
    return best[1], best[2]
