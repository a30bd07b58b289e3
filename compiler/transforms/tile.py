"""trn-tile: choose each kernel's layout and tile sizes, recorded as attributes on the kernel.

- matmul kernels get `orientation`: "nm" computes the transposed product (N on partitions)
  when an epilogue operand is constant along M (a bias over output features), so the scalar
  engine applies it per partition while it evacuates PSUM; otherwise "mn".
- elementwise kernels get `free_tile`: free elements per tile, sized so that a few iterations'
  buffers fit in SBUF at once and DMA of the next tile overlaps compute of this one.
- matmul kernels also get `gemm_resident` ("p" or "f": which operand's tiles stay on chip while
  the other's stream past) and `gemm_block` (resident output tiles per block), from the cost
  model (kernels/matmul.py, `plan_gemm`: PE time with operand transposes against DMA time).
convert-trn-to-nisa reads these attributes (and makes the same choice for a kernel without
them).

With `tuning-db=PATH` (CompileOptions.tuning_db, TORCHNEURON_TUNING_DB), a kernel whose key
(compiler/tuning.py) is in that database gets the configuration `neuron-tune` stored for it,
in place of these choices. A database that cannot be read is reported as a warning naming the
file, and the kernels keep the default choices.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.kernels.elementwise import choose_free_tile
from torchneuron.compiler.kernels.matmul import matmul_element_type, plan_gemm
from torchneuron.compiler.kernels.tile_ops import ELEMENTWISE_OPS, VIEW_OPS
from torchneuron.compiler.kernels.views import HbmView, apply_view_op
from torchneuron.compiler.passes import Pass, register
from torchneuron.compiler.tuning import TuningDB, TuningDBError, apply_config, kernel_key
from torchneuron.target import Target, get_target


@register
@dataclasses.dataclass
class TilePass(Pass):
    NAME = "trn-tile"
    SUMMARY = "Choose matmul orientation and elementwise tile sizes for each trn.kernel"
    target: str = ""
    tuning_db: str = ""

    def run(self, module: ir.Operation) -> None:
        target = get_target(self.target or None)
        db = load_tuning_db(self.tuning_db) if self.tuning_db else None
        for func in U.functions(module):
            for op in U.body_ops(func):
                if op.name == "trn.kernel":
                    if db is not None:
                        config = db.lookup(kernel_key(op, target.name))
                        if config:
                            apply_config(op, config)
                    annotate(op, target)


def load_tuning_db(path: str) -> TuningDB | None:
    """The database at `path`, or None (with a warning naming the file) when it is corrupt."""
    try:
        return TuningDB.load(path)
    except TuningDBError as exc:
        warnings.warn(f"{exc}; compiling with the default tiling", RuntimeWarning, stacklevel=2)
        return None


def kernel_body(kernel: ir.Operation) -> list[ir.Operation]:
    return [op.operation for op in kernel.regions[0].blocks[0].operations]


ORIENTATIONS = ("mn", "nm")
RESIDENTS = ("p", "f")


def annotate(kernel: ir.Operation, target: Target) -> None:
    """Record the tiling decisions on `kernel`; decisions already present are validated and
    kept (so a user or autotuner can override them)."""
    body = kernel_body(kernel)
    if U.str_attr(kernel, "kind") in ("attention", "matmul_rows", "mlp", "mlp_rows", "mlp_saved",
                                      "linear_rows",
                                      "attention_linear_rows", "weight_gradient"):
        return          # its lowering fixes its tiling (compiler/kernels/attention.py, mlp.py,
        #                 weight_gradient.py)
    if any(op.name == "trn.matmul" for op in body):
        if "orientation" not in kernel.attributes:
            kernel.attributes["orientation"] = U.string(choose_orientation(body))
        elif U.str_attr(kernel, "orientation") not in ORIENTATIONS:
            raise CompileError(f"unknown matmul orientation '{U.str_attr(kernel, 'orientation')}'"
                               f" (expected {' or '.join(ORIENTATIONS)})", kernel.location)
        if "gemm_resident" in kernel.attributes and \
                U.str_attr(kernel, "gemm_resident") not in RESIDENTS:
            raise CompileError(f"unknown gemm_resident '{U.str_attr(kernel, 'gemm_resident')}'"
                               f" (expected {' or '.join(RESIDENTS)})", kernel.location)
        if "gemm_block" in kernel.attributes and U.int_attr(kernel, "gemm_block") < 1:
            raise CompileError("gemm_block must be positive", kernel.location)
        if "gemm_resident" not in kernel.attributes or "gemm_block" not in kernel.attributes:
            plan = choose_gemm_plan(kernel, body, U.str_attr(kernel, "orientation"), target)
            if plan is not None:
                if "gemm_resident" not in kernel.attributes:
                    kernel.attributes["gemm_resident"] = U.string(plan.resident)
                if "gemm_block" not in kernel.attributes:
                    kernel.attributes["gemm_block"] = U.i64(plan.block)
    elif "free_tile" not in kernel.attributes:
        kernel.attributes["free_tile"] = U.i64(elementwise_free_tile(body, target))
    elif U.int_attr(kernel, "free_tile") < 1:
        raise CompileError("free_tile must be positive", kernel.location)


def choose_orientation(body: list[ir.Operation]) -> str:
    """"nm" (N on partitions) when an operand of the matmul's epilogue varies along N only (a
    bias: a per-partition operand there, which ACT folds into the PSUM evacuation) and the
    kernel stores its result other than row-major; else "mn". A row-major [M, N] result
    computed as "nm" goes back through the PE in 128 x 128 blocks, each copied out of PSUM
    by ACT or DVE, to be stored in runs of N: dearer than "mn" reading the bias as a
    broadcast [M-tile, N-tile] beside PSUM (one DVE add per tile, at the PSUM rate)."""
    yielded = body[-1].operands[0] if body and body[-1].name == "trn.yield" else None
    row_major = yielded is not None and (U.defining_op(yielded) is None or
                                         U.defining_op(yielded).name not in VIEW_OPS)
    return "nm" if epilogue_operand_along(body, "n") and not row_major else "mn"


def epilogue_operand_along(body: list[ir.Operation], axis: str) -> bool:
    """Whether an operand of the matmul's epilogue varies along the result's `axis` ("m" or
    "n") only: the operand that is per-partition when that axis is on partitions."""
    matmul = next(op for op in body if op.name == "trn.matmul")
    rank = len(U.shape(matmul.results[0]))
    along, across = (rank - 1, rank - 2) if axis == "n" else (rank - 2, rank - 1)
    chain = {matmul.results[0]}
    for op in body:
        if op.name not in ELEMENTWISE_OPS or not any(v in chain for v in op.operands):
            continue
        for v in op.operands:
            if v in chain:
                continue
            view = layout_of(v)
            if view is not None and view.strides[across] == 0 and view.strides[along] != 0:
                return True
        chain.add(op.results[0])
    return False


def choose_gemm_plan(kernel: ir.Operation, body: list[ir.Operation], orientation: str,
                     target: Target):
    """The operand movement the cost model prefers for the kernel's matmul (see
    kernels/matmul.py): which HBM operands need PE transposes follows from their layouts."""
    matmul = next(op for op in body if op.name == "trn.matmul")
    a, b = matmul.operands
    m, k = U.shape(a)[-2:]
    n = U.shape(b)[-1]
    la, lb = layout_of(a), layout_of(b)
    if min(m, k, n) <= 0 or la is None or lb is None:
        return None
    # A^T [K, M] moves transposed when A's rows are contiguous; B [K, N] when its columns are.
    a_t_transposed = k > 1 and m > 1 and la.strides[-1] == 1 and la.strides[-2] != 1
    b_transposed = k > 1 and n > 1 and lb.strides[-2] == 1 and lb.strides[-1] != 1
    if orientation == "nm":
        parts, free, p_tr, f_tr = n, m, b_transposed, a_t_transposed
    else:
        parts, free, p_tr, f_tr = m, n, a_t_transposed, b_transposed
    tp, tf, tk = target.pe_cols, target.matmul_max_moving, target.pe_rows
    etype = matmul_element_type(U.element_type(a), U.element_type(b))
    # Per output element: every result the size of the product (a bias gradient computed
    # beside a weight gradient has one element per column, not per element).
    size = math.prod(U.shape(matmul.results[0]))
    out_bytes = sum(U.element_bytes(U.element_type(v)) for v in kernel.results
                    if math.prod(U.shape(v)) == size)
    # On a tie (both operands loaded once either way), a 2-D product of few row tiles keeps
    # B resident and streams A's row tiles, so that its output rows are finished one tile
    # after another and the kernel reading them (a layer norm, attention) starts on the
    # first: GPT-2's Linears over 512 tokens (dumped graph 2658.4 -> 2619.0 us, the same
    # bits). With more row tiles keeping A resident measured better: BERT's training step
    # over 2048 tokens took 2968.3 us so, 3058.2 streaming A (its forward 37 us faster, its
    # backward 127 us slower).
    rows_streamed = len(U.shape(a)) == 2 and -(-m // tp) <= ROW_TILES_STREAMED
    first = ("f" if orientation == "mn" else "p") if rows_streamed else "p"
    return plan_gemm(target, -(-k // tk),
                     [(p0, min(tp, parts - p0)) for p0 in range(0, parts, tp)],
                     [(f0, min(tf, free - f0)) for f0 in range(0, free, tf)],
                     U.element_bytes(etype), p_tr, f_tr, out_bytes, first=first)


# Row tiles of A (128 rows each) up to which a tied GEMM plan streams them (choose_gemm_plan).
ROW_TILES_STREAMED = 4


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
