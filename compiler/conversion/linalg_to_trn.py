"""convert-linalg-to-trn: linalg-on-tensors -> the `trn` dialect.

Named linalg ops map one to one (matmul, transpose, broadcast, fill, reshapes). Elementwise
`linalg.generic`s are compiled by one general mechanism rather than a pattern per PyTorch op:
1. each input is brought to the iteration space with trn view ops (reshape away unit dims,
   transpose, broadcast) derived from its indexing map;
2. the scalar body becomes an expression DAG, on which idioms the scalar engine computes in one
   instruction are recognised (relu, gelu, sigmoid, silu, fused scale and bias);
3. every remaining scalar op becomes a tensor-level trn op (activation, tensor_tensor,
   tensor_scalar, select, convert).
An op with no lowering raises UnsupportedOpError at the op's location (its FX node).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Union

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError, UnsupportedOpError
from torchneuron.compiler.passes import Pass, register


@register
@dataclasses.dataclass
class ConvertLinalgToTrn(Pass):
    NAME = "convert-linalg-to-trn"
    SUMMARY = "Convert linalg-on-tensors ops to trn dialect ops"

    def run(self, module: ir.Operation) -> None:
        for func in U.functions(module):
            _convert_function(func)


def _convert_function(func: ir.Operation) -> None:
    ops = U.body_ops(func)
    for op in ops:
        converter = _CONVERTERS.get(op.name)
        if converter is None:
            if op.name in _KEEP:
                continue
            raise UnsupportedOpError(f"no lowering to the NeuronCore for '{op.name}'", op.location)
        with ir.InsertionPoint(op), op.location:
            replacement = converter(op)
        if replacement is not None:
            op.results[0].replace_all_uses_with(replacement)
    U.erase_dead([o for o in U.body_ops(func) if o.name != "func.return"])


# Ops kept as they are: constants feed trn ops, tensor.empty feeds only `outs` (erased when dead).
_KEEP = {"arith.constant", "tensor.empty", "func.return"}


def _ins_outs(op: ir.Operation) -> tuple[list[ir.Value], list[ir.Value]]:
    """The `ins` and `outs` operands of a destination-passing linalg op."""
    view = op.opview
    if hasattr(view, "inputs"):
        return list(view.inputs), list(view.outputs)
    return [view.input], [view.init]


def _trn(name: str, result_type: ir.Type, operands, **attrs) -> ir.Value:
    return U.create(f"trn.{name}", [result_type], operands, attrs).results[0]


def _fill_value(value: ir.Value) -> float | None:
    """The constant a `linalg.fill` (or `trn.fill`) result is filled with, else None."""
    owner = U.defining_op(value)
    if owner is None:
        return None
    if owner.name == "linalg.fill":
        ins, _ = _ins_outs(owner)
        return U.constant_scalar(ins[0])
    if owner.name == "trn.fill":
        return U.float_attr(owner, "value")
    return None


def _convert_fill(op: ir.Operation) -> ir.Value:
    ins, outs = _ins_outs(op)
    value = U.constant_scalar(ins[0])
    if value is None:
        raise UnsupportedOpError("linalg.fill with a non-constant value", op.location)
    return _trn("fill", op.results[0].type, [], value=U.f32(value))


def _convert_matmul(op: ir.Operation) -> ir.Value:
    if "indexing_maps" in op.attributes and not _default_matmul_maps(op):
        raise UnsupportedOpError(f"{op.name} with transposed indexing maps", op.location)
    (lhs, rhs), (init,) = _ins_outs(op)
    result_type = op.results[0].type
    product = _trn("matmul", result_type, [lhs, rhs])
    if _fill_value(init) == 0.0:
        return product
    return _trn("tensor_tensor", result_type, [product, init], op=U.string("add"))


def _default_matmul_maps(op: ir.Operation) -> bool:
    maps = [str(m) for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    rank = len(U.shape(op.results[0]))
    if rank == 2:
        default = ["affine_map<(d0, d1, d2) -> (d0, d2)>", "affine_map<(d0, d1, d2) -> (d2, d1)>",
                   "affine_map<(d0, d1, d2) -> (d0, d1)>"]
    else:
        default = ["affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>",
                   "affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>",
                   "affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>"]
    return maps == default


def _convert_transpose(op: ir.Operation) -> ir.Value:
    (src,), _ = _ins_outs(op)
    perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
    return _trn("transpose", op.results[0].type, [src], permutation=U.i64_array(perm))


def _convert_broadcast(op: ir.Operation) -> ir.Value:
    (src,), _ = _ins_outs(op)
    dims = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
    return _trn("broadcast", op.results[0].type, [src], dimensions=U.i64_array(dims))


def _convert_reshape(op: ir.Operation) -> ir.Value:
    return _trn("reshape", op.results[0].type, [op.operands[0]])


# -- Elementwise linalg.generic ----------------------------------------------------------------

def _convert_generic(op: ir.Operation) -> ir.Value:
    if len(op.results) != 1:
        raise UnsupportedOpError("linalg.generic with several results", op.location)
    iterators = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    if any("parallel" not in it for it in iterators):
        raise UnsupportedOpError("no lowering to the NeuronCore for linalg.generic with "
                                 "reduction loops", op.location)
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    ins, outs = _ins_outs(op)
    out_map = maps[len(ins)]
    bounds = _loop_bounds(maps, ins + outs, op)
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    env: dict[int, Expr] = {}
    leaves: list[ir.Value] = []

    def leaf(tensor: ir.Value, amap) -> Expr:
        leaves.append(_to_iteration_space(tensor, amap, bounds, op))
        return Expr("arg", index=len(leaves) - 1)

    for i, (arg, tensor) in enumerate(zip(args, ins)):
        if list(arg.uses):
            env[_key(arg)] = leaf(tensor, maps[i])
    out_arg = args[len(ins)]
    if list(out_arg.uses):
        env[_key(out_arg)] = leaf(outs[0], out_map)

    body = list(block.operations)
    for inner in body[:-1]:
        env[_key(inner.results[0])] = _scalar_expr(inner, env, op)
    yielded = body[-1].operands[0]
    expr = env.get(_key(yielded))
    if expr is None:
        expr = _captured(yielded, op)
    expr = recognise_idioms(expr)

    result_type = op.results[0].type
    element_type = U.element_type(op.results[0])
    iter_type = U.tensor_type(bounds, element_type)
    value = _Emitter(leaves, iter_type).emit(expr, element_type)
    if not _is_identity(out_map):
        perm = _output_permutation(out_map, op)
        value = _trn("transpose", result_type, [value], permutation=U.i64_array(perm))
    return value


def _key(value: ir.Value):
    return value


def _loop_bounds(maps, operands, op) -> list[int]:
    n = maps[0].n_dims
    bounds: list[int | None] = [None] * n
    for amap, value in zip(maps, operands):
        shape = U.shape(value)
        for k, expr in enumerate(amap.results):
            if isinstance(expr, ir.AffineDimExpr):
                bounds[expr.position] = shape[k]
    if any(b is None for b in bounds):
        raise UnsupportedOpError("linalg.generic with a loop no operand indexes", op.location)
    return bounds


def _is_identity(amap) -> bool:
    return all(isinstance(e, ir.AffineDimExpr) and e.position == i
               for i, e in enumerate(amap.results)) and len(amap.results) == amap.n_dims


def _output_permutation(amap, op) -> list[int]:
    dims = []
    for e in amap.results:
        if not isinstance(e, ir.AffineDimExpr):
            raise UnsupportedOpError("linalg.generic with a non-permutation output map",
                                     op.location)
        dims.append(e.position)
    return dims


def _to_iteration_space(tensor: ir.Value, amap, bounds: list[int], op) -> ir.Value:
    """View `tensor` (indexed by `amap`) as a tensor of the iteration-space shape."""
    shape = U.shape(tensor)
    etype = U.element_type(tensor)
    dims: list[int] = []
    keep: list[int] = []
    for k, expr in enumerate(amap.results):
        if isinstance(expr, ir.AffineDimExpr):
            dims.append(expr.position)
            keep.append(k)
        elif isinstance(expr, ir.AffineConstantExpr) and expr.value == 0 \
                and shape[k] == 1:
            continue
        else:
            raise UnsupportedOpError(f"linalg.generic indexing map {amap} is not a "
                                     "projected permutation", op.location)
    if len(set(dims)) != len(dims):
        raise UnsupportedOpError(f"linalg.generic indexing map {amap} repeats a loop",
                                 op.location)
    value = tensor
    if len(keep) != len(shape):
        value = _trn("reshape", U.tensor_type([shape[k] for k in keep], etype), [value])
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    if order != list(range(len(dims))):
        new_shape = [U.shape(value)[i] for i in order]
        value = _trn("transpose", U.tensor_type(new_shape, etype), [value],
                     permutation=U.i64_array(order))
        dims = sorted(dims)
    missing = [d for d in range(len(bounds)) if d not in dims]
    if missing:
        value = _trn("broadcast", U.tensor_type(bounds, etype), [value],
                     dimensions=U.i64_array(missing))
    return value


@dataclasses.dataclass(frozen=True, eq=False)
class Expr:
    """A node of a generic body's scalar expression DAG.

    kind is 'arg' (iteration-space input `index`), 'const' (`value`), or an operation:
    an ALU op name (add, mul, gt, ...), 'act:<func>' (with `scale` and `bias`), 'select',
    'neg', or 'convert' (to `etype`)."""
    kind: str
    args: tuple["Expr", ...] = ()
    value: float = 0.0
    index: int = 0
    scale: float = 1.0
    bias: float = 0.0
    etype: object = None

    def is_const(self, value: float | None = None, rel: float = 1e-6) -> bool:
        return self.kind == "const" and (value is None or math.isclose(
            self.value, value, rel_tol=rel, abs_tol=rel))


def const(v: float) -> Expr:
    return Expr("const", value=float(v))


_BINARY = {
    "arith.addf": "add", "arith.subf": "sub", "arith.mulf": "mul", "arith.divf": "div",
    "arith.maximumf": "max", "arith.minimumf": "min", "arith.maxnumf": "max",
    "arith.minnumf": "min", "math.powf": "pow", "arith.remf": "mod",
    "arith.addi": "add", "arith.subi": "sub", "arith.muli": "mul",
    "arith.maxsi": "max", "arith.minsi": "min", "arith.maxui": "max", "arith.minui": "min",
    "arith.andi": "and", "arith.ori": "or", "arith.xori": "xor",
}
_UNARY_ACT = {
    "math.exp": "exp", "math.log": "log", "math.tanh": "tanh", "math.erf": "erf",
    "math.sqrt": "sqrt", "math.rsqrt": "rsqrt", "math.absf": "abs", "math.sin": "sin",
    "math.cos": "cos",
}
_CMPF = {"oeq": "eq", "ueq": "eq", "one": "ne", "une": "ne", "olt": "lt", "ult": "lt",
         "ole": "le", "ule": "le", "ogt": "gt", "ugt": "gt", "oge": "ge", "uge": "ge"}
_CMPI = {"eq": "eq", "ne": "ne", "slt": "lt", "ult": "lt", "sle": "le", "ule": "le",
         "sgt": "gt", "ugt": "gt", "sge": "ge", "uge": "ge"}
_CASTS = {"arith.extf", "arith.truncf", "arith.sitofp", "arith.uitofp", "arith.fptosi",
          "arith.fptoui", "arith.extsi", "arith.extui", "arith.trunci"}


def _captured(value: ir.Value, generic: ir.Operation) -> Expr:
    c = U.constant_scalar(value)
    if c is None:
        raise UnsupportedOpError("linalg.generic body uses a non-constant value from outside",
                                 generic.location)
    return const(c)


def _scalar_expr(op: ir.Operation, env: dict, generic: ir.Operation) -> Expr:
    def arg(i: int) -> Expr:
        v = op.operands[i]
        e = env.get(_key(v))
        return e if e is not None else _captured(v, generic)

    name = op.name
    if name == "arith.constant":
        c = U.constant_scalar(op.results[0])
        if c is None:
            raise UnsupportedOpError("non-scalar constant in a linalg.generic body", op.location)
        return const(c)
    if name in _BINARY:
        return Expr(_BINARY[name], (arg(0), arg(1)))
    if name in _UNARY_ACT:
        return Expr("act:" + _UNARY_ACT[name], (arg(0),))
    if name == "arith.negf":
        return Expr("mul", (arg(0), const(-1.0)))
    if name == "math.exp2":
        return Expr("act:exp", (arg(0),), scale=math.log(2.0))
    if name == "math.log1p":
        return Expr("act:log", (arg(0),), bias=1.0)
    if name == "math.expm1":
        return Expr("sub", (Expr("act:exp", (arg(0),)), const(1.0)))
    if name == "arith.cmpf":
        pred = _predicate(op, _CMPF_BY_INDEX)
        if pred not in _CMPF:
            raise UnsupportedOpError(f"arith.cmpf predicate '{pred}'", op.location)
        return Expr(_CMPF[pred], (arg(0), arg(1)))
    if name == "arith.cmpi":
        pred = _predicate(op, _CMPI_BY_INDEX)
        if pred not in _CMPI:
            raise UnsupportedOpError(f"arith.cmpi predicate '{pred}'", op.location)
        return Expr(_CMPI[pred], (arg(0), arg(1)))
    if name == "arith.select":
        return Expr("select", (arg(0), arg(1), arg(2)))
    if name in _CASTS:
        return Expr("convert", (arg(0),), etype=op.results[0].type)
    raise UnsupportedOpError(f"no lowering to the NeuronCore for '{name}' inside linalg.generic",
                             op.location)


def _predicate(op: ir.Operation, names: dict[int, str]) -> str:
    """arith.cmpf/cmpi store their predicate as an i64 enum value."""
    attr = op.attributes["predicate"]
    if isinstance(attr, ir.IntegerAttr):
        return names.get(attr.value, str(attr.value))
    return str(attr)


_CMPF_BY_INDEX = {i: p for i, p in enumerate(
    ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult",
     "ule", "une", "uno", "true"])}
_CMPI_BY_INDEX = {i: p for i, p in enumerate(
    ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"])}


# -- Idiom recognition -------------------------------------------------------------------------

_INV_SQRT2 = 1.0 / math.sqrt(2.0)


def recognise_idioms(expr: Expr) -> Expr:
    """Rewrite bottom-up into forms the scalar engine computes in one instruction."""
    memo: dict[int, Expr] = {}

    def go(e: Expr) -> Expr:
        if id(e) in memo:
            return memo[id(e)]
        new = dataclasses.replace(e, args=tuple(go(a) for a in e.args)) if e.args else e
        new = _rewrite(new)
        memo[id(e)] = new
        return new

    return go(expr)


def _rewrite(e: Expr) -> Expr:
    # x / c -> x * (1/c): one canonical form for scaling.
    if e.kind == "div" and e.args[1].is_const() and e.args[1].value != 0.0:
        e = Expr("mul", (e.args[0], const(1.0 / e.args[1].value)))
    # Constants go right in commutative ops.
    if e.kind in ("add", "mul", "max", "min") and e.args[0].is_const() \
            and not e.args[1].is_const():
        e = Expr(e.kind, (e.args[1], e.args[0]))
    # relu: select(x > 0, x, 0) and max(x, 0).
    if e.kind == "select":
        mask, a, b = e.args
        if mask.kind in ("gt", "ge") and mask.args[1].is_const(0.0) and mask.args[0] == a \
                and b.is_const(0.0):
            return Expr("act:relu", (a,))
    if e.kind == "max" and e.args[1].is_const(0.0):
        return Expr("act:relu", (e.args[0],))
    # 1 / y -> reciprocal(y)
    if e.kind == "div" and e.args[0].is_const(1.0):
        return _fold_affine(Expr("act:reciprocal", (e.args[1],)))
    if e.kind.startswith("act:"):
        e = _fold_affine(e)
        # sigmoid: reciprocal(exp(-x) + 1)
        if e.kind == "act:reciprocal" and e.scale == 1.0 and e.bias == 1.0:
            inner = e.args[0]
            if inner.kind == "act:exp" and inner.scale == -1.0 and inner.bias == 0.0:
                return Expr("act:sigmoid", inner.args)
        return e
    if e.kind == "mul":
        factors, scale = _product(e)
        return _match_product(factors, scale) or e
    return e


def _fold_affine(e: Expr) -> Expr:
    """act(f)(x * s + b) with x*s and +b taken into the activation's scale and bias."""
    (x,) = e.args
    scale, bias = e.scale, e.bias
    if x.kind == "add" and x.args[1].is_const():
        bias += x.args[1].value * scale
        x = x.args[0]
    elif x.kind == "sub" and x.args[1].is_const():
        bias -= x.args[1].value * scale
        x = x.args[0]
    if x.kind == "mul" and x.args[1].is_const():
        scale *= x.args[1].value
        x = x.args[0]
    return Expr(e.kind, (x,), scale=scale, bias=bias)


def _product(e: Expr) -> tuple[list[Expr], float]:
    if e.kind == "mul":
        fa, sa = _product(e.args[0])
        fb, sb = _product(e.args[1])
        return fa + fb, sa * sb
    if e.is_const():
        return [], e.value
    return [e], 1.0


def _match_product(factors: list[Expr], scale: float) -> Expr | None:
    if len(factors) != 2:
        return None
    for x, other in (factors, factors[::-1]):
        # gelu: x * (erf(x / sqrt2) + 1) * 0.5
        if other.kind == "add" and other.args[1].is_const(1.0) and math.isclose(scale, 0.5):
            erf = other.args[0]
            if erf.kind == "act:erf" and erf.args[0] == x and erf.bias == 0.0 \
                    and math.isclose(erf.scale, _INV_SQRT2, rel_tol=1e-6):
                return Expr("act:gelu", (x,))
        # silu: x * sigmoid(x)
        if other.kind == "act:sigmoid" and other.args[0] == x and other.scale == 1.0 \
                and other.bias == 0.0 and scale == 1.0:
            return Expr("act:silu", (x,))
    return None


class _Emitter:
    """Emit trn ops for an expression DAG over iteration-space tensors."""

    def __init__(self, leaves: list[ir.Value], iter_type: ir.RankedTensorType):
        self.leaves = leaves
        self.shape = list(iter_type.shape)
        self.memo: dict[int, Union[ir.Value, float]] = {}

    def tensor_of(self, etype: ir.Type) -> ir.Type:
        return U.tensor_type(self.shape, etype)

    def emit(self, e: Expr, result_etype: ir.Type) -> ir.Value:
        v = self.value(e)
        if isinstance(v, ir.Value):
            if U.element_type(v) != result_etype:
                v = _trn("convert", self.tensor_of(result_etype), [v])
            return v
        return _trn("fill", self.tensor_of(result_etype), [], value=U.f32(v))

    def value(self, e: Expr) -> Union[ir.Value, float]:
        if id(e) in self.memo:
            return self.memo[id(e)]
        v = self._emit(e)
        self.memo[id(e)] = v
        return v

    def _emit(self, e: Expr) -> Union[ir.Value, float]:
        if e.kind == "arg":
            return self.leaves[e.index]
        if e.kind == "const":
            return e.value
        args = [self.value(a) for a in e.args]
        if e.kind.startswith("act:"):
            (x,) = args
            if not isinstance(x, ir.Value):
                raise CompileError("activation of a constant was not folded")
            return _trn("activation", x.type, [x], func=U.string(e.kind[4:]),
                        scale=U.f32(e.scale), bias=U.f32(e.bias))
        if e.kind == "convert":
            (x,) = args
            return _trn("convert", self.tensor_of(e.etype), [x])
        if e.kind == "select":
            mask, a, b = args
            ref = next(v for v in (a, b, mask) if isinstance(v, ir.Value))
            a, b = (self._materialise(v, U.element_type(ref)) for v in (a, b))
            mask = self._materialise(mask, ir.IntegerType.get_signless(1))
            return _trn("select", a.type, [mask, a, b])
        return self._alu(e.kind, args)

    def _materialise(self, v, etype: ir.Type) -> ir.Value:
        if isinstance(v, ir.Value):
            return v
        return _trn("fill", self.tensor_of(etype), [], value=U.f32(v))

    def _alu(self, kind: str, args) -> Union[ir.Value, float]:
        a, b = args
        is_cmp = kind in ("eq", "ne", "lt", "le", "gt", "ge")
        if not isinstance(a, ir.Value) and not isinstance(b, ir.Value):
            return _fold(kind, a, b)
        ref = a if isinstance(a, ir.Value) else b
        etype = ir.IntegerType.get_signless(1) if is_cmp else U.element_type(ref)
        rtype = self.tensor_of(etype)
        if isinstance(a, ir.Value) and isinstance(b, ir.Value):
            return _trn("tensor_tensor", rtype, [a, b], op=U.string(kind))
        tensor, scalar, reverse = (a, b, False) if isinstance(a, ir.Value) else (b, a, True)
        return _trn("tensor_scalar", rtype, [tensor], op=U.string(kind),
                    scalar=U.f32(scalar), reverse=U.bool_attr(reverse))


def _fold(kind: str, a: float, b: float) -> float:
    ops = {
        "add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
        "div": lambda: a / b if b else math.copysign(math.inf, a) if a else math.nan,
        "max": lambda: max(a, b), "min": lambda: min(a, b), "pow": lambda: a ** b,
        "eq": lambda: float(a == b), "ne": lambda: float(a != b), "lt": lambda: float(a < b),
        "le": lambda: float(a <= b), "gt": lambda: float(a > b), "ge": lambda: float(a >= b),
        "mod": lambda: math.fmod(a, b),
    }
    if kind not in ops:
        raise CompileError(f"cannot fold constant '{kind}'")
    return ops[kind]()


_CONVERTERS = {
    "linalg.fill": _convert_fill,
    "linalg.matmul": _convert_matmul,
    "linalg.batch_matmul": _convert_matmul,
    "linalg.transpose": _convert_transpose,
    "linalg.broadcast": _convert_broadcast,
    "linalg.generic": _convert_generic,
    "tensor.collapse_shape": _convert_reshape,
    "tensor.expand_shape": _convert_reshape,
}
