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
"""

from __future__ import annotations

import dataclasses

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.passes import Pass, register
from torchneuron.compiler.transforms.tile import epilogue_operand_along, kernel_body
from torchneuron.dialects.trn import build_yield


@register
@dataclasses.dataclass
class LayoutPass(Pass):
    NAME = "trn-layout"
    SUMMARY = ("Store matmul results transposed where their consumers contract over them, "
               "attention outputs token-major where their readers want them so")
    attention_token_major: bool = True

    def run(self, module: ir.Operation) -> None:
        for func in U.functions(module):
            for op in U.body_ops(func):
                if op.name != "trn.kernel":
                    continue
                if _wants_transposed_result(op):
                    _transpose_result(op)
                elif self.attention_token_major:
                    readers = _token_major_readers(op)
                    if readers:
                        _store_token_major(op, readers)


# [B, H, S, Dv] -> [B, S, H, Dv]: heads side by side in each token's row.
TOKEN_MAJOR = [0, 2, 1, 3]


def _token_major_readers(kernel: ir.Operation) -> list[tuple] | None:
    """For an attention kernel whose result O[B*H, S, Dv] (or [B, H, S, Dv]) is read only
    through reshape to [B, H, S, Dv] then transpose TOKEN_MAJOR: the (reshape, transposes)
    pairs, all of one type; otherwise None."""
    if U.str_attr(kernel, "kind") != "attention":
        return None
    result = kernel.results[0]
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


def _store_token_major(kernel: ir.Operation, readers: list[tuple]) -> None:
    result = kernel.results[0]
    etype = U.element_type(result)
    heads_shape = U.shape(readers[0][0].results[0])
    b, h, s, dv = heads_shape
    token_major = U.tensor_type([b, s, h, dv], etype)
    old_yield = kernel_body(kernel)[-1]
    with ir.InsertionPoint(old_yield), old_yield.location:
        split = U.create("trn.reshape", [U.tensor_type(heads_shape, etype)],
                         [old_yield.operands[0]]).results[0]
        t = U.create("trn.transpose", [token_major], [split],
                     {"permutation": U.i64_array(TOKEN_MAJOR)}).results[0]
        # (A second result, probabilities an attention kernel also stores, stays as it is.)
        build_yield([t] + list(old_yield.operands)[1:], loc=old_yield.location)
    old_yield.erase()
    result.set_type(token_major)
    for reshape, transposes in readers:
        for t in transposes:
            t.results[0].replace_all_uses_with(result)
            t.erase()
        reshape.erase()


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
    rank = len(shape)
    perm = _swap_last_two(rank)
    transposed_type = U.tensor_type([shape[p] for p in perm], U.element_type(result))
    old_yield = kernel_body(kernel)[-1]
    with ir.InsertionPoint(old_yield), old_yield.location:
        t = U.create("trn.transpose", [transposed_type], [old_yield.operands[0]],
                     {"permutation": U.i64_array(perm)}).results[0]
        build_yield(t, loc=old_yield.location)
    old_yield.erase()
    kernel.attributes["orientation"] = U.string("nm")
    uses = [(U.operation(u.owner), u.operand_number) for u in result.uses]
    result.set_type(transposed_type)
    for user, index in uses:
        consumer_block = user.parent.regions[0].blocks[0]
        with ir.InsertionPoint.at_block_begin(consumer_block), user.location:
            logical = U.create("trn.transpose", [U.tensor_type(shape, U.element_type(result))],
                               [result], {"permutation": U.i64_array(perm)}).results[0]
        user.operands[index] = logical
