"""HuggingFace transformers models (small configs, random weights, nothing downloaded) through
torch.compile(backend="neuron"): forward (eval) and one training step against eager, with
every graph on the NeuronCore. bench/models.py prints the same models' compile time,
simulated time and FLOP fraction."""

import copy
import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torchneuron import backend  # noqa: E402

VOCAB, BATCH, LENGTH = 128, 2, 16
FORWARD_TOL = dict(rtol=1e-4, atol=1e-5)     # fp32 logits
WEIGHT_TOL = dict(rtol=1e-4, atol=1e-5)      # fp32 weights after one SGD step
GRAD_RTOL = 1e-4                             # gradients: relative, and absolute relative to
GRAD_ATOL_SCALE = 1e-5                       # the largest gradient of the model


def make_model(name: str) -> torch.nn.Module:
    """The configs bench/models.py uses too: 2 layers, width 64, 4 heads, no dropout."""
    T = transformers
    logging.getLogger("transformers").setLevel(logging.ERROR)
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = T.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                           attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0, use_cache=False,
                           bos_token_id=0, eos_token_id=0)
        return T.GPT2LMHeadModel(cfg)
    if name == "bert":
        cfg = T.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=128,
                           max_position_embeddings=64, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0)
        return T.BertForMaskedLM(cfg)
    if name == "llama":      # RMSNorm, rotary embeddings, SiLU-gated MLP, grouped KV heads
        cfg = T.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=64, use_cache=False)
        return T.LlamaForCausalLM(cfg)
    raise ValueError(name)


MODELS = ["gpt2", "bert", "llama"]


def inputs():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, LENGTH), generator=g)
    return ids, ids.clone()


def _fully_compiled(reports):
    assert reports
    for report in reports:
        assert report.fully_compiled and report.flop_fraction == 1.0, str(report)


@pytest.mark.parametrize("name", MODELS)
def test_forward_matches_eager(name):
    torch._dynamo.reset()
    model = make_model(name).eval()
    ids, _ = inputs()
    first = len(backend.graph_reports())
    with torch.no_grad():
        got = torch.compile(model, backend="neuron")(input_ids=ids).logits
        expected = model(input_ids=ids).logits
    torch.testing.assert_close(got, expected, **FORWARD_TOL)
    _fully_compiled(backend.graph_reports()[first:])


@pytest.mark.parametrize("name", MODELS)
def test_training_step_matches_eager(name):
    torch._dynamo.reset()
    eager = make_model(name).train()
    mine = copy.deepcopy(eager)
    ids, labels = inputs()
    first = len(backend.graph_reports())
    out_eager = eager(input_ids=ids, labels=labels)
    out_mine = torch.compile(mine, backend="neuron")(input_ids=ids, labels=labels)
    torch.testing.assert_close(out_mine.logits, out_eager.logits, **FORWARD_TOL)
    torch.testing.assert_close(out_mine.loss, out_eager.loss, **FORWARD_TOL)
    out_eager.loss.backward()
    out_mine.loss.backward()
    params = list(zip(eager.named_parameters(), mine.parameters()))
    scale = max(a.grad.abs().max().item() for (_, a), _ in params if a.grad is not None)
    for (pname, a), b in params:
        assert (a.grad is None) == (b.grad is None), pname
        if a.grad is not None:
            torch.testing.assert_close(b.grad, a.grad, rtol=GRAD_RTOL,
                                       atol=GRAD_ATOL_SCALE * scale, msg=lambda m: f"{pname}: {m}")
    # SGD: the update is proportional to the gradient. (A first AdamW step is ~lr * sign(g),
    # which turns a 1e-12 difference in a ~1e-8 gradient into a visible one.)
    for model in (eager, mine):
        torch.optim.SGD(model.parameters(), lr=0.1).step()
    for (pname, a), b in params:
        torch.testing.assert_close(b, a, **WEIGHT_TOL, msg=lambda m: f"{pname}: {m}")
    reports = backend.graph_reports()[first:]
    assert {r.kind for r in reports} == {"forward", "backward"}
    _fully_compiled(reports)
