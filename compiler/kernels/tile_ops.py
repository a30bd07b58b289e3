"""Instruction selection for trn elementwise ops on on-chip tiles."""

from __future__ import annotations

import math

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.kernels.emitter import Emitter, Tile, tensor_tensor_cycles

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


def power_of_two(c: float) -> bool:
    """Whether c is a positive power of two: multiplying by it commutes with every rounding
    (outside fp32's subnormal and overflow ranges)."""
    mantissa, _ = math.frexp(c)
    return c > 0.0 and mantissa == 0.5


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


def widening_aliases(ops: list[ir.Operation], keep: set, readers: set = frozenset()) -> dict:
    """Float widenings of values the kernel loads (bf16 -> fp32 of an input) that cost no
    instruction: every user is an elementwise op of `ops` (or one of `readers`, which the
    caller has made read the narrow tile exactly as widened), and the engines convert their
    inputs to fp32 exactly as they read, so the users read the loaded tile itself. Returns
    {convert result: loaded value}."""
    inside = {op.results[0] for op in ops}
    members = set(ops)
    aliases = {}
    for op in ops:
        if op.name != "trn.convert" or op.results[0] in keep:
            continue
        source, result = op.operands[0], op.results[0]
        wide, narrow = U.element_type(result), U.element_type(source)
        producer = U.defining_op(source)
        widens = isinstance(wide, ir.FloatType) and isinstance(narrow, ir.FloatType) and \
            wide.width > narrow.width
        if not widens or source in inside or (producer is not None and
                                              producer.name in ROOT_OPS):
            continue
        users = [U.operation(u.owner) for u in result.uses]
        if users and all((u in members and u.name in ELEMENTWISE_OPS) or u in readers
                         for u in users):
            aliases[result] = source
    return aliases


def emit_elementwise(em: Emitter, op: ir.Operation, operands: list[Tile], dst: Tile,
                     consts: ConstantVectors, share: bool = False) -> None:
    """Compute trn elementwise `op` of full tiles `operands` into `dst` (same [P, F]).

    With `share`, a multiply or add by a constant, or a square (x * x), goes to ACT when it
    would finish sooner there than on DVE, given the work each has been given so far
    (`em.sooner_engine`): an identity activation computes x * scale + bias with the same fp32
    roundings (a multiply with no bias operand is the product alone), and the square
    activation rounds x * x once, as the multiply does; so the two engines share a kernel's
    arithmetic. A conversion (a PSUM evacuation that only rounds) goes to either too."""
    name = op.name
    if share and operands and operands[0].partitions == dst.partitions and \
            isinstance(operands[0].element_type, ir.FloatType) and \
            isinstance(dst.element_type, ir.FloatType):
        alu = U.str_attr(op, "op") if name in ("trn.tensor_scalar", "trn.tensor_tensor") \
            else None
        on_dve = None
        if name == "trn.tensor_scalar" and alu in ("mul", "add") and \
                not ir.BoolAttr(op.attributes["reverse"]).value:
            on_dve = dst.free
        elif name == "trn.tensor_tensor" and alu == "mul" and operands[0] is operands[1]:
            on_dve = tensor_tensor_cycles(dst, operands[0], operands[1], alu)
        if on_dve is not None and em.sooner_engine({"dve": on_dve, "act": dst.free}) == "act":
            if name == "trn.tensor_tensor":
                em.activation(dst, operands[0], "square")
            elif alu == "mul":
                em.activation(dst, operands[0], "identity", U.float_attr(op, "scalar"))
            else:
                em.activation(dst, operands[0], "identity", 1.0,
                              consts.get(U.float_attr(op, "scalar"), dst.partitions))
            return
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
        em.copy(dst, operands[0], engine=None if share else "dve")
    elif name == "trn.fill":
        em.memset(dst, U.float_attr(op, "value"))
    else:
        raise CompileError(f"'{name}' is not an elementwise op", op.location)
