"""Numerics of the simulated engines, through the real instruction path (hand-built programs):

- every activation function within 2 ulp of a float64 reference rounded to fp32, over the
  whole fp32 range (NaN and inf exact);
- bf16 / fp16 / fp8 (e4m3fn, e5m2) storage: DMA casts and ACT/DVE output casts round to
  nearest-even exactly as ml_dtypes does, and widening is exact;
- matmuls with bf16/fp16/fp8 inputs use the rounded inputs and accumulate in fp32.
"""

import math

import ml_dtypes
import numpy as np
import pytest
from scipy import special

from neff_builder import NeffBuilder, execute, hbm, psum, run_kernel, sbuf

# numpy warns about the overflow and NaN casts these tests make on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
F64 = np.float64
RNG = np.random.default_rng(20240611)
TINY = np.finfo(F32).smallest_subnormal
BIG = np.finfo(F32).max


# -- ulp distance ---------------------------------------------------------------------------

def ordinal(x: np.ndarray) -> np.ndarray:
    """fp32 values mapped to integers in value order, adjacent floats one apart (+0 = -0)."""
    i = np.asarray(x, F32).view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def ulp_errors(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """ulp distance of finite results; inf where NaN/inf do not match exactly."""
    got, ref = np.asarray(got, F32).ravel(), np.asarray(ref, F32).ravel()
    dist = np.abs(ordinal(got) - ordinal(ref)).astype(F64)
    special_ = ~np.isfinite(got) | ~np.isfinite(ref)
    same = (np.isnan(got) & np.isnan(ref)) | (got == ref)
    dist[special_] = np.where(same[special_], 0.0, np.inf)
    return dist


def test_ulp_distance_helper():
    one = F32(1.0)
    assert ulp_errors(np.nextafter(one, F32(2)), one)[0] == 1
    assert ulp_errors(F32(-0.0), F32(0.0))[0] == 0
    assert ulp_errors(TINY, -TINY)[0] == 2
    assert ulp_errors(np.inf, BIG)[0] == np.inf        # inf must match exactly
    assert ulp_errors(np.nan, np.nan)[0] == 0 and ulp_errors(np.nan, 1.0)[0] == np.inf


# -- activation functions -------------------------------------------------------------------

def _softplus(x):
    with np.errstate(over="ignore"):
        return np.where(x > 0, x + np.log1p(np.exp(-np.abs(x))), np.log1p(np.exp(x)))


def _gelu_tanh(x):
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
    with np.errstate(over="ignore"):
        return x / (1.0 + np.exp(-2.0 * u))          # 0.5 x (1 + tanh u), no cancellation


# float64 references written independently of the simulator's formulas.
REFERENCES = {
    "identity": lambda x: x,
    "relu": lambda x: np.where(np.isnan(x) | (x > 0), x, 0.0),   # relu(NaN) = NaN
    "gelu": lambda x: 0.5 * x * special.erfc(-x / math.sqrt(2)),
    "gelu_tanh": _gelu_tanh,
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "reciprocal": lambda x: 1.0 / x,
    "square": lambda x: x * x,
    "abs": np.abs,
    "sign": np.sign,
    "erf": special.erf,
    "softplus": _softplus,
    "sin": np.sin,
    "cos": np.cos,
    "arctan": np.arctan,
    "gelu_dx": lambda x: 0.5 * special.erfc(-x / math.sqrt(2))
    + np.where(np.isinf(x), 0.0, x * np.exp(-x * x / 2)) / math.sqrt(2 * math.pi),
}

SPECIALS = np.array([0.0, -0.0, TINY, -TINY, 1e-40, -1e-40, np.finfo(F32).tiny, 1.0, -1.0, 0.5,
                     2.0, 1e-7, BIG, -BIG, np.inf, -np.inf, np.nan], F32)


def wide(n: int, lo: float = -45.0, hi: float = 38.5, positive: bool = False) -> np.ndarray:
    """Log-uniform magnitudes over [10^lo, 10^hi] (every fp32 decade, subnormals included)."""
    mags = 10.0 ** RNG.uniform(lo, hi, n)
    signs = 1.0 if positive else RNG.choice([-1.0, 1.0], n)
    return (mags * signs).astype(F32)


def uniform(n: int, lo: float, hi: float) -> np.ndarray:
    return RNG.uniform(lo, hi, n).astype(F32)


def near(points, n_each: int = 16) -> np.ndarray:
    """The fp32 neighbours of each point (n_each ulps on either side)."""
    out = []
    for p in np.asarray(points, F32):
        v = p
        for _ in range(n_each):
            v = np.nextafter(v, F32(np.inf))
            out.append(v)
        v = p
        for _ in range(n_each):
            v = np.nextafter(v, F32(-np.inf))
            out.append(v)
    return np.array(out, F32)


def _trig_inputs():
    k = np.unique(RNG.integers(1, 10**7, 400)).astype(F64)
    multiples_of_pi = np.concatenate([(k * np.pi).astype(F32), (k * np.pi / 2).astype(F32)])
    return np.concatenate([uniform(1000, -10, 10), wide(1500, 3, 38.5), uniform(500, 1e4, 1e5),
                           multiples_of_pi, near([1e4, 1e5, 1e6, 8388608.0, 3.0e38])])


def _exp_inputs():
    ln_max, ln_tiny, ln_sub = math.log(BIG), math.log(np.finfo(F32).tiny), math.log(TINY)
    return np.concatenate([uniform(2000, -110, 90), wide(500, -45, 3),
                           near([ln_max, ln_tiny, ln_sub, ln_sub - 0.7], 32)])


def _positive_decades():
    return np.concatenate([wide(3000, -45, 38.5, positive=True), wide(300),
                           uniform(500, 0, 4), near([1.0, 2.0, 4.0, TINY, 1e-38], 8)])


INPUTS = {
    "sin": _trig_inputs, "cos": _trig_inputs, "exp": _exp_inputs,
    "log": _positive_decades, "sqrt": _positive_decades, "rsqrt": _positive_decades,
    "reciprocal": _positive_decades,
    "gelu": lambda: np.concatenate([uniform(2000, -20, 20), uniform(500, -15, -5), wide(1500)]),
    "gelu_tanh": lambda: np.concatenate([uniform(2000, -12, 12), uniform(500, -8, -2),
                                         wide(1500)]),
    "silu": lambda: np.concatenate([uniform(2000, -110, 100), wide(2000)]),
    "softplus": lambda: np.concatenate([uniform(2000, -110, 100), wide(2000)]),
    "sigmoid": lambda: np.concatenate([uniform(2000, -110, 100), wide(2000)]),
    "tanh": lambda: np.concatenate([uniform(2000, -12, 12), wide(2000)]),
    "erf": lambda: np.concatenate([uniform(2000, -6, 6), wide(2000)]),
    # Around its root (-0.7518...) the result passes through zero.
    "gelu_dx": lambda: np.concatenate([uniform(2000, -40, 40), uniform(1000, -1, -0.5),
                                       near([-0.75179, -0.7518, -0.75175], 64), wide(1500)]),
}


def activate(func: str, x: np.ndarray) -> np.ndarray:
    """ACTIVATE `func` with scale 1 and no bias on x (padded to 128 partitions)."""
    n = -(-x.size // 128)
    padded = np.resize(x, 128 * n).reshape(128, n)

    def body(b, i, o, waits, signal):
        b.activate(o["y"], i["x"], func, scale=1.0, waits=waits, signal=signal)

    out, _ = run_kernel({"x": padded}, {"y": ((128, n), "f32")}, body)
    return out["y"].ravel()[:x.size]


# Largest ulp error each function may show (the budget is 2 for all).
MAX_ULP = 2


@pytest.mark.parametrize("func", sorted(REFERENCES))
def test_activation_within_2_ulp_of_float64_reference(func):
    x = np.concatenate([SPECIALS, INPUTS.get(func, lambda: np.concatenate(
        [uniform(2000, -100, 100), wide(2000)]))()])
    got = activate(func, x)
    with np.errstate(all="ignore"):
        ref = REFERENCES[func](x.astype(F64)).astype(F32)
    errors = ulp_errors(got, ref)
    worst = int(np.argmax(errors))
    print(f"{func}: max {errors.max():g} ulp over {x.size} inputs")
    assert errors.max() <= MAX_ULP, (
        f"{func}({x[worst]!r}) = {got[worst]!r}, reference {ref[worst]!r}: "
        f"{errors[worst]} ulp")


def test_activation_nan_and_inf_rules():
    x = np.array([0.0, -0.0, -1.0, np.inf, -np.inf, np.nan], F32)
    with np.errstate(all="ignore"):
        expected = {
            "log": [-np.inf, -np.inf, np.nan, np.inf, np.nan, np.nan],
            "sqrt": [0.0, -0.0, np.nan, np.inf, np.nan, np.nan],
            "rsqrt": [np.inf, -np.inf, np.nan, 0.0, np.nan, np.nan],
            "reciprocal": [np.inf, -np.inf, -1.0, 0.0, -0.0, np.nan],
            "exp": [1.0, 1.0, math.exp(-1), np.inf, 0.0, np.nan],
            "sigmoid": [0.5, 0.5, 1 / (1 + math.e), 1.0, 0.0, np.nan],
            "sign": [0.0, 0.0, -1.0, 1.0, -1.0, np.nan],
        }
    for func, want in expected.items():
        got = activate(func, x)
        assert ulp_errors(got, np.array(want, F32)).max() == 0, (func, got)


def test_functions_evaluated_in_fp32_give_the_float64_evaluation_bit_for_bit():
    # The simulator evaluates these in fp32 for speed; the claim that this is the float64
    # evaluation rounded once must hold for every input class, NaN payloads included.
    from torchneuron.sim.semantics import ACTIVATIONS, EXACT_IN_FP32

    x = np.concatenate([SPECIALS, wide(20000), -wide(20000), uniform(2000, -3, 3),
                        np.array([np.inf, -np.inf, np.nan, 1.8e19, 1.9e19, -2e19], F32)])
    assert x.dtype == F32
    for func in EXACT_IN_FP32:
        with np.errstate(all="ignore"):
            fast = ACTIVATIONS[func](x)
            reference = ACTIVATIONS[func](x.astype(F64)).astype(F32)
        assert fast.dtype == F32, func
        assert np.array_equal(fast.view(np.uint32), reference.view(np.uint32)), func


# -- storage formats: DMA casts and engine output casts -------------------------------------

LOW_PRECISION = {
    "bf16": ml_dtypes.bfloat16, "f16": np.float16,
    "f8E4M3FN": ml_dtypes.float8_e4m3fn, "f8E5M2": ml_dtypes.float8_e5m2,
}


def all_values(np_dtype) -> np.ndarray:
    """Every bit pattern of a 1- or 2-byte float type."""
    bits = np.arange(2 ** (8 * np.dtype(np_dtype).itemsize), dtype=np.uint64)
    return bits.astype(np.uint8 if np.dtype(np_dtype).itemsize == 1 else np.uint16) \
        .view(np_dtype)


def to_partitions(x: np.ndarray) -> np.ndarray:
    n = -(-x.size // 128)
    return np.resize(x, 128 * n).reshape(128, n)


def halfway_and_random_f32(np_dtype, n=4096) -> np.ndarray:
    """fp32 values that stress rounding to `np_dtype`: exact midpoints between neighbours
    (ties), their fp32 neighbours, random values across the type's range, specials."""
    vals = all_values(np_dtype).astype(F64)
    vals = np.unique(vals[np.isfinite(vals)])
    mids = ((vals[:-1] + vals[1:]) / 2).astype(F32)            # exact in fp32
    mids = RNG.choice(mids, min(n, mids.size), replace=False)
    top = float(vals.max())
    over = np.array([top * 1.01, top * 1.1, top * 2, -top * 1.01, 1e30, -1e30], F32)
    rand = (RNG.standard_normal(n) * RNG.choice([1e-3, 1.0, 100.0, top / 4], n)).astype(F32)
    return np.concatenate([mids, np.nextafter(mids, F32(np.inf)),
                           np.nextafter(mids, F32(-np.inf)), rand, over, SPECIALS])


def dma_round_trip(x: np.ndarray, storage: str, out: str) -> np.ndarray:
    """HBM x -> DMA cast to `storage` in SBUF -> DMA cast to `out` in HBM."""
    x2 = to_partitions(x)
    in_label = {np.dtype(v): k for k, v in LOW_PRECISION.items()}.get(x2.dtype, "f32")
    b = NeffBuilder("dma cast")
    xt = b.input("x", x2.shape, in_label)
    yt = b.output("y", x2.shape, out)
    s = b.semaphore()
    b.dma(sbuf(128, [x2.shape[1]], storage), b.view(xt), queue=0, signal=s)
    b.dma(b.view(yt), sbuf(128, [x2.shape[1]], storage), queue=1, waits=[(s, 1)])
    return execute(b, [x2]).outputs[0].ravel()[:x.size]


def same_values(a, b) -> bool:
    a, b = np.asarray(a).astype(F32), np.asarray(b).astype(F32)
    return bool(np.all((a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))))


@pytest.mark.parametrize("storage", sorted(LOW_PRECISION))
def test_dma_cast_from_fp32_rounds_to_nearest_even(storage):
    np_dtype = LOW_PRECISION[storage]
    x = halfway_and_random_f32(np_dtype)
    got = dma_round_trip(x, storage, "f32")
    assert same_values(got, x.astype(np_dtype).astype(F32))
    # Ties go to the even neighbour: the stored mantissa's last bit is 0.
    vals = all_values(np_dtype)
    finite = np.isfinite(vals.astype(F64))
    order = np.argsort(vals[finite].astype(F64), kind="stable")
    sorted_vals = vals[finite][order].astype(F64)
    mids = ((sorted_vals[:-1] + sorted_vals[1:]) / 2).astype(F32)
    pick = RNG.choice(mids.size, min(2048, mids.size), replace=False)
    mids = mids[pick]
    mids = mids[mids != 0]
    rounded = dma_round_trip(mids, storage, storage)
    bits = rounded.view(np.uint8 if np.dtype(np_dtype).itemsize == 1 else np.uint16)
    ok = np.isfinite(rounded.astype(F32))
    assert np.all(bits[ok] & 1 == 0)


def test_bf16_rounding_matches_the_bit_formula():
    """fp32 -> bf16 round-to-nearest-even, computed on the bits (independent of ml_dtypes)."""
    x = halfway_and_random_f32(ml_dtypes.bfloat16)
    x = x[np.isfinite(x)]
    got = dma_round_trip(x, "bf16", "bf16").view(np.uint16)
    bits = x.view(np.uint32).astype(np.uint64)
    expected = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    assert np.array_equal(got, expected)


@pytest.mark.parametrize("storage", sorted(LOW_PRECISION))
def test_every_value_widens_exactly_and_narrows_back_unchanged(storage):
    """All bit patterns: X -> fp32 (DMA cast) is exact, and fp32 -> X gives the same bits
    (NaNs stay NaN)."""
    np_dtype = LOW_PRECISION[storage]
    vals = all_values(np_dtype)
    widened = dma_round_trip(vals, storage, "f32")
    assert same_values(widened, vals.astype(F32))
    if storage == "bf16":
        expected = (vals.view(np.uint16).astype(np.uint32) << 16).view(F32)
        assert same_values(widened, expected)
    back = dma_round_trip(widened, "f32", storage)
    finite = ~np.isnan(vals.astype(F32))
    assert back[finite].tobytes() == vals[finite].tobytes()
    assert np.all(np.isnan(back[~finite].astype(F32)))


@pytest.mark.parametrize("src, dst", [("bf16", "f8E4M3FN"), ("bf16", "f8E5M2"),
                                      ("f16", "f8E4M3FN"), ("f8E5M2", "bf16"),
                                      ("f8E4M3FN", "f16"), ("f16", "bf16")])
def test_dma_converts_between_narrow_types_directly(src, dst):
    """A narrow -> narrow DMA rounds once, from the source value (no fp32 detour is
    observable: the source widens to fp32 exactly)."""
    vals = all_values(LOW_PRECISION[src])
    got = dma_round_trip(vals, src, dst)
    assert same_values(got, vals.astype(LOW_PRECISION[dst]))


@pytest.mark.parametrize("engine_op", ["act activate", "act copy", "dve copy",
                                       "dve tensor_scalar", "pool copy"])
@pytest.mark.parametrize("storage", sorted(LOW_PRECISION))
def test_engine_output_casts_round_to_nearest_even(engine_op, storage):
    np_dtype = LOW_PRECISION[storage]
    x = to_partitions(halfway_and_random_f32(np_dtype, n=2048))
    engine, op = engine_op.split()

    def body(b, i, o, waits, signal):
        if op == "activate":
            b.activate(o["y"], i["x"], "identity", scale=1.0, waits=waits, signal=signal)
        elif op == "copy":
            b.copy(o["y"], i["x"], engine=engine, waits=waits, signal=signal)
        else:   # x * 1, computed in fp32, then converted on write
            b.tensor_scalar(o["y"], i["x"], "mul", 1.0, engine=engine, waits=waits,
                            signal=signal)

    out, _ = run_kernel({"x": x}, {"y": (x.shape, storage)}, body)
    assert out["y"].dtype == np.dtype(np_dtype)
    assert same_values(out["y"], x.astype(np_dtype))


def test_fp8_overflow_follows_ml_dtypes():
    """Documented choice: beyond the largest finite value (after rounding) e4m3fn gives NaN
    (it has no inf), e5m2 gives inf."""
    x = np.array([448.0, 464.0, 465.0, 1e6, -1e6, 57344.0, 61440.0, 1e6], F32)
    e4 = dma_round_trip(x[:5], "f8E4M3FN", "f32")
    e5 = dma_round_trip(x[5:], "f8E5M2", "f32")
    np.testing.assert_array_equal(e4[:2], [448.0, 448.0])
    assert np.all(np.isnan(e4[2:]))
    np.testing.assert_array_equal(e5, [57344.0, np.inf, np.inf])


# -- matmul inputs and accumulation ---------------------------------------------------------

@pytest.mark.parametrize("st_type, mv_type", [("bf16", "bf16"), ("f16", "f16"),
                                              ("f8E4M3FN", "f8E4M3FN"), ("f8E5M2", "f8E5M2"),
                                              ("f8E4M3FN", "f8E5M2"), ("bf16", "f8E4M3FN")])
def test_matmul_rounds_inputs_and_accumulates_in_fp32(st_type, mv_type):
    """fp32 data DMA-cast to the input types, then yT = st^T @ mv over K = 2 x 128 (two
    accumulating passes): equal to float64 of the rounded inputs within fp32 accumulation
    error, and measurably not the product of the unrounded inputs."""
    k, m, n = 256, 96, 200
    a = RNG.standard_normal((k, m)).astype(F32)
    c = (RNG.standard_normal((k, n)) * 2).astype(F32)
    b = NeffBuilder("mm")
    at, ct = b.input("a", (k, m)), b.input("c", (k, n))
    yt = b.output("y", (m, n))
    loaded, mm, done = b.semaphore(), b.semaphore(), b.semaphore()
    isz = {"bf16": 2, "f16": 2}.get(st_type, 1), {"bf16": 2, "f16": 2}.get(mv_type, 1)
    c_off = -(-2 * m * isz[0] // 64) * 64
    for t in range(2):
        b.dma(sbuf(128, [m], st_type, offset=t * m * isz[0]), _rows(at, t, m), queue=0,
              signal=loaded)
        b.dma(sbuf(128, [n], mv_type, offset=c_off + t * n * isz[1]), _rows(ct, t, n),
              queue=1, signal=loaded)
    for t in range(2):
        b.matmul(psum(m, [n]), sbuf(128, [m], st_type, offset=t * m * isz[0]),
                 sbuf(128, [n], mv_type, offset=c_off + t * n * isz[1]), accumulate=t == 1,
                 waits=[(loaded, 4)] if t == 0 else [], signal=mm if t == 1 else -1)
    b.copy(sbuf(m, [n], offset=8192), psum(m, [n]), engine="act", waits=[(mm, 1)],
           signal=done)
    b.dma(b.view(yt), sbuf(m, [n], offset=8192), queue=2, waits=[(done, 1)])
    y = execute(b, [a, c]).outputs[0].astype(F64)

    ar = a.astype(LOW_PRECISION[st_type]).astype(F64)
    cr = c.astype(LOW_PRECISION[mv_type]).astype(F64)
    exact = ar.T @ cr
    bound = k * 2.0 ** -24 * (np.abs(ar).T @ np.abs(cr)) + 1e-30   # fp32 accumulation
    assert np.all(np.abs(y - exact) <= bound)
    unrounded = a.astype(F64).T @ c.astype(F64)
    assert np.abs(y - unrounded).max() > 10 * np.abs(y - exact).max()


def _rows(tensor, t, width):
    """K-tile t (rows t*128 .. t*128+127) of an HBM [K, width] tensor."""
    return hbm(tensor, 128, [width], offset=t * 128 * width, partition_stride=width)


def test_mixed_fp32_and_bf16_matmul_is_rejected():
    """(Also in test_sim_rules: fp32 matmul inputs pair only with fp32.)"""
    from torchneuron.sim import ConstraintError

    b = NeffBuilder("mixed")
    ready = b.semaphore()
    b.memset(sbuf(128, [64]), 1.0, signal=ready)
    b.memset(sbuf(128, [64], "bf16", offset=512), 1.0, signal=ready)
    b.matmul(psum(64, [64]), sbuf(128, [64]), sbuf(128, [64], "bf16", offset=512),
             waits=[(ready, 2)])
    with pytest.raises(ConstraintError, match="fp32 matmul inputs pair only with fp32"):
        execute(b, [])
