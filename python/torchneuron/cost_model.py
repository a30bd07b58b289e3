"""TARGET.md's cost model: how long each instruction occupies its engine or DMA queue.

Shared by the simulator (which charges these costs) and the compiler (which plans with
them: scheduling, tile sizes); it imports only the ISA definitions and the target table.
Operands are anything with the simulator's `Access` attributes (memory, isa_dtype, dtype,
shape, strides in bytes, free_size, partitions, nbytes, overlaps()).

Every figure comes from the `Target`. Costs depend only on the instruction (and, for the
dependent back-to-back overhead, on the previous instruction of the same stream), so they are
computed once per program; only start times are worked out while running.

Compute engines, in cycles of the engine's clock (`target.engine_ghz`), N = free elements per
partition of the main input (dst for memset and iota), MIN_II = `target.min_ii`:
    matmul          max(min(MIN_II, M), N); x pe_fp32_slowdown if an input is fp32,
                    / pe_fp8_speedup if both inputs are fp8
    PE transpose    max(P, min(MIN_II, F))  (a data movement through the array: no fp32
                    slowdown)
    activate        max(MIN_II, N), + MIN_II when it also accumulates (slot 4)
    tensor_scalar, tensor_copy, memset
                    max(MIN_II, N)
    tensor_scalar_reduce
                    max(MIN_II, N) + MIN_II (NKI ISA reference, nki.isa.tensor_scalar_reduce)
    tensor_tensor   max(MIN_II, N) if an input is in PSUM, or all operands are bf16 in SBUF
                    and the op is add/sub/mul; else max(MIN_II, 2N)
    select          as tensor_tensor (fast only with an input in PSUM: it has no ALU op)
    tensor_reduce   N, or N/2 for a bf16 source reduced with add or max
    iota            pool_iota_base_cycles + N
    nop             1 cycle (an engine NOP only passes semaphores on)
plus `fixed_overhead_cycles` (once) when the instruction reads a region (same memory,
overlapping partition range x byte range) that the previous instruction of its stream wrote,
or when N < `tiny_free_size`. A matmul that accumulates into PSUM does not count its dst as
"read": accumulation happens in PSUM and back-to-back accumulating matmuls pipeline.
The PE's MIN_II is the same 64-cycle minimum initiation interval the table writes as "64".

DMA, per queue: a transfer lasts (bytes + chunks * dma_chunk_overhead_bytes) /
dma_queue_bytes_per_ns ns, bytes counted on the destination side, chunks = contiguous runs
(the larger count of the two sides). Its fixed latency (dma_latency_ns) is added by the
scheduler (see sim/simulator.py), where it overlaps earlier transfers of the queue.
"""

from __future__ import annotations

from typing import Any

from torchneuron.format import isa
from torchneuron.target import Target

Access = Any    # an operand with the attributes listed above

Op = isa.Opcode
_FP8 = (isa.DType.F8E4M3, isa.DType.F8E5M2)
_FAST_BF16_OPS = (isa.AluOp.ADD, isa.AluOp.SUB, isa.AluOp.MUL)
NOP_CYCLES = 1

# PE rate classes (see `matmul_rate_class`) and the operand width `Target.pe_peak_flops_per_ns`
# takes for each.
PE_RATE_CLASSES = {"fp32": 4, "bf16": 2, "fp8": 1}


def matmul_rate_class(stationary: isa.DType, moving: isa.DType) -> str:
    """Which PE rate a matmul runs at: "fp32" (an fp32 input: peak / pe_fp32_slowdown),
    "fp8" (both inputs fp8: peak x pe_fp8_speedup) or "bf16" (the 16-bit rate: bf16, fp16,
    or fp8 mixed with a 16-bit type)."""
    if isa.DType.F32 in (stationary, moving):
        return "fp32"
    if stationary in _FP8 and moving in _FP8:
        return "fp8"
    return "bf16"


def free_size_n(opcode: isa.Opcode, ops: tuple[Access | None, ...]) -> int:
    """N of the cost table: free elements per partition of the main input."""
    if opcode == Op.NOP:
        return 0
    if opcode == Op.MATMUL:
        return ops[2].free_size
    if opcode in (Op.MEMSET, Op.IOTA, Op.SELECT):
        return ops[0].free_size
    return ops[1].free_size


def compute_cycles(ins, target: Target) -> float:
    """Cycles of a compute-engine instruction (a sim.program.Instr), without the fixed
    overhead."""
    opcode, ops, min_ii = ins.opcode, ins.ops, target.min_ii
    n = free_size_n(opcode, ops)
    if opcode == Op.NOP:
        return NOP_CYCLES
    if opcode == Op.MATMUL:
        st, mv = ops[1], ops[2]
        cycles = max(min(min_ii, st.free_size), n)
        rate = matmul_rate_class(st.isa_dtype, mv.isa_dtype)
        if rate == "fp32":
            return cycles * target.pe_fp32_slowdown
        if rate == "fp8":
            return cycles / target.pe_fp8_speedup
        return cycles
    if opcode == Op.TRANSPOSE:
        return max(ops[1].partitions, min(min_ii, n))
    if opcode == Op.ACTIVATE:
        return max(min_ii, n) + (min_ii if ops[4] is not None else 0)
    if opcode in (Op.TENSOR_SCALAR, Op.TENSOR_COPY, Op.MEMSET):
        return max(min_ii, n)
    if opcode == Op.TENSOR_SCALAR_REDUCE:
        return max(min_ii, n) + min_ii
    if opcode in (Op.TENSOR_TENSOR, Op.SELECT):
        inputs = [a for a in ops[1:] if a is not None]
        fast = any(a.memory == isa.Memory.PSUM for a in inputs)
        if opcode == Op.TENSOR_TENSOR and ins.alu0 in _FAST_BF16_OPS:
            fast = fast or all(a.memory == isa.Memory.SBUF and a.isa_dtype == isa.DType.BF16
                               for a in ops[:3])
        return max(min_ii, n) if fast else max(min_ii, 2 * n)
    if opcode == Op.TENSOR_REDUCE:
        if ops[1].isa_dtype == isa.DType.BF16 and ins.alu0 in (isa.AluOp.ADD, isa.AluOp.MAX):
            return n / 2
        return n
    if opcode == Op.IOTA:
        return target.pool_iota_base_cycles + n
    raise AssertionError(f"no compute cost for {opcode.label}")


def needs_fixed_overhead(opcode: isa.Opcode, ops: tuple[Access | None, ...],
                         read_slots: tuple[int, ...], previous_writes: list[Access],
                         target: Target) -> bool:
    """Dependent back-to-back on the same stream, or a tiny free size."""
    if opcode == Op.NOP:
        return False
    if free_size_n(opcode, ops) < target.tiny_free_size:
        return True
    return any(ops[s] is not None and ops[s].overlaps(w)
               for s in read_slots for w in previous_writes)


def contiguous_runs(a: Access, rows_apart: bool = False) -> int:
    """How many contiguous byte runs an access pattern is made of (adjacent dims merged).

    On chip each partition is its own run at least; in HBM the partition axis is one more
    strided dimension, unless the rows are placed independently (`rows_apart`: the rows an
    indirect DMA's index chooses).
    """
    if a.memory != isa.Memory.HBM or rows_apart:
        return a.shape[0] * strided_runs(a.shape[1:], a.strides[1:], a.dtype.itemsize)
    return strided_runs(a.shape, a.strides, a.dtype.itemsize)


def strided_runs(sizes, strides, element: int = 1) -> int:
    """Contiguous runs of a walk over `sizes` with `strides` (outermost first, in units of
    which an element is `element`): adjacent dims merge while each one's stride is the
    extent of the run inside it."""
    run, runs, merging = element, 1, True
    for n, stride in zip(reversed(sizes), reversed(strides)):
        if n == 1:
            continue
        if merging and stride == run:
            run *= n
        else:
            merging = False
            runs *= n
    return runs


def dma_transfer_ns(ops: tuple[Access | None, ...], target: Target,
                    indirect: bool = False) -> tuple[float, int]:
    """Duration of a DMA transfer on its queue (without the fixed latency), and its bytes.
    An indirect DMA moves each row as its own descriptor."""
    dst, src = ops[0], ops[1]
    nbytes = dst.nbytes
    chunks = max(contiguous_runs(dst, indirect), contiguous_runs(src, indirect))
    return (nbytes + chunks * target.dma_chunk_overhead_bytes) / target.dma_queue_bytes_per_ns, \
        nbytes
