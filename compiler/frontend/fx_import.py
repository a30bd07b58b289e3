"""FX graph -> linalg-on-tensors, through torch-mlir. The only compiler module that imports torch.

Each FX node becomes an MLIR location `loc("<node name>"("<file>":<line>:0))` taken from the
node's stack trace, so that later errors can name the node and the user's source line.
"""

from __future__ import annotations

import re

import torch
from torch_mlir import fx, ir
from torch_mlir.compiler_utils import OutputType
from torch_mlir.dialects import torch as torch_dialect
from torch_mlir.extras.fx_importer import ContextCache, FxImporter

from torchneuron.compiler.errors import CompileError, UnsupportedOpError

_FRAME = re.compile(r'File "([^"]+)", line ([0-9]+)')


class _NodeLocations(ContextCache):
    """Names every imported op after its FX node, with the innermost user frame as child."""

    def get_node_location(self, node: torch.fx.Node) -> ir.Location:
        frames = _FRAME.findall(node.meta.get("stack_trace") or "")
        child = (ir.Location.file(frames[-1][0], int(frames[-1][1]), 0, context=self._c)
                 if frames else ir.Location.unknown(self._c))
        return ir.Location.name(node.name, childLoc=child, context=self._c)


def import_fx_graph(gm: torch.fx.GraphModule, name: str) -> str:
    """Lower an ATen-level FX graph to linalg-on-tensors; returns the module's text with
    locations (it is re-parsed in the compiler's own context)."""
    gm = prepare_graph(gm)
    context = ir.Context()
    torch_dialect.register_dialect(context)
    importer = FxImporter(context=context)
    importer._cc = _NodeLocations(context, py_attr_tracker=importer._py_attr_tracker)
    try:
        module = fx.stateless_fx_import(
            gm, output_type=OutputType.LINALG_ON_TENSORS, model_name=name, fx_importer=importer)
    except Exception as exc:  # torch-mlir reports lowering failures as plain exceptions
        raise CompileError(f"torch-mlir could not lower graph '{name}' to linalg: "
                           f"{_first_lines(str(exc))}") from exc
    _rewrite_scans(module)
    _check_dialects(module)
    return module.operation.get_asm(enable_debug_info=True)


def prepare_graph(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Rewrite what torch-mlir cannot import into equivalent ATen it can, on a copy of `gm`
    (the caller's graph still runs in PyTorch if compiling fails):
    - a node whose result has no elements becomes `aten.full` of its shape: its value is
      never read, and torch-mlir's shape arithmetic on empty tensors can divide by zero
      (e.g. `view(-1, n)` of a [0, 3, n] tensor aborts the process);
    - `aten.squeeze.dims`, which torch-mlir has no lowering for, becomes a view to its
      result's shape."""
    rewrites = [(node, rewrite) for node in gm.graph.nodes
                for rewrite in [_node_rewrite(node)] if rewrite is not None]
    if not rewrites:
        return gm
    graph = torch.fx.Graph()
    copies: dict = {}
    out = graph.graph_copy(gm.graph, copies)
    graph.output(out)
    for node, rewrite in rewrites:
        old = copies[node]
        with graph.inserting_before(old):
            new = graph.call_function(*rewrite(old))
        new.meta = dict(old.meta)
        old.replace_all_uses_with(new)
        name = old.name
        graph.erase_node(old)
        new.name = name          # locations (and so error messages) name the user's node
    graph.eliminate_dead_code()
    return torch.fx.GraphModule(gm, graph)


def _node_rewrite(node: torch.fx.Node):
    """A function giving the (target, args, kwargs) that replace `node`, or None."""
    if node.op != "call_function":
        return None
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor) and _static_numel(val) == 0 and \
            node.target is not torch.ops.aten.full.default:
        shape, dtype = [int(s) for s in val.shape], val.dtype
        return lambda old: (torch.ops.aten.full.default, (shape, 0), {"dtype": dtype})
    if node.target is torch.ops.aten.squeeze.dims and isinstance(val, torch.Tensor) and \
            _static_numel(val) is not None:
        shape = [int(s) for s in val.shape]
        return lambda old: (torch.ops.aten.view.default, (old.args[0], shape), {})
    return None


def _static_numel(t: torch.Tensor) -> int | None:
    """Number of elements of a tensor with static sizes (None when a size is symbolic)."""
    n = 1
    for s in t.shape:
        if not isinstance(s, int):
            return None
        n *= s
    return n


_SCAN_COMBINES = {"arith.addf": "add", "arith.addi": "add", "arith.mulf": "mul",
                  "arith.muli": "mul", "arith.maximumf": "max", "arith.maxsi": "max",
                  "arith.minimumf": "min", "arith.minsi": "min"}
_SCAN_IDENTITY = {"add": 0, "mul": 1, "max": float("-inf"), "min": float("inf")}


def _rewrite_scans(module) -> None:
    """tm_tensor.scan (cumsum, cumprod, cummax, cummin), which torch-mlir leaves outside
    linalg, becomes trn.scan while torch-mlir's context can still parse it. Scans this cannot
    express (exclusive, a used final accumulator, another combining op, a non-identity start)
    are left for the dialect check to reject."""
    from torchneuron.dialects import load_dialects

    scans = []

    def collect(op):
        if op.operation.name == "tm_tensor.scan":
            scans.append(op.operation)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    if not scans:
        return
    load_dialects(module.context)
    for scan in scans:
        body = [op for op in scan.regions[0].blocks[0].operations]
        kind = _SCAN_COMBINES.get(body[0].name) if len(body) == 2 else None
        inclusive = ir.BoolAttr(scan.attributes["inclusive"]).value
        accumulator = scan.operands[2]
        if kind is None or not inclusive or list(scan.results[1].uses) or \
                _fill_constant(accumulator) != _SCAN_IDENTITY[kind]:
            continue
        with ir.InsertionPoint(scan), scan.location:
            new = ir.Operation.create(
                "trn.scan", results=[scan.results[0].type], operands=[scan.operands[0]],
                attributes={"op": ir.StringAttr.get(kind),
                            "dimension": ir.IntegerAttr.get(
                                ir.IntegerType.get_signless(64),
                                ir.IntegerAttr(scan.attributes["dimension"]).value)})
        scan.results[0].replace_all_uses_with(new.results[0])
        scan.erase()


def _fill_constant(value) -> float | None:
    """The constant a linalg.fill result holds (None for anything else)."""
    owner = value.owner
    op = owner.operation if isinstance(owner, ir.OpView) else owner
    if not isinstance(op, ir.Operation) or op.name != "linalg.fill":
        return None
    source = op.operands[0].owner
    source = source.operation if isinstance(source, ir.OpView) else source
    if not isinstance(source, ir.Operation) or source.name != "arith.constant":
        return None
    attr = source.attributes["value"]
    if isinstance(attr, (ir.FloatAttr, ir.IntegerAttr)):
        return attr.value
    return None


# Dialects the compiler's own context parses; anything else torch-mlir leaves in its
# linalg-on-tensors output (tm_tensor scans/sorts/scatters, ml_program globals) has no
# lowering. cf.assert (index checks) is accepted and dropped by convert-linalg-to-trn.
SUPPORTED_DIALECTS = ("builtin", "func", "arith", "math", "linalg", "tensor", "trn")


def _check_dialects(module) -> None:
    """Reject the first op (outermost first: tm_tensor.sort, not the yield in its region)
    of a dialect the compiler has no lowering for. The walk is interrupted rather than
    raised out of, so the exception never crosses MLIR's C++ walker."""
    found: list = []

    def visit(op):
        name = op.operation.name
        if name.split(".")[0] not in SUPPORTED_DIALECTS and name != "cf.assert":
            found.append(op.operation)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    if found:
        raise UnsupportedOpError(f"no lowering to the NeuronCore for '{found[0].name}'",
                                 found[0].location)


def _first_lines(text: str, n: int = 12) -> str:
    lines = text.strip().splitlines()
    return "\n".join(lines[:n]) + ("\n..." if len(lines) > n else "")
