"""trn-fuse-attention-output: hand an attention kernel's output to the output projection on
chip, and the QKV projection's output to the attention.

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

Option `qkv` (on by default): the Linear that computes Q, K and V (a matmul kernel
of one 2-D matmul with its epilogue, [tokens, 3 * H * D] read only by the attention as
views of its columns) joins the kernel in front, its result op marked
`trn.attention_input`. Its output never reaches HBM either (2 x 9.4 MB for BERT-base over
2048 tokens): its weight stays resident, and each batch index's token rows are computed,
128 tokens at a time, when the attention stages that batch index's operands
(kernels/mlp.py `RowTiles`, `ComputedRows`), then transposed on PE where Q^T and K^T
loaded them (the same values, the same bits). The rows of its input it loads (the layer's
input x) are the rows the first residual adds back (`RowTiles.input_rows`), not loaded
again. The weight's K-tiles must take at most WEIGHT_SBUF_SHARE of SBUF, and the input's
row tiles OUTPUT_SBUF_SHARE.

Option `ffn` (on by default): the mlp_rows kernel after it (a post-norm FFN, then its
residual add and layer norm) that alone reads the kernel's result (the first layer norm's
output, [B, S, d]) -- as its first matmul's left operand through a reshape to [B * S, d],
and as it is in its rows (the residual) -- joins behind, the linear_rows part's result op
marked `trn.rows_handed_on`. The first layer norm's row tiles then stay in SBUF: the FFN
turns them on PE where it loaded them and adds them back as its residual (3.1 MB stored and
loaded back twice for BERT-base over 2048 tokens). Where the QKV projection joined too, the
whole layer is one kernel.

Option `qkv-saved` (on by default): in a training step's forward, the attention kernel (which
also stores the probabilities, and is not merged with its output projection: the step saves
the residual sum before the norm) is read, like the rest of the step's saved values, by the
backward; the step also saves Q, K^T and V, views of the QKV projection's result that a
function-level copy would gather from HBM after the projection stored it and the attention
loaded it (3 x 9.4 MB for BERT-base over 2048 tokens). Where every other reader of that
result is such a returned view, and each view is the same chain of view ops (up to a
trailing reshape) as one of the attention's operands, the projection joins the attention
kernel in front (its result op marked `trn.attention_input`, as with `qkv`) and the kernel
yields the views as further results: its lowering stores them from what it has on chip --
Q's and V's columns of each computed 128-token row tile, and the K^T tiles it turns on PE
(kernels/attention.py `saved_operands`). The projection's result never reaches HBM. Where
the output projection (a matmul kernel: the Linear, its bias, the residual) alone reads
the attention's output as its input, it joins too, behind the attention (the op computing
the output marked `trn.attention_output`): the kernel stores the output's token rows, which
the step saves, and keeps them for the projection to turn on PE, adding the residual from
the layer input's rows the QKV projection loaded (3.1 MB each for BERT-base over 2048
tokens). The same merge serves a training step's backward: the Linear computing dO, the
softmax backward's left operand of dO @ V^T, joins its attention kernel in front, which
stores dO whole for dV's kernel that reads it too (not loaded back by the attention:
3.1 MB); the merged kernel then stands where that Linear did. And it serves a pre-norm
layer's inference (GPT-2's), where nothing is saved and the output projection is a matmul
kernel (the layer norm comes before the QKV projection, not after the residual): the QKV
projection and the output projection both join, and where only the projection reads the
attention's output, the kernel yields the projection's result alone, the output staying on
chip (GPT-2 small over 512 tokens: 4.7 MB of QKV and 1.6 MB of output per layer). (A
kernel's results after the first come in at most two groups of one type each,
dialects/trn.py: a forward's kernel yields its probabilities first and the rest -- its
output and the views, of three types but as many elements each in self-attention -- flat
in one group, reshaped back outside; a backward's kernel yields its output first, dQ, which
then goes straight into its slice of the QKV gradient, then dK (or dK^T) and dO for dV's
kernel, or dK and dV where dV's product joined the kernel (trn-fuse
attention-input-contractions): at most two types, each value in its own shape.)

Option `input-rows` (on by default): the norm in front of such a pre-norm layer's attention
(a row-wise kernel of one result that only the QKV projection reads, through reshapes to
[tokens, features]) joins the kernel in front, its result op marked `trn.input_rows`: its
row tiles are computed first and kept on chip, and the QKV projection's staging turns them
on PE where it would have loaded them (1.6 MB stored and loaded back per GPT-2 layer); the
rows of the layer's input the norm loads are kept too, for the output projection's residual
(0.8 MB). All of them stay until then, so they must take at most INPUT_ROWS_SBUF_SHARE of
SBUF (trn-fuse `input-rows` does the same in front of an FFN's mlp kernel).
"""

from __future__ import annotations

import dataclasses
import math

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.kernels import mlp as mlp_kernel
from torchneuron.compiler.kernels.tile_ops import SOURCE_OPS, VIEW_OPS
from torchneuron.compiler.passes import Pass, register
from torchneuron.compiler.transforms.fuse import (
    MLP_RESIDENT_SHARE, PRODUCER_RESULT, _clone_bodies, _encloses, _inputs_before, _top_level,
    input_rows_kernel, merge_input_rows, merge_kernels, mlp_sbuf_bytes, row_input_bytes,
)
from torchneuron.compiler.transforms.layout import TOKEN_MAJOR
from torchneuron.compiler.transforms.tile import kernel_body
from torchneuron.dialects.trn import RESULT_GROUPS, build_kernel, build_yield
from torchneuron.target import get_target

KIND = "attention_linear_rows"
# Marks the op of an attention_linear_rows kernel that computes the attention's output: the
# attention's ops end there and the linear_rows kernel's begin.
ATTENTION_OUTPUT = "trn.attention_output"
# Marks the op that computes the QKV projection's output, where the kernel starts with it.
ATTENTION_INPUT = "trn.attention_input"
# Marks the op that computes the linear_rows part's result, where an mlp_rows part reads it.
ROWS_HANDED_ON = "trn.rows_handed_on"
# The share of SBUF the QKV projection's resident weight may take ...
WEIGHT_SBUF_SHARE = 0.2
# ... and what stays in SBUF while the attention part runs (`_computable_as_rows`); the rest
# holds the tiles each step makes and drops (an encoder layer over 4 x 512 tokens in bf16:
# 142 KiB of 224 on trn2).
MERGED_SBUF_SHARE = 0.9
# The share of SBUF (bytes per partition) the attention output's tiles, all live until the
# projection reads them, may take: the rest holds the attention's staged operands (at most a
# quarter, kernels/attention.py) and then the projection's resident weight and row tiles.
OUTPUT_SBUF_SHARE = 0.2


@register
@dataclasses.dataclass
class FuseAttentionOutput(Pass):
    NAME = "trn-fuse-attention-output"
    SUMMARY = ("Merge a token-major attention kernel into the linear_rows kernel (output "
               "projection, residual, norm) that alone reads its output, with the QKV "
               "projection before it and the FFN's mlp_rows kernel after it")
    target: str = ""
    # The QKV projection joins the kernel too (see the module docstring) ...
    qkv: bool = True
    # ... and the FFN's mlp_rows kernel that reads its result.
    ffn: bool = True
    # The QKV projection joins a training step's attention kernel, which then stores the Q,
    # K^T and V views the step saves (see the module docstring).
    qkv_saved: bool = True
    # A row-wise kernel (a pre-norm layer's norm) that only the QKV projection of an
    # inference attention kernel reads joins that kernel in front.
    input_rows: bool = True

    def run(self, module: ir.Operation) -> None:
        target = get_target(self.target or None)
        for func in U.functions(module):
            for attention, projection in attention_output_pairs(func, target):
                merged = merge_attention_output(attention, projection)
                qkv = _qkv_projection_of(merged, target) if self.qkv else None
                if qkv is not None:
                    kernel_body(qkv)[-2].attributes[ATTENTION_INPUT] = ir.UnitAttr.get()
                    merged = merge_kernels((qkv, merged), KIND)
                ffn = _ffn_reading(merged, target) if self.ffn else None
                if ffn is not None:
                    kernel_body(merged)[-2].attributes[ROWS_HANDED_ON] = ir.UnitAttr.get()
                    merge_kernels((merged, ffn), KIND)
            if self.qkv_saved:
                for attention, qkv, saved, projection, at in qkv_saved_merges(func, target):
                    merge_qkv_saved(attention, qkv, saved, projection, at)
            if self.input_rows:
                for rows, attention in input_rows_merges(func, target):
                    merge_input_rows(rows, attention)


def input_rows_merges(func: ir.Operation, target) -> list[tuple]:
    """(rows kernel, attention kernel) pairs for the `input-rows` merge (see the module
    docstring): an attention kernel of one result that computes its operands (the QKV
    projection marked ATTENTION_INPUT), whose projection reads a row-wise kernel's result
    as `fuse.input_rows_kernel` asks."""
    pairs = []
    for kernel, body in _attention_kernels(func):
        marked = [i for i, op in enumerate(body) if ATTENTION_INPUT in op.attributes]
        matmuls = [op for op in body[:marked[0]] if op.name == "trn.matmul"] \
            if len(marked) == 1 else []
        rows = input_rows_kernel(kernel, matmuls[0], target) if len(matmuls) == 1 else None
        if rows is None:
            continue
        # What the merged kernel keeps beside the attention grows by the rows of the layer's
        # input the norm loads (kept for the residual).
        ends = [op for op in body if ATTENTION_OUTPUT in op.attributes]
        output_bytes = _token_rows_bytes(ends[0].results[0], target) if ends else 0
        keys = U.shape([op for op in body[marked[0]:] if op.name == "trn.matmul"][0]
                       .results[0])[-1]
        if _rows_fit(matmuls[0], body[marked[0]].results[0], target, keys, output_bytes,
                     row_input_bytes(rows, target)):
            pairs.append((rows, kernel))
    return pairs


def _attention_kernels(func: ir.Operation):
    """(kernel, its body) of each attention kernel of one result in `func`."""
    for kernel in U.body_ops(func):
        if kernel.name == "trn.kernel" and U.str_attr(kernel, "kind") == "attention" and \
                len(kernel.results) == 1:
            yield kernel, kernel_body(kernel)


def attention_output_pairs(func: ir.Operation, target) -> list[tuple]:
    """(attention, linear_rows) kernel pairs to merge (see the module docstring)."""
    pairs = []
    for kernel, body in _attention_kernels(func):
        if len(body) < 2 or body[-1].operands[0] != body[-2].results[0] or \
                body[-2].name != "trn.transpose" or \
                list(U.array_attr(body[-2], "permutation")) != TOKEN_MAJOR:
            continue
        projection = _projection_reading(kernel)
        if projection is None:
            continue
        if U.shape(kernel.results[0])[1] % target.pe_cols or \
                _token_rows_bytes(kernel.results[0], target) > \
                target.sbuf_partition_bytes * OUTPUT_SBUF_SHARE:
            continue
        pairs.append((kernel, projection))
    return pairs


def _token_rows_bytes(output: ir.Value, target) -> int:
    """SBUF bytes per partition that an attention output [B, S, H, Dv] takes as token rows
    of all heads, 128 tokens to a tile, all of them kept at once."""
    b, s, h, dv = U.shape(output)
    return b * -(-s // target.pe_cols) * h * dv * U.element_bytes(U.element_type(output))


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


def _qkv_projection_of(kernel: ir.Operation, target) -> ir.Operation | None:
    """The matmul kernel computing the value [tokens, features] that the attention part of
    `kernel` (an attention_linear_rows kernel) alone reads, through view ops only, as the
    operands of its matmuls, when it can join the kernel in front (one 2-D matmul, nothing
    computed ahead of it, its epilogue ending the body; whole 128-token row tiles; its
    weight resident within WEIGHT_SBUF_SHARE of SBUF, its input's row tiles within
    OUTPUT_SBUF_SHARE); else None."""
    body = kernel_body(kernel)
    end = next((i for i, op in enumerate(body) if ATTENTION_OUTPUT in op.attributes), None)
    if end is None:
        return None
    attention_ops = set(body[:end + 1])
    producers = {U.defining_op(v) for op in body[:end + 1] for v in op.operands}
    found = [p for p in producers if p is not None and p.name == "trn.kernel" and
             U.str_attr(p, "kind") == "matmul" and len(p.results) == 1 and
             p.parent == kernel.parent]
    s = U.shape(body[end].results[0])[1]
    output_bytes = _token_rows_bytes(body[end].results[0], target)
    for producer in found:
        if _read_as_attention_operands(producer.results[0], attention_ops) and \
                _computable_as_rows(producer, target, s, output_bytes):
            return producer
    return None


def _read_as_attention_operands(value: ir.Value, attention_ops: set) -> bool:
    """Whether only ops of the attention part read `value`, through chains of view ops that
    end as operands of its matmuls."""
    pending, seen = [value], 0
    while seen < len(pending):
        for use in pending[seen].uses:
            reader = U.operation(use.owner)
            if reader not in attention_ops:
                return False
            if reader.name in VIEW_OPS:
                pending.append(reader.results[0])
            elif reader.name != "trn.matmul":
                return False
        seen += 1
    return True


def _computable_as_rows(producer: ir.Operation, target, sequence: int,
                        output_bytes: int) -> bool:
    """Whether kernels/mlp.py `RowTiles` can compute `producer`'s result: one 2-D matmul
    [tokens, K] x [K, features] after view and source ops only, its epilogue ending the body
    with the yielded value; 128-token row tiles whose token block fits PSUM; the weight's
    K-tiles within WEIGHT_SBUF_SHARE of SBUF; and what stays in SBUF while the attention
    runs within MERGED_SBUF_SHARE of it: that weight, the input's row tiles (kept for the
    first residual), the result's row tiles of one batch index (`sequence` tokens: V reads
    them until the batch index is done), the attention output's tiles (`output_bytes` per
    partition) and the attention's own staging (at most a quarter, kernels/attention.py)."""
    body = kernel_body(producer)
    matmuls = [op for op in body if op.name == "trn.matmul"]
    shape = U.shape(producer.results[0])
    if len(matmuls) != 1 or len(shape) != 2 or len(body) < 2 or \
            body[-1].operands[0] != body[-2].results[0] or \
            body[-2].name in VIEW_OPS + SOURCE_OPS or \
            any(len(U.shape(v)) != 2 for v in (*matmuls[0].operands, matmuls[0].results[0])) or \
            any(op.name not in VIEW_OPS + SOURCE_OPS for op in body[:body.index(matmuls[0])]):
        return False
    tokens, features = shape
    if tokens % target.pe_cols or \
            mlp_kernel.tokens_per_block(target, tokens, features) is None:
        return False
    return _rows_fit(matmuls[0], producer.results[0], target, sequence, output_bytes)


def _rows_fit(matmul: ir.Operation, result: ir.Value, target, sequence: int,
              output_bytes: int, extra: int = 0) -> bool:
    """`_computable_as_rows`' SBUF budget for the QKV projection `matmul` computing `result`
    [tokens, features], with `extra` bytes per partition more staying beside it (the rows of
    the layer's input a norm in front loaded: trn-fuse-attention-output input-rows)."""
    tokens, features = U.shape(result)
    k = U.shape(matmul.operands[1])[0]
    sbuf = target.sbuf_partition_bytes
    weight = U.element_bytes(U.element_type(matmul.operands[1])) * \
        -(-k // target.pe_rows) * features
    # (Its input's row tiles may stay too, until the first residual reads them.)
    x_rows = tokens // target.pe_cols * k * U.element_bytes(U.element_type(matmul.operands[0]))
    batch_rows = -(-sequence // target.pe_cols) * features * U.element_bytes(
        U.element_type(result))
    return weight <= sbuf * WEIGHT_SBUF_SHARE and weight + x_rows + batch_rows + \
        output_bytes + extra + sbuf // 4 <= sbuf * MERGED_SBUF_SHARE


def _ffn_reading(kernel: ir.Operation, target) -> ir.Operation | None:
    """The mlp_rows kernel that alone reads `kernel`'s result [B, S, d] (the first layer
    norm's output): as its first matmul's left operand, through one reshape to [B * S, d]
    read by nothing else, and in its rows part as it is or reshaped (the residual); where
    the result's 128-token row tiles fit SBUF beside the FFN's own; else None."""
    result = kernel.results[0]
    uses = list(result.uses)
    if not uses or len(kernel.results) != 1:
        return None
    ffn = U.operation(U.operation(uses[0].owner).parent)
    if ffn.name != "trn.kernel" or U.str_attr(ffn, "kind") != "mlp_rows" or \
            len(ffn.results) != 1 or ffn.parent != kernel.parent:
        return None
    body = kernel_body(ffn)
    split = next((i for i, op in enumerate(body) if PRODUCER_RESULT in op.attributes), None)
    matmuls = [op for op in body if op.name == "trn.matmul"]
    shape = U.shape(result)
    if split is None or not matmuls or len(shape) < 2 or \
            math.prod(shape[:-1]) % target.pe_cols:
        return None
    rows_part = set(body[split + 1:])
    tokens, width = math.prod(shape[:-1]), shape[-1]
    for use in uses:
        reader = U.operation(use.owner)
        if U.operation(reader.parent) != ffn:
            return None
        if reader in rows_part:
            if reader.name in VIEW_OPS and reader.name != "trn.reshape":
                return None
            continue
        readers = [U.operation(u.owner) for u in reader.results[0].uses] \
            if reader.name == "trn.reshape" else []
        if U.shape(reader.results[0]) != [tokens, width] or readers != [matmuls[0]] or \
                matmuls[0].operands[0] != reader.results[0] or \
                matmuls[0].operands[1] == reader.results[0]:
            return None
    # The norm's row tiles stay while the FFN runs, beside its resident weights and a token
    # block's row tiles, which its own kernel was formed to fit in MLP_RESIDENT_SHARE of SBUF
    # (trn-fuse `_rows_read_whole`): all of them must fit that share together.
    kept = tokens // target.pe_cols * width * U.element_bytes(U.element_type(result))
    footprint = mlp_sbuf_bytes(matmuls, [tokens, U.shape(matmuls[-1].results[0])[-1]],
                               U.element_type(ffn.results[0]), target) \
        if len(matmuls) == 2 else None
    if footprint is None or \
            footprint + kept > target.sbuf_partition_bytes * MLP_RESIDENT_SHARE:
        return None
    return ffn


def qkv_saved_merges(func: ir.Operation, target) -> list[tuple]:
    """(attention kernel, projection kernel, saved, output projection or None, the op the
    merged kernel goes before) for the `qkv-saved` merge (see the module docstring):
    `saved` pairs each returned view of the projection's result with the value inside the
    attention kernel that is the same view (the operand's chain of view ops without its
    trailing reshape), or is the result itself, kept whole (`_kept_whole`); the output
    projection joins too where `_output_projection` finds it and the attention output's
    token rows, all kept until it reads them, fit OUTPUT_SBUF_SHARE of SBUF."""
    triples = []
    body = U.body_ops(func)
    position = {op: i for i, op in enumerate(body)}
    for kernel in body:
        if kernel.name != "trn.kernel" or U.str_attr(kernel, "kind") != "attention" or \
                len(kernel.results) > 3:
            continue
        inner = kernel_body(kernel)
        matmuls = [op for op in inner if op.name == "trn.matmul"]
        # (A softmax backward's: dQ's, dK's and, where it joined, dV's contraction too.)
        if len(matmuls) not in (2, 3, 4) or \
                any(ATTENTION_INPUT in op.attributes for op in inner):
            continue
        operands = (matmuls[0].operands[0], matmuls[0].operands[1], matmuls[1].operands[1])
        chains = [view_chain(value, kernel) for value in operands]
        source = chains[0][0]
        producer = U.defining_op(source)
        if producer is None or producer.name != "trn.kernel" or \
                U.str_attr(producer, "kind") != "matmul" or len(producer.results) != 1 or \
                producer.parent != kernel.parent:
            continue
        saved = _returned_operand_views(source, kernel, [_stripped(c[1]) for c in chains]) \
            if len({chain[0] for chain in chains}) == 1 else None
        # Where the source is kept whole for readers standing between the two kernels, the
        # merged kernel takes the projection's place (the attention reading nothing computed
        # in between).
        at = kernel
        if saved is None:
            saved = _kept_whole(source, kernel, position, position[kernel])
            if saved is None and _inputs_before(kernel, producer, position):
                at = producer
                saved = _kept_whole(source, kernel, position, position[producer])
        if saved is None or _flat_layout(list(kernel.results),
                                         [value for value, _ in saved]) is None:
            continue
        output_bytes = _token_rows_bytes(kernel.results[0], target) \
            if len(U.shape(kernel.results[0])) == 4 else 0
        keys = U.shape(matmuls[0].results[0])[-1]
        if not _computable_as_rows(producer, target, keys, output_bytes):
            continue
        projection = _output_projection(kernel, position) if output_bytes and at == kernel \
            and output_bytes <= target.sbuf_partition_bytes * OUTPUT_SBUF_SHARE else None
        if projection is not None and _flat_layout(
                _results_kept(kernel, projection),
                [value for value, _ in saved] + [projection.results[0]]) is None:
            projection = None
        triples.append((kernel, producer, saved, projection, at))
    return triples


def _results_kept(attention: ir.Operation, projection: ir.Operation | None
                  ) -> list[ir.Value]:
    """The attention kernel's results that something besides the output `projection` joining
    it reads (all of them without one): an inference's output, which only the projection
    reads, stays on chip and is not yielded."""
    if projection is None:
        return list(attention.results)
    return [r for r in attention.results
            if any(not _encloses(projection, U.operation(use.owner)) for use in r.uses)]


def _kept_whole(source: ir.Value, kernel: ir.Operation, position: dict,
                place: int) -> list[tuple] | None:
    """[(source, source)] where `kernel` reads `source` only through view ops ending as
    operands of its matmuls and something standing after `place` (where the merged kernel
    will) reads it too (a softmax backward's dO, the left operand of dO @ V^T, which dV's
    kernel reads): the merged kernel then stores it whole; [] where nothing else reads it;
    None otherwise."""
    inside, outside = set(kernel_body(kernel)), False
    for use in source.uses:
        reader = U.operation(use.owner)
        if not _encloses(kernel, reader):
            if position.get(_top_level(reader, position), -1) <= place:
                return None
            outside = True
        elif reader.name != "trn.matmul" and (
                reader.name not in VIEW_OPS or
                not _read_as_attention_operands(reader.results[0], inside)):
            return None
    return [(source, source)] if outside else []


def _output_projection(kernel: ir.Operation, position: dict) -> ir.Operation | None:
    """The matmul kernel (a Linear and its epilogue: the output projection, its bias and the
    residual) whose matmul reads the attention `kernel`'s output O [B, S, H, Dv] as its
    left operand through a reshape of its own to [B * S, H * Dv] that nothing else reads,
    where O is the op `kernel` computes last and the projection reads nothing computed
    after `kernel`; else None. (O's other readers -- a training step saves it -- read it
    from the merged kernel's result.)"""
    body = kernel_body(kernel)
    output = kernel.results[0]
    if len(body) < 2 or body[-1].operands[0] != body[-2].results[0] or \
            len(U.shape(output)) != 4:
        return None
    b, s, h, dv = U.shape(output)
    reshapes = [U.operation(u.owner) for u in output.uses
                if U.operation(u.owner).name == "trn.reshape" and
                U.operation(U.operation(u.owner).parent).name == "trn.kernel"]
    if len(reshapes) != 1 or U.shape(reshapes[0].results[0]) != [b * s, h * dv]:
        return None
    reshape = reshapes[0]
    projection = U.operation(reshape.parent)
    if U.str_attr(projection, "kind") != "matmul" or len(projection.results) != 1 or \
            projection.parent != kernel.parent or \
            not _inputs_before(projection, kernel, position):
        return None
    inner = kernel_body(projection)
    matmuls = [op for op in inner if op.name == "trn.matmul"]
    readers = [U.operation(u.owner) for u in reshape.results[0].uses]
    if len(matmuls) != 1 or readers != [matmuls[0]] or \
            matmuls[0].operands[0] != reshape.results[0] or \
            matmuls[0].operands[1] == reshape.results[0] or \
            len(U.shape(matmuls[0].results[0])) != 2 or \
            inner[-1].operands[0] != inner[-2].results[0] or \
            inner[-2].name in VIEW_OPS + SOURCE_OPS or \
            any(op.name not in VIEW_OPS + SOURCE_OPS for op in inner[:inner.index(matmuls[0])]):
        return None
    return projection


def view_chain(value: ir.Value, inside: ir.Operation | None
               ) -> tuple[ir.Value, list[ir.Operation]]:
    """(source, view ops from the source to `value`, in order): `value` followed back through
    view ops (each reads one value; those of kernel `inside`, or of the function where None)
    to the first value that no such op computes."""
    ops = []
    while True:
        op = U.defining_op(value)
        if op is None or op.name not in VIEW_OPS or \
                (U.operation(op.parent) != inside if inside is not None
                 else op.parent.name != "func.func"):
            ops.reverse()
            return value, ops
        ops.append(op)
        value = op.operands[0]


def _stripped(ops: list[ir.Operation]) -> list[ir.Operation]:
    """A chain of view ops without its trailing reshape (which only regroups its dims)."""
    return ops[:-1] if ops and ops[-1].name == "trn.reshape" else ops


def _same_view_ops(a: list[ir.Operation], b: list[ir.Operation]) -> bool:
    return len(a) == len(b) and all(
        x.name == y.name and x.results[0].type == y.results[0].type and
        U.attributes_of(x) == U.attributes_of(y) for x, y in zip(a, b))


def _returned_operand_views(source: ir.Value, kernel: ir.Operation,
                            operand_chains: list[list[ir.Operation]]) -> list[tuple] | None:
    """[(returned value, the value in `kernel` it equals)] where `source`'s readers are
    `kernel` and view ops outside it whose every other reader is a view op or func.return,
    and each returned view equals one of `operand_chains` (the kernel's Q, K^T and V
    chains, trailing reshapes stripped) up to a trailing reshape; else None."""
    pending, seen, saved = [source], 0, []
    while seen < len(pending):
        value = pending[seen]
        seen += 1
        for use in value.uses:
            reader = U.operation(use.owner)
            if _encloses(kernel, reader):
                if value != source:
                    return None
                continue
            if reader.name == "func.return":
                chain = view_chain(value, None)
                stripped = _stripped(chain[1]) if chain[0] == source else None
                match = next((c for c in operand_chains if stripped is not None and
                              _same_view_ops(stripped, c)), None)
                if match is None:
                    return None
                saved.append((value, match[-1].results[0] if match else source))
            elif reader.name in VIEW_OPS and reader.parent.name == "func.func":
                pending.append(reader.results[0])
            else:
                return None
    return saved


def merge_qkv_saved(attention: ir.Operation, qkv: ir.Operation, saved: list[tuple],
                    projection: ir.Operation | None = None,
                    at: ir.Operation | None = None) -> None:
    """One attention kernel, before `at` (default `attention`): `qkv`'s ops (its result op
    marked ATTENTION_INPUT), then `attention`'s, then the output `projection`'s where given
    (the op computing the attention's output marked ATTENTION_OUTPUT). It yields one of
    `attention`'s results first and the rest of them, each saved value (the value inside
    `attention` it equals) and the projection's result flat after it (`_flat_layout`);
    reshapes outside give them their shapes back. The views outside are erased."""
    kernel_body(qkv)[-2].attributes[ATTENTION_INPUT] = ir.UnitAttr.get()
    if projection is not None:
        kernel_body(attention)[-2].attributes[ATTENTION_OUTPUT] = ir.UnitAttr.get()
    returned = list(dict.fromkeys(value for value, _ in saved))
    first, further, further_types = _flat_layout(
        _results_kept(attention, projection),
        returned + ([projection.results[0]] if projection else []))
    types = [first.type] + further_types
    with ir.InsertionPoint(at if at is not None else attention), attention.location:
        merged = build_kernel("attention", types)
    for name in U.attributes_of(attention):
        if name not in ("kind", RESULT_GROUPS):
            merged.attributes[name] = attention.attributes[name]
    inner_of = dict(saved)
    mapping: dict = {}
    with ir.InsertionPoint(merged.regions[0].blocks[0]):
        _clone_bodies((qkv, attention) + ((projection,) if projection is not None else ()),
                      mapping)
        values = []
        for value, yielded_type in zip(further, further_types):
            inner = mapping[inner_of.get(value, value)]
            if inner.type != yielded_type:
                inner = U.create("trn.reshape", [yielded_type], [inner], {},
                                 loc=attention.location).results[0]
            values.append(inner)
        build_yield([mapping[first]] + values, loc=attention.location)
    first.replace_all_uses_with(merged.results[0])
    with ir.InsertionPoint(at if at is not None else attention):
        for value, result in zip(further, list(merged.results)[1:]):
            shaped = result
            if value.type != result.type:
                shaped = U.create("trn.reshape", [value.type], [result], {},
                                  loc=attention.location).results[0]
            value.replace_all_uses_with(shaped)
    # The views outside, now unread, go with the projection they read.
    body = U.body_ops(U.operation(attention.parent))
    for op in reversed(body):
        if op.name in VIEW_OPS and not any(True for r in op.results for _ in r.uses) and \
                view_chain(op.results[0], None)[0] == qkv.results[0]:
            op.erase()
    if any(True for _ in qkv.results[0].uses if not _encloses(attention, U.operation(_.owner))):
        raise CompileError("the QKV projection's result is read outside the attention kernel "
                           "after the merge", qkv.location)
    if projection is not None:
        projection.erase()
    attention.erase()
    qkv.erase()


def _flat_layout(results: list[ir.Value], more: list[ir.Value]
                 ) -> tuple[ir.Value, list[ir.Value], list[ir.Type]] | None:
    """(first, further, types): the attention kernel's result the merged kernel yields first,
    the values it yields after it, and the types they take there. A kernel's results after
    the first come in at most two groups of one type each (dialects/trn.py): where the
    further values have at most two types, each keeps its own (grouped by type, in order);
    otherwise they flatten alike, [elements] of their element type. Its output first where
    the rest fit (a softmax backward's dQ, which then goes straight into the slice of the QKV
    gradient it is inserted in: convert-trn-to-nisa `_kernels_into_slices`; its dK,
    token-major too, keeps its shape for the same), else its last result (a forward's
    probabilities, of another size than the rest); None where neither fits. One value to
    yield (an inference's output, or the projection's result where only the projection
    reads that output: `results` empty) is yielded alone."""
    if not results:
        results, more = more[:1], more[1:]
    if len(results) == 1 and not more:
        return results[0], [], []
    orders = [(results[-1], results[:-1] + more)]
    if len(results) > 1:
        orders.insert(0, (results[0], results[1:] + more))
    for first, further in orders:
        kinds = list(dict.fromkeys(str(v.type) for v in further))
        if len(kinds) <= 2:
            grouped = sorted(further, key=lambda v: kinds.index(str(v.type)))
            return first, grouped, [v.type for v in grouped]
        counts = {math.prod(U.shape(v)) for v in further}
        types = {str(U.element_type(v)) for v in further}
        if len(counts) == 1 and len(types) == 1:
            flat = ir.RankedTensorType.get([counts.pop()], U.element_type(further[0]))
            return first, further, [flat] * len(further)
    return None
