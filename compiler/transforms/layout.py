"""trn-layout: store a matmul kernel's result transposed when every consumer wants it so.

The PE contracts over the partition axis: a matmul's left operand A[M, K] is needed as K-major
tiles A^T[K, M]. When A is itself the result of a matmul kernel, that kernel can compute it
transposed (orientation "nm": output features on partitions, as a bias epilogue wants anyway)
and store A^T straight from its tiles; the consumer then reads K-major rows. Without this, the
producer transposes every output tile back to row-major on the PE and the consumer transposes
them again (TARGET.md: choosing such layouts for a whole graph is the compiler's job).

The rewrite, for a matmul kernel whose result R[..., M, N] is used only as the left operand of
matmuls inside other kernels:
- the kernel yields trn.transpose(R) (last two dims swapped) and is marked orientation "nm";
- each consuming kernel reads trn.transpose(R^T), a view its lowering folds into the access
  pattern.
Graph outputs keep their row-major layout. Kernels whose epilogue reads an operand varying
along M only (which wants M on partitions) are left alone.

Token-major attention outputs (option `attention-token-major`): an attention kernel's result
O[B*H, S, Dv] (one row block per head) that is read only as reshape -> [B, H, S, Dv] ->
transpose to [B, S, H, Dv] (heads side by side in each token's row, as the output projection
reads it) is stored in that order instead: the kernel yields the transposed view and writes
each query block of all heads as whole token rows (compiler/kernels/attention.py), and the
readers take the result as it is. Stored head by head, every token row of O is a 128-byte run
(Dv = 64 in bf16) that the projection reads back one run per partition row.

Transposed row contractions (option `transposed-contractions`): an attention kernel's third
matmul C = A @ R [.., D, Sk] (trn-fuse attention-contractions: a softmax backward's dK^T =
Q^T @ dS, R the rows) whose result is read only through reshapes of its batch dims and then
a transpose of its last two (dK, as the QKV gradient takes it) computes C^T = R^T @ A^T
instead, and the readers take it as it is. The lowering accumulates C^T in key blocks of 128
rows with R's row tiles as the stationary operand, the same sums in the same order; the
transpose that followed (a copy through HBM, 3.1 MB read and written for BERT-base) is gone,
and C^T can be stored token-major like the output (below).

Concatenations in their reader's order (option `concat-reader-order`): a concatenation of
equal slices along dim 0, built by insert_slices into a trn.empty, that every reader splits
(reshape [n * c, ...] -> [n, c, ...]) and transposes the same way is built in that transposed
order instead: each slice is transposed as the reader would see it and inserted at its index
of the split dim. A training step's QKV gradient is one (dQ, dK and dV as [B, H, S, D],
concatenated and read as [B, S, 3, H, D] rows by the weight gradient): built head by head, its
reader regathered it token by token (a copy in runs of 128 to 512 B, stored and loaded
again); built in the reader's order, the weight gradient loads whole rows, and the attention
outputs inserted into it are themselves read token-major (above), so their kernels write
straight into it.
"""

from __future__ import annotations

import dataclasses

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.passes import Pass, register
from torchneuron.compiler.kernels.tile_ops import ELEMENTWISE_OPS, VIEW_OPS
from torchneuron.compiler.transforms.tile import epilogue_operand_along, kernel_body
from torchneuron.dialects.trn import RESULT_GROUPS, build_yield, result_groups


@register
@dataclasses.dataclass
class LayoutPass(Pass):
    NAME = "trn-layout"
    SUMMARY = ("Store matmul results transposed where their consumers contract over them, "
               "attention outputs token-major where their readers want them so")
    attention_token_major: bool = True
    concat_reader_order: bool = True
    transposed_contractions: bool = True

    def run(self, module: ir.Operation) -> None:
        for func in U.functions(module):
            if self.transposed_contractions:
                # (Before the concatenations: the transposes it removes would be chained
                # with the ones those add.)
                for op in [op for op in U.body_ops(func) if op.name == "trn.kernel"]:
                    found = _transposing_readers(op)
                    if found is not None:
                        _transpose_contraction(op, *found)
            if self.concat_reader_order:
                # (Chains are disjoint: rebuilding one erases none of the others' ends.)
                for last in [op for op in U.body_ops(func) if _ends_chain(op)]:
                    _build_in_reader_order(last)
            # (Kernels first: the rules below erase view ops of the function's body, the
            # readers of the kernels they rewrite.)
            for op in [op for op in U.body_ops(func) if op.name == "trn.kernel"]:
                if _wants_transposed_result(op):
                    _transpose_result(op)
                elif self.attention_token_major:
                    for index in _results_token_major_capable(op):
                        readers = _token_major_readers(op, index)
                        if readers:
                            _store_token_major(op, readers, index)


# [B, H, S, Dv] -> [B, S, H, Dv]: heads side by side in each token's row.
TOKEN_MAJOR = [0, 2, 1, 3]


def _results_token_major_capable(kernel: ir.Operation) -> list[int]:
    """The results of `kernel` its lowering can store token-major: the first, and an attention
    kernel's transposed row contraction (its second result, C^T [.., Sk, D])."""
    indices = [0]
    contraction = _row_contraction(kernel)
    if contraction is not None and _transposed_form(contraction[0]):
        indices.append(1)
    if _row_contraction(kernel, 2) is not None:
        indices.append(2)        # an input contraction (trn-fuse: dV = P^T @ dO), C^T too
    return indices


def _token_major_readers(kernel: ir.Operation, index: int = 0) -> list[tuple] | None:
    """For an attention kernel whose result `index`, O[B*H, S, Dv] (or [B, H, S, Dv]), is read
    only through reshape to [B, H, S, Dv] then transpose TOKEN_MAJOR: the (reshape,
    transposes) pairs, all of one type; otherwise None."""
    kind = U.str_attr(kernel, "kind")
    if kind == "matmul":
        # A batched product (dV = P^T @ dO per head) written through the inverse view as
        # convert-trn-to-nisa writes a transposed result; one result, computed in the kernel.
        body = kernel_body(kernel)
        yielded = body[-1].operands[0]
        if len(kernel.results) != 1 or U.defining_op(yielded) not in body[:-1] or \
                U.defining_op(yielded).name in ("trn.transpose", "trn.reshape"):
            return None
    elif kind != "attention":
        return None
    result = kernel.results[index]
    readers, shapes = [], set()
    for use in result.uses:
        reshape = U.operation(use.owner)
        if reshape.name != "trn.reshape" or len(U.shape(reshape.results[0])) != 4:
            return None
        transposes = [U.operation(u.owner) for u in reshape.results[0].uses]
        if not transposes or any(t.name != "trn.transpose" or
                                 list(U.array_attr(t, "permutation")) != TOKEN_MAJOR
                                 for t in transposes):
            return None
        shapes.add(tuple(U.shape(reshape.results[0])))
        readers.append((reshape, transposes))
    if len(shapes) != 1:
        return None
    b, h, s, dv = shapes.pop()
    if h < 2 or list(U.shape(result)[-2:]) != [s, dv]:
        return None
    return readers


def _store_token_major(kernel: ir.Operation, readers: list[tuple], index: int = 0) -> None:
    result = kernel.results[index]
    etype = U.element_type(result)
    heads_shape = U.shape(readers[0][0].results[0])
    b, h, s, dv = heads_shape
    token_major = U.tensor_type([b, s, h, dv], etype)
    old_yield = kernel_body(kernel)[-1]
    with ir.InsertionPoint(old_yield), old_yield.location:
        split = U.create("trn.reshape", [U.tensor_type(heads_shape, etype)],
                         [old_yield.operands[index]]).results[0]
        t = U.create("trn.transpose", [token_major], [split],
                     {"permutation": U.i64_array(TOKEN_MAJOR)}).results[0]
    # (The other results, probabilities an attention kernel also stores, stay as they are.)
    _yield_instead(kernel, index, t)
    for reshape, transposes in readers:
        for t in transposes:
            t.results[0].replace_all_uses_with(result)
            t.erase()
        reshape.erase()


def _row_contraction(kernel: ir.Operation, index: int = 1
                     ) -> tuple[ir.Operation, list[ir.Operation]] | None:
    """An attention kernel's third matmul (trn-fuse attention-contractions; with `index` 2,
    its fourth, attention-input-contractions) and the unary elementwise ops from it to the
    kernel's result `index`, which it computes and nothing else in the kernel reads; else
    None."""
    # (Two results with a row contraction, three with an input contraction too.)
    if U.str_attr(kernel, "kind") != "attention" or len(kernel.results) not in (2, 3) or \
            index >= len(kernel.results):
        return None
    body = kernel_body(kernel)
    matmuls = [op for op in body if op.name == "trn.matmul"]
    if len(matmuls) != len(kernel.results) + 1:
        return None
    matmul = matmuls[index + 1]
    chain, value = [], matmul.results[0]
    for op in body[body.index(matmul) + 1:-1]:
        if op.name in ELEMENTWISE_OPS and list(op.operands) == [value] and \
                U.shape(op.results[0]) == U.shape(value):
            chain.append(op)
            value = op.results[0]
    if body[-1].operands[index] != value or any(
            len(list(op.results[0].uses)) != 1 for op in [matmul] + chain):
        return None
    return matmul, chain


def _transposed_form(matmul: ir.Operation) -> bool:
    """Whether the row contraction `matmul` is C^T = R^T @ B: its left operand the transpose
    of a value computed in the kernel (the rows), its right one read from outside."""
    kernel = U.operation(matmul.parent)
    left = U.defining_op(matmul.operands[0])
    return left is not None and left.name == "trn.transpose" and \
        not _from_outside(matmul.operands[0], kernel) and \
        _from_outside(matmul.operands[1], kernel)


def _from_outside(value: ir.Value, kernel: ir.Operation) -> bool:
    """Whether `value` is a value defined outside `kernel` or a chain of view ops over one."""
    op = U.defining_op(value)
    while op is not None and U.operation(op.parent) == kernel:
        if op.name not in VIEW_OPS:
            return False
        op = U.defining_op(op.operands[0])
    return True


def _transposing_readers(kernel: ir.Operation) -> tuple | None:
    """For an attention kernel whose row contraction C = A @ R (its second result, computed
    from the rows and an operand from outside) is read only through reshapes that keep its
    last two dims and then a transpose of those two alone: (the matmul, its unary chain, the
    readers as (reshapes, transpose) pairs); else None."""
    found = _row_contraction(kernel)
    if found is None:
        return None
    matmul, chain = found
    a, rows = matmul.operands
    kernel_ops = set(kernel_body(kernel))
    if not _from_outside(a, kernel) or U.defining_op(rows) not in kernel_ops:
        return None
    result = kernel.results[1]
    rank = len(U.shape(result))
    tail = U.shape(result)[-2:]
    readers = []
    for use in result.uses:
        reshapes, value = [], result
        op = U.operation(use.owner)
        while op.name == "trn.reshape" and U.shape(op.results[0])[-2:] == tail and \
                len(list(op.results[0].uses)) == 1:
            reshapes.append(op)
            value = op.results[0]
            op = U.operation(next(iter(value.uses)).owner)
        if op.name != "trn.transpose" or op.operands[0] != value or \
                list(U.array_attr(op, "permutation")) != _swap_last_two(len(U.shape(value))):
            return None
        readers.append((reshapes, op))
    if not readers or rank < 2:
        return None
    return matmul, chain, readers


def _transpose_contraction(kernel: ir.Operation, matmul: ir.Operation,
                           chain: list[ir.Operation], readers: list[tuple]) -> None:
    """Compute `kernel`'s row contraction transposed (`_transposing_readers`): C^T = R^T @ A^T
    and its unary chain on C^T's shape; the readers lose their transposes."""
    a, rows = matmul.operands
    perm = _swap_last_two(len(U.shape(matmul.results[0])))
    with ir.InsertionPoint(matmul), matmul.location:
        rows_t = U.create("trn.transpose", [_swapped_tail(rows)], [rows],
                          {"permutation": U.i64_array(perm)}).results[0]
        a_op = U.defining_op(a)
        if a_op is not None and a_op.name == "trn.transpose" and \
                list(U.array_attr(a_op, "permutation")) == perm:
            a_t = a_op.operands[0]         # A = B^T: A^T is B
        else:
            a_t = U.create("trn.transpose", [_swapped_tail(a)], [a],
                           {"permutation": U.i64_array(perm)}).results[0]
        value = U.create("trn.matmul", [_swapped_tail(matmul.results[0])], [rows_t, a_t],
                         U.attributes_of(matmul)).results[0]
        for op in chain:
            value = U.create(op.name, [_swapped_tail(op.results[0])], [value],
                             U.attributes_of(op), loc=op.location).results[0]
    _yield_instead(kernel, 1, value)
    for op in reversed([matmul] + chain):
        op.erase()
    if a_op is not None and a_op.name == "trn.transpose" and not list(a_op.results[0].uses):
        a_op.erase()
    for reshapes, transpose in readers:
        for reshape in reshapes:
            reshape.results[0].set_type(_swapped_tail(reshape.results[0]))
        transpose.results[0].replace_all_uses_with(transpose.operands[0])
        transpose.erase()


def _yield_instead(kernel: ir.Operation, index: int, value: ir.Value) -> None:
    """Make `kernel` yield `value` (made in its body) as its result `index`, that result of
    `value`'s type, and the kernel's result groups those its types make (dialects/trn.py
    `result_groups`)."""
    old_yield = kernel_body(kernel)[-1]
    values = list(old_yield.operands)
    values[index] = value
    with ir.InsertionPoint(old_yield):
        build_yield(values, loc=old_yield.location)
    old_yield.erase()
    kernel.results[index].set_type(value.type)
    kernel.attributes[RESULT_GROUPS] = ir.DenseI32ArrayAttr.get(
        result_groups([r.type for r in kernel.results]))


def _swapped_tail(value: ir.Value) -> ir.Type:
    """`value`'s type with its last two dims swapped."""
    shape = U.shape(value)
    return U.tensor_type(shape[:-2] + [shape[-1], shape[-2]], U.element_type(value))


def _wants_transposed_result(kernel: ir.Operation) -> bool:
    body = kernel_body(kernel)
    matmuls = [op for op in body if op.name == "trn.matmul"]
    result = kernel.results[0]
    if len(matmuls) != 1 or len(kernel.results) != 1 or len(U.shape(result)) < 2 or \
            epilogue_operand_along(body, "m"):
        return False
    if "orientation" in kernel.attributes and U.str_attr(kernel, "orientation") != "nm":
        return False     # a decision made before (by a user or the tuner) stands
    yielded = body[-1].operands[0]
    if U.defining_op(yielded) not in body[:-1]:
        return False
    uses = list(result.uses)
    if not uses:
        return False
    for use in uses:
        user = U.operation(use.owner)
        if user.name != "trn.matmul" or use.operand_number != 0 \
                or user.parent.name != "trn.kernel" or user.parent == kernel:
            return False
    return True


def _swap_last_two(rank: int) -> list[int]:
    return list(range(rank - 2)) + [rank - 1, rank - 2]


def _transpose_result(kernel: ir.Operation) -> None:
    result = kernel.results[0]
    shape = U.shape(result)
    perm = _swap_last_two(len(shape))
    old_yield = kernel_body(kernel)[-1]
    with ir.InsertionPoint(old_yield), old_yield.location:
        t = U.create("trn.transpose", [_swapped_tail(result)], [old_yield.operands[0]],
                     {"permutation": U.i64_array(perm)}).results[0]
    kernel.attributes["orientation"] = U.string("nm")
    uses = [(U.operation(u.owner), u.operand_number) for u in result.uses]
    _yield_instead(kernel, 0, t)
    for user, index in uses:
        consumer_block = user.parent.regions[0].blocks[0]
        with ir.InsertionPoint.at_block_begin(consumer_block), user.location:
            logical = U.create("trn.transpose", [U.tensor_type(shape, U.element_type(result))],
                               [result], {"permutation": U.i64_array(perm)}).results[0]
        user.operands[index] = logical


def _ends_chain(op: ir.Operation) -> bool:
    """An insert_slice whose result no other insert_slice writes into."""
    return op.name == "trn.insert_slice" and not any(
        U.operation(u.owner).name == "trn.insert_slice" and u.operand_number == 0
        for u in op.results[0].uses)


def _concatenation(last: ir.Operation) -> tuple[ir.Operation, list[ir.Operation], int] | None:
    """For the last insert_slice of a chain building a concatenation along dim 0 from a
    trn.empty (each slice c rows, the slices covering it exactly once, each intermediate
    result read only by the next insert): (the empty, the inserts in order, c); else None."""
    inserts, op = [], last
    while op is not None and op.name == "trn.insert_slice":
        inserts.append(op)
        dest = op.operands[0]
        op = U.defining_op(dest)
        if op is not None and len(list(dest.uses)) != 1:
            return None
    inserts.reverse()
    if op is None or op.name != "trn.empty":
        return None
    shape = U.shape(inserts[0].results[0])
    c = U.shape(inserts[0].operands[1])[0]
    starts = []
    for insert in inserts:
        offsets, strides = U.array_attr(insert, "offsets"), U.array_attr(insert, "strides")
        source_shape = U.shape(insert.operands[1])
        if any(s != 1 for s in strides) or any(offsets[1:]) or \
                source_shape != [c] + shape[1:] or offsets[0] % c:
            return None
        starts.append(offsets[0])
    if c == 0 or sorted(starts) != list(range(0, shape[0], c)):
        return None
    return op, inserts, c


def _split_and_transposed(value: ir.Value, c: int) -> tuple[list, list[int]] | None:
    """When every reader of `value` reshapes it to [n, c, rest...] and every reader of those
    reshapes transposes the result by one permutation: (the (reshape, transposes) pairs, the
    permutation); else None."""
    shape = U.shape(value)
    split = [shape[0] // c, c] + shape[1:]
    readers, perms = [], set()
    for use in value.uses:
        reshape = U.operation(use.owner)
        if reshape.name != "trn.reshape" or U.shape(reshape.results[0]) != split:
            return None
        transposes = [U.operation(u.owner) for u in reshape.results[0].uses]
        if not transposes or any(t.name != "trn.transpose" for t in transposes):
            return None
        perms.update(tuple(U.array_attr(t, "permutation")) for t in transposes)
        readers.append((reshape, transposes))
    if not readers or len(perms) != 1:
        return None
    return readers, list(perms.pop())


def _build_in_reader_order(last: ir.Operation) -> None:
    """Rebuild the concatenation `last` ends (see the module docstring) in its readers'
    transposed order, where it is one whose readers all split and transpose it alike."""
    found = _concatenation(last)
    if found is None:
        return
    empty, inserts, c = found
    read = _split_and_transposed(last.results[0], c)
    if read is None:
        return
    readers, perm = read
    if perm[0] == 0:
        return                      # the slices stay whole blocks: nothing to gain
    split_shape = U.shape(readers[0][0].results[0])
    etype = U.element_type(last.results[0])
    new_shape = [split_shape[p] for p in perm]
    slot = perm.index(0)            # where the slice index goes
    # A slice [c, rest...] as the readers see it: its dims in the permutation's order
    # (without the slice index), then a unit dim at `slot`.
    inner = [p - 1 for p in perm if p != 0]
    with ir.InsertionPoint(inserts[0]), inserts[0].location:
        whole = U.create("trn.empty", [U.tensor_type(new_shape, etype)], []).results[0]
    for insert in inserts:
        source = insert.operands[1]
        index = U.array_attr(insert, "offsets")[0] // c
        with ir.InsertionPoint(insert), insert.location:
            if inner != list(range(len(inner))):
                shape = U.shape(source)
                source = U.create("trn.transpose", [U.tensor_type([shape[p] for p in inner],
                                                                  etype)],
                                  [source], {"permutation": U.i64_array(inner)}).results[0]
            unit = list(new_shape)
            unit[slot] = 1
            source = U.create("trn.reshape", [U.tensor_type(unit, etype)], [source]).results[0]
            offsets = [0] * len(new_shape)
            offsets[slot] = index
            whole = U.create("trn.insert_slice", [U.tensor_type(new_shape, etype)],
                             [whole, source],
                             {"offsets": U.i64_array(offsets),
                              "strides": U.i64_array([1] * len(new_shape))}).results[0]
    for reshape, transposes in readers:
        for t in transposes:
            t.results[0].replace_all_uses_with(whole)
            t.erase()
        reshape.erase()
    for insert in reversed(inserts):
        insert.erase()
    empty.erase()
