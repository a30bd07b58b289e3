"""Idiom recognition on body expression DAGs: rewrite into forms the scalar engine computes in
one instruction (relu, gelu, sigmoid, silu, scale and bias folded into an activation)."""

from __future__ import annotations

import dataclasses
import math

from torchneuron.compiler.scalar.expr import Expr, const, fold, fold_activation


def _bf16(x: float) -> float:
    """x rounded to bf16 (nearest even)."""
    import ml_dtypes
    import numpy as np
    return float(np.float32(x).astype(ml_dtypes.bfloat16))


_INV_SQRT2 = 1.0 / math.sqrt(2.0)
# The erf scale of gelu as torch-mlir writes it: exact, or (in a bf16 body) divided by sqrt(2)
# rounded to bf16, or 1/sqrt(2) rounded to bf16. The idiom computes the exact function, as
# eager PyTorch does for bf16 too.
_GELU_ERF_SCALES = (_INV_SQRT2, 1.0 / _bf16(math.sqrt(2.0)), _bf16(_INV_SQRT2))


def recognise_idioms(expr: Expr) -> Expr:
    """Rewrite bottom-up, sharing rewritten nodes where the DAG shares them."""
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
    # Constant folding.
    if len(e.args) == 2 and all(a.is_const() for a in e.args):
        folded = fold(e.kind, e.args[0].value, e.args[1].value)
        if folded is not None:
            return const(folded)
    if e.kind == "convert" and e.args[0].is_const():
        return e.args[0]
    if e.kind.startswith("act:") and e.args[0].is_const():
        folded = fold_activation(e.kind[4:], e.args[0].value * e.scale + e.bias)
        if folded is not None:
            return const(folded)
    # x / c -> x * (1/c): one canonical form for scaling.
    if e.kind == "div" and e.args[1].is_const() and e.args[1].value not in (0.0,):
        return _rewrite(Expr("mul", (e.args[0], const(1.0 / e.args[1].value))))
    # Constants go right in commutative ops.
    if e.kind in ("add", "mul", "max", "min") and e.args[0].is_const() \
            and not e.args[1].is_const():
        e = Expr(e.kind, (e.args[1], e.args[0]))
    # relu: select(x > 0 or isnan(x), x, 0) (torch-mlir's, an unordered x > 0: a NaN stays
    # NaN, as relu keeps it) and max(x, 0). (An ordered select(x > 0, x, 0) gives 0 for NaN.)
    if e.kind == "select":
        mask, a, b = e.args
        if mask.kind == "or" and b.is_const(0.0):
            compare, nan = mask.args if mask.args[1].kind == "ne" else mask.args[::-1]
            if compare.kind in ("gt", "ge") and compare.args[1].is_const(0.0) and \
                    compare.args[0] is a and nan.kind == "ne" and nan.args[0] is a and \
                    nan.args[1] is a:
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
            if erf.kind == "act:erf" and erf.args[0] is x and erf.bias == 0.0 \
                    and any(math.isclose(erf.scale, c, rel_tol=1e-6)
                            for c in _GELU_ERF_SCALES):
                return Expr("act:gelu", (x,))
        # silu: x * sigmoid(x)
        if other.kind == "act:sigmoid" and other.args[0] is x and other.scale == 1.0 \
                and other.bias == 0.0 and scale == 1.0:
            return Expr("act:silu", (x,))
    return None
