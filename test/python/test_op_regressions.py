"""Ops the OpInfo sweep once found wrong, compiled with fallback off so they run natively."""

import pytest

torch = pytest.importorskip("torch")


def _native(fn, *args):
    torch._dynamo.reset()
    return torch.compile(fn, backend="neuron", options={"fallback": False})(*args)


def test_logcumsumexp_of_large_values_does_not_overflow():
    # log(cumsum(exp(x))) overflows to inf from x ~ 89; the logaddexp scan does not.
    x = torch.randn(3, 10, generator=torch.Generator().manual_seed(0)) * 1e4
    got = _native(lambda a: torch.logcumsumexp(a, 1), x)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, torch.logcumsumexp(x, 1), rtol=1e-5, atol=1e-3)


def test_bf16_round_is_computed_in_fp32():
    # Adding 2^23 to a bf16 value to round it would lose the value itself.
    x = (torch.randn(4, 16, generator=torch.Generator().manual_seed(1)) * 50).bfloat16()
    torch.testing.assert_close(_native(torch.round, x), torch.round(x), rtol=0, atol=0)


def test_bf16_op_computes_in_fp32_and_rounds_once():
    # Eager computes a bf16 gelu in fp32 and rounds the result; the fused body must too
    # (its constant sqrt(1/2) folds rather than failing to compile).
    x = (torch.randn(64, 64, generator=torch.Generator().manual_seed(3)) * 3).bfloat16()
    fn = torch.nn.functional.gelu
    got = _native(fn, x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, fn(x), rtol=0, atol=2 ** -14)


def test_integer_floor_division():
    # int8 data widened to int32: values the compiler bounds by 2^24 (partition.integer_bound),
    # which the engines' fp32 computes exactly.
    a = torch.tensor([7, -7, 9, -9, 100, 0], dtype=torch.int8)
    b = torch.tensor([2, 2, -4, -4, 7, 3], dtype=torch.int8)
    for mode in ("floor", "trunc"):
        fn = lambda p, q: torch.div(p.int(), q.int(), rounding_mode=mode)  # noqa: E731
        assert torch.equal(_native(fn, a, b), fn(a, b))


def test_integer_arithmetic_the_compiler_cannot_bound_falls_back():
    # int32/int64 inputs can hold any value: their arithmetic is exact on the engines only
    # to 2^24 (and saturates where PyTorch wraps), so it runs in PyTorch, reported.
    from torchneuron import backend

    a = torch.tensor([2 ** 30, -2 ** 31 + 1, 7], dtype=torch.int32)
    b = torch.tensor([3, 7, 2], dtype=torch.int32)
    for fn in (lambda p, q: p // q, lambda p, q: p * q * 3, torch.fmod,
               lambda p, q: (p.long() * 3 + 1).sum()):
        torch._dynamo.reset()
        first = len(backend.graph_reports())
        assert torch.equal(torch.compile(fn, backend="neuron")(a, b), fn(a, b))
        fallbacks = [n for r in backend.graph_reports()[first:] for n in r.fallbacks]
        assert fallbacks and all(n.category == "dtype" and "2^24" in n.reason
                                 for n in fallbacks)


@pytest.mark.parametrize("fn, low, high", [
    (torch.atan, -20, 20), (torch.asin, -1, 1), (torch.acos, -1, 1), (torch.asinh, -20, 20),
    (torch.acosh, 1, 20), (torch.atanh, -1, 1), (torch.sinh, -20, 20), (torch.cosh, -20, 20),
])
def test_inverse_trig_and_hyperbolic_functions(fn, low, high):
    # Expanded around the scalar engine's arctan, log, exp, sqrt and tanh; the edges of the
    # domain (+-1, 0, large |x|, values outside it) keep eager's special values.
    g = torch.Generator().manual_seed(4)
    x = torch.rand(128, 16, generator=g) * (high - low) + low
    x[0, :10] = torch.tensor([0.0, 1.0, -1.0, 1e-6, -1e-6, 0.1, 5000.0, -5000.0, 1.5, -1.5])
    torch.testing.assert_close(_native(fn, x), fn(x), rtol=2e-6, atol=1e-6, equal_nan=True)


def test_atan2_quadrants():
    y = torch.tensor([1.0, 1.0, -1.0, -1.0, 0.0, 0.0, 2.0, -2.0, 0.0, 3.0])
    x = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 0.0, 0.0, 0.0, 1e-3])
    torch.testing.assert_close(_native(torch.atan2, y, x), torch.atan2(y, x), rtol=1e-6,
                               atol=1e-7)


def test_tensors_with_no_elements_run_natively():
    # Empty inputs are never read, empty outputs never written; reductions over an empty
    # dim give their identity, and torch.empty's output is written (with zeros).
    x = torch.randn(3, 4)
    got = _native(lambda a: (*torch.split(a, [1, 0, 2]), a.repeat(0, 1), a[:, :0].sum(1),
                             a[:0].prod(0), torch.linspace(0, 1, 0)), x)
    want = (*torch.split(x, [1, 0, 2]), x.repeat(0, 1), x[:, :0].sum(1), x[:0].prod(0),
            torch.linspace(0, 1, 0))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    empty = _native(lambda a: (torch.empty(2, 3), a + 1)[0], x)
    assert empty.shape == (2, 3) and empty.dtype == torch.float32


@pytest.mark.parametrize("pad", [(1, 2, 0, 0), (2, 1, 1, 0)])
def test_circular_pad(pad):
    # The padded tensor is built in place: its ends are copied from the interior slice that
    # was just written, so the copies must read the destination, not a stale source.
    x = torch.randn(2, 3, 5, 6)
    fn = lambda a: torch.nn.functional.pad(a, pad, mode="circular")
    torch.testing.assert_close(_native(fn, x), fn(x))


def test_squeeze_dims_compiles_as_a_view():
    # torch-mlir has no lowering for aten.squeeze.dims (core-ATen's form of squeeze); the
    # frontend imports it as a view, under the node's own name.
    from torch.fx.experimental.proxy_tensor import make_fx

    from torchneuron import backend

    x = torch.randn(1, 3, 1, 4)
    gm = make_fx(lambda a: torch.ops.aten.squeeze.dims(a, [0, 2]).exp())(x)
    assert any(n.target is torch.ops.aten.squeeze.dims for n in gm.graph.nodes)
    compiled = backend.compile_fx_graph(gm, [x], "squeeze_dims", {"fallback": False})
    got = compiled(x)
    torch.testing.assert_close(got, x.squeeze(0).squeeze(1).exp())
    assert not compiled.report.fallbacks


def test_bf16_constants_are_stored():
    # The MLIR bindings hand no bf16 buffer to numpy: constants (splat and not) are read from
    # the attribute's text, including NaN/inf bit patterns.
    x = torch.randn(8, 10, generator=torch.Generator().manual_seed(5)).bfloat16()
    fn = lambda a: (torch.full((10,), 2.5, dtype=torch.bfloat16),   # noqa: E731
                    torch.nn.functional.hardtanh(a),
                    a.masked_fill(a > 0, float("-inf")),
                    a + torch.tensor([1.5, float("nan"), -3.0, 0.125, 7.0, 1.0, 2.0, 3.0, 4.0,
                                      5.0], dtype=torch.bfloat16))
    for g, w in zip(_native(fn, x), fn(x), strict=True):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)


def test_embedding_of_a_0d_index():
    # One row gathered by a one-element indirect DMA (the kernel indexed the index's last dim).
    w = torch.randn(10, 5, generator=torch.Generator().manual_seed(6))
    i = torch.tensor(7)
    got = _native(torch.nn.functional.embedding, i, w)
    assert torch.equal(got, torch.nn.functional.embedding(i, w))


@pytest.mark.parametrize("kw", [dict(kernel_size=3, stride=1, padding=1, ceil_mode=True,
                                     count_include_pad=False, divisor_override=2),
                                dict(kernel_size=(4, 4), stride=(2, 3), padding=1,
                                     ceil_mode=True)])
def test_ceil_mode_pool_reads_fewer_windows_than_its_padded_input_holds(kw):
    x = torch.randn(1, 3, 9, 9, generator=torch.Generator().manual_seed(7))
    fn = lambda a: torch.nn.functional.avg_pool2d(a, **kw)   # noqa: E731
    torch.testing.assert_close(_native(fn, x), fn(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fn, shape", [
    (lambda a: torch.nn.functional.max_pool2d(a, 3, 2, ceil_mode=True, return_indices=True),
     (1, 2, 5, 6)),
    (lambda a: torch.nn.functional.max_pool3d(a, 3, 2, ceil_mode=True, return_indices=True),
     (1, 2, 3, 6, 5)),
    (lambda a: torch.nn.functional.max_pool1d(a, 2, 1, padding=1, return_indices=True),
     (2, 3, 7)),
])
def test_max_pool_with_indices(fn, shape):
    # The indices are the first position where a window reaches its max (a select reduction);
    # the 3-D pool reads its windows through an affine map (d2 * 2 + d5) as a view, and the
    # window position's loop index is generated one IOTA per run of the reduced dims.
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(8))
    x[..., 1] = x[..., 0]          # ties: the first position wins
    got, want = _native(fn, x), fn(x)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    assert torch.equal(got[1], want[1])


def test_unfold_reads_windows_through_an_affine_map():
    x = torch.randn(5, 6, 4, generator=torch.Generator().manual_seed(9))
    fn = lambda a: a.unfold(1, 3, 2).contiguous() * 2   # noqa: E731
    torch.testing.assert_close(_native(fn, x), fn(x), rtol=0, atol=0)


def test_single_channel_conv3d():
    # One channel per group runs on DVE with the weight as a per-partition scalar column
    # (an access pattern into the weight tile, which tensor_scalar took for an immediate).
    x = torch.randn(2, 1, 4, 5, 6, generator=torch.Generator().manual_seed(10))
    w = torch.randn(1, 1, 2, 2, 2, generator=torch.Generator().manual_seed(11))
    fn = torch.nn.functional.conv3d
    torch.testing.assert_close(_native(fn, x, w), fn(x, w), rtol=1e-5, atol=1e-5)


def test_avg_pool3d_channels_last_pooling():
    # torch-mlir pools 3-D averages channels-last (linalg.pooling_ndhwc_sum).
    x = torch.randn(2, 3, 4, 4, 5, generator=torch.Generator().manual_seed(12))
    for fn in (lambda a: torch.nn.functional.avg_pool3d(a, 2),
               lambda a: torch.nn.functional.avg_pool3d(a, 2, 1, 1, ceil_mode=True,
                                                        count_include_pad=False)):
        torch.testing.assert_close(_native(fn, x), fn(x), rtol=1e-6, atol=1e-6)


def test_reductions_of_0d_tensors():
    # torch-mlir folds these away and then fails on their dim constant; decomposed first.
    x = torch.tensor(-1.5)
    fn = lambda a: (torch.amax(a), torch.amin(a, 0, keepdim=True), torch.argmax(a),   # noqa
                    torch.argmin(a, -1), torch.logsumexp(a, 0))
    for g, w in zip(_native(fn, x), fn(x), strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w)


def test_integer_fmod_and_roll():
    # Integer fmod (roll's and fftshift's index arithmetic) as a - trunc(a / b) * b.
    # (int8 data widened to int64: values bounded by 2^24.)
    a = torch.tensor([7, -7, 9, -9, 100, 0], dtype=torch.int8)
    b = torch.tensor([2, 2, -4, -4, 7, 3], dtype=torch.int8)
    fn = lambda p, q: torch.fmod(p.long(), q.long())   # noqa: E731
    assert torch.equal(_native(fn, a, b), fn(a, b))
    fn = lambda t: torch.fmod(t.long(), 3)   # noqa: E731
    assert torch.equal(_native(fn, a), fn(a))
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(13))
    fn = lambda t: (torch.roll(t, 2, 0), torch.fft.fftshift(t))   # noqa: E731
    for g, w in zip(_native(fn, x), fn(x), strict=True):
        assert torch.equal(g, w)


def test_copies_of_views():
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(14))
    fn = lambda t: (torch.permute_copy(t, (1, 0)), torch.view_copy(t, (6, 4)),   # noqa: E731
                    *torch.unbind_copy(t, 0), torch.narrow_copy(t, 1, 2, 3))
    for g, w in zip(_native(fn, x), fn(x), strict=True):
        assert torch.equal(g, w)


def test_decomposed_elementwise_ops_keep_their_special_values():
    # erfc without cancellation in its tail, fmax/fmin where a NaN loses, the angle of reals,
    # hypot without overflow: ATen ops torch-mlir has no lowering for, decomposed.
    x = torch.tensor([-3.0, -0.5, 0.0, 0.3, 1.0, 4.0, 9.0, float("nan"), 1e30, -1e30])
    y = torch.tensor([1.0, float("nan"), -2.0, 0.3, float("nan"), -4.0, 1e30, float("nan"),
                      3e30, 0.0])
    got = _native(lambda a: torch.erfc(a), x)
    torch.testing.assert_close(got, torch.erfc(x), rtol=5e-6, atol=0, equal_nan=True)
    for fn in (torch.fmax, torch.fmin, torch.hypot):
        torch.testing.assert_close(_native(fn, x, y), fn(x, y), rtol=1e-6, atol=0,
                                   equal_nan=True)
    torch.testing.assert_close(_native(torch.angle, x), torch.angle(x), equal_nan=True)
    m, v = torch.randn(3, 4), torch.randn(4)
    torch.testing.assert_close(_native(lambda a, b, c: torch.addmv(a, b, c, beta=0.5, alpha=2),
                                       y[:3], m, v),
                               torch.addmv(y[:3], m, v, beta=0.5, alpha=2), equal_nan=True)


def test_lgamma_over_its_domain():
    # Stirling's series after an 8-step recurrence, reflection below 1/2, inf at the poles.
    x = torch.cat([torch.linspace(-20, 30, 1001),
                   torch.tensor([0.0, -1.0, -2.0, 1.0, 2.0, 1e-6, -1e-6, 1e6, float("inf"),
                                 float("-inf"), float("nan"), -2.5, 7.99, 8.0])])
    torch.testing.assert_close(_native(torch.lgamma, x), torch.lgamma(x), rtol=2e-5,
                               atol=2e-5, equal_nan=True)


@pytest.mark.parametrize("fn", [torch.special.erfcx, torch.special.log_ndtr, torch.i0,
                                torch.special.i0e, torch.special.i1, torch.special.i1e])
def test_decomposed_special_functions(fn):
    # erfcx without overflow (t exp(P(t))), Bessel I0/I1 from Abramowitz & Stegun's
    # polynomials on both sides of 3.75, through 0 and large |x|.
    x = torch.cat([torch.linspace(-30, 30, 601), torch.tensor([0.0, 3.75, -3.75, 1e-4])])
    torch.testing.assert_close(_native(fn, x), fn(x), rtol=2e-6, atol=1e-6, equal_nan=True)


def test_digamma_and_polygamma():
    # digamma: asymptotic series after an 8-step recurrence, reflection below 1/2, -inf at 0
    # and NaN at the negative integers; polygamma n >= 1: 16 terms and an Euler-Maclaurin
    # tail, checked against float64.
    x = torch.cat([torch.linspace(-9.5, 30, 791), torch.tensor([0.0, -1.0, -2.0, 1.0, 1e-6])])
    torch.testing.assert_close(_native(torch.digamma, x), torch.digamma(x), rtol=2e-5,
                               atol=2e-5, equal_nan=True)
    y = torch.linspace(-8.73, 9.33, 361)     # no pole (an integer) among them
    for n in (1, 2, 3):
        want = torch.polygamma(n, y.double()).float()
        torch.testing.assert_close(_native(lambda a, n=n: torch.polygamma(n, a), y), want,
                                   rtol=2e-5, atol=1e-4)
    assert torch.equal(_native(torch.special.spherical_bessel_j0, torch.tensor([0.0, 2.0])),
                       torch.special.spherical_bessel_j0(torch.tensor([0.0, 2.0])))


def test_bf16_logcumsumexp_of_large_values_does_not_overflow():
    # bf16 puts a rounding between exp and the cumsum; the logaddexp scan applies still.
    x = (torch.randn(3, 10, generator=torch.Generator().manual_seed(0)) * 1e3).bfloat16()
    got = _native(lambda a: torch.logcumsumexp(a, 1), x)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), torch.logcumsumexp(x.float(), 1).bfloat16().float(),
                               rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("op", [
    lambda x, w: torch.nn.functional.conv2d(x, w, padding=1),
    lambda x, w: torch.nn.functional.conv2d(x, w[:, :1], padding=(2, 1), groups=6),
    lambda x, w: torch.nn.functional.max_pool2d(x, 3, stride=2, padding=1) * w.sum(),
])
def test_padded_windows_padded_on_chip_match_eager(op):
    """Zero and -inf paddings are written into each plane on chip (conv.Padding); values at
    the border come from the fill, the interior from the input."""
    g = torch.Generator().manual_seed(4)
    x, w = torch.randn(2, 6, 9, 11, generator=g) - 1.0, torch.randn(6, 6, 3, 3, generator=g)
    torch.testing.assert_close(_native(op, x, w), op(x, w), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fn, shapes", [
    # Heads merged back ([B, H, S, D] -> [B, S, H*D]), S not a multiple of 128.
    (lambda x: x.permute(0, 2, 1, 3).contiguous().view(2, 200, 288), [(2, 6, 200, 48)]),
    # Heads split out of a projection ([B, S, 3, H, D] -> q as [B, H, S, D]).
    (lambda t: t.view(2, 200, 3, 6, 48).permute(2, 0, 3, 1, 4)[1].contiguous(),
     [(2, 200, 864)]),
    # Elementwise over a permuted view and a contiguous operand.
    (lambda x, y: x.permute(0, 2, 1, 3) * 2 + y, [(2, 6, 200, 48), (2, 200, 6, 48)]),
])
def test_permuted_elementwise_tilings_are_exact(fn, shapes):
    # These take the permuted tiling (a partition dim other than the innermost-but-one and
    # several free dims in one DMA pattern, elementwise._permuted_layout); bf16 copies and an
    # exactly representable x*2+y must match eager bit for bit.
    g = torch.Generator().manual_seed(7)
    args = [torch.randint(-64, 64, s, generator=g).bfloat16() for s in shapes]
    got = _native(fn, *args)
    assert torch.equal(got, fn(*args))


def test_concatenated_kernel_results_written_in_place_match_eager():
    # Kernel results only a concatenation reads are computed into its slices
    # (convert-trn-to-nisa, _kernels_into_slices); an overlapping write order must hold too.
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(3, 128, 64, generator=g), torch.randn(3, 64, 96, generator=g)
    c = torch.randn(3, 128, 96, generator=g)

    def fn(x, y, z):
        return torch.cat([torch.bmm(x, y), torch.exp(z), torch.relu(z)]).permute(1, 0, 2)

    torch.testing.assert_close(_native(fn, a, b, c), fn(a, b, c), rtol=1e-5, atol=1e-5)


_NAN, _INF = float("nan"), float("inf")


@pytest.mark.parametrize("fn", [
    torch.maximum, torch.minimum, torch.fmax, torch.fmin,
    lambda a, b: torch.nn.functional.hardtanh(a), lambda a, b: torch.nn.functional.relu6(a),
    lambda a, b: a.argmax(-1), lambda a, b: a.argmin(-1),
    lambda a, b: torch.floor(a), lambda a, b: torch.trunc(a), lambda a, b: torch.ceil(a),
], ids=["maximum", "minimum", "fmax", "fmin", "hardtanh", "relu6", "argmax", "argmin",
        "floor", "trunc", "ceil"])
def test_nan_and_infinity_as_eager(fn):
    # torch-mlir lowers maximum/minimum/hardtanh to compare-and-select (a NaN first operand
    # lost), argmax found no element equal to a NaN maximum (index 3 of 3), and trunc's
    # x - fmod(x, 1) made +-inf NaN.
    a = torch.tensor([[_NAN, 1.0, -2.0, _INF, 0.3], [0.0, _NAN, 3.0, -_INF, -0.2],
                      [2.5, -7.5, 1e9, -3e8, 4.0]])
    b = torch.tensor([[0.0, _NAN, -3.0, 1.0, 0.2], [_NAN, 2.0, 5.0, -_INF, 0.1],
                      [1.0, 1.0, 1.0, 1.0, 1.0]])
    got, want = _native(fn, a, b), fn(a, b)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("fn, shape", [
    (lambda t, i, j: t[:, i][:, :, j], (3, 4, 5)),
    (lambda t, i, j: torch.nn.functional.pad(t, (1, 1, 1, 1), mode="reflect") * 2.0,
     (2, 6, 17, 23)),
], ids=["double_index", "reflect_pad"])
def test_gather_from_a_computed_tensor_waits_for_its_writes(fn, shape):
    # An indirect DMA's rows are chosen by its index when it runs: trn-schedule took its
    # source box from the pattern (the first rows only) and let it read a gathered scratch
    # tensor before the gather that writes it had finished ("rows never written").
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    i, j = torch.tensor([1, 0, 1, 2, 3, 2]), torch.tensor([1, 0, 1, 2, 3, 4, 3])
    torch.testing.assert_close(_native(fn, x, i, j), fn(x, i, j), rtol=0, atol=0)


@pytest.mark.parametrize("fn", [
    lambda a, b: torch.isfinite(a), lambda a, b: a == a, lambda a, b: a != a,
    lambda a, b: torch.clamp(a, min=b), lambda a, b: torch.clamp(a, max=b),
    lambda a, b: torch.clamp(a, -1.0, 2.0), lambda a, b: torch.where(a > 0, a, 0.0),
    lambda a, b: torch.relu(a), lambda a, b: torch.logcumsumexp(a, -1),
    lambda a, b: torch.addmm(torch.full((3, 3), _NAN), a[:, :3].nan_to_num(), b[:3, :3].t()
                             .nan_to_num(), beta=0),
], ids=["isfinite", "eq_self", "ne_self", "clamp_min_tensor", "clamp_max_tensor", "clamp",
        "where_ordered", "relu", "logcumsumexp", "addmm_beta0"])
def test_unordered_compares_and_special_values_as_eager(fn):
    # The engines compare as IEEE does; arith.cmpf's unordered predicates (ult, ugt, ...)
    # were taken for the ordered ones; torch-mlir folds x == x to true and lowers clamp with
    # unordered compares (a NaN became the bound); logaddexp of two equal infinities was
    # inf - inf; addmm with beta 0 let a NaN input through.
    a = torch.tensor([[_NAN, 1.0, -2.0, _INF, 0.7], [-_INF, -_INF, 0.5, 3.0, -0.2],
                      [_INF, 1.0, _INF, -1.0, 0.0]])
    b = torch.tensor([[0.0, _NAN, -3.0, 1.0, 0.5], [1.0, 2.0, _NAN, -_INF, 0.1],
                      [0.5, 0.5, 0.5, 0.5, 0.5]])
    got, want = _native(fn, a, b), fn(a, b)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)


def test_half_precision_norm_accumulates_in_fp32():
    x = torch.full((2, 200), 1000.0).half()
    for fn in (lambda t: t.norm(dim=1), lambda t: torch.linalg.vector_norm(t, 3, 1)):
        torch.testing.assert_close(_native(fn, x), fn(x))


def test_atan2_of_signed_zeros_and_infinities():
    # The quadrant came from x < 0 and y < 0, which miss -0.0; at the origin the result was
    # 0 whatever the signs, and two infinities gave NaN.
    import itertools

    values = [0.0, -0.0, 1.0, -1.0, 2.5, -3.0, _INF, -_INF, _NAN, 1e-30, -1e30]
    y = torch.tensor([a for a, _ in itertools.product(values, values)])
    x = torch.tensor([b for _, b in itertools.product(values, values)])
    got, want = _native(torch.atan2, y, x), torch.atan2(y, x)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7, equal_nan=True)
    assert torch.equal(torch.signbit(got[~got.isnan()]), torch.signbit(want[~want.isnan()]))
