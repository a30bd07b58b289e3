"""The `trn` dialect: tensor-level operations that map onto NeuronCore engines.

Values are tensors (value semantics). Each op carries what the hardware needs: the activation
function for the scalar engine, the ALU operation for the vector engine, the reduction kind.
View-like ops (transpose, broadcast, reshape) cost nothing by themselves: lowering folds them
into access patterns where it can. `trn.kernel` is an explicit fused kernel: a region whose ops
are lowered together so intermediates stay on chip.

Defined with `torch_mlir.dialects.ext` (lowered to IRDL); ops print in MLIR's generic form.
"""


import math
from collections.abc import Sequence

from torch_mlir import ir
from torch_mlir.dialects import ext

from torchneuron.dialects.common import (
    AnyAttr, VerifyError, float_value, i64_array, int_value, require, shape_of, string,
    tensor_type, verifier,
)

# The scalar engine's function table (names match the ISA's ActFunc labels).
ACTIVATION_FUNCS = (
    "identity", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "exp", "log", "sqrt",
    "rsqrt", "reciprocal", "square", "abs", "sign", "erf", "softplus", "sin", "cos",
    "arctan", "gelu_dx",
)
# Vector-engine ALU operations (names match the ISA's AluOp labels).
ALU_OPS = (
    "add", "sub", "mul", "div", "max", "min", "pow", "eq", "ne", "lt", "le", "gt", "ge",
    "and", "or", "xor", "mod",
)
REDUCE_OPS = ("add", "max", "min", "mul")


class Trn(ext.Dialect, name="trn"):
    pass


def _same_element_type(op, a: ir.Value, b: ir.Value, what: str) -> None:
    ta, tb = tensor_type(a, "operand"), tensor_type(b, what)
    require(ta.element_type == tb.element_type,
            f"{what} element type {tb.element_type} differs from {ta.element_type}")


def _check_matmul(op) -> None:
    lhs = shape_of(op.operands[0], "lhs")
    rhs = shape_of(op.operands[1], "rhs")
    res = shape_of(op.results[0], "result")
    require(len(lhs) >= 2 and len(lhs) == len(rhs) == len(res),
            f"expects operands and result of equal rank >= 2, got {lhs}, {rhs} -> {res}")
    require(lhs[:-2] == rhs[:-2] == res[:-2], f"batch dims differ: {lhs}, {rhs} -> {res}")
    require(lhs[-1] == rhs[-2],
            f"contraction dims differ: lhs has K={lhs[-1]}, rhs has K={rhs[-2]}")
    require(res[-2:] == [lhs[-2], rhs[-1]],
            f"result shape {res} does not match [M, N] = [{lhs[-2]}, {rhs[-1]}]")


class MatmulOp(Trn.Operation, name="matmul", traits=[ext.Pure]):
    """result[..., m, n] = sum_k lhs[..., m, k] * rhs[..., k, n] (fp32 accumulation)."""
    lhs: ext.Operand[ir.RankedTensorType]
    rhs: ext.Operand[ir.RankedTensorType]
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_matmul)


def _check_transpose(op) -> None:
    src = shape_of(op.operands[0], "input")
    res = shape_of(op.results[0], "result")
    perm = i64_array(op, "permutation")
    require(sorted(perm) == list(range(len(src))),
            f"permutation {perm} is not a permutation of {len(src)} dims")
    require(res == [src[p] for p in perm],
            f"result shape {res} is not the input shape {src} permuted by {perm}")
    _same_element_type(op, op.operands[0], op.results[0], "result")


class TransposeOp(Trn.Operation, name="transpose", traits=[ext.Pure]):
    """result = permute(input, permutation); result dim i is input dim permutation[i]."""
    input: ext.Operand[ir.RankedTensorType]
    permutation: AnyAttr
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_transpose)


def _check_broadcast(op) -> None:
    src = shape_of(op.operands[0], "input")
    res = shape_of(op.results[0], "result")
    dims = i64_array(op, "dimensions")
    require(dims == sorted(set(dims)) and all(0 <= d < len(res) for d in dims),
            f"dimensions {dims} must be sorted, unique result dims")
    kept = [s for i, s in enumerate(res) if i not in dims]
    require(kept == src, f"input shape {src} is not result shape {res} without dims {dims}")
    _same_element_type(op, op.operands[0], op.results[0], "result")


class BroadcastOp(Trn.Operation, name="broadcast", traits=[ext.Pure]):
    """result = input repeated along the result dims listed in `dimensions`."""
    input: ext.Operand[ir.RankedTensorType]
    dimensions: AnyAttr
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_broadcast)


def _check_reshape(op) -> None:
    src = shape_of(op.operands[0], "input")
    res = shape_of(op.results[0], "result")
    require(math.prod(src) == math.prod(res),
            f"cannot reshape {src} ({math.prod(src)} elements) to {res} "
            f"({math.prod(res)} elements)")
    _same_element_type(op, op.operands[0], op.results[0], "result")


class ReshapeOp(Trn.Operation, name="reshape", traits=[ext.Pure]):
    """result = input with a new shape (row-major order, same element count)."""
    input: ext.Operand[ir.RankedTensorType]
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_reshape)


def affine_coefficients(expr, n_dims: int) -> tuple[int, list[int]] | None:
    """(constant, coefficient per dim) of an affine expression in d0..d{n-1}, or None if it
    is not affine (floordiv, mod, symbols)."""
    if isinstance(expr, ir.AffineConstantExpr):
        return expr.value, [0] * n_dims
    if isinstance(expr, ir.AffineDimExpr):
        coeff = [0] * n_dims
        coeff[expr.position] = 1
        return 0, coeff
    if isinstance(expr, ir.AffineAddExpr):
        a, b = affine_coefficients(expr.lhs, n_dims), affine_coefficients(expr.rhs, n_dims)
        if a is None or b is None:
            return None
        return a[0] + b[0], [x + y for x, y in zip(a[1], b[1])]
    if isinstance(expr, ir.AffineMulExpr):
        a, b = affine_coefficients(expr.lhs, n_dims), affine_coefficients(expr.rhs, n_dims)
        if a is None or b is None:
            return None
        if any(a[1]) and any(b[1]):
            return None
        if any(a[1]):
            a, b = b, a
        return a[0] * b[0], [a[0] * x for x in b[1]]
    return None


def affine_view_coefficients(op) -> list[tuple[int, list[int]]]:
    """Per source dim: (constant, coefficients over result dims) of a trn.view's map."""
    amap = ir.AffineMapAttr(op.attributes["indexing_map"]).value
    coeffs = [affine_coefficients(e, amap.n_dims) for e in amap.results]
    if any(c is None for c in coeffs):
        raise VerifyError(f"indexing_map {amap} is not affine")
    return coeffs


def _check_view(op) -> None:
    src = shape_of(op.operands[0], "input")
    res = shape_of(op.results[0], "result")
    try:
        amap = ir.AffineMapAttr(op.attributes["indexing_map"]).value
    except (KeyError, ValueError, TypeError):
        raise VerifyError("requires an 'indexing_map' affine map attribute") from None
    require(amap.n_dims == len(res) and len(amap.results) == len(src) and amap.n_symbols == 0,
            f"indexing_map {amap} must map the {len(res)} result dims to the {len(src)} "
            "input dims")
    if 0 in res:
        return
    for k, (c, coeff) in enumerate(affine_view_coefficients(op)):
        lo = c + sum(min(0, a * (n - 1)) for a, n in zip(coeff, res))
        hi = c + sum(max(0, a * (n - 1)) for a, n in zip(coeff, res))
        require(0 <= lo and hi < src[k],
                f"indexing_map {amap} reaches [{lo}, {hi}] along input dim {k} of size {src[k]}")
    _same_element_type(op, op.operands[0], op.results[0], "result")


class ViewOp(Trn.Operation, name="view", traits=[ext.Pure]):
    """result[i] = input[indexing_map(i)] for an affine map (slices, strides, flips)."""
    input: ext.Operand[ir.RankedTensorType]
    indexing_map: ir.AffineMapAttr
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_view)


def _check_empty(op) -> None:
    shape_of(op.results[0], "result")


class EmptyOp(Trn.Operation, name="empty", traits=[ext.Pure]):
    """A tensor whose elements are all to be written before they are read (a destination)."""
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_empty)


def _check_insert_slice(op) -> None:
    dest = shape_of(op.operands[0], "dest")
    src = shape_of(op.operands[1], "source")
    res = shape_of(op.results[0], "result")
    require(res == dest, f"result shape {res} differs from dest shape {dest}")
    offsets = i64_array(op, "offsets")
    strides = i64_array(op, "strides")
    require(len(offsets) == len(strides) == len(dest) == len(src),
            "offsets, strides, source and dest must have the dest's rank")
    for k, (o, st, n, d) in enumerate(zip(offsets, strides, src, dest)):
        require(st >= 1 and o >= 0 and (n == 0 or o + st * (n - 1) < d),
                f"slice along dim {k} (offset {o}, stride {st}, size {n}) leaves the dest "
                f"(size {d})")
    _same_element_type(op, op.operands[0], op.operands[1], "source")


class InsertSliceOp(Trn.Operation, name="insert_slice", traits=[ext.Pure]):
    """result = dest with the strided slice at `offsets`/`strides` replaced by source."""
    dest: ext.Operand[ir.RankedTensorType]
    source: ext.Operand[ir.RankedTensorType]
    offsets: AnyAttr
    strides: AnyAttr
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_insert_slice)


def _check_gather(op) -> None:
    shape_of(op.operands[0], "source")
    index = shape_of(op.operands[1], "index")
    res = shape_of(op.results[0], "result")
    free_strides = i64_array(op, "free_strides")
    require(res[:len(index)] == index and len(res) == len(index) + len(free_strides),
            f"result shape {res} must be the index shape {index} followed by "
            f"{len(free_strides)} free dims")
    require(isinstance(tensor_type(op.operands[1], "index").element_type, ir.IntegerType),
            "index must be a tensor of integers")
    int_value(op, "offset")
    require(int_value(op, "row_stride") >= 1, "row_stride must be positive")
    _same_element_type(op, op.operands[0], op.results[0], "result")


class GatherOp(Trn.Operation, name="gather", traits=[ext.Pure]):
    """result[r, f] = source_flat[offset + index[r] * row_stride + sum_k f_k * free_strides_k]
    over the source's row-major elements: rows chosen by data (embedding, index_select,
    gather), each read with a static pattern."""
    source: ext.Operand[ir.RankedTensorType]
    index: ext.Operand[ir.RankedTensorType]
    offset: ir.IntegerAttr
    row_stride: ir.IntegerAttr
    free_strides: AnyAttr
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_gather)


def _window_attrs(op, spatial: int) -> tuple[list[int], list[int]]:
    strides, dilations = i64_array(op, "strides"), i64_array(op, "dilations")
    require(len(strides) == len(dilations) == spatial and min(strides + dilations) >= 1,
            f"strides {strides} and dilations {dilations} need {spatial} positive entries")
    return strides, dilations


def _out_size(n: int, k: int, stride: int, dilation: int) -> int:
    return (n - dilation * (k - 1) - 1) // stride + 1


def _require_windows_fit(result: list[int], most: list[int]) -> None:
    """Leading dims as expected, and no more windows per spatial dim than the input holds.
    As in linalg, the input may hold more than the windows read (a ceil-mode pool pads the
    input for a last window that its output size then leaves out)."""
    require(len(result) == len(most) and result[:2] == most[:2],
            f"result shape {result} differs from {most}")
    require(all(r <= m for r, m in zip(result[2:], most[2:])),
            f"result shape {result} needs more windows than the input holds ({most})")


def _check_conv(op) -> None:
    x = shape_of(op.operands[0], "input")
    w = shape_of(op.operands[1], "filter")
    res = shape_of(op.results[0], "result")
    spatial = len(x) - 2
    require(1 <= spatial <= 3 and len(w) == len(x) == len(res),
            f"expects input [N, C, spatial...] with 1-3 spatial dims, filter [F, C/groups, "
            f"kernel...] and result of the same rank, got {x}, {w} -> {res}")
    strides, dilations = _window_attrs(op, spatial)
    groups = int_value(op, "groups")
    require(groups >= 1 and x[1] % groups == 0 and w[0] % groups == 0
            and w[1] * groups == x[1],
            f"channels: input {x[1]}, filter {w[0]}x{w[1]} do not split into {groups} groups")
    expected = [x[0], w[0]] + [_out_size(n, k, s, d) for n, k, s, d in
                               zip(x[2:], w[2:], strides, dilations)]
    _require_windows_fit(res, expected)


class ConvOp(Trn.Operation, name="conv", traits=[ext.Pure]):
    """result[n, f, o...] = sum_{c, k...} input[n, g*C + c, o*stride + k*dilation]
    * filter[f, c, k...] with g = f / (F / groups): an unpadded, grouped convolution."""
    input: ext.Operand[ir.RankedTensorType]
    filter: ext.Operand[ir.RankedTensorType]
    strides: AnyAttr
    dilations: AnyAttr
    groups: ir.IntegerAttr
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_conv)


def _check_pool(op) -> None:
    x = shape_of(op.operands[0], "input")
    res = shape_of(op.results[0], "result")
    spatial = len(x) - 2
    window = i64_array(op, "window")
    strides, dilations = _window_attrs(op, spatial)
    require(1 <= spatial <= 3 and len(window) == spatial,
            f"expects input [N, C, spatial...] and a window per spatial dim, got {x}, {window}")
    require(string(op, "op") in ("max", "add"), "op must be max or add")
    expected = x[:2] + [_out_size(n, k, s, d) for n, k, s, d in
                        zip(x[2:], window, strides, dilations)]
    _require_windows_fit(res, expected)


class PoolOp(Trn.Operation, name="pool", traits=[ext.Pure]):
    """result[n, c, o...] = max (or sum) over the window of input[n, c, o*stride +
    k*dilation]."""
    input: ext.Operand[ir.RankedTensorType]
    op: ir.StringAttr
    window: AnyAttr
    strides: AnyAttr
    dilations: AnyAttr
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_pool)


def _check_scan(op) -> None:
    shape = _check_same_shape(op)
    dim = int_value(op, "dimension")
    require(0 <= dim < len(shape), f"dimension {dim} is not a dim of {shape}")
    require(string(op, "op") in SCAN_OPS, f"op must be one of {', '.join(SCAN_OPS)}")


SCAN_OPS = ("add", "mul", "max", "min", "logaddexp")


class ScanOp(Trn.Operation, name="scan", traits=[ext.Pure]):
    """Inclusive scan along `dimension`: result[..., i, ...] = input[..., 0, ...] <op> ...
    <op> input[..., i, ...] (cumsum, cumprod, cummax, cummin; logaddexp(a, b) = log(e^a + e^b)
    for logcumsumexp)."""
    input: ext.Operand[ir.RankedTensorType]
    op: ir.StringAttr
    dimension: ir.IntegerAttr
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_scan)


def _check_same_shape(op, operand_indices=(0,)) -> list[int]:
    res = shape_of(op.results[0], "result")
    for i in operand_indices:
        shape = shape_of(op.operands[i], f"operand #{i}")
        require(shape == res, f"operand #{i} shape {shape} differs from result shape {res}")
    return res


def _check_convert(op) -> None:
    _check_same_shape(op)


class ConvertOp(Trn.Operation, name="convert", traits=[ext.Pure]):
    """result = input converted to the result's element type (round to nearest even)."""
    input: ext.Operand[ir.RankedTensorType]
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_convert)


def _check_activation(op) -> None:
    _check_same_shape(op)
    func = string(op, "func")
    require(func in ACTIVATION_FUNCS,
            f"unknown activation function '{func}'; expected one of {', '.join(ACTIVATION_FUNCS)}")
    float_value(op, "scale")
    float_value(op, "bias")


class ActivationOp(Trn.Operation, name="activation", traits=[ext.Pure]):
    """result = func(input * scale + bias), one scalar-engine function from its table."""
    input: ext.Operand[ir.RankedTensorType]
    func: ir.StringAttr
    scale: ir.FloatAttr
    bias: ir.FloatAttr
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_activation)


def _check_alu(op, name: str) -> None:
    alu = string(op, name)
    require(alu in ALU_OPS, f"unknown ALU operation '{alu}'; expected one of {', '.join(ALU_OPS)}")


def _check_tensor_tensor(op) -> None:
    _check_same_shape(op, (0, 1))
    _check_alu(op, "op")


class TensorTensorOp(Trn.Operation, name="tensor_tensor", traits=[ext.Pure]):
    """result = lhs <op> rhs elementwise (operands of the result's shape)."""
    lhs: ext.Operand[ir.RankedTensorType]
    rhs: ext.Operand[ir.RankedTensorType]
    op: ir.StringAttr
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_tensor_tensor)


def _check_tensor_scalar(op) -> None:
    _check_same_shape(op)
    _check_alu(op, "op")
    float_value(op, "scalar")
    try:
        ir.BoolAttr(op.attributes["reverse"])
    except (KeyError, ValueError, TypeError):
        raise VerifyError("attribute 'reverse' must be a boolean") from None


class TensorScalarOp(Trn.Operation, name="tensor_scalar", traits=[ext.Pure]):
    """result = input <op> scalar, or scalar <op> input when `reverse` is true."""
    input: ext.Operand[ir.RankedTensorType]
    op: ir.StringAttr
    scalar: ir.FloatAttr
    reverse: ir.IntegerAttr
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_tensor_scalar)


def _check_select(op) -> None:
    _check_same_shape(op, (0, 1, 2))


class SelectOp(Trn.Operation, name="select", traits=[ext.Pure]):
    """result = on_true where mask != 0 else on_false."""
    mask: ext.Operand[ir.RankedTensorType]
    on_true: ext.Operand[ir.RankedTensorType]
    on_false: ext.Operand[ir.RankedTensorType]
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_select)


def _check_fill(op) -> None:
    shape_of(op.results[0], "result")
    float_value(op, "value")


class FillOp(Trn.Operation, name="fill", traits=[ext.Pure]):
    """result = a tensor with every element equal to `value`."""
    value: ir.FloatAttr
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_fill)


def _check_iota(op) -> None:
    shape = shape_of(op.results[0], "result")
    dim = int_value(op, "dimension")
    require(0 <= dim < len(shape), f"dimension {dim} is not a dim of the result {shape}")


class IotaOp(Trn.Operation, name="iota", traits=[ext.Pure]):
    """result[i_0, ..., i_n] = i_dimension (the index along one dim)."""
    dimension: ir.IntegerAttr
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_iota)


def _check_reduce(op) -> None:
    src = shape_of(op.operands[0], "input")
    res = shape_of(op.results[0], "result")
    dims = i64_array(op, "dimensions")
    require(dims == sorted(set(dims)) and all(0 <= d < len(src) for d in dims),
            f"dimensions {dims} must be sorted, unique input dims")
    kept = [s for i, s in enumerate(src) if i not in dims]
    require(kept == res, f"result shape {res} is not input shape {src} without dims {dims}")
    kind = string(op, "op")
    require(kind in REDUCE_OPS, f"unknown reduction '{kind}'; expected one of {', '.join(REDUCE_OPS)}")


class ReduceOp(Trn.Operation, name="reduce", traits=[ext.Pure]):
    """result = reduction of input with `op` over `dimensions` (which are removed)."""
    input: ext.Operand[ir.RankedTensorType]
    op: ir.StringAttr
    dimensions: AnyAttr
    result: ext.Result[ir.RankedTensorType]
    verify_invariants = verifier(_check_reduce)


def _check_kernel(op) -> None:
    require(len(op.regions) == 1 and len(op.regions[0].blocks) == 1,
            "expects one region with one block")
    block = op.regions[0].blocks[0]
    require(len(block.arguments) == 0, "body block takes no arguments")
    ops = list(block.operations)
    require(ops and ops[-1].name == "trn.yield", "body must end with trn.yield")
    yielded = list(ops[-1].operands)
    require(len(yielded) == len(op.results),
            f"yields {len(yielded)} value(s) but the kernel has {len(op.results)} result(s)")
    for value, result in zip(yielded, op.results):
        require(value.type == result.type,
                f"yields {value.type} but the kernel returns {result.type}")
    attributes = ops[-1].attributes
    groups = list(ir.DenseI32ArrayAttr(op.attributes[RESULT_GROUPS]))
    yield_groups = list(ir.DenseI32ArrayAttr(attributes[YIELD_GROUPS])) \
        if YIELD_GROUPS in attributes else None
    require(groups == yield_groups,
            f"yields groups of {yield_groups} value(s) but the kernel's results come in "
            f"groups of {groups}")
    for inner in ops[:-1]:
        require(inner.name.startswith("trn.") and inner.name != "trn.kernel",
                f"body may hold only trn ops other than kernels, found '{inner.name}'")


class KernelOp(Trn.Operation, name="kernel"):
    """A fused kernel: its body's trn ops, which read values defined above, are lowered
    together so intermediates stay on chip; `trn.yield` names the kernel's results: its last
    value, and optionally values it computes on the way that are also needed outside (a
    matmul's biased output, saved for the backward, besides the activation of it; a layer
    norm's per-row mean and 1/std).

    (IRDL binds one type to all elements of a variadic operand or result, so a kernel cannot
    list inputs of different types as operands; like gpu.launch it captures them from above
    instead. For the same reason its results come in groups: the first result, of its own
    type; `also`, results of one type; `extra`, results of one other type (a norm's per-row
    statistics beside the [B, S, d] values of `also`). `resultSegmentSizes` says how many
    each group holds, and the trn.yield's `operandSegmentSizes` the same.)"""
    kind: ir.StringAttr
    result: ext.Result[ir.RankedTensorType]
    also: Sequence[ext.Result[ir.RankedTensorType]]
    extra: Sequence[ext.Result[ir.RankedTensorType]]
    body: ext.Region
    verify_invariants = verifier(_check_kernel)


class YieldOp(Trn.Operation, name="yield", traits=[ir.IsTerminatorTrait]):
    """Terminates a trn.kernel body, naming the kernel's results, in its groups."""
    value: ext.Operand[ir.RankedTensorType]
    also: Sequence[ext.Operand[ir.RankedTensorType]]
    extra: Sequence[ext.Operand[ir.RankedTensorType]]


# The attributes that say how many values each group of a kernel's results (and of its
# yield's operands) holds: the first, `also`, `extra`.
RESULT_GROUPS = "resultSegmentSizes"
YIELD_GROUPS = "operandSegmentSizes"


def result_groups(types: list[ir.Type]) -> list[int]:
    """[1, len(also), len(extra)] for a kernel whose results have `types` (at least one):
    after the first, a run of one type, then a run of one other type. ValueError for any
    other order of types."""
    rest = types[1:]
    also = next((i for i, t in enumerate(rest) if t != rest[0]), len(rest))
    extra = rest[also:]
    if any(t != extra[0] for t in extra):
        raise ValueError("a kernel's results after the first are a run of one type and then "
                         f"a run of one other type, not {', '.join(map(str, rest))}")
    return [1, also, len(extra)]


def build_kernel(kind: str, result_types: ir.Type | list[ir.Type],
                 loc: ir.Location | None = None) -> ir.Operation:
    """Create an empty `trn.kernel` with one empty block at the current insertion point;
    `result_types`: its result's type, or the types of its results (after the first, a run
    of one type and then a run of another: `result_groups`)."""
    types = result_types if isinstance(result_types, list) else [result_types]
    op = ir.Operation.create("trn.kernel", results=types,
                             attributes={"kind": ir.StringAttr.get(kind),
                                         RESULT_GROUPS: ir.DenseI32ArrayAttr.get(
                                             result_groups(types))},
                             regions=1, loc=loc)
    op.regions[0].blocks.append()
    return op


def build_yield(values: ir.Value | list[ir.Value], loc: ir.Location | None = None) -> ir.Operation:
    values = values if isinstance(values, list) else [values]
    groups = result_groups([v.type for v in values])
    return ir.Operation.create("trn.yield", operands=values,
                               attributes={YIELD_GROUPS: ir.DenseI32ArrayAttr.get(groups)},
                               loc=loc)
