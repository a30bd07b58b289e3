"""The torchneuron runtime: load a NEFF and execute it on a (simulated) NeuronCore.

Usage
-----
    import numpy as np
    from torchneuron.runtime import Device, load

    program = load("model.neff")            # or load(neff_bytes); load(path, target="trn1")
    program.inputs                          # [TensorSpec(name, shape, dtype), ...]
    result = Device().execute(program, [x, w])       # or {"x": x, "w": w}
    y, = result.outputs                     # numpy arrays, in the program's output order
    print(result.profile.summary())         # simulated time, per-engine busy/utilisation ...
    result.profile.write_chrome_trace("trace.json")  # open in ui.perfetto.dev

API
---
`load(path_or_bytes, target=None) -> Program`
    Reads and validates the container. Raises `NeffFormatError` (and nothing else, however
    the file is damaged) for a truncated, bit-flipped, wrong-magic, future-version or
    malformed file, for an unknown target name, when `target` is given and differs from the
    program's, and when the program's tensors do not fit the target's HBM.
`Program`
    `name`, `target` (a `torchneuron.target.Target`), `inputs` / `outputs` (`TensorSpec`
    lists: name, shape, numpy dtype -- bf16/fp8 as ml_dtypes types), `instruction_counts`
    (per stream), `neff` (the decoded container).
`Device(target=None)`
    A simulated core of the given target (name or `Target`; default from
    `TORCHNEURON_TARGET`, else trn2).
`Device.execute(program, inputs) -> ExecutionResult`
    `inputs`: a list (positional) or a dict by input name of numpy arrays or torch tensors,
    of exactly the declared shapes and dtypes (a mismatch raises ValueError naming the
    input; torch is never imported unless a tensor is passed). HBM is allocated per
    execution: inputs, outputs and constants, 64-byte aligned, then the scratch arena.
    Raises `SimulationError` subclasses when the program would fail on the chip:
    `ConstraintError` (a rule of TARGET.md; `OutOfBoundsError` for an operand outside its
    memory), `UninitializedReadError` (a read of never-written memory, or an output the
    program leaves unwritten), `DeadlockError` (semaphore waits that can never be met).
    Every error names the instruction: `act[12] activate (loc: fwd.mlir:3 relu): ...`.
`ExecutionResult`
    `outputs: list[np.ndarray]`, `profile: Profile`.
`Profile`
    `total_ns` / `total_us` (simulated time), `streams` (per engine and DMA queue:
    instructions, busy_ns, dma_bytes, opcodes -- the instruction mix), `busy_ns`,
    `utilisation`, `instruction_count`, `opcode_counts`, `dma_bytes`, `dma_bytes_per_queue`,
    `dma_bytes_per_ns` (achieved bandwidth), `pe_flops`, `pe_flops_by_class` (bf16/fp32/fp8
    PE rates), `pe_peak_fraction`, `compulsory_bytes` (inputs, constants and outputs, each
    once), `events` (one `TraceEvent` per instruction), `summary()` (short table),
    `report()` (what neuron-profile prints), `roofline()`, `chrome_trace()`,
    `write_chrome_trace(path)`, `write_timeline_png(path)` (needs matplotlib).
`Roofline` (from `Profile.roofline()`)
    `flops`, `flops_by_class`, `compulsory_bytes`, `compute_bound_ns` (sum of FLOPs / PE
    peak of each class), `memory_bound_ns` (compulsory bytes / the core's HBM bandwidth),
    `bound_ns` (the larger), `binding` ("compute"/"memory"/"none"), `simulated_ns`,
    `efficiency` (bound / simulated), `ratio` (simulated / bound).
`requested_target(name=None)`
    The device target a tool was asked for: `name`, else `TORCHNEURON_TARGET` when set,
    else None (the program's own target).

The runtime never imports the compiler or torch-mlir; the NEFF format is the contract.
"""

from torchneuron.format.container import NeffFormatError
from torchneuron.runtime.device import Device, ExecutionResult, requested_target
from torchneuron.runtime.program import Program, TensorSpec, load
from torchneuron.sim import (
    ConstraintError, DeadlockError, OutOfBoundsError, Profile, Roofline, SimulationError,
    TraceEvent, UninitializedReadError,
)

__all__ = [
    "load", "Device", "requested_target", "Program", "TensorSpec", "ExecutionResult",
    "Profile", "Roofline", "TraceEvent",
    "NeffFormatError", "SimulationError", "ConstraintError", "OutOfBoundsError",
    "UninitializedReadError", "DeadlockError",
]
