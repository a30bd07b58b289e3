"""trn-fuse-attention-output: hand an attention kernel's output to the output projection on
chip.

After trn-layout, an attention kernel whose output O [B, S, H, Dv] is stored token-major
(each token's row holding all heads' values side by side) is, in a transformer layer, read
by one kernel only: the output projection's linear_rows kernel (trn-fuse: the Linear, then
the residual add and layer norm over its rows), as its matmul's left operand X = O viewed as
[B * S, H * Dv]. Stored, O crosses HBM twice (its store, then that kernel's load of its
rows: 6.3 MB of a BERT-base layer over 2048 tokens).

This pass merges the two into one kernel of kind "attention_linear_rows": the attention's
ops (the op computing its token-major result marked `trn.attention_output`), then the
linear_rows kernel's. convert-trn-to-nisa lowers the attention part keeping each query
block's tile of all heads' values [128 tokens, H * Dv] in SBUF instead of storing it
(kernels/attention.py `token_rows`), and the linear_rows part takes those tiles as the row
panels its X^T staging turns on PE, where it loaded them before (kernels/matmul.py
`_Staged.given_rows`): the same values, transposed by the same instructions, so the result
is the same bit for bit. Every tile of the attention output stays live until the projection
has read it, so the pair merges only where all of them take at most OUTPUT_SBUF_SHARE of
SBUF; the sequence must be whole query blocks of 128 tokens, which are the projection's row
panels.
"""

from __future__ import annotations

import dataclasses

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.passes import Pass, register
from torchneuron.compiler.transforms.fuse import merge_kernels
from torchneuron.compiler.transforms.layout import TOKEN_MAJOR
from torchneuron.compiler.transforms.tile import kernel_body
from torchneuron.target import get_target

KIND = "attention_linear_rows"
# Marks the op of an attention_linear_rows kernel that computes the attention's output: the
# attention's ops end there and the linear_rows kernel's begin.
ATTENTION_OUTPUT = "trn.attention_output"
# The share of SBUF (bytes per partition) the attention output's tiles, all live until the
# projection reads them, may take: the rest holds the attention's staged operands (at most a
# quarter, kernels/attention.py) and then the projection's resident weight and row tiles.
OUTPUT_SBUF_SHARE = 0.2


@register
@dataclasses.dataclass
class FuseAttentionOutput(Pass):
    NAME = "trn-fuse-attention-output"
    SUMMARY = ("Merge a token-major attention kernel into the linear_rows kernel (output "
               "projection, residual, norm) that alone reads its output")
    target: str = ""

    def run(self, module: ir.Operation) -> None:
        target = get_target(self.target or None)
        for func in U.functions(module):
            for attention, projection in attention_output_pairs(func, target):
                merge_attention_output(attention, projection)


def attention_output_pairs(func: ir.Operation, target) -> list[tuple]:
    """(attention, linear_rows) kernel pairs to merge (see the module docstring)."""
    pairs = []
    for kernel in U.body_ops(func):
        if kernel.name != "trn.kernel" or U.str_attr(kernel, "kind") != "attention" or \
                len(kernel.results) != 1:
            continue
        body = kernel_body(kernel)
        if len(body) < 2 or body[-1].operands[0] != body[-2].results[0] or \
                body[-2].name != "trn.transpose" or \
                list(U.array_attr(body[-2], "permutation")) != TOKEN_MAJOR:
            continue
        projection = _projection_reading(kernel)
        if projection is None:
            continue
        b, s, h, dv = U.shape(kernel.results[0])
        tiles = b * -(-s // target.pe_cols)
        if s % target.pe_cols or tiles * h * dv * U.element_bytes(
                U.element_type(kernel.results[0])) > \
                target.sbuf_partition_bytes * OUTPUT_SBUF_SHARE:
            continue
        pairs.append((kernel, projection))
    return pairs


def _projection_reading(attention: ir.Operation) -> ir.Operation | None:
    """The linear_rows kernel that alone reads `attention`'s result [B, S, H, Dv], through
    one reshape to [B * S, H * Dv] read only as its matmul's left operand; else None."""
    uses = list(attention.results[0].uses)
    if len(uses) != 1:
        return None
    reshape = U.operation(uses[0].owner)
    projection = U.operation(reshape.parent)
    if reshape.name != "trn.reshape" or projection.name != "trn.kernel" or \
            U.str_attr(projection, "kind") != "linear_rows" or \
            len(projection.results) != 1 or projection.parent != attention.parent:
        return None
    b, s, h, dv = U.shape(attention.results[0])
    if U.shape(reshape.results[0]) != [b * s, h * dv]:
        return None
    readers = [U.operation(u.owner) for u in reshape.results[0].uses]
    if len(readers) != 1 or readers[0].name != "trn.matmul" or \
            readers[0].operands[0] != reshape.results[0] or \
            readers[0].operands[1] == reshape.results[0]:
        return None
    return projection


def merge_attention_output(attention: ir.Operation, projection: ir.Operation) -> ir.Operation:
    """One kernel of kind KIND: the attention's ops, the one computing its output marked
    ATTENTION_OUTPUT, then the projection's."""
    kernel_body(attention)[-2].attributes[ATTENTION_OUTPUT] = ir.UnitAttr.get()
    return merge_kernels((attention, projection), KIND)
