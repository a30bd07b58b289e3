"""What ran where: per-graph reports of compiled and fallen-back ops, and `torchneuron.explain`.

    report = torchneuron.explain(model, x)          # compiles and runs model(x) once
    print(report)                                   # per graph: compiled ops, fallbacks, FLOPs
    report.to_dict()                                # the same as JSON-able data

Every graph the backend compiles gets a `GraphReport` (also logged at INFO level on the
"torchneuron" logger). FLOPs follow torchneuron.partition's convention: matmul-like ops with
torch.utils.flop_counter's formulas, every other compute op 1 FLOP per output element
(reductions: per input element), views 0.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from typing import Any


@dataclasses.dataclass
class NodeRecord:
    node: str                      # FX node name
    op: str                        # 'aten.mm'
    status: str                    # 'compiled' | 'fallback' | 'view' (a view run in PyTorch)
    flops: int
    source: dict | None            # {'file', 'line', 'code'}
    category: str | None = None    # fallback reason category (torchneuron.partition.CATEGORIES)
    reason: str | None = None      # fallback reason message

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class PartitionRecord:
    """One compiled NeuronCore partition of a graph."""
    name: str
    nodes: int                     # FX nodes in it
    compile_seconds: float         # spent in this process: compiling, or loading from the cache
    cache: str                     # 'hit' | 'miss' | 'off' (the persistent compile cache)
    original_compile_seconds: float | None = None    # a hit: what compiling it took then

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class GraphReport:
    """One FX graph (a Dynamo graph's forward or backward) and where its ops run."""
    name: str
    kind: str                      # 'forward' | 'backward' | 'inference'
    nodes: list[NodeRecord]
    partitions: int                # compiled NeuronCore partitions
    rounds: int                    # partitioning rounds (1 + rounds that blamed a node)
    compile_seconds: float         # the backend's time on this graph: partitioning, compiling
                                   # (or loading from the compile cache) every partition
    partition_records: list[PartitionRecord] = dataclasses.field(default_factory=list)
    programs: list = dataclasses.field(default_factory=list, repr=False, compare=False)

    @property
    def cache_hits(self) -> int:
        return sum(1 for p in self.partition_records if p.cache == "hit")

    @property
    def simulated_ns(self) -> float:
        """Simulated device time of the graph's last run (sum over its partitions)."""
        return sum(p.last_profile.total_ns for p in self.programs
                   if getattr(p, "last_profile", None) is not None)

    @property
    def compiled(self) -> list[NodeRecord]:
        return [n for n in self.nodes if n.status == "compiled" and n.op != "getitem"]

    @property
    def fallbacks(self) -> list[NodeRecord]:
        return [n for n in self.nodes if n.status == "fallback"]

    @property
    def compiled_ops(self) -> Counter:
        return Counter(n.op for n in self.compiled)

    @property
    def fallback_ops(self) -> Counter:
        return Counter(n.op for n in self.fallbacks)

    @property
    def flops_total(self) -> int:
        return sum(n.flops for n in self.nodes)

    @property
    def flops_neuron(self) -> int:
        return sum(n.flops for n in self.nodes if n.status == "compiled")

    @property
    def flop_fraction(self) -> float:
        total = self.flops_total
        return self.flops_neuron / total if total else (1.0 if not self.fallbacks else 0.0)

    @property
    def fully_compiled(self) -> bool:
        return not self.fallbacks

    def runtime_fallback(self, partition, reason) -> None:
        """A compiled partition failed on the device and now runs in PyTorch."""
        members = set(partition.nodes)
        for record in self.nodes:
            if record.node in members and record.status == "compiled":
                record.status, record.category, record.reason = ("fallback", reason.category,
                                                                 reason.message)
        self.partitions -= 1

    def to_dict(self) -> dict:
        return {
            "name": self.name, "kind": self.kind, "partitions": self.partitions,
            "rounds": self.rounds, "compile_seconds": round(self.compile_seconds, 4),
            "partition_details": [p.to_dict() for p in self.partition_records],
            "simulated_ns": self.simulated_ns,
            "compiled_ops": dict(self.compiled_ops),
            "compiled_nodes": [n.node for n in self.compiled],
            "fallbacks": [{"node": n.node, "op": n.op, "category": n.category,
                           "reason": n.reason, "source": n.source} for n in self.fallbacks],
            "views_in_pytorch": [n.node for n in self.nodes if n.status == "view"],
            "flops": {"total": self.flops_total, "neuron": self.flops_neuron,
                      "fraction": self.flop_fraction},
        }

    def __str__(self) -> str:
        compute = [n for n in self.nodes if n.status != "view"]
        head = (f"{self.name} ({self.kind}): {len(self.compiled)} of {len(compute)} ops compiled "
                f"in {self.partitions} NeuronCore partition(s), {len(self.fallbacks)} fell back "
                f"to PyTorch; {100 * self.flop_fraction:.1f}% of {_flops(self.flops_total)} on "
                f"the NeuronCore; compile {self.compile_seconds:.2f} s")
        if self.cache_hits:
            head += f" ({self.cache_hits} of {len(self.partition_records)} partition(s) from " \
                "the compile cache)"
        lines = [head]
        if self.compiled:
            lines.append("  compiled: " + ", ".join(f"{op} x{c}" for op, c in
                                                    sorted(self.compiled_ops.items())))
        if self.fallbacks:
            lines.append("  fell back to PyTorch:")
            for n in self.fallbacks:
                lines.append(f"    {n.node} ({n.op}) [{n.category}] {n.reason}")
                lines.append(f"        at {_where(n.source)}")
        return "\n".join(lines)


def _where(source: dict | None) -> str:
    if not source:
        return "(no source line)"
    return f"{source['file']}:{source['line']}: {source['code']}"


def _flops(n: int) -> str:
    for unit, scale in (("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} FLOP"


def graph_report(split, kind: str | None = None) -> GraphReport:
    """The report of a torchneuron.partition.SplitGraph."""
    from torchneuron import partition as P

    compiled = split.compiled_nodes
    records = []
    for node in split.original.graph.nodes:
        if node.op != "call_function" or P.is_getitem(node):
            continue
        reason = split.unsupported.get(node.name)
        if node.name in compiled:
            status = "compiled"
        elif reason is not None:
            status = "fallback"
        elif not P.is_compute(node):
            status = "view"
        else:   # a compute node of a partition that never compiled (cannot happen)
            status, reason = "fallback", P.Reason("partition", "not compiled")
        records.append(NodeRecord(
            node.name, P.op_name(node), status, P.node_flops(node), P.source_of(node),
            reason.category if status == "fallback" else None,
            reason.message if status == "fallback" else None))
    if kind is None:
        kind = next((k for k in ("backward", "forward", "inference") if f"_{k}" in split.name),
                    "graph")
    partition_records = [
        PartitionRecord(info.name, len(info.nodes),
                        float(getattr(info.compiled, "compile_seconds", 0.0)),
                        getattr(info.compiled, "cache_status", "off"),
                        getattr(info.compiled, "original_compile_seconds", None))
        for info in split.partitions]
    return GraphReport(split.name, kind, records, len(split.partitions), split.rounds,
                       split.seconds, partition_records,
                       [info.compiled for info in split.partitions])


def whole_graph_fallback(name: str, gm, category: str, message: str) -> GraphReport:
    """The report of a (Dynamo-level) graph that runs entirely in PyTorch."""
    from torchneuron import partition as P

    records = []
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method", "call_module") or P.is_getitem(node):
            continue
        op = node.target if isinstance(node.target, str) else P.op_name(node)
        records.append(NodeRecord(node.name, op, "fallback", 0, P.source_of(node), category,
                                  message))
    return GraphReport(name, "forward", records, 0, 0, 0.0)


@dataclasses.dataclass
class GraphBreak:
    reason: str
    source: dict | None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class ExplainReport:
    """torchneuron.explain's answer: Dynamo's graphs and breaks, and per compiled graph what
    runs on the NeuronCore and what falls back to PyTorch (with reasons and source lines)."""
    graphs: list[GraphReport]
    dynamo_graph_count: int
    graph_breaks: list[GraphBreak]

    @property
    def fallbacks(self) -> list[NodeRecord]:
        return [n for g in self.graphs for n in g.fallbacks]

    @property
    def compiled_ops(self) -> Counter:
        total: Counter = Counter()
        for g in self.graphs:
            total.update(g.compiled_ops)
        return total

    @property
    def flops_total(self) -> int:
        return sum(g.flops_total for g in self.graphs)

    @property
    def flops_neuron(self) -> int:
        return sum(g.flops_neuron for g in self.graphs)

    @property
    def flop_fraction(self) -> float:
        total = self.flops_total
        return self.flops_neuron / total if total else (1.0 if not self.fallbacks else 0.0)

    @property
    def compile_seconds(self) -> float:
        return sum(g.compile_seconds for g in self.graphs)

    @property
    def simulated_ns(self) -> float:
        return sum(g.simulated_ns for g in self.graphs)

    def to_dict(self) -> dict:
        return {
            "dynamo_graph_count": self.dynamo_graph_count,
            "compile_seconds": round(self.compile_seconds, 4),
            "simulated_ns": self.simulated_ns,
            "graph_breaks": [b.to_dict() for b in self.graph_breaks],
            "graphs": [g.to_dict() for g in self.graphs],
            "compiled_ops": dict(self.compiled_ops),
            "fallback_count": len(self.fallbacks),
            "flops": {"total": self.flops_total, "neuron": self.flops_neuron,
                      "fraction": self.flop_fraction},
        }

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def __str__(self) -> str:
        kinds = ", ".join(g.kind for g in self.graphs)
        lines = [f"torchneuron.explain: {self.dynamo_graph_count} Dynamo graph(s), "
                 f"{len(self.graph_breaks)} graph break(s); {len(self.graphs)} compiled "
                 f"graph(s) ({kinds}); {len(self.fallbacks)} op(s) fell back to PyTorch; "
                 f"{100 * self.flop_fraction:.1f}% of {_flops(self.flops_total)} on the "
                 f"NeuronCore; compile {self.compile_seconds:.2f} s"]
        for g in self.graphs:
            lines.append(str(g))
        if self.graph_breaks:
            lines.append("graph breaks:")
            for i, b in enumerate(self.graph_breaks, 1):
                lines.append(f"  {i}. {_where(b.source)}")
                lines.append(f"     {b.reason}")
        return "\n".join(lines)

    __repr__ = __str__


def explain(model_or_fn, *example_inputs, options: dict | None = None, **kwargs) -> ExplainReport:
    """Compile `model_or_fn` with backend="neuron", run it once on the example inputs (and,
    when an input or parameter requires grad, run a backward pass through the sum of its
    outputs, restoring every .grad afterwards) and report per graph what was compiled and what
    fell back to PyTorch, with reasons and source lines; graph breaks come from
    torch._dynamo.explain (which runs the function once more). Resets Dynamo's caches first.
    `options` are the backend's options; `kwargs` are passed to the function."""
    import torch

    from torchneuron import backend

    torch._dynamo.reset()
    dynamo = torch._dynamo.explain(model_or_fn)(*example_inputs, **kwargs)
    breaks = [GraphBreak(_first_lines(str(b.reason)), _frame_source(b.user_stack))
              for b in dynamo.break_reasons]
    torch._dynamo.reset()

    leaves = [t for t in _tensor_leaves((example_inputs, kwargs)) if t.requires_grad]
    if isinstance(model_or_fn, torch.nn.Module):
        leaves += [p for p in model_or_fn.parameters() if p.requires_grad]
    saved = [(t, t.grad) for t in leaves]
    first = len(backend.graph_reports())
    compiled = torch.compile(model_or_fn, backend="neuron", options=options)
    outputs = compiled(*example_inputs, **kwargs)
    if torch.is_grad_enabled() and leaves:
        loss = [o.float().sum() for o in _tensor_leaves(outputs) if o.requires_grad]
        if loss:
            torch.autograd.backward(sum(loss))
        for t, grad in saved:
            t.grad = grad
    graphs = backend.graph_reports()[first:]
    torch._dynamo.reset()
    return ExplainReport(graphs, dynamo.graph_count, breaks)


def _tensor_leaves(tree) -> list:
    import torch
    return [x for x in torch.utils._pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def _first_lines(text: str, n: int = 2) -> str:
    return " ".join(line.strip() for line in text.strip().splitlines()[:n])


def _frame_source(stack) -> dict | None:
    if not stack:
        return None
    frame = stack[-1]
    return {"file": frame.filename, "line": frame.lineno, "code": (frame.line or "").strip()}
