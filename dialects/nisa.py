"""The `nisa` dialect: one op per NeuronCore instruction, on explicit buffers.

Buffers are memrefs whose memory space names the memory: `memref<128x512xbf16, "sbuf">`.
On-chip buffers (sbuf, psum) are 2-D `[partitions, free elements]` tiles created by
`nisa.alloc` (which `trn-plan-memory` gives an `address`); HBM buffers are function arguments
(program inputs and outputs), `nisa.alloc {memory = "hbm"}` scratch, or `nisa.hbm_constant`.

Every instruction op takes its buffers as operands, in the order of its roles, and an `aps`
array with one access pattern per operand. An access pattern is
`array<i64: offset, partition_stride, partitions, stride0, size0, ...>` in elements of the
buffer's row-major logical array: the first (stride, size) pair is the partition axis, the rest
(at most four) are free axes. On chip, the partition stride must be one row of the tile and
strides are non-negative; in HBM strides may be negative (a flipped view).

Every instruction names its `engine` (pe, act, dve, pool, sp, dma); DMAs also name a `queue`.
`trn-schedule` adds `waits = array<i64: sem, value, ...>` and `signal = sem : i64`.
"""


import math
from typing import Optional

from torch_mlir import ir
from torch_mlir.dialects import ext

from torchneuron.dialects.common import (
    AnyAttr, VerifyError, access_patterns, attr, float_value, i64_array, int_value, memo,
    memref_info, require, string, verifier,
)
from torchneuron.dialects.trn import ACTIVATION_FUNCS, ALU_OPS, REDUCE_OPS

MEMORIES = ("hbm", "sbuf", "psum")
# tensor_scalar_reduce's op0 (NKI's nki.isa.tensor_scalar_reduce): arithmetic only; it
# reduces with any of REDUCE_OPS.
ARITHMETIC_OPS = ("add", "sub", "mul", "div", "max", "min", "pow", "mod")
ENGINES = ("pe", "act", "dve", "pool", "sp", "dma")
MAX_FREE_DIMS = 4


class Nisa(ext.Dialect, name="nisa"):
    pass


def memory_of(value: ir.Value) -> str:
    """The memory a buffer lives in ('hbm', 'sbuf' or 'psum')."""
    return memory_of_type(value.type)


def memory_of_type(buffer_type: ir.Type) -> str:
    """The memory a buffer of the type lives in ('hbm', 'sbuf' or 'psum')."""
    try:
        name = memref_info(buffer_type).memory
    except ValueError:
        raise VerifyError(f"buffer must be a memref, got {buffer_type}") from None
    if name is None:
        raise VerifyError(f"buffer type {buffer_type} has no memory space")
    if name not in MEMORIES:
        raise VerifyError(f"unknown memory space {name!r} in {buffer_type}")
    return name


def check_access_pattern(ap: list[int], buffer: ir.Value, role: str,
                         dynamic_rows: bool = False) -> None:
    """An access pattern must address elements of its buffer only (see module docstring).
    With `dynamic_rows` (the HBM side of an indirect DMA) the partition axis steps over rows
    an index chooses at run time: only one row's pattern is checked here."""
    _check_pattern(ap, buffer.type, role, dynamic_rows)


def _check_pattern(ap: list[int], buffer_type: ir.Type, role: str, dynamic_rows: bool) -> None:
    """check_access_pattern on a buffer of the type. (Each message is built only when its
    check fails: formatting the pattern costs more than checking it.)"""
    memory = memory_of_type(buffer_type)
    shape = memref_info(buffer_type).shape
    if not (len(ap) >= 3 and len(ap) % 2 == 1):
        raise VerifyError(f"{role} access pattern {ap} must be [offset, pstride, partitions, "
                          "(stride, size)...]")
    offset, dims = ap[0], [(ap[i], ap[i + 1]) for i in range(1, len(ap), 2)]
    if len(dims) - 1 > MAX_FREE_DIMS:
        raise VerifyError(f"{role} access pattern has {len(dims) - 1} free dims (at most "
                          f"{MAX_FREE_DIMS})")
    if not all(size >= 1 for _, size in dims):
        raise VerifyError(f"{role} access pattern {ap} has an empty dim")
    reach = dims[1:] if dynamic_rows else dims
    first = offset + sum(min(0, stride * (size - 1)) for stride, size in reach)
    last = offset + sum(max(0, stride * (size - 1)) for stride, size in reach)
    numel = math.prod(shape)
    if not (0 <= first and last < numel):
        raise VerifyError(f"{role} access pattern {ap} reaches elements {first}..{last} of a "
                          f"{numel}-element buffer")
    if memory != "hbm":
        if not all(stride >= 0 for stride, _ in dims):
            raise VerifyError(f"{role} on-chip access pattern {ap} has a negative stride")
        if len(shape) != 2:
            raise VerifyError(f"{role} on-chip buffer must be 2-D [partitions, free], got "
                              f"{list(shape)}")
        row = shape[1]
        pstride, partitions = dims[0]
        if not (pstride == row or partitions == 1):
            raise VerifyError(f"{role} partition stride {pstride} must be one tile row ({row} "
                              "elements)")
        free_last = offset % row + sum(stride * (size - 1) for stride, size in dims[1:])
        if not free_last < row:
            raise VerifyError(f"{role} free pattern of {ap} runs past the end of a partition")


def _pattern_reach(tail: tuple[int, ...], buffer_type: ir.Type, dynamic_rows: bool
                   ) -> tuple[int, int, int, int, int] | None:
    """What `_check_pattern` checks of a pattern apart from its offset, from the pattern
    without it (`tail`): None when that part alone breaks a rule; else the lowest and highest
    element the pattern reaches relative to its offset, the buffer's element count, its tile
    row (0 in HBM) and the free pattern's extent within a row."""
    memory = memory_of_type(buffer_type)
    shape = memref_info(buffer_type).shape
    if not (len(tail) >= 2 and len(tail) % 2 == 0) or len(tail) // 2 - 1 > MAX_FREE_DIMS:
        return None
    dims = [(tail[i], tail[i + 1]) for i in range(0, len(tail), 2)]
    if not all(size >= 1 for _, size in dims):
        return None
    reach = dims[1:] if dynamic_rows else dims
    low = sum(min(0, stride * (size - 1)) for stride, size in reach)
    high = sum(max(0, stride * (size - 1)) for stride, size in reach)
    if memory == "hbm":
        return low, high, math.prod(shape), 0, 0
    if not all(stride >= 0 for stride, _ in dims) or len(shape) != 2:
        return None
    row = shape[1]
    pstride, partitions = dims[0]
    if not (pstride == row or partitions == 1):
        return None
    return low, high, math.prod(shape), row, sum(stride * (size - 1) for stride, size in dims[1:])


def _check_pattern_remembered(ap: tuple[int, ...], buffer_type: ir.Type, role: str,
                              dynamic_rows: bool, reaches: dict | None) -> None:
    """`_check_pattern`, with what does not depend on the offset remembered in `reaches` per
    buffer type and pattern without its offset: patterns recur with other offsets across
    a program's instructions (tiles of one shape at many addresses). A pattern that breaks
    a rule goes through `_check_pattern` for its message."""
    if reaches is None:
        _check_pattern(list(ap), buffer_type, role, dynamic_rows)
        return
    key = (buffer_type, ap[1:], dynamic_rows)
    found = reaches.get(key, False)
    if found is False:
        found = reaches[key] = _pattern_reach(ap[1:], buffer_type, dynamic_rows)
    if found is not None:
        offset = ap[0]
        low, high, numel, row, free_extent = found
        if 0 <= offset + low and offset + high < numel and (
                not row or offset % row + free_extent < row):
            return
    _check_pattern(list(ap), buffer_type, role, dynamic_rows)
    raise AssertionError(f"{role} access pattern {ap}: _pattern_reach and _check_pattern "
                         "disagree")


# Instruction specs: roles (operand names in order; '?' marks optional), engines allowed, and
# the memories each role may live in. Verified for every instruction op.
_ONCHIP = ("sbuf", "psum")
# GpSimd cannot access PSUM (NKI ISA reference, nki.isa.tensor_copy): ACT or DVE evacuate it.
_POOL_MEMORIES = ("sbuf",)
_SPECS: dict[str, tuple[tuple[str, ...], tuple[str, ...], dict[str, tuple[str, ...]]]] = {
    "nisa.dma": (("dst", "src"), ("dma",), {"dst": ("hbm", "sbuf"), "src": ("hbm", "sbuf")}),
    "nisa.dma_indirect": (("dst", "src", "index"), ("dma",),
                          {"dst": ("hbm", "sbuf"), "src": ("hbm", "sbuf"), "index": ("sbuf",)}),
    "nisa.matmul": (("dst", "stationary", "moving"), ("pe",),
                    {"dst": ("psum",), "stationary": ("sbuf",), "moving": ("sbuf",)}),
    "nisa.transpose": (("dst", "src"), ("pe",), {"dst": ("psum",), "src": ("sbuf",)}),
    "nisa.activation": (("dst", "src", "bias?", "scale?", "accum?"), ("act",), {}),
    "nisa.tensor_tensor": (("dst", "lhs", "rhs"), ("dve", "pool"), {}),
    "nisa.tensor_scalar": (("dst", "src", "operand0?", "operand1?"), ("dve", "pool", "act"), {}),
    "nisa.tensor_reduce": (("dst", "src"), ("dve", "pool"), {}),
    "nisa.tensor_scalar_reduce": (("dst", "src", "reduce", "operand0?"), ("dve",), {}),
    "nisa.tensor_copy": (("dst", "src"), ("act", "dve", "pool"), {}),
    "nisa.memset": (("dst",), ("act", "dve", "pool"), {}),
    "nisa.iota": (("dst",), ("pool",), {}),
    "nisa.select": (("dst", "mask", "on_true", "on_false"), ("dve", "pool"), {}),
    "nisa.nop": ((), ENGINES, {}),
}


# The roles an instruction writes (every other operand is read; an accumulating matmul also
# reads its dst).
WRITTEN_ROLES = ("dst", "accum", "reduce")


def instruction_roles(op) -> list[str]:
    """Role names of the operands `op` actually has, in operand order."""
    roles, _, _ = _SPECS[op.name]
    if not any(r.endswith("?") for r in roles):
        return list(roles)
    segments = op.attributes["operandSegmentSizes"]
    table = memo("nisa.roles")
    if table is not None:
        found = table.get((op.name, segments))
        if found is not None:
            return list(found)
    present = []
    for role, n in zip(roles, ir.DenseI32ArrayAttr(segments)):
        present += [role.rstrip("?")] * n
    if table is not None:
        table[(op.name, segments)] = tuple(present)
    return present


def _check_instruction(op) -> None:
    roles, engines, memories = _SPECS[op.name]
    # (The attribute map is fetched once: each read through the bindings costs about a
    # microsecond, and every instruction of a program is verified at the end of a stage.)
    attributes = op.attributes
    engine = string(op, "engine", attributes)
    if engine not in engines:      # (the message is built only for a failing op)
        raise VerifyError(f"cannot run on engine '{engine}'; allowed: {', '.join(engines)}")
    # What the operands and their access patterns must satisfy depends on the op's name,
    # engine, operand segments, patterns and buffer types alone: checked once per such key
    # within a compilation (dialects/common.memo), for each instruction outside one.
    table = memo("nisa.operands")
    if table is not None:
        key = (op.name, engine,
               attributes["operandSegmentSizes"] if "operandSegmentSizes" in attributes
               else None,
               attributes["aps"] if "aps" in attributes else None,
               tuple([v.type for v in op.operands]))
        found = table.get(key)
        if found is None:
            try:
                _check_operands(op, engine, memories)
                found = ""
            except VerifyError as exc:
                found = str(exc)
            table[key] = found
        if found:
            raise VerifyError(found)
    else:
        _check_operands(op, engine, memories)
    if engine == "dma":
        int_value(op, "queue", attributes)
    if "waits" in attributes:
        _check_waits(op, attributes)
    if "signal" in attributes:
        require(int_value(op, "signal", attributes) >= 0,
                "attribute 'signal' must be a semaphore index")


def _check_waits(op, attributes) -> None:
    """`waits` holds (semaphore, value) pairs (checked once per distinct attribute within a
    compilation: a program has few)."""
    table = memo("nisa.waits")
    if table is not None and attributes["waits"] in table:
        return
    waits = i64_array(op, "waits", attributes)
    require(len(waits) % 2 == 0 and all(w >= 0 for w in waits),
            "attribute 'waits' must hold (semaphore, value) pairs")
    if table is not None:
        table[attributes["waits"]] = True


def _check_operands(op, engine: str, memories: dict) -> None:
    present = instruction_roles(op)
    attr(op, "aps")
    try:
        aps = access_patterns(op)
    except (ValueError, TypeError):
        raise VerifyError("attribute 'aps' must be an array of array<i64: ...>") from None
    if len(aps) != len(present):
        raise VerifyError(f"has {len(present)} buffer operands but {len(aps)} access patterns")
    reaches = memo("nisa.pattern_reaches")
    for role, value, ap in zip(present, op.operands, aps):
        value_type = value.type
        memory = memory_of_type(value_type)
        allowed = memories.get(role, MEMORIES if engine == "dma" else
                               _POOL_MEMORIES if engine == "pool" else _ONCHIP)
        if memory not in allowed:
            raise VerifyError(f"{role} is in {memory}; {engine} may use {role} only in "
                              f"{', '.join(allowed)}")
        _check_pattern_remembered(ap, value_type, role,
                                  op.name == "nisa.dma_indirect" and memory == "hbm", reaches)


def _instruction_verifier(extra=None):
    def check(op):
        _check_instruction(op)
        if extra:
            extra(op)
    return verifier(check)


def _check_alloc(op) -> None:
    attributes = op.attributes      # (fetched once, as for instructions)
    memory = string(op, "memory", attributes)
    require(memory in MEMORIES, f"unknown memory '{memory}'")
    result_type = op.results[0].type
    # (Messages are built only for a failing op: printing a type takes microseconds.)
    if memory_of_type(result_type) != memory:
        raise VerifyError(f"result type {result_type} is not in memory '{memory}'")
    shape = memref_info(result_type).shape
    if memory != "hbm" and len(shape) != 2:
        raise VerifyError(f"on-chip tiles are 2-D [partitions, free], got {list(shape)}")
    if "address" in attributes:
        require(int_value(op, "address", attributes) >= 0, "address must be non-negative")
    if "reuse_group" in attributes:
        require(int_value(op, "reuse_group", attributes) >= 0,
                "reuse_group must be non-negative")
    if "co_run" in attributes:
        require(memory != "hbm", "co_run is for on-chip tiles")
        require(int_value(op, "co_run", attributes) >= 0, "co_run must be non-negative")
        require("co_run_role" in attributes and
                string(op, "co_run_role", attributes) in ("primary", "partner"),
                "co_run needs a co_run_role of 'primary' or 'partner'")


class AllocOp(Nisa.Operation, name="alloc"):
    """A buffer in `memory`; trn-plan-memory assigns its byte `address` (reusing first the
    bytes of buffers with the same optional `reuse_group`, a row-wise kernel's; with
    `co_run` and `co_run_role`, inside its role's part of the memory while the pair runs)."""
    memory: ir.StringAttr
    result: ext.Result[ir.MemRefType]
    verify_invariants = verifier(_check_alloc)


def _check_hbm_constant(op) -> None:
    require(memory_of(op.results[0]) == "hbm", "constants live in hbm")
    value = attr(op, "value")
    require(isinstance(value, ir.DenseElementsAttr),
            "attribute 'value' must be dense elements")
    t = ir.ShapedType(ir.DenseElementsAttr(value).type)
    mt = ir.MemRefType(op.results[0].type)
    require(list(t.shape) == list(mt.shape) and t.element_type == mt.element_type,
            f"value type {t} does not match buffer type {mt}")


class HbmConstantOp(Nisa.Operation, name="hbm_constant"):
    """A constant tensor stored in the program binary and placed in HBM at load time."""
    value: AnyAttr
    result: ext.Result[ir.MemRefType]
    verify_invariants = verifier(_check_hbm_constant)


Buffer = ext.Operand[ir.MemRefType]


class DmaOp(Nisa.Operation, name="dma"):
    """Copy between HBM and SBUF on a DMA queue, converting dtype."""
    dst: Buffer
    src: Buffer
    engine: ir.StringAttr
    aps: ir.ArrayAttr
    verify_invariants = _instruction_verifier()


def _check_dma_indirect(op) -> None:
    memories = [memory_of(v) for v in op.operands[:2]]
    require(memories.count("hbm") == 1, "exactly one of dst and src must be in hbm (the rows "
            "the index chooses)")
    index_type = ir.MemRefType(op.operands[2].type).element_type
    require(isinstance(index_type, ir.IntegerType), f"index must be integers, not {index_type}")


class DmaIndirectOp(Nisa.Operation, name="dma_indirect"):
    """DMA whose HBM side takes, for partition p, the row `index[p]` (gather or scatter)."""
    dst: Buffer
    src: Buffer
    index: Buffer
    engine: ir.StringAttr
    aps: ir.ArrayAttr
    verify_invariants = _instruction_verifier(_check_dma_indirect)


def _check_matmul(op) -> None:
    int_value(op, "accumulate")


class MatmulOp(Nisa.Operation, name="matmul"):
    """PE: dst[M, N] (+)= stationary[K, M]^T @ moving[K, N], fp32 in one PSUM bank."""
    dst: Buffer
    stationary: Buffer
    moving: Buffer
    engine: ir.StringAttr
    aps: ir.ArrayAttr
    accumulate: ir.IntegerAttr
    verify_invariants = _instruction_verifier(_check_matmul)


class TransposeOp(Nisa.Operation, name="transpose"):
    """PE: dst[F, P] = src[P, F] (identity matmul into PSUM)."""
    dst: Buffer
    src: Buffer
    engine: ir.StringAttr
    aps: ir.ArrayAttr
    verify_invariants = _instruction_verifier()


def _check_activation(op) -> None:
    func = string(op, "func")
    require(func in ACTIVATION_FUNCS, f"unknown activation function '{func}'")
    float_value(op, "scale")


class ActivationOp(Nisa.Operation, name="activation"):
    """ACT: dst = func(src * scale + bias); optional per-partition bias/scale, sum into accum."""
    dst: Buffer
    src: Buffer
    engine: ir.StringAttr
    aps: ir.ArrayAttr
    func: ir.StringAttr
    scale: ir.FloatAttr
    bias: Optional[Buffer] = None
    scale_vector: Optional[Buffer] = None
    accum: Optional[Buffer] = None
    verify_invariants = _instruction_verifier(_check_activation)


def _check_tensor_tensor(op) -> None:
    require(string(op, "op") in ALU_OPS, f"unknown ALU operation '{string(op, 'op')}'")
    _at_most_one_psum_input(op)


def _at_most_one_psum_input(op) -> None:
    """An engine reads at most one operand from PSUM (TARGET.md: tensor_tensor's two inputs
    may not both be in PSUM; the same for select's). Operand 0 is the destination."""
    inputs = [v for v in list(op.operands)[1:] if memory_of(v) == "psum"]
    require(len(inputs) <= 1, "reads two operands from PSUM (an engine reads at most one; "
            "stage one in SBUF)")


class TensorTensorOp(Nisa.Operation, name="tensor_tensor"):
    """DVE/POOL: dst = lhs <op> rhs."""
    dst: Buffer
    lhs: Buffer
    rhs: Buffer
    engine: ir.StringAttr
    aps: ir.ArrayAttr
    op: ir.StringAttr
    verify_invariants = _instruction_verifier(_check_tensor_tensor)


def _check_tensor_scalar(op) -> None:
    for name in ("op0", "op1"):
        alu = string(op, name)
        require(alu in ALU_OPS or alu == "bypass", f"unknown ALU operation '{alu}'")
    float_value(op, "imm0")
    float_value(op, "imm1")
    int_value(op, "reverse0")
    int_value(op, "reverse1")


class TensorScalarOp(Nisa.Operation, name="tensor_scalar"):
    """dst = (src <op0> s0) <op1> s1 with immediates or per-partition operands."""
    dst: Buffer
    src: Buffer
    engine: ir.StringAttr
    aps: ir.ArrayAttr
    op0: ir.StringAttr
    imm0: ir.FloatAttr
    op1: ir.StringAttr
    imm1: ir.FloatAttr
    reverse0: ir.IntegerAttr
    reverse1: ir.IntegerAttr
    operand0: Optional[Buffer] = None
    operand1: Optional[Buffer] = None
    verify_invariants = _instruction_verifier(_check_tensor_scalar)


def _check_tensor_reduce(op) -> None:
    require(string(op, "op") in REDUCE_OPS, f"unknown reduction '{string(op, 'op')}'")
    require(1 <= int_value(op, "reduce_dims") <= MAX_FREE_DIMS,
            f"reduce_dims must be 1..{MAX_FREE_DIMS}")


class TensorReduceOp(Nisa.Operation, name="tensor_reduce"):
    """DVE/POOL: dst = reduction of src's innermost `reduce_dims` free axes with `op`."""
    dst: Buffer
    src: Buffer
    engine: ir.StringAttr
    aps: ir.ArrayAttr
    op: ir.StringAttr
    reduce_dims: ir.IntegerAttr
    verify_invariants = _instruction_verifier(_check_tensor_reduce)


def _check_tensor_scalar_reduce(op) -> None:
    require(string(op, "op0") in ARITHMETIC_OPS,
            f"tensor_scalar_reduce's op0 must be arithmetic, not '{string(op, 'op0')}'")
    require(string(op, "reduce_op") in REDUCE_OPS,
            f"tensor_scalar_reduce reduces with {'/'.join(REDUCE_OPS)}, not "
            f"'{string(op, 'reduce_op')}'")
    float_value(op, "imm0")
    int_value(op, "reverse0")
    int_value(op, "negate")


class TensorScalarReduceOp(Nisa.Operation, name="tensor_scalar_reduce"):
    """DVE: dst = src <op0> s0 (an immediate or per-partition operand0), and `reduce` [P, 1]
    receives the reduction of dst with `reduce_op`, negated when `negate` is set."""
    dst: Buffer
    src: Buffer
    reduce: Buffer
    engine: ir.StringAttr
    aps: ir.ArrayAttr
    op0: ir.StringAttr
    imm0: ir.FloatAttr
    reverse0: ir.IntegerAttr
    reduce_op: ir.StringAttr
    negate: ir.IntegerAttr
    operand0: Optional[Buffer] = None
    verify_invariants = _instruction_verifier(_check_tensor_scalar_reduce)


class TensorCopyOp(Nisa.Operation, name="tensor_copy"):
    """ACT/DVE/POOL: dst = src, converting dtype."""
    dst: Buffer
    src: Buffer
    engine: ir.StringAttr
    aps: ir.ArrayAttr
    verify_invariants = _instruction_verifier()


def _check_memset(op) -> None:
    float_value(op, "value")


class MemsetOp(Nisa.Operation, name="memset"):
    """dst = value."""
    dst: Buffer
    engine: ir.StringAttr
    aps: ir.ArrayAttr
    value: ir.FloatAttr
    verify_invariants = _instruction_verifier(_check_memset)


def _check_iota(op) -> None:
    for name in ("base", "partition_step", "free_step"):
        float_value(op, name)


class IotaOp(Nisa.Operation, name="iota"):
    """POOL: dst[p, i] = base + partition_step * p + free_step * i."""
    dst: Buffer
    engine: ir.StringAttr
    aps: ir.ArrayAttr
    base: ir.FloatAttr
    partition_step: ir.FloatAttr
    free_step: ir.FloatAttr
    verify_invariants = _instruction_verifier(_check_iota)


class SelectOp(Nisa.Operation, name="select"):
    """DVE/POOL: dst = on_true where mask != 0 else on_false."""
    dst: Buffer
    mask: Buffer
    on_true: Buffer
    on_false: Buffer
    engine: ir.StringAttr
    aps: ir.ArrayAttr
    verify_invariants = _instruction_verifier(_at_most_one_psum_input)


class NopOp(Nisa.Operation, name="nop"):
    """Waits on semaphores and/or signals one; does nothing else."""
    engine: ir.StringAttr
    aps: ir.ArrayAttr
    verify_invariants = _instruction_verifier()


INSTRUCTION_OPS = tuple(_SPECS)
