"""Emit trn ops for a body expression DAG over iteration-space tensors."""

from __future__ import annotations

import math
from typing import Union

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError, UnsupportedOpError
from torchneuron.compiler.scalar.expr import (
    COMPARISONS, Expr, const, fold, fold_activation, loop_dims_of, split_index,
)
from torchneuron.format import isa


def trn_op(name: str, result_type: ir.Type, operands, **attrs) -> ir.Value:
    return U.create(f"trn.{name}", [result_type], operands, attrs).results[0]


def storage_element_type(t: ir.Type) -> ir.Type:
    """The element type a tensor of `t` values is computed and stored in: the NeuronCore has
    no fp64 (bodies that compute in f64 run in fp32) and indices are 64-bit integers."""
    if isinstance(t, ir.F64Type):
        return ir.F32Type.get()
    if isinstance(t, ir.IndexType):
        return ir.IntegerType.get_signless(64)
    return t


def compute_type(t: ir.Type) -> ir.Type:
    """The element type a body's intermediate values are kept in: the engines compute in
    fp32 whatever they read, so a fused chain over bf16/fp16/fp8 tensors keeps its
    intermediates in fp32 and rounds once, on the final store (as Inductor does)."""
    if _is_float(t) and not isinstance(t, (ir.F32Type, ir.F64Type)):
        return ir.F32Type.get()
    return t


def _is_float(t: ir.Type) -> bool:
    return isinstance(t, ir.FloatType)


class TrnEmitter:
    """Emits trn ops computing Exprs over `leaves` (tensors of the iteration `shape`)."""

    def __init__(self, leaves: list[ir.Value], shape: list[int],
                 leaf_dims: list[set[int]] | None = None, index_checks: list[Expr] = ()):
        """`index_checks`: conditions (the body's cf.asserts, an index below the size of the
        dim it indexes) that every row index of a gather the body makes must satisfy; where
        one fails, the index is isa.INDEX_OUT_OF_RANGE, which the DMA reading the row
        reports when the program runs, instead of reading the neighbouring row the
        flattened offset lands on."""
        self.leaves = leaves
        self.index_checks = [c for c in index_checks if not (c.is_const() and c.value)]
        self.shape = list(shape)
        # The loop dims each leaf varies along (it is broadcast along the others).
        self.leaf_dims = leaf_dims if leaf_dims is not None else \
            [set(range(len(shape))) for _ in leaves]
        self.memo: dict[int, Union[ir.Value, float]] = {}

    def tensor_of(self, etype: ir.Type) -> ir.Type:
        return U.tensor_type(self.shape, storage_element_type(etype))

    def emit(self, e: Expr, result_etype: ir.Type) -> ir.Value:
        """The value of `e` as a tensor of element type `result_etype`."""
        v = self.value(e)
        target = storage_element_type(result_etype)
        if isinstance(v, ir.Value):
            if U.element_type(v) != target:
                v = trn_op("convert", self.tensor_of(target), [v])
            return v
        return trn_op("fill", self.tensor_of(target), [], value=U.f32(v))

    def value(self, e: Expr) -> Union[ir.Value, float]:
        if id(e) not in self.memo:
            self.memo[id(e)] = self._emit(e)
        return self.memo[id(e)]

    def _emit(self, e: Expr) -> Union[ir.Value, float]:
        if e.kind == "arg":
            return self.leaves[e.index]
        if e.kind == "const":
            return e.value
        if e.kind == "iota":
            return trn_op("iota", self.tensor_of(ir.IntegerType.get_signless(64)), [],
                          dimension=U.i64(e.index))
        if e.kind == "acc":
            raise CompileError("a reduction accumulator is used outside its combining op")
        if e.kind == "extract":
            return self._extract(e)
        args = [self.value(a) for a in e.args]
        if e.kind.startswith("act:"):
            (x,) = args
            if not isinstance(x, ir.Value):
                folded = fold_activation(e.kind[4:], x * e.scale + e.bias)
                if folded is None:
                    raise CompileError(f"cannot fold the constant activation '{e.kind[4:]}'")
                return folded
            return trn_op("activation", self.tensor_of(compute_type(U.element_type(x))), [x],
                          func=U.string(e.kind[4:]),
                          scale=U.f32(e.scale), bias=U.f32(e.bias))
        if e.kind == "convert":
            (x,) = args
            if not isinstance(x, ir.Value):
                return x
            target = storage_element_type(e.etype)
            if U.element_type(x) == target:
                return x
            return trn_op("convert", self.tensor_of(target), [x])
        if e.kind == "select":
            mask, a, b = args
            if not isinstance(mask, ir.Value):
                return a if mask else b
            ref = next((v for v in (a, b) if isinstance(v, ir.Value)), None)
            etype = U.element_type(ref) if ref is not None else ir.F32Type.get()
            a, b = (self._materialise(v, etype) for v in (a, b))
            return trn_op("select", a.type, [mask, a, b])
        return self._alu(e.kind, args)

    def _extract(self, e: Expr) -> ir.Value:
        """tensor.extract of an element of `e.source`: a trn.view when the indices are affine
        in the loop indices (slices, strides, flips), else a trn.gather of rows chosen by the
        data-dependent part of the indices."""
        n = len(self.shape)
        source = e.source
        parts = [split_index(index, n) for index in e.args]
        for const, coeffs, _ in parts:
            if not float(const).is_integer() or not all(float(c).is_integer() for c in coeffs):
                raise UnsupportedOpError("no lowering to the NeuronCore for a fractional index")
        if not any(terms for _, _, terms in parts):
            return self._affine_view(source, parts)
        return self._gather(source, parts)

    def _affine_view(self, source: ir.Value, parts) -> ir.Value:
        exprs = [_affine_expr(const, coeffs) for const, coeffs, _ in parts]
        amap = ir.AffineMap.get(len(self.shape), 0, exprs)
        return trn_op("view", self.tensor_of(U.element_type(source)), [source],
                      indexing_map=ir.AffineMapAttr.get(amap))

    def _gather(self, source: ir.Value, parts) -> ir.Value:
        n = len(self.shape)
        strides = _row_major(U.shape(source))
        rows = sorted(set().union(*(loop_dims_of(t, self.leaf_dims)
                                    for _, _, terms in parts for _, t in terms)))
        frees = [d for d in range(n) if d not in rows]
        offset = int(sum(st * c for st, (c, _, _) in zip(strides, parts)))
        free_strides = [int(sum(st * coeffs[j] for st, (_, coeffs, _) in zip(strides, parts)))
                        for j in frees]
        # The row part: sum over source dims of stride * (affine over row dims + data terms),
        # scaled down by its gcd, which the DMA multiplies back in integer arithmetic.
        row_terms: list[tuple[int, Expr]] = []
        data_dims = []          # the source dim of each data-dependent term
        for dim, (st, (_, coeffs, terms)) in enumerate(zip(strides, parts)):
            row_terms += [(int(st * coeffs[j]), Expr("iota", index=j)) for j in rows
                          if coeffs[j]]
            for mult, term in terms:
                if not float(mult).is_integer():
                    raise UnsupportedOpError("no lowering to the NeuronCore for a fractional "
                                             "index")
                row_terms.append((int(st * mult), term))
                data_dims.append(dim)
        # One index into the source's outermost dim (an embedding lookup): its rows are the
        # tensor's, and the DMA's own check that a row lies inside the tensor is the index
        # check. Any other index can land inside the tensor out of its dim's range.
        checked = not (len(row_terms) == 1 and data_dims == [0])
        row_stride = math.gcd(*[m for m, _ in row_terms]) or 1
        rows_addressed = math.prod(U.shape(source)) // row_stride
        if rows_addressed > isa.FP32_EXACT_INTEGERS:
            # The engines compute the index (its terms, the wrap of a negative one) in fp32,
            # exact only up to 2^24: a larger one would pick a neighbouring row.
            raise UnsupportedOpError(f"a gather over {rows_addressed} rows (its row index is "
                                     f"computed in fp32, exact up to 2^24 rows)")
        i64 = ir.IntegerType.get_signless(64)
        index = None
        for mult, term in row_terms:
            scaled = Expr("convert", (term,), etype=i64)
            if mult != row_stride:
                scaled = Expr("mul", (scaled, const(mult // row_stride)))
            index = scaled if index is None else Expr("add", (index, scaled))
        if self.index_checks and checked:
            valid = self.index_checks[0]
            for check in self.index_checks[1:]:
                valid = Expr("and", (valid, check))
            index = Expr("select", (valid, index, const(float(isa.INDEX_OUT_OF_RANGE))))
        index_full = self.emit(index, i64)
        # Take the index at free-dim position 0: it does not vary along the free dims.
        select_rows = ir.AffineMap.get(len(rows), 0, [
            ir.AffineExpr.get_dim(rows.index(d)) if d in rows else ir.AffineExpr.get_constant(0)
            for d in range(n)])
        index_rows = trn_op("view", U.tensor_type([self.shape[d] for d in rows], i64),
                            [index_full], indexing_map=ir.AffineMapAttr.get(select_rows))
        etype = U.element_type(source)
        gathered = trn_op("gather", U.tensor_type([self.shape[d] for d in rows + frees], etype),
                          [source, index_rows], offset=U.i64(offset),
                          row_stride=U.i64(row_stride), free_strides=U.i64_array(free_strides))
        order = rows + frees
        if order == list(range(n)):
            return gathered
        perm = [order.index(d) for d in range(n)]
        return trn_op("transpose", self.tensor_of(etype), [gathered],
                      permutation=U.i64_array(perm))

    def _materialise(self, v, etype: ir.Type) -> ir.Value:
        if isinstance(v, ir.Value):
            return v
        return trn_op("fill", self.tensor_of(etype), [], value=U.f32(v))

    def _alu(self, kind: str, args) -> Union[ir.Value, float]:
        a, b = args
        if not isinstance(a, ir.Value) and not isinstance(b, ir.Value):
            folded = fold(kind, a, b)
            if folded is None:
                raise CompileError(f"cannot fold constant '{kind}'")
            return folded
        ref = a if isinstance(a, ir.Value) else b
        etype = ir.IntegerType.get_signless(1) if kind in COMPARISONS \
            else compute_type(U.element_type(ref))
        rtype = self.tensor_of(etype)
        if isinstance(a, ir.Value) and isinstance(b, ir.Value):
            if kind not in COMPARISONS and not (_is_float(U.element_type(a))
                                               and _is_float(U.element_type(b))) \
                    and U.element_type(a) != U.element_type(b):
                b = trn_op("convert", a.type, [b])
            return trn_op("tensor_tensor", rtype, [a, b], op=U.string(kind))
        tensor, scalar, reverse = (a, b, False) if isinstance(a, ir.Value) else (b, a, True)
        return trn_op("tensor_scalar", rtype, [tensor], op=U.string(kind),
                      scalar=U.f32(scalar), reverse=U.bool_attr(reverse))


def _affine_expr(const: float, coeffs: list[float]) -> ir.AffineExpr:
    expr = ir.AffineExpr.get_constant(int(const))
    for d, c in enumerate(coeffs):
        if c:
            expr = ir.AffineExpr.get_add(expr, ir.AffineExpr.get_mul(
                ir.AffineExpr.get_dim(d), ir.AffineExpr.get_constant(int(c))))
    return expr


def _row_major(shape: list[int]) -> list[int]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= size
    return strides[::-1]
