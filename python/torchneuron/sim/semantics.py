"""Reference semantics of every opcode (format/isa.py's docstring, executed with numpy).

One function per opcode, `fn(ins, machine)`, vectorised: an operand is read as one strided
numpy view of its memory, computed on as a whole array, written back as one view.

Numerics (what the chip does, and where the simulator chooses):
- ACT, DVE and POOL compute in fp32: inputs are converted to float32 on read, each ALU step
  rounds to fp32, and the result is converted on write (`convert`): to a float dtype with
  round-to-nearest-even (fp8 overflow follows ml_dtypes: NaN for e4m3fn, inf for e5m2); to an
  integer dtype round-to-nearest-even, saturating, NaN -> 0.
- Activation functions are evaluated in float64 with formulas free of cancellation, then
  rounded once to fp32, on `src * scale + bias` computed in fp32 (a multiply and an add, each
  rounded). Every function is within 2 ulp of the correctly rounded fp32 result over the whole
  fp32 range (tested: sin/cos with exact range reduction up to 3.4e38, exp up to overflow,
  log/sqrt/rsqrt/reciprocal over every decade including subnormal inputs); NaN and inf
  results are exact (log(0) = -inf, log/sqrt/rsqrt of x < 0 = NaN, 1/+-0 = +-inf).
  Deviation from the chip: the ACT engine evaluates functions by tables and polynomials with
  errors of its own, and may flush subnormals; the simulator models neither (it is more
  accurate than the chip, never less). gelu is the erf form 0.5 x (1 + erf(x / sqrt 2)),
  evaluated as x * Phi(x) (scipy's ndtr, free of erf's cancellation for x << 0); gelu_tanh
  the tanh approximation 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), evaluated
  as x * sigmoid(2u); gelu_dx GELU's derivative Phi(x) + x phi(x) (phi the standard normal
  density; both terms positive for x > 0 and of different magnitudes for x << 0, so no
  cancellation beyond float64's at its root near -0.75); softplus log(1 + e^x) computed
  stably; sign(0) = 0.
  The optional accum operand receives the fp32 sum of the fp32 results (before the output
  conversion).
- ALU ops: comparisons give 1.0/0.0; and/or/xor act on the operands converted to int64
  (round-to-nearest-even) and give the integer result as fp32; mod is C's fmod (the result
  takes the dividend's sign); bypass returns its first operand (after FLAG_REVERSE0/1 swap);
  division by zero and the like follow IEEE-754 (inf/NaN, no error).
- tensor_reduce reduces in fp32 (numpy's pairwise summation for add).
- MATMUL converts both inputs to fp32 (exact for every PE input dtype), multiplies with an fp32
  matmul and adds into PSUM in fp32. Two bf16 inputs go to the host's bf16 GEMM instead
  (sim/host_gemm.py) where no subnormal can arise: the same sums of exact products, in that
  library's summation order (which, like the fp32 BLAS's, is not the PE's).
- TRANSPOSE passes values exactly (a same-dtype copy, or a widening to fp32).
- IOTA evaluates imm[0] + imm[1]*p + imm[2]*i in float64 before the output conversion, so
  integer index vectors are exact (beyond fp32's 2^24).
- DMA converts directly from the source dtype to the destination dtype (no fp32 detour);
  same-dtype DMAs copy bits exactly.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from torchneuron.format import isa
from torchneuron.sim import host_gemm
from torchneuron.sim.errors import IndexOutOfRangeError, UninitializedReadError
from torchneuron.sim.memory import Access, Hbm, Store
from torchneuron.target import Target

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
Op = isa.Opcode
Alu = isa.AluOp
Act = isa.ActFunc


class Machine:
    """The state the semantics act on: SBUF, PSUM and HBM of one core."""

    def __init__(self, target: Target, hbm: Hbm, onchip: tuple[Store, Store] | None = None):
        if onchip is None:
            onchip = (Store.onchip(isa.Memory.SBUF, target.num_partitions,
                                   target.sbuf_partition_bytes),
                      Store.onchip(isa.Memory.PSUM, target.num_partitions,
                                   target.psum_partition_bytes))
        sbuf, psum = onchip
        self.stores = {isa.Memory.HBM: hbm, isa.Memory.SBUF: sbuf, isa.Memory.PSUM: psum}
        # ids of (prepared, long-lived) accesses known to be fully written. Memory is never
        # "unwritten" again, so such an access needs no further mask checks or updates.
        self._written: set[int] = set()

    def read(self, ins, a: Access) -> np.ndarray:
        """A view of operand `a` in its storage dtype; raises if any element is unwritten."""
        store = self.stores[a.memory]
        if id(a) not in self._written:
            missing = store.unwritten_elements(a)
            if missing:
                total = a.partitions * a.free_size
                raise ins.error(f"{a.describe()} reads {missing} of {total} elements that "
                                "were never written", UninitializedReadError)
            self._written.add(id(a))
        return store.view(a)

    def read_f32(self, ins, a: Access) -> np.ndarray:
        """Operand `a` as float32 [partitions, free elements]. For fp32 storage this may be
        a view of the memory itself (no copy): callers never modify it in place."""
        values = self.read(ins, a)
        if values.dtype != F32:
            # Gathered contiguously first: the conversion then streams through memory
            # instead of striding a partition apart row by row.
            values = np.ascontiguousarray(values).astype(F32)
        return values.reshape(a.partitions, a.free_size)

    def write(self, a: Access, values: np.ndarray) -> None:
        """Convert `values` to a's dtype and store them (row-major element order)."""
        store = self.stores[a.memory]
        store.store(a, convert(values, a.dtype))
        if id(a) not in self._written:
            store.mark_written(a)
            self._written.add(id(a))


def _int_bounds(dtype: np.dtype) -> tuple[int, int, float, float]:
    """Integer range of `dtype`, and the float64 range that converts to it without
    overflow."""
    info = np.iinfo(dtype)
    hi = float(info.max)
    if int(hi) > info.max:       # int64: 2**63 - 1 rounds up in float64
        hi = float(np.nextafter(hi, 0.0))
    return int(info.min), int(info.max), float(info.min), hi


_INT_BOUNDS = {dt.numpy(): _int_bounds(dt.numpy()) for dt in isa.DType if not dt.is_float}


def convert(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The chip's conversion on write: floats round-to-nearest-even; integers round to
    nearest-even and saturate (NaN -> 0)."""
    values = np.asarray(values)
    if values.dtype == dtype:
        return values
    if dtype.kind in "iu":
        ilo, ihi, flo, fhi = _INT_BOUNDS[dtype]
        if values.dtype.kind in "iu":
            return np.clip(values.astype(np.int64), ilo, ihi).astype(dtype)
        v = np.nan_to_num(np.rint(values.astype(F64)), nan=0.0, posinf=fhi, neginf=flo)
        return np.clip(v, flo, fhi).astype(dtype)
    return values.astype(dtype)


def _to_int(x: np.ndarray) -> np.ndarray:
    return convert(x, np.dtype(np.int64))


def _bitwise(fn):
    return lambda a, b: fn(_to_int(a), _to_int(b)).astype(F32)


def _compare(fn):
    return lambda a, b: fn(a, b).astype(F32)


def _bypass(a, b):
    return np.broadcast_to(a, np.broadcast_shapes(np.shape(a), np.shape(b)))


ALU: dict[isa.AluOp, object] = {
    Alu.BYPASS: _bypass,
    Alu.ADD: np.add,
    Alu.SUB: np.subtract,
    Alu.MUL: np.multiply,
    Alu.DIV: np.divide,
    Alu.MAX: np.maximum,
    Alu.MIN: np.minimum,
    Alu.POW: np.power,
    Alu.EQ: _compare(np.equal),
    Alu.NE: _compare(np.not_equal),
    Alu.LT: _compare(np.less),
    Alu.LE: _compare(np.less_equal),
    Alu.GT: _compare(np.greater),
    Alu.GE: _compare(np.greater_equal),
    Alu.AND: _bitwise(np.bitwise_and),
    Alu.OR: _bitwise(np.bitwise_or),
    Alu.XOR: _bitwise(np.bitwise_xor),
    Alu.MOD: np.fmod,
}

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _x_phi(x: np.ndarray) -> np.ndarray:
    """x times the standard normal density: 0 where |x| is so large that it underflows (so
    +-inf give 0, not inf * 0)."""
    finite = np.where(np.abs(x) < 1e3, x, 0.0)
    return finite * np.exp(-0.5 * finite * finite) * _INV_SQRT_2PI

# Activation functions on float64 arrays.
ACTIVATIONS: dict[isa.ActFunc, object] = {
    Act.IDENTITY: lambda x: x,
    Act.RELU: lambda x: np.maximum(x, 0.0),
    Act.GELU: lambda x: x * special.ndtr(x),     # x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
    # 0.5 x (1 + tanh(u)) = x * sigmoid(2u): the same function without the cancellation of
    # 1 + tanh(u) for u << 0 (which gave 0 instead of e.g. -2.3e-16 at x = -7.19).
    Act.GELU_TANH: lambda x: x * special.expit(2.0 * _SQRT_2_OVER_PI
                                               * (x + 0.044715 * x * x * x)),
    Act.SILU: lambda x: x * special.expit(x),
    Act.SIGMOID: special.expit,
    Act.TANH: np.tanh,
    Act.EXP: np.exp,
    Act.LOG: np.log,
    Act.SQRT: np.sqrt,
    Act.RSQRT: lambda x: 1.0 / np.sqrt(x),
    Act.RECIPROCAL: lambda x: 1.0 / x,
    Act.SQUARE: np.square,
    Act.ABS: np.abs,
    Act.SIGN: np.sign,
    Act.ERF: special.erf,
    Act.SOFTPLUS: lambda x: np.logaddexp(0.0, x),
    Act.SIN: np.sin,
    Act.COS: np.cos,
    Act.ARCTAN: np.arctan,
    Act.GELU_DX: lambda x: special.ndtr(x) + _x_phi(x),
}


# Functions whose fp32 evaluation is the float64 evaluation rounded once to fp32 (exact
# results, or one correctly rounded multiply): evaluated in fp32 directly, a third as fast.
EXACT_IN_FP32 = frozenset({Act.IDENTITY, Act.RELU, Act.SQUARE, Act.ABS, Act.SIGN})


def _scalar(m: Machine, ins, a: Access | None, imm: float) -> np.ndarray:
    """A per-partition [P, 1] operand, or the immediate when the slot is empty."""
    return np.float32(imm) if a is None else m.read_f32(ins, a)


def op_nop(ins, m: Machine) -> None:
    pass


def op_dma(ins, m: Machine) -> None:
    dst, src = ins.ops[0], ins.ops[1]
    if ins.flags & isa.FLAG_INDIRECT:
        _dma_indirect(ins, m, dst, src, ins.ops[2])
        return
    m.write(dst, m.read(ins, src))


def _dma_indirect(ins, m: Machine, dst: Access, src: Access, index: Access) -> None:
    """Rows of HBM chosen by the index: row p starts `index[p]` partition strides into the
    pattern. Every row is bounds-checked before any byte moves."""
    rows = src if src.memory == isa.Memory.HBM else dst
    hbm = m.stores[isa.Memory.HBM]
    idx = m.read(ins, index).reshape(-1).astype(np.int64)
    itemsize = rows.dtype.itemsize
    # Byte address of every element: row base + free pattern.
    free = np.zeros((), dtype=np.int64)
    for n, st in zip(rows.shape[1:], rows.strides[1:]):
        free = np.add.outer(free, np.arange(n, dtype=np.int64) * st)
    addresses = (rows.offset + idx * rows.strides[0])[:, None] + free.reshape(1, -1)
    base = hbm.layout.bases[rows.tensor]
    limit = base + hbm.tensors[rows.tensor].num_elements * itemsize
    bad = np.nonzero((addresses.min(axis=1) < base) | (addresses.max(axis=1) + itemsize > limit))[0]
    if bad.size:
        p = int(bad[0])
        what = f"the index of partition {p} failed the program's bounds check and" \
            if idx[p] == isa.INDEX_OUT_OF_RANGE else f"index {int(idx[p])} of partition {p}"
        raise ins.error(f"{index.describe()}: {what} takes a row outside tensor "
                        f"{hbm.tensors[rows.tensor].name!r}", IndexOutOfRangeError)
    flat = hbm.data.view(np.uint8)
    element_bytes = addresses[..., None] + np.arange(itemsize, dtype=np.int64)
    if rows is src:
        if not np.all(hbm.written[element_bytes] == 0xFF):
            raise ins.error(f"{src.describe()} reads rows that were never written",
                            UninitializedReadError)
        raw = flat[element_bytes].reshape(-1).view(src.dtype).reshape(src.partitions, -1)
        m.write(dst, raw)
    else:
        values = convert(m.read(ins, src).reshape(dst.partitions, -1), dst.dtype)
        flat[element_bytes] = values.view(np.uint8).reshape(element_bytes.shape)
        hbm.written[element_bytes] = 0xFF


def op_matmul(ins, m: Machine) -> None:
    dst, st, mv = ins.ops[0], ins.ops[1], ins.ops[2]
    product = None
    gemm = host_gemm.for_operands(st.dtype, mv.dtype)
    if gemm is not None:
        product = np.empty((dst.partitions, dst.free_size), F32)
        if not gemm.product(m.read(ins, st).reshape(st.partitions, st.free_size),
                            m.read(ins, mv).reshape(mv.partitions, mv.free_size), product):
            product = None
    if product is None:
        # Operands straight from their memory: the BLAS packs them anyway, and partitions'
        # rows do not alias in the host's caches (memory.host_row_bytes).
        stationary = m.read_f32(ins, st)                 # [K, M]
        moving = m.read_f32(ins, mv)                     # [K, N]
        product = np.matmul(stationary.T, moving)        # fp32 [M, N]
    if ins.flags & isa.FLAG_ACCUMULATE:
        product += m.read_f32(ins, dst)          # (fp32 addition commutes exactly)
    m.write(dst, product)


def op_transpose(ins, m: Machine) -> None:
    dst, src = ins.ops[0], ins.ops[1]
    # Straight from the memory: a contiguous copy first would be a block whose rows are a
    # power of two apart, which the transposing reads walk far slower than partitions' rows
    # (memory.host_row_bytes).
    m.write(dst, m.read(ins, src).reshape(src.partitions, src.free_size).T)


def op_activate(ins, m: Machine) -> None:
    dst, src, bias, scale, accum = ins.ops
    x = m.read_f32(ins, src) * _scalar(m, ins, scale, ins.imm[0])
    if bias is not None:
        x += m.read_f32(ins, bias)
    if ins.func in EXACT_IN_FP32:
        y = ACTIVATIONS[ins.func](x)
    else:
        y = ACTIVATIONS[ins.func](x.astype(F64)).astype(F32)
    m.write(dst, y)
    if accum is not None:
        m.write(accum, y.sum(axis=1, dtype=F32, keepdims=True))


def op_tensor_tensor(ins, m: Machine) -> None:
    dst, a, b = ins.ops[0], ins.ops[1], ins.ops[2]
    m.write(dst, ALU[ins.alu0](m.read_f32(ins, a), m.read_f32(ins, b)))


def _with_scalar(alu: Alu, x: np.ndarray, v, reverse: bool) -> np.ndarray:
    """x <alu> v, or v <alu> x when `reverse` (a FLAG_REVERSE0/1 operand order)."""
    return ALU[alu](v, x) if reverse else ALU[alu](x, v)


def op_tensor_scalar(ins, m: Machine) -> None:
    dst, src, s0, s1 = ins.ops[0], ins.ops[1], ins.ops[2], ins.ops[3]
    y = _with_scalar(ins.alu0, m.read_f32(ins, src), _scalar(m, ins, s0, ins.imm[0]),
                     bool(ins.flags & isa.FLAG_REVERSE0))
    if ins.alu1 != Alu.BYPASS:
        y = _with_scalar(ins.alu1, y, _scalar(m, ins, s1, ins.imm[1]),
                         bool(ins.flags & isa.FLAG_REVERSE1))
    m.write(dst, y)


_REDUCE = {
    Alu.ADD: lambda x, axes: np.add.reduce(x, axis=axes, dtype=F32),
    Alu.MUL: lambda x, axes: np.multiply.reduce(x, axis=axes, dtype=F32),
    Alu.MAX: lambda x, axes: np.max(x, axis=axes),
    Alu.MIN: lambda x, axes: np.min(x, axis=axes),
    Alu.AND: lambda x, axes: np.bitwise_and.reduce(_to_int(x), axis=axes).astype(F32),
    Alu.OR: lambda x, axes: np.bitwise_or.reduce(_to_int(x), axis=axes).astype(F32),
    Alu.XOR: lambda x, axes: np.bitwise_xor.reduce(_to_int(x), axis=axes).astype(F32),
}


def op_tensor_reduce(ins, m: Machine) -> None:
    dst, src = ins.ops[0], ins.ops[1]
    x = m.read(ins, src).astype(F32)
    ndim = x.ndim
    axes = tuple(range(ndim - ins.reduce_dims, ndim))
    m.write(dst, _REDUCE[ins.alu0](x, axes))


def op_tensor_scalar_reduce(ins, m: Machine) -> None:
    dst, src, s0, reduced = ins.ops[0], ins.ops[1], ins.ops[2], ins.ops[3]
    m.write(dst, _with_scalar(ins.alu0, m.read_f32(ins, src), _scalar(m, ins, s0, ins.imm[0]),
                              bool(ins.flags & isa.FLAG_REVERSE0)))
    # Reduced as written: the values dst holds, in fp32.
    written = m.read_f32(ins, dst).reshape(dst.partitions, -1)
    r = _REDUCE[ins.alu1](written, (1,)).reshape(dst.partitions, 1)
    m.write(reduced, -r if ins.flags & isa.FLAG_NEGATE else r)


def op_tensor_copy(ins, m: Machine) -> None:
    m.write(ins.ops[0], m.read_f32(ins, ins.ops[1]))


def op_memset(ins, m: Machine) -> None:
    dst = ins.ops[0]
    m.write(dst, np.full(dst.shape, ins.imm[0], dtype=F32))


def op_iota(ins, m: Machine) -> None:
    dst = ins.ops[0]
    p = np.arange(dst.partitions, dtype=F64)[:, None]
    i = np.arange(dst.free_size, dtype=F64)[None, :]
    m.write(dst, ins.imm[0] + ins.imm[1] * p + ins.imm[2] * i)


def op_select(ins, m: Machine) -> None:
    """dst = a where mask else b. Integer values are moved as they are (a predicated copy,
    bit for bit, as the engines copy integer data); any other operands go through fp32."""
    dst, mask, a, b = ins.ops[0], ins.ops[1], ins.ops[2], ins.ops[3]
    take = m.read_f32(ins, mask) != 0
    if all(not x.isa_dtype.is_float for x in (dst, a, b)):
        shape = (dst.partitions, dst.free_size)
        m.write(dst, np.where(take, m.read(ins, a).reshape(shape),
                              m.read(ins, b).reshape(shape)))
        return
    m.write(dst, np.where(take, m.read_f32(ins, a), m.read_f32(ins, b)))


def _as_shape(values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """`values` reshaped to `shape` as a view of the same bytes, or None where that takes a
    copy (a bound step must read the memory itself on every call)."""
    try:
        return np.reshape(values, shape, copy=False)
    except ValueError:
        return None


def _bound_copy(dst: np.ndarray, src: np.ndarray | None):
    """A copy into `dst`, converting float dtypes with numpy's cast for the pair, which is
    the one `convert` applies (`astype`), in one pass instead of through a temporary."""
    if src is None:
        return None
    if dst.dtype == src.dtype:
        return lambda: np.copyto(dst, src)
    return lambda: np.copyto(dst, src, casting="unsafe")


def bound_step(ins, views: dict[int, np.ndarray], scans=None):
    """For a replay (sim/replay.py): a function of no arguments that does what
    `SEMANTICS[ins.opcode](ins, m)` does on a machine whose operands are the prebuilt views
    `views[id(access)]`, bit for bit, with every reshape made once here instead of on each
    call; None where no such shortcut applies (the replay calls the semantic function).

    Covered, as most of a model's instructions are: copies that keep the dtype (a direct DMA,
    a TRANSPOSE), widen it (a TRANSPOSE into fp32 PSUM) or convert from fp32 to a float dtype
    (a TENSOR_COPY: PSUM evacuations), where the semantic function converts with numpy's cast
    for the pair; fp32 activations without accum, computed into a scratch array made once; and
    matmuls, whose product the BLAS writes straight into PSUM (the same call with another
    output stride, so the same sums) and whose accumulation adds the product and PSUM in
    the semantic function's operand order (a bf16 product on the host's GEMM is added by
    the library's call itself, beta = 1, where its load-time probe found the same bits:
    sim/host_gemm.py). `scans(ins, slot, array)`, where given, is a
    call giving the bf16 operand's `host_gemm.smallest_exponent`, shared by the matmuls
    that read the same bytes (sim/replay.py)."""
    op, ops = ins.opcode, ins.ops
    if op == Op.DMA and not ins.flags & isa.FLAG_INDIRECT:
        dst, src = ops[0], ops[1]
        if dst.dtype == src.dtype:
            return _bound_copy(views[id(dst)], _as_shape(views[id(src)], dst.shape))
    elif op == Op.TRANSPOSE:
        # Passes values, or widens them to fp32 (exact).
        dst, src = ops[0], ops[1]
        if dst.dtype == src.dtype or (dst.dtype == F32 and src.isa_dtype.is_float):
            flat = _as_shape(views[id(src)], (src.partitions, src.free_size))
            if flat is not None:
                return _bound_copy(views[id(dst)], _as_shape(flat.T, dst.shape))
    elif op == Op.TENSOR_COPY:
        # From fp32, the semantic function's read is the identity and its write the cast.
        dst, src = ops[0], ops[1]
        if src.dtype == F32 and dst.isa_dtype.is_float:
            return _bound_copy(views[id(dst)], _as_shape(views[id(src)], dst.shape))
    elif op == Op.MATMUL:
        return _bound_matmul(ins, views, scans)
    elif op == Op.ACTIVATE:
        return _bound_activate(ins, views)
    return None


def _bound_activate(ins, views: dict[int, np.ndarray]):
    """op_activate on fp32 operands without accum: the same numpy calls in the same order
    (`src * scale`, `+= bias`, the function, in fp32 or float64 as op_activate chooses),
    into a scratch array made once instead of fresh ones on every call."""
    dst, src, bias, scale, accum = ins.ops
    if accum is not None or any(a is not None and a.dtype != F32 for a in (dst, src, bias, scale)):
        return None
    shape = (src.partitions, src.free_size)
    x_in = _as_shape(views[id(src)], shape)
    out = _as_shape(views[id(dst)], (dst.partitions, dst.free_size))
    if x_in is None or out is None or out.shape != shape:
        return None
    s = np.float32(ins.imm[0]) if scale is None else \
        _as_shape(views[id(scale)], (scale.partitions, scale.free_size))
    b = None if bias is None else _as_shape(views[id(bias)], (bias.partitions, bias.free_size))
    if s is None or (bias is not None and b is None):
        return None
    fn = ACTIVATIONS[ins.func]
    in_fp32 = ins.func in EXACT_IN_FP32
    x = np.empty(shape, F32)

    def activate():
        np.multiply(x_in, s, out=x)
        if b is not None:
            np.add(x, b, out=x)
        np.copyto(out, fn(x) if in_fp32 else fn(x.astype(F64)).astype(F32))
    return activate


def _bound_matmul(ins, views: dict[int, np.ndarray], scans):
    dst, st, mv = ins.ops[0], ins.ops[1], ins.ops[2]
    stationary = _as_shape(views[id(st)], (st.partitions, st.free_size))
    moving = _as_shape(views[id(mv)], (mv.partitions, mv.free_size))
    out = _as_shape(views[id(dst)], (dst.partitions, dst.free_size))
    if dst.dtype != F32 or stationary is None or moving is None or out is None:
        return None
    # The semantic function's product is a fresh C-contiguous array, which numpy hands to
    # the BLAS; so must `out` be handed (unit element stride, rows a whole number of
    # elements apart), or numpy would fall back to a loop of its own with other sums.
    row_stride, element_stride = out.strides
    if element_stride != F32.itemsize or row_stride % F32.itemsize or \
            row_stride < out.shape[1] * F32.itemsize:
        return None
    accumulating = bool(ins.flags & isa.FLAG_ACCUMULATE)
    scratch = np.empty(out.shape, F32) if accumulating else None

    def widened(into):
        # Converted as `read_f32` converts (exactly: every PE input dtype widens to fp32),
        # in one pass into a fresh contiguous array.
        return np.matmul(stationary.astype(F32).T, moving.astype(F32), out=into)

    product = widened
    gemm = host_gemm.for_operands(stationary.dtype, moving.dtype)
    if stationary.dtype == F32 and moving.dtype == F32:
        stationary_t = stationary.T

        def product(into):
            return np.matmul(stationary_t, moving, out=into)
    elif gemm is not None:
        # As op_matmul: the host's bf16 GEMM where it accepts the operands' values (which
        # adds the product into PSUM itself), else the widened product.
        exponents = None if scans is None else (scans(ins, 1, stationary),
                                                 scans(ins, 2, moving))
        call = gemm.bind(stationary, moving, out, accumulate=accumulating,
                         exponents=exponents)
        if call is not None:
            if not accumulating:
                return lambda: call() or widened(out)

            def accumulate_bf16():
                if not call():
                    np.add(widened(scratch), out, out=out)
            return accumulate_bf16
    if not accumulating:
        return lambda: product(out)

    def accumulate():
        np.add(product(scratch), out, out=out)
    return accumulate


SEMANTICS = {
    Op.NOP: op_nop,
    Op.DMA: op_dma,
    Op.MATMUL: op_matmul,
    Op.TRANSPOSE: op_transpose,
    Op.ACTIVATE: op_activate,
    Op.TENSOR_TENSOR: op_tensor_tensor,
    Op.TENSOR_SCALAR: op_tensor_scalar,
    Op.TENSOR_REDUCE: op_tensor_reduce,
    Op.TENSOR_COPY: op_tensor_copy,
    Op.MEMSET: op_memset,
    Op.IOTA: op_iota,
    Op.SELECT: op_select,
    Op.TENSOR_SCALAR_REDUCE: op_tensor_scalar_reduce,
}
