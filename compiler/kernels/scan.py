"""Lowering of trn.scan (cumsum and friends, logcumsumexp): a log-step (Hillis-Steele) scan.

The scanned dim goes on the free axis, the last other dim on partitions (the rest loop).
After step s (s = 1, 2, 4, ...) element i holds the combination of elements i-2s+1 .. i:
each step is one tensor_tensor reading the tile shifted by s columns (and a copy of the first
s columns), ping-ponging between two tiles; log2(L) steps in all.
"""

from __future__ import annotations

import itertools

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.kernels.emitter import Emitter, Tile
from torchneuron.compiler.kernels.tile_ops import ConstantVectors
from torchneuron.compiler.kernels.views import HbmView


def lower_scan(em: Emitter, op: ir.Operation, source: HbmView, out: HbmView) -> None:
    consts = ConstantVectors(em)
    dim = U.int_attr(op, "dimension")
    kind = U.str_attr(op, "op")
    rank = source.rank
    order = [d for d in range(rank) if d != dim] + [dim]
    source, out = source.transpose(order), out.transpose(order)
    length = source.shape[-1]
    f32 = ir.F32Type.get()
    if length * 4 * 2 > em.target.sbuf_partition_bytes // 2:
        raise CompileError(f"a scan over {length} elements does not fit one partition's "
                           "share of SBUF", op.location)
    if rank == 1:
        source, out = source.reshape((1, length)), out.reshape((1, length))
    rows = source.shape[-2]
    tp = em.target.num_partitions
    for outer in itertools.product(*(range(n) for n in source.shape[:-2])):
        src, dst = source, out
        for i in outer:
            src, dst = src.select(0, i), dst.select(0, i)
        for p0 in range(0, rows, tp):
            pn = min(tp, rows - p0)
            loaded = em.alloc("sbuf", pn, length, source.element_type)
            em.load(loaded, src.slice(0, p0, pn), 0, [1])
            current = em.alloc("sbuf", pn, length, f32)
            em.copy(current, loaded, engine="dve")
            shift = 1
            while shift < length:
                nxt = em.alloc("sbuf", pn, length, f32)
                em.copy(nxt.columns(0, shift), current.columns(0, shift), engine="dve")
                _combine(em, nxt.columns(shift, length - shift),
                         current.columns(shift, length - shift),
                         current.columns(0, length - shift), kind, consts)
                current, shift = nxt, shift * 2
            result = current
            if out.element_type != f32:
                result = em.alloc("sbuf", pn, length, out.element_type)
                em.copy(result, current, engine="dve")
            em.store(dst.slice(0, p0, pn), 0, [1], result)


def _combine(em: Emitter, dst: Tile, a: Tile, b: Tile, kind: str,
             consts: ConstantVectors) -> None:
    # Each step reads the one before: all on DVE, as the copies between them are, so that no
    # link waits on a semaphore for another engine.
    if kind != "logaddexp":
        em.tensor_tensor(dst, a, b, kind, engine="dve")
        return
    # logaddexp(a, b) = max(a, b) + log(1 + exp(-|a - b|)): no exp of a large argument. Where
    # a == b the gap is 0, also for two equal infinities (whose difference is NaN): a masked
    # row's -inf prefix stays -inf.
    f32 = ir.F32Type.get()
    pn, n = dst.partitions, dst.free
    top = em.alloc("sbuf", pn, n, f32)
    em.tensor_tensor(top, a, b, "max", engine="dve")
    gap = em.alloc("sbuf", pn, n, f32)
    em.tensor_tensor(gap, a, b, "sub", engine="dve")
    equal = em.alloc("sbuf", pn, n, ir.IntegerType.get_signless(1))
    em.tensor_tensor(equal, a, b, "eq", engine="dve")
    zero = em.alloc("sbuf", pn, n, f32)
    em.memset(zero, 0.0)
    em.select(gap, equal, zero, gap)
    em.activation(gap, gap, "abs")
    em.activation(gap, gap, "exp", scale=-1.0)
    em.activation(gap, gap, "log", bias=consts.get(1.0, pn))
    em.tensor_tensor(dst, top, gap, "add", engine="dve")
