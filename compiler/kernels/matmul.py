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
from torchneuron.compiler.kernels.elementwise import load_leaf
from torchneuron.compiler.kernels.emitter import Emitter, Tile
from torchneuron.compiler.kernels.tile_ops import COMMUTATIVE, ConstantVectors, emit_elementwise
from torchneuron.compiler.kernels.views import HbmView


def transposed_access(view: HbmView) -> bool:
    """A 2-D view [P, F] whose DMA would move one element per descriptor (partition stride 1,
    free stride > 1), i.e. that should be transposed on PE instead."""
    return (view.shape[0] > 1 and view.shape[1] > 1 and view.strides[0] == 1
            and view.strides[1] != 1)


def load_tile(em: Emitter, view: HbmView, element_type: ir.Type) -> Tile:
    """Load a 2-D view into a new SBUF tile [P, F] of `element_type` (<= 128 x any)."""
    parts, free = view.shape
    if view.buffer is None:
        generated = load_leaf(em, view)
        if generated.element_type == element_type:
            return generated
        tile = em.alloc("sbuf", parts, free, element_type)
        em.copy(tile, generated)
        return tile
    tile = em.alloc("sbuf", parts, free, element_type)
    if not transposed_access(view):
        if view.element_type == element_type:
            em.load(tile, view, 0, [1])
        else:
            staging = em.alloc("sbuf", parts, free, view.element_type)
            em.load(staging, view, 0, [1])
            em.copy(tile, staging)
        return tile
    step = em.target.pe_rows
    for c0 in range(0, free, step):
        cn = min(step, free - c0)
        rows = em.alloc("sbuf", cn, parts, view.element_type)
        em.load(rows, view.slice(1, c0, cn).transpose([1, 0]), 0, [1])
        psum = em.alloc("psum", parts, cn, ir.F32Type.get())
        em.transpose(psum, rows)
        em.copy(tile.columns(c0, cn), psum)
    return tile


def store_tile(em: Emitter, view: HbmView, tile: Tile) -> None:
    """Store an SBUF tile [P, F] to a 2-D view of the same shape."""
    if not transposed_access(view):
        em.store(view, 0, [1], tile)
        return
    step = em.target.pe_rows
    for c0 in range(0, tile.free, step):
        cn = min(step, tile.free - c0)
        psum = em.alloc("psum", cn, tile.partitions, ir.F32Type.get())
        em.transpose(psum, tile.columns(c0, cn))
        rows = em.alloc("sbuf", cn, tile.partitions, view.element_type)
        em.copy(rows, psum)
        em.store(view.slice(1, c0, cn).transpose([1, 0]), 0, [1], rows)


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
    epilogue = _Epilogue(em, chain, views, orient, matmul.results[0])
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
            results = epilogue.run(acc, p0, pn, f0, fn)
            for value, out in outputs:
                tile = results[value]
                out_type = out.element_type
                if tile.memory != "sbuf" or tile.element_type != out_type:
                    staged = em.alloc("sbuf", pn, fn, out_type)
                    em.copy(staged, tile)
                    tile = staged
                store_tile(em, orient(out).slice(0, p0, pn).slice(1, f0, fn), tile)


class _Epilogue:
    """Runs the elementwise ops that follow the matmul on each PSUM tile."""

    def __init__(self, em: Emitter, chain: list[ir.Operation], views: dict, orient,
                 product: ir.Value):
        self.em, self.chain, self.views, self.orient = em, chain, views, orient
        self.product = product
        self.consts = ConstantVectors(em)
        self.vectors: dict[tuple[ir.Value, int], Tile] = {}

    def _vector(self, value: ir.Value, view: HbmView, p0: int, pn: int) -> Tile:
        """A per-partition operand [pn, 1] (a view constant along the tile's free dim)."""
        key = (value, p0)
        tile = self.vectors.get(key)
        if tile is None:
            tile = self.em.alloc("sbuf", pn, 1, ir.F32Type.get())
            column = view.slice(0, p0, pn).slice(1, 0, 1)
            if view.element_type == tile.element_type:
                self.em.load(tile, column, 0, [1])
            else:
                staging = self.em.alloc("sbuf", pn, 1, view.element_type)
                self.em.load(staging, column, 0, [1])
                self.em.copy(tile, staging)
            self.vectors[key] = tile
        return tile

    def run(self, acc: Tile, p0: int, pn: int, f0: int, fn: int) -> dict[ir.Value, Tile]:
        em = self.em
        tiles: dict[ir.Value, Tile] = {self.product: acc}
        folded_bias: dict[ir.Value, tuple[Tile, Tile]] = {}
        for i, op in enumerate(self.chain):
            result = op.results[0]
            dst = em.alloc("sbuf", pn, fn, U.element_type(result))
            if op.name == "trn.tensor_tensor":
                per_partition = self._per_partition_operand(op, tiles)
                if per_partition is not None:
                    chain_side, other, other_is_lhs = per_partition
                    vec = self._vector(other, self.orient(self.views[other]), p0, pn)
                    alu = U.str_attr(op, "op")
                    nxt = self.chain[i + 1] if i + 1 < len(self.chain) else None
                    if alu == "add" and _takes_bias(nxt, result):
                        folded_bias[result] = (tiles[chain_side], vec)
                        continue
                    em.tensor_scalar(dst, tiles[chain_side], alu, vec,
                                     reverse0=other_is_lhs and alu not in COMMUTATIVE)
                    tiles[result] = dst
                    continue
            if op.name == "trn.activation" and op.operands[0] in folded_bias:
                src, vec = folded_bias[op.operands[0]]
                em.activation(dst, src, U.str_attr(op, "func"), U.float_attr(op, "scale"), vec)
                tiles[result] = dst
                continue
            operands = [self._operand_tile(v, p0, pn, f0, fn, tiles) for v in op.operands]
            if len(operands) == 2 and all(t.memory == "psum" for t in operands):
                staged = em.alloc("sbuf", pn, fn, operands[1].element_type)
                em.copy(staged, operands[1])
                operands[1] = staged
            emit_elementwise(em, op, operands, dst, self.consts)
            tiles[result] = dst
        return tiles

    def _per_partition_operand(self, op: ir.Operation, tiles: dict):
        """(chain operand, other operand, other-is-lhs) when one operand of a binary op is
        computed on chip and the other is an HBM view constant along the tile's free dim."""
        lhs, rhs = op.operands
        for chain_side, other, other_is_lhs in ((lhs, rhs, False), (rhs, lhs, True)):
            view = self.views.get(other)
            if chain_side in tiles and view is not None and self.orient(view).strides[1] == 0:
                return chain_side, other, other_is_lhs
        return None

    def _operand_tile(self, value: ir.Value, p0, pn, f0, fn, tiles) -> Tile:
        if value in tiles:
            return tiles[value]
        view = self.views.get(value)
        if view is None:
            raise CompileError("epilogue operand is neither computed in the kernel nor in HBM")
        tile = load_tile(self.em, self.orient(view).slice(0, p0, pn).slice(1, f0, fn),
                         view.element_type)
        tiles[value] = tile
        return tile


def _takes_bias(op: ir.Operation | None, value: ir.Value) -> bool:
    """`op` is an activation of `value` that can absorb a per-partition bias."""
    return (op is not None and op.name == "trn.activation" and op.operands[0] == value
            and U.float_attr(op, "bias") == 0.0 and U.float_attr(op, "scale") == 1.0
            and len(list(value.uses)) == 1)
