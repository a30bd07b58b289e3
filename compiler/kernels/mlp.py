"""The chained-matmul kernel (kind "mlp"): Y = f(X @ A) @ B + epilogue, with the hidden
activation f(X @ A) [tokens, hidden] never leaving the chip (trn-fuse's `mlp` groups: a
Linear - activation - Linear block).

Both weight operands stay resident in SBUF (loaded, and transposed on PE where stored
transposed, once); the tokens go by in blocks of `tokens_per_block` (the PSUM that block's
output accumulators take). For each block and each 128-row chunk j of the hidden dim:
- H^T_j [128 hidden, block] = A[:, j]^T X_block^T accumulates over K-tiles of X's features
  (hidden on partitions, "nm"), and the first epilogue (bias per hidden unit on ACT's bias
  port, the activation) evacuates it into SBUF, rounded as the graph rounds it;
- every output tile [128 tokens, <= 512 features] of the block accumulates H^T_j's columns
  against B's rows j ("mn": K = hidden on partitions).
After the last chunk, the second epilogue evacuates each output tile and it is stored. The
PE does the two matmuls' work and transposes of X and, once, of the weights; DMA moves X,
the weights and Y once.
"""

from __future__ import annotations

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.kernels.emitter import Emitter
from torchneuron.compiler.kernels.epilogue import Epilogue, store_accumulators
from torchneuron.compiler.kernels.matmul import _Staged, matmul_element_type
from torchneuron.compiler.kernels.views import HbmView

# PSUM kept for the first matmul's accumulators (two, so one evacuates while PE fills the
# next); the rest holds a token block's output tiles.
_FIRST_ACCUMULATORS = 2


# Token blocks a kernel should have at least: its first block starts once the rows it needs
# are in, while the kernel that produces them still writes the rest, and its last block's
# stores overlap the next kernel likewise.
_MIN_BLOCKS = 4


def tokens_per_block(target, tokens: int, features: int) -> int | None:
    """The token block (512, 256 or 128 rows) for the kernel: among those whose output tiles
    [128, <= 512] fp32 and the first matmul's accumulators fit PSUM, the largest that still
    makes `_MIN_BLOCKS` blocks, else the smallest that fits; None when not even 128 rows
    fit. Larger blocks are fewer, longer instructions (at 128 rows the MLP forward over
    2048 tokens measured 10% slower than at its largest block), but a block starts only
    once all its rows of the input are written: GPT-2's MLPs over 512 tokens, in two
    blocks, waited for most of their layer norm, which waited for the attention output
    projection (dumped graph: 2721.4 us; in four blocks of 128, 2658.4 us, the same bits)."""
    # (A bank's worth is left for the PE transposes that stage X and the weights.)
    psum = target.psum_partition_bytes - target.psum_bank_bytes
    chunks = -(-features // target.matmul_max_moving)
    padded = -(-tokens // target.pe_cols) * target.pe_cols
    fitting = []
    for block in (512, 256, 128):
        block = min(block, padded)
        outputs = -(-block // target.pe_cols) * chunks * target.matmul_max_moving * 4
        if outputs + _FIRST_ACCUMULATORS * block * 4 <= psum and block not in fitting:
            fitting.append(block)
    for block in fitting:
        if -(-tokens // block) >= _MIN_BLOCKS:
            return block
    return fitting[-1] if fitting else None


def resident_bytes(target, features: int, hidden: int, out_features: int,
                   itemsize: int) -> int:
    """SBUF bytes per partition the two resident weights take: A as K-tiles [128 features,
    hidden] and B as K-tiles [128 hidden, out features]."""
    tiles = lambda n: -(-n // target.pe_rows)       # noqa: E731
    return itemsize * (tiles(features) * hidden + tiles(hidden) * out_features)


def lower_mlp(em: Emitter, compute: list[ir.Operation], views: dict,
              output: tuple[ir.Value, HbmView]) -> None:
    """`compute`: the kernel's ops but views, sources and trn.yield (those are in `views`);
    `output`: (yielded value, destination view)."""
    target = em.target
    matmuls = [op for op in compute if op.name == "trn.matmul"]
    if len(matmuls) != 2:
        raise CompileError("an mlp kernel holds two matmuls", compute[-1].location)
    first, second = matmuls
    hidden_value = second.operands[0]
    position = {op: i for i, op in enumerate(compute)}
    chain1 = compute[position[first] + 1:position[second]]
    chain2 = compute[position[second] + 1:]
    x, a, b = (views.get(v) for v in (first.operands[0], first.operands[1],
                                      second.operands[1]))
    if x is None or a is None or b is None or x.rank != 2:
        raise CompileError("mlp kernel operands must come from HBM", first.location)
    yielded, out = output
    tokens, features = x.shape
    hidden = a.shape[1]
    out_features = b.shape[1]
    etype1 = matmul_element_type(x.element_type, a.element_type)
    etype2 = matmul_element_type(U.element_type(hidden_value), b.element_type)
    block = tokens_per_block(target, tokens, out_features)
    if block is None:
        raise CompileError("mlp kernel: its output tiles do not fit PSUM", first.location)
    tp, tf, tk = target.pe_cols, target.matmul_max_moving, target.pe_rows

    x_t = _Staged(em, x.transpose([1, 0]), etype1)            # [features, tokens]
    a_res = _Staged(em, a, etype1, row_panels=True)           # [features, hidden]
    b_res = _Staged(em, b, etype2, row_panels=True)           # [hidden, out features]
    k1 = [(k0, min(tk, features - k0)) for k0 in range(0, features, tk)]
    j_tiles = [(j0, min(tp, hidden - j0)) for j0 in range(0, hidden, tp)]
    n_tiles = [(n0, min(tf, out_features - n0)) for n0 in range(0, out_features, tf)]
    epilogue1 = Epilogue(em, chain1, views, first.results[0], set())
    epilogue2 = Epilogue(em, chain2, views, second.results[0], {yielded})

    for t0 in range(0, tokens, block):
        tn = min(block, tokens - t0)
        rows = [(r0, min(tp, t0 + tn - r0)) for r0 in range(t0, t0 + tn, tp)]
        accs = {(r0, n0): em.alloc("psum", rn, nn, ir.F32Type.get())
                for r0, rn in rows for n0, nn in n_tiles}
        for j0, jn in j_tiles:
            acc = em.alloc("psum", jn, tn, ir.F32Type.get())
            for k0, kn in k1:
                em.matmul(acc, a_res.tile(k0, kn, j0, jn), x_t.tile(k0, kn, t0, tn),
                          accumulate=k0 > 0)
            a_res.panels.clear()          # A's tiles stay; the rows they came from go
            tiles = epilogue1.run(acc, (j0, jn), lambda view, j0=j0, jn=jn, t0=t0, tn=tn:
                                  view.transpose([1, 0]).slice(0, j0, jn).slice(1, t0, tn))
            h_t = em.in_sbuf(tiles[hidden_value], etype2)     # [hidden j, tokens]
            for r0, rn in rows:
                for n0, nn in n_tiles:
                    em.matmul(accs[(r0, n0)], h_t.columns(r0 - t0, rn),
                              b_res.tile(j0, jn, n0, nn), accumulate=j0 > 0)
            if (j0 + jn) % b_res.panel_k == 0:    # B's row panels hold panel_k hidden units
                b_res.panels.clear()
        x_t.release()
        store_accumulators(em, epilogue2, accs, yielded, out)
