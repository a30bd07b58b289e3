"""FX graph -> linalg-on-tensors, through torch-mlir. The only compiler module that imports torch.

Each FX node becomes an MLIR location `loc("<node name>"("<file>":<line>:0))` taken from the
node's stack trace, so that later errors can name the node and the user's source line.
"""

from __future__ import annotations

import operator
import re

import torch
from torch._subclasses.fake_tensor import is_fake, unset_fake_temporarily
from torch_mlir import fx, ir
from torch_mlir.compiler_utils import OutputType
from torch_mlir.dialects import torch as torch_dialect
from torch_mlir.extras.fx_importer import (
    TORCH_DTYPE_TO_MLIR_TYPE, ContextCache, FxImporter, GraphNodeImporter,
)

from torchneuron.compiler.errors import CompileError, UnsupportedOpError

_FRAME = re.compile(r'File "([^"]+)", line ([0-9]+)')


class _NodeLocations(ContextCache):
    """Names every imported op after its FX node, with the innermost user frame as child."""

    def get_node_location(self, node: torch.fx.Node) -> ir.Location:
        frames = _FRAME.findall(node.meta.get("stack_trace") or "")
        child = (ir.Location.file(frames[-1][0], int(frames[-1][1]), 0, context=self._c)
                 if frames else ir.Location.unknown(self._c))
        return ir.Location.name(node.name, childLoc=child, context=self._c)


class _NodeImporter(GraphNodeImporter):
    """Imports tensor constants of the graph (folded ones among them) as dense elements,
    which the compiler reads, rather than as the resource blobs torch-mlir makes by default;
    a bool one (a folded mask) as i1 directly, where torch-mlir would first convert it to
    bytes with PyTorch, which hangs in the forked child that imports (PyTorch's thread pool,
    started in the parent, does not survive the fork)."""

    def _import_literal(self, py_value, info=None):
        value = _dense_literal(self, py_value)
        return value if value is not None else super()._import_literal(py_value, info)

    def bind_node_value(self, node, value, result_index: int = 0):
        # torch-mlir looks a get_attr node's import up under its target's name, not the
        # node, so it imports a constant again at every use after the first and fails
        # binding it ("Node already has a value": a folded constant two ops read). The
        # first import stands; the repeated literal, not yet used, is erased.
        if node.op == "get_attr" and (node, result_index) in self._v:
            if isinstance(value, ir.Value) and not list(value.uses):
                value.owner.erase()
            return
        super().bind_node_value(node, value, result_index)


def _dense_literal(gni, literal):
    """A torch.vtensor.literal of `literal`'s values as dense elements, or None for what the
    default import takes (a scalar, a fake or non-contiguous tensor, an unknown dtype). No
    PyTorch op runs: this may be in a forked child."""
    if not isinstance(literal, torch.Tensor) or literal.numel() <= 1 or is_fake(literal):
        return None
    with unset_fake_temporarily():
        tensor = literal.detach()
        if not tensor.is_contiguous():
            return None
        element_type = TORCH_DTYPE_TO_MLIR_TYPE.get(tensor.dtype)
        if element_type is None or tensor.dtype.is_complex:
            return None
        if tensor.dtype == torch.bool:
            array = tensor.numpy()
        else:
            # The bytes as stored, reinterpreted where numpy has no such type (bf16, fp8).
            storage = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[
                tensor.element_size()]
            array = tensor.view(storage).numpy() if tensor.dtype != storage else tensor.numpy()
    attr = ir.DenseElementsAttr.get(array, type=element_type(), shape=list(tensor.shape))
    op = ir.Operation.create("torch.vtensor.literal",
                             results=[gni._cc.tensor_to_vtensor_type(literal)],
                             attributes={"value": attr})
    return op.result


def import_fx_graph(gm: torch.fx.GraphModule, name: str) -> str:
    """Lower an ATen-level FX graph to linalg-on-tensors; returns the module's text with
    locations (it is re-parsed in the compiler's own context)."""
    gm = prepare_graph(gm)
    context = ir.Context()
    torch_dialect.register_dialect(context)
    importer = FxImporter(context=context, graph_node_importer_cls=_NodeImporter)
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
      result's shape.
    (The caller folds constants first, `fold_constants`, outside any forked child.)"""
    rewrites = [(node, rewrite) for node in gm.graph.nodes
                for rewrite in [_node_rewrite(node)] if rewrite is not None]
    if not rewrites:
        return gm
    graph, copies = _copied_graph(gm)
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


# Ops that only view their input: a folded constant is taken before them, so that what
# reaches the program is the value, not its expansion (a mask broadcast over heads).
_VIEWS = {torch.ops.aten.expand.default, torch.ops.aten.view.default,
          torch.ops.aten._unsafe_view.default, torch.ops.aten.reshape.default,
          torch.ops.aten.permute.default, torch.ops.aten.unsqueeze.default,
          torch.ops.aten.squeeze.dim, torch.ops.aten.squeeze.dims,
          torch.ops.aten.squeeze.default, torch.ops.aten.slice.Tensor,
          torch.ops.aten.t.default, torch.ops.aten.transpose.int, torch.ops.aten.select.int,
          torch.ops.aten.alias.default}
# Ops whose result is not a function of their arguments.
_UNFOLDABLE = {torch.ops.aten.empty.memory_format, torch.ops.aten.empty_like.default,
               torch.ops.aten.empty_strided.default, torch.ops.aten.empty_permuted.default}
# Larger folded values stay computed by the program rather than stored in it.
FOLD_MAX_ELEMENTS = 1 << 22


def fold_constants(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of `gm` in which each value computed only from constants (no graph input),
    where a node that does depend on the inputs reads it, is that constant: evaluated here by
    PyTorch, as eager evaluates it, and stored in the program (a tensor of one repeated value
    becomes `aten.full`). A causal attention mask built from `arange`s (GPT-2's) is then
    known to the compiler, which skips the blocks it masks whole. Not folded: random and
    mutating ops, nodes with no node inputs (already sources), views (the value before them
    is), graph results (torch-mlir cannot return a literal it also reads), and
    values over FOLD_MAX_ELEMENTS elements. `gm` is unchanged; returned as is when
    nothing folds."""
    # Evaluated for real even where the caller traces with fake tensors (Dynamo does).
    with unset_fake_temporarily():
        return _fold_constants(gm)


def _fold_constants(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    values: dict = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = _attribute(gm, node.target)
            if isinstance(value, torch.Tensor) and not is_fake(value):
                values[node] = value
        elif node.op == "call_function" and _foldable_target(node.target) and \
                all(n in values for n in node.all_input_nodes):
            try:
                with torch.no_grad():
                    value = node.target(*torch.fx.node.map_arg(node.args, values.get),
                                        **torch.fx.node.map_arg(node.kwargs, values.get))
            except Exception:       # (left to the program, which reports it as it would)
                continue
            if isinstance(value, torch.Tensor) and value.numel() > FOLD_MAX_ELEMENTS and \
                    node.target not in _VIEWS:
                continue
            values[node] = value
    folded = [node for node in values
              if node.op == "call_function" and node.target not in _VIEWS and
              node.all_input_nodes and isinstance(values[node], torch.Tensor) and
              all(user.op != "output" for user in node.users) and
              any(user not in values or user.target in _VIEWS for user in node.users)]
    if not folded:
        return gm
    graph, copies = _copied_graph(gm)
    constants: dict[str, torch.Tensor] = {}
    for i, node in enumerate(folded):
        old = copies[node]
        value = values[node].detach().contiguous()
        with graph.inserting_before(old):
            first = value.reshape(-1)[0].item() if value.numel() else 0
            if value.numel() and bool((value == first).all()):
                new = graph.call_function(torch.ops.aten.full.default,
                                          (list(value.shape), first), {"dtype": value.dtype})
            else:
                name = f"_folded_constant{i}"
                while _attribute(gm, name) is not None:
                    name += "_"
                constants[name] = value
                new = graph.get_attr(name)
        new.meta = dict(old.meta)
        old.replace_all_uses_with(new)
        graph.erase_node(old)
    graph.eliminate_dead_code()
    # What the new graph reads: the folded constants and gm's own attributes and modules.
    root: dict = {}
    for node in graph.nodes:
        if node.op == "get_attr":
            root[node.target] = constants.get(node.target, _attribute(gm, node.target))
        elif node.op == "call_module":
            root[node.target] = gm.get_submodule(node.target)
    return torch.fx.GraphModule(root, graph)


def _copied_graph(gm: torch.fx.GraphModule) -> tuple[torch.fx.Graph, dict]:
    """A copy of gm's graph to rewrite, and its node for each of gm's."""
    graph = torch.fx.Graph()
    copies: dict = {}
    graph.output(graph.graph_copy(gm.graph, copies))
    return graph, copies


def _foldable_target(target) -> bool:
    if target is operator.getitem:
        return True
    return isinstance(target, torch._ops.OpOverload) and target not in _UNFOLDABLE and \
        not target._schema.is_mutable and \
        torch.Tag.nondeterministic_seeded not in target.tags


def _attribute(gm: torch.nn.Module, target: str):
    value = gm
    for part in target.split("."):
        value = getattr(value, part, None)
    return value


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
# lowering. cf.assert is accepted: convert-linalg-to-trn drops index checks and rejects an
# assertion of a constant false (torch-mlir's mark of a lowering it knows to be wrong).
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
