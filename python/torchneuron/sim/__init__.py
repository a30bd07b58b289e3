"""The NeuronCore simulator: the executable specification of the machine (TARGET.md).

Layers, bottom up:
    memory.py     SBUF / PSUM / HBM as uint8 arrays with written-masks; operands as strided views
    rules.py      TARGET.md's rules, checked once per program (ConstraintError)
    semantics.py  one numpy function per opcode (format/isa.py's docstring, executed)
    program.py    `prepare`: a NEFF decoded and checked into runnable instructions
    simulator.py  `run`: the event loop over engines and DMA queues, semaphores, deadlocks
    replay.py     `Replay`: later runs of a program whose first run passed every check, without
                  re-making those checks (timing and which bytes are touched do not depend on
                  data)
    profile.py    `Profile`: time, busy/utilisation, instruction mix, bytes, FLOPs, the
                  roofline bound (`Profile.roofline()` -> `Roofline`), the report neuron-profile
                  prints, Chrome/Perfetto trace
    timeline.py   the timeline PNG (matplotlib; imported only when a picture is asked for)

Most users go through `torchneuron.runtime` (`load`, `Device.execute`), which allocates HBM,
copies inputs in and outputs out. Direct use:

    program = prepare(neff, target, layout)      # raises ConstraintError
    hbm = Hbm(layout, neff.tensors); hbm.write_tensor(tid, array) ...
    profile = run(program, hbm)                  # raises SimulationError subclasses

The simulator never imports the compiler, torch or torch-mlir.
"""

from torchneuron.sim.errors import (
    ConstraintError, DeadlockError, IndexOutOfRangeError, OutOfBoundsError, SimulationError,
    UninitializedReadError,
)
from torchneuron.sim.memory import Hbm, HbmLayout
from torchneuron.sim.profile import Profile, Roofline, StreamStats, TraceEvent
from torchneuron.sim.program import PreparedProgram, prepare
from torchneuron.sim.simulator import run

__all__ = [
    "ConstraintError", "DeadlockError", "IndexOutOfRangeError", "OutOfBoundsError",
    "SimulationError",
    "UninitializedReadError", "Hbm", "HbmLayout", "Profile", "Roofline", "StreamStats",
    "TraceEvent",
    "PreparedProgram", "prepare", "run",
]
