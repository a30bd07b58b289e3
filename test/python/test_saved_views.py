"""A saved tensor that is a view of another saved tensor is made by the backward from that one
(torchneuron/saved_views.py), so the backward takes their storage as one input."""

import re

import pytest

torch = pytest.importorskip("torch")

from torchneuron import backend, saved_views  # noqa: E402


def _attention(q, k, v):
    b, h, s, d = q.shape
    p = (q @ k.transpose(-1, -2)).softmax(-1)
    return (p.view(b * h, s, s) @ v.view(b * h, s, d)).view(b, h, s, d)


def test_a_saved_view_of_a_saved_value_is_made_in_the_backward():
    """The probabilities are saved as they are (detach, for the softmax's backward) and as the
    [B * H, S, S] view the gradient of the values reads: the view is dropped from the saved
    values, and the backward makes it from the other one with the same view op. The
    gradients are eager's bit for bit."""
    from functorch.compile import aot_function
    from torch._functorch.partitioners import default_partition

    seen = {}

    def partition(joint, inputs, **kwargs):
        forward, backward = default_partition(joint, inputs, **kwargs)
        seen["before"] = [p.meta["val"].shape for p in backward.graph.find_nodes(op="placeholder")]
        seen["dropped"] = saved_views.recompute_in_backward(forward, backward,
                                                            kwargs["num_fwd_outputs"])
        seen["after"] = [p.meta["val"].shape for p in backward.graph.find_nodes(op="placeholder")]
        seen["saved"] = len(forward.graph.find_nodes(op="output")[0].args[0]) - \
            kwargs["num_fwd_outputs"]
        return forward, backward

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 8, 4, requires_grad=True) for _ in range(3))
    compiled = aot_function(_attention, fw_compiler=lambda gm, _: gm,
                            bw_compiler=lambda gm, _: gm, partition_fn=partition)
    compiled(q, k, v).sum().backward()
    got = [t.grad.clone() for t in (q, k, v)]
    probabilities = [torch.Size([2, 3, 8, 8]), torch.Size([6, 8, 8])]
    assert seen["dropped"] == 1
    assert [s for s in seen["before"] if s in probabilities] == probabilities
    assert [s for s in seen["after"] if s in probabilities] == probabilities[:1]
    # The forward saves one value fewer, as many as the backward takes besides the tangent.
    assert seen["saved"] == len(seen["after"]) - 1
    for t in (q, k, v):
        t.grad = None
    _attention(q, k, v).sum().backward()
    for a, t in zip(got, (q, k, v)):
        assert torch.equal(a, t.grad)


def test_nothing_changes_where_no_saved_value_is_a_view_of_another():
    from functorch.compile import aot_function
    from torch._functorch.partitioners import default_partition

    seen = {}

    def partition(joint, inputs, **kwargs):
        forward, backward = default_partition(joint, inputs, **kwargs)
        code = backward.code
        seen["dropped"] = saved_views.recompute_in_backward(forward, backward,
                                                            kwargs["num_fwd_outputs"])
        seen["same"] = backward.code == code
        return forward, backward

    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(8, 8, requires_grad=True)
    aot_function(lambda x, w: torch.tanh(x @ w), fw_compiler=lambda gm, _: gm,
                 bw_compiler=lambda gm, _: gm, partition_fn=partition)(x, w).sum().backward()
    assert seen == {"dropped": 0, "same": True}


def test_the_backends_attention_backward_takes_the_probabilities_once(tmp_path, monkeypatch):
    """Through the backend: the compiled backward of a training step takes the probabilities
    as one input, and its gradients match eager's."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 128, 64, requires_grad=True) for _ in range(3))
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))
    torch._dynamo.reset()
    torch.compile(_attention, backend="neuron")(q, k, v).sum().backward()
    assert all(r.fully_compiled for r in backend.graph_reports()[-2:])
    got = [t.grad.clone() for t in (q, k, v)]
    signature = next(tmp_path.glob("*backward.fx.txt")).read_text().split("\n")[1]
    inputs = re.findall(r'"f32\[([0-9, ]+)\]"', signature)
    assert [s for s in inputs if s in ("2, 2, 128, 128", "4, 128, 128")] == ["2, 2, 128, 128"]
    for t in (q, k, v):
        t.grad = None
    _attention(q, k, v).sum().backward()
    for a, t in zip(got, (q, k, v)):
        torch.testing.assert_close(a, t.grad, atol=1e-4, rtol=1e-4)
