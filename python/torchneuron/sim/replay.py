"""Replaying a verified execution: the same instructions in the same order, without the
checks that one run already settled for every run.

Nothing a program does over time depends on its data: every duration is static (the cost
model runs in `prepare`) and semaphores only count, so the event loop (sim/simulator.py)
takes the instructions in the same order, at the same simulated times, on every run. Which
bytes each instruction reads and writes is static too, except the rows an indirect DMA
picks. So when one run completed with every never-written check passing (operands and
outputs), every later run passes the same checks, provided that
  - no indirect DMA writes HBM (the rows it writes depend on data, and so would whether a
    later read finds its bytes written), and
  - every indirect DMA that reads HBM reads an input or a constant tensor (written in full
    before the run starts; its rows' check is still made, against those tensors).
`Replay` then runs each later execution as: inputs into HBM, each instruction's semantic
function (sim/semantics.py, the same functions, so the same numerics; for plain copies and
matmuls the same numpy and library calls bound to their operands once, `semantics.bound_step`,
a bf16 matmul's subnormal check scanning each version of its operands' bytes once per run,
`ExponentScans`) in the verified run's order, outputs out. Its memories are kept from run to run, with the numpy
view of every operand built once, and carry no written-masks: the verified run showed that
no instruction reads a byte before this run wrote it, so data left over from an earlier run
is never read. The profile is the verified run's, since timing does not depend on data.
Where the instructions hold enough independent work, a replay runs them on two host
threads, each instruction after those whose bytes it depends on (sim/host_threads.py): the
same bytes result, bit for bit.

A program that does not qualify is checked on every run, as is a program whose replay is in
use by another thread at the time (it runs on fresh memories). `TORCHNEURON_SIM_REPLAY=0`
turns replays off.
"""

from __future__ import annotations

import functools
import threading

import numpy as np

from torchneuron import config
from torchneuron.format import isa
from torchneuron.sim import host_gemm, host_threads
from torchneuron.sim.memory import NUMPY_DTYPES, Access, Hbm, Store
from torchneuron.sim.profile import Profile
from torchneuron.sim.program import PreparedProgram
from torchneuron.sim.rules import WRITE_SLOTS
from torchneuron.sim.semantics import Machine, bound_step, convert
from torchneuron.sim.simulator import blas_single_thread


def why_not_replayable(program: PreparedProgram) -> str | None:
    """The reason the checks of one run of `program` do not settle them for every run (see
    the module docstring), or None when they do."""
    tensors = program.neff.tensors
    for stream in program.streams:
        for ins in stream.instrs:
            if ins.opcode != isa.Opcode.DMA or not ins.flags & isa.FLAG_INDIRECT:
                continue
            dst, src = ins.ops[0], ins.ops[1]
            if dst.memory == isa.Memory.HBM:
                return f"{ins.label} writes HBM rows chosen by data"
            if tensors[src.tensor].kind not in ("input", "constant"):
                return (f"{ins.label} reads rows of {tensors[src.tensor].kind} tensor "
                        f"{tensors[src.tensor].name!r}, chosen by data")
    return None


class _ReplayMachine(Machine):
    """The semantics' machine over kept memories: an operand is its prebuilt view."""

    def __init__(self, stores: dict, views: dict[int, np.ndarray]):
        self.stores = stores
        self._views = views

    def read(self, ins, a: Access) -> np.ndarray:
        return self._views[id(a)]

    def write(self, a: Access, values: np.ndarray) -> None:
        self._views[id(a)][...] = convert(values, a.dtype).reshape(a.shape)


class _Scan:
    """One version of a bf16 matmul operand's bytes: its smallest exponent, scanned by the
    first instruction of a run that asks, and then handed to the others. (Two host threads
    may both scan it, with the same result.)"""

    __slots__ = ("scans", "bits", "result")

    def __init__(self, scans: "ExponentScans", bits: np.ndarray):
        self.scans, self.bits, self.result = scans, bits, (0, 0)

    def __call__(self) -> int:
        run, value = self.result
        if run == self.scans.run:
            return value
        value = host_gemm.smallest_exponent(self.bits)
        self.result = (self.scans.run, value)
        return value


class ExponentScans:
    """The host's bf16 GEMM decides on each call whether a subnormal can arise by scanning
    both operands for their smallest exponent (sim/host_gemm.py). Matmuls that read the same
    on-chip bytes with nothing written to them in between -- a GEMM's moving tile is read by
    every stationary tile against it -- find the same exponent, so one scan per run serves
    them all. An operand's version is the last instruction before it, in the replay's
    order, that writes any block its bytes lie in (host_threads.onchip_blocks); operands
    with the same view and version share one `_Scan`. A replay run counts `run` up, which
    makes every scan of the previous run stale."""

    def __init__(self, order: list):
        self.run = 0
        last_write: dict[tuple, int] = {}
        # (id(instruction), slot) -> the operand's view and version. (Decoding shares one
        # Access between instructions with the same operand, so the instruction is the key.)
        self._version: dict[tuple[int, int], tuple] = {}
        for i, ins in enumerate(order):
            if ins.opcode == isa.Opcode.MATMUL:
                for slot in (1, 2):
                    a = ins.ops[slot]
                    if a.memory != isa.Memory.HBM:
                        version = max((last_write.get(b, -1)
                                       for b in host_threads.onchip_blocks(a)), default=-1)
                        self._version[id(ins), slot] = (a.memory, a.offset, a.strides, a.shape,
                                                a.dtype, version)
            for slot in WRITE_SLOTS[ins.opcode]:
                a = ins.ops[slot] if slot < len(ins.ops) else None
                if a is not None and a.memory != isa.Memory.HBM:
                    for b in host_threads.onchip_blocks(a):
                        last_write[b] = i
        self._scans: dict[tuple, _Scan] = {}

    def scan(self, ins, slot: int, operand: np.ndarray):
        """The shared scan of operand `slot` of matmul `ins` (`operand`: its bf16 [K, M or N]
        view)."""
        key = self._version.get((id(ins), slot))
        if key is None:
            return lambda: host_gemm.smallest_exponent(operand.view(host_gemm.U16))
        cell = self._scans.get(key)
        if cell is None:
            cell = self._scans[key] = _Scan(self, operand.view(host_gemm.U16))
        return cell


class Replay:
    """Later executions of a prepared program whose run `profile` passed every check."""

    def __init__(self, program: PreparedProgram, profile: Profile):
        self.program = program
        self.profile = profile
        self.lock = threading.Lock()
        neff, target = program.neff, program.target
        by_position = {(s.name, i): ins for s in program.streams for i, ins in enumerate(s.instrs)}
        # The verified run's trace lists its instructions in the order it executed them.
        self.order = [by_position[(e.stream, e.index)] for e in profile.events]
        if len(self.order) != sum(len(s.instrs) for s in program.streams):
            raise ValueError(f"the profile of {neff.name!r} is not of a complete run")
        self.hbm = Hbm(program.layout, neff.tensors)
        sbuf = Store.onchip(isa.Memory.SBUF, target.num_partitions, target.sbuf_partition_bytes)
        psum = Store.onchip(isa.Memory.PSUM, target.num_partitions, target.psum_partition_bytes)
        stores = {isa.Memory.HBM: self.hbm, isa.Memory.SBUF: sbuf, isa.Memory.PSUM: psum}
        views: dict[int, np.ndarray] = {}
        written_tensors: set[int] = set()
        for ins in self.order:
            for slot, a in enumerate(ins.ops):
                if a is None:
                    continue
                if id(a) not in views:
                    views[id(a)] = stores[a.memory].view(a)
                if a.memory == isa.Memory.HBM and slot in WRITE_SLOTS[ins.opcode]:
                    written_tensors.add(a.tensor)
        self.machine = _ReplayMachine(stores, views)
        # One call per instruction: its bound step where semantics.bound_step has one (the
        # same bits with the reshapes made here once), else its semantic function.
        self.scans = ExponentScans(self.order)
        self.steps = [bound_step(ins, views, self.scans.scan)
                      or functools.partial(ins.semantics, ins, self.machine)
                      for ins in self.order]
        # Spread over two host threads where that pays (sim/host_threads.py).
        self.runner = None
        if config.SIM_THREADS.get() > 1:
            bases = self.hbm.layout.bases

            def scratch_extent(tid: int) -> tuple[int, int] | None:
                t = neff.tensors[tid]
                if t.kind != "scratch":
                    return None
                return bases[tid], bases[tid] + t.nbytes

            plan = host_threads.plan(self.order, scratch_extent)
            if host_threads.worth_two_threads(plan):
                self.runner = host_threads.TwoThreadRunner(self.steps, plan)
        self.inputs = [self.hbm.tensor_access(tid) for tid in neff.inputs]
        self.outputs = [(self.hbm.tensor_access(tid), tuple(neff.tensors[tid].shape))
                        for tid in neff.outputs]
        # Inputs and constants are whole: indirect reads check their rows against the mask.
        for t in neff.tensors:
            if t.kind in ("input", "constant") and t.num_elements:
                self.hbm.mark_written(self.hbm.tensor_access(t.id))
        self.constants = [(self.hbm.tensor_access(t.id),
                           np.frombuffer(t.data, dtype=NUMPY_DTYPES[t.dtype]))
                          for t in neff.tensors if t.kind == "constant" and t.num_elements]
        self._store_constants()
        # A program that writes into its own constants needs them afresh on every run.
        self.constants_each_run = any(neff.tensors[t].kind == "constant"
                                      for t in written_tensors)

    def _store_constants(self) -> None:
        for access, data in self.constants:
            self.hbm.store(access, data)

    def execute(self, arrays: list[np.ndarray]) -> tuple[list[np.ndarray], Profile]:
        """Run once on `arrays` (checked inputs, in the program's order): the outputs and
        the profile. The caller holds `lock`."""
        hbm = self.hbm
        for access, array in zip(self.inputs, arrays):
            if array.size:
                hbm.store(access, np.ascontiguousarray(array).reshape(-1))
        if self.constants_each_run:
            self._store_constants()
        self.scans.run += 1
        with blas_single_thread(), np.errstate(all="ignore"):
            if self.runner is None or not self.runner.try_run():
                for step in self.steps:
                    step()
        outputs = [hbm.view(access).copy().reshape(shape) if access.shape[0] else
                   np.zeros(shape, access.dtype) for access, shape in self.outputs]
        return outputs, self.profile.copy()
