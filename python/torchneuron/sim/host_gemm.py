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

An accumulating matmul adds its sum of products to what PSUM holds. The library's beta = 1
does that in the same pass where a probe at load time finds, bit for bit, that it adds C to
the finished K sum (`_probe_accumulate`); else, and for its GEMV kernel (M or N of 1), which
starts its sum from C, the sum goes to a scratch array that is then added.

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
        # Whether beta = 1 adds C to the finished sum of products, for M and N of 2 or more
        # (`_probe_accumulate`).
        self.accumulates_in_place = False

    def product(self, stationary: np.ndarray, moving: np.ndarray, out: np.ndarray,
                accumulate: bool = False) -> bool:
        """out[M, N] = stationary[K, M]^T @ moving[K, N] in fp32 for bf16 operands (with
        `accumulate`: out += that product, the product summed first, as PSUM adds it); False
        (out untouched) where a subnormal could arise or an array is not row-major (see the
        module docstring), and the caller computes the product another way."""
        call = self.bind(stationary, moving, out, accumulate=accumulate)
        return call is not None and call()

    def bind(self, stationary: np.ndarray, moving: np.ndarray, out: np.ndarray, *,
             accumulate: bool = False, exponents: tuple | None = None):
        """`product` on these arrays as a call of no arguments (pointers and leading
        dimensions worked out once, for a replay's fixed operands), or None where an array
        is not row-major or the shapes disagree. `exponents`: two calls giving each
        operand's `smallest_exponent` (a replay's scans shared between instructions that
        read the same bytes); by default each call scans."""
        k, m = stationary.shape
        n = moving.shape[1]
        lda, ldb, ldc = (_row_major(stationary, BF16), _row_major(moving, BF16),
                         _row_major(out, F32))
        if lda is None or ldb is None or ldc is None or moving.shape[0] != k or \
                out.shape != (m, n):
            return None
        if exponents is None:
            exponents = (lambda: smallest_exponent(stationary.view(U16)),
                         lambda: smallest_exponent(moving.view(U16)))
        stationary_exponent, moving_exponent = exponents
        # PSUM adds the finished sum of products to what it holds: the library does the
        # same with beta = 1 where `accumulates_in_place` was verified, else the sum goes to
        # a scratch array first.
        in_place = not accumulate or (self.accumulates_in_place and m > 1 and n > 1)
        target = out if in_place else np.empty((m, n), F32)
        args = (b"T", b"N", m, n, k, 1.0, stationary.ctypes.data, lda, moving.ctypes.data,
                ldb, 1.0 if accumulate and in_place else 0.0, target.ctypes.data,
                ldc if in_place else n)
        gemm, get_threads, set_threads = self._gemm, self._get_threads, self._set_threads
        arrays = (stationary, moving, out, target)      # alive as long as their pointers

        def call() -> bool:
            ea = stationary_exponent()
            if ea == 0:
                return False
            eb = moving_exponent()
            if eb == 0 or ea + eb < MIN_EXPONENT_SUM:
                return False
            # OpenMP's thread count is per calling thread: one for this call, then as it
            # was (PyTorch may share this OpenMP runtime and read the count on the thread).
            threads = get_threads()
            set_threads(1)
            try:
                status = gemm(*args)
            finally:
                set_threads(threads)
            if status != 0:
                raise RuntimeError(f"dnnl_gemm_bf16bf16f32 failed with status {status} on a "
                                   f"[{k}, {m}] x [{k}, {n}] product")
            if not in_place:
                np.add(arrays[3], arrays[2], out=arrays[2])
            return True
        return call


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


# Sizes of the library's accumulating calls that `_probe_accumulate` checks: M and N of 2 or
# more (with M or N of 1 the library runs a GEMV kernel that takes C in as its starting sum).
_PROBED_K = (1, 77, 128)
_PROBED_M = (2, 128)
_PROBED_N = (2, 65, 512)


def _accumulation_cases(rng: np.random.Generator):
    """(stationary, moving, held C) for `_probe_accumulate`: C large against the products
    at every probed size, so that adding it first or within rounds differently in most
    elements; then C holding subnormals, which a flush would lose, against products just
    large enough for the GEMM to accept (smallest exponents 2^-56 each)."""
    for k in _PROBED_K:
        for m in _PROBED_M:
            for n in _PROBED_N:
                yield (rng.standard_normal((k, m)).astype(BF16),
                       rng.standard_normal((k, n)).astype(BF16),
                       (rng.standard_normal((m, n)) * 4096).astype(F32))
    k, m, n = 128, 33, 65
    yield (np.ldexp(rng.integers(1, 16, (k, m)), -56).astype(BF16),
           np.ldexp(rng.integers(-15, 16, (k, n)), -56).astype(BF16),
           np.ldexp(rng.integers(-2 ** 20, 2 ** 20, (m, n)), -149).astype(F32))


def _probe_accumulate(gemm: Bf16Gemm) -> bool:
    """Whether the library's beta = 1 gives, bit for bit, its beta = 0 sum of products
    added to C afterwards -- not C taken in as the starting sum, or added within, or
    flushed -- for every case of `_accumulation_cases`."""
    try:
        gemm.accumulates_in_place = True
        for stationary, moving, held in _accumulation_cases(np.random.default_rng(1)):
            summed = np.empty(held.shape, F32)
            # C's rows further apart than its width, as PSUM's partitions are.
            in_place = np.empty((held.shape[0], held.shape[1] + 16), F32)[:, :held.shape[1]]
            in_place[...] = held
            if not (gemm.product(stationary, moving, summed)
                    and gemm.product(stationary, moving, in_place, accumulate=True)):
                return False
            if not np.array_equal(in_place.view(np.uint32), (summed + held).view(np.uint32)):
                return False
        return True
    finally:
        gemm.accumulates_in_place = False


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
        if not _probe(gemm):
            return None
        gemm.accumulates_in_place = _probe_accumulate(gemm)
        return gemm
    except (OSError, AttributeError, RuntimeError):
        return None
