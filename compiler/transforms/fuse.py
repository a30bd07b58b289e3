"""trn-fuse: group trn ops into `trn.kernel`s whose intermediates never leave the chip.

Groups formed:
- row-wise groups (kind "rows"), formed first: reductions over the trailing dims of one
  iteration space S = K x R, the ops computing their inputs, and the ops after them that
  combine the reduced values (broadcast back over R) with values over S: softmax, layer and
  RMS norms, their backward. A kernel keeps whole rows on chip (128 rows per tile), so the
  tensor is read once instead of once per reduction and per broadcast. A group is formed
  only if its rows fit the SBUF budget. A per-row value also needed outside the group
  (layer norm's mean and 1/std, saved for the backward) is a further result of the kernel
  (`row-results`), as is a sum over every row of a row value the group computes or loads,
  with the unary ops after it (`column-sums`: layer norm's weight and bias gradients, sums
  over tokens of dy * xhat and of dy, accumulated on PE as the tiles go by); another member
  needed outside stays in place for that use (it is recomputed there) -- except a residual
  sum a matmul's epilogue can compute (`epilogue-residuals`): that kernel stores it, and
  the rows read it;
- matmul / convolution / pooling + epilogue: the root and the chain of elementwise ops that
  consume it one after the other (bias add, activation, scaling, residual add ...), evaluated
  while the result is on chip (PSUM evacuation for PE results);
- elementwise groups: elementwise ops of one shape reading one another, a DAG in which a
  value may have several users inside the group (GELU's backward reads its input three
  times), cut so that only its last value is used outside; possibly followed by one
  reduction and a chain after it (exp -> sum -> reciprocal), so the reduced input never
  reaches HBM;
- attention (kind "attention"), formed last from three kernels: a matmul whose result (the
  scores, after its epilogue) only a row-wise kernel reads, and the matmul that reads the
  row-wise result (the probabilities) as its left operand. The kernel computes scores, row
  statistics and probabilities for 128 query rows at a time on chip and multiplies them by
  the values there: scores and probabilities never reach HBM. Where something else reads
  the row-wise result too (attention-saved: a training step's saved probabilities; the
  softmax backward's gradient, which the matmuls of dQ and of dK both read), the kernel
  also yields it, stored as it is computed; a matmul contracting it over its rows (dK^T =
  Q^T @ dS, attention-contractions) then joins the kernel, which accumulates that product
  over its query blocks and yields it instead; so does a matmul contracting an input the
  row part reads over its rows (dV = P^T @ dO, the probabilities being an input of the
  softmax backward, attention-input-contractions), each row tile of that input taken as the
  row part loads it;
- matmul + rows (kind "matmul_rows"), formed after attention from the pairs left: a matmul
  kernel whose result only a row-wise kernel over rows of its last dim reads (a softmax
  whose probabilities no matmul reads as attention's does). The scores are computed for
  128 rows at a time and the rows' body runs on them on chip, reading them from PSUM: they
  never reach HBM;
- epilogue producers: an elementwise kernel over the matmul's result shape that only the
  matmul kernel's epilogue reads (GELU's derivative, multiplied into the gradient a backward
  matmul produces) is computed inside that epilogue, tile by tile, so its value never
  reaches HBM; one read through a reshape to that shape ([batch, tokens, hidden] against
  [tokens, hidden]) is first rebuilt in it;
- epilogue results: an elementwise kernel over a matmul's result shape that reads that
  result directly, where something else needs the result too (a training step's forward saves
  a Linear's output and applies GELU to it), runs in the matmul's epilogue; the kernel yields
  both values (its second result), so the saved one is not read back;
- bias gradients: a 2-D matmul whose left operand is the transpose of a tensor, and a
  reduction kernel summing that tensor over its first dim (a Linear's weight gradient
  dY^T @ X and its bias gradient, dY summed over tokens): the matmul kernel computes the sums
  too, on PE from the tiles of dY it loads anyway, and yields them second;
- weight gradients (kind "weight_gradient"): a 2-D matmul kernel whose result T only a
  second 2-D matmul kernel reads, as transpose(T) @ X (and, where bias-gradients merged it,
  T summed over its rows): a Linear - activation - Linear block's backward computes T, the
  gradient of the first Linear's output, and reads it back only for that Linear's weight and
  bias gradients. One kernel computes T 128 tokens at a time and multiplies each tile into
  the weight gradient's accumulators on chip (compiler/kernels/weight_gradient.py): T never
  reaches HBM;
- mlp (kind "mlp"), merged last: a 2-D matmul kernel whose epilogue is per output feature
  (bias, activation) and whose result only another 2-D matmul kernel reads, as its left
  operand: Linear - activation - Linear, with both weights resident in SBUF and the hidden
  activation computed and consumed on chip, 128 hidden units at a time
  (compiler/kernels/mlp.py).
- mlp with saved values (kind "mlp_saved"), merged after mlp: a 2-D matmul kernel (a Linear
  and its epilogue, bias and activation) whose result H is the left operand of a second 2-D
  matmul kernel and is also read elsewhere -- a training step's forward saves H (and the
  pre-activation the epilogue rounds on the way) for the backward. The kernel computes H
  128 tokens at a time as whole-row tiles, both weights resident, stores them (and the
  other saved values) and turns them on PE for the second Linear (compiler/kernels/mlp.py
  `lower_mlp_saved`): H is stored, as the step needs, but not loaded back (12.6 MB for
  BERT-base's FFN over 2048 tokens). The backward has the same shape: the gradient of the
  hidden activation (dY @ W2 times GELU's derivative, its epilogue's producers merged ahead
  of its matmul) is read by the input gradient's Linear and stored for the first weight's
  gradient; there the kernel takes the first's place, ahead of that weight gradient. Only
  where H's 128-token block fits PSUM;
- mlp_saved + weight gradient (option mlp-saved-gradient), merged after mlp_saved: where the
  only other reader of the kernel's H is a matmul kernel computing transpose(H) @ X (and
  possibly H summed over its rows: a backward's first weight and bias gradients, dH^T @ X),
  that kernel's ops join the mlp_saved kernel after the second Linear's, the first marked
  `trn.saved_gradient`. Every row tile of H stays on chip until the gradient's matmuls take
  them as their stationary operand (kernels/mlp.py `lower_mlp_saved`): H is neither stored
  nor loaded (25.2 MB for BERT-base's FFN backward over 2048 tokens). Only where all of H's
  rows, the resident weights and a column tile of X take at most SAVED_ROWS_SHARE of SBUF;
- mlp + rows (kind "mlp_rows"), merged after mlp: an mlp kernel whose result only a
  row-wise kernel with one result reads, over rows of its output features (a post-norm
  transformer's FFN, then the residual add and layer norm). Each block of token rows'
  output is evacuated into whole-row SBUF tiles that the rows' body reads on chip: the
  FFN's output never reaches HBM (kernels/mlp.py `lower_mlp_rows`);
- linear + rows (kind "linear_rows"), likewise for a matmul kernel of one 2-D Linear and its
  epilogue (an attention block's output projection, then the residual add and layer norm):
  its weight resident, the staged X^T in the hidden activation's place;
- rows + mlp (option input-rows), merged after mlp: a row-wise kernel of one result that only
  an mlp kernel's first Linear reads, through reshapes to [tokens, features] (a pre-norm
  FFN's norm), joins the mlp kernel in front, the op computing its result marked
  `trn.input_rows`: its row tiles stay on chip for the Linear's X^T staging to turn on PE,
  and the rows of its inputs it loads for a residual that reads them
  (`input_rows_kernel`, shared with trn-fuse-attention-output's input-rows).
View ops (transpose, broadcast, reshape) and constant sources (fill, iota) that feed a group
from outside are copied into the kernel: its lowering folds views into access patterns and
generates sources on chip instead of reading them from HBM.

Inside a kernel, a value rounded to bf16/fp16 only to be read by the next elementwise op is
read unrounded (the engines compute in fp32): fused intermediates are not rounded, as in
Inductor's default. `keep-roundings=true` keeps every rounding the graph spells out.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import typing

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.kernels.tile_ops import (
    ELEMENTWISE_OPS, SOURCE_OPS, UNARY_OPS, VIEW_OPS,
)
from torchneuron.compiler.passes import Pass, register
from torchneuron.compiler.kernels import attention as attention_kernel
from torchneuron.compiler.kernels import mlp as mlp_kernel
from torchneuron.compiler.kernels.matmul import column_sum_ops
from torchneuron.compiler.kernels.rows import is_column_sum
from torchneuron.compiler.kernels import weight_gradient as weight_gradient_kernel
from torchneuron.compiler.transforms.tile import kernel_body, layout_of
from torchneuron.dialects.trn import build_kernel, build_yield
from torchneuron.target import get_target


@register
@dataclasses.dataclass
class Fuse(Pass):
    NAME = "trn-fuse"
    SUMMARY = ("Group trn ops into fused kernels (row-wise reductions, matmul + epilogue, "
               "elementwise chains, attention, matmul + rows)")
    matmul_epilogue: bool = True
    elementwise: bool = True
    rows: bool = True
    attention: bool = True
    # An attention kernel forms also where its probabilities are a result too (a training
    # step saves them for the backward): the kernel stores them as it computes them.
    attention_saved: bool = True
    # A matmul contracting the rows an attention kernel stores over their row dim (a softmax
    # backward's dK^T = Q^T @ dS) is computed inside it, accumulated over the query blocks.
    attention_contractions: bool = True
    # A matmul contracting an input the row part of such a kernel reads over its rows (a
    # softmax backward's dV = P^T @ dO) is computed inside it from the row tiles it loads.
    attention_input_contractions: bool = True
    matmul_rows: bool = True
    epilogue_producers: bool = True
    epilogue_results: bool = True
    epilogue_residuals: bool = True
    bias_gradients: bool = True
    weight_gradients: bool = True
    mlp: bool = True
    # A Linear whose result a second Linear reads and a training step saves: one kernel that
    # stores the result and hands its rows to the second on chip (kind mlp_saved).
    mlp_saved: bool = True
    # Where the only other reader of an mlp_saved kernel's hidden value is its weight gradient
    # (a backward's first Linear: dH^T @ X), that gradient is computed in the kernel from the
    # hidden value's rows, all kept on chip: the hidden value is neither stored nor loaded.
    mlp_saved_gradient: bool = True
    # An mlp kernel read only by a row-wise kernel over its output rows is computed inside
    # it, its output handed to the rows on chip.
    mlp_rows: bool = True
    # Likewise a Linear (one matmul kernel) read only by a row-wise kernel over its output
    # rows: an attention block's output projection and the residual add and norm after it.
    linear_rows: bool = True
    # A row-wise kernel that only an mlp kernel's first Linear reads (a pre-norm FFN's norm)
    # is computed in front of it, its rows handed to the Linear on chip.
    input_rows: bool = True
    # A row-wise kernel also yields the per-row values it computes that something outside
    # reads (a training step's layer norm saves each row's mean and 1/std for the
    # backward), instead of their being computed again from the rows by kernels of their own.
    row_results: bool = True
    # A sum over every row of a row value the kernel computes or loads (layer norm's weight
    # and bias gradients) is accumulated by the row-wise kernel as it goes, and yielded,
    # instead of a reduction kernel loading the rows again.
    column_sums: bool = True
    keep_roundings: bool = False
    target: str = ""

    def run(self, module: ir.Operation) -> None:
        for func in U.functions(module):
            narrow_matmul_operands(func)
            recognise_tanh_gelu(func, self.keep_roundings)
            recognise_gelu_derivative(func, self.keep_roundings)
            fold_scales_into_activations(func)
            if self.matmul_epilogue or self.elementwise:
                sink_views(func)
            fold_reshape_chains(func)
            if self.rows:
                budget = get_target(self.target or None).sbuf_partition_bytes // ROW_BUDGET_SHARE
                residuals = self.epilogue_residuals and self.matmul_epilogue
                for group in row_groups(func, budget, residuals, self.column_sums):
                    space = _row_space(next(op for op in group if op.name == "trn.reduce"
                                            and _row_space(op) is not None))
                    columns = _column_values(group, space)

                    def further(op, space=space, columns=columns) -> bool:
                        return op.results[0] in columns or \
                            (self.row_results and space.is_per_row(op.results[0]))
                    kernel = outline(group, kind="rows", keep_escaping=True,
                                     yield_escaping=further)
                    if not self.keep_roundings:
                        elide_intermediate_roundings(kernel)
                if residuals:
                    # A residual sum the rows read but left outside (see _grow_row_group)
                    # now moves into its matmul's shape, where it joins the epilogue.
                    sink_views(func)
                    fold_reshape_chains(func)
            # Cheap values read by several kernels are left out of the first round and
            # recomputed inside the kernels that read them; the second round outlines those
            # that some reader could not take in (a matmul's epilogue, a view).
            for recompute in (self.elementwise, False):
                groups = self.groups(func, recompute)
                # Ops of groups not outlined yet are never pulled into another kernel.
                grouped = {op for group in groups for op in group}
                for group in groups:
                    kernel = outline(group, recompute=recompute, grouped=grouped)
                    if not self.keep_roundings:
                        elide_intermediate_roundings(kernel)
            if self.attention and self.rows and self.matmul_epilogue:
                for scores, rows, output, at in attention_triples(
                        func, get_target(self.target or None), self.attention_saved):
                    merge_kernels((scores, rows, output), "attention", also=rows, at=at)
                if self.attention_saved and self.attention_contractions:
                    for kernel, contraction in row_contractions(
                            func, get_target(self.target or None)):
                        absorb_row_contraction(kernel, contraction)
                    if self.attention_input_contractions:
                        for kernel, contraction in input_contractions(
                                func, get_target(self.target or None)):
                            absorb_input_contraction(kernel, contraction)
            if self.matmul_rows and self.rows and self.matmul_epilogue:
                for pair in matmul_rows_pairs(func, get_target(self.target or None)):
                    merge_kernels(pair, "matmul_rows")
            if self.epilogue_producers and self.matmul_epilogue and self.elementwise:
                reshape_epilogue_producers(func)
                # One at a time: a merge replaces the matmul kernel another pair may name.
                while pairs := epilogue_producer_pairs(func):
                    merge_kernels(pairs[0], "matmul")
            if self.epilogue_results and self.matmul_epilogue and self.elementwise:
                # One at a time: a merge replaces the matmul kernel another pair may name.
                while pairs := epilogue_result_pairs(func):
                    merge_with_result(*pairs[0])
            if self.bias_gradients and self.matmul_epilogue:
                while pairs := bias_gradient_pairs(func):
                    merge_column_sum(*pairs[0])
            if self.weight_gradients and self.matmul_epilogue:
                for pair in weight_gradient_pairs(func, get_target(self.target or None)):
                    merge_weight_gradient(*pair)
            if self.mlp and self.matmul_epilogue:
                for pair in mlp_pairs(func, get_target(self.target or None)):
                    merge_kernels(pair, "mlp")
                if self.mlp_rows and self.rows:
                    for pair in mlp_rows_pairs(func, get_target(self.target or None)):
                        merge_producer_rows(pair, "mlp_rows")
            if self.input_rows and self.mlp and self.rows and self.matmul_epilogue:
                for pair in rows_mlp_pairs(func, get_target(self.target or None)):
                    merge_input_rows(*pair)
            if self.mlp_saved and self.matmul_epilogue:
                for pair in mlp_saved_pairs(func, get_target(self.target or None)):
                    merge_mlp_saved(*pair)
                if self.mlp_saved_gradient:
                    for pair in saved_gradient_pairs(func, get_target(self.target or None)):
                        merge_saved_gradient(*pair)
            if self.linear_rows and self.rows and self.matmul_epilogue:
                for pair in linear_rows_pairs(func, get_target(self.target or None)):
                    merge_producer_rows(pair, "linear_rows")

    def groups(self, func: ir.Operation, recompute: bool = False) -> list[list[ir.Operation]]:
        taken: set = set()
        groups = []
        for op in U.body_ops(func):
            if op in taken or op.name == "trn.kernel":
                continue
            if recompute and recomputable(op) and all(
                    U.operation(u.owner).name in ELEMENTWISE_OPS + ("trn.reduce",)
                    for u in op.results[0].uses):
                continue
            if op.name in ("trn.matmul", "trn.conv", "trn.pool"):
                group = [op] + (self._chain(op, taken, through_reduce=False)
                                if self.matmul_epilogue else [])
                if self.matmul_epilogue and self.elementwise:
                    group += _consumer_dag(group[-1], taken)
            elif op.name == "trn.reduce" or (not self.elementwise and op.name in ELEMENTWISE_OPS
                                             and op.name not in SOURCE_OPS):
                group = [op] + (self._chain(op, taken, through_reduce=False)
                                if self.elementwise else [])
            elif op.name in ELEMENTWISE_OPS and op.name not in SOURCE_OPS:
                group = _elementwise_dag(op, taken)
                if len(group) == 1:
                    group += self._chain(op, taken, through_reduce=True)
                else:
                    uses = list(group[-1].results[0].uses)
                    reduce = U.operation(uses[0].owner) if len(uses) == 1 else None
                    if reduce is not None and reduce.name == "trn.reduce" and \
                            reduce not in taken and reduce.parent == op.parent:
                        group += [reduce] + self._chain(reduce, taken, through_reduce=False)
            else:
                continue
            taken.update(group)
            groups.append(group)
        return groups

    @staticmethod
    def _chain(op: ir.Operation, taken: set, through_reduce: bool) -> list[ir.Operation]:
        """Elementwise ops consuming `op` one after another, each the only user of the last,
        and not already in a group; with `through_reduce`, the chain may pass one trn.reduce
        and go on over the reduced shape."""
        chain = []
        shape = U.shape(op.results[0])
        current = op
        while True:
            uses = list(current.results[0].uses)
            if len(uses) != 1:
                return chain
            user = U.operation(uses[0].owner)
            if user in taken or user.parent != op.parent:    # e.g. read by a row-wise kernel
                return chain
            if user.name == "trn.reduce" and through_reduce and \
                    user.operands[0] == current.results[0]:
                through_reduce = False
                shape = U.shape(user.results[0])
            elif user.name not in ELEMENTWISE_OPS or user.name in SOURCE_OPS \
                    or U.shape(user.results[0]) != shape:
                return chain
            chain.append(user)
            current = user


def sink_views(func: ir.Operation) -> None:
    """f(view(x)) -> view(f(x)) for a unary elementwise f that is the only user of a reshape
    or broadcast (elementwise ops do not care about shape):
    - after a reshape of a computed value, f then meets the value in its producer's shape and
      joins its epilogue (Linear -> view -> GELU);
    - before a broadcast, f runs over the source instead of the broadcast result (a
      per-channel scale converted to fp32 once, not once per pixel), and the broadcast stays
      a view that consumers fold into their access patterns.
    - a reshape of a computed value read by several elementwise ops (GPT-2's GELU reads the
      Linear's output three times: x^3, x + ..., 0.5 x) moves below each of them whose other
      operands are reshapes from the same shape: the whole DAG then runs in its producer's
      shape and can join its epilogue.
    A view whose unary chain is reduced stays (the rows keep the reduction's shape)."""
    # Each move takes an op one step toward its producer's shape; bound them all the same,
    # so that a rewrite undoing another is an error, not a hang.
    ops = U.body_ops(func)
    moves_left = 4 * len(ops) + 16
    # A move rewrites the view's user and what the views it erases read: a sweep goes on from
    # the view, or from a view an erased one read, and sweeps repeat from the top until one
    # moves nothing -- every view that can move has then moved, as when each move restarted
    # from the top (quadratic: 1.1 s of GPT-2's 1.3 s in trn-fuse; the same IR either way on
    # every workload of bench/perf.py).
    position, moved_in_sweep = 0, True
    while moved_in_sweep:
        position, moved_in_sweep = 0, False
        while position < len(ops):
            view = ops[position]
            move = _sink_view(view) if view.name in ("trn.reshape", "trn.broadcast") else None
            if move is None:
                position += 1
                continue
            moved_in_sweep = True
            moves_left -= 1
            if moves_left < 0:
                raise CompileError("moving views below elementwise ops did not settle",
                                   func.location)
            position = move.splice(ops, position)


@dataclasses.dataclass
class _ViewMove:
    """Sinking a view below its elementwise user, decided and not yet made: `rewrite()`
    makes it and returns the ops it created, which stand, in order, where `user` stood (it is
    erased); `erased` are the views erased with it."""
    user: ir.Operation
    erased: list
    rewrite: typing.Callable[[], list]

    def splice(self, ops: list, position: int) -> int:
        """Make the move and update `ops` (the block's ops, `ops[position]` the view) to the
        block as it is then; returns the position a sweep goes on from."""
        at = next(j for j in range(position, len(ops)) if ops[j] == self.user)
        gone = sorted((next(j for j in range(at, -1, -1) if ops[j] == op)
                       for op in self.erased), reverse=True)
        # A view that an erased view read may now have the one user a move needs.
        earlier = [next((j for j in range(position, -1, -1) if ops[j] == producer), position)
                   for producer in (U.defining_op(op.operands[0]) for op in self.erased)
                   if producer is not None and producer.name in VIEW_OPS]
        ops[at:at + 1] = self.rewrite()
        resume = min([position] + earlier)
        for j in gone:
            del ops[j]
            if j < resume:
                resume -= 1
        return resume


def _sink_view(view: ir.Operation) -> _ViewMove | None:
    """The move of one elementwise user of `view` (a reshape or broadcast) above it, where
    allowed (sink_views); None where none moves."""
    if view.name == "trn.reshape":
        move = _sink_shared_reshape(view)
        if move is not None:
            return move
    uses = list(view.results[0].uses)
    if len(uses) != 1:
        return None
    user = U.operation(uses[0].owner)
    if user.name not in UNARY_OPS or len(user.operands) != 1 or \
            user.parent != view.parent or _feeds_reduction(user):
        return None
    source = view.operands[0]
    producer = U.defining_op(source)
    if view.name == "trn.reshape" and (producer is None or producer.name in VIEW_OPS):
        return None         # a reshape only moves where its source is computed

    def rewrite() -> list:
        with ir.InsertionPoint(user), user.location:
            moved = U.create(user.name, [U.tensor_type(U.shape(source),
                                                       U.element_type(user.results[0]))],
                             [source], U.attributes_of(user))
            back = U.create(view.name, [user.results[0].type], [moved.results[0]],
                            U.attributes_of(view))
        user.results[0].replace_all_uses_with(back.results[0])
        user.erase()
        view.erase()
        return [moved, back]

    return _ViewMove(user, [view], rewrite)


def _sink_shared_reshape(view: ir.Operation) -> _ViewMove | None:
    """f(reshape(x), reshape(y), ...) -> reshape(f(x, y, ...)) for one elementwise user f of
    `view` (a reshape of a computed x) whose every operand is a reshape of a value of x's
    shape (`view` itself, or the moved result of another such f); what moved, or None.

    Other operands of f computed in f's shape (or arguments) are read through a new reshape:
    a residual add then joins the epilogue of the matmul whose output x is. An f whose chain
    is reduced stays, as in sink_views (moving GPT-2's residual adds, which its layer norms
    reduce, took a softmax backward's products out of its row-wise kernel in BERT's training
    step: 0.7 ms and 300 MB of transfers more)."""
    source = view.operands[0]
    producer = U.defining_op(source)
    if producer is None or producer.name in VIEW_OPS:
        return None
    shape = U.shape(source)
    # New reshapes only collapse dims, toward a view's source that has fewer: one made here is
    # then never moved below its user again (which would make one expanding them back).
    expands = len(U.shape(view.results[0])) > len(shape)
    for use in list(view.results[0].uses):
        user = U.operation(use.owner)
        if user.name not in ELEMENTWISE_OPS or user.name in SOURCE_OPS or \
                len(user.results) != 1 or user.parent != view.parent:
            continue
        if _feeds_reduction(user):
            continue
        operands, reshapes = [], []
        for v in user.operands:
            reshape = U.defining_op(v)
            if reshape is not None and reshape.name == "trn.reshape" and \
                    U.shape(reshape.operands[0]) == shape:
                operands.append(reshape.operands[0])
                if reshape not in reshapes:
                    reshapes.append(reshape)
            elif expands and (reshape is None or reshape.name not in VIEW_OPS) and \
                    U.shape(v) == U.shape(user.results[0]):
                operands.append(v)         # read through a reshape made below
            else:
                break
        else:
            # Reshapes read by this user alone go with it.
            erased = [r for r in reshapes
                      if all(U.operation(u.owner) == user for u in r.results[0].uses)]

            def rewrite(user=user, operands=operands, erased=erased) -> list:
                created = []
                with ir.InsertionPoint(user), user.location:
                    for i, v in enumerate(operands):
                        if U.shape(v) != shape:
                            created.append(U.create("trn.reshape", [U.tensor_type(
                                shape, U.element_type(v))], [v], {}))
                            operands[i] = created[-1].results[0]
                    moved = U.create(user.name, [U.tensor_type(
                        shape, U.element_type(user.results[0]))], operands,
                        U.attributes_of(user))
                    back = U.create("trn.reshape", [user.results[0].type],
                                    [moved.results[0]], {})
                user.results[0].replace_all_uses_with(back.results[0])
                user.erase()
                for reshape in erased:
                    reshape.erase()
                return created + [moved, back]

            return _ViewMove(user, erased, rewrite)
    return None


def fold_reshape_chains(func: ir.Operation) -> None:
    """reshape(reshape(x)) -> reshape(x), and a reshape to its source's own type -> the
    source. Linear -> GELU -> Linear over [batch, tokens, features] leaves such a round trip
    once sink_views moved the GELU into the first matmul's shape (the view to 3-D for the
    GELU, back to 2-D for the next addmm): without it the second matmul reads a reshape of
    the first's result, not the result, and the pair does not form an mlp kernel."""
    for op in U.body_ops(func):
        if op.name != "trn.reshape":
            continue
        producer = U.defining_op(op.operands[0])
        if producer is not None and producer.name == "trn.reshape":
            op.operands[0] = producer.operands[0]
            if not list(producer.results[0].uses):
                producer.erase()
        source = op.operands[0]
        if source.type == op.results[0].type:
            op.results[0].replace_all_uses_with(source)
            op.erase()


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_TANH_CUBIC = 0.044715
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


class _Walk:
    """Walks back from a value through the ops of a written-out formula, collecting them in
    `taken` (consumers before producers). The steps compute in fp32; roundings of a bf16
    model between them (each read by the next step alone) are walked through too, as a fused
    kernel elides them anyway (not with `keep_roundings`)."""

    def __init__(self, keep_roundings: bool):
        self.keep_roundings = keep_roundings
        self.taken: list[ir.Operation] = []

    def step(self, value: ir.Value) -> ir.Operation | None:
        """The op computing `value`, through a narrowing rounding read only by it."""
        producer = U.defining_op(value)
        if producer is not None and producer.name == "trn.convert" and \
                not self.keep_roundings and _width(producer.operands[0]) > _width(value) and \
                isinstance(U.element_type(value), ir.FloatType):
            self.taken.append(producer)
            producer = U.defining_op(producer.operands[0])
        if producer is not None:
            self.taken.append(producer)
        return producer

    def scalar_op(self, value: ir.Value, op: str, constant: float) -> ir.Value | None:
        """The operand of `value` = operand <op> constant (a tensor_scalar), else None."""
        producer = self.step(value)
        if producer is None or producer.name != "trn.tensor_scalar" or \
                U.str_attr(producer, "op") != op or \
                ir.BoolAttr(producer.attributes["reverse"]).value or \
                not math.isclose(U.float_attr(producer, "scalar"), constant, rel_tol=1e-6):
            return None
        return producer.operands[0]

    def activation_of(self, value: ir.Value, func: str, scale: float) -> ir.Value | None:
        """s where value = func(scale * s) without bias, the scaling a multiply (tensor_scalar)
        or the activation's scale."""
        act = self.step(value)
        if act is None or act.name != "trn.activation" or U.str_attr(act, "func") != func \
                or U.float_attr(act, "bias") != 0.0:
            return None
        own = U.float_attr(act, "scale")
        if math.isclose(own, scale, rel_tol=1e-6):
            return act.operands[0]
        return self.scalar_op(act.operands[0], "mul", scale) if own == 1.0 else None

    def product(self, value: ir.Value) -> tuple[ir.Value, ir.Value] | None:
        """The operands of `value` = a * b (a tensor_tensor), else None."""
        producer = self.step(value)
        if producer is None or producer.name != "trn.tensor_tensor" or \
                U.str_attr(producer, "op") != "mul":
            return None
        return tuple(producer.operands)

    def replaceable(self) -> bool:
        """Every step but the last-walked input is read by the next one alone, in fp32."""
        return all(len(list(op.results[0].uses)) == 1 for op in self.taken[1:]) and \
            all(op.name == "trn.convert" or str(U.element_type(op.results[0])) == "f32"
                for op in self.taken)


def _replace_with_activation(root: ir.Operation, x: ir.Value, func: str,
                             taken: list[ir.Operation]) -> None:
    """`root`'s value becomes activation func(x); the formula's ops (`taken`) go."""
    with ir.InsertionPoint(root), root.location:
        act = U.create("trn.activation", [root.results[0].type], [x],
                       {"func": U.string(func), "scale": U.f32(1.0), "bias": U.f32(0.0)})
    root.results[0].replace_all_uses_with(act.results[0])
    for op in sorted(set(taken), key=taken.index):     # consumers before producers
        op.erase()


def recognise_tanh_gelu(func: ir.Operation, keep_roundings: bool = False) -> None:
    """0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) written out in ops (GPT-2's gelu_new)
    -> activation(x) with func gelu_tanh: ACT's table computes that function in one pass
    (within 2 ulp of it), where the written-out form took eight ACT/DVE passes over the
    tensor. Only where every step is read by the next one alone (see _Walk)."""
    def match(y_op: ir.Operation, half: ir.Value, one_plus: ir.Value) -> tuple | None:
        walk = _Walk(keep_roundings)
        walk.taken.append(y_op)
        x = walk.scalar_op(half, "mul", 0.5)
        h = walk.scalar_op(one_plus, "add", 1.0) if x is not None else None
        s = walk.activation_of(h, "tanh", _SQRT_2_OVER_PI) if h is not None else None
        add = walk.step(s) if s is not None else None
        if add is None or add.name != "trn.tensor_tensor" or U.str_attr(add, "op") != "add":
            return None
        terms = list(add.operands)
        if x not in terms:          # x + 0.044715 x^3 of the same x that 0.5 x reads
            return None
        cubic = terms[1] if terms[0] == x else terms[0]
        cube = walk.scalar_op(cubic, "mul", _GELU_TANH_CUBIC)
        if cube is None or walk.scalar_op(cube, "pow", 3.0) != x:
            return None
        return x, walk

    for y_op in U.body_ops(func):
        if y_op.name != "trn.tensor_tensor" or U.str_attr(y_op, "op") != "mul":
            continue
        for half, one_plus in (tuple(y_op.operands), tuple(y_op.operands)[::-1]):
            found = match(y_op, half, one_plus)
            if found is not None and found[1].replaceable():
                _replace_with_activation(y_op, found[0], "gelu_tanh", found[1].taken)
                break


def recognise_gelu_derivative(func: ir.Operation, keep_roundings: bool = False) -> None:
    """GELU's derivative as its backward writes it out, Phi(x) + x phi(x) =
    0.5 (1 + erf(x / sqrt 2)) + x * exp(-x^2 / 2) / sqrt(2 pi) -> activation(x) with func
    gelu_dx (NKI's nki.language.gelu_dx): one ACT pass where the written-out form took two
    ACT functions and six ACT/DVE passes, two of them fp32 tensor_tensors at half rate, over
    the [tokens, hidden] tensor of every MLP's backward. Only where every step is read by
    the next one alone (see _Walk)."""
    def cdf(walk: _Walk, value: ir.Value) -> ir.Value | None:
        """x where value = 0.5 (1 + erf(x / sqrt 2))."""
        a = walk.scalar_op(value, "mul", 0.5)
        e = walk.scalar_op(a, "add", 1.0) if a is not None else None
        return walk.activation_of(e, "erf", _INV_SQRT_2) if e is not None else None

    def x_density(walk: _Walk, value: ir.Value, x: ir.Value) -> bool:
        """Whether value = x * exp(-x^2 / 2) / sqrt(2 pi), of this x."""
        factors = walk.product(value)
        if factors is None or x not in factors:
            return False
        density = factors[1] if factors[0] == x else factors[0]
        e = walk.scalar_op(density, "mul", _INV_SQRT_2PI)
        square = walk.activation_of(e, "exp", -0.5) if e is not None else None
        if square is None:
            return False
        squared = walk.step(square)
        if squared is None:
            return False
        if squared.name == "trn.activation":
            return U.str_attr(squared, "func") == "square" and squared.operands[0] == x and \
                U.float_attr(squared, "scale") == 1.0 and U.float_attr(squared, "bias") == 0.0
        return squared.name == "trn.tensor_tensor" and U.str_attr(squared, "op") == "mul" \
            and list(squared.operands) == [x, x]

    for add in U.body_ops(func):
        if add.name != "trn.tensor_tensor" or U.str_attr(add, "op") != "add":
            continue
        for first, second in (tuple(add.operands), tuple(add.operands)[::-1]):
            walk = _Walk(keep_roundings)
            walk.taken.append(add)
            x = cdf(walk, first)
            if x is not None and x_density(walk, second, x) and walk.replaceable():
                _replace_with_activation(add, x, "gelu_dx", walk.taken)
                break


def fold_scales_into_activations(func: ir.Operation) -> None:
    """activation(x * c) -> activation(x) with scale c, for an fp32 multiply by a constant
    whose only user is an activation of scale 1: ACT computes func(x * scale + bias) with the
    product rounded to fp32 first, the multiply's own rounding (GELU's erf(x / sqrt 2), exp(-x^2
    / 2) in its backward), so one instruction per tile goes."""
    for act in U.body_ops(func):
        if act.name != "trn.activation" or U.float_attr(act, "scale") != 1.0:
            continue
        mul = U.defining_op(act.operands[0])
        if mul is None or mul.name != "trn.tensor_scalar" or U.str_attr(mul, "op") != "mul" \
                or str(U.element_type(mul.results[0])) != "f32" \
                or len(list(mul.results[0].uses)) != 1:
            continue
        act.attributes["scale"] = U.f32(U.float_attr(mul, "scalar"))
        act.operands[0] = mul.operands[0]
        mul.erase()


_NARROW_FLOATS = ("bf16", "f16")


def narrow_matmul_operands(func: ir.Operation) -> None:
    """A matmul of two operands widened from the same 16-bit float type to fp32 (through
    views) takes the 16-bit values instead: PE converts its inputs to fp32 exactly and
    accumulates in fp32 either way, so the result is the same, at the 16-bit rate and with
    half the bytes (scaled_dot_product_attention's math form widens its inputs). Beside an
    fp32 operand, a widened one is read narrow too (the same fp32 products at the fp32 rate,
    with no widening kernel: GPT-2's attention probabilities times its widened values)."""
    for matmul in U.body_ops(func):
        if matmul.name != "trn.matmul":
            continue
        sources = [_widened_source(v) for v in matmul.operands]
        if all(s is None for s in sources):
            continue
        if any(s is None for s in sources):
            plain = matmul.operands[[s is None for s in sources].index(True)]
            if str(U.element_type(plain)) != "f32":
                continue
        elif str(U.element_type(sources[0][0])) != str(U.element_type(sources[1][0])):
            continue
        old = list(matmul.operands)
        with ir.InsertionPoint(matmul), matmul.location:
            for index, source in enumerate(sources):
                if source is None:
                    continue
                narrow, views = source
                value = narrow
                for view in views:
                    value = U.create(view.name, [U.tensor_type(U.shape(view.results[0]),
                                                               U.element_type(narrow))],
                                     [value], U.attributes_of(view)).results[0]
                matmul.operands[index] = value
        for index, value in enumerate(old):   # the widening chains nothing else reads
            if sources[index] is None:
                continue
            producer = U.defining_op(value)
            while producer is not None and not list(producer.results[0].uses):
                source = producer.operands[0]
                producer.erase()
                producer = U.defining_op(source)


def _widened_source(value: ir.Value):
    """(16-bit float value, view ops from it to `value`) when `value` is a 16-bit float
    converted to fp32 and then only viewed, else None."""
    views = []
    while True:
        producer = U.defining_op(value)
        if producer is None:
            return None
        if producer.name in VIEW_OPS:
            views.append(producer)
            value = producer.operands[0]
            continue
        if producer.name != "trn.convert" or str(U.element_type(value)) != "f32":
            return None
        source = producer.operands[0]
        if str(U.element_type(source)) not in _NARROW_FLOATS:
            return None
        return source, list(reversed(views))


def _epilogue_value(value: ir.Value) -> bool:
    """Whether `value` is a matmul's or convolution's result, possibly viewed and passed
    through elementwise ops (bias, activation, rounding), with no other user on the way: an
    elementwise op reading it can join that kernel's epilogue."""
    for _ in range(8):
        producer = U.defining_op(value)
        if producer is None or len(list(value.uses)) != 1:
            return False
        if producer.name in ("trn.matmul", "trn.conv"):
            return True
        if producer.name == "trn.reshape" or producer.name in UNARY_OPS:
            value = producer.operands[0]
        elif producer.name == "trn.tensor_tensor":
            computed = [v for v in producer.operands if U.defining_op(v) is not None
                        and U.defining_op(v).name not in VIEW_OPS + SOURCE_OPS]
            if len(computed) != 1:
                return False
            value = computed[0]
        else:
            return False
    return False


def _feeds_reduction(op: ir.Operation) -> bool:
    """Whether `op`'s result, through a chain of unary elementwise ops, is reduced: then the
    chain is the start of a row-wise group, which wants it in the reduction's shape. (A
    reduction inside a kernel formed already reads the value from HBM: it does not count.)"""
    while True:
        users = [U.operation(u.owner) for u in op.results[0].uses]
        if any(u.name == "trn.reduce" and u.parent == op.parent for u in users):
            return True
        if len(users) != 1 or users[0].name not in UNARY_OPS or users[0].parent != op.parent:
            return False
        op = users[0]


def _elementwise_dag(seed: ir.Operation, taken: set) -> list[ir.Operation]:
    """Elementwise ops of the seed's shape that read it or one another (a DAG, e.g. GELU's
    backward reading its input three times), in block order, ending with the one value used
    outside: an op joins when it reads the group and nothing else it reads depends on the
    group; the group is then cut before any member (but the last) used outside it."""
    return _cut_escaping([seed] + _elementwise_readers(seed, taken))


def _consumer_dag(root: ir.Operation, taken: set) -> list[ir.Operation]:
    """Elementwise ops of the root's shape that together consume every use of the root's
    value (a DAG: GELU's tanh form reads a Linear's output three times), in block order,
    with only the last used outside; [] when there is none such. An op joins when it reads
    the root or a member and nothing it reads depends on the root otherwise."""
    uses = list(root.results[0].uses)
    if len(uses) < 2:
        return []
    members = _cut_escaping(_elementwise_readers(root, taken))
    inside = set(members)
    if not members or any(U.operation(u.owner) not in inside for u in uses):
        return []
    return members


def _elementwise_readers(root: ir.Operation, taken: set) -> list[ir.Operation]:
    """The ops after `root` in its block, in order, of the root's shape, elementwise and not
    in `taken`, that read the root or one another and read nothing else depending on them."""
    func_body = [o.operation if isinstance(o, ir.OpView) else o
                 for o in root.parent.regions[0].blocks[0].operations]
    position = {o: i for i, o in enumerate(func_body)}
    shape = U.shape(root.results[0])
    members: list[ir.Operation] = []
    values = {root.results[0]}
    tainted: set = set()
    for op in func_body[position[root] + 1:]:
        if not any(v in values or v in tainted for v in op.operands):
            continue
        if op.name in ELEMENTWISE_OPS and op.name not in SOURCE_OPS and op not in taken \
                and len(op.results) == 1 and U.shape(op.results[0]) == shape \
                and not any(v in tainted for v in op.operands):
            members.append(op)
            values.add(op.results[0])
        else:
            tainted.update(op.results)
    return members


def _cut_escaping(members: list[ir.Operation]) -> list[ir.Operation]:
    """`members` cut before the first one (but the last) used outside them, repeatedly."""
    while True:
        inside = set(members)
        escaping = [i for i, m in enumerate(members[:-1])
                    if any(U.operation(u.owner) not in inside for u in m.results[0].uses)]
        if not escaping:
            return members
        members = members[:escaping[0] + 1]


def outline(group: list[ir.Operation], kind: str | None = None,
            keep_escaping: bool = False, recompute: bool = False,
            grouped: set = frozenset(),
            yield_escaping: typing.Callable[[ir.Operation], bool] | None = None) -> ir.Operation:
    """Replace `group` (ops of one block, in order, whose last op's result is the only value
    used outside) by a trn.kernel computing it. With `keep_escaping`, other members may have
    users outside too: those members (and the members they read) stay in place for them,
    except members for which `yield_escaping` holds (those of the first one's type), which
    the kernel yields after the last op's result, for their users outside the group.

    View ops feeding the group from outside are copied into the kernel (recursively), so the
    kernel reads the views' sources from above. With `recompute`, so are `recomputable` ops
    of the group's iteration shape that an elementwise or reduction group reads: the kernel
    computes them again instead of reading them (they stay in place while other ops use
    them), unless they belong to a group of `grouped`."""
    members = list(group)
    inside = set(members)
    views: list[ir.Operation] = []
    space = _iteration_shape(members) if recompute else None

    def pull_views(value: ir.Value) -> None:
        producer = U.defining_op(value)
        if producer is None or producer in inside:
            return
        if producer.name in VIEW_OPS + SOURCE_OPS or (
                space is not None and producer not in grouped and recomputable(producer)
                and U.shape(producer.results[0]) == space):
            inside.add(producer)
            for operand in producer.operands:
                pull_views(operand)
            views.append(producer)

    for op in members:
        for v in op.operands:
            pull_views(v)
    last = members[-1]
    member_set = set(members)
    # (The kernel goes where `last` is: what reads a further result must come after it.)
    position = {op: i for i, op in enumerate(U.body_ops(U.operation(last.parent)))} \
        if yield_escaping is not None else {}

    def read_after_last(op: ir.Operation) -> bool:
        outside = [U.operation(u.owner) for u in op.results[0].uses
                   if U.operation(u.owner) not in member_set]
        return bool(outside) and all(
            position.get(_top_level(user, position), -1) > position[last] for user in outside)
    yielded = [op for op in members[:-1] if yield_escaping is not None and yield_escaping(op)
               and read_after_last(op)]
    # (Those of the first one's type are yielded, one group of the kernel's results
    # (dialects/trn.py); the others stay as they were.)
    yielded = [op for op in yielded if op.results[0].type == yielded[0].results[0].type]
    with ir.InsertionPoint(last), last.location:
        kernel = build_kernel(kind or _kind(members),
                              [last.results[0].type] + [op.results[0].type for op in yielded])
    block = kernel.regions[0].blocks[0]
    mapping: dict = {}
    with ir.InsertionPoint(block):
        for op in views + members:
            clone = U.clone_with_operands(op, [mapping.get(v, v) for v in op.operands])
            mapping[op.results[0]] = clone.results[0]
        build_yield([mapping[op.results[0]] for op in [last] + yielded], loc=last.location)
    # A member kept outside for its users there, and read by nothing else inside, is
    # computed outside only (a column sum of a different type than the kernel's further
    # results).
    for op in reversed(list(block.operations)[:-1]):
        op = op.operation if isinstance(op, ir.OpView) else op
        if not any(list(r.uses) for r in op.results):
            op.erase()
    last.results[0].replace_all_uses_with(kernel.results[0])
    for result, op in zip(list(kernel.results)[1:], yielded):
        for user, index in [(U.operation(u.owner), u.operand_number)
                            for u in op.results[0].uses]:
            if user not in member_set:
                user.operands[index] = result
    kept = _escaping_closure(members[:-1], inside) if keep_escaping else set()
    for op in reversed(members):
        if op not in kept:
            op.erase()
    for op in reversed(views):
        if not list(op.results[0].uses):
            op.erase()
    return kernel


# A value that several kernels read is recomputed in each of them, not stored to HBM and
# read back, when that is cheap: at most this many elementwise ops of its shape compute it,
# outside any kernel, from at most one tensor of its size (the rest broadcast smaller values
# or are generated on chip). Its kernels then read that one tensor where they would have read
# the value (no wider: a rounding to bf16 is not recomputed from its fp32 source), so no
# more bytes move, and the value's store and reads are saved: layer norm's
# backward reads the normalised input (x - mean) * rstd and the fp32 gradient three times.
RECOMPUTE_MAX_OPS = 6


def recomputable(op: ir.Operation) -> bool:
    if op.name not in ELEMENTWISE_OPS or op.name in SOURCE_OPS or len(op.results) != 1 \
            or U.operation(op.parent).name != "func.func":
        return False
    shape = U.shape(op.results[0])
    size = math.prod(shape)
    computed: set = set()
    full_reads: set = set()
    stack = [op]
    while stack:
        current = stack.pop()
        if current in computed:
            continue
        computed.add(current)
        if len(computed) > RECOMPUTE_MAX_OPS:
            return False
        for value in current.operands:
            producer = U.defining_op(value)
            if producer is not None and producer.name in ELEMENTWISE_OPS and \
                    producer.name not in SOURCE_OPS and \
                    U.operation(producer.parent).name == "func.func" and \
                    U.shape(value) == shape:
                stack.append(producer)
                continue
            while producer is not None and producer.name in VIEW_OPS:
                value = producer.operands[0]
                producer = U.defining_op(value)
            if producer is not None and producer.name in SOURCE_OPS:
                continue
            if math.prod(U.shape(value)) >= size:
                full_reads.add(value)
                if len(full_reads) > 1 or _width(value) > _width(op.results[0]):
                    return False
    return True


def _width(value: ir.Value) -> int:
    """Bytes per element of a tensor value (0 for element types without a storage size)."""
    try:
        return U.element_bytes(U.element_type(value))
    except ValueError:
        return 0


def _iteration_shape(members: list[ir.Operation]) -> list[int] | None:
    """The shape an elementwise or reduction group computes over (a reduction's input);
    None for groups built around a matmul, convolution or pooling."""
    names = {op.name for op in members}
    if names & {"trn.matmul", "trn.conv", "trn.pool"}:
        return None
    for op in members:
        if op.name == "trn.reduce":
            return U.shape(op.operands[0])
    return U.shape(members[-1].results[0])


def elide_intermediate_roundings(kernel: ir.Operation) -> None:
    """Bypass float-narrowing trn.converts whose every user is an elementwise op of the
    kernel: those users read the fp32 value. A convert left converting to its source's own
    type (a bf16 result widened back to fp32, once its rounding is gone) goes as well."""
    for op in list(kernel.regions[0].blocks[0].operations):
        op = op.operation if isinstance(op, ir.OpView) else op
        if op.name != "trn.convert":
            continue
        source, result = op.operands[0], op.results[0]
        wide, narrow = U.element_type(source), U.element_type(result)
        if wide == narrow and list(result.uses) and \
                all(U.operation(u.owner).name != "trn.yield" for u in result.uses):
            result.replace_all_uses_with(source)
            op.erase()
            continue
        if not (isinstance(wide, ir.FloatType) and isinstance(narrow, ir.FloatType)
                and wide.width > narrow.width):
            continue
        users = [U.operation(u.owner) for u in result.uses]
        if users and all(u.name in ELEMENTWISE_OPS for u in users):
            result.replace_all_uses_with(source)
            op.erase()


def _escaping_closure(members: list[ir.Operation], inside: set) -> set:
    """Members used outside the group, with the members they read (transitively)."""
    member_set = set(members)
    kept: set = set()
    stack = [op for op in members
             if any(U.operation(u.owner) not in inside for u in op.results[0].uses)]
    while stack:
        op = stack.pop()
        if op in kept:
            continue
        kept.add(op)
        for v in op.operands:
            producer = U.defining_op(v)
            if producer is not None and producer in member_set:
                stack.append(producer)
    return kept


# Row-wise groups may use 1/ROW_BUDGET_SHARE of a partition's SBUF for their row tiles (the
# rest double-buffers them and serves the other kernels' tiles).
ROW_BUDGET_SHARE = 4
_ROW_BYTES = 4          # row tiles are held in fp32 (engines compute in fp32)


@dataclasses.dataclass
class _RowSpace:
    """An iteration space S = K x R whose rows (R, the trailing `len(S) - kept` dims) are
    reduced: a value of shape S is a row value, one of shape K (or K x 1...) a per-row one."""
    shape: tuple
    kept: int

    @property
    def row_elements(self) -> int:
        n = 1
        for size in self.shape[self.kept:]:
            n *= size
        return n

    def is_row(self, value: ir.Value) -> bool:
        return tuple(U.shape(value)) == self.shape

    def is_per_row(self, value: ir.Value) -> bool:
        shape = tuple(U.shape(value))
        return shape[:self.kept] == self.shape[:self.kept] and \
            len(shape) <= len(self.shape) and all(n == 1 for n in shape[self.kept:])


def _row_space(reduce: ir.Operation) -> _RowSpace | None:
    """The row space a trn.reduce reduces the rows of: its dims must be the trailing ones."""
    shape = tuple(U.shape(reduce.operands[0]))
    dims = sorted(U.array_attr(reduce, "dimensions"))
    if not dims or dims != list(range(dims[0], len(shape))) or dims[0] == 0:
        return None
    return _RowSpace(shape, dims[0])


def _row_member(op: ir.Operation, space: _RowSpace) -> bool:
    """Whether `op` computes inside `space`: an elementwise op over rows or over per-row
    values, a reduction of its rows, a reshape between per-row shapes, or a broadcast of a
    per-row value over the rows."""
    if len(op.results) != 1 or not isinstance(op.results[0].type, ir.RankedTensorType):
        return False
    result = op.results[0]
    if op.name in ELEMENTWISE_OPS and op.name not in SOURCE_OPS:
        return space.is_row(result) or space.is_per_row(result)
    if op.name == "trn.reduce":
        other = _row_space(op)
        return other is not None and other == space
    if op.name == "trn.reshape":
        return space.is_per_row(op.operands[0]) and space.is_per_row(result)
    if op.name == "trn.broadcast":
        return tuple(U.shape(op.operands[0])) == space.shape[:space.kept] and \
            space.is_row(result) and \
            U.array_attr(op, "dimensions") == list(range(space.kept, len(space.shape)))
    return False


def row_groups(func: ir.Operation, budget_bytes: int, epilogue_residuals: bool = True,
               column_sums: bool = True):
    """Yield row-wise groups one at a time (each is outlined before the next is formed, as
    members kept for outside users may seed a later group). `epilogue_residuals`,
    `column_sums`: see _grow_row_group."""
    tried: set = set()
    while True:
        group = None
        for op in U.body_ops(func):
            if op.name == "trn.reduce" and op not in tried:
                tried.add(op)
                group = _grow_row_group(func, op, budget_bytes, epilogue_residuals,
                                        column_sums)
                if group is not None:
                    break
        if group is None:
            return
        yield group


def _grow_row_group(func: ir.Operation, seed: ir.Operation, budget_bytes: int,
                    epilogue_residuals: bool = True,
                    column_sums: bool = True) -> list[ir.Operation] | None:
    space = _row_space(seed)
    if space is None:
        return None
    body = U.body_ops(func)
    position = {op: i for i, op in enumerate(body)}
    members = {seed}
    values = {seed.results[0]}
    row_leaves: set = set()

    def row_tiles(extra_members: int = 0, extra_leaves=()) -> int:
        # A broadcast per-row value is read as a per-partition operand, never materialised.
        rows = sum(1 for op in members if op.name not in ("trn.reduce", "trn.broadcast")
                   and space.is_row(op.results[0]))
        return rows + extra_members + len(row_leaves | set(extra_leaves))

    def fits(count: int) -> bool:
        return count * space.row_elements * _ROW_BYTES <= budget_bytes

    if not fits(row_tiles(extra_leaves=[seed.operands[0]])):
        return None
    row_leaves.add(seed.operands[0])
    # Forward, in block order: an op joins when it reads the group and everything else it
    # reads is independent of the group (else it, and all that reads it, stays outside).
    # Only the readers of the group's values and of what they taint can join or be tainted:
    # they are visited in block order through those values' uses (a heap of positions; a
    # reader comes after what it reads). Only a reader of a member can join, so the walk
    # ends when none is left to visit: what remains would only spread the taint, through the
    # rest of the graph (GPT-2 small: 37 groups, each tainting most of 3,000 ops, were
    # most of trn-fuse's time when the rest of the block was scanned for each).
    tainted: set = set()
    pending: list[int] = []
    queued: set[int] = set()
    member_readers: set[int] = set()     # queued positions that read a member

    def queue_readers(value: ir.Value, of_member: bool) -> None:
        for use in value.uses:
            at = position.get(U.operation(use.owner))    # (None: inside a kernel's body)
            if at is None:
                continue
            if at not in queued:
                queued.add(at)
                heapq.heappush(pending, at)
            if of_member:
                member_readers.add(at)

    queue_readers(seed.results[0], True)
    while pending and member_readers:
        at = heapq.heappop(pending)
        op = body[at]
        if at in member_readers:         # (one that reads no member cannot join)
            member_readers.discard(at)
            outside = [v for v in op.operands if v not in values]
            leaves = [v for v in outside if space.is_row(v)]
            row_op = op.name != "trn.reduce" and op.results and space.is_row(op.results[0])
            if not any(v in tainted for v in op.operands) and _row_member(op, space) and \
                    fits(row_tiles(int(bool(row_op)), leaves)):
                members.add(op)
                values.add(op.results[0])
                row_leaves.update(leaves)
                queue_readers(op.results[0], True)
                continue
        tainted.update(op.results)
        for result in op.results:
            queue_readers(result, False)
    # Backward: producers all of whose users are members (reductions of these rows too: layer
    # norm's backward reduces two row values). Elementwise producers read outside as well
    # are recomputed here when they read at most one row tensor, no wider than their result,
    # besides broadcast per-row values (then the kernel reads that tensor instead of the
    # producer's result: no more bytes), and so is a sum read outside (or its rounding:
    # GPT-2's residual add, which the next residual add reads as well), so that the rows
    # need not wait for its kernel; what a recomputed producer reads is not pulled in unless
    # all its users are members. With `epilogue_residuals`, a sum with an operand that a
    # matmul's epilogue computes (GPT-2's attention and MLP outputs) is not recomputed: it
    # joins that epilogue (Fuse.run), and the rows read the one tensor the matmul kernel
    # stores, where recomputing it read two -- besides the kernel of its own that loaded
    # both again to store it: dumped graphs, GPT-2's DMA bytes 1.48x -> 1.33x compulsory,
    # BERT's training step 3072 -> 2968 us.
    def reads_one_row(op: ir.Operation) -> bool:
        rows = [w for w in op.operands if space.is_row(w)
                and not (U.defining_op(w) is not None
                         and U.defining_op(w).name == "trn.broadcast")]
        return op.name != "trn.reduce" and len(rows) <= 1 and \
            all(_width(w) <= _width(op.results[0]) for w in rows)

    def is_add(op: ir.Operation | None) -> bool:
        return op is not None and op.name == "trn.tensor_tensor" and \
            U.str_attr(op, "op") == "add"

    def cheap_shared(producer: ir.Operation) -> bool:
        add = U.defining_op(producer.operands[0]) if producer.name == "trn.convert" \
            else producer
        return is_add(add) and not (epilogue_residuals and
                                    any(_epilogue_value(v) for v in add.operands))

    changed = True
    while changed:
        changed = False
        # In block order: which producers fit the budget depends on the order they are
        # tried in, and a set of ops iterates in address order, which varies between runs.
        for op in sorted(members, key=position.__getitem__):
            for v in op.operands:
                producer = U.defining_op(v)
                if producer is None or producer in members or producer not in position \
                        or not _row_member(producer, space):
                    continue
                if not all(U.operation(u.owner) in members for u in producer.results[0].uses) \
                        and not (reads_one_row(producer) or cheap_shared(producer)):
                    continue
                leaves = [w for w in producer.operands if space.is_row(w)]
                trial = row_leaves - {v} | set(leaves)
                if not fits(row_tiles(1 if space.is_row(v) else 0) - len(row_leaves)
                            + len(trial)):
                    continue
                members.add(producer)
                values.add(v)
                row_leaves = trial
                changed = True
    # A rounding pulled in whose wider source stayed outside is read rounded instead: the
    # kernel would otherwise read the source, more bytes, and from a kernel of its own.
    for op in list(members):
        if op.name == "trn.convert" and op.operands[0] not in values and \
                _width(op.operands[0]) > _width(op.results[0]):
            members.discard(op)
    ordered = sorted(members, key=position.__getitem__)
    # Worth a kernel of its own only when per-row values come back to the rows (a
    # broadcast) or several reductions share the rows; else the reduction kernel serves.
    if not any(op.name == "trn.broadcast" for op in ordered) and \
            sum(op.name == "trn.reduce" for op in ordered) < 2:
        return None
    while ordered[-1].name in VIEW_OPS:     # a kernel's result is computed, not a view
        ordered.pop()
    if not column_sums:
        return ordered
    # With `column_sums`: a sum over every row (all of K) of a row value the group computes
    # or loads, or of one elementwise op of such values, and the unary ops after the sum,
    # join the group ahead of its result: the kernel accumulates the sum on PE as its tiles
    # go by (compiler/kernels/rows.py) and yields it, instead of a reduction kernel loading
    # the rows again (layer norm's weight and bias gradients, sums over tokens of dy * xhat
    # and of dy, beside its input gradient). Only where what reads the sum comes after the
    # group's result, where the kernel goes, and the sum does not read that result.
    last = ordered[-1]
    available = {op.results[0] for op in ordered} | row_leaves
    columns: list[ir.Operation] = []
    added_rows = 0
    for op in body:
        if op in members or not is_column_sum(op, space.shape, space.kept):
            continue
        chain = []
        summed = op.operands[0]
        if summed not in available:
            producer = U.defining_op(summed)
            if producer is None or producer not in position or \
                    producer.name not in ELEMENTWISE_OPS or producer.name in SOURCE_OPS or \
                    len(list(summed.uses)) != 1 or \
                    not all(v in available for v in producer.operands) or \
                    not fits(row_tiles(added_rows + 1)):
                continue
            chain.append(producer)
        chain.append(op)
        current = op
        while True:
            uses = list(current.results[0].uses)
            user = U.operation(uses[0].owner) if len(uses) == 1 else None
            if user is None or user.name not in UNARY_OPS or user not in position or \
                    U.shape(user.results[0]) != U.shape(op.results[0]):
                break
            chain.append(user)
            current = user
        readers = [_top_level(U.operation(u.owner), position) for u in current.results[0].uses]
        if last.results[0] in [v for c in chain for v in c.operands] or not readers or \
                any(r is None or position[r] <= position[last] for r in readers):
            continue
        added_rows += chain.index(op)        # the product summed is one more row tile
        columns += chain
    return ordered[:-1] + columns + [last]


def _column_values(group: list[ir.Operation], space: _RowSpace) -> set:
    """The values of a row-wise group computed from sums over every row (see
    _grow_row_group's `column_sums`)."""
    kept_dims = list(range(space.kept))
    values: set = set()
    for op in group:
        if (op.name == "trn.reduce" and
                sorted(U.array_attr(op, "dimensions")) == kept_dims) or \
                any(v in values for v in op.operands):
            values.add(op.results[0])
    return values


def attention_triples(func: ir.Operation, target, saved: bool = True) -> list[tuple]:
    """(scores, rows, output, at) kernel triples that form an attention kernel, with the op
    before which it goes: `scores` a matmul kernel [.., Sq, Sk] whose only reader is `rows`,
    a row-wise kernel over rows of Sk; `output` a matmul kernel whose left operand is the rows
    result through reshapes of its batch dims, [.., Sq, Sk] x [.., Sk, Dv]. The lowering
    takes 128 query rows of one batch at a time (Sq a multiple of 128, or one batch of at most
    128 rows), values Dv <= one moving tile, and epilogues of one operand (roundings,
    scalings). Without `saved`, `output` is the rows result's only reader. With it, others
    may read the rows result too (returned: a training step's saved probabilities; another
    kernel: a softmax gradient read by the matmuls of both dQ and dK); the attention kernel
    then yields it second. It goes where `output` was when every other reader comes after
    that, else where `rows` was when nothing `output` reads is computed after `rows`."""
    triples = []
    body = U.body_ops(func)
    position = {op: i for i, op in enumerate(body)}
    for rows in body:
        if not _is_kernel(rows, "rows") or len(rows.results) != 1:
            continue
        readers = []
        for use in rows.results[0].uses:
            top = _top_level(U.operation(use.owner), position)
            if top not in readers:
                readers.append(top)
        if len(readers) > 1 and not saved:
            continue
        scores = _scores_kernel(rows)
        if scores is None or not _read_through_reshapes_only(scores, rows):
            continue
        for output in readers:
            if not _is_kernel(output, "matmul") or \
                    not _attention_shapes(scores, rows, output, target):
                continue
            others = [r for r in readers if r is not output]
            if all(position[r] > position[output] for r in others):
                triples.append((scores, rows, output, output))
            elif _reads_nothing_after(output, rows, position):
                triples.append((scores, rows, output, rows))
            break
    return triples


def _reads_nothing_after(kernel: ir.Operation, rows: ir.Operation, position: dict) -> bool:
    """Whether every value `kernel` reads from outside, but `rows`'s result, is defined
    before `rows` (or is an argument)."""
    for op in kernel_body(kernel):
        for value in op.operands:
            producer = U.defining_op(value)
            if producer is None or producer == rows:
                continue
            top = _top_level(producer, position)
            if top == kernel:
                continue
            if top is None or position[top] > position[rows]:
                return False
    return True


def _top_level(op: ir.Operation, position: dict) -> ir.Operation | None:
    """The op of the function body (a key of `position`) that is `op` or holds it."""
    while op is not None and op not in position:
        op = U.operation(op.parent) if op.parent is not None else None
    return op


def row_contractions(func: ir.Operation, target) -> list[tuple]:
    """(attention kernel, matmul kernel) pairs: the attention kernel yields its rows result
    [.., Sq, Sk] second (stored), and its only other reader is the matmul kernel, as the
    right operand of C = A @ R [.., D, Sq] x [.., Sq, Sk] (through reshapes of its batch
    dims), with D at most a PE tile of columns, Sk at most one moving tile, an epilogue of
    one operand and nothing it reads computed after the attention kernel: a softmax
    backward's dK^T = Q^T @ dS. The attention kernel then accumulates C over its query blocks
    on chip, and the rows need not be stored."""
    pairs = []
    body = U.body_ops(func)
    position = {op: i for i, op in enumerate(body)}
    for kernel, inner, matmuls in _attention_kernels(body, 2):
        rows = inner[-1].operands[1]
        if _through_reshapes(matmuls[1].operands[0], kernel) != rows:
            continue
        tops = {_top_level(U.operation(u.owner), position) for u in kernel.results[1].uses}
        if len(tops) != 1:
            continue
        (extra,) = tops
        lone = _lone_matmul(extra) if _is_kernel(extra, "matmul") else None
        if lone is None:
            continue
        e_body, e_mm = lone
        if _through_reshapes(e_mm.operands[1], extra) != kernel.results[1] or \
                any(v == kernel.results[1] for op in e_body if op is not e_mm
                    and op.name != "trn.reshape" for v in op.operands):
            continue
        scores_shape = U.shape(matmuls[0].results[0])
        a_shape, c_shape = U.shape(e_mm.operands[0]), U.shape(e_mm.results[0])
        if a_shape[:-2] != scores_shape[:-2] or c_shape[:-2] != scores_shape[:-2] or \
                a_shape[-1] != scores_shape[-2] or c_shape[-1] != scores_shape[-1] or \
                c_shape[-2] > target.pe_cols or c_shape[-1] > target.matmul_max_moving:
            continue
        if _reads_nothing_after(extra, kernel, position):
            pairs.append((kernel, extra))
    return pairs


def _through_reshapes(value: ir.Value, kernel: ir.Operation) -> ir.Value:
    """`value` followed back through the reshapes inside `kernel` that make it."""
    producer = U.defining_op(value)
    while producer is not None and producer.name == "trn.reshape" and \
            U.operation(producer.parent) == kernel:
        value = producer.operands[0]
        producer = U.defining_op(value)
    return value


def absorb_row_contraction(kernel: ir.Operation, extra: ir.Operation) -> ir.Operation:
    """The attention `kernel` with the matmul kernel `extra` (see row_contractions) computed
    inside it: it yields its output and `extra`'s result, not its rows."""
    return _absorbed(kernel, extra, [kernel.results[0]])


def _absorbed(kernel: ir.Operation, extra: ir.Operation, kept: list[ir.Value]
              ) -> ir.Operation:
    """One attention kernel where `kernel` stands: `kernel`'s ops, then `extra`'s; it yields
    `kept` (results of `kernel`), then `extra`'s result, and takes their places."""
    orientation = kernel.attributes["orientation"] if "orientation" in kernel.attributes \
        else None
    merged = _merge_yielding((kernel, extra), "attention", kept + [extra.results[0]], kernel,
                             kernel.location, extra.location)
    if orientation is not None:
        merged.attributes["orientation"] = orientation
    return merged


def _attention_kernels(body: list[ir.Operation], matmuls: int):
    """(kernel, its ops, its matmuls) of each attention kernel of `body` with two results
    and `matmuls` matmuls."""
    for kernel in body:
        if not _is_kernel(kernel, "attention") or len(kernel.results) != 2:
            continue
        inner = kernel_body(kernel)
        found = [op for op in inner if op.name == "trn.matmul"]
        if len(found) == matmuls:
            yield kernel, inner, found


def input_contractions(func: ir.Operation, target) -> list[tuple]:
    """(attention kernel, matmul kernel) pairs: the attention kernel holds a row contraction
    (`row_contractions`: three matmuls), and the matmul kernel computes C = L^T @ B ([..,
    Sk, Sq] x [.., Sq, D]) where L [.., Sq, Sk] is an input that the kernel's row part reads
    as it is (through reshapes of its batch dims, elementwise ops reading it: a softmax
    backward's probabilities P, and C = dV = P^T @ dO), with D at most a PE tile of columns,
    Sk at most one moving tile, an epilogue of one operand and nothing it reads computed
    after the attention kernel. The attention kernel then accumulates C over its query
    blocks from the row tiles of L its row part loads, and L is read once."""
    pairs = []
    body = U.body_ops(func)
    position = {op: i for i, op in enumerate(body)}
    for kernel, inner, matmuls in _attention_kernels(body, 3):
        scores_shape = U.shape(matmuls[0].results[0])
        # The inputs elementwise ops of the kernel read as they are or through reshapes.
        leaves = set()
        for op in inner:
            if op.name not in ELEMENTWISE_OPS:
                continue
            for value in op.operands:
                value = _through_reshapes(value, kernel)
                producer = U.defining_op(value)
                if (producer is None or _top_level(producer, position) != kernel) and \
                        U.shape(value)[-2:] == scores_shape[-2:] and \
                        math.prod(U.shape(value)) == math.prod(scores_shape):
                    leaves.add(value)
        for extra in body:
            if not _is_kernel(extra, "matmul") or len(extra.results) != 1 or extra == kernel:
                continue
            lone = _lone_matmul(extra)
            if lone is None:
                continue
            e_mm = lone[1]
            left = U.defining_op(e_mm.operands[0])
            if left is None or left.name != "trn.transpose" or \
                    U.operation(left.parent) != extra or \
                    list(U.array_attr(left, "permutation"))[-2:] != \
                    [len(U.shape(left.results[0])) - 1, len(U.shape(left.results[0])) - 2]:
                continue
            leaf = _through_reshapes(left.operands[0], extra)
            c_shape = U.shape(e_mm.results[0])
            if leaf not in leaves or U.shape(left.operands[0])[:-2] != scores_shape[:-2] or \
                    c_shape[:-2] != scores_shape[:-2] or c_shape[-2] != scores_shape[-1] or \
                    c_shape[-1] > target.pe_cols or \
                    c_shape[-2] > target.matmul_max_moving:
                continue
            # (The merged kernel stands where the attention kernel does: what `extra` reads
            # is computed before it, and what reads `extra`'s result comes after it, but
            # view ops of it, which move behind it.)
            if _reads_nothing_after(extra, kernel, position) and all(
                    position[reader] > position[kernel]
                    for reader in _views_and_readers(extra.results[0], position)[1]):
                pairs.append((kernel, extra))
                break
    return pairs


def _views_and_readers(value: ir.Value, position: dict
                       ) -> tuple[list[ir.Operation], list[ir.Operation]]:
    """Of the ops of the function body (keys of `position`) reading `value`, directly or
    through one another: the view ops, in program order, and the others."""
    views, readers, pending = [], [], [value]
    while pending:
        for use in pending.pop().uses:
            top = _top_level(U.operation(use.owner), position)
            if top.name not in VIEW_OPS:
                readers.append(top)
            elif top not in views:
                views.append(top)
                pending.append(top.results[0])
    return sorted(views, key=position.get), readers


def absorb_input_contraction(kernel: ir.Operation, extra: ir.Operation) -> ir.Operation:
    """The attention `kernel` with the matmul kernel `extra` (see input_contractions) computed
    inside it, after its own ops: it yields its results and `extra`'s. The view ops of
    `extra`'s result move behind the merged kernel."""
    position = {op: i for i, op in enumerate(U.body_ops(U.operation(kernel.parent)))}
    for view in reversed(_views_and_readers(extra.results[0], position)[0]):
        view.move_after(kernel)
    return _absorbed(kernel, extra, list(kernel.results))


def _scores_kernel(rows: ir.Operation) -> ir.Operation | None:
    """The one matmul kernel the row-wise kernel `rows` reads, where nothing else reads it."""
    producers = {U.defining_op(v) for op in kernel_body(rows) for v in op.operands}
    scores = [k for k in producers
              if k is not None and _is_kernel(k, "matmul") and k.parent == rows.parent]
    if len(scores) != 1 or len(list(scores[0].results[0].uses)) != 1:
        return None
    return scores[0]


def _rows_of(rows: ir.Operation, length: int) -> bool:
    """Whether the row-wise kernel `rows` reduces rows of `length` elements (the scores'
    last dim)."""
    reduces = [op for op in kernel_body(rows) if op.name == "trn.reduce"]
    space = _row_space(reduces[0]) if reduces else None
    return space is not None and space.row_elements == length


def _query_blocks_fit(shape: list[int], target) -> bool:
    """A [.., Sq, Sk] scores shape the lowering takes 128 rows of one batch index at a time:
    Sq a multiple of 128, or one batch of at most 128 rows."""
    sq = shape[-2]
    return sq % target.pe_cols == 0 or (math.prod(shape[:-2]) == 1 and sq <= target.pe_cols)


def matmul_rows_pairs(func: ir.Operation, target) -> list[tuple]:
    """(scores, rows) kernel pairs: `scores` a matmul kernel [.., Sq, Sk] with an epilogue of
    one operand (roundings, scalings), read only by `rows`, a row-wise kernel over rows of Sk
    that reads it through reshapes. As for attention, 128 rows of one batch index at a time
    (Sq a multiple of 128, or one batch of at most 128 rows)."""
    pairs = []
    for rows in U.body_ops(func):
        if not _is_kernel(rows, "rows") or len(rows.results) != 1:
            continue
        scores = _scores_kernel(rows)
        if scores is None:
            continue
        lone = _lone_matmul(scores)
        if lone is None:
            continue
        s_mm = lone[1]
        shape = U.shape(s_mm.results[0])
        if len(shape) < 2 or not _rows_of(rows, shape[-1]):
            continue
        # The rows kernel reads the scores as they are or through reshapes (the lowering
        # locates a row tile's scores by their row-major position).
        if not _read_through_reshapes_only(scores, rows) or \
                not _query_blocks_fit(shape, target):
            continue
        # Both operands of a batch index are staged whole (transposed, contraction dim on
        # partitions): only where they take at most a quarter of SBUF (attention's heads,
        # not a Linear over every token).
        etype = max((U.element_type(v) for v in s_mm.operands), key=U.element_bytes)
        staged = attention_kernel.staged_bytes(1, U.shape(s_mm.operands[0])[-1], 0,
                                               shape[-2], shape[-1], etype, etype,
                                               target.pe_rows)
        if staged <= target.sbuf_partition_bytes // 4:
            pairs.append((scores, rows))
    return pairs


# The epilogue computes every value of a merged producer for one output tile at a time; a
# DAG larger than this would crowd the SBUF share the GEMM plan leaves to its epilogue.
MAX_MERGED_PRODUCER_OPS = 16


def epilogue_producer_pairs(func: ir.Operation) -> list[tuple]:
    """(producer, matmul) kernel pairs: `producer` an elementwise kernel whose only reader is
    the matmul kernel, whose elementwise epilogue ops read it directly (not through a view,
    not as a matmul operand) at the matmul result's shape."""
    pairs = []
    for producer in U.body_ops(func):
        if not _is_kernel(producer, "elementwise"):
            continue
        uses = list(producer.results[0].uses)
        if not uses:
            continue
        consumer = U.operation(U.operation(uses[0].owner).parent)
        if not _is_kernel(consumer, "matmul") \
                or consumer.parent != producer.parent:
            continue
        readers = [U.operation(u.owner) for u in uses]
        matmul = _epilogue_matmul(consumer, readers)
        if matmul is None or U.shape(producer.results[0]) != U.shape(matmul.results[0]) or \
                not _mergeable_producer(producer):
            continue
        pairs.append((producer, consumer))
    return pairs


def _epilogue_matmul(consumer: ir.Operation, readers: list[ir.Operation]) -> ir.Operation | None:
    """The one matmul of kernel `consumer` where every op of `readers` is an elementwise op
    of its epilogue (inside the kernel, after the matmul); None otherwise."""
    body = kernel_body(consumer)
    matmuls = [op for op in body if op.name == "trn.matmul"]
    if len(matmuls) != 1 or any(r.parent != consumer for r in readers):
        return None
    after = set(body[body.index(matmuls[0]) + 1:])
    if not all(r in after and r.name in ELEMENTWISE_OPS for r in readers):
        return None
    return matmuls[0]


def _mergeable_producer(producer: ir.Operation) -> bool:
    """An elementwise kernel small enough for an epilogue to compute (see
    MAX_MERGED_PRODUCER_OPS)."""
    computed = [op for op in kernel_body(producer) if op.name in ELEMENTWISE_OPS]
    return len(computed) <= MAX_MERGED_PRODUCER_OPS


def epilogue_result_pairs(func: ir.Operation) -> list[tuple]:
    """(matmul, consumer) kernel pairs: `consumer` an elementwise kernel over the matmul
    kernel's result shape that reads that result only directly, in elementwise ops (not
    through a view), while something else needs the result too (a training step's forward
    saves a Linear's output and applies GELU to it). The consumer can then run in the
    matmul's epilogue, the kernel storing both values, instead of reading the result back."""
    pairs = []
    body = U.body_ops(func)
    position = {op: i for i, op in enumerate(body)}
    for matmul in body:
        if not _is_kernel(matmul, "matmul") or len(matmul.results) != 1:
            continue
        result = matmul.results[0]
        readers = [U.operation(u.owner) for u in result.uses]
        kernels = {U.operation(r.parent) for r in readers if r.parent.name == "trn.kernel"}
        for consumer in sorted(kernels, key=lambda k: position.get(k, -1)):
            if consumer.parent != matmul.parent or len(consumer.results) != 1 or \
                    U.str_attr(consumer, "kind") != "elementwise" or \
                    U.shape(consumer.results[0]) != U.shape(result) or \
                    not _mergeable_producer(consumer):
                continue
            inside = [r for r in readers if r.parent == consumer]
            if not all(r.name in ELEMENTWISE_OPS for r in inside):
                continue
            # The merged kernel takes the consumer's place: nothing between the two may read
            # the matmul's result.
            if _read_between(body, position, matmul, consumer):
                continue
            pairs.append((matmul, consumer))
            break
    return pairs


def _read_between(body: list[ir.Operation], position: dict, first: ir.Operation,
                  last: ir.Operation) -> bool:
    """Whether an op of `body` between kernel `first` and `last` reads `first`'s result (so
    that the two cannot become one kernel at `last`'s place)."""
    return any(_reads(op, first.results[0])
               for op in body[position[first] + 1:position[last]])


def _reads(op: ir.Operation, value: ir.Value) -> bool:
    """Whether `op` (or an op nested in it) reads `value`."""
    return any(U.operation(u.owner) == op or _encloses(op, U.operation(u.owner))
               for u in value.uses)


def _encloses(op: ir.Operation, inner: ir.Operation) -> bool:
    parent = inner.parent
    while parent is not None and parent.name != "func.func":
        if parent == op:
            return True
        parent = parent.parent
    return False


def merge_with_result(matmul: ir.Operation, consumer: ir.Operation) -> ir.Operation:
    """One matmul kernel computing `matmul` and then `consumer` in its epilogue, at the
    consumer's place; it yields the consumer's value and, when anything else reads it, the
    matmul kernel's own."""
    result = matmul.results[0]
    others = [u for u in result.uses if not _encloses(consumer, U.operation(u.owner))]
    types = [consumer.results[0].type] + ([result.type] if others else [])
    with ir.InsertionPoint(consumer), consumer.location:
        merged = build_kernel("matmul", types)
    mapping: dict = {}
    with ir.InsertionPoint(merged.regions[0].blocks[0]):
        _clone_bodies((matmul, consumer), mapping)
        values = [mapping[consumer.results[0]]] + ([mapping[result]] if others else [])
        build_yield(values, loc=consumer.location)
    consumer.results[0].replace_all_uses_with(merged.results[0])
    if others:
        result.replace_all_uses_with(merged.results[1])
    consumer.erase()
    matmul.erase()
    return merged


def bias_gradient_pairs(func: ir.Operation) -> list[tuple]:
    """(matmul, reduction) kernel pairs: a matmul kernel with one 2-D matmul whose left
    operand is transpose(T) computed in the kernel, and a reduction kernel that sums the same
    view T over dim 0 (and at most converts the sum), neither kernel's result read between
    the two."""
    body = U.body_ops(func)
    position = {op: i for i, op in enumerate(body)}
    summed = {op: _column_sum_of(op) for op in body
              if _is_kernel(op, "reduce") and len(op.results) == 1}
    for matmul in body:
        if not _is_kernel(matmul, "matmul") or len(matmul.results) != 1:
            continue
        mms = [op for op in kernel_body(matmul) if op.name == "trn.matmul"]
        if len(mms) != 1 or len(U.shape(mms[0].results[0])) != 2:
            continue
        transpose = U.defining_op(mms[0].operands[0])
        if transpose is None or transpose.name != "trn.transpose" or \
                transpose.parent != matmul:
            continue
        for reduction, value in summed.items():
            if value is None or not _same_view(value, transpose.operands[0]):
                continue
            first, last = sorted((matmul, reduction), key=position.get)
            if not _read_between(body, position, first, last):
                return [(matmul, reduction, last)]
    return []


def _column_sum_of(kernel: ir.Operation) -> ir.Value | None:
    """The 2-D value a reduction kernel sums over dim 0 when that (and a float convert of
    the sum) is all the kernel computes."""
    computed = [op for op in kernel_body(kernel)[:-1] if op.name not in VIEW_OPS]
    if not computed or computed[0].name != "trn.reduce" or len(computed) > 2:
        return None
    reduce = computed[0]
    if U.str_attr(reduce, "op") != "add" or list(U.array_attr(reduce, "dimensions")) != [0] \
            or len(U.shape(reduce.operands[0])) != 2:
        return None
    if len(computed) == 2 and (computed[1].name != "trn.convert" or
                               computed[1].operands[0] != reduce.results[0]):
        return None
    return reduce.operands[0]


def _same_view(a: ir.Value, b: ir.Value) -> bool:
    """Whether `a` and `b` are the same value, or the same chain of view ops over it (each
    kernel holds its own copy of the views it reads)."""
    if a == b:
        return True
    pa, pb = U.defining_op(a), U.defining_op(b)
    if pa is None or pb is None or pa.name != pb.name or pa.name not in VIEW_OPS or \
            a.type != b.type or len(pa.operands) != len(pb.operands):
        return False
    attrs_a, attrs_b = U.attributes_of(pa), U.attributes_of(pb)
    if attrs_a.keys() != attrs_b.keys() or any(attrs_a[k] != attrs_b[k] for k in attrs_a):
        return False
    return all(_same_view(x, y) for x, y in zip(pa.operands, pb.operands))


def merge_column_sum(matmul: ir.Operation, reduction: ir.Operation,
                     later: ir.Operation) -> ir.Operation:
    """One matmul kernel yielding the matmul kernel's result and the reduction's sum, at the
    place of `later` (the one of the two that comes later). The sum reads the very value the
    matmul's left operand transposes, so the lowering sees one tensor loaded once."""
    with ir.InsertionPoint(later), later.location:
        merged = build_kernel("matmul", [matmul.results[0].type, reduction.results[0].type])
    mapping: dict = {}
    body = kernel_body(matmul)
    with ir.InsertionPoint(merged.regions[0].blocks[0]):
        _clone_bodies((matmul,), mapping)
        mm = next(op for op in body if op.name == "trn.matmul")
        transposed = U.defining_op(mm.operands[0]).operands[0]
        summed = mapping.get(transposed, transposed)
        sums = kernel_body(reduction)
        mapping[_column_sum_of(reduction)] = summed
        for op in sums[:-1]:
            if op.name in VIEW_OPS:
                continue
            clone = U.clone_with_operands(op, [mapping.get(v, v) for v in op.operands])
            mapping[op.results[0]] = clone.results[0]
        build_yield([mapping[body[-1].operands[0]], mapping[sums[-1].operands[0]]],
                    loc=later.location)
    matmul.results[0].replace_all_uses_with(merged.results[0])
    reduction.results[0].replace_all_uses_with(merged.results[1])
    matmul.erase()
    reduction.erase()
    return merged


def weight_gradient_pairs(func: ir.Operation, target) -> list[tuple]:
    """(first, second) kernel pairs that form a weight_gradient kernel (see the module
    docstring): `first` a matmul kernel with one 2-D matmul and an elementwise epilogue whose
    result T only `second` reads; `second` a matmul kernel computing transpose(T) @ X, 2-D,
    converted at most, and possibly (second result) T summed over its rows; the resident
    operands within SBUF's share and the accumulators within PSUM's."""
    pairs, taken = [], set()
    for second in U.body_ops(func):
        if not _is_kernel(second, "matmul") or second in taken:
            continue
        found = _gradient_of_transpose(second)
        if found is None:
            continue        # (T read elsewhere must reach HBM: the kernels stay apart)
        mm2, product, _ = found
        first = U.defining_op(product)
        if first is None or first in taken or not _is_kernel(first, "matmul") or \
                len(first.results) != 1 or first.parent != second.parent:
            continue
        body1 = kernel_body(first)
        mm1 = [op for op in body1 if op.name == "trn.matmul"]
        if len(mm1) != 1 or any(len(U.shape(v)) != 2 for v in (*mm1[0].operands,
                                                                 mm1[0].results[0])):
            continue
        if any(op.name not in ELEMENTWISE_OPS + VIEW_OPS + SOURCE_OPS
               for op in body1[:-1] if op != mm1[0]):
            continue
        tokens, k = U.shape(mm1[0].operands[0])
        features = U.shape(mm2.operands[1])[1]
        itemsize = max(U.element_bytes(U.element_type(v))
                       for v in (*mm1[0].operands, mm2.operands[1]))
        if weight_gradient_kernel.hidden_block(target, features) is None or \
                weight_gradient_kernel.resident_bytes(target, tokens, k, features, itemsize) > \
                target.sbuf_partition_bytes * WEIGHT_GRADIENT_RESIDENT_SHARE:
            continue
        pairs.append((first, second))
        taken.update((first, second))
    return pairs


def _gradient_of_transpose(kernel: ir.Operation) -> tuple | None:
    """(matmul, T, sums) where the matmul kernel `kernel` computes transpose(T) @ X, 2-D, its
    epilogue unary, and possibly (its second result) T summed over its rows (`sums`: the ops
    computing them, `column_sum_ops`), nothing else reading T: a Linear's weight and bias
    gradients, T the gradient of its output. None otherwise."""
    body = kernel_body(kernel)
    matmuls = [op for op in body if op.name == "trn.matmul"]
    if len(matmuls) != 1 or any(len(U.shape(v)) != 2 for v in (*matmuls[0].operands,
                                                                matmuls[0].results[0])):
        return None
    transpose = U.defining_op(matmuls[0].operands[0])
    if transpose is None or transpose.name != "trn.transpose" or transpose.parent != kernel:
        return None
    product = transpose.operands[0]
    readers = [U.operation(u.owner) for u in product.uses]
    sums = column_sum_ops(body[-1].operands[1], set(body)) if len(body[-1].operands) == 2 \
        else []
    if any(U.operation(r.parent) != kernel for r in readers) or sums is None or \
            {r for r in readers if r != transpose} != set(sums[:1]) or \
            not _unary_epilogue([op for op in body if op not in sums], matmuls[0]):
        return None
    return matmuls[0], product, sums


# The share of SBUF the resident operands of a weight_gradient kernel (A^T and X) may take:
# the rest holds a block of B, T's tiles, the transposes' staging and the epilogues.
WEIGHT_GRADIENT_RESIDENT_SHARE = 0.5


def merge_weight_gradient(first: ir.Operation, second: ir.Operation) -> ir.Operation:
    """One weight_gradient kernel computing `first` and then `second` (which reads first's
    result), with second's results."""
    return _merge_yielding((first, second), "weight_gradient", list(second.results), second,
                           second.location)


def reshape_epilogue_producers(func: ir.Operation) -> None:
    """An elementwise kernel read only through one reshape, inside a matmul kernel, to that
    matmul's result shape (GELU's derivative over [batch, tokens, hidden], multiplied into a
    backward matmul's [tokens, hidden] product) is rebuilt in the reshaped shape, its inputs
    read through reshapes: elementwise ops do not care about shape, and the matmul's epilogue
    can then take it (epilogue_producer_pairs). Only where every value the kernel reads has
    its result's shape (no broadcast operand to reshape)."""
    for producer in U.body_ops(func):
        if not _is_kernel(producer, "elementwise"):
            continue
        uses = list(producer.results[0].uses)
        if len(uses) != 1:
            continue
        reshape = U.operation(uses[0].owner)
        consumer = U.operation(reshape.parent)
        if reshape.name != "trn.reshape" or not _is_kernel(consumer, "matmul") or \
                consumer.parent != producer.parent:
            continue
        # (epilogue_producer_pairs' conditions: rebuilt only where it then merges.)
        matmul = _epilogue_matmul(consumer, [U.operation(u.owner)
                                             for u in reshape.results[0].uses])
        if matmul is None or U.shape(reshape.results[0]) != U.shape(matmul.results[0]) or \
                not _mergeable_producer(producer):
            continue
        body = kernel_body(producer)
        shape = U.shape(producer.results[0])
        computed = {r for op in body for r in op.results}
        if any(op.name not in ELEMENTWISE_OPS or op.name in SOURCE_OPS
               for op in body[:-1]) or \
                any(U.shape(v) != shape for op in body[:-1] for v in op.operands
                    if v not in computed):
            continue
        new_shape = U.shape(reshape.results[0])
        with ir.InsertionPoint(producer), producer.location:
            rebuilt = build_kernel("elementwise", reshape.results[0].type)
        mapping: dict = {}
        with ir.InsertionPoint(rebuilt.regions[0].blocks[0]):
            for op in body[:-1]:
                operands = []
                for v in op.operands:
                    if v not in mapping and v not in computed:
                        mapping[v] = U.create("trn.reshape", [U.tensor_type(
                            new_shape, U.element_type(v))], [v], {}, loc=op.location).results[0]
                    operands.append(mapping[v])
                clone = U.create(op.name, [U.tensor_type(new_shape, U.element_type(r))
                                           for r in op.results], operands,
                                 U.attributes_of(op), loc=op.location)
                for old, new in zip(op.results, clone.results):
                    mapping[old] = new
            build_yield(mapping[body[-1].operands[0]], loc=body[-1].location)
        for name in producer.attributes:
            if name != "kind":
                rebuilt.attributes[name] = producer.attributes[name]
        reshape.results[0].replace_all_uses_with(rebuilt.results[0])
        reshape.erase()
        producer.erase()


def mlp_pairs(func: ir.Operation, target) -> list[tuple]:
    """(first, second) matmul kernel pairs that form an mlp kernel (see the module docstring):
    2-D matmuls, the first kernel read only as the second's matmul's left operand, its
    epilogue's other operands constant along the token rows, and the resident weights and
    one token block's output tiles within SBUF's and PSUM's shares."""
    pairs, taken = [], set()
    for first in U.body_ops(func):
        if not _is_kernel(first, "matmul") or first in taken or len(first.results) != 1:
            continue
        uses = list(first.results[0].uses)
        if len(uses) != 1:
            continue
        user = U.operation(uses[0].owner)
        second = U.operation(user.parent)
        if user.name != "trn.matmul" or uses[0].operand_number != 0 or \
                not _is_kernel(second, "matmul") or \
                second.parent != first.parent or second in taken or len(second.results) != 1:
            continue
        body1, body2 = kernel_body(first), kernel_body(second)
        mm1 = [op for op in body1 if op.name == "trn.matmul"]
        mm2 = [op for op in body2 if op.name == "trn.matmul"]
        if len(mm1) != 1 or len(mm2) != 1 or any(
                len(U.shape(v)) != 2 for v in (*mm1[0].operands, *mm2[0].operands,
                                               mm1[0].results[0], mm2[0].results[0])):
            continue
        if not _per_feature_epilogue(body1, mm1[0]) or any(
                op.name not in VIEW_OPS + SOURCE_OPS
                for body, mm in ((body1, mm1[0]), (body2, mm2[0]))
                for op in body[:body.index(mm)]):
            continue        # (no merged epilogue producer computed ahead of either matmul)
        tokens, features = U.shape(mm1[0].operands[0])
        hidden, out_features = U.shape(mm2[0].operands[1])
        itemsize = max(U.element_bytes(U.element_type(v))
                       for v in (*mm1[0].operands, mm2[0].operands[1]))
        if mlp_kernel.tokens_per_block(target, tokens, out_features) is None or \
                mlp_kernel.resident_bytes(target, features, hidden, out_features, itemsize) > \
                target.sbuf_partition_bytes * MLP_RESIDENT_SHARE:
            continue
        pairs.append((first, second))
        taken.update((first, second))
    return pairs


def mlp_saved_pairs(func: ir.Operation, target) -> list[tuple]:
    """(first, second) matmul kernel pairs that form an mlp_saved kernel (see the module
    docstring), with the op the merged kernel goes before: 2-D matmuls, nothing computed
    ahead of either but the first's epilogue producers (a backward's GELU derivative,
    merged by epilogue-producers); the first kernel's results of one type, its first (H)
    read by the second's matmul as its left operand and by something else too; H's rows a
    whole number of 128-token tiles whose block fits PSUM; and the two resident weights
    with the second's token block of H's row tiles within SBUF's share for weights. The
    merged kernel stands where the first did when the second reads nothing computed after
    it (a backward's weight gradient, placed between them, reads H too), else where the
    second did, when every other reader of the first's results comes after it."""
    pairs, taken = [], set()
    body = U.body_ops(func)
    position = {op: i for i, op in enumerate(body)}
    for first in body:
        if not _is_kernel(first, "matmul") or \
                first in taken or len({str(r.type) for r in first.results}) != 1:
            continue
        hidden = first.results[0]
        readers = [U.operation(u.owner) for u in hidden.uses
                   if U.operation(u.owner).name == "trn.matmul" and u.operand_number == 0]
        second = U.operation(readers[0].parent) if len(readers) == 1 else None
        if second is None or not _is_kernel(second, "matmul") or second in taken or \
                second.parent != first.parent or len(second.results) != 1:
            continue
        at = first if _inputs_before(second, first, position) else second
        # Every other reader of the first's results comes after the second, where the
        # merged kernel then stands, or is a view that can move there.
        if at == second and any(
                not _encloses(second, reader) and
                not _reads_after(reader, position, position[second])
                for r in first.results for reader in (U.operation(u.owner) for u in r.uses)):
            continue
        inside = sum(1 for u in hidden.uses if _encloses(second, U.operation(u.owner)))
        if inside != 1 or inside == len(list(hidden.uses)):
            continue      # (read by the second's matmul alone: an mlp kernel's case)
        body1, body2 = kernel_body(first), kernel_body(second)
        mm1 = [op for op in body1 if op.name == "trn.matmul"]
        mm2 = [op for op in body2 if op.name == "trn.matmul"]
        if len(mm1) != 1 or len(mm2) != 1 or mm2[0].operands[0] != hidden or any(
                len(U.shape(v)) != 2 for v in (*mm1[0].operands, *mm2[0].operands,
                                               mm1[0].results[0], mm2[0].results[0])) or \
                body1[-1].operands[0] != body1[-2].results[0] or \
                body1[-2].name in VIEW_OPS + SOURCE_OPS or \
                any(op.name not in VIEW_OPS + SOURCE_OPS + ELEMENTWISE_OPS
                    for op in body1[:body1.index(mm1[0])]) or \
                any(op.name not in VIEW_OPS + SOURCE_OPS for op in body2[:body2.index(mm2[0])]):
            continue      # (the first's epilogue may have producers merged ahead of its matmul)
        tokens, features = U.shape(mm1[0].operands[0])
        hidden_features, out_features = U.shape(mm2[0].operands[1])
        itemsize = max(U.element_bytes(U.element_type(v))
                       for v in (*mm1[0].operands, mm2[0].operands[1]))
        block = mlp_kernel.tokens_per_block(target, tokens, out_features)
        if tokens % target.pe_cols or block is None or \
                mlp_kernel.tokens_per_block(target, tokens, hidden_features) is None:
            continue
        rows = -(-block // target.pe_cols) * hidden_features * U.element_bytes(
            U.element_type(hidden))
        if mlp_kernel.resident_bytes(target, features, hidden_features, out_features,
                                     itemsize) + rows > \
                target.sbuf_partition_bytes * MLP_RESIDENT_SHARE:
            continue
        pairs.append((first, second, at))
        taken.update((first, second))
    return pairs


def _inputs_before(kernel: ir.Operation, op: ir.Operation, position: dict) -> bool:
    """Whether every value `kernel` reads from outside it is a function argument, `op`'s
    result or computed before `op` (a key of `position`, as `kernel` is)."""
    for inner in kernel_body(kernel):
        for value in inner.operands:
            producer = U.defining_op(value)
            if producer is None or _encloses(kernel, producer):
                continue
            top = _top_level(producer, position)
            if top != op and position.get(top, len(position)) >= position[op]:
                return False
    return True


def _reads_after(reader: ir.Operation, position: dict, place: int) -> bool:
    """Whether `reader` stands after `place` in the function body, or is a view there
    whose readers all do (through further views): it can move after `place`."""
    top = _top_level(reader, position)
    if position.get(top, -1) > place:
        return True
    return top == reader and reader.name in VIEW_OPS and all(
        _reads_after(U.operation(u.owner), position, place) for u in reader.results[0].uses)


def _views_before(op: ir.Operation, values) -> list[ir.Operation]:
    """The view ops of the function body before `op` that read `values`, directly or
    through one another, in body order."""
    found, pending = [], list(values)
    while pending:
        for use in pending.pop().uses:
            reader = U.operation(use.owner)
            if reader.parent == op.parent and reader.name in VIEW_OPS and \
                    reader.is_before_in_block(op) and reader not in found:
                found.append(reader)
                pending.append(reader.results[0])
    position = {o: i for i, o in enumerate(U.body_ops(U.operation(op.parent)))}
    return sorted(found, key=position.get)


def merge_mlp_saved(first: ir.Operation, second: ir.Operation,
                    at: ir.Operation) -> ir.Operation:
    """One mlp_saved kernel, before `at` (`first` or `second`, see mlp_saved_pairs):
    `first`'s ops (the one computing its first result marked PRODUCER_RESULT), then
    `second`'s; it yields `second`'s result, then `first`'s results."""
    if at == second:
        # Views of the first's results standing before the second go after it
        # (mlp_saved_pairs checked that their readers all come later).
        for view in reversed(_views_before(second, first.results)):
            view.move_after(second)
    kernel_body(first)[-2].attributes[PRODUCER_RESULT] = ir.UnitAttr.get()
    # (Its first result, H, something outside reads: mlp_saved_pairs checked.)
    return merge_kernels((first, second), "mlp_saved", also=first, at=at)


def saved_gradient_pairs(func: ir.Operation, target) -> list[tuple]:
    """(mlp_saved kernel, matmul kernel) pairs where the matmul kernel is the weight gradient
    of the mlp_saved kernel's stored hidden value H [tokens, hidden] (see the module
    docstring): transpose(H) @ X, 2-D, its epilogue unary, and possibly (a second result) H
    summed over its rows; nothing else reads H; every value the gradient reads besides H is
    there before the mlp_saved kernel, where the merged kernel stands; and H's rows, all of
    them kept on chip, with the resident weights and one column tile of X's rows, take at
    most SAVED_ROWS_SHARE of SBUF."""
    pairs = []
    body = U.body_ops(func)
    position = {op: i for i, op in enumerate(body)}
    for saved in body:
        if not _is_kernel(saved, "mlp_saved") or len(saved.results) != 2:
            continue
        hidden = saved.results[1]
        inner = kernel_body(saved)
        marked = [op for op in inner if PRODUCER_RESULT in op.attributes]
        if len(marked) != 1 or inner[-1].operands[1] != marked[0].results[0]:
            continue
        uses = list(hidden.uses)
        gradient = U.operation(U.operation(uses[0].owner).parent) if uses else None
        if gradient is None or not _is_kernel(gradient, "matmul") or \
                gradient.parent != saved.parent or \
                len(gradient.results) > 2:
            continue
        found = _gradient_of_transpose(gradient)
        if found is None or found[1] != hidden or \
                not _inputs_before(gradient, saved, position):
            continue
        mm2 = found[0]
        matmuls = [op for op in inner if op.name == "trn.matmul"]
        if len(matmuls) != 2:
            continue
        tokens, features = U.shape(matmuls[0].operands[0])
        hidden_features, out_features = U.shape(matmuls[-1].operands[1])
        x_features = U.shape(mm2.operands[1])[1]
        itemsize = max(U.element_bytes(U.element_type(v))
                       for v in (*matmuls[0].operands, matmuls[-1].operands[1],
                                 mm2.operands[1]))
        token_tiles = -(-tokens // target.pe_cols)
        footprint = mlp_kernel.resident_bytes(target, features, hidden_features,
                                              out_features, itemsize) + \
            token_tiles * hidden_features * U.element_bytes(U.element_type(hidden)) + \
            token_tiles * min(x_features, target.matmul_max_moving) * itemsize
        if footprint > target.sbuf_partition_bytes * SAVED_ROWS_SHARE:
            continue
        pairs.append((saved, gradient))
    return pairs


# The share of SBUF (bytes per partition) an mlp_saved kernel that also computes the weight
# gradient of its hidden value may fill with its resident weights, all of the hidden value's
# rows and a column tile of the gradient's other operand: the rest holds a token block's
# staging and the epilogues.
SAVED_ROWS_SHARE = 0.85
# Marks the first op of an mlp_saved kernel's weight-gradient part (trn-fuse
# mlp-saved-gradient): the hidden value's weight gradient, computed from its rows on chip.
SAVED_GRADIENT = "trn.saved_gradient"


def merge_saved_gradient(saved: ir.Operation, gradient: ir.Operation) -> ir.Operation:
    """One mlp_saved kernel where `saved` stood: `saved`'s ops, then `gradient`'s (the first
    marked SAVED_GRADIENT) reading the hidden value as `saved` computes it; it yields
    `saved`'s first result, then `gradient`'s results. The hidden value is yielded no more."""
    kernel_body(gradient)[0].attributes[SAVED_GRADIENT] = ir.UnitAttr.get()
    return _merge_yielding((saved, gradient), "mlp_saved",
                           [saved.results[0], *gradient.results], saved, saved.location)


def mlp_rows_pairs(func: ir.Operation, target) -> list[tuple]:
    """(mlp, rows) kernel pairs that form an mlp_rows kernel (see the module docstring): a
    2-D mlp kernel [tokens, features] whose result the row-wise kernel `rows` (one result)
    alone reads, directly or through reshapes, with rows of `features` elements
    (`_rows_read_whole`)."""
    return _producer_rows_pairs(func, target, "mlp")


def linear_rows_pairs(func: ir.Operation, target) -> list[tuple]:
    """(linear, rows) kernel pairs that form a linear_rows kernel (see the module
    docstring): a matmul kernel of one 2-D matmul with its epilogue, nothing computed ahead
    of the matmul, read as `mlp_rows_pairs` says."""
    return _producer_rows_pairs(func, target, "matmul")


def _producer_rows_pairs(func: ir.Operation, target, kind: str) -> list[tuple]:
    pairs = []
    for rows in U.body_ops(func):
        if not _is_kernel(rows, "rows") or len(rows.results) != 1:
            continue
        producers = {U.defining_op(v) for op in kernel_body(rows) for v in op.operands}
        found = [k for k in producers if k is not None and _is_kernel(k, kind) and
                 k.parent == rows.parent and
                 len(k.results) == 1]
        if len(found) == 1 and _rows_read_whole(found[0], rows, target, 2 if kind == "mlp"
                                                else 1):
            pairs.append((found[0], rows))
    return pairs


def _read_through_reshapes_only(kernel: ir.Operation, rows: ir.Operation) -> bool:
    """Whether only ops inside the row-wise kernel `rows` read `kernel`'s result, directly or
    through reshapes of it (transitively) and no other view: a fused lowering that hands the
    rows their tiles of it on chip locates a tile by its row-major position, which a
    transpose after a reshape would not keep (its rows would be other rows' values)."""
    values, seen = [kernel.results[0]], 0
    while seen < len(values):
        for use in values[seen].uses:
            reader = U.operation(use.owner)
            if U.operation(reader.parent) != rows or \
                    (reader.name in VIEW_OPS and reader.name != "trn.reshape"):
                return False
            if reader.name == "trn.reshape":
                values.append(reader.results[0])
        seen += 1
    return True


def _rows_read_whole(producer: ir.Operation, rows: ir.Operation, target,
                     matmul_count: int) -> bool:
    """Whether the row-wise kernel `rows` can read `producer`'s result [tokens, features]
    (an mlp's, or a Linear's: `matmul_count` 2-D matmuls, the last one's epilogue ending the
    body) on chip, as kernels/mlp.py `lower_mlp_rows` hands it over: `rows` alone reads it,
    directly or through reshapes only (no other view of it or of them), with rows of
    `features`; the producer's yielded value is
    computed by its last op; the rows' tiles are whole 128-token groups (the row-wise
    result's second-to-last dim a multiple of 128); and the resident weights with a token
    block's row tiles fit SBUF's share for weights."""
    tp = target.pe_cols
    if not _read_through_reshapes_only(producer, rows):
        return False
    body = kernel_body(producer)
    matmuls = [op for op in body if op.name == "trn.matmul"]
    shape = U.shape(producer.results[0])
    out_shape = U.shape(rows.results[0])
    if len(shape) != 2 or len(matmuls) != matmul_count or len(body) < 2 or \
            body[-1].operands[0] != body[-2].results[0] or \
            body[-2].name in VIEW_OPS + SOURCE_OPS or not _rows_of(rows, shape[1]) or \
            len(out_shape) < 2 or out_shape[-1] != shape[1] or out_shape[-2] % tp or \
            math.prod(out_shape[:-1]) != shape[0]:
        return False
    if any(len(U.shape(v)) != 2 for v in (*matmuls[-1].operands, matmuls[-1].results[0])) or \
            any(op.name not in VIEW_OPS + SOURCE_OPS for op in body[:body.index(matmuls[0])]):
        return False
    footprint = mlp_sbuf_bytes(matmuls, shape, U.element_type(producer.results[0]), target)
    return footprint is not None and \
        footprint <= target.sbuf_partition_bytes * MLP_RESIDENT_SHARE


def mlp_sbuf_bytes(matmuls: list[ir.Operation], shape: list[int], result_type: ir.Type,
                   target) -> int | None:
    """SBUF bytes per partition that the resident weights of an mlp (two `matmuls`) or a
    Linear (one) and one token block's row tiles of its result [tokens, features] (`shape`,
    of `result_type`) take in kernels/mlp.py; None where no token block fits PSUM."""
    tokens, out_features = shape
    block = mlp_kernel.tokens_per_block(target, tokens, out_features)
    if block is None:
        return None
    row_tiles = -(-block // target.pe_cols) * out_features * U.element_bytes(result_type)
    itemsize = max(U.element_bytes(U.element_type(v))
                   for v in (*matmuls[0].operands, matmuls[-1].operands[1]))
    if len(matmuls) == 2:
        features, hidden = U.shape(matmuls[0].operands[1])
        resident = mlp_kernel.resident_bytes(target, features, hidden, out_features, itemsize)
    else:
        resident = itemsize * -(-U.shape(matmuls[0].operands[1])[0] // target.pe_rows) * \
            out_features
    return resident + row_tiles


# The share of SBUF the two resident weights of an mlp kernel may take: the rest holds the
# token block's operands, the transposes' staging and the epilogues.
MLP_RESIDENT_SHARE = 0.7


def _per_feature_epilogue(body: list[ir.Operation], matmul: ir.Operation) -> bool:
    """Every operand of the matmul's epilogue other than the chain is constant along the
    result's rows (a bias over output features), so it is per-partition with the features
    on partitions."""
    chain = {matmul.results[0]}
    for op in body[body.index(matmul) + 1:-1]:
        if op.name in VIEW_OPS + SOURCE_OPS:
            continue
        if op.name not in ELEMENTWISE_OPS:
            return False
        for v in op.operands:
            if v in chain:
                continue
            layout = layout_of(v)
            if layout is None or layout.strides[0] != 0:
                return False
        chain.add(op.results[0])
    return body[-1].operands[0] in chain


def _lone_matmul(kernel: ir.Operation) -> tuple[list[ir.Operation], ir.Operation] | None:
    """(the kernel's ops, its matmul) where it holds one matmul whose epilogue is of one
    operand (`_unary_epilogue`); None otherwise."""
    body = kernel_body(kernel)
    matmuls = [op for op in body if op.name == "trn.matmul"]
    if len(matmuls) != 1 or not _unary_epilogue(body, matmuls[0]):
        return None
    return body, matmuls[0]


def _unary_epilogue(body: list[ir.Operation], matmul: ir.Operation) -> bool:
    """Every op after the matmul is elementwise on the previous one alone (or a constant)."""
    current = matmul.results[0]
    for op in body[body.index(matmul) + 1:-1]:
        if op.name not in ELEMENTWISE_OPS or list(op.operands) != [current]:
            return False
        current = op.results[0]
    return body[-1].operands[0] == current


def _attention_shapes(scores: ir.Operation, rows: ir.Operation, output: ir.Operation,
                      target) -> bool:
    s_lone, o_lone = _lone_matmul(scores), _lone_matmul(output)
    if s_lone is None or o_lone is None:
        return False
    s_mm, o_mm = s_lone[1], o_lone[1]
    scores_shape = U.shape(s_mm.results[0])
    out_lhs, values = o_mm.operands
    if len(scores_shape) < 2 or U.shape(out_lhs)[-2:] != scores_shape[-2:] or \
            U.shape(values)[-2] != scores_shape[-1] or \
            U.shape(values)[-1] > target.matmul_max_moving:
        return False
    # The left operand is the rows result, reshaped only.
    value = out_lhs
    while U.defining_op(value) is not None and U.operation(U.defining_op(value).parent) == output:
        producer = U.defining_op(value)
        if producer.name != "trn.reshape":
            return False
        value = producer.operands[0]
    if value != rows.results[0]:
        return False
    return _rows_of(rows, scores_shape[-1]) and _query_blocks_fit(scores_shape, target)


def _clone_bodies(kernels, mapping: dict) -> None:
    """Clone the bodies of `kernels`, one after another, at the insertion point; `mapping`
    takes every old value (each kernel's results included) to its clone."""
    for kernel in kernels:
        body = kernel_body(kernel)
        for op in body[:-1]:
            clone = U.clone_with_operands(op, [mapping.get(v, v) for v in op.operands])
            for old, new in zip(op.results, clone.results):
                mapping[old] = new
        for result, value in zip(kernel.results, body[-1].operands):
            mapping[result] = mapping.get(value, value)


# Marks the op of an mlp_rows or linear_rows kernel that computes the producer's result: the
# producer's ops end there and the rows' begin (convert-trn-to-nisa splits the body there; an
# op count would not survive the passes that rewrite views inside kernels, trn-layout's).
PRODUCER_RESULT = "trn.producer_result"
# Marks the op that computes a row-wise part's result where the kernel's first Linear, after
# it, turns its rows on PE instead of loading them (a pre-norm layer's norm in front of its
# attention's QKV projection, trn-fuse-attention-output input-rows, or of its FFN).
INPUT_ROWS = "trn.input_rows"
# The share of SBUF (bytes per partition) such rows may take: all of them stay until the
# Linear has turned them on PE.
INPUT_ROWS_SBUF_SHARE = 0.2


def input_rows_kernel(kernel: ir.Operation, matmul: ir.Operation,
                      target) -> ir.Operation | None:
    """The row-wise kernel of one result that `matmul`, the first Linear of `kernel`, reads
    as its left operand through reshapes (of `kernel`) to [tokens, features], and that
    nothing else reads, where its rows are whole 128-token tiles that all together, with
    those of the row inputs it loads, take at most INPUT_ROWS_SBUF_SHARE of SBUF; else
    None."""
    value, chain = matmul.operands[0], []
    while True:
        op = U.defining_op(value)
        if op is None or op.name != "trn.reshape" or U.operation(op.parent) != kernel:
            break
        chain.append(op)
        value = op.operands[0]
    chain.reverse()
    rows = U.defining_op(value)
    if rows is None or not _is_kernel(rows, "rows") or \
            len(rows.results) != 1 or rows.parent != kernel.parent or \
            any(INPUT_ROWS in op.attributes for op in kernel_body(kernel)):
        return None
    inner = kernel_body(rows)
    shape = U.shape(value)
    if len(inner) < 2 or inner[-1].operands[0] != inner[-2].results[0] or \
            inner[-2].name in VIEW_OPS + SOURCE_OPS or \
            U.shape(matmul.operands[0]) != [math.prod(shape[:-1]), shape[-1]] or \
            matmul.operands[1] == matmul.operands[0]:
        return None
    readers = [U.operation(use.owner) for use in value.uses]
    if readers != [chain[0] if chain else matmul] or \
            any(len(list(op.results[0].uses)) != 1 for op in chain):
        return None
    tokens = math.prod(shape[:-1])
    if tokens % target.pe_cols:
        return None
    # The result's row tiles and those of the row inputs the norm loads (kept for a residual
    # of the kernel that reads the same rows: kernels/rows.py LoadedRows).
    kept = tokens // target.pe_cols * shape[-1] * U.element_bytes(U.element_type(value))
    if kept + row_input_bytes(rows, target) > \
            target.sbuf_partition_bytes * INPUT_ROWS_SBUF_SHARE:
        return None
    return rows


def row_input_bytes(rows: ir.Operation, target) -> int:
    """SBUF bytes per partition that the whole-row inputs of row-wise kernel `rows` (values
    from outside it with its result's rows) take as 128-row tiles, all kept."""
    inner = kernel_body(rows)
    inside, shape = set(inner), U.shape(rows.results[0])
    tokens = math.prod(shape[:-1])
    inputs = {v for op in inner for v in op.operands
              if U.defining_op(v) not in inside and U.shape(v) and
              U.shape(v)[:-1] == shape[:-1]}
    return sum(-(-tokens // target.pe_cols) * U.shape(v)[-1] *
               U.element_bytes(U.element_type(v)) for v in inputs)


def rows_mlp_pairs(func: ir.Operation, target) -> list[tuple]:
    """(rows kernel, mlp kernel) pairs where the mlp's first Linear reads the rows kernel's
    result (`input_rows_kernel`: a pre-norm FFN's norm), with the mlp's resident weights and
    the kept rows (the norm's result and the input rows it loads) within MLP_RESIDENT_SHARE
    of SBUF."""
    pairs = []
    for kernel in U.body_ops(func):
        if not _is_kernel(kernel, "mlp") or len(kernel.results) != 1:
            continue
        matmuls = [op for op in kernel_body(kernel) if op.name == "trn.matmul"]
        rows = input_rows_kernel(kernel, matmuls[0], target) if len(matmuls) == 2 else None
        if rows is None:
            continue
        tokens, features = U.shape(matmuls[0].operands[0])
        hidden, out_features = U.shape(matmuls[1].operands[1])
        itemsize = max(U.element_bytes(U.element_type(v))
                       for v in (*matmuls[0].operands, matmuls[1].operands[1]))
        # The kept rows: the norm's result, and the rows of its inputs it loaded (for the
        # residual, kernels/rows.py LoadedRows).
        kept = tokens // target.pe_cols * features * U.element_bytes(
            U.element_type(matmuls[0].operands[0])) + row_input_bytes(rows, target)
        if mlp_kernel.resident_bytes(target, features, hidden, out_features, itemsize) + \
                kept > target.sbuf_partition_bytes * MLP_RESIDENT_SHARE:
            continue
        pairs.append((rows, kernel))
    return pairs


def merge_input_rows(rows: ir.Operation, kernel: ir.Operation) -> ir.Operation:
    """One kernel of `kernel`'s kind: the row-wise kernel's ops (the one computing its result
    marked INPUT_ROWS), then `kernel`'s."""
    kernel_body(rows)[-2].attributes[INPUT_ROWS] = ir.UnitAttr.get()
    attributes = U.attributes_of(kernel)
    merged = merge_kernels((rows, kernel), U.str_attr(kernel, "kind"))
    for name, value in attributes.items():
        if name not in merged.attributes:
            merged.attributes[name] = value
    return merged


def merge_producer_rows(pair: tuple, kind: str) -> ir.Operation:
    """One kernel of `kind` (mlp_rows, linear_rows): the producer's ops, then the rows'; the
    op computing the producer's result carries PRODUCER_RESULT."""
    body = kernel_body(pair[0])
    body[-2].attributes[PRODUCER_RESULT] = ir.UnitAttr.get()
    return merge_kernels(pair, kind)


def merge_kernels(kernels: tuple, kind: str, also: ir.Operation | None = None,
                  at: ir.Operation | None = None) -> ir.Operation:
    """One kernel of `kind` computing `kernels` (in block order, each read by the next):
    their bodies one after another, each reading its predecessor's yielded value. The results
    of `also` (one of `kernels`, read only after the merged kernel) that something outside
    them reads, the merged kernel yields after its own. It goes before `at` (default: the
    last of `kernels`), which the caller has checked every value it reads is defined before."""
    last = kernels[-1]
    at = at if at is not None else last
    saved = [r for r in also.results if any(
        not any(_encloses(k, U.operation(u.owner)) for k in kernels) for u in r.uses)] \
        if also is not None else []
    return _merge_yielding(kernels, kind, [last.results[0], *saved], at, last.location)


def _merge_yielding(kernels: tuple, kind: str, yielded: list[ir.Value], at: ir.Operation,
                    loc: ir.Location, yield_loc: ir.Location | None = None) -> ir.Operation:
    """One kernel of `kind` before `at` (at `loc`): the bodies of `kernels` one after
    another; it yields `yielded` (results of `kernels`; its yield at `yield_loc`, default
    `loc`), each result replacing the value it stands for. The kernels are erased."""
    with ir.InsertionPoint(at), loc:
        merged = build_kernel(kind, [v.type for v in yielded])
    mapping: dict = {}
    with ir.InsertionPoint(merged.regions[0].blocks[0]):
        _clone_bodies(kernels, mapping)
        build_yield([mapping[v] for v in yielded],
                    loc=yield_loc if yield_loc is not None else loc)
    for old, new in zip(yielded, merged.results):
        old.replace_all_uses_with(new)
    for kernel in reversed(kernels):
        kernel.erase()
    return merged


def _is_kernel(op: ir.Operation, kind: str) -> bool:
    """Whether `op` is a trn.kernel of that kind."""
    return op.name == "trn.kernel" and U.str_attr(op, "kind") == kind


def _kind(ops: list[ir.Operation]) -> str:
    names = {op.name for op in ops}
    for root in ("matmul", "conv", "pool", "reduce"):
        if f"trn.{root}" in names:
            return root
    return "elementwise"
