"""Scalar expression DAGs of linalg.generic bodies.

A generic's body is turned into an `Expr` DAG over its inputs (`arg`), its accumulators
(`acc`, for reductions), loop indices (`iota`) and constants; `idioms.py` rewrites the DAG
into forms the engines compute in one instruction, and `emit.py` turns it into trn ops on
whole tensors. Scalar ops without a direct engine equivalent (floor, round, integer division)
are expanded here into ones that have one.
"""

from __future__ import annotations

import dataclasses
import math

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import UnsupportedOpError

COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")


@dataclasses.dataclass(frozen=True, eq=False)
class Expr:
    """A node of a body's scalar expression DAG (compared by identity).

    kind is 'arg' (iteration-space input `index`), 'acc' (accumulator of output `index`),
    'iota' (the loop index of dim `index`), 'const' (`value`), 'extract' (an element of the
    tensor `source` at the indices `args`), or an operation: an ALU op name (add, mul, gt,
    ...), 'act:<func>' (with `scale` and `bias`), 'select', or 'convert' (to element type
    `etype`)."""
    kind: str
    args: tuple["Expr", ...] = ()
    value: float = 0.0
    index: int = 0
    scale: float = 1.0
    bias: float = 0.0
    etype: object = None
    source: object = None

    def is_const(self, value: float | None = None, rel: float = 1e-6) -> bool:
        return self.kind == "const" and (value is None or math.isclose(
            self.value, value, rel_tol=rel, abs_tol=rel))


def const(v: float) -> Expr:
    return Expr("const", value=float(v))


def alu(kind: str, a: Expr, b: Expr) -> Expr:
    return Expr(kind, (a, b))


def as_float(mask: Expr) -> Expr:
    return Expr("convert", (mask,), etype=ir.F32Type.get())


_TWO_23 = float(2 ** 23)


def to_f32(x: Expr) -> Expr:
    """Rounding is computed on fp32 values whatever the storage type: intermediate results
    stored as bf16 or an integer type would be rounded themselves."""
    return Expr("convert", (x,), etype=ir.F32Type.get())


def trunc(x: Expr) -> Expr:
    """x - fmod(x, 1): exact, since the engines' mod keeps the dividend's sign; |x| >= 2^23
    is an integer already, and +-inf (whose fmod is NaN) stays itself."""
    x = to_f32(x)
    small = alu("lt", Expr("act:abs", (x,)), const(_TWO_23))
    return Expr("select", (small, alu("sub", x, alu("mod", x, const(1.0))), x))


def floor(x: Expr) -> Expr:
    x = to_f32(x)
    t = trunc(x)
    return alu("sub", t, as_float(alu("lt", x, t)))


def ceil(x: Expr) -> Expr:
    x = to_f32(x)
    t = trunc(x)
    return alu("add", t, as_float(alu("gt", x, t)))


def round_even(x: Expr) -> Expr:
    """Round half to even: adding and removing 2^23 in fp32 rounds to an integer (the
    engines round each result to nearest even); |x| >= 2^23 is an integer already."""
    x = to_f32(x)
    up = alu("sub", alu("add", x, const(_TWO_23)), const(_TWO_23))
    down = alu("add", alu("sub", x, const(_TWO_23)), const(_TWO_23))
    rounded = Expr("select", (alu("ge", x, const(0.0)), up, down))
    small = alu("lt", Expr("act:abs", (x,)), const(_TWO_23))
    return Expr("select", (small, rounded, x))


def round_away(x: Expr) -> Expr:
    """math.round: halves away from zero, sign(x) * floor(|x| + 0.5)."""
    x = to_f32(x)
    magnitude = floor(alu("add", Expr("act:abs", (x,)), const(0.5)))
    return alu("mul", Expr("act:sign", (x,)), magnitude)


def _act(func: str, x: Expr, scale: float = 1.0, bias: float = 0.0) -> Expr:
    return Expr("act:" + func, (x,), scale=scale, bias=bias)


def _select(mask: Expr, a: Expr, b: Expr) -> Expr:
    return Expr("select", (mask, a, b))


def _poly(x: Expr, coeffs: list[float]) -> Expr:
    """sum(coeffs[k] * x^k), by Horner's rule."""
    acc = const(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = alu("add", alu("mul", acc, x), const(c))
    return acc


def _odd_series(x: Expr, coeffs: list[float]) -> Expr:
    """x * sum(coeffs[k] * x^(2k)): the Taylor series of an odd function near 0, used where
    the closed form cancels (its last term is below fp32's rounding on |x| < 1/8)."""
    return alu("mul", x, _poly(alu("mul", x, x), coeffs))


_LN2 = math.log(2.0)
_SMALL = 0.125          # |x| below which the odd series are used
_LARGE = 4096.0         # |x| above which asinh/acosh are log(2|x|) (x^2 + 1 rounds to x^2)


def _negative(v: Expr) -> Expr:
    """v < 0 or v is -0.0 (whose reciprocal is -inf): its sign bit."""
    return alu("or", alu("lt", v, const(0.0)),
               alu("lt", alu("div", const(1.0), v), const(0.0)))


def atan2(y: Expr, x: Expr) -> Expr:
    """arctan(y / x), moved by +-pi (the sign of y, -0.0 included) into the left half plane
    (x negative, -0.0 included). At the origin the ratio is y itself (+-0), and two
    infinities have the ratio +-1 of their signs: atan2(+-0, -0) = +-pi, atan2(inf, -inf)
    = 3 pi / 4, as IEEE and PyTorch define them."""
    y, x = to_f32(y), to_f32(x)
    ratio = alu("div", y, x)
    abs_y, abs_x = _act("abs", y), _act("abs", x)
    origin = alu("eq", alu("add", abs_x, abs_y), const(0.0))
    infinite = alu("and", alu("eq", abs_y, const(math.inf)), alu("eq", abs_x, const(math.inf)))
    ratio = _select(origin, y, _select(infinite, alu("mul", _act("sign", y), _act("sign", x)),
                                       ratio))
    r = _act("arctan", ratio)
    half_turn = _select(_negative(y), const(-math.pi), const(math.pi))
    return _select(_negative(x), alu("add", r, half_turn), r)


def asin(x: Expr) -> Expr:
    """arctan(x / sqrt((1 - x)(1 + x))): exact factors near |x| = 1, +-pi/2 there, NaN
    beyond."""
    x = to_f32(x)
    d = _act("sqrt", alu("mul", alu("sub", const(1.0), x), alu("add", x, const(1.0))))
    return _act("arctan", alu("div", x, d))


def acos(x: Expr) -> Expr:
    """2 arctan(sqrt((1 - x) / (1 + x))): no cancellation near x = +-1 (pi at -1)."""
    x = to_f32(x)
    q = alu("div", alu("sub", const(1.0), x), alu("add", x, const(1.0)))
    return alu("mul", _act("arctan", _act("sqrt", q)), const(2.0))


def asinh(x: Expr) -> Expr:
    """sign(x) log(|x| + sqrt(x^2 + 1)); log(2|x|) for large |x| (x^2 would overflow), the
    series for small |x| (the closed form loses x's relative precision there)."""
    x = to_f32(x)
    a = _act("abs", x)
    closed = _act("log", alu("add", a, _act("sqrt", alu("add", alu("mul", a, a), const(1.0)))))
    large = alu("add", _act("log", a), const(_LN2))
    f = _select(alu("gt", a, const(_LARGE)), large, closed)
    series = _odd_series(x, [1.0, -1.0 / 6, 3.0 / 40, -15.0 / 336])
    return _select(alu("lt", a, const(_SMALL)), series, alu("mul", _act("sign", x), f))


def acosh(x: Expr) -> Expr:
    """log(x + sqrt(x - 1) sqrt(x + 1)); log(x) + log 2 for large x; NaN below 1."""
    x = to_f32(x)
    root = alu("mul", _act("sqrt", alu("sub", x, const(1.0))),
               _act("sqrt", alu("add", x, const(1.0))))
    closed = _act("log", alu("add", x, root))
    large = alu("add", _act("log", x), const(_LN2))
    return _select(alu("gt", x, const(_LARGE)), large, closed)


def atanh(x: Expr) -> Expr:
    """log((1 + x) / (1 - x)) / 2, the series for small |x|; +-inf at +-1, NaN beyond."""
    x = to_f32(x)
    closed = alu("mul", _act("log", alu("div", alu("add", x, const(1.0)),
                                        alu("sub", const(1.0), x))), const(0.5))
    series = _odd_series(x, [1.0, 1.0 / 3, 1.0 / 5, 1.0 / 7, 1.0 / 9])
    return _select(alu("lt", _act("abs", x), const(_SMALL)), series, closed)


def _half_exp_abs(x: Expr) -> Expr:
    """e^|x| / 2 as exp(|x| - log 2): finite up to cosh's own overflow."""
    return _act("exp", _act("abs", x), bias=-_LN2)


def sinh(x: Expr) -> Expr:
    """2t / ((1 - t)(1 + t)) with t = tanh(x / 2) for |x| < 1 (no cancellation near 0), else
    sign(x) (E - 1 / 4E) with E = e^|x| / 2."""
    x = to_f32(x)
    t = _act("tanh", x, scale=0.5)
    small = alu("div", alu("mul", t, const(2.0)),
                alu("mul", alu("sub", const(1.0), t), alu("add", t, const(1.0))))
    e = _half_exp_abs(x)
    big = alu("mul", _act("sign", x), alu("sub", e, alu("div", const(0.25), e)))
    return _select(alu("lt", _act("abs", x), const(1.0)), small, big)


def cosh(x: Expr) -> Expr:
    """E + 1 / 4E with E = e^|x| / 2."""
    e = _half_exp_abs(to_f32(x))
    return alu("add", e, alu("div", const(0.25), e))


_EXPANDED_UNARY = {"math.asin": asin, "math.acos": acos, "math.asinh": asinh,
                   "math.acosh": acosh, "math.atanh": atanh, "math.sinh": sinh,
                   "math.cosh": cosh}


_BINARY = {
    "arith.addf": "add", "arith.subf": "sub", "arith.mulf": "mul", "arith.divf": "div",
    "arith.maximumf": "max", "arith.minimumf": "min", "arith.maxnumf": "max",
    "arith.minnumf": "min", "math.powf": "pow", "math.fpowi": "pow", "math.ipowi": "pow",
    "arith.remf": "mod", "arith.remsi": "mod", "arith.remui": "mod",
    "arith.addi": "add", "arith.subi": "sub", "arith.muli": "mul",
    "arith.maxsi": "max", "arith.minsi": "min", "arith.maxui": "max", "arith.minui": "min",
    "arith.andi": "and", "arith.ori": "or", "arith.xori": "xor",
}
_UNARY_ACT = {
    "math.exp": "exp", "math.log": "log", "math.tanh": "tanh", "math.erf": "erf",
    "math.sqrt": "sqrt", "math.rsqrt": "rsqrt", "math.absf": "abs", "math.absi": "abs",
    "math.sin": "sin", "math.cos": "cos", "math.atan": "arctan",
}
_CASTS = {"arith.extf", "arith.truncf", "arith.sitofp", "arith.uitofp", "arith.extsi",
          "arith.extui", "arith.trunci", "arith.index_cast", "arith.index_castui"}
_CMPF_BY_INDEX = dict(enumerate(
    ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult",
     "ule", "une", "uno", "true"]))
_CMPI_BY_INDEX = dict(enumerate(
    ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]))
_CMPF = {"oeq": "eq", "ueq": "eq", "one": "ne", "une": "ne", "olt": "lt", "ult": "lt",
         "ole": "le", "ule": "le", "ogt": "gt", "ugt": "gt", "oge": "ge", "uge": "ge"}
_CMPI = {"eq": "eq", "ne": "ne", "slt": "lt", "ult": "lt", "sle": "le", "ule": "le",
         "sgt": "gt", "ugt": "gt", "sge": "ge", "uge": "ge"}


def _predicate(op: ir.Operation, names: dict[int, str]) -> str:
    """arith.cmpf/cmpi store their predicate as an i64 enum value."""
    attr = op.attributes["predicate"]
    if isinstance(attr, ir.IntegerAttr):
        return names.get(attr.value, str(attr.value))
    return str(attr)


def scalar_expr(op: ir.Operation, operand) -> Expr:
    """The Expr of one body op; `operand(i)` gives the Expr of its operand i."""
    name = op.name
    if name == "arith.constant":
        c = U.constant_scalar(op.results[0])
        if c is None:
            raise UnsupportedOpError("non-scalar constant in a linalg.generic body", op.location)
        return const(c)
    if name == "linalg.index":
        return Expr("iota", index=U.int_attr(op, "dim"))
    if name == "tensor.extract":
        return Expr("extract", tuple(operand(k) for k in range(1, len(op.operands))),
                    source=op.operands[0])
    if name in _BINARY:
        return alu(_BINARY[name], operand(0), operand(1))
    if name in _UNARY_ACT:
        return Expr("act:" + _UNARY_ACT[name], (operand(0),))
    if name == "arith.negf":
        return alu("mul", operand(0), const(-1.0))
    if name in _EXPANDED_UNARY:
        return _EXPANDED_UNARY[name](operand(0))
    if name == "math.atan2":
        return atan2(operand(0), operand(1))
    if name == "math.exp2":
        return Expr("act:exp", (operand(0),), scale=math.log(2.0))
    if name == "math.log2":
        return alu("mul", Expr("act:log", (operand(0),)), const(1.0 / math.log(2.0)))
    if name == "math.log10":
        return alu("mul", Expr("act:log", (operand(0),)), const(1.0 / math.log(10.0)))
    if name == "math.log1p":
        return Expr("act:log", (operand(0),), bias=1.0)
    if name == "math.expm1":
        return alu("sub", Expr("act:exp", (operand(0),)), const(1.0))
    if name == "math.tan":
        return alu("div", Expr("act:sin", (operand(0),)), Expr("act:cos", (operand(0),)))
    if name == "math.erfc":
        return alu("sub", const(1.0), Expr("act:erf", (operand(0),)))
    if name == "math.fma":
        return alu("add", alu("mul", operand(0), operand(1)), operand(2))
    if name == "math.floor":
        return floor(operand(0))
    if name == "math.ceil":
        return ceil(operand(0))
    if name == "math.trunc":
        return trunc(operand(0))
    if name == "math.roundeven":
        return round_even(operand(0))
    if name == "math.round":
        return round_away(operand(0))
    if name in ("arith.divsi", "arith.divui"):
        return trunc(alu("div", to_f32(operand(0)), to_f32(operand(1))))
    if name == "arith.floordivsi":
        return floor(alu("div", to_f32(operand(0)), to_f32(operand(1))))
    if name == "arith.ceildivsi":
        return ceil(alu("div", to_f32(operand(0)), to_f32(operand(1))))
    if name == "math.isnan":
        return alu("ne", operand(0), operand(0))
    if name == "math.isinf":
        return alu("eq", Expr("act:abs", (operand(0),)), const(math.inf))
    if name == "math.isfinite":
        return alu("lt", Expr("act:abs", (operand(0),)), const(math.inf))
    if name == "arith.cmpf":
        pred = _predicate(op, _CMPF_BY_INDEX)
        if pred == "uno":
            return alu("ne", operand(0), operand(0))
        if pred == "ord":
            return alu("eq", operand(0), operand(0))
        if pred in ("true", "false"):
            return const(1.0 if pred == "true" else 0.0)
        if pred not in _CMPF:
            raise UnsupportedOpError(f"arith.cmpf predicate '{pred}'", op.location)
        a, b = operand(0), operand(1)
        compared = alu(_CMPF[pred], a, b)
        # The engines compare as IEEE does: eq, lt, le, gt, ge are false where an operand is
        # NaN (ordered), ne is true (unordered). The other predicates of each kind need the
        # operands' NaN test (a constant's is known): ueq/ult/... hold where either is NaN,
        # one does not.
        nans = [alu("ne", v, v) for v in (a, b) if not v.is_const()]
        if pred == "one" and nans:
            number = alu("eq", a, a) if len(nans) == 1 and not a.is_const() else \
                alu("eq", b, b) if len(nans) == 1 else alu("and", alu("eq", a, a), alu("eq", b, b))
            return alu("and", compared, number)
        if pred.startswith("u") and pred != "une" and nans:
            either = nans[0] if len(nans) == 1 else alu("or", nans[0], nans[1])
            return alu("or", compared, either)
        return compared
    if name == "arith.cmpi":
        pred = _predicate(op, _CMPI_BY_INDEX)
        if pred not in _CMPI:
            raise UnsupportedOpError(f"arith.cmpi predicate '{pred}'", op.location)
        return alu(_CMPI[pred], operand(0), operand(1))
    if name == "arith.select":
        return Expr("select", (operand(0), operand(1), operand(2)))
    if name in _CASTS:
        return Expr("convert", (operand(0),), etype=op.results[0].type)
    if name in ("arith.fptosi", "arith.fptoui"):
        # Truncation toward zero, then an exact conversion of an integral value.
        return Expr("convert", (trunc(operand(0)),), etype=op.results[0].type)
    raise UnsupportedOpError(f"no lowering to the NeuronCore for '{name}' inside linalg.generic",
                             op.location)


def fold(kind: str, a: float, b: float) -> float | None:
    """The constant `a <kind> b`, or None when `kind` does not fold."""
    ops = {
        "add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
        "div": lambda: a / b if b else (math.copysign(math.inf, a) if a else math.nan),
        "max": lambda: max(a, b), "min": lambda: min(a, b), "pow": lambda: a ** b,
        "eq": lambda: float(a == b), "ne": lambda: float(a != b), "lt": lambda: float(a < b),
        "le": lambda: float(a <= b), "gt": lambda: float(a > b), "ge": lambda: float(a >= b),
        "mod": lambda: math.fmod(a, b) if b else math.nan,
        "and": lambda: float(int(a) & int(b)), "or": lambda: float(int(a) | int(b)),
        "xor": lambda: float(int(a) ^ int(b)),
    }
    try:
        return ops[kind]() if kind in ops else None
    except (OverflowError, ValueError, ZeroDivisionError):
        return None


def fold_activation(func: str, x: float) -> float | None:
    """The constant func(x) for a scalar-engine function, or None when it does not fold."""
    def gelu_tanh(v):
        return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))
    funcs = {
        "identity": lambda v: v, "relu": lambda v: max(v, 0.0),
        "gelu": lambda v: 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))),
        "gelu_tanh": gelu_tanh, "silu": lambda v: v / (1.0 + math.exp(-v)),
        "sigmoid": lambda v: 1.0 / (1.0 + math.exp(-v)), "tanh": math.tanh, "exp": math.exp,
        "log": math.log, "sqrt": math.sqrt, "rsqrt": lambda v: 1.0 / math.sqrt(v),
        "reciprocal": lambda v: 1.0 / v, "square": lambda v: v * v, "abs": abs,
        "sign": lambda v: float((v > 0) - (v < 0)), "erf": math.erf,
        "softplus": lambda v: math.log1p(math.exp(v)), "sin": math.sin, "cos": math.cos,
        "arctan": math.atan,
        "gelu_dx": lambda v: 0.5 * (1.0 + math.erf(v / math.sqrt(2.0)))
        + v * math.exp(-0.5 * v * v) / math.sqrt(2.0 * math.pi),
    }
    try:
        return float(funcs[func](x)) if func in funcs else None
    except (OverflowError, ValueError, ZeroDivisionError):
        return None


def affine_in_loops(e: Expr, n_dims: int) -> tuple[float, list[float]] | None:
    """(constant, coefficient per loop dim) when `e` is an affine function of the loop
    indices alone, else None."""
    if e.kind == "const":
        return e.value, [0.0] * n_dims
    if e.kind == "iota":
        coeff = [0.0] * n_dims
        coeff[e.index] = 1.0
        return 0.0, coeff
    if e.kind == "convert":
        return affine_in_loops(e.args[0], n_dims)
    if e.kind in ("add", "sub"):
        a, b = (affine_in_loops(x, n_dims) for x in e.args)
        if a is None or b is None:
            return None
        sign = 1.0 if e.kind == "add" else -1.0
        return a[0] + sign * b[0], [x + sign * y for x, y in zip(a[1], b[1])]
    if e.kind == "mul":
        a, b = (affine_in_loops(x, n_dims) for x in e.args)
        if a is None or b is None or (any(a[1]) and any(b[1])):
            return None
        if any(a[1]):
            a, b = b, a
        return a[0] * b[0], [a[0] * x for x in b[1]]
    return None


def split_index(e: Expr, n_dims: int) -> tuple[float, list[float], list[tuple[float, Expr]]]:
    """An index expression as constant + sum(coeff_j * loop_j) + sum(mult_t * term_t), where
    the terms are the parts that depend on tensor data (or are not affine)."""
    affine = affine_in_loops(e, n_dims)
    if affine is not None:
        return affine[0], affine[1], []
    if e.kind == "convert":
        return split_index(e.args[0], n_dims)
    if e.kind in ("add", "sub"):
        ca, la, ta = split_index(e.args[0], n_dims)
        cb, lb, tb = split_index(e.args[1], n_dims)
        sign = 1.0 if e.kind == "add" else -1.0
        return (ca + sign * cb, [x + sign * y for x, y in zip(la, lb)],
                ta + [(sign * m, t) for m, t in tb])
    if e.kind == "mul":
        for k in (0, 1):
            if e.args[k].is_const():
                c, l, t = split_index(e.args[1 - k], n_dims)
                v = e.args[k].value
                return c * v, [x * v for x in l], [(m * v, term) for m, term in t]
    return 0.0, [0.0] * n_dims, [(1.0, e)]


def loop_dims_of(e: Expr, leaf_dims: list[set[int]]) -> set[int]:
    """The loop dims an expression varies along (leaves vary along the dims they index)."""
    if e.kind == "arg":
        return set(leaf_dims[e.index])
    if e.kind == "iota":
        return {e.index}
    dims: set[int] = set()
    for a in e.args:
        dims |= loop_dims_of(a, leaf_dims)
    return dims
