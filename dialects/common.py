"""Helpers shared by the dialect definitions: typed attribute access and verifier errors."""

from __future__ import annotations

import contextlib
import threading
from typing import Any, NamedTuple

from torch_mlir import ir

# Attributes the `ext` constraint lowering cannot name (dense arrays) are declared `Any` and
# checked by the op's Python verifier instead.
AnyAttr = Any


class VerifyError(Exception):
    """Raised inside a verifier; `verifier` turns it into an MLIR diagnostic on the op."""


def verifier(check):
    """Wrap `check(op)` (which raises VerifyError) as an ext `verify_invariants` hook."""

    def verify_invariants(op) -> bool:
        try:
            check(op)
        except VerifyError as exc:
            op.location.emit_error(f"'{op.name}' op {exc}")
            return False
        return True

    return staticmethod(verify_invariants)


def require(cond: bool, message: str) -> None:
    if not cond:
        raise VerifyError(message)


def attr(op, name: str, attributes=None) -> ir.Attribute:
    """`op`'s attribute `name`; `attributes`: op.attributes, where the caller holds it."""
    try:
        return (op.attributes if attributes is None else attributes)[name]
    except KeyError:
        raise VerifyError(f"requires attribute '{name}'") from None


def i64_array(op, name: str, attributes=None) -> list[int]:
    a = attr(op, name, attributes)
    if not isinstance(a, ir.DenseI64ArrayAttr):
        try:
            a = ir.DenseI64ArrayAttr(a)
        except (ValueError, TypeError):
            raise VerifyError(f"attribute '{name}' must be an array<i64: ...>") from None
    return list(a)


def string(op, name: str, attributes=None) -> str:
    a = attr(op, name, attributes)
    try:
        return ir.StringAttr(a).value
    except (ValueError, TypeError):
        raise VerifyError(f"attribute '{name}' must be a string") from None


def float_value(op, name: str) -> float:
    a = attr(op, name)
    try:
        return ir.FloatAttr(a).value
    except (ValueError, TypeError):
        raise VerifyError(f"attribute '{name}' must be a float") from None


def int_value(op, name: str, attributes=None) -> int:
    a = attr(op, name, attributes)
    try:
        return ir.IntegerAttr(a).value
    except (ValueError, TypeError):
        raise VerifyError(f"attribute '{name}' must be an integer") from None


def tensor_type(value: ir.Value, what: str) -> ir.RankedTensorType:
    try:
        return ir.RankedTensorType(value.type)
    except (ValueError, TypeError):
        raise VerifyError(f"{what} must be a ranked tensor, got {value.type}") from None


def shape_of(value: ir.Value, what: str) -> list[int]:
    t = tensor_type(value, what)
    shape = list(t.shape)
    require(all(d >= 0 for d in shape), f"{what} must have a static shape, got {t}")
    return shape


class MemRefInfo(NamedTuple):
    """What passes, verifiers and the NEFF writer read of a buffer's memref type."""
    memory: str | None          # the memory space's name (None: no memory space)
    shape: tuple[int, ...]
    element: str                # the element type as MLIR prints it ('bf16', 'f32', ...)
    itemsize: int               # bytes one element occupies (i1 as a byte); 0: no size


_cache = threading.local()


@contextlib.contextmanager
def memref_info_cache():
    """Within the block (on this thread), `memref_info` remembers each type's answer, and
    `memo` tables hold what passes derive from attributes and types alone. A compilation asks
    about the same few buffer types and access patterns hundreds of thousands of times, and
    the bindings build every answer anew (printing an element type alone takes
    microseconds). MLIR uniques types and attributes in their context, so equal keys are the
    same IR; the tables hold them, and so their context, only until the block ends."""
    outer = getattr(_cache, "types", None)
    if outer is None:
        _cache.types = {}
        _cache.memos = {}
    try:
        yield
    finally:
        if outer is None:
            _cache.types = None
            _cache.memos = None


def memo(table: str) -> dict | None:
    """The memo table named `table` of the enclosing `memref_info_cache` block (created on
    first use), or None outside one. Its keys must be uniqued IR (types, attributes, names)
    and its values depend on those keys alone."""
    memos = getattr(_cache, "memos", None)
    if memos is None:
        return None
    found = memos.get(table)
    if found is None:
        found = memos[table] = {}
    return found


def access_patterns(op) -> tuple[tuple[int, ...], ...]:
    """An instruction's `aps` attribute (an array of array<i64: ...>) as tuples, remembered
    per attribute within a `memref_info_cache` block. Raises KeyError without the attribute,
    ValueError or TypeError when it is not such an array."""
    aps = op.attributes["aps"]
    table = memo("aps")
    if table is not None:
        decoded = table.get(aps)
        if decoded is not None:
            return decoded
    decoded = tuple(tuple(ir.DenseI64ArrayAttr(a)) for a in ir.ArrayAttr(aps))
    if table is not None:
        table[aps] = decoded
    return decoded


def memref_info(t: ir.Type) -> MemRefInfo:
    """`t` as a `MemRefInfo`; raises ValueError if `t` is not a memref."""
    cache = getattr(_cache, "types", None)
    if cache is not None:
        info = cache.get(t)
        if info is not None:
            return info
    try:
        mtype = ir.MemRefType(t)
    except (ValueError, TypeError):
        raise ValueError(f"buffer must be a memref, got {t}") from None
    space = mtype.memory_space
    memory = None
    if space is not None:
        try:
            memory = ir.StringAttr(space).value
        except (ValueError, TypeError):
            memory = str(space)
    element = mtype.element_type
    width = element.width if isinstance(element, (ir.FloatType, ir.IntegerType)) else 0
    info = MemRefInfo(memory, tuple(mtype.shape), str(element), max(1, width // 8) if width else 0)
    if cache is not None:
        cache[t] = info
    return info
