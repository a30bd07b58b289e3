"""Loading a NEFF into a `Program`."""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

from torchneuron import target as target_table
from torchneuron.format.container import Neff, NeffFormatError, read_neff
from torchneuron.sim import ConstraintError, HbmLayout, PreparedProgram, prepare
from torchneuron.sim.memory import NUMPY_DTYPES
from torchneuron.target import Target

# Byte alignment of every tensor (and the scratch arena) in HBM.
HBM_ALIGNMENT = 64


class TensorSpec(NamedTuple):
    """An input or output of a program: name, shape and numpy dtype."""
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype


class Program:
    """A loaded, format-checked NEFF for one target.

    Attributes: `name`, `target` (a `Target`), `inputs` and `outputs` (lists of
    `TensorSpec`), `instruction_counts` (stream name -> number of instructions) and `neff`
    (the decoded container). The machine rules are checked on first execution (a program
    that breaks them raises `ConstraintError` from `Device.execute`).
    """

    def __init__(self, neff: Neff, target: Target):
        self.neff = neff
        self.target = target
        self.name = neff.name
        self.inputs = [self._spec(t) for t in neff.inputs]
        self.outputs = [self._spec(t) for t in neff.outputs]
        self._prepared: dict[Target, PreparedProgram] = {}

    def _spec(self, tid: int) -> TensorSpec:
        t = self.neff.tensors[tid]
        return TensorSpec(t.name, tuple(t.shape), NUMPY_DTYPES[t.dtype])

    @property
    def instruction_counts(self) -> dict[str, int]:
        return self.neff.instruction_counts()

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}{list(s.shape)}:{s.dtype}" for s in self.inputs)
        outs = ", ".join(f"{s.name}{list(s.shape)}:{s.dtype}" for s in self.outputs)
        return f"Program({self.name!r}, target={self.target.name}, ({ins}) -> ({outs}))"

    def prepared(self, target: Target | None = None) -> PreparedProgram:
        """The simulator's checked form of this program for `target` (default: the program's
        own; a variant of it, e.g. `dataclasses.replace(TRN2, dma_queue_bytes_per_ns=46.0)`,
        answers what-if questions). Built once per target, then cached."""
        target = target or self.target
        if target not in self._prepared:
            self._prepared[target] = prepare(self.neff, target, plan_hbm(self.neff, target))
        return self._prepared[target]


def plan_hbm(neff: Neff, target: Target) -> HbmLayout:
    """Place inputs, outputs and constants one after another (aligned), then the scratch
    arena; scratch tensors sit at their `scratch_offset` in the arena."""
    def align(x: int) -> int:
        return -(-x // HBM_ALIGNMENT) * HBM_ALIGNMENT

    bases = [0] * len(neff.tensors)
    top = 0
    for t in neff.tensors:
        if t.kind != "scratch":
            bases[t.id] = top
            top = align(top + t.nbytes)
    arena = top
    for t in neff.tensors:
        if t.kind == "scratch":
            bases[t.id] = arena + t.scratch_offset
    size = align(arena + neff.scratch_bytes)
    if size > target.hbm_bytes:
        raise ConstraintError(f"program {neff.name!r} needs {size} bytes of HBM; a "
                              f"{target.core} core has {target.hbm_bytes}")
    return HbmLayout(tuple(bases), max(size, HBM_ALIGNMENT))


def load(path_or_bytes: str | os.PathLike | bytes | bytearray | memoryview,
         target: str | Target | None = None) -> Program:
    """Read and validate a NEFF from a file path or from bytes.

    Raises `NeffFormatError` for a truncated, corrupt, wrong-version or malformed file, for a
    target name the runtime does not know, when `target` is given and the program was
    compiled for another target, and when its tensors do not fit the target's HBM (checked
    here, before anything is allocated for them). A missing file raises the usual `OSError`.
    """
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data, source = bytes(path_or_bytes), None
    else:
        source = os.fspath(path_or_bytes)
        with open(source, "rb") as f:
            data = f.read()
    neff = read_neff(data, source)
    program_target = target_table.TARGETS.get(neff.target)
    if program_target is None:
        raise NeffFormatError(f"compiled for unknown target {neff.target!r} (known: "
                              f"{', '.join(target_table.TARGETS)})", source)
    if target is not None:
        wanted = target if isinstance(target, Target) else target_table.get_target(target)
        if wanted.name != program_target.name:
            raise NeffFormatError(f"compiled for {program_target.name}, but {wanted.name} "
                                  "was requested", source)
    try:
        plan_hbm(neff, program_target)
    except ConstraintError as exc:
        raise NeffFormatError(str(exc), source) from None
    return Program(neff, program_target)
