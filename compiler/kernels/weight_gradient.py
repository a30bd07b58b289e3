"""The weight-gradient chain kernel (kind "weight_gradient"): W = T^T @ X (and, where asked,
T's sums over its rows), with T = epilogue(A @ B) [tokens, hidden] computed on chip and never
stored (trn-fuse's `weight-gradients` groups: in a Linear - activation - Linear block's
backward, T is the gradient of the first Linear's output, dY @ W2 times the activation's
derivative, and W the first Linear's weight gradient T^T @ X, its bias gradient T summed over
tokens).

The second matmul contracts over T's rows (tokens), so the tokens go on partitions for both:
T tiles [128 tokens, block of hidden] come out of PSUM the way the first matmul ("mn") leaves
them and are the second's stationary operand as they are, X tiles [128 tokens, <= 512
features] its moving one. For each block of hidden columns:
- for every 128-token tile: T's tile [128, block] accumulates over the K-tiles of A's
  features (A^T tiles, transposed on PE once, stay resident), its epilogue evacuates it into
  SBUF rounded as the graph rounds T, and the W accumulators [128 hidden, <= 512 features] of
  the block take its product with X's tile (X stays resident); a column of ones against the
  same tile sums it over the tokens into one PSUM row;
- after the last token tile, W's epilogue evacuates the accumulators and they are stored.
DMA moves A, B, X, T's epilogue operands and W once: T's write and read back never happen.

Where PSUM and SBUF leave room (`hidden_span`), T is computed for a span of two blocks at
once: the first block's pass computes every token tile of T over the span's columns (512
per matmul, not 256), keeps them in SBUF and sums them over the tokens for the whole span;
the second block's pass reads its columns of the kept tiles and computes only W. The same
products in the same order: half the first matmul's instructions and T's evacuations.
"""

from __future__ import annotations

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.kernels.emitter import Emitter, Tile
from torchneuron.compiler.kernels.epilogue import Epilogue, store_accumulators
from torchneuron.compiler.kernels.matmul import (
    _Staged, column_sum_ops, matmul_element_type,
)
from torchneuron.compiler.kernels.transfers import store_tile
from torchneuron.compiler.kernels.views import HbmView

# PSUM banks the block's W accumulators may take: the rest holds T's accumulators (two, so
# one evacuates while PE fills the other), the sums row and the transposes staging A and B.
_ACCUMULATOR_BANKS = 4


def hidden_block(target, features: int) -> int | None:
    """The widest block of hidden columns (512, 256 or 128) whose W accumulators, one [128,
    <= 512] fp32 bank per 128 hidden units and 512 features, take at most
    _ACCUMULATOR_BANKS banks; None when not even 128 columns do."""
    chunks = -(-features // target.matmul_max_moving)
    for block in (512, 256, 128):
        if block // target.pe_rows * chunks <= _ACCUMULATOR_BANKS:
            return block
    return None


def hidden_span(target, hidden: int, block: int, features: int, tokens: int, sums: bool,
                spare_sbuf: int, itemsize: int) -> int:
    """The hidden columns T is computed for at once, for W's blocks of `block` columns: two
    blocks where there are two, the span fits one matmul (512 columns), PSUM holds the
    block's W accumulators, two of T's accumulators over the span, T's sums over it (with
    `sums`) and a bank for the transposes, and T's tiles over the span for every token
    (`itemsize` bytes per element) take at most `spare_sbuf` bytes per partition; else the
    block."""
    wide = 2 * block
    bank = target.psum_bank_bytes
    chunks = -(-features // target.matmul_max_moving)
    w_bytes = block // target.pe_rows * chunks * bank
    span_row = wide * 4
    t_bytes = -(-tokens // target.pe_cols) * wide * itemsize
    if hidden <= block or wide > target.matmul_max_moving or t_bytes > spare_sbuf or \
            w_bytes + 2 * span_row + (span_row if sums else 0) + bank > \
            target.psum_partition_bytes:
        return block
    return wide


# The share of SBUF a weight_gradient kernel's resident operands and T's tiles over a span
# (`hidden_span`) may take together: the rest holds the staged block of B, the transposes'
# staging and the epilogues.
SPAN_SBUF_SHARE = 0.7


def resident_bytes(target, tokens: int, k: int, features: int, itemsize: int) -> int:
    """SBUF bytes per partition the resident operands take: A^T as K-tiles [128, tokens] and
    X as token tiles [128, features]."""
    tiles = lambda n: -(-n // target.pe_rows)       # noqa: E731
    return itemsize * (tiles(k) * tokens + tiles(tokens) * features)


def lower_weight_gradient(em: Emitter, compute: list[ir.Operation], views: dict,
                          outputs: list[tuple[ir.Value, HbmView]]) -> None:
    """`compute`: the kernel's ops but views, sources and trn.yield (those are in `views`; the
    transpose of T, computed on chip, is in neither); `outputs`: (yielded value, destination
    view) for W and, where the kernel yields it second, T's column sums."""
    target = em.target
    matmuls = [op for op in compute if op.name == "trn.matmul"]
    if len(matmuls) != 2:
        raise CompileError("a weight_gradient kernel holds two matmuls", compute[-1].location)
    first, second = matmuls
    transpose = U.defining_op(second.operands[0])
    if transpose is None or transpose.name != "trn.transpose":
        raise CompileError("a weight_gradient kernel's second matmul reads the transpose of "
                           "the first's result", second.location)
    product = transpose.operands[0]
    position = {op: i for i, op in enumerate(compute)}
    (w_value, w_out), sums_output = outputs[0], (outputs[1] if len(outputs) > 1 else None)
    sum_ops = []
    if sums_output is not None:
        sum_ops = column_sum_ops(sums_output[0], set(compute))
        if sum_ops is None or sum_ops[0].operands[0] != product:
            raise CompileError("a weight_gradient kernel's second result must be the sum of "
                               "the first matmul's result over its rows", second.location)
    chain1 = [op for op in compute[:position[second]] if op is not first]
    chain2 = [op for op in compute[position[second] + 1:] if op not in sum_ops]
    a, b, x = (views.get(v) for v in (first.operands[0], first.operands[1],
                                      second.operands[1]))
    if a is None or b is None or x is None or a.rank != 2 or x.rank != 2:
        raise CompileError("weight_gradient kernel operands must come from HBM",
                           first.location)
    tokens, k = a.shape
    hidden = b.shape[1]
    features = x.shape[1]
    etype1 = matmul_element_type(a.element_type, b.element_type)
    etype2 = matmul_element_type(U.element_type(product), x.element_type)
    block = hidden_block(target, features)
    if block is None:
        raise CompileError("weight_gradient kernel: its accumulators do not fit PSUM",
                           second.location)
    tp, tf, tk = target.pe_cols, target.matmul_max_moving, target.pe_rows

    a_t = _Staged(em, a.transpose([1, 0]), etype1)               # [k, tokens], resident
    x_res = _Staged(em, x, etype2)                               # [tokens, features], resident
    x_res.panel_f = tf
    k_tiles = [(k0, min(tk, k - k0)) for k0 in range(0, k, tk)]
    t_tiles = [(t0, min(tp, tokens - t0)) for t0 in range(0, tokens, tp)]
    f_tiles = [(f0, min(tf, features - f0)) for f0 in range(0, features, tf)]
    epilogue1 = Epilogue(em, chain1, views, first.results[0], {product})
    epilogue2 = Epilogue(em, chain2, views, second.results[0], {w_value})
    ones = None
    if sums_output is not None:
        ones = em.alloc("sbuf", tp, 1, etype2)
        em.memset(ones, 1.0)

    span = block
    # (Not beside another kernel, trn-order's co-run: the pair splits PSUM, and T's
    # accumulators over a span would take banks from the other's part.)
    if em.hidden_spans and em.co_run is None:
        spare = int(target.sbuf_partition_bytes * SPAN_SBUF_SHARE) - resident_bytes(
            target, tokens, k, features, max(U.element_bytes(etype1), U.element_bytes(etype2)))
        span = hidden_span(target, hidden, block, features, tokens, ones is not None, spare,
                           U.element_bytes(etype2))
    # T's tiles over the current span [tokens t, span columns], by first token, once its
    # first block has computed them.
    kept: dict[int, Tile] = {}
    for j0 in range(0, hidden, block):
        jn = min(block, hidden - j0)
        s0 = j0 - j0 % span
        sn = min(span, hidden - s0)
        computing = j0 == s0
        if computing:
            kept = {}
            b_block = _Staged(em, b.slice(1, s0, sn), etype1)   # [k, span]
        rows = [(r0, min(tk, j0 + jn - r0)) for r0 in range(j0, j0 + jn, tk)]
        accs = {(r0, f0): em.alloc("psum", rn, fn, ir.F32Type.get())
                for r0, rn in rows for f0, fn in f_tiles}
        sums = em.alloc("psum", 1, sn, ir.F32Type.get()) \
            if ones is not None and computing else None
        for t0, tn in t_tiles:
            if computing:
                acc = em.alloc("psum", tn, sn, ir.F32Type.get())
                for k0, kn in k_tiles:
                    em.matmul(acc, a_t.tile(k0, kn, t0, tn), b_block.tile(k0, kn, 0, sn),
                              accumulate=k0 > 0)
                tiles = epilogue1.run(acc, lambda view, t0=t0, tn=tn, s0=s0, sn=sn:
                                      view.slice(0, t0, tn).slice(1, s0, sn))
                kept[t0] = em.in_sbuf(tiles[product], etype2)     # [tokens t, span]
            t_tile = kept[t0]
            for r0, rn in rows:
                for f0, fn in f_tiles:
                    em.matmul(accs[(r0, f0)], t_tile.columns(r0 - s0, rn),
                              x_res.tile(t0, tn, f0, fn), accumulate=t0 > 0)
            if sums is not None:
                em.matmul(sums, ones.rows(tn), t_tile, accumulate=t0 > 0)
        if computing:
            b_block.release()
        store_accumulators(em, epilogue2, accs, w_value, w_out)
        if sums is not None:
            store_tile(em, sums_output[1].slice(0, s0, sn).reshape((1, sn)), sums)
