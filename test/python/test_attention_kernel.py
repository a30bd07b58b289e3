"""The attention kernel (trn-fuse attention, compiler/kernels/attention.py): scores, softmax
and the product with the values computed on chip, 128 query rows at a time."""

import re

import pytest

torch = pytest.importorskip("torch")

from torchneuron import backend  # noqa: E402


class PackedAttention(torch.nn.Module):
    """BERT-style: heads split out of one q/k/v projection, scaled scores, optional causal
    mask, softmax, @ values, heads merged."""

    def __init__(self, d: int, heads: int, causal: bool):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = torch.nn.Linear(d, 3 * d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) * (d // self.heads) ** -0.5
        if self.causal:
            mask = torch.ones(s, s, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, d)


def _run(model, x, tmp_path, monkeypatch, **options):
    dump = tmp_path / ("on" if options.get("fuse_attention", True) else "off")
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(dump))
    with torch.no_grad():
        out = torch.compile(model, backend="neuron", options=options)(x)
    graph = backend.compiled_graphs()[-1]
    trn = next(dump.glob("*.trn.mlir")).read_text()
    return out, graph.last_profile, trn


def _run_each(model, x, tmp_path, monkeypatch, **variants):
    """`_run` of `model` on `x` once per variant (name: its options), Dynamo reset between."""
    results = {}
    for name, options in variants.items():
        torch._dynamo.reset()
        results[name] = _run(model, x, tmp_path / name, monkeypatch, **options)
    return results


def _train_step(model, x, dump, monkeypatch, **options):
    """One compiled training step of `model` on `x` (`x` and the model's gradients cleared
    first): its output, x's gradient, the QKV projection's weight gradient, the forward's
    trn stage and the forward's profile."""
    torch._dynamo.reset()
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(dump))
    compiled = torch.compile(model, backend="neuron", options=options)
    x.grad = None
    model.zero_grad()
    out = compiled(x)
    out.float().sum().backward()
    assert all(r.fully_compiled for r in backend.graph_reports()[-2:])
    forward = next(g for g in backend.compiled_graphs()[-2:] if "forward" in g.name)
    forward_trn = next(dump.glob("*forward.trn.mlir")).read_text()
    return out, x.grad.clone(), model.qkv.weight.grad.clone(), forward_trn, forward.last_profile


@pytest.mark.parametrize("dtype,causal,seq", [(torch.float32, False, 128),
                                              (torch.bfloat16, False, 256),
                                              (torch.bfloat16, True, 128)])
def test_attention_on_chip_matches_eager_and_the_unfused_kernels(dtype, causal, seq, tmp_path,
                                                                 monkeypatch):
    torch.manual_seed(0)
    model = PackedAttention(64, 2, causal).to(dtype).eval()
    x = torch.randn(2, seq, 64).to(dtype)
    with torch.no_grad():
        expected = model(x)
    fused, fused_profile, fused_trn = _run(model, x, tmp_path, monkeypatch)
    torch._dynamo.reset()
    unfused, unfused_profile, unfused_trn = _run(model, x, tmp_path, monkeypatch,
                                                 fuse_attention=False,
                                                 fuse_matmul_rows=False)
    assert 'kind = "attention"' in fused_trn
    assert 'kind = "attention"' not in unfused_trn
    tolerance = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(fused, expected, **tolerance)
    # The same roundings in the same places: the unfused kernels' result, up to the order
    # in which PE sums one instruction's products.
    torch.testing.assert_close(fused, unfused, atol=1e-6 if dtype == torch.float32 else 8e-3,
                               rtol=1e-5 if dtype == torch.float32 else 8e-3)
    # Scores and probabilities no longer cross HBM (4 bytes each, twice each way unfused).
    rows = 2 * 2 * seq * seq
    assert unfused_profile.dma_bytes - fused_profile.dma_bytes >= rows * dtype.itemsize * 3


class SavedProbabilities(torch.nn.Module):
    """A softmax whose probabilities are a result (as a training step saves them): no
    attention kernel, but the scores can still stay on chip."""

    def forward(self, q, k):
        return (q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5).softmax(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_rows_keeps_the_scores_on_chip(dtype, tmp_path, monkeypatch):
    """trn-fuse matmul-rows: the scores matmul and the softmax over its rows are one kernel;
    the probabilities are those of the two kernels, and the scores do not cross HBM."""
    torch.manual_seed(0)
    q, k = (torch.randn(2, 3, 256, 32).to(dtype) for _ in range(2))
    model = SavedProbabilities()
    results = {}
    for fused in (True, False):
        torch._dynamo.reset()
        dump = tmp_path / str(fused)
        monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(dump))
        out = torch.compile(model, backend="neuron",
                            options={"fuse_matmul_rows": fused})(q, k)
        trn = next(dump.glob("*.trn.mlir")).read_text()
        assert backend.graph_reports()[-1].fully_compiled
        results[fused] = (out, backend.compiled_graphs()[-1].last_profile, trn)
    (on, on_profile, on_trn), (off, off_profile, off_trn) = results[True], results[False]
    assert 'kind = "matmul_rows"' in on_trn and 'kind = "matmul_rows"' not in off_trn
    tolerance = dict(atol=1e-2, rtol=1e-2) if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(on, model(q, k), **tolerance)
    torch.testing.assert_close(on, off, atol=1e-6 if dtype == torch.float32 else 4e-3,
                               rtol=1e-5 if dtype == torch.float32 else 4e-3)
    scores = 2 * 3 * 256 * 256 * dtype.itemsize
    assert off_profile.dma_bytes - on_profile.dma_bytes >= 2 * scores


def test_softmax_gradient_stays_on_chip(tmp_path, monkeypatch):
    """In a training step, the gradient of the probabilities (a matmul of the output's
    gradient by the values), the softmax backward over its rows, the matmul of that gradient
    by K (dQ) and the one contracting it with Q over the queries (dK^T) form one attention
    kernel: the softmax gradient never reaches HBM. With attention-contractions off the
    kernel stores the gradient for dK's own matmul kernel; with attention-saved off, the
    first two form a matmul_rows kernel. Gradients are eager's in every case."""
    torch.manual_seed(0)
    model = PackedAttention(64, 2, causal=False)
    x = torch.randn(2, 256, 64, requires_grad=True)
    configs = {"contract": {}, "store": {"fuse_attention_contractions": False},
               "rows": {"fuse_attention_saved": False}}
    grads, kinds, dma = {}, {}, {}
    for name, options in configs.items():
        torch._dynamo.reset()
        dump = tmp_path / name
        monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(dump))
        compiled = torch.compile(model, backend="neuron", options=options)
        x.grad = None
        compiled(x).sum().backward()
        grads[name] = x.grad.clone()
        backward = next(dump.glob("*backward.trn.mlir")).read_text()
        kinds[name] = (backward.count('kind = "attention"'),
                       backward.count('kind = "matmul_rows"'))
        graph = next(g for g in backend.compiled_graphs()[-2:] if "backward" in g.name)
        dma[name] = graph.last_profile.dma_bytes
        assert all(r.fully_compiled for r in backend.graph_reports()[-2:])
    assert kinds == {"contract": (1, 0), "store": (1, 0), "rows": (0, 1)}
    gradient = 2 * 2 * 256 * 256 * 4          # the softmax gradient, fp32 here
    assert dma["store"] - dma["contract"] >= 2 * gradient
    x.grad = None
    model(x).sum().backward()
    for name in configs:
        torch.testing.assert_close(grads[name], x.grad, atol=1e-4, rtol=1e-4)


def test_softmax_gradient_scaling_moves_onto_q(tmp_path, monkeypatch):
    """convert-trn-to-nisa scale-into-q: the softmax backward's gradient of the scaled scores,
    dS = (dP * P - P * rowsum(dP * P)) * d^-0.5, is linear in dP = dO @ V^T, so the scaling
    (a power of two for d = 64) is applied to dO^T as it leaves PSUM instead of in a pass over
    every row of dS: the same gradients bit for bit, less ACT and DVE time."""
    torch.manual_seed(3)
    model = PackedAttention(128, 2, causal=False).bfloat16()
    x = torch.randn(2, 256, 128, dtype=torch.bfloat16, requires_grad=True)
    grads, vector_us, isa = {}, {}, {}
    for fold in (True, False):
        torch._dynamo.reset()
        dump = tmp_path / str(fold)
        monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(dump))
        compiled = torch.compile(model, backend="neuron",
                                 options={"attention_scale_into_q": fold, "fallback": False})
        x.grad = None
        compiled(x).float().sum().backward()
        grads[fold] = x.grad.clone()
        graph = next(g for g in backend.compiled_graphs()[-2:] if "backward" in g.name)
        streams = graph.last_profile.streams
        vector_us[fold] = sum(streams[e].busy_ns for e in ("act", "dve")) / 1000
        isa[fold] = next(dump.glob("*backward.isa.mlir")).read_text()
    assert torch.equal(grads[True], grads[False])
    # The pass over dS's rows [128, 256] of each query block is gone; dO^T's blocks, turned
    # on PE, are scaled as they are copied out of PSUM.
    scaled_rows = re.compile(r'"nisa.(activation|tensor_scalar)".*1\.250000e-01.*'
                             r'memref<128x256xbf16, "sbuf">, memref<128x256xf32, "sbuf">')
    assert scaled_rows.search(isa[False]) and not scaled_rows.search(isa[True])
    assert vector_us[True] < vector_us[False], vector_us
    x.grad = None
    model.float()(x.float()).sum().backward()
    torch.testing.assert_close(grads[True].float(), x.grad.float(), atol=3e-2, rtol=3e-2)


def test_attention_also_stores_the_probabilities_a_training_step_saves(tmp_path, monkeypatch):
    """trn-fuse attention-saved: in a training step's forward the probabilities saved for the
    backward are stored by the attention kernel that multiplies them by the values, instead
    of being stored by a matmul_rows kernel and loaded back by a matmul kernel: the same bits
    (forward and gradients), the probabilities' bytes not read back."""
    torch.manual_seed(0)
    model = PackedAttention(64, 2, causal=False).to(torch.bfloat16)
    x = torch.randn(2, 256, 64).to(torch.bfloat16).requires_grad_()
    on, on_grad, _, on_trn, on_profile = _train_step(model, x, tmp_path / "on", monkeypatch,
                                                     fuse_attention_saved=True)
    off, off_grad, _, off_trn, off_profile = _train_step(model, x, tmp_path / "off",
                                                         monkeypatch, fuse_attention_saved=False)
    assert 'kind = "attention"' in on_trn and 'kind = "attention"' not in off_trn
    assert torch.equal(on.view(torch.int16), off.view(torch.int16))
    assert torch.equal(on_grad.view(torch.int16), off_grad.view(torch.int16))
    with torch.no_grad():
        torch.testing.assert_close(on, model(x), atol=2e-2, rtol=2e-2)
    probabilities = 2 * 2 * 256 * 256 * 2
    assert off_profile.dma_bytes - on_profile.dma_bytes >= probabilities


@pytest.mark.parametrize("causal,seq,d", [(False, 128, 64), (True, 256, 128)])
def test_training_forward_computes_qkv_in_the_attention_kernel(causal, seq, d, tmp_path,
                                                               monkeypatch):
    """trn-fuse-attention-output qkv-saved: in a training step's forward, which saves Q, K^T
    and V (views of the QKV projection's result) besides the probabilities, the projection
    joins the attention kernel, which stores the saved views from its row tiles and staged
    K^T: the same bits (forward, input and weight gradients), and the projection's result is
    neither stored nor read back, by the attention or by the copies into Q, K^T and V. With
    a causal mask the attention skips keys a query tile cannot see, but stores all of K^T."""
    torch.manual_seed(0)
    batch = 2
    model = PackedAttention(d, 2, causal=causal).to(torch.bfloat16)
    x = torch.randn(batch, seq, d).to(torch.bfloat16).requires_grad_()
    on, on_grad, on_wgrad, on_trn, on_profile = _train_step(
        model, x, tmp_path / "on", monkeypatch, fuse_attention_qkv_saved=True)
    off, off_grad, off_wgrad, off_trn, off_profile = _train_step(
        model, x, tmp_path / "off", monkeypatch, fuse_attention_qkv_saved=False)
    assert "trn.attention_input" in on_trn and "trn.attention_input" not in off_trn
    assert on_trn.count('"trn.kernel"') == off_trn.count('"trn.kernel"') - 1
    for a, b in ((on, off), (on_grad, off_grad), (on_wgrad, off_wgrad)):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    with torch.no_grad():
        torch.testing.assert_close(on, model(x), atol=2e-2, rtol=2e-2)
    qkv_bytes = batch * seq * 3 * d * 2
    assert off_profile.dma_bytes - on_profile.dma_bytes == 3 * qkv_bytes


def test_short_sequences_of_many_heads_keep_separate_kernels(tmp_path, monkeypatch):
    """64 query rows per head: a 128-row tile would span two heads, so no attention kernel;
    the result is still right."""
    torch.manual_seed(0)
    model = PackedAttention(64, 2, causal=False).eval()
    x = torch.randn(2, 64, 64)
    out, _, trn = _run(model, x, tmp_path, monkeypatch)
    assert 'kind = "attention"' not in trn
    with torch.no_grad():
        torch.testing.assert_close(out, model(x))


class FlatHeadsAttention(torch.nn.Module):
    """Scores scaled over flattened (batch x heads) before being viewed per head: the scaling
    is part of the scores matmul's epilogue, applied while evacuating PSUM."""

    def forward(self, q, k, v):
        b, h, s, d = q.shape
        scores = torch.bmm(q.reshape(b * h, s, d), k.reshape(b * h, s, d).transpose(1, 2))
        probs = (scores * d ** -0.5).view(b, h, s, s).softmax(-1)
        return probs.reshape(b * h, s, s) @ v.reshape(b * h, s, d)


def test_a_scaling_before_the_per_head_view_runs_in_the_scores_evacuation(tmp_path,
                                                                          monkeypatch):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 128, 32) for _ in range(3))
    model = FlatHeadsAttention()
    dump = tmp_path / "dump"
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(dump))
    out = torch.compile(model, backend="neuron")(q, k, v)
    trn = next(dump.glob("*.trn.mlir")).read_text()
    kernel = trn[trn.index('"trn.kernel"'):trn.index('kind = "attention"')]
    matmul = kernel.index('"trn.matmul"')
    assert kernel.index('"trn.tensor_scalar"') > matmul
    assert kernel.index('"trn.tensor_scalar"') < kernel.index('"trn.reshape"', matmul)
    torch.testing.assert_close(out, model(q, k, v))


class AttentionThenProjection(PackedAttention):
    """The output projection after the heads are merged, as an encoder layer has it."""

    def __init__(self, d: int, heads: int):
        super().__init__(d, heads, causal=False)
        self.proj = torch.nn.Linear(d, d)

    def forward(self, x):
        return self.proj(super().forward(x))


@pytest.mark.parametrize("model_class", [PackedAttention, AttentionThenProjection])
def test_token_major_attention_output_gives_the_same_bits_in_fewer_transfers(
        model_class, tmp_path, monkeypatch):
    """trn-layout attention-token-major: the attention kernel stores [B, S, H, Dv] as whole
    token rows; the values are the same, the transfers fewer and larger. (The projections
    stay kernels of their own: with trn-fuse-attention-output qkv-saved, which these
    inference graphs take too, the projection reads the output on chip.)"""
    torch.manual_seed(0)
    model = (model_class(256, 4) if model_class is AttentionThenProjection
             else model_class(256, 4, False)).to(torch.bfloat16).eval()
    x = torch.randn(2, 128, 256).to(torch.bfloat16)
    on, on_profile, on_trn = _run(model, x, tmp_path / "on", monkeypatch,
                                  fuse_attention_qkv_saved=False)
    torch._dynamo.reset()
    off, off_profile, off_trn = _run(model, x, tmp_path / "off", monkeypatch,
                                     attention_token_major=False,
                                     fuse_attention_qkv_saved=False)
    one = 'kind = "attention", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> '
    assert one + 'tensor<2x128x4x64xbf16>' in on_trn
    assert one + 'tensor<8x128x64xbf16>' in off_trn
    torch.testing.assert_close(on, off, atol=0, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(on, model(x), atol=2e-2, rtol=2e-2)
    transfers = lambda p: sum(1 for e in p.events if e.stream.startswith("q"))  # noqa: E731
    assert transfers(on_profile) < transfers(off_profile)


class PostNormAttentionBlock(PackedAttention):
    """An encoder layer's attention half: the output projection, the residual add and the
    layer norm after the attention (with `also_context`, the heads' merged output is returned
    too)."""

    def __init__(self, d: int, heads: int, also_context: bool = False, causal: bool = False):
        super().__init__(d, heads, causal=causal)
        self.proj = torch.nn.Linear(d, d)
        self.norm = torch.nn.LayerNorm(d)
        self.also_context = also_context

    def forward(self, x):
        context = super().forward(x)
        y = self.norm(x + self.proj(context))
        return (y, context) if self.also_context else y


@pytest.mark.parametrize("d,heads,batch,seq,causal", [(128, 2, 2, 128, False),
                                                      (256, 4, 3, 256, False),
                                                      (192, 3, 2, 256, True)])
def test_attention_output_stays_on_chip_for_the_projection(d, heads, batch, seq, causal,
                                                           tmp_path, monkeypatch):
    """trn-fuse-attention-output: the attention kernel and the projection's linear_rows
    kernel (Linear, residual, layer norm) become one kernel, the attention output's token
    rows going from the one part to the other in SBUF; and (option fuse_attention_qkv) the
    QKV projection joins in front, each batch index's Q, K and V rows computed on chip as
    the attention stages them. The same instructions turn the same values on PE, so the
    output is the unfused kernels' bit for bit; the attention output's store and load
    (B * S * d elements each) and then Q, K and V's (3 * B * S * d) are gone, and the rows
    of x loaded for the projection are the residual's (B * S * d fewer loaded)."""
    torch.manual_seed(0)
    model = PostNormAttentionBlock(d, heads, causal=causal).to(torch.bfloat16).eval()
    x = torch.randn(batch, seq, d).to(torch.bfloat16)
    runs = _run_each(model, x, tmp_path, monkeypatch, on={},
                     noqkv={"fuse_attention_qkv": False}, off={"fuse_attention_output": False})
    fused, fused_profile, fused_trn = runs["on"]
    no_qkv, no_qkv_profile, no_qkv_trn = runs["noqkv"]
    unfused, unfused_profile, unfused_trn = runs["off"]
    assert fused_trn.count('"trn.kernel"') == 1 and \
        'kind = "attention_linear_rows"' in fused_trn and "trn.attention_input" in fused_trn
    assert no_qkv_trn.count('"trn.kernel"') == 2 and \
        'kind = "attention_linear_rows"' in no_qkv_trn and 'kind = "matmul"' in no_qkv_trn
    assert 'kind = "attention"' in unfused_trn and 'kind = "linear_rows"' in unfused_trn
    torch.testing.assert_close(fused, unfused, atol=0, rtol=0)
    torch.testing.assert_close(no_qkv, unfused, atol=0, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(fused, model(x), atol=3e-2, rtol=3e-2)
    elements = batch * seq * d
    assert unfused_profile.dma_bytes - no_qkv_profile.dma_bytes == 2 * elements * 2
    assert no_qkv_profile.dma_bytes - fused_profile.dma_bytes == (2 * 3 + 1) * elements * 2


@pytest.mark.parametrize("batch,seq,paired", [(2, 256, True), (3, 256, True), (2, 128, False)])
def test_next_batch_index_qkv_rows_are_computed_beside_the_attention(batch, seq, paired,
                                                                   tmp_path, monkeypatch):
    """convert-trn-to-nisa overlap-projection: the QKV projection computed in the attention
    kernel evacuates its output tiles one at a time (768 features: two PSUM tiles per row
    block), and where each batch index has more than one query block its tiles and the
    attention's are a co-run pair in disjoint parts of SBUF and PSUM, so the next batch
    index's rows are computed while the attention works: the same bits, in less simulated
    time; with one query block per batch index no pair forms."""
    torch.manual_seed(0)
    model = PostNormAttentionBlock(256, 4).to(torch.bfloat16).eval()
    x = torch.randn(batch, seq, 256).to(torch.bfloat16)
    runs = _run_each(model, x, tmp_path, monkeypatch, on={},
                     off={"attention_overlap_projection": False})
    (on, on_profile, on_trn), (off, off_profile, _) = runs["on"], runs["off"]
    assert "trn.attention_input" in on_trn
    torch.testing.assert_close(on, off, atol=0, rtol=0)
    isa = {name: next((tmp_path / name / "on").glob("*.isa.mlir")).read_text()
           for name in runs}
    assert "co_run" not in isa["off"]
    for memory in ("sbuf", "psum"):
        for role in ("partner", "primary"):
            assert (f'co_run_role = "{role}", memory = "{memory}"' in isa["on"]) == paired
    if paired:
        assert on_profile.total_ns < off_profile.total_ns


@pytest.mark.parametrize("d,heads,batch,seq,causal", [(128, 2, 2, 128, False),
                                                      (192, 3, 2, 256, True)])
def test_training_forward_keeps_the_attention_output_on_chip_for_the_projection(
        d, heads, batch, seq, causal, tmp_path, monkeypatch):
    """trn-fuse-attention-output qkv-saved with the output projection: in a training step's
    forward the projection (its bias and the residual) joins the kernel that computes Q, K
    and V and the attention, and reads the attention output's token rows on chip as the
    kernel stores them (the step saves them), the residual from the rows the QKV projection
    loaded. The same bits (forward, input gradient, both projections' weight gradients);
    besides Q, K and V's three trips, the output's reload and the residual's are gone. In
    the backward the Linear computing dO joins the softmax backward's kernel the same way,
    storing dO whole for dV's kernel."""
    torch.manual_seed(0)
    model = PostNormAttentionBlock(d, heads, causal=causal).to(torch.bfloat16)
    x = torch.randn(batch, seq, d).to(torch.bfloat16).requires_grad_()
    results = {}
    for on in (True, False):
        out, x_grad, qkv_grad, trn, profile = _train_step(
            model, x, tmp_path / str(on), monkeypatch, fuse_attention_qkv_saved=on)
        results[on] = (out, x_grad, qkv_grad, model.proj.weight.grad.clone(), trn, profile)
    on, off = results[True], results[False]
    assert "trn.attention_output" in on[4] and "trn.attention_output" not in off[4]
    backward = {on: next((tmp_path / str(on)).glob("*backward.trn.mlir")).read_text()
                for on in (True, False)}
    assert "trn.attention_input" in backward[True]
    assert "trn.attention_input" not in backward[False]
    for a, b in zip(on[:4], off[:4]):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    elements = batch * seq * d
    assert off[5].dma_bytes - on[5].dma_bytes == (3 * 3 + 2) * elements * 2


class PreNormAttentionBlock(PackedAttention):
    """A decoder layer's attention half as GPT-2 has it: the layer norm before the QKV
    projection, the output projection and the residual add after the attention."""

    def __init__(self, d: int, heads: int, causal: bool = True):
        super().__init__(d, heads, causal=causal)
        self.proj = torch.nn.Linear(d, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        return x + self.proj(super().forward(self.norm(x)))


@pytest.mark.parametrize("d,heads,batch,seq,causal", [(128, 2, 2, 128, True),
                                                      (192, 3, 1, 256, False)])
def test_inference_attention_computes_qkv_and_the_projection_on_chip(
        d, heads, batch, seq, causal, tmp_path, monkeypatch):
    """trn-fuse-attention-output qkv-saved where nothing is saved: in a pre-norm layer's
    inference the QKV projection joins the attention kernel in front and the output
    projection (its bias and the residual) behind, the kernel yielding only the
    projection's result; and (input-rows) the norm before the QKV projection joins in
    front of that, its rows kept on chip for the projection's staging and the rows of x it
    loads for the residual. The same bits as the separate kernels; Q, K and V's store and
    load (3 * B * S * d elements each way), the attention output's and the norm output's
    are gone, and x is loaded once."""
    torch.manual_seed(0)
    model = PreNormAttentionBlock(d, heads, causal=causal).to(torch.bfloat16).eval()
    x = torch.randn(batch, seq, d).to(torch.bfloat16)
    runs = _run_each(model, x, tmp_path, monkeypatch, on={},
                     norows={"fuse_input_rows": False}, off={"fuse_attention_qkv_saved": False})
    fused, fused_profile, fused_trn = runs["on"]
    no_rows, no_rows_profile, no_rows_trn = runs["norows"]
    apart, apart_profile, apart_trn = runs["off"]
    assert "trn.attention_input" in fused_trn and "trn.attention_output" in fused_trn
    assert "trn.input_rows" in fused_trn and "trn.input_rows" not in no_rows_trn
    assert "trn.attention_input" not in apart_trn
    assert fused_trn.count('"trn.kernel"') == 1
    assert no_rows_trn.count('"trn.kernel"') == apart_trn.count('"trn.kernel"') - 2 == 2
    torch.testing.assert_close(fused, apart, atol=0, rtol=0)
    torch.testing.assert_close(no_rows, apart, atol=0, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(fused, model(x), atol=3e-2, rtol=3e-2)
    elements = batch * seq * d
    assert apart_profile.dma_bytes - no_rows_profile.dma_bytes == (2 * 3 + 2) * elements * 2
    # (The norm's output stored and loaded; the residual x, loaded by the norm, not again.)
    assert no_rows_profile.dma_bytes - fused_profile.dma_bytes == 3 * elements * 2


class PostNormEncoderLayer(PostNormAttentionBlock):
    """A whole post-norm encoder layer: the attention half, then the FFN, its residual add
    and layer norm."""

    def __init__(self, d: int, heads: int, hidden: int):
        super().__init__(d, heads)
        self.fc1, self.fc2 = torch.nn.Linear(d, hidden), torch.nn.Linear(hidden, d)
        self.norm2 = torch.nn.LayerNorm(d)

    def forward(self, x):
        x = super().forward(x)
        return self.norm2(x + self.fc2(torch.nn.functional.gelu(self.fc1(x))))


@pytest.mark.parametrize("d,heads,hidden,batch,seq", [(128, 2, 256, 2, 128),
                                                      (256, 4, 512, 1, 256)])
def test_encoder_layer_is_one_kernel_and_moves_only_its_compulsory_bytes(
        d, heads, hidden, batch, seq, tmp_path, monkeypatch):
    """trn-fuse-attention-output ffn: the FFN's mlp_rows kernel joins the attention
    kernel, taking the first layer norm's row tiles from SBUF for its first matmul and its
    residual. The layer is one kernel; bit for bit the kernels' result with the FFN apart,
    which stores the norm's output and loads it back (B * S * d elements each way); and
    what moves is the layer's input (its rows loaded for the QKV projection are the first
    residual's), its output and each weight, once each, and the partition-broadcast loads
    of its biases and norm weights ([128, n] each; the first FFN Linear's bias goes to ACT's
    bias port, one value per partition of its hidden units, loaded once)."""
    torch.manual_seed(0)
    model = PostNormEncoderLayer(d, heads, hidden).to(torch.bfloat16).eval()
    x = torch.randn(batch, seq, d).to(torch.bfloat16)
    fused, fused_profile, fused_trn = _run(model, x, tmp_path / "on", monkeypatch)
    torch._dynamo.reset()
    apart, apart_profile, apart_trn = _run(model, x, tmp_path / "off", monkeypatch,
                                           fuse_attention_ffn=False)
    assert fused_trn.count('"trn.kernel"') == 1 and "trn.rows_handed_on" in fused_trn
    assert apart_trn.count('"trn.kernel"') == 2 and 'kind = "mlp_rows"' in apart_trn
    # Each part's instructions keep their own source location (the profile's breakdowns):
    # the QKV projection's, the attention's, the first norm's and the FFN's.
    assert len({e.location for e in fused_profile.events if e.stream == "pe"}) == 4
    torch.testing.assert_close(fused, apart, atol=0, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(fused, model(x), atol=5e-2, rtol=5e-2)
    assert apart_profile.dma_bytes - fused_profile.dma_bytes == 2 * batch * seq * d * 2
    weights = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2)
    vectors = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 1)
    assert fused_profile.dma_bytes == 2 * (2 * batch * seq * d + weights +
                                           128 * (vectors - hidden) + hidden)


@pytest.mark.parametrize("model,shape,kept_apart", [
    (lambda: PostNormAttentionBlock(512, 8), (1, 2560, 512), 'kind = "matmul"'),
    (lambda: PostNormEncoderLayer(768, 12, 3072), (10, 128, 768), 'kind = "mlp_rows"')])
def test_encoder_parts_stay_apart_where_their_tiles_would_not_fit_sbuf(model, shape,
                                                                       kept_apart, tmp_path,
                                                                       monkeypatch):
    """What the merged kernel keeps in SBUF grows with the sequence (a batch index's Q, K and
    V rows) and with the tokens (the first norm's rows beside the FFN's resident weights):
    in fp32, 2560 tokens of one sequence at d = 512 leave the QKV projection apart, and
    10 x 128 tokens at d = 768 the FFN. (Merged, both ran out of SBUF and fell back to
    PyTorch.)"""
    torch.manual_seed(0)
    module = model().float().eval()
    x = torch.randn(*shape)
    out, _, trn = _run(module, x, tmp_path, monkeypatch)
    assert not backend.graph_reports()[-1].fallbacks
    assert 'kind = "attention_linear_rows"' in trn and kept_apart in trn
    with torch.no_grad():
        torch.testing.assert_close(out, module(x), atol=1e-4, rtol=1e-4)


class SdpaEncoderLayer(PostNormEncoderLayer):
    """The layer with F.scaled_dot_product_attention, whose decomposition widens Q, K and V
    to fp32 before the products."""

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        context = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        y = self.norm(x + self.proj(context.transpose(1, 2).reshape(b, s, d)))
        return self.norm2(y + self.fc2(torch.nn.functional.gelu(self.fc1(y))))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_qkv_rows_computed_on_chip_are_widened_where_the_attention_reads_fp32(
        dtype, tmp_path, monkeypatch):
    """SDPA reads Q, K and V widened to fp32: V's rows, computed on chip in the layer's
    dtype, are widened by a copy where a load would have widened them (the QKV merge once
    handed them to an fp32 product as they were, and the program failed its checks)."""
    torch.manual_seed(0)
    model = SdpaEncoderLayer(128, 2, 256).to(dtype).eval()
    x = torch.randn(2, 128, 128).to(dtype)
    fused, _, fused_trn = _run(model, x, tmp_path / "on", monkeypatch)
    assert not backend.graph_reports()[-1].fallbacks
    torch._dynamo.reset()
    apart, _, _ = _run(model, x, tmp_path / "off", monkeypatch, fuse_attention_output=False)
    assert "trn.attention_input" in fused_trn
    torch.testing.assert_close(fused, apart, atol=0, rtol=0)


class WideValueAttention(torch.nn.Module):
    """Separate Q, K and V projections, V's heads wider than Q's and K's (dv = 2 d)."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q, self.k = torch.nn.Linear(d, d), torch.nn.Linear(d, d)
        self.v, self.o = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (p(x).view(b, s, self.heads, -1).transpose(1, 2)
                   for p in (self.q, self.k, self.v))
        p = ((q @ k.transpose(-1, -2)) * (d // self.heads) ** -0.5).softmax(-1)
        return self.o((p @ v).transpose(1, 2).reshape(b, s, -1))


def test_attention_with_value_heads_wider_than_the_keys(tmp_path, monkeypatch):
    """Each head's values start at head * dv in V's staged columns, not at head * d where
    its K^T rows start (the kernel read the wrong head's values where dv != d)."""
    torch.manual_seed(0)
    model = WideValueAttention(128, 2).eval()
    x = torch.randn(2, 128, 128)
    out, _, trn = _run(model, x, tmp_path, monkeypatch)
    assert 'kind = "attention"' in trn
    with torch.no_grad():
        torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-5)


def test_attention_output_read_elsewhere_keeps_its_own_kernel(tmp_path, monkeypatch):
    """An attention output that is also a result (a training step saves it; here the model
    returns it) is stored by its own kernel, and the projection loads it."""
    torch.manual_seed(0)
    model = PostNormAttentionBlock(128, 2, also_context=True).to(torch.bfloat16).eval()
    x = torch.randn(2, 128, 128).to(torch.bfloat16)
    (y, context), _, trn = _run(model, x, tmp_path, monkeypatch)
    assert 'kind = "attention_linear_rows"' not in trn and 'kind = "linear_rows"' in trn
    with torch.no_grad():
        expected_y, expected_context = model(x)
    torch.testing.assert_close(y, expected_y, atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(context, expected_context, atol=2e-2, rtol=2e-2)


def test_fully_masked_rows_give_zeros_without_a_select(tmp_path, monkeypatch):
    """SDPA with a mask zeroes rows whose every key is masked (max = -inf): the lowering does
    it by clamping the exp's bias and the divisor on [P, 1] columns (rows.py _safe_softmax),
    not with a select over every row tile."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 256, 64, dtype=torch.bfloat16) for _ in range(3))
    # An additive mask (a boolean one would add a select of its own, building it).
    mask = torch.zeros(256, 256, dtype=torch.bfloat16)
    mask[torch.rand(256, 256) > 0.5] = float("-inf")
    mask[3, :] = float("-inf")
    mask[130, :] = float("-inf")

    def attention(q, k, v, mask):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))
    with torch.no_grad():
        out = torch.compile(attention, backend="neuron")(q, k, v, mask)
        expected = attention(q, k, v, mask)
    assert not out.isnan().any()
    assert (out[:, :, [3, 130]] == 0).all()
    torch.testing.assert_close(out, expected, atol=2e-2, rtol=2e-2)
    isa = next(tmp_path.glob("*.isa.mlir")).read_text()
    assert '"nisa.select"' not in isa
    assert 'op0 = "max"' in isa and 'op1 = "min"' in isa


class CausalBiasAttention(torch.nn.Module):
    """Scores plus an additive causal mask built from aranges, as Hugging Face's GPT-2 builds
    it: the frontend folds the mask into a constant, which the attention kernel reads."""

    def forward(self, q, k, v):
        i = torch.arange(q.shape[-2])
        bias = torch.where(i[None, :] <= i[:, None], 0.0, float("-inf")).to(q.dtype)
        scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 + bias
        return scores.softmax(-1) @ v


class CausalSdpa(torch.nn.Module):
    """scaled_dot_product_attention(is_causal=True): a bool mask (folded by the frontend)
    selects -inf for the hidden keys."""

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def _with_and_without_masked_keys(model, *inputs):
    """(output, profile) of the model compiled with attention_masked_keys on, then off."""
    results = []
    for masked in (True, False):
        torch._dynamo.reset()
        with torch.no_grad():
            out = torch.compile(model, backend="neuron",
                                options={"attention_masked_keys": masked})(*inputs)
        assert backend.graph_reports()[-1].fully_compiled
        results.append((out, backend.compiled_graphs()[-1].last_profile))
    return results


@pytest.mark.parametrize("dtype,model", [(torch.float32, CausalBiasAttention()),
                                         (torch.bfloat16, CausalBiasAttention()),
                                         (torch.float32, CausalSdpa())])
def test_causal_attention_computes_only_the_keys_its_mask_lets_a_query_tile_see(dtype, model):
    """convert-trn-to-nisa masked-keys: query tile t of 128 rows sees key blocks 0..t only,
    so of 3 x 3 blocks of 128 x 128 scores 6 are computed (and multiplied by the values);
    the result is the all-keys kernel's up to the order of the sums."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 384, 64).to(dtype) for _ in range(3))
    (skipping, profile), (every_key, full_profile) = _with_and_without_masked_keys(model, q, k, v)
    tolerance = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(skipping, model(q, k, v), **tolerance)
    torch.testing.assert_close(skipping, every_key, atol=1e-6 if dtype == torch.float32 else 8e-3,
                               rtol=1e-5 if dtype == torch.float32 else 8e-3)
    assert profile.pe_flops <= full_profile.pe_flops * 0.7
    assert profile.opcode_counts["transpose"] < full_profile.opcode_counts["transpose"]


class MaskedSdpa(torch.nn.Module):
    """scaled_dot_product_attention with an additive float mask of 0 and -inf built from
    aranges (folded by the frontend): causal, and rows 0..3 see no key at all, which PyTorch's
    softmax makes zeros."""

    def forward(self, q, k, v):
        i = torch.arange(q.shape[-2])
        hidden = (i[None, :] > i[:, None]) | (i[:, None] < 4)
        mask = torch.where(hidden, float("-inf"), 0.0).to(q.dtype)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_a_zero_or_minus_inf_mask_is_added_before_the_scaling_where_it_is_not_zero():
    """convert-trn-to-nisa masked-keys: c s + m is computed as c (s + m), the mask added only
    on each query tile's columns where it is not 0, and the scaling folded into the exp: no
    activation pass scales the scores. The result is eager's, its fully masked rows zeros."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 256, 64) for _ in range(3))
    model = MaskedSdpa()
    (folded, profile), (_, full_profile) = _with_and_without_masked_keys(model, q, k, v)
    expected = model(q, k, v)
    assert torch.equal(expected[:, :, :4], torch.zeros_like(expected[:, :, :4]))
    torch.testing.assert_close(folded, expected)
    assert torch.equal(folded[:, :, :4], expected[:, :, :4])
    # One activation per head and 128-row query tile, the exp: none scales the scores.
    assert profile.opcode_counts["activate"] == 2 * 2
    assert full_profile.opcode_counts["activate"] > 2 * 2


def test_short_rows_read_transposed_move_four_to_a_partition(tmp_path, monkeypatch):
    """A batched product with K^T of [512, 64] slices (a saved key, as a training step's
    backward reads it): the slices' rows are loaded four to a partition (one 512 B run
    instead of four of 128 B), each quarter PE-transposed into every fourth column of the
    staged K^T, and the result is eager's."""
    torch.manual_seed(0)
    q = torch.randn(2, 128, 64).to(torch.bfloat16)
    k = torch.randn(2, 512, 64).to(torch.bfloat16)
    dump = tmp_path / "dump"
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(dump))
    torch._dynamo.reset()
    out = torch.compile(lambda a, b: torch.bmm(a, b.transpose(1, 2)), backend="neuron")(q, k)
    torch.testing.assert_close(out, torch.bmm(q, k.transpose(1, 2)), atol=2e-2, rtol=2e-2)
    isa = next(dump.glob("*.isa.mlir")).read_text()
    assert "memref<128x256xbf16, \"sbuf\">, memref<2x512x64xbf16, \"hbm\">" in isa


def _backward_on_and_off(model, x, option: str, tmp_path, monkeypatch) -> list[tuple]:
    """A compiled training step of `model` on `x` with boolean `option` on, then off: for
    each, the gradients (the model's parameters', then x's), the backward's trn stage and
    its DMA bytes."""
    results = []
    for value in (True, False):
        torch._dynamo.reset()
        dump = tmp_path / str(value)
        monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(dump))
        compiled = torch.compile(model, backend="neuron", options={option: value})
        model.zero_grad()
        x.grad = None
        compiled(x).float().sum().backward()
        assert all(r.fully_compiled for r in backend.graph_reports()[-2:])
        graph = next(g for g in backend.compiled_graphs()[-2:] if "backward" in g.name)
        trn = next(dump.glob("*backward.trn.mlir")).read_text()
        results.append(([p.grad.clone() for p in model.parameters()] + [x.grad.clone()],
                        trn, graph.last_profile.dma_bytes))
    return results


def test_qkv_gradient_is_assembled_in_the_order_its_readers_take_it(tmp_path, monkeypatch):
    """trn-layout concat-reader-order: a training step's dQ, dK and dV are concatenated and
    read as token rows ([B, S, 3, H, D]) by the QKV weight gradient and the input gradient;
    built in that order, the dQ and dV kernels write into it directly and its readers load
    whole rows, instead of it being built head by head and regathered token by token. The
    same bits as without it (the readers sum the same terms in the same order), eager's
    gradients, fewer bytes moved."""
    torch.manual_seed(0)
    model = PackedAttention(128, 2, causal=False).to(torch.bfloat16)
    x = torch.randn(2, 256, 128).to(torch.bfloat16).requires_grad_()
    (on, on_trn, on_dma), (off, off_trn, off_dma) = _backward_on_and_off(
        model, x, "concat_reader_order", tmp_path, monkeypatch)
    assert '"trn.empty"() : () -> tensor<2x256x3x2x64xbf16>' in on_trn
    assert '"trn.empty"() : () -> tensor<6x2x256x64xbf16>' in off_trn
    for a, b in zip(on, off):
        assert torch.equal(a, b)
    assert on_dma < off_dma
    model.zero_grad()
    x.grad = None
    model(x).float().sum().backward()
    for got, want in zip(on, [p.grad for p in model.parameters()] + [x.grad]):
        torch.testing.assert_close(got.float(), want.float(), atol=0.1, rtol=0.05)


@pytest.mark.parametrize("dtype,seq", [(torch.bfloat16, 256), (torch.float32, 384)])
def test_dk_is_computed_transposed_where_the_qkv_gradient_takes_it(dtype, seq, tmp_path,
                                                                   monkeypatch):
    """trn-layout transposed-contractions: the softmax backward's dK^T = Q^T @ dS, which the
    QKV gradient takes transposed, is computed as dK = dS^T @ Q in the attention kernel and
    written token-major straight into its slice of the QKV gradient, like dQ; without it,
    dK^T is stored and copied into that slice transposed, its bytes moved twice more. The
    same bits either way (PE sums the same products in the same order), and eager's
    gradients."""
    torch.manual_seed(0)
    model = PackedAttention(128, 2, causal=False).to(dtype)
    x = torch.randn(2, seq, 128).to(dtype).requires_grad_()
    (on, on_trn, on_dma), (off, off_trn, off_dma) = _backward_on_and_off(
        model, x, "transposed_contractions", tmp_path, monkeypatch)
    element = torch.finfo(dtype).bits // 8
    # The attention kernel's results: dQ, dK and dV, all token-major [B, S, H, D].
    token_major = f"tensor<2x{seq}x2x64x{'bf16' if dtype == torch.bfloat16 else 'f32'}>"
    assert f'kind = "attention", resultSegmentSizes = array<i32: 1, 2, 0>}} : () -> ' \
           f'({token_major}, {token_major}, {token_major})' in on_trn
    dk_t_product = re.compile(rf'"trn\.matmul".*-> tensor<4x64x{seq}xf32>')   # Q^T @ dS
    assert dk_t_product.search(off_trn) and not dk_t_product.search(on_trn)
    for a, b in zip(on, off):
        assert torch.equal(a, b)
    dk_bytes = 2 * seq * 128 * element
    assert off_dma - on_dma >= 2 * dk_bytes
    model.zero_grad()
    x.grad = None
    model(x).float().sum().backward()
    tolerance = dict(atol=0.1, rtol=0.05) if dtype == torch.bfloat16 else \
        dict(atol=1e-4, rtol=1e-4)
    for got, want in zip(on, [p.grad for p in model.parameters()] + [x.grad]):
        torch.testing.assert_close(got.float(), want.float(), **tolerance)


@pytest.mark.parametrize("dtype,seq", [(torch.bfloat16, 256), (torch.float32, 384)])
def test_dv_is_computed_from_the_probabilities_the_softmax_backward_loads(dtype, seq, tmp_path,
                                                                          monkeypatch):
    """trn-fuse attention-input-contractions: dV = P^T @ dO joins the softmax backward's
    attention kernel, which loads P's row tiles for the softmax's backward anyway and
    computes dO on chip: P is read once (the partition saves it once,
    torchneuron/saved_views.py), dO is not stored, and dV's kernel is gone. Eager's
    gradients either way."""
    torch.manual_seed(0)
    model = PackedAttention(128, 2, causal=False).to(dtype)
    x = torch.randn(2, seq, 128).to(dtype).requires_grad_()
    (on, on_trn, on_dma), (off, off_trn, off_dma) = _backward_on_and_off(
        model, x, "fuse_attention_input_contractions", tmp_path, monkeypatch)
    assert on_trn.count('kind = "matmul"') == off_trn.count('kind = "matmul"') - 1
    element = torch.finfo(dtype).bits // 8
    probabilities = 2 * 2 * seq * seq * element
    assert off_dma - on_dma >= probabilities
    model.zero_grad()
    x.grad = None
    model(x).float().sum().backward()
    tolerance = dict(atol=0.1, rtol=0.05) if dtype == torch.bfloat16 else \
        dict(atol=1e-4, rtol=1e-4)
    for got, was, want in zip(on, off, [p.grad for p in model.parameters()] + [x.grad]):
        torch.testing.assert_close(got.float(), want.float(), **tolerance)
        torch.testing.assert_close(got.float(), was.float(), **tolerance)


def test_rows_reading_a_transposed_product_keep_their_own_kernel(tmp_path, monkeypatch):
    """A layer norm over a Linear's output read through a reshape and a transpose (each of
    its rows another sequence's token): no fused kernel may hand it the product's tiles by
    their row-major position, which computed other rows' values before."""

    class Transposed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(256, 256, bias=False)
            self.norm = torch.nn.LayerNorm(256)

        def forward(self, a, x):
            return self.norm(self.proj(a).transpose(0, 1) + x)

    torch.manual_seed(0)
    model = Transposed().to(torch.bfloat16).eval()
    a = torch.randn(128, 4, 256).to(torch.bfloat16)
    x = torch.randn(4, 128, 256).to(torch.bfloat16)
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))
    torch._dynamo.reset()
    with torch.no_grad():
        expected = model(a, x)
        out = torch.compile(model, backend="neuron")(a, x)
    trn = next(tmp_path.glob("*.trn.mlir")).read_text()
    assert not re.search(r'kind = "(matmul_rows|linear_rows|attention)"', trn)
    torch.testing.assert_close(out, expected, atol=3e-2, rtol=3e-2)
