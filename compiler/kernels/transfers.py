"""Moving 2-D tiles between HBM views and SBUF with contiguous DMAs: a view whose partition
axis is the contiguous one (a transposed layout) is moved as its transpose and turned around
on PE, instead of one DMA descriptor per element."""

from __future__ import annotations

from torch_mlir import ir

from torchneuron.compiler.kernels.elementwise import load_leaf, load_transposed, transposed_access
from torchneuron.compiler.kernels.emitter import Emitter, Tile
from torchneuron.compiler.kernels.views import HbmView


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
    load_transposed(em, tile, view)
    return tile


def store_tile(em: Emitter, view: HbmView, tile: Tile) -> None:
    """Store an on-chip tile [P, F] to a 2-D view of the same shape (a PSUM tile, or one of
    another element type, is first copied to an SBUF tile of the view's type)."""
    tile = em.in_sbuf(tile, view.element_type)
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


