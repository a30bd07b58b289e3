"""The host's bf16 GEMM (sim/host_gemm.py): where it computes a bf16 matmul instruction, the
result is the fp32 sum of exact products that widening to fp32 gives; where a subnormal could
arise (the host's bf16 dot products flush them) it declines and the simulator widens."""

import ctypes

import ml_dtypes
import numpy as np
import pytest

from neff_builder import NeffBuilder, execute, psum, run_kernel, sbuf
from torchneuron.runtime import Device, load
from torchneuron.sim import host_gemm

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.float32
GEMM = host_gemm.load()
needs_gemm = pytest.mark.skipif(GEMM is None, reason="no bf16 GEMM on this host")


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def test_the_gemm_loads_on_a_cpu_with_bf16_dot_products():
    if not _cpu_flags() & {"avx512_bf16", "amx_bf16"}:
        pytest.skip("this CPU has no bf16 dot-product instructions")
    assert GEMM is not None


def test_the_knob_turns_it_off(monkeypatch):
    monkeypatch.setenv("TORCHNEURON_SIM_BF16_GEMM", "0")
    assert host_gemm._load() is None


def _padded(values: np.ndarray, pad: int = 40) -> np.ndarray:
    """`values` in a row-major view whose rows lie `pad` elements further apart than its
    width, as SBUF's partitions do."""
    rows, cols = values.shape
    buffer = np.zeros((rows, cols + pad), values.dtype)
    view = buffer[:, :cols]
    view[...] = values
    return view


def _widened(stationary: np.ndarray, moving: np.ndarray) -> np.ndarray:
    return stationary.astype(F32).T @ moving.astype(F32)


@needs_gemm
@pytest.mark.parametrize("k, m, n", [(1, 1, 1), (3, 5, 7), (128, 128, 512), (128, 1, 300),
                                     (64, 128, 1), (128, 96, 33)])
def test_products_are_the_widened_sums_where_every_order_agrees(k, m, n):
    # Small integers: every partial sum is exact in fp32, so any summation order gives
    # the same bits.
    rng = np.random.default_rng(k * 1000 + n)
    stationary = _padded(rng.integers(-16, 17, (k, m)).astype(BF16))
    moving = _padded(rng.integers(-16, 17, (k, n)).astype(BF16))
    out = _padded(np.full((m, n), np.nan, F32))
    assert GEMM.product(stationary, moving, out)
    np.testing.assert_array_equal(out, _widened(stationary, moving))


@needs_gemm
def test_random_products_are_within_a_summation_orders_error():
    rng = np.random.default_rng(0)
    stationary = rng.standard_normal((128, 128)).astype(BF16)
    moving = rng.standard_normal((128, 512)).astype(BF16)
    out = np.empty((128, 512), F32)
    assert GEMM.product(stationary, moving, out)
    a, b = stationary.astype(np.float64), moving.astype(np.float64)
    exact = a.T @ b
    bound = 128 * np.finfo(F32).eps * (np.abs(a).T @ np.abs(b))
    assert np.all(np.abs(out - exact) <= bound)
    assert not np.array_equal(out, np.zeros_like(out))


@needs_gemm
def test_infinities_and_nans_propagate_as_in_the_widened_product():
    stationary = np.array([[np.inf, 1.0, np.nan], [0.0, -np.inf, 2.0]], BF16)     # [K=2, M=3]
    moving = np.array([[1.0, 0.0], [1.0, 3.0]], BF16)                             # [K=2, N=2]
    out = np.empty((3, 2), F32)
    assert GEMM.product(stationary, moving, out)
    with np.errstate(invalid="ignore"):             # inf * 0 and inf - inf: NaN, wanted
        want = _widened(stationary, moving)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_array_equal(out[~np.isnan(want)], want[~np.isnan(want)])


def _power_of_two(exponent: int, mantissa: float = 1.0) -> float:
    return float(np.ldexp(mantissa, exponent))


@needs_gemm
def test_exponent_sums_at_the_bound_are_computed_and_exact():
    # (1 + 2^-7)^2 - (1 + 2^-6) = 2^-14: with both operands' exponents at 2^-56 (biased 71,
    # 71 + 71 = 142), the sum is 2^-126, the smallest normal fp32 number.
    e = -56
    stationary = np.array([[_power_of_two(e, 1 + 2 ** -7)], [_power_of_two(e, 1 + 2 ** -6)]],
                          BF16)
    moving = np.array([[_power_of_two(e, 1 + 2 ** -7)], [-_power_of_two(e)]], BF16)
    out = np.empty((1, 1), F32)
    assert GEMM.product(stationary, moving, out)
    assert out[0, 0] == np.float32(2.0 ** -126) == _widened(stationary, moving)[0, 0]


@needs_gemm
@pytest.mark.parametrize("case", ["exponent sum 141", "subnormal stationary",
                                  "subnormal moving"])
def test_declines_where_a_subnormal_could_arise(case):
    e = -56
    stationary = np.array([[_power_of_two(e, 1 + 2 ** -7)], [_power_of_two(e, 1 + 2 ** -6)]],
                          BF16)
    moving = np.array([[_power_of_two(e, 1 + 2 ** -7)], [-_power_of_two(e)]], BF16)
    if case == "exponent sum 141":
        moving = (moving.astype(F32) / 2).astype(BF16)
    elif case == "subnormal stationary":
        stationary[1, 0] = 1e-39
    else:
        moving[0, 0] = -1e-39
    out = np.full((1, 1), 7.0, F32)
    assert not GEMM.product(stationary, moving, out)
    assert out[0, 0] == 7.0


@needs_gemm
def test_operands_that_are_not_row_major_are_declined():
    rng = np.random.default_rng(1)
    stationary = rng.integers(-4, 5, (16, 8)).astype(BF16)
    moving = rng.integers(-4, 5, (16, 24)).astype(BF16)
    out = np.zeros((8, 12), F32)
    assert not GEMM.product(stationary, moving[:, ::2], out)          # element stride 2
    assert not GEMM.product(stationary[:, ::-1], moving[:, :12], out)
    assert not GEMM.product(stationary, moving[:, :12], np.zeros((12, 8), F32).T)
    assert not out.any()


@needs_gemm
def test_the_calling_threads_openmp_count_is_restored():
    openmp = ctypes.CDLL("libgomp.so.1")
    before = openmp.omp_get_max_threads()
    openmp.omp_set_num_threads(3)
    try:
        ones = np.ones((4, 4), BF16)
        assert GEMM.product(ones, ones, np.empty((4, 4), F32))
        assert openmp.omp_get_max_threads() == 3
    finally:
        openmp.omp_set_num_threads(before)


def test_a_matmul_whose_sum_is_subnormal_keeps_it():
    """The simulator's result where the GEMM declines: the exact fp32 sum, subnormal kept."""
    e = -56
    stationary = np.array([[_power_of_two(e, 1 + 2 ** -7)], [_power_of_two(e, 1 + 2 ** -6)]],
                          BF16)
    moving = np.array([[_power_of_two(e - 1, 1 + 2 ** -7)], [-_power_of_two(e - 1)]], BF16)

    def body(b, i, o, waits, signal):
        done = b.semaphore()
        b.matmul(psum(1, [1]), i["st"], i["mv"], waits=waits, signal=done)
        b.copy(o["y"], psum(1, [1]), engine="act", waits=[(done, 1)], signal=signal)

    out, _ = run_kernel({"st": stationary, "mv": moving}, {"y": ((1, 1), "f32")}, body)
    assert out["y"][0, 0] == np.float32(2.0 ** -127)


def _accumulating_bf16_program() -> NeffBuilder:
    """y[64, 200] = st0^T mv0 + st1^T mv1: two bf16 K-tiles accumulating in one PSUM tile."""
    b = NeffBuilder("bf16_accumulate")
    inputs = [b.input(name, shape, "bf16") for name, shape in
              (("st0", (128, 64)), ("mv0", (128, 200)), ("st1", (128, 64)), ("mv1", (128, 200)))]
    y = b.output("y", (64, 200))
    loaded, multiplied, copied = b.semaphore(), b.semaphore(), b.semaphore()
    places = [sbuf(128, [64], "bf16", offset=0), sbuf(128, [200], "bf16", offset=128),
              sbuf(128, [64], "bf16", offset=640), sbuf(128, [200], "bf16", offset=768)]
    for q, (tid, place) in enumerate(zip(inputs, places)):
        b.dma(place, b.view(tid), queue=q, signal=loaded)
    for k in range(2):
        b.matmul(psum(64, [200]), places[2 * k], places[2 * k + 1], accumulate=k == 1,
                 waits=[(loaded, 4)] if k == 0 else [], signal=multiplied if k else -1)
    b.copy(sbuf(64, [200], offset=2048), psum(64, [200]), waits=[(multiplied, 1)],
           signal=copied)
    b.dma(b.view(y), sbuf(64, [200], offset=2048), queue=0, waits=[(copied, 1)])
    return b


@needs_gemm
def test_replayed_accumulating_bf16_matmuls_give_the_checked_runs_bits(monkeypatch):
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal(shape).astype(BF16)
              for shape in ((128, 64), (128, 200), (128, 64), (128, 200))]
    builder = _accumulating_bf16_program()
    program = load(builder.to_bytes())
    device = Device(program.target)
    device.execute(program, inputs)                 # the checked run
    replayed = device.execute(program, inputs)
    assert program.prepared().replay is not None
    monkeypatch.setenv("TORCHNEURON_SIM_REPLAY", "0")
    checked = execute(builder, inputs)
    np.testing.assert_array_equal(replayed.outputs[0].view(np.uint32),
                                  checked.outputs[0].view(np.uint32))
    st0, mv0, st1, mv1 = (a.astype(np.float64) for a in inputs)
    np.testing.assert_allclose(checked.outputs[0], st0.T @ mv0 + st1.T @ mv1,
                               rtol=1e-5, atol=1e-4)


class _Library:
    """Stand-ins for the oneDNN and OpenMP libraries: a GEMM that returns `status`."""

    def __init__(self, status: int):
        def gemm(*args):
            return status

        def get_threads():
            return 2

        def set_threads(n):
            pass
        self.dnnl_gemm_bf16bf16f32 = gemm
        self.omp_get_max_threads = get_threads
        self.omp_set_num_threads = set_threads


def test_a_failing_library_call_is_an_error_naming_it():
    gemm = host_gemm.Bf16Gemm(_Library(3), _Library(0))
    ones = np.ones((4, 4), BF16)
    with pytest.raises(RuntimeError, match=r"dnnl_gemm_bf16bf16f32 failed with status 3 on a "
                                           r"\[4, 4\] x \[4, 4\] product"):
        gemm.product(ones, ones, np.empty((4, 4), F32))


@pytest.mark.parametrize("status", [0, 3])
def test_a_library_the_probe_finds_wrong_or_failing_is_not_used(status, monkeypatch):
    # status 0 with nothing written: wrong sums; status 3: the call fails.
    monkeypatch.setattr(host_gemm, "_library_path", lambda: "libdnnl.so.3")
    monkeypatch.setattr(host_gemm.ctypes, "CDLL", lambda path: _Library(status))
    assert host_gemm._load() is None


@needs_gemm
@pytest.mark.parametrize("k, m, n", [(128, 128, 512), (77, 33, 65), (128, 64, 1),
                                     (128, 1, 300), (1, 2, 2)])
def test_accumulating_adds_the_finished_sum_to_what_out_holds(k, m, n):
    # PSUM's order: the products' sum first, then that sum plus what the bank held. Held
    # values large against the products make any other order round differently.
    rng = np.random.default_rng(k + m + n)
    stationary = _padded(rng.standard_normal((k, m)).astype(BF16))
    moving = _padded(rng.standard_normal((k, n)).astype(BF16))
    held = (rng.standard_normal((m, n)) * 4096).astype(F32)
    summed = np.empty((m, n), F32)
    out = _padded(held.copy())
    assert GEMM.product(stationary, moving, summed)
    assert GEMM.product(stationary, moving, out, accumulate=True)
    np.testing.assert_array_equal(out.view(np.uint32), (summed + held).view(np.uint32))


@needs_gemm
def test_the_library_on_this_host_accumulates_in_place():
    """oneDNN's GEMM kernel adds C after the K sum (its GEMV kernel, for M or N of 1, does
    not: those sizes accumulate through a scratch array)."""
    if not _cpu_flags() & {"avx512_bf16", "amx_bf16"}:
        pytest.skip("this CPU has no bf16 dot-product instructions")
    assert GEMM.accumulates_in_place


class _FakeGemm:
    """A GEMM computed with numpy whose accumulation takes C in as its starting sum
    (`c_first`) or adds it after the K sum."""

    def __init__(self, c_first: bool):
        self.c_first = c_first
        self.accumulates_in_place = False

    def product(self, stationary, moving, out, accumulate=False):
        products = stationary.astype(F32)[:, :, None] * moving.astype(F32)[:, None, :]
        total = out.copy() if accumulate and self.c_first else np.zeros(out.shape, F32)
        for term in products:                   # K terms, one fp32 rounding each
            total = total + term
        if accumulate and not self.c_first:
            total = total + out
        out[...] = total
        return True


@pytest.mark.parametrize("c_first", [False, True])
def test_the_accumulation_probe_tells_the_orders_apart(c_first):
    assert host_gemm._probe_accumulate(_FakeGemm(c_first)) is not c_first


def _reused_operand_program() -> NeffBuilder:
    """Two matmuls reading the same stationary and moving tiles ([2, 2] bf16); then the
    moving tile is loaded again, from `mv2`, and a third matmul reads it. y<i> is matmul i's
    [2, 2] product."""
    b = NeffBuilder("reused_operands")
    st, mv1, mv2 = (b.input(name, (2, 2), "bf16") for name in ("st", "mv1", "mv2"))
    ys = [b.output(f"y{i}", (2, 2)) for i in range(3)]
    # In different blocks of bytes (host_threads.ONCHIP_GRANULE): the reload of one is not
    # a write near the other.
    stationary, moving = sbuf(2, [2], "bf16", offset=0), sbuf(2, [2], "bf16", offset=1024)
    loaded, reloaded, multiplied, copied = (b.semaphore() for _ in range(4))
    b.dma(stationary, b.view(st), queue=0, signal=loaded)
    b.dma(moving, b.view(mv1), queue=1, signal=loaded)
    for i in range(2):
        b.matmul(psum(2, [2], offset=8 * i), stationary, moving,
                 waits=[(loaded, 2)] if i == 0 else [], signal=multiplied)
    b.dma(moving, b.view(mv2), queue=1, waits=[(multiplied, 2)], signal=reloaded)
    b.matmul(psum(2, [2], offset=16), stationary, moving, waits=[(reloaded, 1)],
             signal=multiplied)
    for i in range(3):
        b.copy(sbuf(2, [2], offset=128 + 8 * i), psum(2, [2], offset=8 * i),
               waits=[(multiplied, 3)] if i == 0 else [], signal=copied)
    for i, y in enumerate(ys):
        b.dma(b.view(y), sbuf(2, [2], offset=128 + 8 * i), queue=0,
              waits=[(copied, 3)] if i == 0 else [])
    return b


@needs_gemm
def test_a_replay_scans_an_operand_again_after_it_is_written():
    """The first two matmuls share one scan of their operands; the moving tile's reload
    brings values whose products are subnormal, which the GEMM would flush: the third
    matmul's scan must see them and widen, on every run."""
    e = -56
    column = [_power_of_two(e, 1 + 2 ** -7), _power_of_two(e, 1 + 2 ** -6)]
    stationary = np.array([column, column], BF16).T              # [K=2, M=2]
    normal = np.array([[_power_of_two(60, 1 + 2 ** -7)] * 2, [-_power_of_two(60)] * 2], BF16)
    tiny = np.array([[_power_of_two(e - 1, 1 + 2 ** -7)] * 2, [-_power_of_two(e - 1)] * 2],
                    BF16)
    program = load(_reused_operand_program().to_bytes())
    device = Device(program.target)
    runs = [device.execute(program, [stationary, normal, tiny]) for _ in range(3)]
    replay = program.prepared().replay
    assert replay is not None
    matmuls = [ins for ins in replay.order if ins.opcode.name == "MATMUL"]
    first, second, third = ([replay.scans.scan(ins, slot, None) for slot in (1, 2)]
                            for ins in matmuls)
    assert first[0] is second[0] is third[0]        # the stationary tile, never rewritten
    assert first[1] is second[1] and third[1] is not first[1]
    want = _widened(stationary, normal)
    for run in runs:
        y0, y1, y2 = run.outputs
        np.testing.assert_array_equal(y0, want)
        np.testing.assert_array_equal(y1, want)
        np.testing.assert_array_equal(y2, np.full((2, 2), 2.0 ** -127, F32))
