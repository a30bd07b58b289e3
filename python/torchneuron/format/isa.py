"""The NeuronCore instruction set as stored in a NEFF: enums, access patterns, fixed-width records.

This module is the contract between the compiler (which writes instructions) and the runtime and
simulator (which read and execute them). Both sides use these definitions; neither defines its
own. It imports only numpy.

Streams
    Each compute engine (PE, ACT, DVE, POOL) and the sync engine (SP) runs one in-order
    instruction stream; each of the core's DMA queues runs one in-order stream of DMA
    instructions. Engines and queues run in parallel and synchronise only through semaphores.

Semaphores
    An instruction may wait on up to `MAX_WAITS` semaphores (it starts only when every
    `sem[i] >= value[i]`) and may increment one semaphore by one when it completes (`signal`).

Access patterns (operands)
    An operand names a memory and a strided view of it, with a partition axis and up to
    `MAX_FREE_DIMS` free axes (outermost first). Its logical shape is
    `[partition_count, sizes[0], ..., sizes[ndim-1]]`.
    - SBUF/PSUM: element (p, i0..) lies in partition `partition_start + p`, at byte
      `offset + itemsize * sum(i_k * strides[k])` of that partition. `partition_stride` is 0.
    - HBM: element (p, i0..) is element `offset + p * partition_stride + sum(i_k * strides[k])`
      of HBM tensor `tensor` (an index into the NEFF's tensor table), counted in elements of
      the operand's dtype, which must be the tensor's dtype.

Instruction semantics (operand slots 0..4; "-" = unused; N = free elements per partition)
    NOP            -                         waits and signals only.
    DMA            0 dst, 1 src,             copy elements in row-major order of each operand's
                   2 index (FLAG_INDIRECT)   logical shape (equal element counts); converts
                                             dtype. Memories: HBM and SBUF, any direction.
                                             With FLAG_INDIRECT exactly one of dst/src is in
                                             HBM, and its partition p starts at element
                                             `offset + index[p] * partition_stride` (index:
                                             SBUF [P, 1] of an integer dtype) instead of
                                             `offset + p * partition_stride`: a row gather
                                             (src) or scatter (dst; partitions written in
                                             increasing order). An index that takes a row
                                             outside its tensor faults the DMA.
    MATMUL (PE)    0 dst PSUM fp32 [M, N],   dst = stationary^T @ moving, or dst += ... when
                   1 stationary SBUF [K, M], FLAG_ACCUMULATE is set. K <= 128, M <= 128,
                   2 moving SBUF [K, N]      N <= 512, dst within one PSUM bank. fp32 inputs
                                             pair only with fp32. Accumulates in fp32.
    TRANSPOSE (PE) 0 dst PSUM [F, P],        dst[f, p] = src[p, f]; P, F <= 128. dst dtype is
                   1 src SBUF [P, F]         fp32 or the src dtype (values pass exactly).
    ACTIVATE (ACT) 0 dst, 1 src,             dst = func(src * scale + bias); scale is slot 3
                   2 bias [P,1] (optional),  (per-partition) when present, else imm[0]; bias 0
                   3 scale [P,1] (optional), when absent. Slot 4, when present, receives the
                   4 accum [P,1] (optional)  sum over the free axes of dst (fp32).
    TENSOR_TENSOR  0 dst, 1 a, 2 b           dst = a <alu0> b. Engine DVE or POOL. a and b may
                                             not both be in PSUM.
    TENSOR_SCALAR  0 dst, 1 src,             dst = (src <alu0> s0) <alu1> s1 where s0 is slot 2
                   2 s0 [P,1] (optional),    (per-partition) or imm[0], s1 slot 3 or imm[1];
                   3 s1 [P,1] (optional)     alu1 BYPASS skips the second op. FLAG_REVERSE0/1
                                             swap the operands of op 0/1. Engine DVE/POOL/ACT.
    TENSOR_REDUCE  0 dst, 1 src              reduce src with alu0 over its innermost
                                             `reduce_dims` free axes; dst has src's partitions
                                             and remaining free axes. Engine DVE or POOL.
    TENSOR_SCALAR_ 0 dst, 1 src,             dst = src <alu0> s0 (s0 slot 2 or imm[0];
    REDUCE (DVE)   2 s0 [P,1] (optional),    FLAG_REVERSE0 swaps), and slot 3 receives the
                   3 reduce [P,1]            reduction with alu1 (add, mul, max, min) of the
                                             values written to dst over all its free axes,
                                             negated when FLAG_NEGATE is set.
    TENSOR_COPY    0 dst, 1 src              dst = src (with dtype conversion). ACT/DVE/POOL.
    MEMSET         0 dst                     dst = imm[0]. ACT/DVE/POOL.
    IOTA (POOL)    0 dst                     dst[p, i] = imm[0] + imm[1] * p + imm[2] * i, with
                                             i the row-major index over the free axes.
    SELECT         0 dst, 1 mask, 2 a, 3 b   dst = a where mask != 0 else b. DVE or POOL.

    ACT, DVE and POOL compute in fp32 (inputs are converted on read, outputs on write). A
    conversion to an integer dtype rounds to nearest-even and saturates; to a float dtype it
    rounds to nearest-even.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

MAX_FREE_DIMS = 4
MAX_WAITS = 4
NUM_OPERANDS = 5


class IsaError(ValueError):
    """An instruction or operand that the instruction set cannot express."""


class Engine(IntEnum):
    PE = 0
    ACT = 1
    DVE = 2
    POOL = 3
    SP = 4
    DMA = 5

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, name: str) -> "Engine":
        try:
            return cls[name.upper()]
        except KeyError:
            raise IsaError(f"unknown engine {name!r}") from None


COMPUTE_ENGINES = (Engine.PE, Engine.ACT, Engine.DVE, Engine.POOL, Engine.SP)


class Memory(IntEnum):
    NONE = 0
    HBM = 1
    SBUF = 2
    PSUM = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, name: str) -> "Memory":
        try:
            return cls[name.upper()]
        except KeyError:
            raise IsaError(f"unknown memory {name!r}") from None


class DType(IntEnum):
    F32 = 0
    BF16 = 1
    F16 = 2
    F8E4M3 = 3
    F8E5M2 = 4
    I8 = 5
    U8 = 6
    I16 = 7
    U16 = 8
    I32 = 9
    U32 = 10
    I64 = 11

    @property
    def label(self) -> str:
        return _DTYPE_LABELS[self]

    @property
    def itemsize(self) -> int:
        return _DTYPE_SIZES[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.F32, DType.BF16, DType.F16, DType.F8E4M3, DType.F8E5M2)

    @classmethod
    def parse(cls, label: str) -> "DType":
        for dt, name in _DTYPE_LABELS.items():
            if name == label:
                return dt
        raise IsaError(f"unknown dtype {label!r}")

    def numpy(self) -> np.dtype:
        """The numpy dtype that stores this type (ml_dtypes for bf16 and fp8)."""
        if not _NUMPY_DTYPES:            # built on first use: ml_dtypes loads only then
            import ml_dtypes

            table = {
                DType.F32: np.float32, DType.BF16: ml_dtypes.bfloat16, DType.F16: np.float16,
                DType.F8E4M3: ml_dtypes.float8_e4m3fn, DType.F8E5M2: ml_dtypes.float8_e5m2,
                DType.I8: np.int8, DType.U8: np.uint8, DType.I16: np.int16,
                DType.U16: np.uint16, DType.I32: np.int32, DType.U32: np.uint32,
                DType.I64: np.int64,
            }
            _NUMPY_DTYPES.update({dt: np.dtype(t) for dt, t in table.items()})
        return _NUMPY_DTYPES[self]


_NUMPY_DTYPES: dict[DType, np.dtype] = {}


# Labels follow MLIR's element type spelling so the compiler can map types by name.
_DTYPE_LABELS = {
    DType.F32: "f32", DType.BF16: "bf16", DType.F16: "f16", DType.F8E4M3: "f8E4M3FN",
    DType.F8E5M2: "f8E5M2", DType.I8: "i8", DType.U8: "ui8", DType.I16: "i16",
    DType.U16: "ui16", DType.I32: "i32", DType.U32: "ui32", DType.I64: "i64",
}
_DTYPE_SIZES = {
    DType.F32: 4, DType.BF16: 2, DType.F16: 2, DType.F8E4M3: 1, DType.F8E5M2: 1, DType.I8: 1,
    DType.U8: 1, DType.I16: 2, DType.U16: 2, DType.I32: 4, DType.U32: 4, DType.I64: 8,
}


class Opcode(IntEnum):
    NOP = 0
    DMA = 1
    MATMUL = 2
    TRANSPOSE = 3
    ACTIVATE = 4
    TENSOR_TENSOR = 5
    TENSOR_SCALAR = 6
    TENSOR_REDUCE = 7
    TENSOR_COPY = 8
    MEMSET = 9
    IOTA = 10
    SELECT = 11
    TENSOR_SCALAR_REDUCE = 12

    @property
    def label(self) -> str:
        return self.name.lower()


# Which engines may execute each opcode.
OPCODE_ENGINES: dict[Opcode, tuple[Engine, ...]] = {
    Opcode.NOP: (Engine.PE, Engine.ACT, Engine.DVE, Engine.POOL, Engine.SP, Engine.DMA),
    Opcode.DMA: (Engine.DMA,),
    Opcode.MATMUL: (Engine.PE,),
    Opcode.TRANSPOSE: (Engine.PE,),
    Opcode.ACTIVATE: (Engine.ACT,),
    Opcode.TENSOR_TENSOR: (Engine.DVE, Engine.POOL),
    Opcode.TENSOR_SCALAR: (Engine.DVE, Engine.POOL, Engine.ACT),
    Opcode.TENSOR_REDUCE: (Engine.DVE, Engine.POOL),
    Opcode.TENSOR_COPY: (Engine.ACT, Engine.DVE, Engine.POOL),
    Opcode.MEMSET: (Engine.ACT, Engine.DVE, Engine.POOL),
    Opcode.IOTA: (Engine.POOL,),
    Opcode.SELECT: (Engine.DVE, Engine.POOL),
    Opcode.TENSOR_SCALAR_REDUCE: (Engine.DVE,),
}


class ActFunc(IntEnum):
    """The activation engine's function table."""
    IDENTITY = 0
    RELU = 1
    GELU = 2
    GELU_TANH = 3
    SILU = 4
    SIGMOID = 5
    TANH = 6
    EXP = 7
    LOG = 8
    SQRT = 9
    RSQRT = 10
    RECIPROCAL = 11
    SQUARE = 12
    ABS = 13
    SIGN = 14
    ERF = 15
    SOFTPLUS = 16
    SIN = 17
    COS = 18
    ARCTAN = 19
    GELU_DX = 20        # GELU's derivative (NKI: nki.language.gelu_dx)

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, label: str) -> "ActFunc":
        try:
            return cls[label.upper()]
        except KeyError:
            raise IsaError(f"unknown activation function {label!r}") from None


class AluOp(IntEnum):
    """Arithmetic/logic operations of the vector and scalar engines."""
    BYPASS = 0
    ADD = 1
    SUB = 2
    MUL = 3
    DIV = 4
    MAX = 5
    MIN = 6
    POW = 7
    EQ = 8
    NE = 9
    LT = 10
    LE = 11
    GT = 12
    GE = 13
    AND = 14
    OR = 15
    XOR = 16
    MOD = 17

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, label: str) -> "AluOp":
        try:
            return cls[label.upper()]
        except KeyError:
            raise IsaError(f"unknown ALU operation {label!r}") from None


FLAG_ACCUMULATE = 1 << 0   # MATMUL: add into dst instead of overwriting it
FLAG_REVERSE0 = 1 << 1     # TENSOR_SCALAR: compute s0 <alu0> src
FLAG_REVERSE1 = 1 << 2     # TENSOR_SCALAR: compute s1 <alu1> (...)
FLAG_INDIRECT = 1 << 3     # DMA: the HBM side's partitions are rows chosen by the index operand
FLAG_NEGATE = 1 << 4       # TENSOR_SCALAR_REDUCE: the reduction is written negated

NO_SIGNAL = -1

# The engines compute in fp32 (ACT/DVE/POOL read every operand as fp32): integers, indices
# and counts among them, are exact up to this magnitude.
FP32_EXACT_INTEGERS = 1 << 24

# The index value a program gives an indirect DMA's row when the bounds check the program
# computed for it failed (an index past the dim it indexes, which can still land inside the
# tensor): it takes the row outside every tensor, so the DMA reports it rather than reading
# a neighbouring row. Exact in fp32, whose arithmetic computes indices on the engines.
INDEX_OUT_OF_RANGE = -FP32_EXACT_INTEGERS

# -- Binary layout -------------------------------------------------------------------------

OPERAND_DTYPE = np.dtype([
    ("memory", "<u1"),
    ("dtype", "<u1"),
    ("ndim", "<u1"),
    ("_pad0", "<u1"),
    ("partition_start", "<u2"),
    ("partition_count", "<u2"),
    ("tensor", "<u4"),
    ("_pad1", "<u4"),
    ("offset", "<i8"),
    ("partition_stride", "<i8"),
    ("strides", "<i8", (MAX_FREE_DIMS,)),
    ("sizes", "<u4", (MAX_FREE_DIMS,)),
])

INSTRUCTION_DTYPE = np.dtype([
    ("opcode", "<u2"),
    ("engine", "<u1"),
    ("queue", "<u1"),
    ("flags", "<u2"),
    ("func", "<u1"),
    ("alu0", "<u1"),
    ("alu1", "<u1"),
    ("reduce_dims", "<u1"),
    ("nwaits", "<u1"),
    ("_pad0", "<u1"),
    ("signal", "<i4"),
    ("wait_sem", "<u4", (MAX_WAITS,)),
    ("wait_value", "<u4", (MAX_WAITS,)),
    ("imm", "<f4", (4,)),
    ("loc", "<u4"),
    ("_pad1", "<u4"),
    ("operands", OPERAND_DTYPE, (NUM_OPERANDS,)),
])

RECORD_SIZE = INSTRUCTION_DTYPE.itemsize


@dataclass
class Operand:
    """One access pattern (see the module docstring)."""
    memory: Memory
    dtype: DType
    partition_count: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0
    partition_start: int = 0
    partition_stride: int = 0
    tensor: int = 0

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.partition_count, *self.sizes)

    @property
    def free_size(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n

    @property
    def num_elements(self) -> int:
        return self.partition_count * self.free_size

    def describe(self) -> str:
        dims = ", ".join(f"{n}@{s}" for n, s in zip(self.sizes, self.strides))
        if self.memory == Memory.HBM:
            where = f"hbm[t{self.tensor}]+{self.offset} p{self.partition_count}@{self.partition_stride}"
        else:
            where = (f"{self.memory.label}[p{self.partition_start}:"
                     f"{self.partition_start + self.partition_count}]+{self.offset}B")
        return f"{where} [{dims}] {self.dtype.label}"


@dataclass
class Instruction:
    opcode: Opcode
    engine: Engine
    operands: list[Operand | None] = field(default_factory=lambda: [None] * NUM_OPERANDS)
    queue: int = 0
    flags: int = 0
    func: ActFunc = ActFunc.IDENTITY
    alu0: AluOp = AluOp.BYPASS
    alu1: AluOp = AluOp.BYPASS
    reduce_dims: int = 0
    imm: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    waits: list[tuple[int, int]] = field(default_factory=list)
    signal: int = NO_SIGNAL
    loc: int = 0


_OPERAND_COLUMNS = ("memory", "dtype", "ndim", "partition_start", "partition_count", "tensor",
                    "offset", "partition_stride", "strides", "sizes")


def _operand_columns(ops: list[Operand | None]) -> dict[str, tuple]:
    """The OPERAND_DTYPE fields of one operand slot of a stream, one sequence per field."""
    zeros, ones = (0,) * MAX_FREE_DIMS, (1,) * MAX_FREE_DIMS
    # (only `memory` says an operand is absent; every other field stays zero)
    absent = (Memory.NONE, 0, 0, 0, 0, 0, 0, 0, zeros, zeros)
    rows = []
    # A writer may hand the same Operand object to many instructions: one row for it.
    row_of: dict[int, tuple] = {id(None): absent}
    for op in ops:
        row = row_of.get(id(op))
        if row is None:
            ndim = len(op.sizes)
            if ndim > MAX_FREE_DIMS or len(op.strides) != ndim:
                raise IsaError(f"operand {op.describe()}: at most {MAX_FREE_DIMS} free dims, "
                               "one stride per size")
            pad = MAX_FREE_DIMS - ndim
            row = row_of[id(op)] = (
                op.memory, op.dtype, ndim, op.partition_start, op.partition_count, op.tensor,
                op.offset, op.partition_stride, tuple(op.strides) + zeros[:pad],
                tuple(op.sizes) + ones[:pad])
        rows.append(row)
    return dict(zip(_OPERAND_COLUMNS, zip(*rows)))


def encode(instructions: list[Instruction]) -> bytes:
    """Fixed-width records of one stream. (Filled a field at a time over all records: a
    value out of its field's range raises OverflowError, as a record at a time would.)"""
    n = len(instructions)
    arr = np.zeros(n, dtype=INSTRUCTION_DTYPE)
    if not n:
        return arr.tobytes()
    wait_sem = [[0] * MAX_WAITS for _ in range(n)]
    wait_value = [[0] * MAX_WAITS for _ in range(n)]
    for i, ins in enumerate(instructions):
        if len(ins.waits) > MAX_WAITS:
            raise IsaError(f"{ins.opcode.label}: at most {MAX_WAITS} semaphore waits")
        for j, (sem, value) in enumerate(ins.waits):
            wait_sem[i][j] = sem
            wait_value[i][j] = value
    for name in ("opcode", "engine", "queue", "flags", "func", "alu0", "alu1", "reduce_dims",
                 "signal", "imm", "loc"):
        arr[name] = [getattr(ins, name) for ins in instructions]
    arr["nwaits"] = [len(ins.waits) for ins in instructions]
    arr["wait_sem"] = wait_sem
    arr["wait_value"] = wait_value
    # Operands: each distinct one filled into a table once (a writer hands equal operands to
    # many instructions as one object, and a field at a time costs per value), then gathered
    # into every slot that holds it.
    flat = [op for ins in instructions for op in ins.operands]
    if len(flat) != n * NUM_OPERANDS:
        raise IsaError(f"an instruction has {NUM_OPERANDS} operand slots")
    first = {id(op): op for op in flat}        # (flat keeps every object, and so its id, alive)
    row = {key: k for k, key in enumerate(first)}
    table = np.zeros(len(first), dtype=OPERAND_DTYPE)
    for name, column in _operand_columns(list(first.values())).items():
        table[name] = column
    arr["operands"] = table[np.array([row[id(op)] for op in flat], dtype=np.intp)
                            .reshape(n, NUM_OPERANDS)]
    return arr.tobytes()


def decode_records(data: bytes) -> np.ndarray:
    """The structured array of a stream's records (validation is the reader's job)."""
    if len(data) % RECORD_SIZE:
        raise IsaError(f"stream of {len(data)} bytes is not a whole number of "
                       f"{RECORD_SIZE}-byte records")
    return np.frombuffer(data, dtype=INSTRUCTION_DTYPE)


def decode_operand(rec: np.void) -> Operand | None:
    memory = Memory(int(rec["memory"]))
    if memory == Memory.NONE:
        return None
    ndim = int(rec["ndim"])
    return Operand(
        memory=memory,
        dtype=DType(int(rec["dtype"])),
        partition_count=int(rec["partition_count"]),
        sizes=tuple(int(x) for x in rec["sizes"][:ndim]),
        strides=tuple(int(x) for x in rec["strides"][:ndim]),
        offset=int(rec["offset"]),
        partition_start=int(rec["partition_start"]),
        partition_stride=int(rec["partition_stride"]),
        tensor=int(rec["tensor"]),
    )


def decode_instruction(rec: np.void) -> Instruction:
    """One record as an `Instruction`; raises `IsaError` for a value outside the enums."""
    try:
        opcode = Opcode(int(rec["opcode"]))
        engine = Engine(int(rec["engine"]))
        func = ActFunc(int(rec["func"]))
        alu0 = AluOp(int(rec["alu0"]))
        alu1 = AluOp(int(rec["alu1"]))
        operands = []
        for j in range(NUM_OPERANDS):
            o = rec["operands"][j]
            memory = int(o["memory"])
            if memory != Memory.NONE:
                DType(int(o["dtype"]))
                if int(o["ndim"]) > MAX_FREE_DIMS:
                    raise IsaError(f"operand {j} has {int(o['ndim'])} free dims "
                                   f"(at most {MAX_FREE_DIMS})")
            Memory(memory)
            operands.append(decode_operand(o))
    except ValueError as exc:
        raise IsaError(str(exc)) from None
    nwaits = int(rec["nwaits"])
    if nwaits > MAX_WAITS:
        raise IsaError(f"{nwaits} semaphore waits (at most {MAX_WAITS})")
    return Instruction(
        opcode=opcode, engine=engine, operands=operands, queue=int(rec["queue"]),
        flags=int(rec["flags"]), func=func, alu0=alu0, alu1=alu1,
        reduce_dims=int(rec["reduce_dims"]),
        imm=tuple(float(x) for x in rec["imm"]),
        waits=[(int(rec["wait_sem"][j]), int(rec["wait_value"][j])) for j in range(nwaits)],
        signal=int(rec["signal"]), loc=int(rec["loc"]),
    )
