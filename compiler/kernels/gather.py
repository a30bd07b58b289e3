"""Lowering of trn.gather: rows chosen by an index tensor, read by indirect DMA.

The last row dim goes on partitions (the other row dims loop); each tile loads its [P, 1]
slice of the index, and one indirect DMA brings each partition's row (the static free pattern
at `offset + index[p] * row_stride`) from HBM into SBUF; the tile is then stored.
"""

from __future__ import annotations

import itertools
import math

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.kernels.emitter import Emitter
from torchneuron.compiler.kernels.views import HbmView
from torchneuron.dialects.nisa import MAX_FREE_DIMS


def lower_gather(em: Emitter, op: ir.Operation, source: HbmView, index: HbmView,
                 out: HbmView) -> None:
    """`source` must be contiguous (flat row-major addressing)."""
    if not source.is_contiguous():
        raise CompileError("gather from a non-contiguous view", op.location)
    if index.rank == 0:    # one row (e.g. embedding of a 0-d index): a one-element index
        index = index.relaid(index.offset, (1,), (1,))
        out = out.relaid(out.offset, (1, *out.shape), (0, *out.strides))
    offset = U.int_attr(op, "offset")
    row_stride = U.int_attr(op, "row_stride")
    free_strides = U.array_attr(op, "free_strides")
    free_shape = out.shape[index.rank:]
    if len(free_strides) > MAX_FREE_DIMS:
        raise CompileError(f"gather with {len(free_strides)} free dims (at most "
                           f"{MAX_FREE_DIMS})", op.location)
    free = math.prod(free_shape)
    rows = index.shape[-1]
    tp = em.target.num_partitions
    for outer in itertools.product(*(range(n) for n in index.shape[:-1])):
        idx_view, out_view = index, out
        for i in outer:
            idx_view, out_view = idx_view.select(0, i), out_view.select(0, i)
        for p0 in range(0, rows, tp):
            pn = min(tp, rows - p0)
            idx = em.alloc("sbuf", pn, 1, index.element_type)
            em.load(idx, idx_view.slice(0, p0, pn).reshape((pn, 1)), 0, [1])
            data = em.alloc("sbuf", pn, free, source.element_type)
            src_ap = [source.offset + offset, row_stride, pn]
            for stride, size in zip(free_strides, free_shape):
                src_ap += [stride, size]
            if not free_strides:
                src_ap += [1, 1]
            em.dma_indirect(data.buffer, data.ap(), source.buffer, src_ap, idx)
            rows_out = out_view.slice(0, p0, pn)
            em.store(rows_out, 0, list(range(1, rows_out.rank)), data)
