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
    _check_dialects(module)
    return module.operation.get_asm(enable_debug_info=True)


# Dialects the compiler's own context parses; anything else torch-mlir leaves in its
# linalg-on-tensors output (tm_tensor scans/sorts/scatters, ml_program globals) has no
# lowering. cf.assert (index checks) is accepted and dropped by convert-linalg-to-trn.
SUPPORTED_DIALECTS = ("builtin", "func", "arith", "math", "linalg", "tensor")


def _check_dialects(module) -> None:
    def visit(op):
        name = op.operation.name
        if name.split(".")[0] not in SUPPORTED_DIALECTS and name != "cf.assert":
            raise UnsupportedOpError(f"no lowering to the NeuronCore for '{name}'",
                                     op.operation.location)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)


def _first_lines(text: str, n: int = 12) -> str:
    lines = text.strip().splitlines()
    return "\n".join(lines[:n]) + ("\n..." if len(lines) > n else "")
