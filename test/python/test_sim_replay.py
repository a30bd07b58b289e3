"""Replays (sim/replay.py): a program's later executions run its verified first run again,
without the checks that run settled, and must give the same outputs and profile bit for bit
as a fully checked execution."""

import threading

import numpy as np
import pytest
import torch

from neff_builder import NeffBuilder, gather_program, sbuf, scatter_program
from torchneuron import backend
from torchneuron.format import isa
from torchneuron.runtime import Device, OutOfBoundsError, Program, UninitializedReadError, load
from torchneuron.sim.replay import Replay


class Block(torch.nn.Module):
    """Matmuls with bias, GELU, layer norm and softmax: most of the ISA's opcodes."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 96)
        self.norm = torch.nn.LayerNorm(96)

    def forward(self, x):
        h = self.norm(torch.nn.functional.gelu(self.fc(x)))
        return torch.softmax(h @ h.T, dim=-1), h.sum(dim=0)


def _compiled_program(dtype) -> tuple[Program, list]:
    torch.manual_seed(0)
    model = Block().to(dtype)
    compiled = torch.compile(model, backend="neuron")
    x = torch.randn(48, 64, dtype=dtype)
    with torch.no_grad():
        compiled(x)
    program = backend.compiled_graphs()[-1].program
    params = [p.detach() for p in model.parameters()]
    return program, params


def _fresh_inputs(program: Program, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(spec.shape).astype(spec.dtype) for spec in program.inputs]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_replays_give_the_outputs_and_profile_of_checked_runs(dtype, monkeypatch):
    program, _ = _compiled_program(dtype)
    device = Device(program.target)
    runs = [_fresh_inputs(program, seed) for seed in range(3)]
    replayed = [device.execute(program, inputs) for inputs in runs]
    assert isinstance(program.prepared().replay, Replay)

    monkeypatch.setenv("TORCHNEURON_SIM_REPLAY", "0")
    checked_program = Program(program.neff, program.target)
    checked = [device.execute(checked_program, inputs) for inputs in runs]
    assert checked_program.prepared().replay is None
    for got, want in zip(replayed, checked):
        for g, w in zip(got.outputs, want.outputs):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))
        assert got.profile.total_ns == want.profile.total_ns
        assert got.profile.events == want.profile.events
        assert got.profile.busy_ns == want.profile.busy_ns
    # Different inputs gave different outputs: the replay computed them.
    assert not np.array_equal(replayed[1].outputs[0], replayed[2].outputs[0])


def test_a_replays_profile_is_its_own():
    program, _ = _compiled_program(torch.float32)
    device = Device(program.target)
    first = device.execute(program, _fresh_inputs(program, 0)).profile
    second = device.execute(program, _fresh_inputs(program, 1)).profile
    second.streams["pe"].busy_ns = -1.0
    second.events.clear()
    third = device.execute(program, _fresh_inputs(program, 2)).profile
    assert third.streams["pe"].busy_ns == first.streams["pe"].busy_ns
    assert third.events == first.events


def _reads_unwritten_sbuf():
    b = NeffBuilder("unwritten")
    x = b.input("x", (8, 4))
    y = b.output("y", (8, 4))
    s = b.semaphore()
    b.dma(sbuf(8, [4]), b.view(x), signal=s)
    b.tensor_tensor(sbuf(8, [4], offset=64), sbuf(8, [4]), sbuf(8, [4], offset=128), "add",
                    waits=[(s, 1)], signal=s)
    b.dma(b.view(y), sbuf(8, [4], offset=64), queue=1, waits=[(s, 2)])
    return load(b.to_bytes())


def test_a_program_that_failed_a_check_is_checked_again_on_every_run():
    program = _reads_unwritten_sbuf()
    device = Device(program.target)
    for _ in range(3):
        with pytest.raises(UninitializedReadError, match="never written"):
            device.execute(program, [np.ones((8, 4), np.float32)])
    assert program.prepared().replay is None


def test_indirect_writes_to_hbm_keep_every_run_checked():
    program = load(scatter_program().to_bytes())
    device = Device(program.target)
    values = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    for ids in ([5, 1, 2], [0, 3, 4]):
        result = device.execute(program, [values, np.array(ids, np.int32).reshape(3, 1)])
        expected = np.zeros((6, 4), np.float32)
        expected[ids] = values
        np.testing.assert_array_equal(result.outputs[0], expected)
    assert "writes HBM rows chosen by data" in program.prepared().replay


def test_a_replayed_gather_still_checks_its_indices():
    program = load(gather_program(10, 8, 5).to_bytes())
    device = Device(program.target)
    table = np.arange(80, dtype=np.float32).reshape(10, 8)
    ids = np.array([[3], [0], [9], [3], [7]], np.int32)
    device.execute(program, [table, ids])
    assert isinstance(program.prepared().replay, Replay)
    result = device.execute(program, [table, ids[::-1].copy()])
    np.testing.assert_array_equal(result.outputs[0], table[ids[::-1, 0]])
    with pytest.raises(OutOfBoundsError, match="index 10 of partition 1"):
        device.execute(program, [table, np.array([[1], [10], [2], [0], [0]], np.int32)])


def test_concurrent_executions_of_one_program_are_each_correct():
    program, _ = _compiled_program(torch.float32)
    device = Device(program.target)
    runs = [_fresh_inputs(program, seed) for seed in range(6)]
    expected = [Device(program.target).execute(Program(program.neff, program.target), r).outputs
                for r in runs]
    results: dict[int, list] = {}

    def worker(k: int) -> None:
        results[k] = device.execute(program, runs[k]).outputs

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(len(runs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, want in enumerate(expected):
        for got, w in zip(results[k], want):
            np.testing.assert_array_equal(got, w)


class MatVec(torch.nn.Module):
    """Matmuls with a single row and a single column, beside the Block's tiles."""

    def __init__(self):
        super().__init__()
        self.down = torch.nn.Linear(300, 1)
        self.up = torch.nn.Linear(1, 200)

    def forward(self, x):
        return self.up(self.down(x))


def _noise(rng: np.random.Generator, view: np.ndarray) -> None:
    """Random values into an operand; fp32 ones get NaNs with assorted payloads, infinities
    and signed zeros, where an operation's operand order shows in the result's bits."""
    if view.dtype != np.float32:
        view.view(np.uint8)[...] = rng.integers(0, 256, view.view(np.uint8).shape, np.uint8)
        return
    values = rng.standard_normal(view.shape).astype(np.float32)
    bits = values.view(np.uint32)
    special = rng.integers(0, 8, view.shape)
    payloads = rng.integers(1, 1 << 22, view.shape, dtype=np.uint32)
    bits[special == 0] = (0x7FC00000 | payloads)[special == 0]
    bits[special == 1] = (0xFF800000 | payloads)[special == 1]
    values[special == 2] = np.inf
    values[special == 3] = -0.0
    view[...] = values


def test_bound_steps_give_the_semantic_functions_bits():
    from torchneuron.sim.replay import WRITE_SLOTS
    from torchneuron.sim.semantics import bound_step

    rng = np.random.default_rng(0)
    covered = set()
    torch.manual_seed(0)
    models = [(Block(), torch.randn(48, 64)), (Block().bfloat16(), torch.randn(48, 64).bfloat16()),
              (MatVec(), torch.randn(1, 300)), (MatVec(), torch.randn(7, 300)),
              (torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU()), torch.randn(48, 64))]
    functions = set()
    for model, x in models:
        # Compiled afresh: Dynamo would reuse an earlier test's graph for a model of the same
        # code, and compiled_graphs()[-1] would then be that test's last graph.
        torch._dynamo.reset()
        first = len(backend.compiled_graphs())
        compiled = torch.compile(model, backend="neuron")
        with torch.no_grad():
            compiled(x)
            compiled(x)
        assert len(backend.compiled_graphs()) == first + 1
        replay = backend.compiled_graphs()[-1].program.prepared().replay
        assert isinstance(replay, Replay)
        views = replay.machine._views
        with np.errstate(all="ignore"):
            for ins in replay.order:
                step = bound_step(ins, views)
                if step is None:
                    continue
                accumulate = bool(ins.flags & isa.FLAG_ACCUMULATE)
                covered.add((ins.opcode, accumulate, ins.ops[1].dtype.name,
                             ins.ops[0].dtype.name))
                if ins.opcode == isa.Opcode.ACTIVATE:
                    functions.add(ins.func)
                dst = views[id(ins.ops[0])]
                for slot, a in enumerate(ins.ops):
                    if a is not None and (slot not in WRITE_SLOTS[ins.opcode] or accumulate):
                        _noise(rng, views[id(a)])
                before = dst.copy()
                ins.semantics(ins, replay.machine)
                want = dst.copy()
                dst[...] = before
                step()
                assert dst.view(np.uint8).tobytes() == want.view(np.uint8).tobytes(), ins.label
    Op = isa.Opcode
    f32, bf16 = "float32", "bfloat16"
    assert covered >= {(Op.DMA, False, f32, f32), (Op.DMA, False, bf16, bf16),
                       (Op.TRANSPOSE, False, f32, f32), (Op.TENSOR_COPY, False, f32, f32),
                       (Op.TRANSPOSE, False, bf16, f32), (Op.TENSOR_COPY, False, f32, bf16),
                       (Op.MATMUL, False, f32, f32), (Op.MATMUL, True, f32, f32),
                       (Op.MATMUL, False, bf16, f32), (Op.ACTIVATE, False, f32, f32)}
    # Functions evaluated in fp32 and in float64 (sim/semantics.EXACT_IN_FP32).
    assert {isa.ActFunc.RELU, isa.ActFunc.RSQRT} <= functions
