"""Training through torch.compile(backend="neuron"): AOTAutograd's forward and backward graphs
compile natively (torchneuron.decompositions), and 20 optimizer steps track eager PyTorch."""

import copy

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from torchneuron import backend, decompositions  # noqa: E402

STEPS = 20
LOSS_RTOL = 1e-4          # per step, relative to eager's loss


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x, y):
        return F.cross_entropy(self.fc2(torch.relu(self.fc1(x))), y)


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 4 * 4, 10)

    def forward(self, x, y):
        h = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return F.cross_entropy(self.fc(h.flatten(1)), y)


class Transformer(torch.nn.Module):
    """Embedding, causal attention (scaled_dot_product_attention), layernorm, GELU MLP."""

    def __init__(self, vocab=64, d=32, heads=2, length=16):
        super().__init__()
        self.heads = heads
        self.emb = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.randn(length, d) * 0.02)
        self.ln1, self.ln2, self.ln = (torch.nn.LayerNorm(d) for _ in range(3))
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, ids, targets):
        b, t = ids.shape
        x = self.emb(ids) + self.pos[:t]
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, -1))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def _batches(name):
    g = torch.Generator().manual_seed(1)
    if name == "mlp":
        return [(torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g))
                for _ in range(4)]
    if name == "cnn":
        return [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 10, (4,), generator=g))
                for _ in range(4)]
    return [(torch.randint(0, 64, (2, 16), generator=g),
             torch.randint(0, 64, (2, 16), generator=g)) for _ in range(4)]


CASES = {
    "mlp-sgd-momentum": (MLP, "mlp", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
    "cnn-sgd-momentum": (CNN, "cnn", lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)),
    "transformer-adamw": (Transformer, "transformer",
                          lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.01)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_training_loop_tracks_eager(case):
    """20 steps (4 fixed batches, cycled) with the same initial weights: every loss within
    LOSS_RTOL of eager's, and both graphs AOTAutograd produced ran fully on the NeuronCore."""
    model_cls, data, make_optimizer = CASES[case]
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = model_cls()
    mine = copy.deepcopy(eager)
    compiled = torch.compile(mine, backend="neuron")
    opt_eager, opt_mine = make_optimizer(eager.parameters()), make_optimizer(mine.parameters())
    batches = _batches(data)
    first = len(backend.graph_reports())
    losses = []
    for step in range(STEPS):
        x, y = batches[step % len(batches)]
        for fn, opt in ((eager, opt_eager), (compiled, opt_mine)):
            opt.zero_grad()
            loss = fn(x, y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        expected, got = losses[-2:]
        assert abs(got - expected) <= LOSS_RTOL * abs(expected), (step, got, expected)
    assert losses[-2] < losses[0]          # it learns (the batches repeat)
    reports = backend.graph_reports()[first:]
    assert sorted(r.kind for r in reports) == ["backward", "forward"], reports
    for report in reports:
        if case.startswith("cnn") and report.kind == "forward":
            # All but batch norm's step counter, an int64 count (num_batches_tracked + 1)
            # the engines' fp32 holds exactly only to 2^24: it runs in PyTorch.
            (counter,) = report.fallbacks
            assert counter.op == "aten.add" and counter.category == "dtype", str(report)
            assert report.flop_fraction > 0.9999, str(report)
            continue
        assert report.fully_compiled and report.flop_fraction == 1.0, str(report)
    # buffers (batch-norm running statistics) follow eager's too
    for (name, a), b in zip(eager.state_dict().items(), mine.state_dict().values()):
        if name.startswith("bn.running"):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


class PartlyFrozen(torch.nn.Module):
    """A frozen layer, an input that needs no gradient and a detached branch: the backward
    graph returns None for them, and saves activations (relu mask, tanh output)."""

    def __init__(self):
        super().__init__()
        self.frozen = torch.nn.Linear(8, 16).requires_grad_(False)
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x, w):
        h = torch.relu(self.frozen(x))
        return (torch.tanh(self.fc(h)) * w + h.detach().sum(-1, keepdim=True)).sum()


def test_backward_with_none_gradients_and_saved_activations():
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = PartlyFrozen()
    mine = copy.deepcopy(eager)
    x = torch.randn(5, 8)
    w = torch.randn(5, 4, requires_grad=True)
    w2 = w.detach().clone().requires_grad_(True)
    first = len(backend.graph_reports())
    eager(x, w).backward()
    torch.compile(mine, backend="neuron")(x, w2).backward()
    torch.testing.assert_close(w2.grad, w.grad)
    torch.testing.assert_close(mine.fc.weight.grad, eager.fc.weight.grad)
    assert mine.frozen.weight.grad is None
    reports = backend.graph_reports()[first:]
    assert sorted(r.kind for r in reports) == ["backward", "forward"]
    assert all(r.fully_compiled for r in reports), "\n".join(map(str, reports))


# -- the decompositions themselves, against eager (no compilation) --------------------------------

aten = torch.ops.aten


@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil", [
    (2, 2, 0, 1, False), (3, 2, 1, 1, False), (3, 1, 1, 1, False), (3, 2, 1, 2, False),
    (2, 3, 1, 1, True), ((2, 3), (1, 2), (1, 0), (1, 1), True)])
@pytest.mark.parametrize("values", ["random", "ties", "nan", "neg-inf"])
def test_max_pool_backward_recomputed_from_input_equals_eager(kernel, stride, padding, dilation,
                                                              ceil, values):
    """Bit-exact, ties (first maximum), NaNs (last NaN) and all -inf windows included."""
    g = torch.Generator().manual_seed(0)
    shape = (2, 3, 7, 8)
    if values == "random":
        x = torch.randn(shape, generator=g)
    else:
        x = torch.randint(0, 3, shape, generator=g).float()
        if values == "nan":
            x[x == 1] = float("nan")
        elif values == "neg-inf":
            x[x > 0] = float("-inf")
    pair = (lambda v: list(v) if isinstance(v, tuple) else [v, v])
    args = (pair(kernel), pair(stride), pair(padding), pair(dilation), ceil)
    out, indices = aten.max_pool2d_with_indices(x, *args)
    grad = torch.randn(out.shape, generator=g)
    expected = aten.max_pool2d_with_indices_backward(grad, x, *args, indices)
    got = decompositions.max_pool2d_with_indices_backward(grad, x, *args, indices)
    assert torch.equal(got, expected)


@pytest.mark.parametrize("padding_idx,scale", [(-1, False), (3, False), (-1, True), (3, True)])
def test_embedding_backward_one_hot_matmul(padding_idx, scale):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 10, (4, 6), generator=g)
    ids[0, :3] = 3
    grad = torch.randn(4, 6, 5, generator=g)
    expected = aten.embedding_dense_backward(grad, ids, 12, padding_idx, scale)
    got = decompositions.embedding_dense_backward(grad, ids, 12, padding_idx, scale)
    torch.testing.assert_close(got, expected)


def test_one_hot_scatter_and_its_limits():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(5, 7, generator=g)
    index = torch.randint(0, 7, (5, 1), generator=g)
    src = torch.randn(5, 3, generator=g)
    torch.testing.assert_close(decompositions.scatter_src(base, 1, index, src),
                               torch.scatter(base, 1, index, src))
    torch.testing.assert_close(decompositions.scatter_value(base, -1, index, -1.0),
                               torch.scatter(base, -1, index, -1.0))
    # two indices per row may collide: left to the scatter
    assert decompositions.scatter_value(base, 1, index.repeat(1, 2), 1.0) is NotImplemented


@pytest.mark.parametrize("kwargs", [dict(is_causal=True), dict(attn_mask="bool"),
                                    dict(attn_mask="float", scale=0.3), dict(enable_gqa=True)])
def test_attention_math_form_matches_fused(kwargs):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 6, 8, generator=g)
    kv_heads = 2 if kwargs.get("enable_gqa") else 4
    k, v = (torch.randn(2, kv_heads, 6, 8, generator=g) for _ in range(2))
    if kwargs.get("attn_mask") == "bool":
        mask = torch.rand(6, 6, generator=g) > 0.3
        mask[2] = False                      # a fully masked row attends to nothing: zeros
        kwargs = dict(kwargs, attn_mask=mask)
    elif kwargs.get("attn_mask") == "float":
        kwargs = dict(kwargs, attn_mask=torch.randn(6, 6, generator=g))
    torch.testing.assert_close(decompositions.sdpa_math(q, k, v, **kwargs),
                               F.scaled_dot_product_attention(q, k, v, **kwargs))



def _gradients(fn, inputs, grad_output, compiled: bool):
    torch._dynamo.reset()
    run = torch.compile(fn, backend="neuron") if compiled else fn
    out = run(*inputs)
    return out, torch.autograd.grad(out, inputs, grad_output)


@pytest.mark.parametrize("batch_first", [True, False])
def test_multi_head_attention_gradients_match_eager(batch_first):
    # Dynamo keeps F.multi_head_attention_forward as one node; its attention is the math form
    # (decompositions.multi_head_attention_math), whose backward runs natively.
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=batch_first)
    x = torch.randn(2, 8, 32, generator=g, requires_grad=True)
    dy = torch.randn(2, 8, 32, generator=g)
    w = mha.in_proj_weight

    def f(x, w):
        return mha(x, x, x, need_weights=False)[0]

    first = len(backend.graph_reports())
    got, got_grads = _gradients(f, (x, w), dy, compiled=True)
    reports = backend.graph_reports()[first:]
    want, want_grads = _gradients(f, (x, w), dy, compiled=False)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert reports and not any(r.fallbacks for r in reports)


def test_cpu_flash_attention_op_in_training_has_eager_gradients():
    # Reached directly, the fused op's decomposition hands its backward (run in PyTorch) the
    # rows' logsumexp, not the probabilities.
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 4, 16, 8, generator=g, requires_grad=True) for _ in range(3))
    dy = torch.randn(2, 16, 8, generator=g)

    def f(q, k, v):
        out = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v,
                                                                         is_causal=True)[0]
        return out.sum(1) * 2.0

    first = len(backend.graph_reports())
    got, got_grads = _gradients(f, (q, k, v), dy, compiled=True)
    reports = backend.graph_reports()[first:]
    want, want_grads = _gradients(f, (q, k, v), dy, compiled=False)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert [n.op for r in reports for n in r.fallbacks] == \
        ["aten._scaled_dot_product_flash_attention_for_cpu_backward"]

class PackedProjection(torch.nn.Module):
    """q, k, v unpacked row by row from one projection, as BERT-style attention does."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)

    def forward(self, x):
        q, k, v = self.qkv(x).view(x.shape[0], 3, 16).permute(1, 0, 2)
        return (q * k + v * v).sum()


def test_rows_unpacked_one_by_one_have_a_stacked_gradient(tmp_path, monkeypatch):
    """The backward of `q, k, v = t` is one concatenation of the three gradients, not three
    zero-filled scatters summed (decompositions._unbind_indexed_rows)."""
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))
    torch.manual_seed(0)
    model = PackedProjection()
    x = torch.randn(8, 16)
    model(x).backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch.compile(model, backend="neuron")(x).backward()
    for p, want in zip(model.parameters(), expected):
        torch.testing.assert_close(p.grad, want)
    backward = next(tmp_path.glob("*_backward.fx.txt")).read_text()
    assert "aten.cat" in backward
    assert "aten.where" not in backward and "select_scatter" not in backward


def test_a_single_indexed_row_is_left_as_it_is():
    def take_one(t):
        return t[1] * 2

    gm = torch.fx.symbolic_trace(take_one)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            node.meta["example_value"] = torch.zeros(3, 4)
    assert decompositions.rewrite_dynamo_graph(gm) == 0


def _backward_with_and_without(option: str, model, x, dy, tmp_path, monkeypatch) -> dict:
    """{fused: (parameter gradients, the backward graph's profile, its trn stage)} of one
    compiled training step with compile option `option` on (True) and off (False)."""
    results = {}
    for fused in (True, False):
        model.zero_grad()
        dump = tmp_path / str(fused)
        monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(dump))
        torch._dynamo.reset()
        torch.compile(model, backend="neuron", options={option: fused})(x).backward(dy)
        trn = next(dump.glob("*backward.trn.mlir")).read_text()
        results[fused] = ([p.grad.clone() for p in model.parameters()],
                          backend.compiled_graphs()[-1].last_profile, trn)
        assert all(r.fully_compiled for r in backend.graph_reports()[-2:])
    return results


# 384 tokens: K-tiles of consecutive rows; 512: four rows per partition (interleaved K, as
# kernels/matmul.py's interleave_k chooses for rows this short).
@pytest.mark.parametrize("dtype,tokens", [(torch.float32, 384), (torch.bfloat16, 384),
                                          (torch.float32, 512)])
def test_bias_gradient_computed_with_the_weight_gradient(dtype, tokens, tmp_path, monkeypatch):
    """trn-fuse bias-gradients: a Linear's bias gradient (dY summed over tokens) comes from the
    kernel of its weight gradient (dY^T @ X), on PE from the dY tiles that kernel loads, not
    from a kernel reading dY again; gradients as eager's and as the separate kernels'."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(192, 320).to(dtype)
    x = torch.randn(tokens, 192).to(dtype)
    dy = torch.randn(tokens, 320).to(dtype)
    linear(x).backward(dy)
    expected = [p.grad.clone() for p in linear.parameters()]
    results = _backward_with_and_without("fuse_bias_gradients", linear, x, dy, tmp_path,
                                         monkeypatch)
    (on, on_profile, on_trn), (off, off_profile, off_trn) = results[True], results[False]
    etype = "bf16" if dtype == torch.bfloat16 else "f32"
    both = f"-> (tensor<320x192x{etype}>, tensor<320x{etype}>)"
    assert both in on_trn and both not in off_trn
    tolerance = dict(atol=5e-2, rtol=2e-2) if dtype == torch.bfloat16 else \
        dict(atol=1e-4, rtol=1e-5)
    for got, unfused, want in zip(on, off, expected):
        torch.testing.assert_close(got, want, **tolerance)
        torch.testing.assert_close(got, unfused, **tolerance)
    assert off_profile.dma_bytes - on_profile.dma_bytes >= dy.numel() * dtype.itemsize


# Tokens and hidden units not whole tiles nor whole blocks; 256 output features: two
# hidden tiles per block; 640 (two 512-feature chunks): one.
@pytest.mark.parametrize("dtype,tokens,hidden,features", [
    (torch.float32, 300, 320, 192), (torch.bfloat16, 384, 384, 256),
    (torch.bfloat16, 256, 256, 640)])
def test_first_weight_gradient_computed_with_the_gradient_it_reads(dtype, tokens, hidden,
                                                                   features, tmp_path,
                                                                   monkeypatch):
    """trn-fuse weight-gradients: in a Linear - GELU - Linear block's backward whose input
    needs no gradient, the gradient of the first Linear's output (dY @ W2 times GELU's
    derivative) is read only by that Linear's weight and bias gradients. One kernel computes
    it 128 tokens at a time and multiplies it into the weight gradient on chip: it is never
    written to HBM nor read back. Gradients as eager's and as the separate kernels'."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.GELU(),
                                torch.nn.Linear(hidden, 96)).to(dtype)
    x = torch.randn(tokens, features).to(dtype)
    dy = torch.randn(tokens, 96).to(dtype)
    model(x).backward(dy)
    expected = [p.grad.clone() for p in model.parameters()]
    results = _backward_with_and_without("fuse_weight_gradients", model, x, dy, tmp_path,
                                         monkeypatch)
    (on, on_profile, on_trn), (off, off_profile, off_trn) = results[True], results[False]
    assert 'kind = "weight_gradient"' in on_trn and 'kind = "weight_gradient"' not in off_trn
    tolerance = dict(atol=6e-2, rtol=2e-2) if dtype == torch.bfloat16 else \
        dict(atol=1e-4, rtol=1e-4)
    for got, unfused, want in zip(on, off, expected):
        torch.testing.assert_close(got, want, **tolerance)
        torch.testing.assert_close(got, unfused, **tolerance)
    # The gradient [tokens, hidden] is neither written nor read back.
    gradient_bytes = tokens * hidden * dtype.itemsize
    assert off_profile.dma_bytes - on_profile.dma_bytes >= 2 * gradient_bytes


def test_weight_gradient_span_is_two_blocks_where_psum_and_sbuf_leave_room():
    """The hidden columns a weight_gradient kernel computes T for at once: two of W's blocks
    where PSUM holds the block's W accumulators, two of T's over the span, its sums and a
    bank for transposes, and T's tiles over the span fit the SBUF left; else one block."""
    from torchneuron.compiler.kernels.weight_gradient import hidden_span
    from torchneuron.target import get_target

    target, kib = get_target("trn2"), 1024
    # The MLP benchmark's backward: W in blocks of 256 hidden units (1024 features: four
    # banks), T over 512 (two banks of accumulators, one of sums, one for transposes).
    assert hidden_span(target, 4096, 256, 1024, 2048, True, 100 * kib, 2) == 512
    # T's tiles over 512 columns for 2048 tokens: 16 KiB per partition.
    assert hidden_span(target, 4096, 256, 1024, 2048, True, 15 * kib, 2) == 256
    # One block of hidden units only; blocks of 512 already.
    assert hidden_span(target, 256, 256, 1024, 2048, True, 100 * kib, 2) == 256
    assert hidden_span(target, 4096, 512, 512, 2048, True, 100 * kib, 2) == 512
    # 1536 features: blocks of 128 (three banks of W); T over 256 fits beside them.
    assert hidden_span(target, 4096, 128, 1536, 2048, True, 100 * kib, 2) == 256


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_weight_gradient_over_hidden_spans_has_the_same_bits(dtype, tmp_path, monkeypatch):
    """convert-trn-to-nisa hidden-spans in a weight_gradient kernel: 640 input features put W
    in blocks of 256 hidden units; T (the gradient of the first Linear's output) is computed
    for spans of 512 (the last one 128 wide) and kept in SBUF for the span's second block,
    and its sums over the tokens (the bias gradient) are taken over the span at once. The
    same products summed in the same order: the gradients bit for bit those without it."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(640, 640), torch.nn.GELU(),
                                torch.nn.Linear(640, 96)).to(dtype)
    x = torch.randn(256, 640).to(dtype)
    dy = torch.randn(256, 96).to(dtype)
    results = _backward_with_and_without("mlp_hidden_spans", model, x, dy, tmp_path,
                                         monkeypatch)
    (on, on_profile, on_trn), (off, off_profile, _) = results[True], results[False]
    assert 'kind = "weight_gradient"' in on_trn
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    for got, without in zip(on, off):
        assert torch.equal(got.view(bits), without.view(bits))
    # Three blocks (0, 256, 512) in two spans: per token tile (two), one first matmul
    # (96 features: one K-tile) and one sums matmul fewer.
    assert off_profile.opcode_counts["matmul"] - on_profile.opcode_counts["matmul"] == 4


def test_weight_gradient_kernel_not_formed_when_the_gradient_is_read_elsewhere(tmp_path,
                                                                              monkeypatch):
    """Where the block's input needs its gradient too (dX = T @ W1 reads T as well), T must
    reach HBM: the weight gradient stays a kernel of its own."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 64))
    x = torch.randn(256, 128, requires_grad=True)
    dy = torch.randn(256, 64)
    model(x).backward(dy)
    expected = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    x.grad = None
    model.zero_grad()
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))
    torch._dynamo.reset()
    torch.compile(model, backend="neuron")(x).backward(dy)
    got = [x.grad] + [p.grad for p in model.parameters()]
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)
    assert 'kind = "weight_gradient"' not in next(tmp_path.glob("*backward.trn.mlir")).read_text()


def test_batched_matmul_of_short_rows_matches_eager():
    """A^T @ B over [512, 64] slices (an attention backward's shapes): both operands are
    loaded four rows per partition and K-tile j is rows 4p + j of both; the products are
    eager's."""
    torch.manual_seed(0)
    a, b = torch.randn(3, 512, 64), torch.randn(3, 512, 96)
    torch._dynamo.reset()
    got = torch.compile(lambda a, b: torch.bmm(a.transpose(1, 2), b), backend="neuron")(a, b)
    assert backend.graph_reports()[-1].fully_compiled
    torch.testing.assert_close(got, torch.bmm(a.transpose(1, 2), b), atol=1e-4, rtol=1e-5)
