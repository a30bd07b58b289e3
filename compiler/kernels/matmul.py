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
from torchneuron.compiler.kernels.transfers import load_tile, store_tile
from torchneuron.compiler.kernels.views import HbmView


class _Staged:
    """The tiles [K-tile, F-chunk] of one matmul operand X[K, F] (K on partitions), loaded once
    and reused while they stay cached."""

    def __init__(self, em: Emitter, view: HbmView, element_type: ir.Type):
        self.em, self.view, self.element_type = em, view, element_type
        self.cache: dict[tuple[int, int, int], Tile] = {}

    def tile(self, k0: int, kn: int, f0: int, fn: int) -> Tile:
        key = (k0, f0, fn)
        tile = self.cache.get(key)
        if tile is None:
            tile = load_tile(self.em, self.view.slice(0, k0, kn).slice(1, f0, fn),
                             self.element_type)
            self.cache[key] = tile
        return tile

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
    # Keep all of the moving operand on chip when it fits in a third of SBUF; otherwise its
    # tiles are reloaded for each block of output partitions.
    keep_moving = x_f.bytes_per_partition() <= target.sbuf_partition_bytes // 3
    epilogue = Epilogue(em, chain, views, matmul.results[0])
    for p0 in range(0, parts, tp):
        pn = min(tp, parts - p0)
        if not keep_moving:
            x_f.cache.clear()
        for f0 in range(0, free, tf):
            fn = min(tf, free - f0)
            acc = em.alloc("psum", pn, fn, ir.F32Type.get())
            for k0 in range(0, k, tk):
                kn = min(tk, k - k0)
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


