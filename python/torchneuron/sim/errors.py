"""Errors raised while checking or running a program on the simulated NeuronCore.

Every error that concerns one instruction names it the same way, so a failure can be traced
back to the compiler's output and, through the debug location, to the user's source:

    act[12] activate (loc: fwd.mlir:3 relu): <what went wrong>

i.e. stream name, index of the instruction in its stream, opcode, and the location string
the NEFF's debug table holds for it.
"""

from __future__ import annotations


class SimulationError(Exception):
    """A program that the NeuronCore would not run correctly.

    `stream`, `index`, `opcode` and `location` name the offending instruction (all None for an
    error that concerns the whole program); `detail` is the message without that prefix.
    """

    def __init__(self, detail: str, *, stream: str | None = None, index: int | None = None,
                 opcode: str | None = None, location: str | None = None):
        self.detail = detail
        self.stream = stream
        self.index = index
        self.opcode = opcode
        self.location = location
        if stream is None:
            message = detail
        else:
            message = f"{instruction_label(stream, index, opcode, location)}: {detail}"
        super().__init__(message)


def instruction_label(stream: str, index: int | None, opcode: str | None,
                      location: str | None) -> str:
    """`act[12] activate (loc: fwd.mlir:3 relu)`."""
    return f"{stream}[{index}] {opcode} (loc: {location})"


class ConstraintError(SimulationError):
    """An instruction breaks a rule of the machine (TARGET.md): capacity, partition layout,
    engine/memory placement, shapes or dtypes."""


class OutOfBoundsError(ConstraintError):
    """An operand reaches outside its memory or its HBM tensor."""


class IndexOutOfRangeError(OutOfBoundsError):
    """An indirect DMA's index takes a row outside its tensor, or is one the program's own
    bounds check rejected: a fault of the values this run was given (an index past the dim
    it indexes), not of the program, which runs correctly on other inputs."""


class UninitializedReadError(SimulationError):
    """An instruction reads memory that nothing has written (or an output is left unwritten)."""


class DeadlockError(SimulationError):
    """No engine or DMA queue can make progress, yet instructions remain.

    `blocked` lists, for each stuck stream, `(stream, index, opcode, location, semaphore,
    needed, current, total_increments)` for every wait of its next instruction that is unmet.
    """

    def __init__(self, detail: str, blocked: list[tuple]):
        self.blocked = blocked
        super().__init__(detail)
