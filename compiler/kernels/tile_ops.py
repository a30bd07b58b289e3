"""Instruction selection for trn elementwise ops on on-chip tiles."""

from __future__ import annotations

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.kernels.emitter import Emitter, Tile

ELEMENTWISE_OPS = ("trn.activation", "trn.tensor_tensor", "trn.tensor_scalar", "trn.select",
                   "trn.convert", "trn.fill", "trn.iota")
# Ops that make a tensor from nothing: generated on chip wherever they are used.
SOURCE_OPS = ("trn.fill", "trn.iota")
VIEW_OPS = ("trn.transpose", "trn.broadcast", "trn.reshape", "trn.view")
# Elementwise ops of one tensor operand.
UNARY_OPS = ("trn.activation", "trn.tensor_scalar", "trn.convert")
# Ops a kernel is built around: at most one per kernel, followed by elementwise ops.
ROOT_OPS = ("trn.matmul", "trn.conv", "trn.pool", "trn.reduce")
COMMUTATIVE = ("add", "mul", "max", "min", "eq", "ne", "and", "or", "xor")


class ConstantVectors:
    """Per-partition constant vectors [P, 1] (e.g. an activation's immediate bias), made once
    per kernel with a memset and reused."""

    def __init__(self, em: Emitter):
        self.em = em
        self._cache: dict[float, Tile] = {}

    def get(self, value: float, partitions: int) -> Tile:
        tile = self._cache.get(value)
        if tile is None:
            tile = self.em.alloc("sbuf", self.em.target.num_partitions, 1, ir.F32Type.get())
            self.em.memset(tile, value)
            self._cache[value] = tile
        return tile.rows(partitions)


def rounding_writes(ops: list[ir.Operation], keep: set) -> tuple[dict, dict]:
    """Float-to-float trn.converts that cost no instruction: the engines compute in fp32 and
    round to the destination type as they write, so when a converted value has no other use
    (and is not in `keep`, the values the kernel stores) its producer writes the converted
    type directly. Returns ({produced value: storage type}, {convert result: produced value})."""
    inside = {op.results[0] for op in ops}
    storage, aliases = {}, {}
    for op in ops:
        if op.name != "trn.convert":
            continue
        source = op.operands[0]
        if source not in inside or source in keep or source in storage:
            continue
        users = [u.owner for u in source.uses]
        target = U.element_type(op.results[0])
        if len(users) == 1 and isinstance(U.element_type(source), ir.FloatType) \
                and isinstance(target, ir.FloatType):
            storage[source] = target
            aliases[op.results[0]] = source
    return storage, aliases


def emit_elementwise(em: Emitter, op: ir.Operation, operands: list[Tile], dst: Tile,
                     consts: ConstantVectors, work: dict | None = None) -> None:
    """Compute trn elementwise `op` of full tiles `operands` into `dst` (same [P, F]).

    With `work` ({"act": n, "dve": n}, free elements given to each engine so far, updated),
    a multiply or add by a constant goes to ACT when ACT has had no more work than DVE: an
    identity activation computes x * scale + bias with the same fp32 roundings (a multiply
    with no bias operand is the product alone), so the two engines share a kernel's
    arithmetic."""
    name = op.name
    if work is not None:
        engine = "act" if name == "trn.activation" else "dve"
        if name == "trn.tensor_scalar" and U.str_attr(op, "op") in ("mul", "add") and \
                not ir.BoolAttr(op.attributes["reverse"]).value and \
                work["act"] <= work["dve"] and operands[0].partitions == dst.partitions and \
                isinstance(operands[0].element_type, ir.FloatType) and \
                isinstance(dst.element_type, ir.FloatType):
            scalar = U.float_attr(op, "scalar")
            if U.str_attr(op, "op") == "mul":
                em.activation(dst, operands[0], "identity", scalar)
            else:
                em.activation(dst, operands[0], "identity", 1.0,
                              consts.get(scalar, dst.partitions))
            work["act"] += dst.free
            return
        work[engine] += dst.free
    if name == "trn.activation":
        bias = U.float_attr(op, "bias")
        bias_tile = consts.get(bias, dst.partitions) if bias != 0.0 else None
        em.activation(dst, operands[0], U.str_attr(op, "func"), U.float_attr(op, "scale"),
                      bias_tile)
    elif name == "trn.tensor_tensor":
        em.tensor_tensor(dst, operands[0], operands[1], U.str_attr(op, "op"))
    elif name == "trn.tensor_scalar":
        reverse = bool(ir.BoolAttr(op.attributes["reverse"]).value)
        em.tensor_scalar(dst, operands[0], U.str_attr(op, "op"), U.float_attr(op, "scalar"),
                         reverse0=reverse)
    elif name == "trn.select":
        em.select(dst, *operands)
    elif name == "trn.convert":
        em.copy(dst, operands[0], engine="dve")
    elif name == "trn.fill":
        em.memset(dst, U.float_attr(op, "value"))
    else:
        raise CompileError(f"'{name}' is not an elementwise op", op.location)
