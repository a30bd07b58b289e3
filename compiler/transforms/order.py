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

Option `co-run`: an attention kernel is bound by ACT and DVE and leaves PE mostly idle: for
about its vector work (each elementwise op or reduction of its body one pass over its
elements, ACT and DVE sharing the passes at one element per cycle and partition) less its
own matmuls. PE-bound kernels (matmul FLOPs over PE peak above their bytes over HBM
bandwidth) that depend neither on it nor it on them, and whose own inputs are all computed
before it, are its partners, the ones with the least PE work first (the first on a tie),
while their PE work adds up to at most that idle time. They move to just before it, in the
order they stood, and are marked as a pair with it (`co_run` = the pair's number,
`co_run_role` = "primary" / "partner"): trn-plan-memory gives the partners' tiles and the
attention kernel's disjoint parts of SBUF and PSUM, so that the partners' tiles do not take
the bytes the attention kernel's tiles left (nor the other way), which would make the later
wait for the earlier through memory reuse and run them one after the other. (Least work
first: a BERT layer's backward pairs the attention output projection's weight gradient and
one FFN weight gradient with its attention kernel, where the two FFN weight gradients held
up the attention kernel's inputs on PE, encoder_train backward 1201.5 -> 1174.4 us against
1309.6 us.)

A matmul kernel whose bytes over HBM bandwidth exceed twice its PE work is a primary too: a
softmax backward's dV = P^T @ dO reads the [B * H, S, S] probabilities to produce 64
columns per head, and leaves PE idle while they stream in. Its partner is the one PE-bound
kernel (independent, its inputs computed before it) that shortens the pair most, judged by
the roofline of the two together (their PE work added, and their bytes: the partner's loads
share the DMA queues) against one after the other; a BERT layer's backward pairs dV with
the first FFN weight's gradient (encoder_train backward 1098.0 -> 1079.7 us).
"""

from __future__ import annotations

import dataclasses
import heapq
import math

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.kernels.tile_ops import ELEMENTWISE_OPS, SOURCE_OPS
from torchneuron.compiler.passes import Pass, register
from torchneuron.compiler.transforms.tile import kernel_body
from torchneuron.target import get_target


@register
@dataclasses.dataclass
class OrderKernels(Pass):
    NAME = "trn-order"
    SUMMARY = "Order a function's ops so that the kernels on its longest chain of work come first"
    target: str = ""
    # An attention kernel and an independent PE-bound kernel are paired (module docstring)
    co_run: bool = False

    def run(self, module: ir.Operation) -> None:
        target = get_target(self.target or None)
        for func in U.functions(module):
            order_ops(func, target, self.co_run)


def order_ops(func: ir.Operation, target, co_run: bool = False) -> None:
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
    if co_run:
        _pair_co_runs(func, body, order, preds, users, target)


def _closure(start: int, edges: list[set[int]]) -> set[int]:
    seen, stack = set(), [start]
    while stack:
        for j in edges[stack.pop()]:
            if j not in seen:
                seen.add(j)
                stack.append(j)
    return seen


def _matmul_flops(op: ir.Operation) -> int:
    """FLOPs of the matmuls in a kernel's body."""
    flops = 0
    for inner in kernel_body(op):
        if inner.name == "trn.matmul":
            flops += 2 * math.prod(U.shape(inner.results[0])) * U.shape(inner.operands[0])[-1]
    return flops


def _pe_ns(op: ir.Operation, target) -> float:
    return _matmul_flops(op) / target.pe_peak_flops_per_ns()


def _pair_co_runs(func, body, order, preds, users, target) -> None:
    """Move before each attention kernel, and each DMA-bound matmul kernel, its partners;
    mark the pair (module docstring)."""
    position = {i: k for k, i in enumerate(order)}
    taken: set[int] = set()
    pairs = 0
    for a in list(order):
        op = body[a]
        if op.name != "trn.kernel" or a in taken:
            continue
        attention = U.str_attr(op, "kind") == "attention"
        if not attention and not _dma_bound(op, target):
            continue
        related = _closure(a, preds) | _closure(a, users) | {a}
        candidates = []
        for c in order:
            candidate = body[c]
            if c in related or c in taken or position[c] < position[a] or \
                    candidate.name != "trn.kernel":
                continue
            pe = _pe_ns(candidate, target)
            if pe <= 0 or pe < estimate_ns(candidate, target):
                continue        # not PE-bound
            later = [p for p in _closure(c, preds) if position[p] > position[a]]
            if any(body[p].name == "trn.kernel" for p in later):
                continue        # an input of it is computed after the primary
            candidates.append((pe, position[c], c, later))
        partners, moved = [], set()
        if attention:
            idle = _vector_ns(op, target) - _pe_ns(op, target)
            for pe, _, c, later in sorted(candidates):
                if pe > idle:
                    break
                idle -= pe
                partners.append(c)
                moved.update(later)
        else:
            # A DMA-bound primary: the one partner that shortens the pair most, by the
            # roofline of the two together against one after the other (its loads share
            # the queues the primary keeps busy).
            pe_a, dma_a = _pe_ns(op, target), _dma_ns(op, target)
            best = None
            for pe, _, c, later in candidates:
                together = max(pe_a + pe, dma_a + _dma_ns(body[c], target))
                gain = dma_a + estimate_ns(body[c], target) - together
                if gain > 0 and (best is None or gain > best[0]):
                    best = (gain, c, later)
            if best is not None:
                partners.append(best[1])
                moved.update(best[2])
        if not partners:
            continue
        taken.add(a)
        taken.update(partners)
        # The partners and the views they read that stood after the attention kernel, in
        # the order they stood.
        for p in sorted(moved | set(partners), key=position.get):
            body[p].move_before(op)
        index = {o: i for i, o in enumerate(body)}
        current = [index[o] for o in U.body_ops(func)[:-1] if o in index]
        position = {i: k for k, i in enumerate(current)}
        for kernel, role in [(op, "primary")] + [(body[c], "partner") for c in partners]:
            kernel.attributes["co_run"] = U.i64(pairs)
            kernel.attributes["co_run_role"] = U.string(role)
        pairs += 1


def _dma_ns(op: ir.Operation, target) -> float:
    """A kernel's bytes read from outside it and written, over one core's HBM bandwidth."""
    moved = sum(_bytes(v) for v in set(_values_read(op))) + sum(_bytes(r) for r in op.results)
    return moved / target.hbm_bytes_per_ns


def _dma_bound(op: ir.Operation, target) -> bool:
    """A matmul kernel whose bytes take more than twice its PE work (a batched matmul over a
    large operand: a softmax backward's dV = P^T @ dO reads the [B * H, S, S] probabilities
    for 64 columns of output)."""
    return U.str_attr(op, "kind") == "matmul" and _dma_ns(op, target) > 2 * _pe_ns(op, target)


def _vector_ns(op: ir.Operation, target) -> float:
    """A kernel's vector work: one pass over the elements of each elementwise op or reduction
    of its body (a conversion to its own type is none), at one element per cycle and
    partition on ACT and DVE together."""
    elements = 0
    for inner in kernel_body(op):
        if (inner.name == "trn.reduce" or inner.name in ELEMENTWISE_OPS and
                inner.name not in SOURCE_OPS) and not (
                inner.name == "trn.convert" and inner.operands[0].type == inner.results[0].type):
            elements += math.prod(U.shape(inner.operands[0]))
    return elements / target.num_partitions / (target.act_ghz + target.dve_ghz)


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
    return max(_pe_ns(op, target), _dma_ns(op, target))
