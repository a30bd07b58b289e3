"""The host's bf16 GEMM, for MATMUL instructions whose operands are both bf16.

A bf16 matmul instruction's products are exact in fp32 and are summed in fp32, which the
simulator can compute by widening both operands to fp32 and calling the fp32 BLAS
(sim/semantics.py). CPUs with bf16 dot-product instructions (AVX512-BF16, AMX) compute the
same sums at two or more times the fp32 rate and without the widening pass; oneDNN's
`dnnl_gemm_bf16bf16f32` (from the `onednn-cpu-gomp` package) uses them. This module calls it
through ctypes on the operands' memory as it lies (row-major, rows any whole number of
elements apart), one thread per call.

Those instructions treat subnormal inputs as zero and flush subnormal results to zero. A
call therefore goes ahead only when no subnormal can arise, which the operands' smallest
nonzero exponents decide: a normal bf16 value with biased exponent E is a multiple of
2^(E - 134), so every product of the two operands, and every fp32 partial sum of such
products (rounding keeps a sum of multiples of g a multiple of g), is a multiple of
g = 2^(Ea + Eb - 268), where Ea and Eb are the smallest exponents among each operand's nonzero
elements. When neither operand holds a subnormal and g >= 2^-126 (Ea + Eb >= 142), every
nonzero intermediate is a normal number and the flush never happens: the result is then the
fp32 sum of exact products, as the widening path computes it, in the library's summation
order. Otherwise `product` declines and the caller widens. Data of models is far from this
bound (Ea + Eb >= 142 holds whenever every nonzero magnitude is above about 2^-56 in both
operands, or 1e-17).

Where the package or its library is missing, the probe call fails, or
`TORCHNEURON_SIM_BF16_GEMM=0`, `load()` returns None and every matmul widens.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import threading

import ml_dtypes
import numpy as np

from torchneuron import config

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
U16 = np.dtype(np.uint16)

# Ea + Eb below this lets a product or partial sum fall below 2^-126 (see the docstring).
MIN_EXPONENT_SUM = 142
_MAGNITUDE = U16.type(0x7FFF)
_ONE = U16.type(1)
_MANTISSA_BITS = 7


def smallest_exponent(values: np.ndarray) -> int:
    """The smallest biased exponent among the nonzero elements of a bf16 array viewed as
    uint16 (0 when one is subnormal; 255 when all are zero, which constrains nothing).
    Zeros are skipped by taking the magnitude minus one, which wraps them to 0xFFFF."""
    wrapped = np.bitwise_and(values, _MAGNITUDE)
    np.subtract(wrapped, _ONE, out=wrapped)
    return min(255, (int(wrapped.min()) + 1) >> _MANTISSA_BITS)


def no_subnormal_arises(stationary: np.ndarray, moving: np.ndarray) -> bool:
    """Whether no product of the two bf16 operands (uint16 views), nor any fp32 sum of such
    products, can be subnormal."""
    ea = smallest_exponent(stationary)
    if ea == 0:
        return False
    eb = smallest_exponent(moving)
    return eb != 0 and ea + eb >= MIN_EXPONENT_SUM


def _row_major(a: np.ndarray, dtype: np.dtype) -> int | None:
    """The leading dimension (elements between rows) of a 2-D array whose elements are
    contiguous within a row, else None."""
    if a.ndim != 2 or a.dtype != dtype:
        return None
    row, element = a.strides
    size = dtype.itemsize
    if a.shape[1] > 1 and element != size:
        return None
    if a.shape[0] > 1 and (row % size or row < a.shape[1] * size):
        return None
    return max(row // size, a.shape[1], 1)


class Bf16Gemm:
    """`dnnl_gemm_bf16bf16f32` and the OpenMP calls that hold it to the calling thread."""

    def __init__(self, library: ctypes.CDLL, openmp: ctypes.CDLL):
        gemm = library.dnnl_gemm_bf16bf16f32
        i64, ptr, f32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_float
        gemm.argtypes = [ctypes.c_char, ctypes.c_char, i64, i64, i64, f32, ptr, i64, ptr, i64,
                         f32, ptr, i64]
        gemm.restype = ctypes.c_int
        self._gemm = gemm
        self._get_threads = openmp.omp_get_max_threads
        self._get_threads.restype = ctypes.c_int
        self._set_threads = openmp.omp_set_num_threads
        self._set_threads.argtypes = [ctypes.c_int]

    def product(self, stationary: np.ndarray, moving: np.ndarray, out: np.ndarray) -> bool:
        """out[M, N] = stationary[K, M]^T @ moving[K, N] in fp32, for bf16 operands; False
        (out untouched) where a subnormal could arise or an array is not row-major (see the
        module docstring), and the caller computes the product another way."""
        k, m = stationary.shape
        n = moving.shape[1]
        lda, ldb, ldc = (_row_major(stationary, BF16), _row_major(moving, BF16),
                         _row_major(out, F32))
        if lda is None or ldb is None or ldc is None or moving.shape[0] != k or \
                out.shape != (m, n):
            return False
        if not no_subnormal_arises(stationary.view(U16), moving.view(U16)):
            return False
        # OpenMP's thread count is per calling thread: one for this call, then as it was
        # (PyTorch may share this OpenMP runtime and read the count on the same thread).
        threads = self._get_threads()
        self._set_threads(1)
        try:
            status = self._gemm(b"T", b"N", m, n, k, 1.0, stationary.ctypes.data, lda,
                                moving.ctypes.data, ldb, 0.0, out.ctypes.data, ldc)
        finally:
            self._set_threads(threads)
        if status != 0:
            raise RuntimeError(f"dnnl_gemm_bf16bf16f32 failed with status {status} on a "
                               f"[{k}, {m}] x [{k}, {n}] product")
        return True


def _library_path() -> str | None:
    try:
        files = importlib.metadata.files("onednn-cpu-gomp") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == "libdnnl.so.3":
            return str(f.locate())
    return None


def _probe(gemm: Bf16Gemm) -> bool:
    """One small product with every kind of summand, compared exactly with the widened
    fp32 sums (small integers: every order gives the same sums)."""
    rng = np.random.default_rng(0)
    stationary = rng.integers(-8, 9, size=(32, 16)).astype(BF16)
    moving = rng.integers(-8, 9, size=(32, 24)).astype(BF16)
    out = np.full((16, 24), np.nan, F32)      # beta = 0: never read
    if not gemm.product(stationary, moving, out):
        return False
    return bool(np.array_equal(out, stationary.astype(F32).T @ moving.astype(F32)))


_loaded: list[Bf16Gemm | None] = []
_load_lock = threading.Lock()


def load() -> Bf16Gemm | None:
    """The host's bf16 GEMM, or None where it is off or unavailable (found once)."""
    if _loaded:
        return _loaded[0]
    with _load_lock:
        if not _loaded:
            _loaded.append(_load())
    return _loaded[0]


def for_operands(stationary: np.dtype, moving: np.dtype) -> Bf16Gemm | None:
    """The host's bf16 GEMM where a matmul's operand dtypes are both bf16 and it is
    available, else None (the matmul widens)."""
    return load() if stationary == BF16 and moving == BF16 else None


def _load() -> Bf16Gemm | None:
    if not config.SIM_BF16_GEMM.get():
        return None
    path = _library_path()
    if path is None:
        return None
    try:
        library = ctypes.CDLL(path)
        # The OpenMP runtime the library was linked against, as the dynamic linker bound it
        # (PyTorch's copy when PyTorch was loaded first: same soname).
        openmp = ctypes.CDLL("libgomp.so.1")
        gemm = Bf16Gemm(library, openmp)
        return gemm if _probe(gemm) else None
    except (OSError, AttributeError, RuntimeError):
        return None
