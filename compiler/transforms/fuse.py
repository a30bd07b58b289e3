"""trn-fuse: group trn ops into `trn.kernel`s whose intermediates never leave the chip.

Groups formed:
- matmul / convolution / pooling + epilogue: the root and the chain of elementwise ops that
  consume it one after the other (bias add, activation, scaling, residual add ...), evaluated
  while the result is on chip (PSUM evacuation for PE results);
- elementwise chains: elementwise ops each feeding only the next, possibly through one
  reduction (exp -> sum -> reciprocal), so the reduced input never reaches HBM.
View ops (transpose, broadcast, reshape) and constant sources (fill, iota) that feed a group
from outside are copied into the kernel: its lowering folds views into access patterns and
generates sources on chip instead of reading them from HBM.

Inside a kernel, a value rounded to bf16/fp16 only to be read by the next elementwise op is
read unrounded (the engines compute in fp32): fused intermediates are not rounded, as in
Inductor's default. `keep-roundings=true` keeps every rounding the graph spells out.
"""

from __future__ import annotations

import dataclasses

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.kernels.tile_ops import ELEMENTWISE_OPS, SOURCE_OPS, VIEW_OPS
from torchneuron.compiler.passes import Pass, register
from torchneuron.dialects.trn import build_kernel, build_yield


@register
@dataclasses.dataclass
class Fuse(Pass):
    NAME = "trn-fuse"
    SUMMARY = "Group trn ops into fused kernels (matmul + epilogue, elementwise chains)"
    matmul_epilogue: bool = True
    elementwise: bool = True
    keep_roundings: bool = False

    def run(self, module: ir.Operation) -> None:
        for func in U.functions(module):
            for group in self.groups(func):
                kernel = outline(group)
                if not self.keep_roundings:
                    elide_intermediate_roundings(kernel)

    def groups(self, func: ir.Operation) -> list[list[ir.Operation]]:
        taken: set = set()
        groups = []
        for op in U.body_ops(func):
            if op in taken:
                continue
            if op.name in ("trn.matmul", "trn.conv", "trn.pool"):
                group = [op] + (self._chain(op, taken, through_reduce=False)
                                if self.matmul_epilogue else [])
            elif op.name == "trn.reduce" or (op.name in ELEMENTWISE_OPS
                                             and op.name not in SOURCE_OPS):
                group = [op] + (self._chain(op, taken, through_reduce=op.name != "trn.reduce")
                                if self.elementwise else [])
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
            user = _owner(uses[0])
            if user in taken:
                return chain
            if user.name == "trn.reduce" and through_reduce and user.operands[0] == current:
                through_reduce = False
                shape = U.shape(user.results[0])
            elif user.name not in ELEMENTWISE_OPS or user.name in SOURCE_OPS \
                    or U.shape(user.results[0]) != shape:
                return chain
            chain.append(user)
            current = user


def outline(group: list[ir.Operation], kind: str | None = None) -> ir.Operation:
    """Replace `group` (ops of one block, in order, whose last op's result is the only value
    used outside) by a trn.kernel computing it.

    View ops feeding the group from outside are copied into the kernel (recursively), so the
    kernel reads the views' sources from above."""
    members = list(group)
    inside = set(members)
    views: list[ir.Operation] = []

    def pull_views(value: ir.Value) -> None:
        producer = U.defining_op(value)
        if producer is not None and producer.name in VIEW_OPS + SOURCE_OPS \
                and producer not in inside:
            inside.add(producer)
            for operand in producer.operands:
                pull_views(operand)
            views.append(producer)

    for op in members:
        for v in op.operands:
            pull_views(v)
    last = members[-1]
    with ir.InsertionPoint(last), last.location:
        kernel = build_kernel(kind or _kind(members), last.results[0].type)
    block = kernel.regions[0].blocks[0]
    mapping: dict = {}
    with ir.InsertionPoint(block):
        for op in views + members:
            clone = U.clone_with_operands(op, [mapping.get(v, v) for v in op.operands])
            mapping[op.results[0]] = clone.results[0]
        build_yield(mapping[last.results[0]], loc=last.location)
    last.results[0].replace_all_uses_with(kernel.results[0])
    for op in reversed(members):
        op.erase()
    for op in reversed(views):
        if not list(op.results[0].uses):
            op.erase()
    return kernel


def elide_intermediate_roundings(kernel: ir.Operation) -> None:
    """Bypass float-narrowing trn.converts whose every user is an elementwise op of the
    kernel: those users read the fp32 value."""
    for op in list(kernel.regions[0].blocks[0].operations):
        op = op.operation if isinstance(op, ir.OpView) else op
        if op.name != "trn.convert":
            continue
        source, result = op.operands[0], op.results[0]
        wide, narrow = U.element_type(source), U.element_type(result)
        if not (isinstance(wide, ir.FloatType) and isinstance(narrow, ir.FloatType)
                and wide.width > narrow.width):
            continue
        users = [_owner(u) for u in result.uses]
        if users and all(u.name in ELEMENTWISE_OPS for u in users):
            result.replace_all_uses_with(source)
            op.erase()


def _owner(use) -> ir.Operation:
    owner = use.owner
    return owner.operation if isinstance(owner, ir.OpView) else owner


def _kind(ops: list[ir.Operation]) -> str:
    names = {op.name for op in ops}
    for root in ("matmul", "conv", "pool", "reduce"):
        if f"trn.{root}" in names:
            return root
    return "elementwise"
