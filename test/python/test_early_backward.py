"""A training graph's backward compiled in a forked child while its forward compiles
(torchneuron.early_backward): the same gradients as compiled when AOTAutograd asks for it, its
compile's log records emitted in this process, and every way the child can fail -- an error,
no answer in time -- ending in the backward compiled here."""

import logging
import os
import time

import pytest

torch = pytest.importorskip("torch")

from torchneuron import backend, early_backward  # noqa: E402
from torchneuron.compiler import pipeline  # noqa: E402
from torchneuron.compiler.errors import CompileError  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or len(os.sched_getaffinity(0)) < 2,
                                reason="the early compile needs fork and two usable cores")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 16)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc2(torch.relu(self.fc1(x)))).square().mean()


def _step(monkeypatch, early: bool):
    """Loss and gradients of one compiled training step, and the backward's CompiledGraph."""
    monkeypatch.setenv("TORCHNEURON_EARLY_BACKWARD", "1" if early else "0")
    torch.manual_seed(0)
    model = Block()
    x = torch.randn(8, 32)
    torch._dynamo.reset()
    first = len(backend.compiled_graphs())
    loss = torch.compile(model, backend="neuron")(x)
    loss.backward()
    graphs = backend.compiled_graphs()[first:]
    backward = [g for g in graphs if g.name.endswith("_backward")]
    assert len(backward) == 1, [g.name for g in graphs]
    return loss.detach(), [p.grad for p in model.parameters()], backward[0]


def _streams(graph):
    return [(s.name, s.records.tobytes()) for s in graph.program.neff.streams]


def test_backward_compiled_early_gives_the_same_gradients(monkeypatch):
    loss_early, grads_early, graph_early = _step(monkeypatch, early=True)
    loss_here, grads_here, graph_here = _step(monkeypatch, early=False)
    assert graph_early.compiled_early and not graph_here.compiled_early
    assert torch.equal(loss_early, loss_here)
    for a, b in zip(grads_early, grads_here):
        assert torch.equal(a, b)
    # The same program: the child compiled what this process compiles.
    assert _streams(graph_early) == _streams(graph_here)
    assert graph_early.stage_seconds.keys() == graph_here.stage_seconds.keys()


def test_the_child_compile_log_records_are_emitted_here(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger="torchneuron")
    _, _, graph = _step(monkeypatch, early=True)
    assert graph.compiled_early
    compiled = [r for r in caplog.records
                if r.getMessage().startswith(f"compiled {graph.name} in ")]
    assert len(compiled) == 1
    # Emitted by the child that compiled it, handled by this process's handlers.
    assert compiled[0].process != os.getpid()


def _in_the_child_for_the_backward(name: str) -> bool:
    return early_backward.recording() is not None and name.endswith("_backward")


def test_a_partition_the_child_failed_on_is_compiled_here(monkeypatch):
    real = pipeline.compile_linalg

    def failing_in_the_child(linalg, name, options, dump_dir=None):
        if _in_the_child_for_the_backward(name):
            raise CompileError("injected failure of the early compile")
        return real(linalg, name, options, dump_dir)

    monkeypatch.setattr(pipeline, "compile_linalg", failing_in_the_child)
    loss, grads, graph = _step(monkeypatch, early=True)
    monkeypatch.setattr(pipeline, "compile_linalg", real)
    loss_here, grads_here, _ = _step(monkeypatch, early=False)
    # Compiled here after all, not fallen back to PyTorch.
    assert not graph.compiled_early
    assert torch.equal(loss, loss_here)
    for a, b in zip(grads, grads_here):
        assert torch.equal(a, b)


def test_a_child_that_does_not_answer_is_killed_and_the_backward_compiled_here(monkeypatch,
                                                                               caplog):
    real = pipeline.compile_linalg
    stuck: list[int] = []

    def stuck_in_the_child(linalg, name, options, dump_dir=None):
        if _in_the_child_for_the_backward(name):
            time.sleep(600)
        return real(linalg, name, options, dump_dir)

    original_start = early_backward.start

    def start(compile_backward):
        child = original_start(compile_backward)
        stuck.append(child.pid)
        return child

    monkeypatch.setattr(pipeline, "compile_linalg", stuck_in_the_child)
    monkeypatch.setattr(early_backward, "start", start)
    monkeypatch.setattr(early_backward, "wait_seconds", lambda forward_seconds: 1.0)
    began = time.perf_counter()
    _, _, graph = _step(monkeypatch, early=True)
    assert time.perf_counter() - began < 120
    assert not graph.compiled_early
    assert any("has not finished after" in r.getMessage() and r.levelno == logging.WARNING
               for r in caplog.records)
    # Killed and reaped: no such process any more.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(stuck[0], 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the stuck child {stuck[0]} is still there")


def test_inference_graphs_start_no_child(monkeypatch):
    started = []
    monkeypatch.setattr(early_backward, "start", lambda fn: started.append(fn))
    monkeypatch.setenv("TORCHNEURON_EARLY_BACKWARD", "1")
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(Block(), backend="neuron")(torch.randn(8, 32))
    assert started == []
