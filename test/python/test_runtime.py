"""The runtime API: loading (and rejecting) NEFFs, binding inputs, executing."""

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from neff_builder import NeffBuilder, sbuf
from torchneuron.format import container
from torchneuron.runtime import (
    Device, ExecutionResult, NeffFormatError, Profile, Program, UninitializedReadError, load,
)
from torchneuron.target import TRN1, TRN2


def scale_program(target="trn2", name="scale"):
    """y = 2 * x (f32 [128, 16]) and z = x as bf16; inputs x, w (w unused but bound)."""
    b = NeffBuilder(name, target)
    x = b.input("x", (128, 16))
    b.input("w", (4,), "bf16")
    y = b.output("y", (128, 16))
    z = b.output("z", (128, 16), "bf16")
    loaded, done = b.semaphore(), b.semaphore()
    b.dma(sbuf(128, [16]), b.view(x), signal=loaded)
    b.tensor_scalar(sbuf(128, [16], offset=64), sbuf(128, [16]), "mul", 2.0,
                    waits=[(loaded, 1)], signal=done)
    b.dma(b.view(y), sbuf(128, [16], offset=64), queue=1, waits=[(done, 1)])
    b.dma(b.view(z), sbuf(128, [16]), queue=2, waits=[(loaded, 1)])
    return b.to_bytes()


def inputs():
    x = np.arange(128 * 16, dtype=np.float32).reshape(128, 16) / 7
    return x, np.ones(4, ml_dtypes.bfloat16)


def test_load_from_bytes_and_path(tmp_path):
    data = scale_program()
    path = tmp_path / "scale.neff"
    path.write_bytes(data)
    for program in (load(data), load(path), load(str(path)), load(bytearray(data))):
        assert isinstance(program, Program)
        assert program.name == "scale"
        assert program.target is TRN2
        assert [(s.name, s.shape, s.dtype) for s in program.inputs] == [
            ("x", (128, 16), np.dtype(np.float32)), ("w", (4,), np.dtype(ml_dtypes.bfloat16))]
        assert [s.name for s in program.outputs] == ["y", "z"]
        assert program.outputs[1].dtype == np.dtype(ml_dtypes.bfloat16)
        assert program.instruction_counts == {"dve": 1, "q0": 1, "q1": 1, "q2": 1}
        assert isinstance(program.neff, container.Neff)


def test_execute_positional_and_by_name():
    program = load(scale_program())
    x, w = inputs()
    result = Device().execute(program, [x, w])
    assert isinstance(result, ExecutionResult) and isinstance(result.profile, Profile)
    y, z = result.outputs
    np.testing.assert_array_equal(y, 2 * x)
    np.testing.assert_array_equal(z, x.astype(ml_dtypes.bfloat16))
    by_name = Device("trn2").execute(program, {"w": w, "x": x})
    np.testing.assert_array_equal(by_name.outputs[0], y)
    assert result.profile.total_ns == by_name.profile.total_ns > 0


def test_execute_accepts_neff_bytes_and_runs_on_trn1():
    x, w = inputs()
    result = Device(TRN1).execute(scale_program("trn1"), [x, w])
    np.testing.assert_array_equal(result.outputs[0], 2 * x)
    assert result.profile.target is TRN1


def test_device_rejects_a_program_for_another_target():
    with pytest.raises(ValueError, match="compiled for trn2 and cannot run on a trn1 device"):
        Device("trn1").execute(load(scale_program()), list(inputs()))


@pytest.mark.parametrize("bad, message", [
    (lambda x, w: [x], "takes 2 inputs, got 1"),
    (lambda x, w: [x, w, w], "takes 2 inputs, got 3"),
    (lambda x, w: [x[:64], w], r"input 0 \('x'\): shape \[64, 16\] does not match the "
                               r"program's \[128, 16\]"),
    (lambda x, w: [x.astype(np.float64), w], r"input 0 \('x'\): dtype float64 does not match"),
    (lambda x, w: [x, w.astype(np.float32)], r"input 1 \('w'\): dtype float32 does not match "
                                             "the program's bfloat16"),
    (lambda x, w: [x.tolist(), w], r"input 0 \('x'\): expected a numpy array or a torch "
                                   "tensor, got list"),
    (lambda x, w: {"x": x}, r"missing input 'w'"),
    (lambda x, w: {"x": x, "w": w, "v": w}, r"has no input named 'v'"),
])
def test_input_validation(bad, message):
    program = load(scale_program())
    with pytest.raises(ValueError, match=message):
        Device().execute(program, bad(*inputs()))


# -- corrupt and incompatible files --------------------------------------------------------

def test_truncated_file_is_rejected():
    data = scale_program()
    for cut in (10, container.HEADER_SIZE + 5, len(data) - 1):
        with pytest.raises(NeffFormatError, match="truncated"):
            load(data[:cut])


def test_a_program_written_twice_differs_only_in_its_uuid(monkeypatch):
    """The archive's members carry no time of writing: the payload, and so the digest the
    header keeps of it, are the same bytes for the same program."""
    import time

    first = scale_program()
    later = time.time() + 3 * 24 * 3600
    monkeypatch.setattr(time, "time", lambda: later)
    monkeypatch.setattr(time, "localtime", lambda *args: time.gmtime(later))
    second = scale_program()
    assert first[container.HEADER_SIZE:] == second[container.HEADER_SIZE:]
    assert first != second      # (each file has a uuid of its own)


def test_single_bit_flip_in_payload_is_rejected():
    data = bytearray(scale_program())
    data[container.HEADER_SIZE + (len(data) - container.HEADER_SIZE) // 2] ^= 0x10
    with pytest.raises(NeffFormatError, match="checksum mismatch"):
        load(bytes(data))


def test_wrong_magic_is_rejected():
    data = bytearray(scale_program())
    data[:4] = b"ELF\x7f"
    with pytest.raises(NeffFormatError, match="not a NEFF file"):
        load(bytes(data))


def test_future_major_version_is_rejected():
    data = bytearray(scale_program())
    # The header is <8s magic, u32 major, u32 minor, ...>: rewrite the major version.
    data[8:12] = (container.FORMAT_MAJOR + 1).to_bytes(4, "little")
    with pytest.raises(NeffFormatError, match="newer than this runtime supports"):
        load(bytes(data))


def test_wrong_target_requested_is_rejected(tmp_path):
    path = tmp_path / "p.neff"
    path.write_bytes(scale_program())
    with pytest.raises(NeffFormatError, match=r"p.neff: compiled for trn2, but trn1 was "
                                              "requested"):
        load(path, target="trn1")
    assert load(path, target=TRN2).target is TRN2


def test_unknown_target_in_file_is_rejected():
    with pytest.raises(NeffFormatError, match="compiled for unknown target 'trn9'"):
        load(scale_program(target="trn9"))


def test_missing_file_raises_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "nothing.neff")


def test_program_prepared_once_and_errors_are_simulation_errors():
    b = NeffBuilder("lazy")
    b.output("y", (2, 2))
    program = load(b.to_bytes())
    with pytest.raises(UninitializedReadError):
        Device().execute(program, [])
    assert program.prepared() is program.prepared()


# -- torch interop and the import rule -----------------------------------------------------

def test_torch_tensors_are_accepted():
    torch = pytest.importorskip("torch")
    x, _ = inputs()
    w = torch.tensor([1.5, -2.0, 3.25, 0.0], dtype=torch.bfloat16)
    result = Device().execute(load(scale_program()), [torch.from_numpy(x).requires_grad_(), w])
    np.testing.assert_array_equal(result.outputs[0], 2 * x)


def test_runtime_simulator_and_neuron_run_import_neither_torch_nor_mlir(tmp_path):
    path = tmp_path / "p.neff"
    path.write_bytes(scale_program())
    code = f"""
import sys, numpy as np, ml_dtypes
import torchneuron.runtime, torchneuron.sim, torchneuron.tools.neuron_run
from torchneuron.runtime import Device, load
x = np.zeros((128, 16), np.float32); w = np.zeros(4, ml_dtypes.bfloat16)
Device().execute(load({str(path)!r}), [x, w])
bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'torch_mlir')
       or m.startswith('torchneuron.compiler') or m.startswith('torchneuron.dialects')]
assert not bad, bad
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def test_readme_runtime_api_example_runs(tmp_path, monkeypatch):
    """The README's "Runtime API" snippet, as written, on a two-input program."""
    import os
    import re

    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")).read()
    section = readme.split("## Runtime API", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], re.S)
    (tmp_path / "model.neff").write_bytes(scale_program())
    monkeypatch.chdir(tmp_path)
    x, w = inputs()
    scope = {"x": x, "w": w}
    exec(compile(code, "README.md", "exec"), scope)
    assert isinstance(scope["program"], Program) and isinstance(scope["result"],
                                                                ExecutionResult)
    np.testing.assert_array_equal(scope["result"].outputs[0], 2 * x)
    assert (tmp_path / "trace.json").exists()


def test_stream_encoding_decodes_to_the_same_instructions():
    """isa.encode fills the records a field at a time over the whole stream: every field of
    every instruction must land in its own record, absent operands all zero but `memory`."""
    from torchneuron.format import isa

    def operand(i: int, ndim: int) -> isa.Operand:
        return isa.Operand(isa.Memory.SBUF if i % 2 else isa.Memory.HBM, isa.DType.BF16,
                           64 + i, tuple(range(2, 2 + ndim)), tuple(range(1, 1 + ndim)),
                           offset=-8 * i, partition_start=i % 3, partition_stride=128 * i,
                           tensor=i)

    stream = [isa.Instruction(isa.Opcode.ACTIVATE, isa.Engine.ACT,
                              operands=[operand(i, 1 + i % 4), None, operand(i + 7, 2), None,
                                        None][:isa.NUM_OPERANDS],
                              queue=i % 4, flags=i, func=isa.ActFunc(i % 3), alu0=isa.AluOp(i % 5),
                              alu1=isa.AluOp((i + 1) % 5), reduce_dims=i % 2,
                              imm=(0.5 * i, -1.0, 2.0, 0.0), waits=[(j, 10 * i + j)
                                                                    for j in range(i % 5)],
                              signal=i % 6 - 1, loc=i)
              for i in range(9)]
    records = isa.decode_records(isa.encode(stream))
    assert [isa.decode_instruction(r) for r in records] == stream
    absent = records["operands"][:, 1]
    assert (absent["memory"] == isa.Memory.NONE).all()
    for name in absent.dtype.names:
        if name != "memory":
            assert not absent[name].any(), name
    assert isa.encode([]) == b""


def test_stream_encoding_rejects_what_a_record_cannot_hold():
    from torchneuron.format import isa

    def ins(**fields) -> isa.Instruction:
        return isa.Instruction(isa.Opcode.NOP, isa.Engine.PE, **fields)

    with pytest.raises(isa.IsaError, match="at most 4 semaphore waits"):
        isa.encode([ins(), ins(waits=[(0, 1)] * 5)])
    wide = isa.Operand(isa.Memory.SBUF, isa.DType.F32, 1, (1,) * 5, (1,) * 5)
    with pytest.raises(isa.IsaError, match="at most 4 free dims"):
        isa.encode([ins(operands=[wide] + [None] * (isa.NUM_OPERANDS - 1))])
    with pytest.raises(OverflowError):
        isa.encode([ins(), ins(queue=300)])


def test_execute_pauses_the_cycle_collector_and_restores_it(monkeypatch,
                                                            collector_enabled_before):
    """A checked run (an object or more per instruction) runs with Python's cycle collector
    held off (torchneuron/gc_pause.py), which is left as it was found, also on an error."""
    import gc

    from torchneuron.runtime import device as device_module

    seen = []
    real_run = device_module.run

    def run_watching(*args, **kwargs):
        seen.append(gc.isenabled())
        return real_run(*args, **kwargs)

    monkeypatch.setattr(device_module, "run", run_watching)
    monkeypatch.setenv("TORCHNEURON_SIM_REPLAY", "0")
    program = load(scale_program())
    Device().execute(program, list(inputs()))
    assert seen == [False] and gc.isenabled() is collector_enabled_before

    def run_failing(*args, **kwargs):
        raise RuntimeError("the run failed")

    monkeypatch.setattr(device_module, "run", run_failing)
    with pytest.raises(RuntimeError, match="the run failed"):
        Device().execute(program, list(inputs()))
    assert gc.isenabled() is collector_enabled_before
