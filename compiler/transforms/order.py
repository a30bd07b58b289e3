"""trn-order: put the kernels on the longest chain of dependent work first.

The ops of a function are lowered, given memory (trn-plan-memory works by liveness in
program order) and scheduled (trn-schedule keeps that memory's reuse order) in the order they
stand in. After fusion that order is the graph's, with each kernel where its last member was:
a backward's dH = dY @ W2 kernel, whose result the dW1 matmul waits for, can stand after the
independent dW2 matmul, so the chain that decides the end starts last. This pass reorders the
function topologically, taking next, among the ops whose operands are all defined, the one
with the most estimated work on its longest path to the return (its own estimate plus the
largest of its users'); ties keep program order.

A kernel's estimate is the roofline of what it does: max(matmul FLOPs / PE peak, bytes read
from outside and written / HBM bandwidth of one core), TARGET.md's figures. Other ops
(views, constants) cost nothing: they move up with their first user's chain.
"""

from __future__ import annotations

import dataclasses
import heapq
import math

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.passes import Pass, register
from torchneuron.compiler.transforms.tile import kernel_body
from torchneuron.target import get_target


@register
@dataclasses.dataclass
class OrderKernels(Pass):
    NAME = "trn-order"
    SUMMARY = "Order a function's ops so that the kernels on its longest chain of work come first"
    target: str = ""

    def run(self, module: ir.Operation) -> None:
        target = get_target(self.target or None)
        for func in U.functions(module):
            order_ops(func, target)


def order_ops(func: ir.Operation, target) -> None:
    ops = U.body_ops(func)
    body, terminator = ops[:-1], ops[-1]
    index = {op: i for i, op in enumerate(body)}
    users: list[set[int]] = [set() for _ in body]
    preds: list[set[int]] = [set() for _ in body]
    for i, op in enumerate(body):
        for v in _values_read(op):
            producer = U.defining_op(v)
            if producer is not None and producer in index:
                preds[i].add(index[producer])
                users[index[producer]].add(i)
    rank = [0.0] * len(body)
    for i in range(len(body) - 1, -1, -1):      # users stand later in program order
        rank[i] = estimate_ns(body[i], target) + max((rank[u] for u in users[i]), default=0.0)
    waiting = [len(p) for p in preds]
    ready = [(-rank[i], i) for i in range(len(body)) if not waiting[i]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, (-rank[u], u))
    for i in order:
        body[i].move_before(terminator)


def _values_read(op: ir.Operation) -> list[ir.Value]:
    """The values `op` reads, those its kernel body captures from above included."""
    if op.name != "trn.kernel":
        return list(op.operands)
    inside = kernel_body(op)
    defined = {r for o in inside for r in o.results}
    return [v for o in inside for v in o.operands if v not in defined]


def _bytes(value: ir.Value) -> int:
    return math.prod(U.shape(value)) * U.element_bytes(U.element_type(value))


def estimate_ns(op: ir.Operation, target) -> float:
    """Roofline time of a kernel (0 for anything else)."""
    if op.name != "trn.kernel":
        return 0.0
    flops = 0
    for inner in kernel_body(op):
        if inner.name == "trn.matmul":
            lhs = U.shape(inner.operands[0])
            flops += 2 * math.prod(U.shape(inner.results[0])) * lhs[-1]
    moved = sum(_bytes(v) for v in set(_values_read(op))) + sum(_bytes(r) for r in op.results)
    return max(flops / target.pe_peak_flops_per_ns(), moved / target.hbm_bytes_per_ns)
