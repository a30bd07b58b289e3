"""Decompositions the backend applies so that training graphs compile natively.

The backend traces every Dynamo graph with AOTAutograd using `table()`: PyTorch's core-ATen
decompositions plus the entries below, each of which replaces an op that torch-mlir cannot
lower, or that lowers to something the NeuronCore compiler does not take (tm_tensor scatters,
max-pool indices), by ops the compiler does take (matmul, elementwise, reductions, slices,
concat, pad). A decomposition returns NotImplemented for the cases it does not cover; the op
is then traced as it is (and, when the compiler cannot take it, runs in PyTorch, reported).

`rewrite_dynamo_graph` works one level higher, on the Dynamo graph before AOTAutograd: an op
whose backward is itself a fused kernel (scaled_dot_product_attention, whose CPU backward is
`_scaled_dot_product_flash_attention_for_cpu_backward`) is replaced by its math form, so that
AOTAutograd differentiates matmuls and a softmax and the backward is plain ops; so is the
attention inside F.multi_head_attention_forward, which Dynamo keeps as one node. (A
decomposition-table entry cannot do this: the table applies below autograd, after the
autograd formula of the fused op has already been chosen.) It also takes the rows of a tensor
that the program indexes one by one (`q, k, v = qkv`) with one `unbind`, whose backward is a
`stack` of the rows' gradients instead of a sum of zero-filled full-size scatters.
"""

from __future__ import annotations

import functools
import math
import types

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

aten = torch.ops.aten

# One-hot embedding backward: the one-hot matrix (tokens x vocabulary) is materialised, so it is
# used up to this many elements (64 MiB in fp32); larger ones keep index_put (CPU fallback).
ONE_HOT_MAX_ELEMENTS = 1 << 24

_OVERRIDES: dict = {}


def _register(*ops):
    def wrap(fn):
        for op in ops:
            _OVERRIDES[op] = fn
        return fn
    return wrap


@functools.lru_cache(maxsize=1)
def table() -> dict:
    """The decomposition table the backend passes to AOTAutograd (built once: ~0.15 s)."""
    from torch._decomp import core_aten_decompositions, get_decompositions

    decompositions = dict(core_aten_decompositions())
    # Batch norm in training mode: AOTAutograd emits `_native_batch_norm_legit_functional`
    # (with the running-stat updates as outputs), which torch-mlir cannot lower; PyTorch's own
    # decompositions turn it (and its relatives) into mean/var reductions and elementwise ops.
    decompositions.update(get_decompositions([
        aten._native_batch_norm_legit_functional,
        aten._native_batch_norm_legit,
        aten._native_batch_norm_legit_no_training,
        aten._batch_norm_with_update,
        aten._batch_norm_with_update_functional,
        aten.native_batch_norm,
        aten.native_batch_norm_backward,
        aten.batch_norm_backward,
    ]))
    # core-ATen decomposes squeeze.dim / squeeze.default into squeeze.dims, which torch-mlir
    # cannot lower (cross-entropy's forward uses it); squeeze.dim it lowers.
    decompositions.pop(aten.squeeze.dim, None)
    decompositions.pop(aten.squeeze.default, None)
    decompositions.update(_OVERRIDES)
    return decompositions


def _known_at_most(value, limit: int) -> bool:
    """value <= limit, for an int or a SymInt (decided on its hint without adding a guard:
    both paths of the caller are correct for every size, only their cost differs)."""
    if isinstance(value, torch.SymInt):
        if statically_known_true(value <= limit):
            return True
        hint = value.node.hint
        return hint is not None and hint <= limit
    return value <= limit


@_register(aten.squeeze.dims)
def squeeze_dims(self, dim):
    """squeeze.dims (no torch-mlir lowering) as a chain of squeeze.dim (lowered), highest
    dimension first so that the remaining indices stay valid."""
    if self.dim() == 0:
        return aten.alias.default(self)
    dims = sorted({d % self.dim() for d in dim}, reverse=True)
    out = self
    for d in dims:
        out = aten.squeeze.dim(out, d)
    if out is self:
        out = aten.alias.default(self)
    return out


@_register(aten.amax.default, aten.amin.default)
def extremum_of_a_scalar(self, dim=(), keepdim=False):
    """amax/amin of a 0-d tensor is the tensor (torch-mlir folds the reduction away and then
    fails to legalize its dim constant)."""
    if self.dim() != 0:
        return NotImplemented
    return aten.clone.default(self)


@_register(aten.argmax.default, aten.argmin.default)
def arg_extremum_of_a_scalar(self, dim=None, keepdim=False):
    """argmax/argmin of a 0-d tensor is 0 (torch-mlir fails on it as on amax)."""
    if self.dim() != 0:
        return NotImplemented
    return aten.full.default([], 0, dtype=torch.int64, device=self.device)


@_register(aten.fmod.Scalar, aten.fmod.Tensor)
def integer_fmod(self, other):
    """fmod of integers (roll's and fftshift's index arithmetic), which torch-mlir cannot
    lower, as a - trunc(a / b) * b; floating-point fmod is lowered as it is."""
    other_float = other.is_floating_point() if isinstance(other, torch.Tensor) else \
        isinstance(other, float)
    if self.is_floating_point() or other_float or self.dtype == torch.bool:
        return NotImplemented
    return self - torch.div(self, other, rounding_mode="trunc") * other


def _extremum(greater: bool, nan_wins: bool):
    """maximum/minimum (a NaN wins) or fmax/fmin (a NaN loses to a number) of floats, from
    a compare and select and a where on each operand's NaN test."""
    def decomposition(self, other):
        if not (self.is_floating_point() or other.is_floating_point()):
            return NotImplemented
        picked = torch.where(self > other if greater else self < other, self, other)
        return torch.where(torch.isnan(self), self if nan_wins else other,
                           torch.where(torch.isnan(other), other if nan_wins else self, picked))
    return decomposition


# maximum/minimum: torch-mlir lowers them to a compare and select, which gives the second
# operand where the first is NaN (minimum(nan, 0) came out 0).
_OVERRIDES[aten.maximum.default] = _extremum(greater=True, nan_wins=True)
_OVERRIDES[aten.minimum.default] = _extremum(greater=False, nan_wins=True)


@_register(aten.eq.Tensor)
def eq_of_itself(self, other):
    """x == x of a float tensor is its NaN test (false where x is NaN): torch-mlir folds it
    to true (isfinite, written as x == x and |x| != inf, came out true for NaN)."""
    if self is not other or not self.is_floating_point():
        return NotImplemented
    return torch.isnan(self).logical_not()


@_register(aten.ne.Tensor)
def ne_of_itself(self, other):
    """x != x of a float tensor is isnan(x) (see eq_of_itself)."""
    if self is not other or not self.is_floating_point():
        return NotImplemented
    return torch.isnan(self)


@_register(aten.clamp.default, aten.clamp.Tensor)
def clamp_keeping_nan(self, min=None, max=None):
    """clamp with PyTorch's NaN semantics (a NaN input or tensor bound gives NaN): torch-mlir
    lowers it with unordered compares (x <u min ? min : x), which give the bound for a NaN."""
    if not self.is_floating_point():
        return NotImplemented
    out = self
    for bound, below in ((min, True), (max, False)):
        if bound is None:
            continue
        out = torch.where(out < bound if below else out > bound, bound, out)
        if isinstance(bound, torch.Tensor):
            out = torch.where(torch.isnan(bound), bound, out)
    return out.to(self.dtype) if out.dtype != self.dtype else out


@_register(aten.hardtanh.default)
def hardtanh(self, min_val=-1.0, max_val=1.0):
    """hardtanh (and relu6) as clamp, which keeps a NaN: torch-mlir lowers it to two
    compare-and-selects, which give a bound for a NaN."""
    return aten.clamp.default(self, min_val, max_val)


# fmax/fmin: torch-mlir's own lowering miscasts a broadcast 0-d operand.
_OVERRIDES[aten.fmax.default] = _extremum(greater=True, nan_wins=False)
_OVERRIDES[aten.fmin.default] = _extremum(greater=False, nan_wins=False)


def _erfc_parts(self):
    """(x, t exp(P(t)), z) with erfc(|x|) = t exp(P(t) - z^2), z = |x|, t = 1 / (1 + z/2):
    Numerical Recipes' erfcc, relative error below 1.2e-7; computed in fp32 for bf16/fp16."""
    x = self.float() if self.element_size() < 4 else self
    z = torch.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = 0.17087277
    for c in (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418,
              0.37409196, 1.00002368, -1.26551223):
        poly = c + t * poly
    return x, t * torch.exp(poly), z


@_register(aten.erfc.default)
def erfc(self):
    """erfc without cancellation in the tail (torch-mlir has no lowering), and 2 - erfc(-x)
    for x < 0."""
    if not self.is_floating_point():
        return NotImplemented
    x, scaled, z = _erfc_parts(self)
    tail = scaled * torch.exp(-z * z)
    return torch.where(x >= 0, tail, 2.0 - tail).to(self.dtype)


@_register(aten.special_erfcx.default)
def erfcx(self):
    """exp(x^2) erfc(x) (log_ndtr uses it) without overflow for large x: t exp(P(t)) for
    x >= 0, 2 exp(x^2) - t exp(P(t)) below."""
    if not self.is_floating_point():
        return NotImplemented
    x, scaled, _ = _erfc_parts(self)
    return torch.where(x >= 0, scaled, 2.0 * torch.exp(x * x) - scaled).to(self.dtype)


# Abramowitz & Stegun 9.8.1-9.8.4: I0(x), I1(x)/x in (x/3.75)^2 below 3.75 (absolute error
# below 1.6e-7 and 8e-9), sqrt(x) exp(-x) I0(x), I1(x) in 3.75/x above (below 1.9e-7, 2.2e-7).
_BESSEL_I_SMALL = {
    0: (1.0, 3.5156229, 3.0899424, 1.2067492, 0.2659732, 0.0360768, 0.0045813),
    1: (0.5, 0.87890594, 0.51498869, 0.15084934, 0.02658733, 0.00301532, 0.00032411),
}
_BESSEL_I_LARGE = {
    0: (0.39894228, 0.01328592, 0.00225319, -0.00157565, 0.00916281, -0.02057706,
        0.02635537, -0.01647633, 0.00392377),
    1: (0.39894228, -0.03988024, -0.00362018, 0.00163801, -0.01031555, 0.02282967,
        -0.02895312, 0.01787654, -0.00420059),
}


def _horner(coefficients, u):
    out = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        out = c + u * out
    return out


def _bessel_i(order: int, scaled: bool):
    """The modified Bessel function I0 or I1 (times exp(-|x|) when `scaled`)."""
    def decomposition(self):
        if not self.is_floating_point():
            return NotImplemented
        x = self.float() if self.element_size() < 4 else self
        z = torch.abs(x)
        small = _horner(_BESSEL_I_SMALL[order], (z / 3.75) ** 2)
        if order == 1:
            small = small * z
        large = _horner(_BESSEL_I_LARGE[order], 3.75 / torch.where(z > 0, z, 1.0)) / \
            torch.sqrt(z)
        if scaled:
            small = small * torch.exp(-z)
        else:
            large = large * torch.exp(z)
        out = torch.where(z < 3.75, small, large)
        if order == 1:
            out = torch.where(x < 0, -out, out)
        return out.to(self.dtype)
    return decomposition


for _op, (_order, _scaled) in {
        aten.i0.default: (0, False), aten.special_i0e.default: (0, True),
        aten.special_i1.default: (1, False), aten.special_i1e.default: (1, True),
        aten.special_modified_bessel_i0.default: (0, False),
        aten.special_modified_bessel_i1.default: (1, False)}.items():
    _OVERRIDES[_op] = _bessel_i(_order, _scaled)


def _gamma_arguments(self):
    """The argument reduction lgamma and digamma share: x in fp32 at least, whether x is
    reflected (x < 1/2), y = x or 1 - x, whether y is small (< 8), z = y or y + 8 (where the
    asymptotic series is accurate) and w = 1 / z^2."""
    x = self.float() if self.element_size() < 4 else self
    reflect = x < 0.5
    y = torch.where(reflect, 1.0 - x, x)
    small = y < 8.0
    z = torch.where(small, y + 8.0, y)
    return x, reflect, y, small, z, 1.0 / (z * z)


@_register(aten.lgamma.default)
def lgamma(self):
    """log|Gamma(x)| (torch-mlir has no lowering): Stirling's series at z >= 8, reached from
    smaller arguments by the recurrence Gamma(y) = Gamma(y + 8) / (y (y+1) ... (y+7)), and
    the reflection log(pi / |sin(pi x)|) - lgamma(1 - x) below 1/2 (sin(pi x) taken at
    x - round(x), exact; the poles at 0, -1, ... give inf)."""
    if not self.is_floating_point():
        return NotImplemented
    x, reflect, y, small, z, w = _gamma_arguments(self)
    series = (1.0 / 12 + w * (-1.0 / 360 + w * (1.0 / 1260 - w / 1680))) / z
    stirling = (z - 0.5) * torch.log(z) - z + 0.5 * math.log(2 * math.pi) + series
    product = y
    for k in range(1, 8):
        product = product * (y + k)
    positive = stirling - torch.where(small, torch.log(product), 0.0)
    r = x - torch.round(x)
    reflected = math.log(math.pi) - torch.log(torch.abs(torch.sin(math.pi * r))) - positive
    out = torch.where(reflect, reflected, positive)
    pole = (r == 0) & (x <= 0)
    out = torch.where(pole | torch.isinf(x), math.inf, out)
    return out.to(self.dtype)


@_register(aten.digamma.default)
def digamma(self):
    """psi(x) (torch-mlir has no lowering): the asymptotic series at z >= 8, reached by
    psi(y) = psi(y + 8) - sum 1 / (y + k), and the reflection psi(1 - x) - pi / tan(pi x)
    below 1/2 (tan taken at x - round(x)); -inf at 0 and NaN at the negative integers,
    as PyTorch gives."""
    if not self.is_floating_point():
        return NotImplemented
    x, reflect, y, small, z, w = _gamma_arguments(self)
    series = torch.log(z) - 0.5 / z - w * (1.0 / 12 - w * (1.0 / 120 - w * (1.0 / 252 -
                                                                            w / 240)))
    steps = 1.0 / y
    for k in range(1, 8):
        steps = steps + 1.0 / (y + k)
    positive = series - torch.where(small, steps, 0.0)
    r = x - torch.round(x)
    angle = math.pi * r
    reflected = positive - math.pi * torch.cos(angle) / torch.sin(angle)
    out = torch.where(reflect, reflected, positive)
    out = torch.where((r == 0) & (x < 0), math.nan, out)
    out = torch.where(x == 0, -math.inf, out)
    out = torch.where(x == math.inf, math.inf, out)
    return out.to(self.dtype)


_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66)     # B2 ... B10


@_register(aten.polygamma.default)
def polygamma(n, self):
    """psi^(n)(x) = (-1)^(n+1) n! sum_k 1 / (x + k)^(n+1): digamma for n = 0; otherwise 16
    terms of the sum and the Euler-Maclaurin tail of the rest, at z = x + 16."""
    if n == 0:
        return digamma(self)
    if not self.is_floating_point() or not isinstance(n, int) or n < 0:
        return NotImplemented
    x = self.float() if self.element_size() < 4 else self
    terms = 16
    total = 0.0
    for k in range(terms):
        r = 1.0 / (x + k)
        power = r
        for _ in range(n):
            power = power * r
        total = total + power
    z = x + terms
    rz = 1.0 / z
    tail = math.factorial(n - 1) * rz ** n + math.factorial(n) / 2 * rz ** (n + 1)
    for k, b in enumerate(_BERNOULLI, start=1):
        tail = tail + b * math.factorial(2 * k + n - 1) / math.factorial(2 * k) * \
            rz ** (2 * k + n)
    out = (-1) ** (n + 1) * (math.factorial(n) * total + tail)
    return out.to(self.dtype)


@_register(aten.special_spherical_bessel_j0.default)
def spherical_bessel_j0(self):
    """sin(x) / x, 1 at 0."""
    if not self.is_floating_point():
        return NotImplemented
    x = self.float() if self.element_size() < 4 else self
    safe = torch.where(x == 0, 1.0, x)
    out = torch.where(x == 0, 1.0, torch.sin(safe) / safe)
    return torch.where(torch.isinf(x), 0.0, out).to(self.dtype)


@_register(aten.angle.default)
def angle(self):
    """The angle of a real number: pi below 0, else 0 (NaN stays NaN)."""
    if self.is_complex():
        return NotImplemented
    x = self if self.is_floating_point() else self.to(torch.get_default_dtype())
    return torch.where(torch.isnan(x), x, torch.where(x < 0, math.pi, 0.0).to(x.dtype))


@_register(aten.hypot.default)
def hypot(self, other):
    """sqrt(a^2 + b^2) scaled by max(|a|, |b|) so that squares neither overflow nor
    underflow."""
    a, b = torch.abs(self), torch.abs(other)
    big, small = torch.maximum(a, b), torch.minimum(a, b)
    ratio = torch.where(big == 0, 0.0, small / torch.where(big == 0, 1.0, big))
    out = big * torch.sqrt(1.0 + ratio * ratio)
    return torch.where(torch.isinf(a) | torch.isinf(b), math.inf, out)


@_register(aten.addmv.default)
def addmv(self, mat, vec, beta=1, alpha=1):
    """beta self + alpha (mat @ vec) as a matmul."""
    out = torch.matmul(mat, vec)
    if alpha != 1:
        out = out * alpha
    if beta == 0:
        return out.expand(torch.broadcast_shapes(self.shape, out.shape)).clone()
    return (self if beta == 1 else self * beta) + out


@_register(aten.addmm.default)
def addmm_without_input(self, mat1, mat2, beta=1, alpha=1):
    """addmm with beta = 0 ignores its input, NaN and inf included (as eager does): the
    product alone. Other betas are left to the lowering."""
    if beta != 0:
        return NotImplemented
    out = torch.mm(mat1, mat2)
    if alpha != 1:
        out = out * alpha
    return out.expand(torch.broadcast_shapes(self.shape, out.shape)).clone()


@_register(aten.linalg_vector_norm.default)
def vector_norm_in_fp32(self, ord=2, dim=None, keepdim=False, *, dtype=None):
    """An fp16/bf16 vector norm accumulated in fp32 and rounded once, as eager computes it:
    torch-mlir's lowering sums the powers in the input's dtype (fp16 1000s: inf)."""
    if self.dtype not in (torch.float16, torch.bfloat16) or dtype is not None:
        return NotImplemented
    return torch.linalg.vector_norm(self.float(), ord, dim, keepdim).to(self.dtype)


@_register(aten.empty_permuted.default)
def empty_permuted(size, physical_layout, dtype=None, layout=None, device=None,
                   pin_memory=None):
    """Uninitialised memory in the logical shape (the physical order is a layout hint)."""
    return aten.empty.memory_format(size, dtype=dtype, device=device)


# Functional copies of views that torch-mlir does not lower: the view, then a copy.
_VIEW_COPIES = {
    aten.permute_copy.default: aten.permute.default,
    aten.view_copy.default: aten.view.default,
    aten.unbind_copy.int: aten.unbind.int,
    aten.narrow_copy.default: aten.narrow.default,
    aten.transpose_copy.int: aten.transpose.int,
    aten.t_copy.default: aten.t.default,
    aten.expand_copy.default: aten.expand.default,
    aten.unsqueeze_copy.default: aten.unsqueeze.default,
    aten.diagonal_copy.default: aten.diagonal.default,
}


def _view_copy(view):
    def decomposition(*args, **kwargs):
        out = view(*args, **kwargs)
        if isinstance(out, (list, tuple)):
            return [aten.clone.default(t) for t in out]
        return aten.clone.default(out)
    return decomposition


for _copy, _view in _VIEW_COPIES.items():
    _OVERRIDES[_copy] = _view_copy(_view)


def _one_hot_scatter(self, dim, index, src):
    """scatter with one index per destination row along `dim` (index.shape[dim] == 1 and
    every other size equal to self's): no two writes collide, so the result is
    `where(positions == index, src, self)`, elementwise (torch-mlir lowers scatter to a
    tm_tensor.scatter, which the compiler does not take). This is how nll_loss_backward (the
    backward of cross-entropy) writes its -1 per row."""
    if self.dim() == 0 or index.dim() != self.dim():
        return NotImplemented
    dim = dim % self.dim()
    if not statically_known_true(index.shape[dim] == 1):
        return NotImplemented
    for d in range(self.dim()):
        if d != dim and not statically_known_true(index.shape[d] == self.shape[d]):
            return NotImplemented
    shape = [1] * self.dim()
    shape[dim] = self.shape[dim]
    positions = torch.arange(self.shape[dim], device=self.device, dtype=index.dtype)
    mask = positions.view(shape) == index
    if isinstance(src, torch.Tensor):
        src = src.narrow(dim, 0, 1)
        for d in range(self.dim()):
            if d != dim:
                src = src.narrow(d, 0, self.shape[d])
        src = src.to(self.dtype)
    else:
        src = torch.scalar_tensor(src, dtype=self.dtype, device=self.device)
    return torch.where(mask, src, self)


@_register(aten.scatter.value)
def scatter_value(self, dim, index, value):
    return _one_hot_scatter(self, dim, index, value)


@_register(aten.scatter.src)
def scatter_src(self, dim, index, src):
    return _one_hot_scatter(self, dim, index, src)


@_register(aten.embedding_dense_backward.default)
def embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
                             scale_grad_by_freq):
    """The embedding's weight gradient as a one-hot matmul, `one_hot(ids).T @ grad`, on the
    PE (core-ATen's decomposition is an index_put with accumulate, a tm_tensor scatter the
    compiler does not take). Rows of `padding_idx` get no gradient; with scale_grad_by_freq
    each row is divided by how often its index occurs (PyTorch counts every index, padding
    included). Vocabularies too large for a one-hot matrix keep the index_put."""
    if not grad_output.dtype.is_floating_point or indices.dim() == 0:
        return NotImplemented
    tokens = indices.numel()
    if not _known_at_most(tokens * num_weights, ONE_HOT_MAX_ELEMENTS):
        return NotImplemented
    flat = indices.reshape(-1)
    grad = grad_output.reshape(tokens, grad_output.shape[-1])
    vocabulary = torch.arange(num_weights, device=indices.device, dtype=indices.dtype)
    hits = flat.unsqueeze(1) == vocabulary.unsqueeze(0)            # tokens x vocabulary
    selected = hits
    if padding_idx >= 0:
        selected = torch.logical_and(hits, (flat != padding_idx).unsqueeze(1))
    weight_grad = torch.mm(selected.to(grad.dtype).t(), grad)     # vocabulary x dim
    if scale_grad_by_freq:
        counts = hits.to(grad.dtype).sum(0).clamp(min=1)
        weight_grad = weight_grad / counts.unsqueeze(1)
    return weight_grad


def _pair(value, default=None) -> tuple[int, int]:
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        return default
    if isinstance(value, (list, tuple)):
        return (value[0], value[0]) if len(value) == 1 else (value[0], value[1])
    return (value, value)


@_register(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
                                     dilation, ceil_mode, indices):
    """max-pool's input gradient recomputed from the forward input instead of read through
    the saved indices (the compiler takes max pooling but not its argmax, and scattering by
    index is a tm_tensor op): the forward pass then keeps only the pooled values, and the
    indices are dead code.

    The window is scanned in PyTorch's CPU kernel's order (row-major, padding skipped) with its
    update rule `val > max or isnan(val)` and its starting point (the window's first valid
    element), so the element that receives the gradient is the one PyTorch's indices name,
    ties and NaNs included. Each window offset's gradient is then laid back in place by
    stacking per-phase planes and reshaping (no scatter): a plane for every (row, column)
    phase modulo the stride, the offsets that land in that phase added with their shift."""
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride, (kh, kw))
    ph, pw = _pair(padding, (0, 0))
    dh, dw = _pair(dilation, (1, 1))
    if self.dim() not in (3, 4) or any(isinstance(v, torch.SymInt) for v in
                                       (*self.shape, *grad_output.shape)):
        return NotImplemented
    unbatched = self.dim() == 3
    x = self.unsqueeze(0) if unbatched else self
    grad = grad_output.unsqueeze(0) if unbatched else grad_output
    h, w = x.shape[-2:]
    oh, ow = grad.shape[-2:]
    # Pad x with -inf so that every window offset is one strided slice of length oh / ow.
    bottom = max(0, (oh - 1) * sh + (kh - 1) * dh - ph - (h - 1))
    right = max(0, (ow - 1) * sw + (kw - 1) * dw - pw - (w - 1))
    padded = x
    if ph or pw or bottom or right:
        padded = torch.constant_pad_nd(x, [pw, right, ph, bottom], float("-inf"))

    def window(t, i, j):
        t = t[..., i * dh: i * dh + (oh - 1) * sh + 1: sh, :]
        return t[..., j * dw: j * dw + (ow - 1) * sw + 1: sw]

    def valid_1d(size, before, after, k, d, s, out):
        """valid[i][o]: whether window offset i of output o lies inside the input."""
        return [[0 <= o * s + i * d - before < size for o in range(out)] for i in range(k)]

    valid_rows = valid_1d(h, ph, bottom, kh, dh, sh, oh)
    valid_cols = valid_1d(w, pw, right, kw, dw, sw, ow)
    offsets = [(i, j) for i in range(kh) for j in range(kw)]

    def valid_mask(i, j):
        """None when offset (i, j) is inside the input for every output, else a bool mask."""
        if all(valid_rows[i]) and all(valid_cols[j]):
            return None
        return _outer_and(valid_rows[i], valid_cols[j], x.device)

    def first_valid(i, j):
        """Per output: whether (i, j) is the first in-input offset of its window (True or
        False when that holds for every output, else a bool mask)."""
        rows = [valid_rows[i][o] and not any(valid_rows[a][o] for a in range(i))
                for o in range(oh)]
        cols = [valid_cols[j][o] and not any(valid_cols[b][o] for b in range(j))
                for o in range(ow)]
        if all(rows) and all(cols):
            return True
        if not any(rows) or not any(cols):
            return False
        return _outer_and(rows, cols, x.device)

    # Forward scan: which offsets update the running maximum. Padding holds -inf and is
    # masked out; the first in-input offset of each window always updates (PyTorch starts
    # from it even when every value is -inf).
    running = None
    updates = []
    for i, j in offsets:
        value = window(padded, i, j)
        start = first_valid(i, j)
        if start is True:
            update = torch.ones_like(value, dtype=torch.bool)
        else:
            bound = running if running is not None else float("-inf")
            update = torch.logical_or(torch.gt(value, bound), torch.isnan(value))
            valid = valid_mask(i, j)
            if valid is not None:
                update = torch.logical_and(update, valid)
            if start is not False:
                update = torch.logical_or(update, start)
        running = value if running is None and start is True else torch.where(
            update, value, running if running is not None else float("-inf"))
        updates.append(update)
    # The last offset to update is the argmax.
    selected: list = [None] * len(offsets)
    later = None
    for n in range(len(offsets) - 1, -1, -1):
        selected[n] = updates[n] if later is None else \
            torch.logical_and(updates[n], torch.logical_not(later))
        later = updates[n] if later is None else torch.logical_or(later, updates[n])
    # Lay each offset's gradient back: padded row oh*sh + i*dh == (oh + q)*sh + r. Offsets are
    # added in reverse order, which is the order of the outputs whose windows overlap on an
    # input element, so overlapping windows sum their gradients in PyTorch's order.
    qh = max((i * dh) // sh for i in range(kh))
    qw = max((j * dw) // sw for j in range(kw))
    planes: dict[tuple[int, int], torch.Tensor] = {}
    zero = torch.zeros((), dtype=grad.dtype, device=grad.device)
    for (i, j), sel in reversed(list(zip(offsets, selected))):
        qi, ri = divmod(i * dh, sh)
        qj, rj = divmod(j * dw, sw)
        part = torch.where(sel, grad, zero)
        part = torch.constant_pad_nd(part, [qj, qw - qj, qi, qh - qi], 0.0)
        key = (ri, rj)
        planes[key] = part if key not in planes else planes[key] + part
    blank = None
    rows = []
    for ri in range(sh):
        cols = []
        for rj in range(sw):
            plane = planes.get((ri, rj))
            if plane is None:
                if blank is None:
                    blank = torch.zeros_like(next(iter(planes.values())))
                plane = blank
            cols.append(plane)
        rows.append(torch.stack(cols, dim=-1))             # n, c, A, B, sw
    stacked = torch.stack(rows, dim=3)                      # n, c, A, sh, B, sw
    n_, c_, a_, _, b_, _ = stacked.shape
    full = stacked.reshape(n_, c_, a_ * sh, b_ * sw)
    extra_h = max(0, ph + h - a_ * sh)
    extra_w = max(0, pw + w - b_ * sw)
    if extra_h or extra_w:
        full = torch.constant_pad_nd(full, [0, extra_w, 0, extra_h], 0.0)
    result = full[..., ph: ph + h, pw: pw + w]
    result = result.contiguous(memory_format=_memory_format(self))
    return result.squeeze(0) if unbatched else result


def _run_mask(values: list[bool], device) -> torch.Tensor:
    """A bool vector equal to `values`, one contiguous run of True (which is what window
    validity per output position is), built from an iota (no constant tensor)."""
    hits = [k for k, v in enumerate(values) if v]
    lo, hi = hits[0], hits[-1] + 1
    assert hi - lo == len(hits), values
    positions = torch.arange(len(values), device=device)
    if lo == 0:
        return positions < hi
    if hi == len(values):
        return positions >= lo
    return torch.logical_and(positions >= lo, positions < hi)


def _outer_and(rows: list[bool], cols: list[bool], device) -> torch.Tensor:
    """rows x cols bool mask: rows[r] and cols[c]."""
    if not any(rows) or not any(cols):
        return torch.zeros(len(rows), len(cols), dtype=torch.bool, device=device)
    return torch.logical_and(_run_mask(rows, device).view(-1, 1),
                             _run_mask(cols, device).view(1, -1))


def _memory_format(t: torch.Tensor):
    if t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(
            memory_format=torch.channels_last):
        return torch.channels_last
    return torch.contiguous_format


@_register(aten._scaled_dot_product_flash_attention_for_cpu.default)
def flash_attention_for_cpu(query, key, value, dropout_p=0.0, is_causal=False, *,
                            attn_mask=None, scale=None):
    """The CPU flash attention's (output, logsumexp) in math form. PyTorch's decomposition
    returns the probabilities in the logsumexp's place (it serves inference and export): in a
    training graph the op's backward, `_scaled_dot_product_flash_attention_for_cpu_backward`
    (run in PyTorch), reads that second output as the rows' logsumexp [B, H, L], and its
    gradients would be wrong. (The backend's own rewrites turn scaled_dot_product_attention
    into its math form before AOTAutograd; this covers the op where it is reached anyway.)"""
    if dropout_p != 0.0:
        return NotImplemented
    scores, v = _attention_scores(query, key, value, _additive_mask(attn_mask, query.dtype),
                                  is_causal, scale, enable_gqa=key.size(1) != query.size(1))
    logsumexp = torch.logsumexp(scores, -1)
    probs = torch.exp(scores - logsumexp.unsqueeze(-1))
    probs = torch.where((logsumexp == float("-inf")).unsqueeze(-1), torch.zeros_like(probs),
                        probs)
    output = torch.matmul(probs, v).to(query.dtype)
    # Laid out as the fused kernel lays out its output ([B, L, H, E] in memory), which views
    # of it after the op rely on (as PyTorch's decomposition does).
    output = output.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3)
    return output, logsumexp


# -- Before AOTAutograd -----------------------------------------------------------------------

def sdpa_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False):
    """scaled_dot_product_attention in its math form (matmul, scale, mask, softmax, matmul),
    so that AOTAutograd differentiates those ops instead of calling the fused flash-attention
    CPU backward (no torch-mlir lowering). A boolean mask becomes the additive 0 / -inf mask
    first, as scaled_dot_product_attention itself does before choosing a kernel.

    Without dropout it is written out here rather than as `_scaled_dot_product_attention_math`,
    with that kernel's numerics (fp16/bf16 inputs computed in fp32, the result rounded once;
    a row with nothing to attend to gives zeros) but in the shape the compiler fuses: the
    scores' row maximum serves both the softmax and the test for an all -inf row (the math
    kernel compares every score with -inf and reduces that over the row), and the matmuls
    read the inputs' fp32 conversions, which PE takes as the bf16 values themselves."""
    attn_mask = _additive_mask(attn_mask, query.dtype)
    if dropout_p != 0.0:
        return aten._scaled_dot_product_attention_math.default(
            query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale,
            enable_gqa=enable_gqa)[0]
    scores, v = _attention_scores(query, key, value, attn_mask, is_causal, scale, enable_gqa)
    top = scores.amax(-1, keepdim=True)
    exp = torch.exp(scores - top)
    probs = exp / exp.sum(-1, keepdim=True)
    probs = torch.where(top == float("-inf"), torch.zeros_like(probs), probs)
    return torch.matmul(probs, v).to(query.dtype)


def _additive_mask(attn_mask, dtype):
    """A boolean attention mask as the additive 0 / -inf mask of `dtype` (others as they are),
    as scaled_dot_product_attention turns it before choosing a kernel."""
    if attn_mask is None or attn_mask.dtype != torch.bool:
        return attn_mask
    return torch.zeros_like(attn_mask, dtype=dtype).masked_fill(attn_mask.logical_not(),
                                                                float("-inf"))


def _attention_scores(query, key, value, attn_mask, is_causal, scale, enable_gqa):
    """The math form's scaled, masked scores (fp16/bf16 inputs widened to fp32) and the
    widened values: key and value heads repeated for grouped queries, the causal mask and
    the additive `attn_mask` applied."""
    if enable_gqa:
        key = key.repeat_interleave(query.size(-3) // key.size(-3), -3)
        value = value.repeat_interleave(query.size(-3) // value.size(-3), -3)
    wide = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
    q, k, v = query.to(wide), key.to(wide), value.to(wide)
    factor = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = torch.matmul(q, k.transpose(-2, -1)) * factor
    if is_causal:
        length, source = query.size(-2), key.size(-2)
        causal = torch.ones(length, source, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(causal.logical_not(), float("-inf"))
    if attn_mask is not None:
        scores = scores + attn_mask.to(wide)
    return scores, v


_SDPA_TARGETS = (torch._C._nn.scaled_dot_product_attention,
                 torch.nn.functional.scaled_dot_product_attention)


@functools.lru_cache(maxsize=1)
def _multi_head_attention_forward_math():
    """A copy of F.multi_head_attention_forward whose scaled_dot_product_attention is
    `sdpa_math`: the same code over a copy of its module's namespace with that name (and its
    own) changed; the module itself, and every other caller, keep the fused op."""
    original = torch.nn.functional.multi_head_attention_forward
    namespace = dict(original.__globals__)
    namespace["scaled_dot_product_attention"] = sdpa_math
    copy = types.FunctionType(original.__code__, namespace, original.__name__,
                              original.__defaults__, original.__closure__)
    copy.__kwdefaults__ = original.__kwdefaults__
    # Its first step hands the call to an active torch-function mode (AOTAutograd's tracing
    # has one) by its own name, which must then name the copy.
    namespace["multi_head_attention_forward"] = copy
    return copy


def multi_head_attention_math(*args, **kwargs):
    """F.multi_head_attention_forward with the attention in its math form. Dynamo keeps
    multi_head_attention_forward (nn.MultiheadAttention's) as one node, which AOTAutograd
    traces through its scaled_dot_product_attention call: left as it is, that call's autograd
    formula is the fused CPU flash attention's, whose backward reads the softmax's logsumexp,
    which the forward's decomposition (`_scaled_dot_product_attention_math`) does not compute
    (the input gradient of nn.MultiheadAttention came out wrong)."""
    return _multi_head_attention_forward_math()(*args, **kwargs)


def rewrite_dynamo_graph(gm: torch.fx.GraphModule) -> int:
    """Replace fused ops of a Dynamo graph by their math form, and index-by-index unpacking
    of a tensor by one unbind (see the module docstring); returns the number of nodes
    rewritten."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target in _SDPA_TARGETS:
            node.target = sdpa_math
            count += 1
        elif node.op == "call_function" and \
                node.target is torch.nn.functional.multi_head_attention_forward:
            node.target = multi_head_attention_math
            count += 1
        count += _unbind_indexed_rows(gm.graph, node)
    if count:
        gm.recompile()
    return count


def _unbind_indexed_rows(graph: torch.fx.Graph, node: torch.fx.Node) -> int:
    """`q, k, v = t` (or t[0], t[1], ...) indexes a tensor row by row: Dynamo records one
    getitem per row, whose backward AOTAutograd builds as one zero-filled select_scatter per
    row, summed (full-size selects and adds over the whole gradient). The same rows taken by
    one `unbind` have `stack` as their backward. Rewrites when at least two distinct rows of
    dim 0 are taken by plain integer indices; returns the number of getitems rewritten."""
    import operator

    value = node.meta.get("example_value")
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        return 0
    rows = value.shape[0]
    if not isinstance(rows, int):
        return 0
    takes = [user for user in node.users
             if user.op == "call_function" and user.target is operator.getitem
             and user.args[0] is node and type(user.args[1]) is int
             and -rows <= user.args[1] < rows]
    if len({t.args[1] % rows for t in takes}) < 2:
        return 0
    with graph.inserting_after(node):
        unbound = graph.call_function(torch.unbind, (node, 0))
    unbound.meta["example_value"] = tuple(value.unbind(0))
    for take in takes:
        take.args = (unbound, take.args[1] % rows)
    return len(takes)
