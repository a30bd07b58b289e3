"""The simulated device: allocates HBM, copies inputs in, runs a program, copies outputs out."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from torchneuron import config
from torchneuron import target as target_table
from torchneuron.gc_pause import cyclic_gc_paused
from torchneuron.runtime.program import Program, TensorSpec, load
from torchneuron.sim import Hbm, Profile, UninitializedReadError, run
from torchneuron.sim.memory import NUMPY_DTYPES
from torchneuron.sim.replay import Replay, why_not_replayable
from torchneuron.target import Target


def requested_target(name: str | None = None) -> Target | None:
    """The device target a tool (neuron-run, neuron-profile) was asked for: `name` (e.g. a
    `--target` option), else the one `TORCHNEURON_TARGET` names when that variable is set,
    else None, meaning "the program's own target". An unknown name raises
    `UnknownTargetError` (a ValueError) that lists the known targets."""
    if name:
        return target_table.get_target(name)
    if config.TARGET.is_set():
        return target_table.get_target()
    return None


@dataclass
class ExecutionResult:
    """Outputs of one execution, in the program's output order, and its profile."""
    outputs: list[np.ndarray]
    profile: Profile


class Device:
    """One simulated NeuronCore of `target` (a name, a `Target`, or None for the default:
    `TORCHNEURON_TARGET`, else trn2). A `Target` that varies a table entry (same name, other
    figures) simulates that variant."""

    def __init__(self, target: str | Target | None = None):
        self.target = target if isinstance(target, Target) else target_table.get_target(target)

    def __repr__(self) -> str:
        return f"Device({self.target.name})"

    def execute(self, program: Program | bytes | str | os.PathLike,
                inputs: Sequence[Any] | Mapping[str, Any]) -> ExecutionResult:
        """Run `program` (a `Program`, or NEFF bytes / a path to load) on `inputs`.

        `inputs` is a list in the program's input order or a dict by input name; each a numpy
        array or a torch tensor of exactly the declared shape and dtype (no implicit casts).
        Raises ValueError for bad inputs, `SimulationError` subclasses for a program the
        machine cannot run (`ConstraintError`, `UninitializedReadError`, `DeadlockError`).
        """
        if not isinstance(program, Program):
            program = load(program, self.target)
        if program.target.name != self.target.name:
            raise ValueError(f"program {program.name!r} was compiled for "
                             f"{program.target.name} and cannot run on a {self.target.name} "
                             "device")
        arrays = bind_inputs(program, inputs)
        # Preparing a program, a checked run and building its replay allocate objects per
        # instruction, which set off the cycle collector's walks of the whole process.
        with cyclic_gc_paused():
            return self._execute(program, arrays)

    def _execute(self, program: Program, arrays: list[np.ndarray]) -> ExecutionResult:
        prepared = program.prepared(self.target)
        replay = prepared.replay
        if isinstance(replay, Replay) and replay.lock.acquire(blocking=False):
            try:
                return ExecutionResult(*replay.execute(arrays))
            finally:
                replay.lock.release()
        neff = program.neff
        hbm = Hbm(prepared.layout, neff.tensors)
        for tid, array in zip(neff.inputs, arrays):
            hbm.write_tensor(tid, array)
        for t in neff.tensors:
            if t.kind == "constant":
                hbm.write_tensor(t.id, np.frombuffer(t.data, dtype=NUMPY_DTYPES[t.dtype]))
        profile = run(prepared, hbm)
        outputs = []
        for tid in neff.outputs:
            array, unwritten = hbm.read_tensor(tid)
            if unwritten:
                t = neff.tensors[tid]
                raise UninitializedReadError(
                    f"output {t.name!r}: {unwritten} of {t.num_elements} elements were never "
                    f"written by program {neff.name!r}")
            outputs.append(array)
        if prepared.replay is None and config.SIM_REPLAY.get():
            # Every check passed: later runs can replay this one (sim/replay.py).
            prepared.replay = why_not_replayable(prepared) or Replay(prepared, profile)
        return ExecutionResult(outputs, profile)


def bind_inputs(program: Program, inputs: Sequence[Any] | Mapping[str, Any]) -> list[np.ndarray]:
    """Match `inputs` to the program's inputs and check their shapes and dtypes."""
    specs = program.inputs
    if isinstance(inputs, Mapping):
        names = [s.name for s in specs]
        unknown = [k for k in inputs if k not in names]
        if unknown:
            raise ValueError(f"program {program.name!r} has no input named "
                             f"{', '.join(map(repr, unknown))} (inputs: "
                             f"{', '.join(map(repr, names))})")
        missing = [n for n in names if n not in inputs]
        if missing:
            raise ValueError(f"missing input {', '.join(map(repr, missing))} of program "
                             f"{program.name!r}")
        values = [inputs[n] for n in names]
    else:
        values = list(inputs)
        if len(values) != len(specs):
            raise ValueError(f"program {program.name!r} takes {len(specs)} inputs, "
                             f"got {len(values)}")
    return [_checked_array(i, spec, v) for i, (spec, v) in enumerate(zip(specs, values))]


def _checked_array(i: int, spec: TensorSpec, value: Any) -> np.ndarray:
    what = f"input {i} ({spec.name!r})"
    if _is_torch_tensor(value):
        array = _torch_to_numpy(value)
    elif isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
    else:
        raise ValueError(f"{what}: expected a numpy array or a torch tensor, got "
                         f"{type(value).__name__}")
    if array.shape != spec.shape:
        raise ValueError(f"{what}: shape {list(array.shape)} does not match the program's "
                         f"{list(spec.shape)}")
    if array.dtype != spec.dtype:
        raise ValueError(f"{what}: dtype {array.dtype} does not match the program's "
                         f"{spec.dtype}")
    return array


def _is_torch_tensor(value: Any) -> bool:
    # Checked by module name so that the runtime never imports torch itself.
    return type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach")


def _torch_to_numpy(tensor: Any) -> np.ndarray:
    import ml_dtypes
    import torch  # already imported by the caller, who passed a tensor

    t = tensor.detach().cpu()
    # numpy has no bf16/fp8: reinterpret the bits as ml_dtypes' types.
    reinterpret = {torch.bfloat16: (torch.int16, ml_dtypes.bfloat16),
                   torch.float8_e4m3fn: (torch.uint8, ml_dtypes.float8_e4m3fn),
                   torch.float8_e5m2: (torch.uint8, ml_dtypes.float8_e5m2)}
    if t.dtype in reinterpret:
        bits, dtype = reinterpret[t.dtype]
        return t.view(bits).numpy().view(dtype)
    return t.numpy()
