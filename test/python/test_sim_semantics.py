"""Functional semantics of every opcode, against numpy references."""

import ml_dtypes
import numpy as np
import pytest
from scipy import special

from neff_builder import NeffBuilder, execute, hbm, psum, run_kernel, sbuf

RNG = np.random.default_rng(1234)
F32 = np.float32
BF16 = ml_dtypes.bfloat16


def randn(*shape, dtype=F32):
    return RNG.standard_normal(shape).astype(dtype)


def test_mlp_layer_with_two_k_tiles_bias_and_relu():
    """yT = relu(w^T @ xT + bias), K=256 split in two PE passes accumulating in PSUM."""
    b = NeffBuilder("mlp")
    x = b.input("xT", (256, 64))
    w = b.input("w", (256, 128))
    bias = b.input("bias", (128, 1))
    y = b.output("yT", (128, 64))
    x_ready, w_ready, bias_ready, mm_done, act_done = (b.semaphore() for _ in range(5))
    # x and w land in SBUF as [128 partitions, 2 K-tiles, free] by one strided DMA each.
    b.dma(sbuf(128, [2, 64]), hbm(x, 128, [2, 64], partition_stride=64, strides=[128 * 64, 1]),
          queue=0, signal=x_ready, loc="load x")
    b.dma(sbuf(128, [2, 128], offset=512),
          hbm(w, 128, [2, 128], partition_stride=128, strides=[128 * 128, 1]),
          queue=1, signal=w_ready, loc="load w")
    b.dma(sbuf(128, [1], offset=1536), b.view(bias), queue=2, signal=bias_ready)
    for k in range(2):
        b.matmul(psum(128, [64]), sbuf(128, [128], offset=512 + 512 * k),
                 sbuf(128, [64], offset=256 * k), accumulate=k == 1,
                 waits=[(x_ready, 1), (w_ready, 1)] if k == 0 else [],
                 signal=mm_done if k == 1 else -1, loc=f"matmul k{k}")
    b.activate(sbuf(128, [64], offset=2048), psum(128, [64]), "relu",
               bias=sbuf(128, [1], offset=1536), waits=[(mm_done, 1), (bias_ready, 1)],
               signal=act_done, loc="relu")
    b.dma(b.view(y), sbuf(128, [64], offset=2048), queue=0, waits=[(act_done, 1)])

    xv, wv, bv = randn(256, 64), randn(256, 128), randn(128, 1)
    result = execute(b, [xv, wv, bv])
    expected = np.maximum(wv.T.astype(np.float64) @ xv + bv, 0.0)
    np.testing.assert_allclose(result.outputs[0], expected, rtol=1e-5, atol=1e-4)
    assert result.profile.pe_flops == 2 * (2 * 128 * 128 * 64)
    assert result.profile.opcode_counts == {"dma": 4, "matmul": 2, "activate": 1}


def test_matmul_bf16_inputs_accumulate_in_fp32():
    st, mv = randn(64, 32, dtype=BF16), randn(64, 100, dtype=BF16)

    def body(b, i, o, waits, signal):
        done = b.semaphore()
        b.matmul(psum(32, [100]), i["st"], i["mv"], waits=waits, signal=done)
        b.copy(o["y"], psum(32, [100]), engine="act", waits=[(done, 1)], signal=signal)

    out, _ = run_kernel({"st": st, "mv": mv}, {"y": ((32, 100), "f32")}, body)
    expected = st.astype(np.float64).T @ mv.astype(np.float64)
    np.testing.assert_allclose(out["y"], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op, ref", [
    ("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("div", np.divide),
    ("max", np.maximum), ("min", np.minimum),
    ("pow", lambda a, b: np.power(np.abs(a), b)),
    ("eq", lambda a, b: (a == b).astype(F32)), ("ne", lambda a, b: (a != b).astype(F32)),
    ("lt", lambda a, b: (a < b).astype(F32)), ("le", lambda a, b: (a <= b).astype(F32)),
    ("gt", lambda a, b: (a > b).astype(F32)), ("ge", lambda a, b: (a >= b).astype(F32)),
    ("mod", np.fmod), ("bypass", lambda a, b: a),
])
def test_tensor_tensor_float_ops(op, ref):
    a, c = randn(128, 48), randn(128, 48)
    c[:, :8] = a[:, :8]                       # some equal pairs for the comparisons
    if op == "pow":
        a = np.abs(a)

    def body(b, i, o, waits, signal):
        b.tensor_tensor(o["y"], i["a"], i["b"], op, waits=waits, signal=signal)

    out, _ = run_kernel({"a": a, "b": c}, {"y": ((128, 48), "f32")}, body)
    np.testing.assert_allclose(out["y"], ref(a, c).astype(F32), rtol=1e-6)


@pytest.mark.parametrize("op, ref", [("and", np.bitwise_and), ("or", np.bitwise_or),
                                     ("xor", np.bitwise_xor)])
def test_tensor_tensor_bitwise_ops_on_integers(op, ref):
    a = RNG.integers(0, 1 << 20, (32, 16), dtype=np.int32)
    c = RNG.integers(0, 1 << 20, (32, 16), dtype=np.int32)

    def body(b, i, o, waits, signal):
        b.tensor_tensor(o["y"], i["a"], i["b"], op, engine="pool", waits=waits, signal=signal)

    out, _ = run_kernel({"a": a, "b": c}, {"y": ((32, 16), "i32")}, body)
    np.testing.assert_array_equal(out["y"], ref(a, c))


def test_tensor_tensor_bf16_output_rounds_to_nearest_even():
    a, c = randn(128, 64), randn(128, 64)

    def body(b, i, o, waits, signal):
        b.tensor_tensor(o["y"], i["a"], i["b"], "mul", waits=waits, signal=signal)

    out, _ = run_kernel({"a": a, "b": c}, {"y": ((128, 64), "bf16")}, body)
    assert out["y"].dtype == BF16
    np.testing.assert_array_equal(out["y"], (a * c).astype(BF16))


def test_tensor_scalar_immediate_and_two_ops():
    x = randn(128, 40)

    def body(b, i, o, waits, signal):
        b.tensor_scalar(o["y"], i["x"], "mul", 3.0, "add", -1.5, waits=waits, signal=signal)

    out, _ = run_kernel({"x": x}, {"y": ((128, 40), "f32")}, body)
    np.testing.assert_array_equal(out["y"], (x * F32(3.0)) + F32(-1.5))


def test_tensor_scalar_per_partition_operands_and_reverse_flags():
    x, s0, s1 = randn(64, 20), randn(64, 1), np.abs(randn(64, 1)) + 1

    def body(b, i, o, waits, signal):
        # y = s1 / (s0 - x): both operations reversed.
        b.tensor_scalar(o["y"], i["x"], "sub", i["s0"], "div", i["s1"], reverse0=True,
                        reverse1=True, waits=waits, signal=signal)

    out, _ = run_kernel({"x": x, "s0": s0, "s1": s1}, {"y": ((64, 20), "f32")}, body)
    np.testing.assert_allclose(out["y"], s1 / (s0 - x), rtol=1e-6)


def test_tensor_scalar_on_act_with_single_op():
    x = randn(128, 16)

    def body(b, i, o, waits, signal):
        b.tensor_scalar(o["y"], i["x"], "max", 0.25, engine="act", waits=waits, signal=signal)

    out, _ = run_kernel({"x": x}, {"y": ((128, 16), "f32")}, body)
    np.testing.assert_array_equal(out["y"], np.maximum(x, F32(0.25)))


def test_tensor_scalar_reduce_takes_the_max_of_what_it_writes_negated():
    # bf16 output: the reduction is of the rounded values (max commutes with rounding, so
    # -max equals the negated rounded max of the fp32 products exactly).
    x = randn(128, 3, 40)
    s = np.abs(randn(128, 1)) + 0.5

    def body(b, i, o, waits, signal):
        b.tensor_scalar_reduce(o["y"], i["x"], "mul", i["s"], "max", o["m"], negate=True,
                               waits=waits, signal=signal)

    out, _ = run_kernel({"x": x, "s": s}, {"y": ((128, 3, 40), "bf16"), "m": ((128, 1), "f32")},
                        body)
    want = (x * s[:, :, None]).astype(BF16)
    np.testing.assert_array_equal(out["y"], want)
    np.testing.assert_array_equal(out["m"][:, 0],
                                  -want.astype(np.float32).reshape(128, -1).max(axis=1))


@pytest.mark.parametrize("op, ref", [("add", np.sum), ("min", np.min), ("mul", np.prod)])
def test_tensor_scalar_reduce_reductions_and_reverse(op, ref):
    x = randn(64, 24) * 0.5 + 1.0

    def body(b, i, o, waits, signal):
        # y = 2 - x: the immediate on the left (reverse0).
        b.tensor_scalar_reduce(o["y"], i["x"], "sub", 2.0, op, o["r"], reverse0=True,
                               waits=waits, signal=signal)

    out, _ = run_kernel({"x": x}, {"y": ((64, 24), "f32"), "r": ((64, 1), "f32")}, body)
    np.testing.assert_array_equal(out["y"], F32(2.0) - x)
    np.testing.assert_allclose(out["r"][:, 0], ref((F32(2.0) - x).astype(np.float64), axis=1),
                               rtol=1e-5)


@pytest.mark.parametrize("op, ref", [("add", np.sum), ("max", np.max), ("min", np.min),
                                     ("mul", np.prod)])
@pytest.mark.parametrize("dims", [1, 2])
def test_tensor_reduce_innermost_axes(op, ref, dims):
    x = randn(96, 3, 4, 5)
    kept = (96, 3) if dims == 2 else (96, 3, 4)

    def body(b, i, o, waits, signal):
        b.tensor_reduce(o["y"], i["x"], op, dims=dims, waits=waits, signal=signal)

    out, _ = run_kernel({"x": x}, {"y": (kept, "f32")}, body)
    axes = tuple(range(4 - dims, 4))
    np.testing.assert_allclose(out["y"], ref(x.astype(np.float64), axis=axes), rtol=1e-5,
                               atol=1e-6)


def test_tensor_reduce_xor_of_integers():
    x = RNG.integers(0, 1000, (16, 8), dtype=np.int32)

    def body(b, i, o, waits, signal):
        b.tensor_reduce(o["y"], i["x"], "xor", engine="pool", waits=waits, signal=signal)

    out, _ = run_kernel({"x": x}, {"y": ((16, 1), "i32")}, body)
    np.testing.assert_array_equal(out["y"][:, 0], np.bitwise_xor.reduce(x, axis=1))


@pytest.mark.parametrize("dtype, np_dtype", [
    ("bf16", BF16), ("f16", np.float16), ("f8E4M3FN", ml_dtypes.float8_e4m3fn),
    ("f8E5M2", ml_dtypes.float8_e5m2),
])
def test_copy_casts_to_float_types_round_to_nearest_even(dtype, np_dtype):
    x = randn(128, 32) * 4

    def body(b, i, o, waits, signal):
        b.copy(o["y"], i["x"], waits=waits, signal=signal)

    out, _ = run_kernel({"x": x}, {"y": ((128, 32), dtype)}, body)
    assert out["y"].dtype == np.dtype(np_dtype)
    np.testing.assert_array_equal(out["y"].astype(F32), x.astype(np_dtype).astype(F32))


def test_copy_to_integers_rounds_half_to_even_and_saturates():
    x = np.array([[0.5, 1.5, 2.5, -0.5, -2.5, 2.6, 300.0, -300.0, np.nan, np.inf]], F32)

    def body(b, i, o, waits, signal):
        b.copy(o["i8"], i["x"], waits=waits)
        b.copy(o["u8"], i["x"])
        b.copy(o["i32"], i["x"], signal=signal)

    out, _ = run_kernel({"x": x}, {"i8": ((1, 10), "i8"), "u8": ((1, 10), "ui8"),
                                   "i32": ((1, 10), "i32")}, body)
    np.testing.assert_array_equal(out["i8"][0], [0, 2, 2, 0, -2, 3, 127, -128, 0, 127])
    np.testing.assert_array_equal(out["u8"][0], [0, 2, 2, 0, 0, 3, 255, 0, 0, 255])
    np.testing.assert_array_equal(out["i32"][0], [0, 2, 2, 0, -2, 3, 300, -300, 0,
                                                  2**31 - 1])


def test_copy_from_bf16_and_int_sources():
    xb = randn(32, 8, dtype=BF16)
    xi = RNG.integers(-1000, 1000, (32, 8), dtype=np.int16)

    def body(b, i, o, waits, signal):
        b.copy(o["fb"], i["xb"], engine="pool", waits=waits)
        b.copy(o["fi"], i["xi"], engine="pool", signal=signal)

    out, _ = run_kernel({"xb": xb, "xi": xi}, {"fb": ((32, 8), "f32"), "fi": ((32, 8), "f32")},
                        body)
    np.testing.assert_array_equal(out["fb"], xb.astype(F32))
    np.testing.assert_array_equal(out["fi"], xi.astype(F32))


def test_memset_float_and_integer():
    def body(b, i, o, waits, signal):
        b.memset(o["f"], -2.75, engine="act", waits=waits)
        b.memset(o["i"], 7.0, engine="act", signal=signal)

    out, _ = run_kernel({}, {"f": ((128, 5), "f32"), "i": ((16, 3), "i16")}, body)
    np.testing.assert_array_equal(out["f"], np.full((128, 5), -2.75, F32))
    np.testing.assert_array_equal(out["i"], np.full((16, 3), 7, np.int16))


def test_iota_partition_and_free_steps():
    def body(b, i, o, waits, signal):
        b.iota(o["i"], base=5, partition_step=100, step=1, waits=waits)
        b.iota(o["f"], base=0.5, partition_step=0, step=-0.25, signal=signal)

    out, _ = run_kernel({}, {"i": ((128, 2, 3), "i32"), "f": ((4, 6), "f32")}, body)
    p, i = np.arange(128)[:, None, None], np.arange(6).reshape(1, 2, 3)
    np.testing.assert_array_equal(out["i"], 5 + 100 * p + i)
    np.testing.assert_array_equal(out["f"], np.broadcast_to(0.5 - 0.25 * np.arange(6), (4, 6)))


def test_select():
    mask = (RNG.random((64, 24)) > 0.5).astype(F32)
    a, c = randn(64, 24), randn(64, 24)

    def body(b, i, o, waits, signal):
        b.select(o["y"], i["m"], i["a"], i["b"], waits=waits, signal=signal)

    out, _ = run_kernel({"m": mask, "a": a, "b": c}, {"y": ((64, 24), "f32")}, body)
    np.testing.assert_array_equal(out["y"], np.where(mask != 0, a, c))


@pytest.mark.parametrize("src_dtype, dst_dtype", [("f32", "f32"), ("bf16", "bf16"),
                                                  ("bf16", "f32")])
def test_pe_transpose(src_dtype, dst_dtype):
    x = randn(96, 40, dtype=F32 if src_dtype == "f32" else BF16)

    def body(b, i, o, waits, signal):
        done = b.semaphore()
        b.transpose(psum(40, [96], dst_dtype), i["x"], waits=waits, signal=done)
        b.copy(o["y"], psum(40, [96], dst_dtype), waits=[(done, 1)], signal=signal)

    out, _ = run_kernel({"x": x}, {"y": ((40, 96), dst_dtype)}, body)
    np.testing.assert_array_equal(out["y"].astype(F32), x.T.astype(F32))


ACTIVATIONS = {
    "identity": lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
    # 0.5 x (1 + erf(x / sqrt 2)), written with erfc to avoid cancellation for x << 0.
    "gelu": lambda x: 0.5 * x * special.erfc(-x / np.sqrt(2)),
    # 0.5 x (1 + tanh(u)) written as x / (1 + e^(-2u)): no cancellation for u << 0.
    "gelu_tanh": lambda x: x / (1 + np.exp(-2 * np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "reciprocal": lambda x: 1 / x,
    "square": np.square,
    "abs": np.abs,
    "sign": np.sign,
    "erf": special.erf,
    "softplus": lambda x: np.log1p(np.exp(x)),
    "sin": np.sin,
    "cos": np.cos,
    "arctan": np.arctan,
    "gelu_dx": lambda x: 0.5 * special.erfc(-x / np.sqrt(2))
    + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi),
}
POSITIVE_ONLY = {"log", "sqrt", "rsqrt"}


@pytest.mark.parametrize("func", sorted(ACTIVATIONS))
def test_activation_functions_are_precise(func):
    x = randn(128, 64) * 3
    if func in POSITIVE_ONLY:
        x = np.abs(x) + 0.01
    x[0, 0] = 0.0 if func not in POSITIVE_ONLY | {"reciprocal"} else 1.0
    bias = randn(128, 1) * 0.1
    if func in POSITIVE_ONLY:
        bias = np.abs(bias)

    def body(b, i, o, waits, signal):
        b.activate(o["y"], i["x"], func, bias=i["bias"], scale=0.5, waits=waits,
                   signal=signal)

    out, _ = run_kernel({"x": x, "bias": bias}, {"y": ((128, 64), "f32")}, body)
    pre = x * F32(0.5) + bias                                    # fp32, as the engine does
    expected = ACTIVATIONS[func](pre.astype(np.float64)).astype(F32)
    np.testing.assert_allclose(out["y"], expected, rtol=2e-7, atol=1e-30)


def test_activation_with_per_partition_scale_and_accumulated_sum():
    x, scale = randn(128, 3, 32), randn(128, 1)

    def body(b, i, o, waits, signal):
        b.activate(o["y"], i["x"], "exp", scale=i["scale"], accum=o["sum"], waits=waits,
                   signal=signal)

    out, _ = run_kernel({"x": x, "scale": scale},
                        {"y": ((128, 3, 32), "bf16"), "sum": ((128, 1), "f32")}, body)
    e = np.exp((x * scale[:, :, None]).astype(np.float64))
    np.testing.assert_allclose(out["y"].astype(F32), e, rtol=1e-2)
    np.testing.assert_allclose(out["sum"][:, 0], e.sum(axis=(1, 2)), rtol=1e-5)


def test_dma_strided_broadcast_and_casting_patterns():
    b = NeffBuilder("dma patterns")
    x = b.input("x", (8, 16))
    v = b.input("v", (16,))
    ints = b.input("ints", (4, 4), "i32")
    xt = b.output("xt", (16, 8))
    bc = b.output("bc", (32, 16), "bf16")
    fi = b.output("fi", (4, 4))
    copied = b.output("copied", (8, 16))
    step = b.semaphore()
    # Transpose through the DMA's access patterns: read x column by column.
    b.dma(sbuf(16, [8]), hbm(x, 16, [8], partition_stride=1, strides=[16]), queue=0,
          signal=step)
    # Broadcast a vector to 32 partitions (partition stride 0) and cast f32 -> bf16.
    b.dma(sbuf(32, [16], "bf16", offset=64), hbm(v, 32, [16], partition_stride=0), queue=1,
          signal=step)
    # int32 -> f32 cast.
    b.dma(sbuf(4, [4], offset=128), b.view(ints), queue=2, signal=step)
    # HBM -> SBUF at partition 64, then SBUF -> SBUF to partitions 100..107, then out.
    b.dma(sbuf(8, [16], start=64, offset=256), b.view(x), queue=3, signal=step)
    b.dma(sbuf(8, [16], start=100, offset=512), sbuf(8, [16], start=64, offset=256),
          queue=3, signal=step)
    b.dma(b.view(copied), sbuf(8, [16], start=100, offset=512), queue=3, signal=step)
    b.dma(b.view(xt), sbuf(16, [8]), queue=0, waits=[(step, 6)])
    b.dma(b.view(bc), sbuf(32, [16], "bf16", offset=64), queue=1, waits=[(step, 6)])
    b.dma(b.view(fi), sbuf(4, [4], offset=128), queue=2, waits=[(step, 6)])

    xv, vv = randn(8, 16), randn(16)
    iv = RNG.integers(-50, 50, (4, 4), dtype=np.int32)
    outs = execute(b, [xv, vv, iv]).outputs
    np.testing.assert_array_equal(outs[0], xv.T)
    np.testing.assert_array_equal(outs[1], np.broadcast_to(vv.astype(BF16), (32, 16)))
    np.testing.assert_array_equal(outs[2], iv.astype(F32))
    np.testing.assert_array_equal(outs[3], xv)


def test_dma_hbm_to_hbm_and_scratch_round_trip_with_constants():
    b = NeffBuilder("scratch")
    c = b.constant("c", np.arange(12, dtype=F32).reshape(3, 4))
    s = b.scratch("tmp", (3, 4))
    y = b.output("y", (3, 4))
    step = b.semaphore()
    b.dma(b.view(s), b.view(c), queue=0, signal=step)
    b.dma(b.view(y), b.view(s), queue=0, waits=[(step, 1)])
    result = execute(b, [])
    np.testing.assert_array_equal(result.outputs[0], np.arange(12, dtype=F32).reshape(3, 4))
    assert result.profile.dma_bytes == 2 * 48


def test_results_are_deterministic_across_executions():
    from torchneuron.runtime import Device, load

    b = NeffBuilder("twice")
    x = b.input("x", (128, 8))
    y = b.output("y", (128, 8))
    s1, s2 = b.semaphore(), b.semaphore()
    b.dma(sbuf(128, [8]), b.view(x), signal=s1)
    b.activate(sbuf(128, [8], offset=64), sbuf(128, [8]), "tanh", waits=[(s1, 1)], signal=s2)
    b.dma(b.view(y), sbuf(128, [8], offset=64), waits=[(s2, 1)])
    program, device = load(b.to_bytes()), Device()
    first = device.execute(program, [randn(128, 8)])
    xv = randn(128, 8)
    second = device.execute(program, {"x": xv})
    np.testing.assert_array_equal(second.outputs[0], np.tanh(xv.astype(np.float64)).astype(F32))
    assert first.profile.total_ns == second.profile.total_ns


def test_bitwise_tensor_scalar_with_an_immediate():
    """A bitwise ALU op with an immediate operand (a 0-d value) converts it like a tensor."""
    from neff_builder import run_kernel

    x = np.array([[1.0, 2.0, 3.0, 6.0]], dtype=np.float32)

    def body(b, ins, outs, waits, signal):
        b.tensor_scalar(outs["y"], ins["x"], "and", 3.0, waits=waits, signal=signal)

    out, _ = run_kernel({"x": x}, {"y": ((1, 4), "f32")}, body)
    np.testing.assert_array_equal(out["y"], [[1.0, 2.0, 3.0, 2.0]])


def test_identity_activation_with_per_row_operands_gives_tensor_scalar_bits():
    """The compiler hands a row-wise kernel's x - m, x + m and x * s to ACT when DVE is busier
    (compiler/kernels/rows.py _per_row_op), as identity activations with m (negated for the
    subtraction) as the bias or s as the scale: the results must be DVE's, bit for bit,
    written to bf16 as well as fp32, infinities and NaNs included."""
    x = randn(128, 48) * F32(100)
    x[0, :4] = [np.inf, -np.inf, np.nan, 0.0]
    m, s = randn(128, 1), randn(128, 1)
    m[1], s[0], s[2] = np.inf, -1.5, 0.0      # s[0]: x * s = -0 for x = 0

    def body(b, i, o, waits, signal):
        # DVE's instructions first; ACT's wait for all of them (the negated m among them).
        dve_done = b.semaphore()
        b.tensor_scalar(o["neg"], i["m"], "mul", -1.0, waits=waits)
        for dtype in ("f32", "bf16"):
            b.tensor_scalar(o[f"sub_dve_{dtype}"], i["x"], "sub", i["m"])
            b.tensor_scalar(o[f"add_dve_{dtype}"], i["x"], "add", i["m"])
            b.tensor_scalar(o[f"mul_dve_{dtype}"], i["x"], "mul", i["s"],
                            signal=dve_done if dtype == "bf16" else -1)
        for dtype in ("f32", "bf16"):
            b.activate(o[f"sub_act_{dtype}"], i["x"], "identity", bias=o["neg"],
                       waits=[(dve_done, 1)] if dtype == "f32" else [])
            b.activate(o[f"add_act_{dtype}"], i["x"], "identity", bias=i["m"])
            b.activate(o[f"mul_act_{dtype}"], i["x"], "identity", scale=i["s"],
                       signal=signal if dtype == "bf16" else -1)

    outputs = {"neg": ((128, 1), "f32")}
    for op in ("sub", "add", "mul"):
        for engine in ("dve", "act"):
            for dtype in ("f32", "bf16"):
                outputs[f"{op}_{engine}_{dtype}"] = ((128, 48), dtype)
    out, _ = run_kernel({"x": x, "m": m, "s": s}, outputs, body)
    for op in ("sub", "add", "mul"):
        for dtype in ("f32", "bf16"):
            dve, act = out[f"{op}_dve_{dtype}"], out[f"{op}_act_{dtype}"]
            np.testing.assert_array_equal(act.view(np.uint16 if dtype == "bf16" else np.uint32),
                                          dve.view(np.uint16 if dtype == "bf16" else np.uint32))
