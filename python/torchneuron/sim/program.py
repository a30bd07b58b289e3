"""A NEFF decoded once for the simulator: checked instructions with their static costs.

`prepare(neff, target, layout)` turns each stream's fixed-width records into `Instr` objects
(plain attributes, operands as `Access`, the opcode's semantic function, duration, bytes,
FLOPs), checking every rule of TARGET.md on the way (sim/rules.py). Running the program then
needs no decoding or checking beyond the never-written-memory check.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from torchneuron.format import isa
from torchneuron.format.container import Neff
from torchneuron import cost_model as costs
from torchneuron.sim import rules
from torchneuron.sim.errors import ConstraintError, SimulationError, instruction_label
from torchneuron.sim.memory import Access, HbmLayout
from torchneuron.sim.semantics import SEMANTICS
from torchneuron.target import Target

_OPERAND_FIELDS = ("memory", "dtype", "partition_start", "partition_count", "tensor",
                   "offset", "partition_stride", "sizes", "strides")
_RECORD_FIELDS = ("opcode", "flags", "func", "alu0", "alu1", "reduce_dims", "nwaits",
                  "signal", "wait_sem", "wait_value", "imm", "loc")
# Enum members by value (each enum is contiguous from 0; the container checked the ranges).
_OPCODES, _FUNCS, _ALUS = tuple(isa.Opcode), tuple(isa.ActFunc), tuple(isa.AluOp)


class Instr:
    """One checked instruction, ready to run."""

    __slots__ = ("stream", "index", "opcode", "opname", "location", "flags", "func", "alu0", "alu1",
                 "reduce_dims", "imm", "waits", "signal", "ops", "semantics", "duration_ns",
                 "nbytes", "flops", "flops_class")

    def __init__(self, stream: str, index: int, location: str, opcode, flags, func, alu0,
                 alu1, reduce_dims, nwaits, signal, wait_sem, wait_value, imm):
        self.stream = stream
        self.index = index
        self.location = location
        self.opcode: isa.Opcode = _OPCODES[opcode]
        self.opname: str = self.opcode.label
        self.flags: int = flags
        self.func: isa.ActFunc = _FUNCS[func]
        self.alu0: isa.AluOp = _ALUS[alu0]
        self.alu1: isa.AluOp = _ALUS[alu1]
        self.reduce_dims: int = reduce_dims
        self.imm: tuple[float, ...] = tuple(imm)
        # A wait for value 0 is always met; drop it.
        self.waits: tuple[tuple[int, int], ...] = tuple(
            (s, v) for s, v in zip(wait_sem[:nwaits], wait_value[:nwaits]) if v > 0)
        self.signal: int = signal
        self.ops: tuple[Access | None, ...] = ()
        self.semantics = SEMANTICS[self.opcode]
        self.duration_ns = 0.0   # engine busy time, or DMA transfer time (without latency)
        self.nbytes = 0          # DMA bytes moved (destination side)
        self.flops = 0           # PE FLOPs (2*K*M*N per matmul)
        self.flops_class = ""    # the matmul's PE rate class (costs.matmul_rate_class)

    @property
    def label(self) -> str:
        return instruction_label(self.stream, self.index, self.opname, self.location)

    def error(self, detail: str, cls: type = ConstraintError) -> SimulationError:
        """An error of class `cls` that names this instruction."""
        return cls(detail, stream=self.stream, index=self.index, opcode=self.opname,
                   location=self.location)


@dataclass
class PreparedStream:
    name: str
    engine: isa.Engine
    queue: int
    instrs: list[Instr]

    @property
    def is_dma(self) -> bool:
        return self.engine == isa.Engine.DMA


@dataclass
class PreparedProgram:
    neff: Neff
    target: Target
    layout: HbmLayout
    streams: list[PreparedStream]   # engines in Engine order, then DMA queues by number
    increments: list[int]           # how many instructions signal each semaphore
    onchip_extent: dict             # memory -> bytes of each partition the program touches
    # Set by the runtime after the first run that passed every check: a `sim.replay.Replay`
    # for later runs, or the reason the program cannot be replayed (a str).
    replay: object = None


def prepare(neff: Neff, target: Target, layout: HbmLayout) -> PreparedProgram:
    """Decode and check every instruction of `neff` for `target` (raises ConstraintError)."""
    streams = []
    increments = [0] * neff.num_semaphores
    decoded: dict[tuple, Access] = {}   # operands recur across instructions: decode each once
    for s in sorted(neff.streams, key=lambda s: (s.engine, s.queue)):
        if s.engine == isa.Engine.DMA and s.queue >= target.dma_queues:
            raise ConstraintError(f"stream {s.name}: {target.name} has only "
                                  f"{target.dma_queues} DMA queues")
        instrs = _decode_stream(neff, s.name, s.engine, s.records, target, layout, decoded)
        for ins in instrs:
            if ins.signal != isa.NO_SIGNAL:
                increments[ins.signal] += 1
        streams.append(PreparedStream(s.name, s.engine, s.queue, instrs))
    extent = {isa.Memory.SBUF: 0, isa.Memory.PSUM: 0}
    for access in decoded.values():
        if access.memory in extent:
            extent[access.memory] = max(extent[access.memory], access.b1)
    return PreparedProgram(neff, target, layout, streams, increments, extent)


def _operand_fields(records) -> list[list[tuple | None]]:
    """Per instruction, per slot: the used operand's fields (see rules.decode_operand)."""
    operands = records["operands"]
    used = operands["memory"] != isa.Memory.NONE
    rows, slots = np.nonzero(used)
    compact = operands[used]        # only the used operands, in (row, slot) order
    ndims = compact["ndim"].tolist()
    columns = [compact[f].tolist() for f in _OPERAND_FIELDS]
    fields: list[list[tuple | None]] = [[None] * isa.NUM_OPERANDS for _ in range(len(records))]
    for row, slot, nd, *values in zip(rows.tolist(), slots.tolist(), ndims, *columns):
        values[7] = tuple(values[7][:nd])     # sizes
        values[8] = tuple(values[8][:nd])     # strides
        fields[row][slot] = tuple(values)
    return fields


def _decode_stream(neff: Neff, name: str, engine: isa.Engine, records, target: Target,
                   layout: HbmLayout, decoded: dict) -> list[Instr]:
    # Column-wise .tolist() turns the structured array into Python values at C speed.
    columns = [records[f].tolist() for f in _RECORD_FIELDS]
    operand_fields = _operand_fields(records)
    is_dma = engine == isa.Engine.DMA
    ghz = None if is_dma else target.engine_ghz(engine.label)
    instrs: list[Instr] = []
    previous_writes: list[Access] = []
    for i, (opcode, flags, func, alu0, alu1, reduce_dims, nwaits, signal, wait_sem,
            wait_value, imm, loc) in enumerate(zip(*columns)):
        ins = Instr(name, i, neff.locations[loc], opcode, flags, func, alu0, alu1,
                    reduce_dims, nwaits, signal, wait_sem, wait_value, imm)
        fields = operand_fields[i]
        rules.check_opcode(ins, engine, [f is not None for f in fields])
        roles = rules.OPERAND_ROLES[ins.opcode][0]
        indirect = bool(flags & isa.FLAG_INDIRECT) and ins.opcode == isa.Opcode.DMA
        ops: list[Access | None] = []
        for j, f in enumerate(fields):
            if f is None:
                ops.append(None)
                continue
            key = (is_dma, j, roles[j], f, indirect)
            access = decoded.get(key)
            if access is None:
                access = rules.decode_operand(ins, engine, j, roles[j], f, target,
                                              neff.tensors, layout, indirect=indirect)
                decoded[key] = access
            ops.append(access)
        ins.ops = tuple(ops)
        rules.check_operands(ins, ins.ops, target)

        if ins.opcode == isa.Opcode.MATMUL:
            st, mv = ops[1], ops[2]
            ins.flops = 2 * st.partitions * st.free_size * mv.free_size
            ins.flops_class = costs.matmul_rate_class(st.isa_dtype, mv.isa_dtype)
        if is_dma:
            if ins.opcode == isa.Opcode.DMA:
                ins.duration_ns, ins.nbytes = costs.dma_transfer_ns(ins.ops, target,
                                                                    indirect=indirect)
        else:
            write_slots = rules.WRITE_SLOTS[ins.opcode]
            read_slots = tuple(j for j in range(isa.NUM_OPERANDS) if j not in write_slots)
            cycles = costs.compute_cycles(ins, target)
            if costs.needs_fixed_overhead(ins.opcode, ins.ops, read_slots, previous_writes,
                                          target):
                cycles += target.fixed_overhead_cycles
            ins.duration_ns = cycles / ghz
            previous_writes = [ops[j] for j in write_slots if ops[j] is not None]
        instrs.append(ins)
    return instrs
