"""trn-tile: choose each kernel's layout and tile sizes, recorded as attributes on the kernel.

- matmul kernels get `orientation`: "nm" computes the transposed product (N on partitions)
  when an epilogue operand is constant along M (a bias over output features), so the scalar
  engine applies it per partition while it evacuates PSUM; otherwise "mn".
- elementwise kernels get `free_tile`: free elements per tile, sized so that a few iterations'
  buffers fit in SBUF at once and DMA of the next tile overlaps compute of this one.
convert-trn-to-nisa reads these attributes (and makes the same choice for a kernel without
them).
"""

from __future__ import annotations

import dataclasses

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.kernels.elementwise import choose_free_tile
from torchneuron.compiler.kernels.tile_ops import ELEMENTWISE_OPS, VIEW_OPS
from torchneuron.compiler.kernels.views import HbmView, apply_view_op
from torchneuron.compiler.passes import Pass, register
from torchneuron.target import Target, get_target


@register
@dataclasses.dataclass
class TilePass(Pass):
    NAME = "trn-tile"
    SUMMARY = "Choose matmul orientation and elementwise tile sizes for each trn.kernel"
    target: str = ""

    def run(self, module: ir.Operation) -> None:
        target = get_target(self.target or None)
        for func in U.functions(module):
            for op in U.body_ops(func):
                if op.name == "trn.kernel":
                    annotate(op, target)


def kernel_body(kernel: ir.Operation) -> list[ir.Operation]:
    return [op.operation for op in kernel.regions[0].blocks[0].operations]


ORIENTATIONS = ("mn", "nm")


def annotate(kernel: ir.Operation, target: Target) -> None:
    """Record the tiling decisions on `kernel`; decisions already present are validated and
    kept (so a user or autotuner can override them)."""
    body = kernel_body(kernel)
    if any(op.name == "trn.matmul" for op in body):
        if "orientation" not in kernel.attributes:
            kernel.attributes["orientation"] = U.string(choose_orientation(body))
        elif U.str_attr(kernel, "orientation") not in ORIENTATIONS:
            raise CompileError(f"unknown matmul orientation '{U.str_attr(kernel, 'orientation')}'"
                               f" (expected {' or '.join(ORIENTATIONS)})", kernel.location)
    elif "free_tile" not in kernel.attributes:
        kernel.attributes["free_tile"] = U.i64(elementwise_free_tile(body, target))
    elif U.int_attr(kernel, "free_tile") < 1:
        raise CompileError("free_tile must be positive", kernel.location)


def choose_orientation(body: list[ir.Operation]) -> str:
    """"nm" when an operand of the matmul's epilogue varies along N only (a bias)."""
    matmul = next(op for op in body if op.name == "trn.matmul")
    rank = len(U.shape(matmul.results[0]))
    chain = {matmul.results[0]}
    for op in body:
        if op.name not in ELEMENTWISE_OPS or not any(v in chain for v in op.operands):
            continue
        for v in op.operands:
            if v in chain:
                continue
            view = layout_of(v)
            if view is not None and view.strides[rank - 2] == 0 and view.strides[rank - 1] != 0:
                return "nm"
        chain.add(op.results[0])
    return "mn"


def layout_of(value: ir.Value) -> HbmView | None:
    """The strided layout of `value` relative to the row-major tensor its view ops start from,
    or None when `value` is not a view (or the view is not expressible)."""
    op = U.defining_op(value)
    if op is None or op.name not in VIEW_OPS:
        return HbmView.abstract(tuple(U.shape(value)))
    source = layout_of(op.operands[0])
    return apply_view_op(op, source) if source is not None else None


def elementwise_free_tile(body: list[ir.Operation], target: Target) -> int:
    """Tile size from the number of tiles one iteration keeps live: one per computed value and
    one per value loaded from HBM."""
    compute = [op for op in body if op.name in ELEMENTWISE_OPS]
    computed = {op.results[0] for op in compute}
    loaded = {v for op in compute for v in op.operands if v not in computed}
    itemsize = max([U.element_bytes(U.element_type(op.results[0])) for op in compute] + [4])
    return choose_free_tile(len(compute) + len(loaded), itemsize, target.sbuf_partition_bytes)
