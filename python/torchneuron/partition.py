"""Split an ATen-level FX graph between the NeuronCore and PyTorch (visible CPU fallback).

Every graph AOTAutograd hands the backend (forward, backward) goes through `split_and_compile`:

1. Support is decided per node. `static_reason` is a small deny-list of nodes the compiler can
   never take; each entry is a category of `CATEGORIES`:
     random      ops tagged `nondeterministic_seeded` (their values come from PyTorch's generator)
     mutation    in-place / `out=` ops (schemas that write an argument), and every node after
                 the first of them (so that reads and writes keep their order; AOTAutograd's
                 functional graphs only mutate at the very end, copying into mutated inputs)
     non-tensor  ops producing a non-tensor value (SymInt, Python scalar, None) or consuming one
                 computed at run time (a NEFF only takes and returns tensors)
     dtype       a tensor of a dtype the NeuronCore cannot store (float64, complex, uint16/32/64);
                 arithmetic on uint8; integer results the engines' fp32 would not compute
                 exactly: integer arithmetic whose values `integer_bound` cannot bound by 2^24
                 (an int64 graph input's, a step counter's); moves, selects, conversions of
                 floats and positions found in floats are exact
     not-aten    a call that is not an ATen/prims operator (higher-order ops such as
                 `with_effects`, Python functions); `operator.getitem` follows its producer
     layout      a sparse / non-strided tensor
   Everything else is tried.
2. `torch.fx`'s CapabilityBasedPartitioner groups the supported nodes into maximal acyclic
   partitions. Partitions with no compute (only views and getitem) are not compiled: they run in
   PyTorch, where a view costs nothing. A view whose result leaves its partition only to be
   returned is computed in PyTorch (so a returned alias of an input stays an alias of it).
3. Each partition becomes a sub-GraphModule, compiled by the caller's `compile_fn`. A failure
   (`PartitionFailure`) that names one of the partition's nodes marks that node unsupported
   (dynamic attribution; the reason is the compiler's message). A failure that names no node is
   attributed by compiling each compute node of the partition alone: the nodes that fail alone
   are marked; if none does, the whole partition falls back with the failure as its reason.
   Then the graph is re-partitioned and compiled again. Each round marks at least one more node
   unsupported, so this ends after at most (number of nodes) rounds; a partition that compiled
   is not compiled again.
4. The result is the split GraphModule: unsupported nodes run eagerly on the CPU, each compiled
   partition is a call of its runner. A runner that fails when run (a simulator rule the
   compiler broke) switches to running its partition in PyTorch, records the reason and logs a
   warning: the backend never raises because of something it cannot compile.

FLOPs (for the report's "fraction on the NeuronCore") are counted per node from the node's
meta shapes: matmul-like ops (mm, addmm, bmm, baddbmm, convolution, attention, ...) with
torch.utils.flop_counter's formulas; every other compute op counts 1 FLOP per output element
(reductions: per input element); views, getitem and placeholders count 0.

This module does not import the compiler (the backend does, and passes `compile_fn`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import operator
import re
import time
import weakref
from collections import Counter
from typing import Any, Callable

import torch
import torch.fx
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

from torchneuron.format import isa
from torchneuron.sim.errors import IndexOutOfRangeError

log = logging.getLogger("torchneuron")

CATEGORIES = {
    "random": "random-number op: its values come from PyTorch's generator",
    "mutation": "in-place or out= op (writes one of its arguments)",
    "non-tensor": "produces or consumes a non-tensor value at run time",
    "dtype": "a tensor dtype the NeuronCore cannot store",
    "not-aten": "not an ATen operator (higher-order op or Python function)",
    "layout": "a sparse or otherwise non-strided tensor",
    "import": "torch-mlir could not lower it to linalg",
    "compile": "the NeuronCore compiler could not compile it",
    "partition": "its partition failed to compile and no single node was to blame",
    "runtime": "its compiled partition failed on the device",
    "trace": "AOTAutograd could not trace its graph to ATen ops (the whole graph runs in PyTorch)",
}
STATIC_CATEGORIES = ("random", "mutation", "non-tensor", "dtype", "not-aten", "layout")

# What the NEFF format stores (bool travels as uint8).
STORABLE_DTYPES = frozenset({
    torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2,
    torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool,
})

PREFIX = "neuron_"


@dataclasses.dataclass(frozen=True)
class Reason:
    """Why a node stays in PyTorch."""
    category: str
    message: str

    def __str__(self) -> str:
        return f"[{self.category}] {self.message}"


class PartitionFailure(Exception):
    """Raised by a `compile_fn`: the partition cannot run on the NeuronCore. `node` names the
    FX node to blame when known; `error` is the original exception."""

    def __init__(self, category: str, message: str, node: str | None = None,
                 error: BaseException | None = None):
        super().__init__(message)
        self.category, self.message, self.node, self.error = category, message, node, error


class NotCompilable(Exception):
    """Strict mode (fallback disabled): a node would have fallen back."""


# -- Facts about nodes ---------------------------------------------------------------------------

def _val(node: Any):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else node


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _is_tensor_or_tensors(value) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)) and value:
        return all(isinstance(v, torch.Tensor) or v is None for v in value) and \
            any(isinstance(v, torch.Tensor) for v in value)
    return False


def is_getitem(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is operator.getitem


def is_view(node: torch.fx.Node) -> bool:
    """An ATen op whose result aliases an argument without writing it (view, reshape,
    permute, expand, slice, select, ...): metadata only in PyTorch."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    schema = node.target._schema
    return bool(schema.returns) and all(
        r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def is_compute(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and not is_getitem(node) and not is_view(node)


def op_name(node: torch.fx.Node) -> str:
    """'aten.mm' for aten.mm.default; the function's name for other call targets."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target.overloadpacket)
    if isinstance(target, str):
        return target
    return getattr(target, "__name__", None) or str(target)


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in [^\n]*\n([^\n]*)')


def source_of(node: torch.fx.Node) -> dict | None:
    """The user's source line of a node: {'file', 'line', 'code'} from its stack trace (the
    innermost frame), or None when the node has none."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    if not frames:
        return None
    file, line, code = frames[-1]
    return {"file": file, "line": int(line), "code": code.strip()}


def describe_source(source: dict | None) -> str:
    if not source:
        return "(no source line)"
    return f"{source['file']}:{source['line']}: {source['code']}"


def static_reason(node: torch.fx.Node) -> Reason | None:
    """The deny-list (see the module docstring); None when the node is worth trying."""
    if node.op != "call_function":
        return None
    target = node.target
    if target is operator.getitem:
        return None                      # follows its producer (see _Support)
    if not isinstance(target, torch._ops.OpOverload):   # custom ops (torch.library) are tried
        return Reason("not-aten", f"'{op_name(node)}' is not an ATen operator")
    schema = target._schema
    if torch.Tag.nondeterministic_seeded in target.tags:
        return Reason("random", f"{op_name(node)} draws random numbers")
    if schema.is_mutable:
        return Reason("mutation", f"{op_name(node)} writes one of its arguments")
    out = _val(node)
    if not _is_tensor_or_tensors(out):
        return Reason("non-tensor", f"{op_name(node)} returns {type(out).__name__}, not a tensor")
    for arg in node.all_input_nodes:
        if not _is_tensor_or_tensors(_val(arg)):
            return Reason("non-tensor",
                          f"input '{arg.name}' is a {type(_val(arg)).__name__} computed at run "
                          "time, not a tensor")
    tensors = _tensors(out) + [t for arg in node.all_input_nodes for t in _tensors(_val(arg))]
    for t in tensors:
        if t.layout != torch.strided:
            return Reason("layout", f"a {t.layout} tensor")
    for t in tensors:
        if t.dtype not in STORABLE_DTYPES:
            return Reason("dtype", f"dtype {str(t.dtype).replace('torch.', '')} has no NeuronCore "
                          "storage type")
    if any(t.dtype == torch.uint8 for t in tensors) and not _moves_bytes(node, out):
        return Reason("dtype", f"{op_name(node)} computes on uint8, which the compiler's signless "
                      "integers treat as signed int8 (values above 127 would come out wrong)")
    computed = [t.dtype for t in _tensors(out) if _is_integer(t.dtype)]
    if computed and not _integer_exact(node) and _depends_on_inputs(node):
        dtype = str(computed[0]).replace("torch.", "")
        return Reason("dtype", f"{op_name(node)} computes {dtype} values the compiler cannot "
                      "bound by 2^24: the engines compute in fp32, exact only that far, and "
                      "saturate where PyTorch wraps around")
    return None


def _is_integer(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def _integer_exact(node: torch.fx.Node) -> bool:
    """Whether `node`'s integer results come out exact on the NeuronCore: it only moves
    elements (views, copies, gathers by index: DMA; a select: a predicated copy), converts
    floats or bools to integers (computed in fp32 either way), finds positions in a float
    tensor, or computes values `integer_bound` bounds by 2^24. Integer arithmetic beyond
    that, and conversions between integer types, go through the engines' fp32."""
    name = op_name(node)
    if is_view(node) or name in _INTEGER_MOVES:
        return True
    if (name in _FLOAT_POSITIONS or name.endswith("_with_indices")) and all(
                    t.dtype.is_floating_point or t.dtype == torch.bool
                    for arg in node.all_input_nodes for t in _tensors(_val(arg))):
        return True
    bound = integer_bound(node)
    limit = min([isa.FP32_EXACT_INTEGERS] + [torch.iinfo(t.dtype).max
                                             for t in _tensors(_val(node))
                                             if _is_integer(t.dtype)])
    return bound is not None and bound <= limit


def integer_bound(node: Any) -> float | None:
    """An upper bound of |value| over the elements of integer-valued node (or scalar) `node`,
    from what computes it: a bool or narrow type's range, a constant's values, an arange's
    ends, sums of bounded terms (a count of true elements is at most their number); None
    where nothing bounds it (an int64 graph input). Remembered per node."""
    if isinstance(node, bool):
        return 1
    if isinstance(node, (int, float)):
        return abs(node)
    if not isinstance(node, torch.fx.Node):
        return None
    if "torchneuron_integer_bound" in node.meta:
        return node.meta["torchneuron_integer_bound"]
    bound = _integer_bound(node)
    node.meta["torchneuron_integer_bound"] = bound
    return bound


def _integer_bound(node: torch.fx.Node) -> float | None:
    tensors = _tensors(_val(node))
    if node.op != "call_function":
        # A graph input or constant: what its dtype holds (a bool is 0 or 1).
        if not tensors or tensors[0].dtype.is_floating_point or tensors[0].dtype.is_complex:
            return None
        if tensors[0].dtype == torch.bool:
            return 1
        bound = max(abs(torch.iinfo(tensors[0].dtype).min), torch.iinfo(tensors[0].dtype).max)
        return bound if bound <= isa.FP32_EXACT_INTEGERS else None
    if tensors and tensors[0].dtype == torch.bool:
        return 1
    name, args = op_name(node), node.args
    inputs = [integer_bound(a) for a in node.all_input_nodes]
    scalars = [abs(a) for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]

    def largest(values):
        return None if any(v is None for v in values) or not values else max(values)

    if name == "aten.arange":
        return max([abs(a) for a in args if isinstance(a, (int, float))], default=None)
    if name in ("aten.full", "aten.full_like", "aten.scalar_tensor", "aten.fill"):
        return largest(scalars) if scalars else None
    if name in ("aten.zeros", "aten.zeros_like", "aten.ones", "aten.ones_like"):
        return 1
    if is_view(node) or name in _INTEGER_MOVES or name in (
            "aten._to_copy", "aten.clamp", "aten.neg", "aten.abs", "aten.maximum",
            "aten.minimum", "aten.amax", "aten.amin"):
        if name == "aten.where":
            data = [integer_bound(a) for a in args[1:3]]
        elif name in ("aten.index", "aten.gather", "aten.index_select", "aten.embedding"):
            data = [integer_bound(args[0])]         # the values, not the indices
        else:
            data = inputs
        return largest(data + scalars)
    if name in ("aten.add", "aten.sub", "aten.rsub"):
        terms = inputs + scalars
        return None if any(v is None for v in terms) else sum(terms)
    if name == "aten.mul":
        terms = inputs + scalars
        return None if any(v is None for v in terms) else math.prod(terms)
    if name in ("aten.sum", "aten.cumsum"):
        source = _tensors(_val(args[0])) if isinstance(args[0], torch.fx.Node) else []
        bound = integer_bound(args[0])
        if bound is None or not source or not tensors:
            return None
        if name == "aten.sum":          # each result sums numel(source) / numel(result) terms
            count = max(1, source[0].numel() // max(1, tensors[0].numel()))
        else:
            count = source[0].shape[args[1]] if source[0].dim() else 1
        return bound * count
    if name in ("aten.div", "aten.floor_divide", "aten.fmod"):
        # (an integer div rounds: floor or trunc) |a // b|, |fmod(a, b)| <= |a|
        return integer_bound(args[0])
    if name == "aten.remainder":
        return largest(inputs + scalars)             # |a mod b| < |b|
    return None


# Ops whose integer results are conversions of floats or bools, or positions found in a float
# tensor (the indices of its extrema, of its sorted order).
_FLOAT_POSITIONS = frozenset({
    "aten._to_copy", "aten.convert_element_type", "aten.argmax", "aten.argmin", "aten.max",
    "aten.min", "aten.sort", "aten.argsort", "aten.topk", "aten.kthvalue", "aten.mode",
    "aten.median", "aten.nanmedian", "aten.cummax", "aten.cummin", "aten.adaptive_max_pool1d",
    "aten.adaptive_max_pool2d", "aten.adaptive_max_pool3d",
})


# Per graph, its node count and the nodes whose value depends on a graph input (the rest are
# constants, folded before the program is compiled: compiler/frontend/fx_import.py).
_INPUT_DEPENDENT: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _depends_on_inputs(node: torch.fx.Node) -> bool:
    graph = node.graph
    known = _INPUT_DEPENDENT.get(graph)
    if known is None or (node not in known[1] and known[0] != len(graph.nodes)):
        dependent: set = set()
        for n in graph.nodes:
            if n.op == "placeholder" or any(a in dependent for a in n.all_input_nodes):
                dependent.add(n)
        known = _INPUT_DEPENDENT[graph] = (len(graph.nodes), dependent)
    return node in known[1]


# Ops that only move elements: on uint8 data they copy bit patterns, which is exact whatever
# the signedness the compiler assumes (index operands are int64).
_BYTE_MOVES = frozenset({
    "aten.clone", "aten.cat", "aten.slice", "aten.select", "aten.permute", "aten.transpose",
    "aten.t", "aten.expand", "aten.view", "aten._unsafe_view", "aten.reshape", "aten.squeeze",
    "aten.unsqueeze", "aten.flip", "aten.roll", "aten.index_select", "aten.gather",
    "aten.embedding", "aten.alias", "aten.split", "aten.split_with_sizes", "aten.unbind",
    "aten.unfold", "aten.diagonal", "aten.as_strided", "aten.repeat", "aten.stack",
})
# Ops that move integer elements without computing them: DMA copies, gathers and scatters of
# whole elements, and a select (a predicated copy, sim/semantics.py).
_INTEGER_MOVES = _BYTE_MOVES | {"aten.index", "aten.slice_scatter", "aten.select_scatter",
                                "aten.constant_pad_nd", "aten.where"}


def _moves_bytes(node: torch.fx.Node, out) -> bool:
    """Whether `node` only moves uint8 elements around (or converts uint8 to uint8)."""
    if is_view(node):
        return True
    data = [t for arg in node.all_input_nodes for t in _tensors(_val(arg))
            if t.dtype != torch.int64]
    if not all(t.dtype == torch.uint8 for t in _tensors(out) + data):
        return False
    name = op_name(node)
    return name in _BYTE_MOVES or name == "aten._to_copy"


def _numel(t: torch.Tensor) -> int:
    try:
        return int(math.prod(int(s) for s in t.shape))
    except Exception:   # symbolic sizes
        return 1


def node_flops(node: torch.fx.Node) -> int:
    """FLOPs of one node from its meta shapes (convention in the module docstring)."""
    if not is_compute(node):
        return 0
    target = node.target
    out = _val(node)
    if isinstance(target, torch._ops.OpOverload):
        from torch.utils.flop_counter import flop_registry
        formula = flop_registry.get(target.overloadpacket)
        if formula is not None:
            try:
                args, kwargs = torch.utils._pytree.tree_map(
                    _val, (tuple(node.args), dict(node.kwargs)))
                return int(formula(*args, **kwargs, out_val=out))
            except Exception:
                pass
    elements = sum(_numel(t) for t in _tensors(out))
    if _is_reduction(node):
        elements = max(elements, sum(_numel(t) for a in node.all_input_nodes
                                     for t in _tensors(_val(a))))
    return elements


def _is_reduction(node: torch.fx.Node) -> bool:
    return isinstance(node.target, torch._ops.OpOverload) and \
        torch.Tag.reduction in getattr(node.target, "tags", ())


# -- Partitioning --------------------------------------------------------------------------------

class _Support(OperatorSupportBase):
    def __init__(self, unsupported: dict[str, Reason]):
        self.unsupported = unsupported

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        if node.op != "call_function" or node.name in self.unsupported:
            return False
        if node.target is operator.getitem:
            producer = node.args[0]
            return (isinstance(producer, torch.fx.Node) and producer.op == "call_function"
                    and producer.name not in self.unsupported
                    and isinstance(_val(node), torch.Tensor))
        return True


def _copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A working copy whose Python code is generated only when it is needed: it is rewritten
    (returned views separated, partitions fused) before it runs, and generating the code of a
    graph of hundreds of nodes after each rewrite was most of the time a warm compile-cache
    run spends on a graph. split_and_compile generates the final code once."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return _LazyGraphModule(gm, graph)


def _separate_returned_views(gm: torch.fx.GraphModule) -> None:
    """Give every returned view chain (view of view ... of a non-view) its own copy, used only
    by the output, so that it can be computed in PyTorch from the chain's base: a returned alias
    of an input (or of another output) keeps aliasing it, as AOTAutograd expects."""
    graph = gm.graph
    output = graph.output_node()
    copies: dict[torch.fx.Node, torch.fx.Node] = {}

    def clone_chain(node: torch.fx.Node) -> torch.fx.Node:
        if not is_view(node):
            return node
        if node not in copies:
            args = torch.fx.node.map_arg(node.args, clone_chain)
            kwargs = torch.fx.node.map_arg(node.kwargs, clone_chain)
            with graph.inserting_after(node):
                new = graph.call_function(node.target, args, kwargs)
            new.meta = dict(node.meta)
            copies[node] = new
        return copies[node]

    if any(is_view(n) for n in output.all_input_nodes):
        output.args = torch.fx.node.map_arg(output.args, clone_chain)
        graph.lint()
        gm.recompile()


def _propose(gm: torch.fx.GraphModule, unsupported: dict[str, Reason]) -> list[list[torch.fx.Node]]:
    partitioner = CapabilityBasedPartitioner(gm, _Support(unsupported),
                                             allows_single_node_partition=True)
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    result = []
    for partition in partitioner.propose_partitions():
        nodes = set(partition.nodes)
        changed = True
        while changed:        # views whose every user is outside run in PyTorch
            changed = False
            for n in list(nodes):
                if is_view(n) and n.users and all(u not in nodes for u in n.users):
                    nodes.discard(n)
                    changed = True
        if any(is_compute(n) for n in nodes):
            result.append(sorted(nodes, key=order.__getitem__))
    return result


def _single_node_module(node: torch.fx.Node) -> torch.fx.GraphModule:
    """A graph computing `node` alone from placeholders (for attributing a failure)."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for arg in node.all_input_nodes:
        ph = graph.placeholder(arg.name)
        ph.meta = dict(arg.meta)
        env[arg] = ph
    new = graph.node_copy(node, env.__getitem__)
    value = _val(node)
    if isinstance(value, (tuple, list)):
        outs = []
        for i, v in enumerate(value):
            if isinstance(v, torch.Tensor):
                item = graph.call_function(operator.getitem, (new, i))
                item.meta = {"val": v}
                outs.append(item)
        graph.output(tuple(outs))
    else:
        graph.output((new,))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


CompileFn = Callable[[torch.fx.GraphModule, str, bool], Callable]


@dataclasses.dataclass
class PartitionInfo:
    name: str
    nodes: list[str]                # every node of the partition
    compiled: Any                   # the runner compile_fn returned
    runtime_failure: Reason | None = None


class SplitGraph:
    """The callable the backend returns for one graph: the split GraphModule (PyTorch nodes
    plus calls of compiled partitions) and what was decided, for the report."""

    def __init__(self, name: str, original: torch.fx.GraphModule, split: torch.fx.GraphModule,
                 partitions: list[PartitionInfo], unsupported: dict[str, Reason],
                 rounds: int, seconds: float):
        self.name = name
        self.original = original
        self.split = split
        self.partitions = partitions
        self.unsupported = unsupported
        self.rounds = rounds
        self.seconds = seconds
        self.report = None           # set by the backend (torchneuron.report.GraphReport)

    def __call__(self, *args):
        return self.split(*args)

    @property
    def compiled_nodes(self) -> set[str]:
        return {n for p in self.partitions if p.runtime_failure is None for n in p.nodes}


class _Runner:
    """Calls a compiled partition; if the device rejects it, runs the partition in PyTorch from
    then on (reported as a `runtime` fallback, logged as a warning). A call whose index is
    out of range runs in PyTorch alone (which raises as eager does)."""

    def __init__(self, info: PartitionInfo, module: torch.fx.GraphModule, graph: "SplitGraph | None",
                 strict: bool):
        self.info, self.module, self.strict = info, module, strict
        self.graph = graph

    def __call__(self, *args):
        if self.info.runtime_failure is None:
            try:
                return self.info.compiled(*args)
            except IndexOutOfRangeError as exc:
                # An index past the dim it indexes: this call's values, not the program, are
                # at fault. PyTorch runs this call (and raises its own IndexError); later
                # calls go to the device again.
                if self.strict:
                    raise
                log.info("torchneuron: partition %s was given an index out of range, running "
                         "this call in PyTorch: %s", self.info.name, _first_line(str(exc)))
            except Exception as exc:
                if self.strict:
                    raise
                reason = Reason("runtime", f"{type(exc).__name__}: {_first_line(str(exc))}")
                self.info.runtime_failure = reason
                log.warning("torchneuron: partition %s failed on the device, running it in "
                            "PyTorch from now on: %s", self.info.name, reason.message)
                if self.graph is not None and self.graph.report is not None:
                    self.graph.report.runtime_fallback(self.info, reason)
        with torch.no_grad():
            out = self.module(*args)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[:limit] + "..."


def split_and_compile(gm: torch.fx.GraphModule, name: str, compile_fn: CompileFn,
                      strict: bool = False) -> SplitGraph:
    """Partition `gm`, compile the supported partitions with `compile_fn(sub_gm, name, dump)`
    (which returns a callable taking and returning tensors, or raises PartitionFailure) and
    return the split graph. With `strict`, the first node that would fall back raises instead
    (NotCompilable for the deny-list, the compiler's own error otherwise)."""
    start = time.perf_counter()
    unsupported: dict[str, Reason] = {}
    mutation = None
    for node in gm.graph.nodes:
        reason = static_reason(node)
        if reason is None and mutation is not None and node.op == "call_function":
            reason = Reason("mutation", f"follows the in-place op '{mutation.name}' and stays "
                            "in order with it in PyTorch")
        if reason is not None and reason.category == "mutation" and mutation is None:
            mutation = node
        if reason is not None:
            if strict:
                raise NotCompilable(strict_message(node, reason.category, reason.message))
            unsupported[node.name] = reason
    compiled: dict[frozenset, Any] = {}
    originals = {n.name: n for n in gm.graph.nodes}
    node_count = sum(1 for n in gm.graph.nodes if n.op == "call_function")
    for rounds in range(1, node_count + 2):
        work = _copy(gm)
        _separate_returned_views(work)
        parts = _propose(work, unsupported)
        names = [f"{name}" if len(parts) == 1 and not unsupported else f"{name}_p{i}"
                 for i in range(len(parts))]
        keys = [frozenset(n.name for n in nodes) for nodes in parts]
        split = fuse_by_partitions(work, [dict.fromkeys(nodes) for nodes in parts],
                                   prefix=PREFIX, always_return_tuple=True)
        failures: dict[str, Reason] = {}
        for i, key in enumerate(keys):
            if key in compiled:
                continue
            sub = split.get_submodule(f"{PREFIX}{i}")
            try:
                compiled[key] = compile_fn(sub, names[i], True)
            except PartitionFailure as failure:
                if strict:
                    raise _strict_error(failure, originals) from None
                failures.update(_attribute(failure, parts[i], originals, compile_fn, names[i]))
        if not failures:
            break
        for node_name, reason in failures.items():
            log.info("torchneuron: %s: FX node '%s' falls back to PyTorch: %s", name, node_name,
                     reason)
        unsupported.update(failures)
    else:  # pragma: no cover - each round marks at least one more node
        raise AssertionError("partitioning did not converge")

    _LazyGraphModule.force_recompile(split)       # its code, once, inside the timing
    infos = []
    result = SplitGraph(name, gm, split, infos, unsupported, rounds, 0.0)
    for i, key in enumerate(keys):
        info = PartitionInfo(names[i], [n.name for n in parts[i]], compiled[key])
        infos.append(info)
        module_name = f"{PREFIX}{i}"
        sub = split.get_submodule(module_name)
        delattr(split, module_name)
        setattr(split, module_name, _Runner(info, sub, result, strict))
    result.seconds = time.perf_counter() - start
    return result


FALLBACK_HINT = ("to run what the NeuronCore cannot take in PyTorch on the CPU instead, drop "
                 "options={'fallback': False} (fallback is on by default; torchneuron.explain "
                 "lists what falls back)")


def strict_message(node: torch.fx.Node, category: str, message: str) -> str:
    """Strict mode's error for a node that would fall back: the op, the FX node, the user's
    source line, the reason, and how to fall back instead."""
    return (f"{op_name(node)} (FX node '{node.name}') at {describe_source(source_of(node))}: "
            f"[{category}] {message}; {FALLBACK_HINT}")


def _strict_error(failure: PartitionFailure, originals: dict) -> Exception:
    node = originals.get(failure.node) if failure.node else None
    if node is None:           # the compiler's own error, with its traceback
        if failure.error is not None:
            failure.error.add_note(f"torchneuron: {FALLBACK_HINT}")
            return failure.error
        return NotCompilable(f"[{failure.category}] {failure.message}; {FALLBACK_HINT}")
    return NotCompilable(strict_message(node, failure.category, failure.message))


def _attribute(failure: PartitionFailure, nodes: list[torch.fx.Node],
               originals: dict[str, torch.fx.Node], compile_fn: CompileFn,
               name: str) -> dict[str, Reason]:
    """Which nodes of a failed partition to mark unsupported, and why."""
    names = {n.name for n in nodes}
    if failure.node in names:
        return {failure.node: Reason(failure.category, failure.message)}
    compute = [n for n in nodes if is_compute(n)]
    blamed: dict[str, Reason] = {}
    if len(compute) > 1:
        for node in compute:
            try:
                compile_fn(_single_node_module(originals[node.name]), f"{name}_{node.name}", False)
            except PartitionFailure as alone:
                blamed[node.name] = Reason(alone.category, alone.message)
    if blamed:
        return blamed
    reason = Reason("partition" if len(compute) > 1 else failure.category,
                    f"{failure.category}: {failure.message}" if len(compute) > 1
                    else failure.message)
    return {n.name: reason for n in nodes}


def compiled_op_counts(graph: SplitGraph) -> Counter:
    nodes = graph.compiled_nodes
    return Counter(op_name(n) for n in graph.original.graph.nodes
                   if n.name in nodes and is_compute(n))
