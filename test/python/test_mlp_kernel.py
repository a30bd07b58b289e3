"""The mlp kernel (trn-fuse mlp, compiler/kernels/mlp.py): Linear - activation - Linear with
the hidden activation computed and consumed on chip."""

import copy

import pytest

torch = pytest.importorskip("torch")

from torchneuron import backend  # noqa: E402


def _run(model, x, tmp_path, monkeypatch, fuse: bool, option: str = "fuse_mlp"):
    """`model(*x)` (x: a tensor or a tuple of them) compiled with `option` set to `fuse`:
    its output, the profile of its run and its trn stage."""
    dump = tmp_path / ("on" if fuse else "off")
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(dump))
    torch._dynamo.reset()
    inputs = x if isinstance(x, tuple) else (x,)
    with torch.no_grad():
        out = torch.compile(model, backend="neuron", options={option: fuse})(*inputs)
    profile = backend.compiled_graphs()[-1].last_profile
    trn = next(dump.glob("*.trn.mlir")).read_text()
    return out, profile, trn


@pytest.mark.parametrize("dtype,d,hidden,d_out,tokens,act", [
    (torch.bfloat16, 256, 1024, 256, 384, torch.nn.GELU()),
    (torch.float32, 256, 1024, 256, 384, torch.nn.GELU()),
    (torch.bfloat16, 200, 700, 600, 300, torch.nn.ReLU()),     # ragged tiles everywhere
    (torch.bfloat16, 128, 256, 1100, 130, torch.nn.ReLU()),    # three output chunks
    (torch.bfloat16, 256, 1024, 256, (3, 128), torch.nn.GELU()),  # batched tokens (3-D)
])
def test_mlp_kernel_matches_eager_and_the_unfused_kernels(dtype, d, hidden, d_out, tokens, act,
                                                          tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(d, hidden), act,
                                torch.nn.Linear(hidden, d_out)).to(dtype).eval()
    shape = tokens if isinstance(tokens, tuple) else (tokens,)
    x = torch.randn(*shape, d).to(dtype)
    with torch.no_grad():
        expected = model(x)
    fused, fused_profile, fused_trn = _run(model, x, tmp_path, monkeypatch, True)
    unfused, unfused_profile, unfused_trn = _run(model, x, tmp_path, monkeypatch, False)
    assert 'kind = "mlp"' in fused_trn
    assert 'kind = "mlp"' not in unfused_trn
    tolerance = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(fused, expected, **tolerance)
    # The same roundings in the same places as the two matmul kernels: equal up to the order
    # in which PE sums one instruction's products.
    torch.testing.assert_close(fused, unfused, atol=1e-6 if dtype == torch.float32 else 8e-3,
                               rtol=1e-5 if dtype == torch.float32 else 8e-3)
    # The hidden activation no longer goes to HBM and back: the fused kernel moves little
    # more than its inputs, weights and output once, the unfused ones the hidden on top.
    hidden_bytes = x[..., 0].numel() * hidden * (2 if dtype == torch.bfloat16 else 4)
    moved = lambda p: sum(s.dma_bytes for s in p.streams.values())     # noqa: E731
    assert moved(fused_profile) <= 1.3 * fused_profile.compulsory_bytes
    assert moved(unfused_profile) >= unfused_profile.compulsory_bytes + 2 * hidden_bytes


def test_mlp_kernel_not_formed_when_the_hidden_activation_is_also_an_output(tmp_path,
                                                                           monkeypatch):
    """Training saves the hidden activation for the backward: it must reach HBM, so no mlp
    kernel (which keeps it on chip, hidden units on partitions) forms; the values are right
    (an mlp_saved kernel stores it instead: the next test)."""
    torch.manual_seed(0)
    fc1, fc2 = torch.nn.Linear(128, 256), torch.nn.Linear(256, 128)

    def f(x):
        h = torch.relu(fc1(x))
        return fc2(h), h

    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))
    torch._dynamo.reset()
    x = torch.randn(256, 128)
    with torch.no_grad():
        y, h = torch.compile(f, backend="neuron")(x)
        ey, eh = f(x)
    torch.testing.assert_close(y, ey)
    torch.testing.assert_close(h, eh)
    assert 'kind = "mlp"' not in next(tmp_path.glob("*.trn.mlir")).read_text()


def _saving_linear_gelu_linear(dtype, hidden: int, d_out: int, residual: bool = False):
    """(f, x, f(x)) for f(x) = (fc2(gelu(fc1(x))) [+ x], fc1(x), gelu(fc1(x))) -- a Linear -
    GELU - Linear block returning the values a training step's forward saves -- over 384
    tokens of 256 features."""
    torch.manual_seed(0)
    fc1 = torch.nn.Linear(256, hidden).to(dtype)
    fc2 = torch.nn.Linear(hidden, d_out).to(dtype)

    def f(x):
        pre = fc1(x)
        act = torch.nn.functional.gelu(pre)
        return fc2(act) + x if residual else fc2(act), pre, act

    x = torch.randn(384, 256).to(dtype)
    with torch.no_grad():
        return f, x, f(x)


@pytest.mark.parametrize("dtype,residual", [(torch.float32, False), (torch.bfloat16, False),
                                            (torch.bfloat16, True)])
def test_mlp_saved_kernel_stores_the_hidden_activation_and_keeps_it_on_chip(
        dtype, residual, tmp_path, monkeypatch):
    """trn-fuse mlp-saved: Linear - GELU - Linear whose pre-activation and hidden activation
    are also results (as a training step's forward saves them) is one kernel: it stores both
    and hands the hidden activation's rows to the second Linear on chip, which the separate
    kernels load back from HBM; a residual that is the block's input is added from the rows
    the first Linear loaded, not loaded again. The same bits as those kernels (the same
    K-tiles summed in the same order), close to eager's."""
    f, x, expected = _saving_linear_gelu_linear(dtype, 1024, 256 if residual else 192,
                                                residual)
    on, on_profile, on_trn = _run(f, x, tmp_path, monkeypatch, True, "fuse_mlp_saved")
    off, off_profile, off_trn = _run(f, x, tmp_path, monkeypatch, False, "fuse_mlp_saved")
    assert on_trn.count('"trn.kernel"') == 1 and 'kind = "mlp_saved"' in on_trn
    assert off_trn.count('"trn.kernel"') == 2 and 'kind = "mlp_saved"' not in off_trn
    tolerance = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else {}
    for got, unfused, want in zip(on, off, expected):
        assert torch.equal(got, unfused)
        torch.testing.assert_close(got, want, **tolerance)
    reloaded = 384 * (1024 + (256 if residual else 0)) * dtype.itemsize
    assert off_profile.dma_bytes - on_profile.dma_bytes == reloaded


def _training_step(model, x, tmp_path, monkeypatch, option: str, fused: bool) -> dict:
    """One compiled training step of `model` on `x` with `option` set to `fused`: its output,
    the gradients of x and of the first Linear's weight and bias, the trn stages of forward
    and backward, and the backward's profile."""
    dump = tmp_path / f"{option}-{fused}"
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(dump))
    torch._dynamo.reset()
    x.grad = None
    model.zero_grad()
    out = torch.compile(model, backend="neuron", options={option: fused})(x)
    out.float().sum().backward()
    assert all(r.fully_compiled for r in backend.graph_reports()[-2:])
    return {"out": out, "grads": (x.grad.clone(), model[0].weight.grad.clone(),
                                  model[0].bias.grad.clone()),
            "trn": {part: next(dump.glob(f"*{part}.trn.mlir")).read_text()
                    for part in ("forward", "backward")},
            "backward": backend.compiled_graphs()[-1].last_profile}


def _bf16_mlp_and_input():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 256)).to(torch.bfloat16)
    return model, torch.randn(384, 256).to(torch.bfloat16).requires_grad_()


def test_training_mlp_forward_stores_what_it_saves_in_one_kernel(tmp_path, monkeypatch):
    """The same in a compiled training step (Linear - GELU - Linear, bf16): the forward is one
    mlp_saved kernel, and so is the backward's gradient of the hidden activation (dY @ W2
    times GELU's derivative) with the input gradient that reads it (dH @ W1), placed where
    the former stood (the first weight's gradient, which reads it too, joins it: the next
    test); forward and gradients are bitwise those of the separate kernels."""
    model, x = _bf16_mlp_and_input()
    on, off = (_training_step(model, x, tmp_path, monkeypatch, "fuse_mlp_saved", fused)
               for fused in (True, False))
    trn_on, trn_off = "".join(on["trn"].values()), "".join(off["trn"].values())
    assert trn_on.count('kind = "mlp_saved"') == 2 and 'kind = "mlp_saved"' not in trn_off
    for a, b in zip((on["out"], *on["grads"]), (off["out"], *off["grads"])):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))


def test_backward_weight_gradient_reads_the_hidden_gradient_on_chip(tmp_path, monkeypatch):
    """trn-fuse mlp-saved-gradient: in the backward of Linear - GELU - Linear, the gradient of
    the hidden activation dH is read by the input gradient's Linear and by the first weight's
    gradient (dH^T @ X, and dH summed over tokens for the bias). The weight gradient joins the
    mlp_saved kernel and reads dH's rows on chip: dH is neither stored nor loaded back. The
    gradients are as the separate kernels' but for the order PE sums in, and within bf16's
    precision of fp32 eager's."""
    model, x = _bf16_mlp_and_input()
    reference = copy.deepcopy(model).float()
    x32 = x.detach().float().requires_grad_()
    reference(x32).sum().backward()
    want = (x32.grad, reference[0].weight.grad, reference[0].bias.grad)
    on, off = (_training_step(model, x, tmp_path, monkeypatch, "fuse_mlp_saved_gradient",
                              fused) for fused in (True, False))
    assert "trn.saved_gradient" in on["trn"]["backward"]
    assert "trn.saved_gradient" not in off["trn"]["backward"]
    assert on["trn"]["backward"].count('"trn.kernel"') == \
        off["trn"]["backward"].count('"trn.kernel"') - 1
    hidden_bytes = 384 * 1024 * 2
    assert off["backward"].dma_bytes - on["backward"].dma_bytes == 2 * hidden_bytes
    for got, separate, eager in zip(on["grads"], off["grads"], want):
        torch.testing.assert_close(got, separate, atol=1e-2, rtol=1e-2)
        assert ((got.float() - eager).norm() / eager.norm()).item() < 1e-2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_saved_linear_output_and_its_activation_come_from_one_kernel(dtype, tmp_path,
                                                                     monkeypatch):
    """trn-fuse epilogue-results: a training step's forward saves fc1's output and applies GELU
    to it; GELU runs in fc1's epilogue and the kernel stores both, so fc1's output is not read
    back from HBM. Values as eager's and as the separate kernels'."""
    f, x, expected = _saving_linear_gelu_linear(dtype, 512, 128)
    results = {}
    for fused in (True, False):
        dump = tmp_path / str(fused)
        monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(dump))
        torch._dynamo.reset()
        with torch.no_grad():
            out = torch.compile(f, backend="neuron",
                                options={"fuse_epilogue_results": fused,
                                         "fuse_mlp_saved": False})(x)
        trn = next(dump.glob("*.trn.mlir")).read_text()
        results[fused] = (out, backend.compiled_graphs()[-1].last_profile, trn)
    (on, on_profile, on_trn), (off, off_profile, off_trn) = results[True], results[False]
    two_results = f"-> (tensor<384x512x{'bf16' if dtype == torch.bfloat16 else 'f32'}>, " \
        f"tensor<384x512x{'bf16' if dtype == torch.bfloat16 else 'f32'}>)"
    assert two_results in on_trn and two_results not in off_trn
    tolerance = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else {}
    for got, unfused, want in zip(on, off, expected):
        torch.testing.assert_close(got, want, **tolerance)
        torch.testing.assert_close(got, unfused, atol=1e-6 if dtype == torch.float32 else 8e-3,
                                   rtol=1e-5 if dtype == torch.float32 else 8e-3)
    assert off_profile.dma_bytes - on_profile.dma_bytes >= 384 * 512 * dtype.itemsize


def test_token_block_leaves_blocks_to_overlap_with_the_neighbouring_kernels():
    """The largest token block that fits PSUM and still makes four blocks (the first starts
    while the producer writes the rest); where none makes four, the smallest that fits."""
    from torchneuron.compiler.kernels.mlp import tokens_per_block
    from torchneuron.target import get_target

    target = get_target("trn2")
    assert tokens_per_block(target, 2048, 512) == 512      # 4 blocks
    assert tokens_per_block(target, 1024, 512) == 256      # 4 blocks, not 2 of 512
    assert tokens_per_block(target, 2048, 1024) == 256     # 512 rows of 1024 outputs: no room
    assert tokens_per_block(target, 512, 768) == 128       # GPT-2's MLP over 512 tokens
    assert tokens_per_block(target, 300, 600) == 128
    assert tokens_per_block(target, 100, 600) == 128       # one block, padded to 128 rows
    # Output rows wider than PSUM holds for 128 tokens: no block at all.
    assert tokens_per_block(target, 512, 64 * 512) is None


def test_hidden_span_is_two_blocks_where_psum_and_sbuf_leave_room():
    """The first matmul's span: two output blocks where its accumulators that wide fit PSUM
    beside the block's output tiles, the spans still number four, and the hidden activation
    for a span fits the SBUF left; else the block itself."""
    from torchneuron.compiler.kernels.mlp import hidden_tokens_per_block
    from torchneuron.target import get_target

    target = get_target("trn2")
    kib = 1024
    # The MLP benchmark: 2048 tokens, 1024 outputs in blocks of 256, hidden 4096 (32 KiB of
    # bf16 H^T for 512 tokens).
    assert hidden_tokens_per_block(target, 2048, 256, 1024, 4096, 40 * kib, 2) == 512
    assert hidden_tokens_per_block(target, 2048, 256, 1024, 4096, 31 * kib, 2) == 256
    assert hidden_tokens_per_block(target, 1024, 256, 1024, 4096, 40 * kib, 2) == 256
    # Blocks of 512 already (512 outputs): no matmul takes more than 512 columns.
    assert hidden_tokens_per_block(target, 4096, 512, 512, 1024, 40 * kib, 2) == 512
    # 1536 outputs in blocks of 256: six banks of output tiles and the bank kept for
    # transposes leave one, where accumulators over 512 tokens need two.
    assert hidden_tokens_per_block(target, 2048, 256, 1536, 1024, 40 * kib, 2) == 256
    # GPT-2's MLP over 512 tokens in blocks of 128: spans of 256 would be two, not four.
    assert hidden_tokens_per_block(target, 512, 128, 768, 3072, 40 * kib, 2) == 128


# 2148 tokens: the last span is one block of 100.
@pytest.mark.parametrize("tokens", [2048, 2148])
def test_mlp_kernel_hidden_spans_halve_the_first_matmuls_with_the_same_bits(tokens, tmp_path,
                                                                           monkeypatch):
    """convert-trn-to-nisa hidden-spans: tokens of 1024 outputs go in blocks of 256; the first
    matmul computes the hidden activation for 512 tokens at once, kept in SBUF for the
    second block. Half as many first matmuls and GELU evacuations; the same products summed
    in the same order, so the output is bit for bit the one without it (and eager's, within
    bf16)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 1024)).to(torch.bfloat16).eval()
    x = torch.randn(tokens, 128).to(torch.bfloat16)
    with torch.no_grad():
        expected = model(x)
    on, on_profile, _ = _run(model, x, tmp_path, monkeypatch, True, "mlp_hidden_spans")
    off, off_profile, _ = _run(model, x, tmp_path, monkeypatch, False, "mlp_hidden_spans")
    assert torch.equal(on.view(torch.int16), off.view(torch.int16))
    torch.testing.assert_close(on, expected, atol=2e-2, rtol=2e-2)
    # First matmuls: 2 hidden chunks (one K-tile each) per block of 256 without spans, per
    # span of 512 with them; the second's: per 128-token tile, 2 output chunks x 2 hidden
    # chunks, either way.
    blocks, spans, token_tiles = -(-tokens // 256), -(-tokens // 512), -(-tokens // 128)
    assert off_profile.opcode_counts["matmul"] == 2 * blocks + 4 * token_tiles
    assert on_profile.opcode_counts["matmul"] == 2 * spans + 4 * token_tiles
    assert on_profile.opcode_counts["activate"] == \
        off_profile.opcode_counts["activate"] - 2 * (blocks - spans)


class _PostNormFFN(torch.nn.Module):
    """A post-norm transformer's FFN: LayerNorm(x + Linear(GELU(Linear(x))))."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.fc1 = torch.nn.Linear(d, hidden)
        self.fc2 = torch.nn.Linear(hidden, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.fc2(torch.nn.functional.gelu(self.fc1(x))))


@pytest.mark.parametrize("dtype,d,hidden,shape,x_loaded_once", [
    (torch.bfloat16, 256, 1024, (2, 256), True),
    (torch.float32, 200, 700, (2, 128), True),          # ragged feature tiles
    (torch.bfloat16, 600, 512, (1, 128), True),         # two output chunks per row
    # X's rows over 2 KiB: X^T is staged from panels of 512 features, none a whole row,
    # so the residual's rows are loaded apart.
    (torch.float32, 640, 256, (1, 128), False),
])
def test_mlp_rows_kernel_keeps_the_ffn_output_on_chip(dtype, d, hidden, shape, x_loaded_once,
                                                      tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = _PostNormFFN(d, hidden).to(dtype).eval()
    x = torch.randn(*shape, d).to(dtype)
    with torch.no_grad():
        expected = model(x)
    fused, fused_profile, fused_trn = _run(model, x, tmp_path, monkeypatch, True,
                                           "fuse_mlp_rows")
    unfused, unfused_profile, unfused_trn = _run(model, x, tmp_path, monkeypatch, False,
                                                 "fuse_mlp_rows")
    assert 'kind = "mlp_rows"' in fused_trn
    assert 'kind = "mlp_rows"' not in unfused_trn and 'kind = "mlp"' in unfused_trn
    tolerance = dict(atol=3e-2, rtol=3e-2) if dtype == torch.bfloat16 else \
        dict(atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused, expected, **tolerance)
    # The rows read the FFN's output tiles as the mlp kernel would have stored them, in the
    # same type: the same bits.
    assert torch.equal(fused, unfused)
    # What no longer moves: the FFN's output, stored once and loaded once; and the residual
    # x, whose rows the rows read from the tiles the mlp loaded them into to turn them on PE
    # (the unfused rows kernel loads them again).
    output_bytes = x.numel() * x.element_size()
    saved = 3 * output_bytes if x_loaded_once else 2 * output_bytes
    assert unfused_profile.dma_bytes - fused_profile.dma_bytes == saved


def test_mlp_rows_kernel_not_formed_where_row_tiles_would_straddle_sequences(tmp_path,
                                                                             monkeypatch):
    """100 tokens per sequence: the rows' tiles of 128 would not be whole 128-token groups
    of the mlp's output, so the mlp and the rows stay apart (and agree with eager)."""
    torch.manual_seed(0)
    model = _PostNormFFN(256, 1024).to(torch.bfloat16).eval()
    x = torch.randn(2, 100, 256).to(torch.bfloat16)
    with torch.no_grad():
        expected = model(x)
    out, _, trn = _run(model, x, tmp_path, monkeypatch, True, "fuse_mlp_rows")
    assert 'kind = "mlp_rows"' not in trn
    torch.testing.assert_close(out, expected, atol=3e-2, rtol=3e-2)


class _PostNormProjection(torch.nn.Module):
    """An attention block's output projection, then the residual add and layer norm."""

    def __init__(self, d_in: int, d: int):
        super().__init__()
        self.proj = torch.nn.Linear(d_in, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, a, x):
        return self.norm(x + self.proj(a))


@pytest.mark.parametrize("dtype,d_in,d,tokens", [
    (torch.bfloat16, 768, 768, 256),
    (torch.float32, 200, 300, 128),               # ragged K and feature tiles
    (torch.bfloat16, 64, 600, 128),               # one partial K-tile, two output chunks
])
def test_linear_rows_kernel_keeps_the_projection_on_chip(dtype, d_in, d, tokens, tmp_path,
                                                         monkeypatch):
    torch.manual_seed(0)
    model = _PostNormProjection(d_in, d).to(dtype).eval()
    a, x = torch.randn(2, tokens, d_in).to(dtype), torch.randn(2, tokens, d).to(dtype)
    with torch.no_grad():
        expected = model(a, x)
    fused, fused_profile, fused_trn = _run(model, (a, x), tmp_path, monkeypatch, True,
                                           "fuse_linear_rows")
    unfused, unfused_profile, unfused_trn = _run(model, (a, x), tmp_path, monkeypatch, False,
                                                 "fuse_linear_rows")
    assert 'kind = "linear_rows"' in fused_trn and 'kind = "linear_rows"' not in unfused_trn
    tolerance = dict(atol=3e-2, rtol=3e-2) if dtype == torch.bfloat16 else \
        dict(atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused, expected, **tolerance)
    assert torch.equal(fused, unfused)
    assert unfused_profile.dma_bytes - fused_profile.dma_bytes == 2 * x.numel() * x.element_size()


def test_linear_rows_kernel_not_formed_where_the_rows_read_a_transpose(tmp_path, monkeypatch):
    """The norm reads the projection's output through a reshape and then a transpose (tokens
    of other sequences in each of its rows): no row tile of it is whole rows of the
    projection's output one after another, so the two stay apart (and agree with eager)."""

    class Transposed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(256, 256)
            self.norm = torch.nn.LayerNorm(256)

        def forward(self, a, x):
            return self.norm(self.proj(a).transpose(0, 1) + x)

    torch.manual_seed(0)
    model = Transposed().eval()
    a, x = torch.randn(128, 4, 256), torch.randn(4, 128, 256)
    with torch.no_grad():
        expected = model(a, x)
    out, _, trn = _run(model, (a, x), tmp_path, monkeypatch, True, "fuse_linear_rows")
    assert 'kind = "linear_rows"' not in trn
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


class _PreNormFFN(torch.nn.Module):
    """A pre-norm block's FFN, as GPT-2 has it: x + Linear(GELU(Linear(LayerNorm(x))))."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up, self.down = torch.nn.Linear(d, hidden), torch.nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x)), approximate="tanh"))


@pytest.mark.parametrize("d,hidden,shape", [(256, 1024, (2, 128)), (192, 768, (384,))])
def test_norm_rows_join_the_mlp_kernel_in_front(d, hidden, shape, tmp_path, monkeypatch):
    """trn-fuse input-rows: the norm in front of a pre-norm FFN is computed in the mlp
    kernel, its row tiles handed to the first Linear's staging on chip, and the rows of x it
    loads kept for the residual: the same bits as the separate kernels, the norm output's
    store and load (tokens * d elements each) and x's second load gone."""
    torch.manual_seed(0)
    model = _PreNormFFN(d, hidden).to(torch.bfloat16).eval()
    x = torch.randn(*shape, d).to(torch.bfloat16)
    on, on_profile, on_trn = _run(model, x, tmp_path, monkeypatch, True, "fuse_input_rows")
    off, off_profile, off_trn = _run(model, x, tmp_path, monkeypatch, False, "fuse_input_rows")
    assert "trn.input_rows" in on_trn and 'kind = "mlp"' in on_trn
    assert 'kind = "rows"' not in on_trn and 'kind = "rows"' in off_trn
    assert torch.equal(on.view(torch.int16), off.view(torch.int16))
    with torch.no_grad():
        torch.testing.assert_close(on, model(x), atol=3e-2, rtol=3e-2)
    tokens = x.numel() // d
    assert off_profile.dma_bytes - on_profile.dma_bytes == 3 * tokens * d * 2
