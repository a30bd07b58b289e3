"""convert-linalg-to-trn: linalg-on-tensors -> the `trn` dialect.

Named linalg ops map one to one (matmul, transpose, broadcast, fill, reshapes). Every
`linalg.generic` is compiled by one general mechanism rather than a pattern per PyTorch op:
1. each input is brought to the iteration space with trn view ops (reshape away unit dims,
   transpose, broadcast) derived from its indexing map;
2. the scalar body becomes an expression DAG (compiler/scalar/), on which idioms the scalar
   engine computes in one instruction are recognised (relu, gelu, sigmoid, silu, fused scale
   and bias), and ops without an engine equivalent (floor, round, integer division) are
   expanded;
3. every remaining scalar op becomes a tensor-level trn op (activation, tensor_tensor,
   tensor_scalar, select, convert, iota for loop indices);
4. reduction loops become trn.reduce over those dims of the combining op's operand; a second
   output tracking the index of the extremum becomes argmax/argmin.
An op with no lowering raises UnsupportedOpError at the op's location (its FX node).
"""

from __future__ import annotations

import dataclasses
import math

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import UnsupportedOpError
from torchneuron.compiler.passes import Pass, register
from torchneuron.compiler.scalar.emit import TrnEmitter, storage_element_type, trn_op
from torchneuron.compiler.scalar.expr import Expr, const, scalar_expr
from torchneuron.compiler.scalar.idioms import recognise_idioms
from torchneuron.dialects.trn import affine_coefficients
from torchneuron.format import isa


@register
@dataclasses.dataclass
class ConvertLinalgToTrn(Pass):
    NAME = "convert-linalg-to-trn"
    SUMMARY = "Convert linalg-on-tensors ops to trn dialect ops"

    def run(self, module: ir.Operation) -> None:
        for func in U.functions(module):
            _convert_function(func)


def _convert_function(func: ir.Operation) -> None:
    _fold_zero_elements(func)
    ops = U.body_ops(func)
    for op in ops:
        if op.name == "cf.assert" and _always_fails(op):
            raise UnsupportedOpError(_assert_message(op), op.location)
    for op in ops:
        converter = _CONVERTERS.get(op.name)
        if converter is None:
            if op.name in _KEEP:
                continue
            raise UnsupportedOpError(f"no lowering to the NeuronCore for '{op.name}'", op.location)
        with ir.InsertionPoint(op), op.location:
            replacement = converter(op)
        replacements = replacement if isinstance(replacement, list) else [replacement]
        for result, new in zip(op.results, replacements):
            if new is not None:
                result.replace_all_uses_with(new)
    # Index checks torch-mlir inserts (cf.assert) are dropped here: each gather of a body
    # with checks took them into its row index (TrnEmitter.index_checks), and the DMA that
    # reads the rows checks them when the program runs.
    for op in U.body_ops(func):
        if op.name == "cf.assert":
            op.erase()
    U.erase_dead([o for o in U.body_ops(func) if o.name != "func.return"])
    for op in U.body_ops(func):
        if op.name == "trn.scan":
            _stable_logcumsumexp(op)
    _fold_zero_elements(func)     # insert_slices of empty sources made by concat and pad
    for op in U.body_ops(func):
        if op.name == "tensor.empty":
            # Still used (returned, e.g. torch.empty): its contents are unspecified, but an
            # output must be written; zeros.
            with ir.InsertionPoint(op), op.location:
                op.results[0].replace_all_uses_with(
                    trn_op("fill", op.results[0].type, [], value=U.f32(0.0)))
    U.erase_dead([o for o in U.body_ops(func) if o.name != "func.return"])


def _always_fails(assertion: ir.Operation) -> bool:
    """Whether a cf.assert's condition is the constant false: torch-mlir's way of saying that
    it has no correct lowering for the op's arguments (an adaptive pooling whose windows
    differ in size lowers to one fixed-size window, asserted false), not an index check."""
    return U.constant_scalar(assertion.operands[0]) == 0


def _assert_message(assertion: ir.Operation) -> str:
    message = ir.StringAttr(assertion.attributes["msg"]).value \
        if "msg" in assertion.attributes else "an assertion that always fails"
    return f"torch-mlir has no correct lowering for this op's arguments: {message}"


def _zero_elements(value: ir.Value) -> bool:
    return isinstance(value.type, ir.RankedTensorType) and 0 in U.shape(value)


def _fold_zero_elements(func: ir.Operation) -> None:
    """Tensors with no elements compute nothing: a value with no elements becomes trn.empty
    (it is never read, and a returned one is an output of zero bytes); a linalg op with an
    input of no elements has an empty iteration space, so its results are its `outs` (a sum
    over an empty dim is its zero fill); inserting a slice of no elements leaves the
    destination as it was. Then no tile of zero elements reaches the kernels."""
    for op in U.body_ops(func):
        if op.name in ("func.return", "trn.empty") or not op.results:
            continue
        replacements = None
        if all(_zero_elements(r) for r in op.results):
            with ir.InsertionPoint(op), op.location:
                replacements = [trn_op("empty", r.type, []) for r in op.results]
        elif op.name.startswith("linalg.") and hasattr(op.opview, "inputs") \
                and any(_zero_elements(v) for v in op.opview.inputs):
            replacements = list(op.opview.outputs)
        elif op.name in ("tensor.insert_slice", "trn.insert_slice"):
            source, dest = ((op.operands[0], op.operands[1]) if op.name == "tensor.insert_slice"
                            else (op.operands[1], op.operands[0]))
            if _zero_elements(source):
                replacements = [dest]
        elif op.name == "tensor.concat" and any(_zero_elements(v) for v in op.operands):
            kept = [v for v in op.operands if not _zero_elements(v)]
            if len(kept) == 1:
                replacements = kept
        if replacements is not None:
            for result, new in zip(op.results, replacements):
                result.replace_all_uses_with(new)
    U.erase_dead([o for o in U.body_ops(func) if o.name != "func.return"])


# Ops kept as they are: constants feed trn ops, tensor.empty feeds only `outs` (erased when dead).
_KEEP = {"arith.constant", "tensor.empty", "func.return", "cf.assert",
         "trn.scan",    # the frontend made scans trn ops already
         "trn.empty"}   # values with no elements (_fold_zero_elements)


def _stable_logcumsumexp(scan: ir.Operation) -> None:
    """torch-mlir lowers logcumsumexp as log(cumsum(exp(x))), which overflows for |x| of a
    few hundred (bf16: with a rounding of exp(x) before the cumsum); a scan combining with
    logaddexp computes the same exactly-scaled result, in fp32 up to the log's result."""
    exp = U.defining_op(scan.operands[0])
    if exp is not None and exp.name == "trn.convert" and len(list(exp.results[0].uses)) == 1:
        exp = U.defining_op(exp.operands[0])     # bf16: exp computed in fp32, then rounded
    users = list(scan.results[0].uses)
    if U.str_attr(scan, "op") != "add" or exp is None or not _plain_activation(exp, "exp") \
            or len(users) != 1:
        return
    log = users[0].owner
    log = log.operation if isinstance(log, ir.OpView) else log
    if not _plain_activation(log, "log"):
        return
    with ir.InsertionPoint(log), log.location:
        stable = trn_op("scan", log.results[0].type, [exp.operands[0]],
                        op=U.string("logaddexp"), dimension=scan.attributes["dimension"])
    log.results[0].replace_all_uses_with(stable)


def _plain_activation(op: ir.Operation, func: str) -> bool:
    return (op.name == "trn.activation" and U.str_attr(op, "func") == func
            and U.float_attr(op, "scale") == 1.0 and U.float_attr(op, "bias") == 0.0)


def _ins_outs(op: ir.Operation) -> tuple[list[ir.Value], list[ir.Value]]:
    """The `ins` and `outs` operands of a destination-passing linalg op."""
    view = op.opview
    if hasattr(view, "inputs"):
        return list(view.inputs), list(view.outputs)
    return [view.input], [view.init]


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
    return trn_op("fill", op.results[0].type, [], value=U.f32(value))


def _require_float_operands(op: ir.Operation, what: str) -> None:
    """PE multiplies bf16, fp16, fp8 and fp32 only (TARGET.md): a product of integers has no
    engine that computes it exactly."""
    for value in list(op.operands) + list(op.results):
        if not isinstance(U.element_type(value), ir.FloatType):
            raise UnsupportedOpError(f"{what} of {U.element_type(value)} tensors (PE "
                                     "multiplies floating-point values only)", op.location)


def _convert_matmul(op: ir.Operation) -> ir.Value:
    if "indexing_maps" in op.attributes and not _default_matmul_maps(op):
        raise UnsupportedOpError(f"{op.name} with transposed indexing maps", op.location)
    _require_float_operands(op, "a matmul")
    (lhs, rhs), (init,) = _ins_outs(op)
    result_type = op.results[0].type
    product = trn_op("matmul", result_type, [lhs, rhs])
    if _fill_value(init) == 0.0:
        return product
    return trn_op("tensor_tensor", result_type, [product, init], op=U.string("add"))


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
    return trn_op("transpose", op.results[0].type, [src], permutation=U.i64_array(perm))


def _convert_broadcast(op: ir.Operation) -> ir.Value:
    (src,), _ = _ins_outs(op)
    dims = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
    return trn_op("broadcast", op.results[0].type, [src], dimensions=U.i64_array(dims))


def _convert_reshape(op: ir.Operation) -> ir.Value:
    return trn_op("reshape", op.results[0].type, [op.operands[0]])


# -- convolution and pooling -----------------------------------------------------------------

def _dense_i64(op: ir.Operation, name: str, rank: int) -> list[int]:
    if name not in op.attributes:
        return [1] * rank
    return [int(v) for v in ir.DenseIntElementsAttr(op.attributes[name])]


def _accumulate_into(value: ir.Value, init: ir.Value, kind: str) -> ir.Value:
    """`value` combined with the named op's accumulator, unless that starts at identity."""
    identity = {"add": 0.0, "max": -math.inf}[kind]
    if _fill_value(init) == identity:
        return value
    return trn_op("tensor_tensor", value.type, [value, init], op=U.string(kind))


def _convert_conv(op: ir.Operation) -> ir.Value:
    _require_float_operands(op, "a convolution")
    (x, w), (init,) = _ins_outs(op)
    name = op.name
    spatial = len(U.shape(x)) - 2
    strides = _dense_i64(op, "strides", spatial)
    dilations = _dense_i64(op, "dilations", spatial)
    result_type = op.results[0].type
    etype = U.element_type(op.results[0])
    if name == "linalg.conv_2d_ngchw_gfchw":
        # [N, G, C, H, W] and [G, F, C, KH, KW]: groups folded into the channel dims.
        n, g, c, *hw = U.shape(x)
        _, f, _, *k = U.shape(w)
        x = trn_op("reshape", U.tensor_type([n, g * c, *hw], U.element_type(x)), [x])
        w = trn_op("reshape", U.tensor_type([g * f, c, *k], U.element_type(w)), [w])
        out_shape = U.shape(op.results[0])
        flat = U.tensor_type([out_shape[0], g * f, *out_shape[3:]], etype)
        conv = trn_op("conv", flat, [x, w], strides=U.i64_array(strides),
                      dilations=U.i64_array(dilations), groups=U.i64(g))
        conv = trn_op("reshape", result_type, [conv])
    elif name == "linalg.depthwise_conv_2d_nchw_chw":
        c, *k = U.shape(w)
        w = trn_op("reshape", U.tensor_type([c, 1, *k], U.element_type(w)), [w])
        conv = trn_op("conv", result_type, [x, w], strides=U.i64_array(strides),
                      dilations=U.i64_array(dilations), groups=U.i64(c))
    else:
        conv = trn_op("conv", result_type, [x, w], strides=U.i64_array(strides),
                      dilations=U.i64_array(dilations), groups=U.i64(1))
    return _accumulate_into(conv, init, "add")


def _convert_pool(op: ir.Operation) -> ir.Value:
    """trn.pool (channels before the spatial dims); a channels-last pooling (`_nwc`, `_nhwc`,
    `_ndhwc`) pools its input transposed to channels-first and transposes the result back."""
    (x, window), (init,) = _ins_outs(op)
    rank = len(U.shape(x))
    spatial = rank - 2
    kind = "max" if op.name.endswith("_max") else "add"
    result_type = op.results[0].type
    channels_last = "_n" in op.name and op.name.split("_")[-2].endswith("c")
    if channels_last:
        to_first = [0, rank - 1, *range(1, rank - 1)]
        x = _permute(x, to_first)
        shape = U.shape(op.results[0])
        result_type = U.tensor_type([shape[p] for p in to_first], U.element_type(x))
    pooled = trn_op("pool", result_type, [x], op=U.string(kind),
                    window=U.i64_array(U.shape(window)),
                    strides=U.i64_array(_dense_i64(op, "strides", spatial)),
                    dilations=U.i64_array(_dense_i64(op, "dilations", spatial)))
    if channels_last:
        pooled = _permute(pooled, [0, *range(2, rank), 1])
    return _accumulate_into(pooled, init, kind)


def _permute(value: ir.Value, permutation: list[int]) -> ir.Value:
    shape = U.shape(value)
    return trn_op("transpose", U.tensor_type([shape[p] for p in permutation],
                                             U.element_type(value)), [value],
                  permutation=U.i64_array(permutation))


# -- tensor dialect data movement ---------------------------------------------------------------

def _static(op: ir.Operation, name: str) -> list[int]:
    values = list(ir.DenseI64ArrayAttr(op.attributes[name]))
    if any(v < -(1 << 62) for v in values):     # ShapedType::kDynamic
        raise UnsupportedOpError(f"{op.name} with dynamic {name[len('static_'):]}",
                                 op.location)
    return values


def _slice_map(offsets, sizes, strides, result_shape, op) -> ir.AffineMap:
    """Map from the (possibly rank-reduced) slice's dims to the source's indices."""
    exprs = []
    j = 0
    for o, n, st in zip(offsets, sizes, strides):
        if j < len(result_shape) and n == result_shape[j]:
            exprs.append(ir.AffineExpr.get_add(
                ir.AffineExpr.get_mul(ir.AffineExpr.get_dim(j), ir.AffineExpr.get_constant(st)),
                ir.AffineExpr.get_constant(o)))
            j += 1
        elif n == 1:
            exprs.append(ir.AffineExpr.get_constant(o))
        else:
            raise UnsupportedOpError(f"{op.name} dropping a dim of size {n}", op.location)
    if j != len(result_shape):
        raise UnsupportedOpError(f"{op.name} with an unexpected result shape", op.location)
    return ir.AffineMap.get(len(result_shape), 0, exprs)


def _convert_extract_slice(op: ir.Operation) -> ir.Value:
    amap = _slice_map(_static(op, "static_offsets"), _static(op, "static_sizes"),
                      _static(op, "static_strides"), U.shape(op.results[0]), op)
    return trn_op("view", op.results[0].type, [op.operands[0]],
                  indexing_map=ir.AffineMapAttr.get(amap))


def _destination(value: ir.Value) -> ir.Value:
    """A tensor.empty destination becomes trn.empty (its elements are all written later)."""
    owner = U.defining_op(value)
    if owner is not None and owner.name == "tensor.empty":
        return trn_op("empty", value.type, [])
    return value


def _insert(dest: ir.Value, source: ir.Value, offsets, strides, sizes) -> ir.Value:
    if U.shape(source) != list(sizes):       # rank-reduced source: restore its unit dims
        source = trn_op("reshape", U.tensor_type(sizes, U.element_type(source)), [source])
    return trn_op("insert_slice", dest.type, [dest, source], offsets=U.i64_array(offsets),
                  strides=U.i64_array(strides))


def _convert_insert_slice(op: ir.Operation) -> ir.Value:
    source, dest = op.operands[0], op.operands[1]
    return _insert(_destination(dest), source, _static(op, "static_offsets"),
                   _static(op, "static_strides"), _static(op, "static_sizes"))


def _convert_concat(op: ir.Operation) -> ir.Value:
    dim = U.int_attr(op, "dim")
    result = trn_op("empty", op.results[0].type, [])
    offset = 0
    for value in op.operands:
        shape = U.shape(value)
        offsets = [0] * len(shape)
        offsets[dim] = offset
        result = _insert(result, value, offsets, [1] * len(shape), shape)
        offset += shape[dim]
    return result


def _convert_pad(op: ir.Operation) -> ir.Value:
    low, high = _static(op, "static_low"), _static(op, "static_high")
    if any(v < 0 for v in low + high):
        raise UnsupportedOpError("tensor.pad with negative padding", op.location)
    body = list(op.regions[0].blocks[0].operations)
    value = U.constant_scalar(body[-1].operands[0])
    if value is None:
        raise UnsupportedOpError("tensor.pad with a non-constant padding value", op.location)
    filled = trn_op("fill", op.results[0].type, [], value=U.f32(value))
    shape = U.shape(op.operands[0])
    return _insert(filled, op.operands[0], low, [1] * len(shape), shape)


# -- linalg.generic ----------------------------------------------------------------------------

# Body combining op -> trn.reduce kind (or/and reduce 0/1 values), and its identity.
_REDUCE_KINDS = {"add": "add", "mul": "mul", "max": "max", "min": "min", "or": "max",
                 "and": "min"}
_IDENTITY = {"add": 0.0, "mul": 1.0, "max": -math.inf, "min": math.inf, "or": 0.0, "and": 1.0}


def _convert_generic(op: ir.Operation) -> list[ir.Value]:
    """One general mechanism for every linalg.generic: bring each input to the iteration
    space, build the body's expression DAG, recognise idioms, emit trn ops; loops marked
    `reduction` become trn.reduce over those dims (with argmax/argmin recognised when a
    second output tracks the index of the extremum)."""
    iterators = ["reduction" in str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    ins, outs = _ins_outs(op)
    out_maps = maps[len(ins):]
    bounds = _loop_bounds(maps, ins + outs, op)
    reduced = [d for d, is_reduction in enumerate(iterators) if is_reduction]
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    env: dict = {}
    leaves: list[ir.Value] = []
    leaf_dims: list[set[int]] = []

    def leaf(tensor: ir.Value, amap) -> Expr:
        leaves.append(_to_iteration_space(tensor, amap, bounds, op))
        leaf_dims.append(_map_dims(amap))
        return Expr("arg", index=len(leaves) - 1)

    for i, (arg, tensor) in enumerate(zip(args, ins)):
        if list(arg.uses):
            env[arg] = leaf(tensor, maps[i])
    for j, (arg, tensor) in enumerate(zip(args[len(ins):], outs)):
        if list(arg.uses):
            env[arg] = Expr("acc", index=j) if reduced else leaf(tensor, out_maps[j])

    body = [inner for inner in block.operations if inner.name != "cf.assert"]
    for inner in body[:-1]:
        env[inner.results[0]] = scalar_expr(
            inner, lambda k, inner=inner: _operand_expr(inner.operands[k], env, op))
    yields = [recognise_idioms(_operand_expr(v, env, op)) for v in body[-1].operands]
    # torch-mlir's index checks: the rows the body gathers are read only where they hold.
    checks = [_operand_expr(inner.operands[0], env, op) for inner in block.operations
              if inner.name == "cf.assert"]
    emitter = TrnEmitter(leaves, bounds, leaf_dims, index_checks=checks)
    results = []
    for j, (expr, result) in enumerate(zip(yields, op.results)):
        if not list(result.uses):
            results.append(None)
            continue
        etype = U.element_type(result)
        if not reduced:
            value = emitter.emit(expr, etype)
        else:
            value = _reduction(op, j, expr, yields, emitter, reduced, bounds, etype, outs[j])
        results.append(_to_output(value, out_maps[j], [d for d in range(len(bounds))
                                                       if d not in reduced], result.type, op))
    return results


def _operand_expr(value: ir.Value, env: dict, generic: ir.Operation) -> Expr:
    expr = env.get(value)
    if expr is not None:
        return expr
    c = U.constant_scalar(value)
    if c is None:
        raise UnsupportedOpError("no lowering to the NeuronCore for a linalg.generic body "
                                 "using a non-constant value from outside", generic.location)
    return const(c)


def _reduction(op, j: int, expr: Expr, yields: list[Expr], emitter: TrnEmitter,
               reduced: list[int], bounds: list[int], etype, init: ir.Value) -> ir.Value:
    """trn ops computing output j of a reduction generic, before the output map."""
    kept_shape = [b for d, b in enumerate(bounds) if d not in reduced]
    combine = _combine(expr, j)
    if combine is not None:
        kind, operand = combine
        value = emitter.emit(operand, etype)
        value = trn_op("reduce", U.tensor_type(kept_shape, U.element_type(value)), [value],
                       op=U.string(_REDUCE_KINDS[kind]), dimensions=U.i64_array(reduced))
        if _fill_value(init) != _IDENTITY[kind]:
            # The accumulator starts from something else: combine it in.
            value = trn_op("tensor_tensor", value.type,
                           [value, _reshape_like(init, value)], op=U.string(_REDUCE_KINDS[kind]))
        return value
    arg = _arg_extremum(expr, j, yields)
    if arg is not None:
        kind, operand, dim = arg
        return _emit_arg_extremum(emitter, operand, kind, dim, reduced, bounds, kept_shape,
                                  etype, op)
    match = _select_match(expr, j, init)
    if match is not None:
        return _emit_select_match(emitter, *match, reduced, bounds, kept_shape, etype, init, op)
    raise UnsupportedOpError("no lowering to the NeuronCore for this linalg.generic reduction "
                             "body", op.location)


def _combine(expr: Expr, j: int) -> tuple[str, Expr] | None:
    """(kind, x) when `expr` is `x <kind> acc_j` (or `acc_j <kind> x`) for a reduction kind."""
    if expr.kind in _REDUCE_KINDS and len(expr.args) == 2:
        a, b = expr.args
        if b.kind == "acc" and b.index == j and not _uses_acc(a):
            return expr.kind, a
        if a.kind == "acc" and a.index == j and not _uses_acc(b):
            return expr.kind, b
    return None


def _uses_acc(expr: Expr) -> bool:
    return expr.kind == "acc" or any(_uses_acc(a) for a in expr.args)


def _arg_extremum(expr: Expr, j: int, yields: list[Expr]) -> tuple[str, Expr, int] | None:
    """("max"|"min", x, dim) when output j tracks where output k reaches its extremum:
    yield_j = select(x > acc_k, index(dim), acc_j) with yield_k = max(x, acc_k) (or < / min).
    Strict comparison keeps the first occurrence, as PyTorch's argmax does."""
    if expr.kind != "select":
        return None
    mask, index, keep = expr.args
    if keep.kind != "acc" or keep.index != j or mask.kind not in ("gt", "lt"):
        return None
    while index.kind == "convert":
        index = index.args[0]
    if index.kind != "iota":
        return None
    x, acc = mask.args
    if acc.kind != "acc":
        return None
    kind = "max" if mask.kind == "gt" else "min"
    companion = _combine(yields[acc.index], acc.index)
    if companion is None or companion[0] != kind or companion[1] is not x:
        return None
    return kind, x, index.index


def _is_acc(expr: Expr, j: int) -> bool:
    return expr.kind == "acc" and expr.index == j


def _select_match(expr: Expr, j: int, init: ir.Value):
    """(first, cond, x, sentinel) when output j keeps the x of one iteration where cond holds
    (neither using an accumulator), or its initial value where none does:
    - the last such iteration: yield_j = select(cond, x, acc_j);
    - the first: yield_j = select(acc_j == s, select(cond, x, acc_j), acc_j) with acc_j
      starting at s (max-pool indices); an x equal to s does not count as found."""
    if expr.kind != "select" or not _is_acc(expr.args[2], j):
        return None
    mask, taken, _ = expr.args
    if mask.kind == "eq" and taken.kind == "select" and _is_acc(taken.args[2], j):
        a, b = mask.args
        sentinel = b if _is_acc(a, j) else a if _is_acc(b, j) else None
        cond, x = taken.args[:2]
        if sentinel is not None and sentinel.kind == "const" and \
                _fill_value(init) == sentinel.value and not _uses_acc(cond) and \
                not _uses_acc(x):
            return True, cond, x, sentinel.value
    if not _uses_acc(mask) and not _uses_acc(taken):
        return False, mask, taken, None
    return None


def _emit_select_match(emitter: TrnEmitter, first: bool, cond: Expr, x: Expr, sentinel,
                       reduced: list[int], bounds: list[int], kept_shape: list[int], etype,
                       init: ir.Value, op) -> ir.Value:
    """The x at the first (or last) iteration of the reduced loops, in loop order, where
    cond holds: that iteration's position is a min (max) reduction of the positions where
    it holds, and x is picked out where the position equals it (a max over one element)."""
    f32 = ir.F32Type.get()
    position, count = None, 1
    for d in reversed(reduced):
        term = Expr("convert", (Expr("iota", index=d),), etype=f32)
        if count != 1:
            term = Expr("mul", (term, const(count)))
        position = term if position is None else Expr("add", (term, position))
        count *= bounds[d]
    if count > isa.FP32_EXACT_INTEGERS:
        raise UnsupportedOpError(f"a select reduction over {count} positions (fp32 counts "
                                 "exactly to 2^24)", op.location)
    hit = cond if sentinel is None else \
        Expr("select", (Expr("ne", (x, const(sentinel))), cond, const(0)))
    none = float(count) if first else -1.0
    # The emitter memoises by id(): the Exprs stay referenced until emitted.
    pick, as_f32 = Expr("select", (hit, position, const(none))), Expr("convert", (x,), etype=f32)
    candidates = emitter.emit(pick, f32)
    kept = U.tensor_type(kept_shape, f32)
    chosen = trn_op("reduce", kept, [candidates], op=U.string("min" if first else "max"),
                    dimensions=U.i64_array(reduced))
    spread = trn_op("broadcast", candidates.type, [chosen], dimensions=U.i64_array(reduced))
    i1 = ir.IntegerType.get_signless(1)
    at = trn_op("tensor_tensor", U.tensor_type(bounds, i1),
                [emitter.emit(position, f32), spread], op=U.string("eq"))
    values = emitter.emit(as_f32, f32)
    lowest = trn_op("fill", values.type, [], value=U.f32(-math.inf))
    picked = trn_op("reduce", kept, [trn_op("select", values.type, [at, values, lowest])],
                    op=U.string("max"), dimensions=U.i64_array(reduced))
    found = trn_op("tensor_scalar", U.tensor_type(kept_shape, i1), [chosen], op=U.string("ne"),
                   scalar=U.f32(none), reverse=U.bool_attr(False))
    start = _reshape_like(init, picked)
    if U.element_type(start) != f32:
        start = trn_op("convert", kept, [start])
    value = trn_op("select", kept, [found, picked, start])
    return trn_op("convert", U.tensor_type(kept_shape, storage_element_type(etype)), [value])


def _emit_arg_extremum(emitter: TrnEmitter, operand: Expr, kind: str, dim: int,
                       reduced: list[int], bounds: list[int], kept_shape: list[int], etype,
                       op) -> ir.Value:
    """argmax/argmin: the smallest index at which the operand equals its extremum, or, of a
    float operand, is NaN: PyTorch's argmax and argmin both take a NaN as the extremum (the
    reduction's extremum is then NaN, which equals nothing)."""
    if reduced != [dim]:
        raise UnsupportedOpError("argmax/argmin over several dims", op.location)
    x = emitter.value(operand)
    if not isinstance(x, ir.Value):
        raise UnsupportedOpError("argmax/argmin of a constant", op.location)
    xtype = U.element_type(x)
    extremum = trn_op("reduce", U.tensor_type(kept_shape, xtype), [x], op=U.string(kind),
                      dimensions=U.i64_array(reduced))
    spread = trn_op("broadcast", x.type, [extremum], dimensions=U.i64_array(reduced))
    i1 = ir.IntegerType.get_signless(1)
    hit = trn_op("tensor_tensor", U.tensor_type(bounds, i1), [x, spread], op=U.string("eq"))
    if isinstance(xtype, ir.FloatType):
        nan = trn_op("tensor_tensor", U.tensor_type(bounds, i1), [x, x], op=U.string("ne"))
        hit = trn_op("tensor_tensor", U.tensor_type(bounds, i1), [hit, nan], op=U.string("or"))
    f32 = ir.F32Type.get()
    index = trn_op("convert", U.tensor_type(bounds, f32),
                   [trn_op("iota", U.tensor_type(bounds, ir.IntegerType.get_signless(64)), [],
                           dimension=U.i64(dim))])
    beyond = trn_op("fill", U.tensor_type(bounds, f32), [], value=U.f32(bounds[dim]))
    candidates = trn_op("select", index.type, [hit, index, beyond])
    first = trn_op("reduce", U.tensor_type(kept_shape, f32), [candidates], op=U.string("min"),
                   dimensions=U.i64_array(reduced))
    return trn_op("convert", U.tensor_type(kept_shape, storage_element_type(etype)), [first])


def _reshape_like(value: ir.Value, like: ir.Value) -> ir.Value:
    if U.shape(value) == U.shape(like):
        return value
    return trn_op("reshape", U.tensor_type(U.shape(like), U.element_type(value)), [value])


def _to_output(value: ir.Value, out_map, loop_dims: list[int], result_type: ir.Type,
               op) -> ir.Value:
    """Arrange `value` (indexed by `loop_dims` in loop order) as the output map says: permute
    to the map's dim order and add the map's constant-0 (unit) dims."""
    order = []
    for e in out_map.results:
        if isinstance(e, ir.AffineDimExpr):
            order.append(e.position)
        elif not (isinstance(e, ir.AffineConstantExpr) and e.value == 0):
            raise UnsupportedOpError(f"linalg.generic output map {out_map}", op.location)
    if sorted(order) != loop_dims:
        raise UnsupportedOpError(f"linalg.generic output map {out_map} does not index "
                                 "every parallel loop once", op.location)
    perm = [loop_dims.index(d) for d in order]
    etype = U.element_type(value)
    if perm != list(range(len(perm))):
        shape = [U.shape(value)[p] for p in perm]
        value = trn_op("transpose", U.tensor_type(shape, etype), [value],
                       permutation=U.i64_array(perm))
    out_shape = list(ir.RankedTensorType(result_type).shape)
    if U.shape(value) != out_shape:
        value = trn_op("reshape", U.tensor_type(out_shape, etype), [value])
    target = storage_element_type(ir.RankedTensorType(result_type).element_type)
    if etype != target:
        value = trn_op("convert", U.tensor_type(out_shape, target), [value])
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


def _map_dims(amap) -> set[int]:
    """The loop dims an indexing map's results depend on."""
    dims: set[int] = set()
    for e in amap.results:
        coefficients = affine_coefficients(e, amap.n_dims)
        if coefficients is None:
            dims |= set(range(amap.n_dims))
        else:
            dims |= {d for d, a in enumerate(coefficients[1]) if a}
    return dims


def _to_iteration_space(tensor: ir.Value, amap, bounds: list[int], op) -> ir.Value:
    """View `tensor` (indexed by `amap`) as a tensor of the iteration-space shape: a
    projected permutation by reshape/transpose/broadcast, any other affine map (a sliding
    window `d2 * 2 + d5`, a diagonal `d0, d0`) as a trn.view that reads through the map."""
    shape = U.shape(tensor)
    etype = U.element_type(tensor)
    if not _projected_permutation(amap, shape):
        if any(affine_coefficients(e, amap.n_dims) is None for e in amap.results):
            raise UnsupportedOpError(f"linalg.generic indexing map {amap} is not affine",
                                     op.location)
        return trn_op("view", U.tensor_type(bounds, etype), [tensor],
                      indexing_map=ir.AffineMapAttr.get(amap))
    dims: list[int] = []
    keep: list[int] = []
    for k, expr in enumerate(amap.results):
        if isinstance(expr, ir.AffineDimExpr):
            dims.append(expr.position)
            keep.append(k)
        elif isinstance(expr, ir.AffineConstantExpr) and expr.value == 0 and shape[k] == 1:
            continue
        else:
            raise UnsupportedOpError(f"linalg.generic indexing map {amap} is not a "
                                     "projected permutation", op.location)
    if len(set(dims)) != len(dims):
        raise UnsupportedOpError(f"linalg.generic indexing map {amap} repeats a loop",
                                 op.location)
    value = tensor
    if len(keep) != len(shape):
        value = trn_op("reshape", U.tensor_type([shape[k] for k in keep], etype), [value])
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    if order != list(range(len(dims))):
        new_shape = [U.shape(value)[i] for i in order]
        value = trn_op("transpose", U.tensor_type(new_shape, etype), [value],
                       permutation=U.i64_array(order))
        dims = sorted(dims)
    missing = [d for d in range(len(bounds)) if d not in dims]
    if missing:
        value = trn_op("broadcast", U.tensor_type(bounds, etype), [value],
                       dimensions=U.i64_array(missing))
    return value


def _projected_permutation(amap, shape: list[int]) -> bool:
    """Each result a distinct loop dim, or constant 0 along a unit dim."""
    dims = []
    for k, expr in enumerate(amap.results):
        if isinstance(expr, ir.AffineDimExpr):
            dims.append(expr.position)
        elif not (isinstance(expr, ir.AffineConstantExpr) and expr.value == 0 and
                  shape[k] == 1):
            return False
    return len(set(dims)) == len(dims)


_CONVERTERS = {
    "linalg.conv_1d_ncw_fcw": _convert_conv,
    "linalg.conv_2d_nchw_fchw": _convert_conv,
    "linalg.conv_3d_ncdhw_fcdhw": _convert_conv,
    "linalg.conv_2d_ngchw_gfchw": _convert_conv,
    "linalg.depthwise_conv_2d_nchw_chw": _convert_conv,
    "linalg.pooling_ncw_max": _convert_pool,
    "linalg.pooling_nchw_max": _convert_pool,
    "linalg.pooling_ncdhw_max": _convert_pool,
    "linalg.pooling_ncw_sum": _convert_pool,
    "linalg.pooling_nchw_sum": _convert_pool,
    "linalg.pooling_ncdhw_sum": _convert_pool,
    "linalg.pooling_nwc_max": _convert_pool,
    "linalg.pooling_nhwc_max": _convert_pool,
    "linalg.pooling_ndhwc_max": _convert_pool,
    "linalg.pooling_nwc_sum": _convert_pool,
    "linalg.pooling_nhwc_sum": _convert_pool,
    "linalg.pooling_ndhwc_sum": _convert_pool,
    "tensor.extract_slice": _convert_extract_slice,
    "tensor.insert_slice": _convert_insert_slice,
    "tensor.concat": _convert_concat,
    "tensor.pad": _convert_pad,
    "linalg.fill": _convert_fill,
    "linalg.matmul": _convert_matmul,
    "linalg.batch_matmul": _convert_matmul,
    "linalg.transpose": _convert_transpose,
    "linalg.broadcast": _convert_broadcast,
    "linalg.generic": _convert_generic,
    "tensor.collapse_shape": _convert_reshape,
    "tensor.expand_shape": _convert_reshape,
}
