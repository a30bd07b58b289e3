"""Small helpers over the MLIR Python bindings used by several passes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from torch_mlir import ir

from torchneuron.dialects.common import memo


def create(name: str, result_types: Sequence[ir.Type], operands: Sequence[ir.Value] = (),
           attributes: dict[str, ir.Attribute] | None = None,
           loc: ir.Location | None = None, regions: int = 0) -> ir.Operation:
    """Create op `name` at the current insertion point (generic builder)."""
    return ir.Operation.create(name, results=list(result_types), operands=list(operands),
                               attributes=attributes or {}, loc=loc, regions=regions)


def attributes_of(op: ir.Operation) -> dict[str, ir.Attribute]:
    return {name: op.attributes[name] for name in op.attributes}


def clone_with_operands(op: ir.Operation, operands: Sequence[ir.Value]) -> ir.Operation:
    """A copy of region-free `op` at the current insertion point, with new operands."""
    return create(op.name, [r.type for r in op.results], operands, attributes_of(op),
                  loc=op.location)


def functions(module: ir.Operation) -> Iterator[ir.Operation]:
    """The func.func ops directly inside `module` (a builtin.module operation)."""
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name == "func.func":
            yield op.operation


def body_ops(func: ir.Operation) -> list[ir.Operation]:
    """The ops of a function's entry block (a snapshot list, safe while rewriting)."""
    return [op.operation for op in func.regions[0].blocks[0].operations]


def entry_block(func: ir.Operation) -> ir.Block:
    return func.regions[0].blocks[0]


def tensor_type(shape: Sequence[int], element_type: ir.Type) -> ir.RankedTensorType:
    return ir.RankedTensorType.get(list(shape), element_type)


def shape(value: ir.Value) -> list[int]:
    """The static shape of a shaped value (remembered per type within a memref_info_cache
    block: passes ask for the shapes of the same few types tens of thousands of times)."""
    value_type = value.type
    table = memo("ir_utils.shapes")
    found = table.get(value_type) if table is not None else None
    if found is None:
        found = tuple(ir.ShapedType(value_type).shape)
        if table is not None:
            table[value_type] = found
    return list(found)


def element_type(value: ir.Value) -> ir.Type:
    return ir.ShapedType(value.type).element_type


def element_bytes(t: ir.Type) -> int:
    """Bytes one element of `t` occupies in memory (i1 is stored as a byte)."""
    width = t.width if isinstance(t, (ir.FloatType, ir.IntegerType)) else None
    if width is None:
        raise ValueError(f"no storage size for element type {t}")
    return max(1, width // 8)


def inverse_permutation(permutation: Sequence[int]) -> list[int]:
    """q with q[permutation[i]] = i: the transpose that undoes `permutation`."""
    inverse = [0] * len(permutation)
    for i, p in enumerate(permutation):
        inverse[p] = i
    return inverse


def i64_array(values: Sequence[int]) -> ir.DenseI64ArrayAttr:
    return ir.DenseI64ArrayAttr.get([int(v) for v in values])


def f32(value: float) -> ir.FloatAttr:
    return ir.FloatAttr.get(ir.F32Type.get(), float(value))


def i64(value: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))


def string(value: str) -> ir.StringAttr:
    return ir.StringAttr.get(value)


def bool_attr(value: bool) -> ir.BoolAttr:
    return ir.BoolAttr.get(bool(value))


def str_attr(op: ir.Operation, name: str) -> str:
    return ir.StringAttr(op.attributes[name]).value


def int_attr(op: ir.Operation, name: str) -> int:
    return ir.IntegerAttr(op.attributes[name]).value


def float_attr(op: ir.Operation, name: str) -> float:
    return ir.FloatAttr(op.attributes[name]).value


def array_attr(op: ir.Operation, name: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def erase_dead(ops: Sequence[ir.Operation]) -> None:
    """Erase those of `ops` (in block order) whose results end up unused. One reverse sweep
    suffices: a user always follows its operands, so it is visited (and erased) first."""
    for op in reversed(list(ops)):
        if len(op.results) > 0 and all(not list(r.uses) for r in op.results):
            op.erase()


def constant_scalar(value: ir.Value) -> float | int | None:
    """The number an `arith.constant` scalar holds, or None if `value` is not one."""
    owner = value.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)):
        return None
    owner = owner.operation if isinstance(owner, ir.OpView) else owner
    if owner.name != "arith.constant":
        return None
    attr = owner.attributes["value"]
    if isinstance(attr, ir.BoolAttr):
        return int(attr.value)
    if isinstance(attr, ir.FloatAttr):
        return ir.FloatAttr(attr).value
    if isinstance(attr, ir.IntegerAttr):
        t = attr.type
        if isinstance(t, ir.IntegerType) and t.width == 1:
            return int(bool(attr.value))
        return attr.value
    return None


def operation(op) -> ir.Operation:
    """`op` as an ir.Operation (the bindings hand out OpViews for ops of known dialects)."""
    return op.operation if isinstance(op, ir.OpView) else op


def defining_op(value: ir.Value) -> ir.Operation | None:
    owner = value.owner
    if isinstance(owner, ir.OpView):
        return owner.operation
    if isinstance(owner, ir.Operation):
        return owner
    return None
