"""The rules of TARGET.md that every instruction must obey, checked once per program.

Operands are static, so every rule except "no read of never-written memory" (checked while
running, see `sim/memory.py`) is checked when a program is prepared, before anything runs: a
program that breaks one fails with `ConstraintError` (or its subclass `OutOfBoundsError`)
naming the instruction, the operand and the rule, and never runs by luck.

Rules (figures from the `Target`, never literals):
- opcode on an engine of `isa.OPCODE_ENGINES`; the operand slots the opcode uses are present,
  the others empty;
- compute engines (PE/ACT/DVE/POOL/SP) touch only SBUF and PSUM, POOL only SBUF (GpSimd
  cannot access PSUM); DMA only HBM and SBUF;
- an on-chip operand lies within the partitions (start + count <= num_partitions) and within
  the bytes of a partition (else "sbuf overflow" / "psum overflow"), and names at most as many
  elements per partition as a partition holds (a stride-0 pattern cannot make an instruction
  of millions of elements out of one byte); an HBM operand has its tensor's dtype and lies
  within the tensor's elements;
- start partition of a compute engine's on-chip operand: 0 if it uses more than half the
  partitions, 0 or half if more than a quarter, a multiple of a quarter otherwise
  (0/64, 0/32/64/96 for 128 partitions);
- matmul: stationary [K, M] and moving [K, N] in SBUF on the same partitions (partition p
  feeds PE row p), K <= pe_rows, M <= pe_cols,
  N <= matmul_max_moving, float inputs with fp32 only paired with fp32, dst fp32 [M, N] in
  PSUM within one bank; PE transpose: src [P, F] in SBUF, P <= pe_rows, F <= pe_cols,
  dst [F, P] in PSUM within one bank, fp32 or the src dtype;
- elementwise operands agree in partition count and free element count; per-partition
  scalars are [P, 1];
- tensor_tensor (and select) may not read two operands from PSUM;
- a destination names each element once (a write pattern that overlaps itself has no defined
  result on the chip). An HBM destination that interleaves more than MAX_CHECKED_ELEMENTS
  elements in a pattern too irregular to prove distinct is rejected as unverifiable.

Every size, stride and offset is checked with Python integers before numpy sees it, so no
operand, however absurd its fields, makes numpy allocate or address memory it should not.

The checks take the instruction being checked (`sim.program.Instr`) as `ins`; `ins.error`
builds the error that names it.
"""

from __future__ import annotations

import functools

import numpy as np

from torchneuron.format import isa
from torchneuron.sim.errors import OutOfBoundsError
from torchneuron.sim.memory import NUMPY_DTYPES, Access, HbmLayout, host_row_bytes
from torchneuron.target import Target

Op = isa.Opcode

# Operand slots per opcode: (roles of slots 0.., required slots). Slots beyond the roles
# must be empty; slots not required are optional.
OPERAND_ROLES: dict[isa.Opcode, tuple[tuple[str, ...], tuple[int, ...]]] = {
    Op.NOP: ((), ()),
    Op.DMA: (("dst", "src", "index"), (0, 1)),
    Op.MATMUL: (("dst", "stationary", "moving"), (0, 1, 2)),
    Op.TRANSPOSE: (("dst", "src"), (0, 1)),
    Op.ACTIVATE: (("dst", "src", "bias", "scale", "accum"), (0, 1)),
    Op.TENSOR_TENSOR: (("dst", "a", "b"), (0, 1, 2)),
    Op.TENSOR_SCALAR: (("dst", "src", "s0", "s1"), (0, 1)),
    Op.TENSOR_REDUCE: (("dst", "src"), (0, 1)),
    Op.TENSOR_COPY: (("dst", "src"), (0, 1)),
    Op.MEMSET: (("dst",), (0,)),
    Op.IOTA: (("dst",), (0,)),
    Op.SELECT: (("dst", "mask", "a", "b"), (0, 1, 2, 3)),
    Op.TENSOR_SCALAR_REDUCE: (("dst", "src", "s0", "reduce"), (0, 1, 3)),
}

# Slots an opcode writes; every other slot is read (MATMUL also reads dst when accumulating).
WRITE_SLOTS: dict[isa.Opcode, tuple[int, ...]] = {op: (0,) for op in isa.Opcode}
WRITE_SLOTS[Op.NOP] = ()
WRITE_SLOTS[Op.ACTIVATE] = (0, 4)
WRITE_SLOTS[Op.TENSOR_SCALAR_REDUCE] = (0, 3)

REDUCE_OPS = (isa.AluOp.ADD, isa.AluOp.MUL, isa.AluOp.MAX, isa.AluOp.MIN, isa.AluOp.AND,
              isa.AluOp.OR, isa.AluOp.XOR)
PE_INPUT_DTYPES = (isa.DType.F32, isa.DType.BF16, isa.DType.F16, isa.DType.F8E4M3,
                   isa.DType.F8E5M2)


def pattern_extent(sizes, strides) -> tuple[int, int]:
    """Lowest and highest offset (relative to the pattern's start, in the strides' unit:
    elements or bytes) an access pattern reaches."""
    lo = hi = 0
    for n, s in zip(sizes, strides):
        step = (n - 1) * s
        if step < 0:
            lo += step
        else:
            hi += step
    return lo, hi


# Enum members by value (the enums are contiguous from 0), for fast decoding.
MEMORIES = tuple(isa.Memory)
DTYPES = tuple(isa.DType)
assert all(int(m) == i for i, m in enumerate(MEMORIES)) and \
    all(int(d) == i for i, d in enumerate(DTYPES))


def decode_operand(ins, engine: isa.Engine, slot: int, role: str, fields: tuple,
                   target: Target, tensors: list, layout: HbmLayout,
                   indirect: bool = False) -> Access:
    """Check one operand's placement and bounds, and decode it into an `Access`.

    `fields` are the record's (memory, dtype, partition_start, partition_count, tensor,
    offset, partition_stride, sizes, strides), sizes and strides cut to ndim. For the HBM
    side of an indirect DMA (`indirect`) the rows come from the index at run time: only one
    row's free pattern is checked here, each row's bounds when it is moved.
    """
    memory_id, dtype_id, start, count, tensor_id, offset, pstride, sizes, strides = fields
    memory = MEMORIES[memory_id]
    isa_dtype = DTYPES[dtype_id]
    dtype = NUMPY_DTYPES[isa_dtype]
    isz = dtype.itemsize
    what = f"operand {slot} ({role})"
    if engine == isa.Engine.DMA:
        if memory not in (isa.Memory.HBM, isa.Memory.SBUF):
            raise ins.error(f"{what}: DMA moves data between HBM and SBUF only, not "
                           f"{memory.label}")
    elif memory == isa.Memory.HBM:
        raise ins.error(f"{what}: compute engine {engine.label} touching HBM (only DMA "
                       "queues access HBM; load the data into SBUF first)")
    elif memory == isa.Memory.PSUM and engine == isa.Engine.POOL:
        # NKI ISA reference (nki.isa.tensor_copy, nki.isa.rand_set_state): "GpSimd Engine
        # cannot access PSUM"; ACT or DVE evacuate it.
        raise ins.error(f"{what}: {engine.label} cannot access PSUM (only PE, ACT and DVE "
                       "do; use ACT or DVE for a PSUM operand)")
    if count == 0 or 0 in sizes:
        raise ins.error(f"{what} has no elements (partitions {count}, sizes {list(sizes)})")
    if pstride and memory != isa.Memory.HBM:
        raise ins.error(f"{what}: on-chip operands have partition_stride 0, not {pstride}")
    # The stride of a dimension of size 1 is never used: make it 0, so that an absurd one
    # (e.g. -2**63, which overflows numpy's byte strides) is as harmless as it is meaningless.
    if 1 in sizes:
        strides = tuple(0 if n == 1 else st for n, st in zip(sizes, strides))
    if count == 1 and not indirect:     # an indirect DMA scales its index by pstride
        pstride = 0
    shape = (count, *sizes)
    free_size = 1
    for n in sizes:
        free_size *= n
    dims = ", ".join(f"{n}@{s}" for n, s in zip(sizes, strides))

    if memory == isa.Memory.HBM:
        tensor = tensors[tensor_id]
        if isa_dtype != tensor.dtype:
            raise ins.error(f"{what}: HBM operand of dtype {isa_dtype.label} reads tensor "
                           f"{tensor.name!r} of dtype {tensor.dtype.label}")
        lo, hi = pattern_extent(sizes if indirect else shape,
                                strides if indirect else (pstride, *strides))
        lo += offset
        hi += offset
        rows = "rows[index]" if indirect else f"p{count}"
        text = f"hbm[{tensor.name}]+{offset} {rows}@{pstride} [{dims}] {isa_dtype.label}"
        if lo < 0 or hi >= tensor.num_elements:
            raise ins.error(f"{what} {text} reaches elements [{lo}, {hi}] of tensor "
                           f"{tensor.name!r}, which has {tensor.num_elements}",
                           OutOfBoundsError)
        return Access(slot, role, memory, isa_dtype, dtype, shape, free_size,
                      offset=layout.bases[tensor_id] + offset * isz,
                      strides=(pstride * isz, *(s * isz for s in strides)),
                      tensor=tensor_id, p0=0, p1=0, b0=0, b1=0, text=text)

    label = memory.label
    partition_bytes = (target.sbuf_partition_bytes if memory == isa.Memory.SBUF
                       else target.psum_partition_bytes)
    text = f"{label}[p{start}:{start + count}]+{offset}B [{dims}] {isa_dtype.label}"
    if start + count > target.num_partitions:
        raise ins.error(f"{what} {text}: a tile beyond {target.num_partitions} partitions "
                       f"(partitions {start}..{start + count - 1})", OutOfBoundsError)
    lo, hi = pattern_extent(sizes, strides)
    b0 = offset + lo * isz
    b1 = offset + hi * isz + isz
    if b0 < 0 or b1 > partition_bytes:
        raise ins.error(f"{what} {text}: {label} overflow: bytes [{b0}, {b1}) of each "
                       f"partition, but a partition holds {partition_bytes} bytes",
                       OutOfBoundsError)
    if free_size > partition_bytes // isz:
        raise ins.error(f"{what} {text}: {free_size} elements per partition, more than a "
                       f"{label} partition holds ({partition_bytes // isz} of "
                       f"{isa_dtype.label})")
    if engine != isa.Engine.DMA:
        allowed = target.allowed_start_partitions(count)
        if start not in allowed:
            raise ins.error(f"{what} {text}: bad start partition {start} for {count} "
                           f"partitions (allowed: {', '.join(map(str, allowed))})")
    row_bytes = host_row_bytes(partition_bytes)
    return Access(slot, role, memory, isa_dtype, dtype, shape, free_size,
                  offset=start * row_bytes + offset,
                  strides=(row_bytes, *(s * isz for s in strides)),
                  tensor=0, p0=start, p1=start + count, b0=b0, b1=b1, text=text)


# Irregular (interleaved) write patterns are checked by enumerating their addresses; beyond
# this many elements that costs too much memory and the pattern is rejected instead.
MAX_CHECKED_ELEMENTS = 1 << 22


def writes_each_element_once(a: Access) -> bool | None:
    """Whether no two elements of `a` share an address (None: too large and irregular to
    tell). On chip only the free axes matter: partitions are disjoint and an operand's free
    pattern lies within one partition (checked before)."""
    if a.memory == isa.Memory.HBM:
        return _distinct_addresses(a.shape, a.strides, a.dtype.itemsize)
    return _distinct_addresses(a.shape[1:], a.strides[1:], a.dtype.itemsize)


@functools.lru_cache(maxsize=4096)
def _distinct_addresses(shape: tuple[int, ...], strides: tuple[int, ...],
                        itemsize: int) -> bool | None:
    # Pigeonhole: more elements than fit in the byte range the pattern spans must overlap.
    count = 1
    for n in shape:
        count *= n
    lo, hi = pattern_extent(shape, strides)
    if count * itemsize > hi - lo + itemsize:
        return False
    # Cheap sufficient test: sorted by stride, each dimension steps over everything inside it.
    dims = sorted((abs(st), n) for n, st in zip(shape, strides) if n > 1)
    reach = itemsize
    for stride, n in dims:
        if stride < reach:
            break
        reach += (n - 1) * stride
    else:
        return True
    if count > MAX_CHECKED_ELEMENTS:
        return None
    # Interleaved or overlapping pattern: enumerate the addresses.
    addresses = np.zeros((), dtype=np.int64)
    for n, st in zip(shape, strides):
        addresses = np.add.outer(addresses, np.arange(n, dtype=np.int64) * st)
    addresses = np.sort(addresses, axis=None)
    return bool(np.all(np.diff(addresses) >= itemsize))


def check_opcode(ins, engine: isa.Engine, present: list[bool]) -> None:
    """The opcode runs on this engine and has exactly the operand slots it uses."""
    opcode = ins.opcode
    if engine not in isa.OPCODE_ENGINES[opcode]:
        allowed = ", ".join(e.label for e in isa.OPCODE_ENGINES[opcode])
        raise ins.error(f"{opcode.label} cannot run on {engine.label} (only on {allowed})")
    roles, required = OPERAND_ROLES[opcode]
    for slot, used in enumerate(present):
        if not used and slot in required:
            raise ins.error(f"operand {slot} ({roles[slot]}) is missing")
        if used and slot >= len(roles):
            raise ins.error(f"operand slot {slot} is not used by {opcode.label}")


def check_operands(ins, ops: tuple[Access | None, ...], target: Target) -> None:
    """The opcode-level rules: shapes, dtypes, PE limits, PSUM rules, single writes."""
    opcode = ins.opcode
    for slot in WRITE_SLOTS[opcode]:
        a = ops[slot]
        if a is None:
            continue
        once = writes_each_element_once(a)
        if once is None:
            raise ins.error(f"{a.describe()} interleaves {a.partitions * a.free_size} "
                           "elements in a pattern too irregular to check that it writes "
                           f"each once (at most {MAX_CHECKED_ELEMENTS} are checked); split "
                           "the instruction")
        if not once:
            raise ins.error(f"{a.describe()} writes some element more than once")
    check = _OPCODE_CHECKS.get(opcode)
    if check is not None:
        check(ins, ops, target)


def _same_shape(ins, ref: Access, *others: Access | None) -> None:
    for a in others:
        if a is None:
            continue
        if a.partitions != ref.partitions or a.free_size != ref.free_size:
            raise ins.error(f"{a.describe()} has {a.partitions} partitions x {a.free_size} "
                           f"elements, but {ref.role} has {ref.partitions} x "
                           f"{ref.free_size}")


def _per_partition(ins, ref: Access, *scalars: Access | None) -> None:
    for a in scalars:
        if a is None:
            continue
        if a.partitions != ref.partitions or a.free_size != 1:
            raise ins.error(f"{a.describe()} must be a per-partition scalar "
                           f"[{ref.partitions}, 1], not [{a.partitions}, {a.free_size}]")


def _in_one_psum_bank(ins, dst: Access, target: Target) -> None:
    if dst.memory != isa.Memory.PSUM:
        raise ins.error(f"{dst.describe()}: the PE writes only PSUM")
    bank = target.psum_bank_bytes
    if dst.b0 // bank != (dst.b1 - 1) // bank:
        raise ins.error(f"{dst.describe()} spans bytes [{dst.b0}, {dst.b1}), straddling "
                       f"PSUM banks of {bank} bytes (an accumulation group must lie in "
                       "one bank)")


def _in_sbuf(ins, *accesses: Access) -> None:
    for a in accesses:
        if a.memory != isa.Memory.SBUF:
            raise ins.error(f"{a.describe()}: the PE reads its inputs from SBUF only")


def _check_matmul(ins, ops, target: Target) -> None:
    dst, st, mv = ops[0], ops[1], ops[2]
    _in_sbuf(ins, st, mv)
    for a in (st, mv):
        if a.isa_dtype not in PE_INPUT_DTYPES:
            raise ins.error(f"{a.describe()}: the PE multiplies bf16/fp16/fp8/fp32, not "
                           f"{a.isa_dtype.label}")
    if (st.isa_dtype == isa.DType.F32) != (mv.isa_dtype == isa.DType.F32):
        raise ins.error(f"fp32 matmul inputs pair only with fp32 (stationary "
                       f"{st.isa_dtype.label}, moving {mv.isa_dtype.label})")
    k, m, n = st.partitions, st.free_size, mv.free_size
    if mv.partitions != k:
        raise ins.error(f"stationary has K={k} partitions but moving has {mv.partitions}")
    if mv.p0 != st.p0:
        # Partition p feeds PE row p: the contraction pairs the operands' rows there.
        raise ins.error(f"stationary starts at partition {st.p0} but moving at {mv.p0}: "
                        "both feed the same PE rows")
    if k > target.pe_rows:
        raise ins.error(f"contraction K={k} exceeds the {target.pe_rows} PE rows")
    if m > target.pe_cols:
        raise ins.error(f"stationary free size M={m} exceeds the {target.pe_cols} PE columns")
    if n > target.matmul_max_moving:
        raise ins.error(f"moving free size N={n} exceeds {target.matmul_max_moving} "
                       "(one PSUM bank of fp32)")
    if dst.isa_dtype != isa.DType.F32:
        raise ins.error(f"{dst.describe()}: matmul writes fp32, not {dst.isa_dtype.label}")
    if dst.partitions != m or dst.free_size != n:
        raise ins.error(f"{dst.describe()} is [{dst.partitions}, {dst.free_size}], the "
                       f"product is [M={m}, N={n}]")
    _in_one_psum_bank(ins, dst, target)


def _check_transpose(ins, ops, target: Target) -> None:
    dst, src = ops[0], ops[1]
    _in_sbuf(ins, src)
    p, f = src.partitions, src.free_size
    if p > target.pe_rows or f > target.pe_cols:
        raise ins.error(f"PE transpose of [{p}, {f}] exceeds [{target.pe_rows}, "
                       f"{target.pe_cols}]")
    if dst.isa_dtype not in (isa.DType.F32, src.isa_dtype):
        raise ins.error(f"{dst.describe()}: a PE transpose writes fp32 or the source dtype "
                       f"({src.isa_dtype.label})")
    if dst.partitions != f or dst.free_size != p:
        raise ins.error(f"{dst.describe()} is [{dst.partitions}, {dst.free_size}], the "
                       f"transpose is [{f}, {p}]")
    _in_one_psum_bank(ins, dst, target)


def _check_activate(ins, ops, target) -> None:
    _same_shape(ins, ops[1], ops[0])
    _per_partition(ins, ops[1], ops[2], ops[3], ops[4])


def _two_psum_inputs(ins, inputs) -> None:
    in_psum = [a for a in inputs if a.memory == isa.Memory.PSUM]
    if len(in_psum) > 1:
        raise ins.error(f"both {in_psum[0].role} and {in_psum[1].role} are in PSUM (an "
                       "engine reads at most one operand from PSUM)")


def _check_tensor_tensor(ins, ops, target) -> None:
    _same_shape(ins, ops[1], ops[0], ops[2])
    _two_psum_inputs(ins, ops[1:3])


def _check_tensor_scalar(ins, ops, target) -> None:
    _same_shape(ins, ops[1], ops[0])
    _per_partition(ins, ops[1], ops[2], ops[3])
    if ins.alu1 == isa.AluOp.BYPASS and ops[3] is not None:
        raise ins.error("operand 3 (s1) is given but alu1 is bypass")


# What TENSOR_SCALAR_REDUCE's second op may reduce with (NKI's tensor_scalar_reduce), and
# the arithmetic its first op may be (no bitwise operation, no comparison).
SCALAR_REDUCE_OPS = (isa.AluOp.ADD, isa.AluOp.MUL, isa.AluOp.MAX, isa.AluOp.MIN)
ARITHMETIC_OPS = (isa.AluOp.ADD, isa.AluOp.SUB, isa.AluOp.MUL, isa.AluOp.DIV, isa.AluOp.MAX,
                  isa.AluOp.MIN, isa.AluOp.POW, isa.AluOp.MOD)


def _check_tensor_scalar_reduce(ins, ops, target) -> None:
    _same_shape(ins, ops[1], ops[0])
    _per_partition(ins, ops[1], ops[2], ops[3])
    if ins.alu0 not in ARITHMETIC_OPS:
        raise ins.error(f"tensor_scalar_reduce computes arithmetic, not "
                        f"{isa.AluOp(ins.alu0).label}")
    if ins.alu1 not in SCALAR_REDUCE_OPS:
        raise ins.error(f"tensor_scalar_reduce reduces with "
                        f"{'/'.join(a.label for a in SCALAR_REDUCE_OPS)}, not "
                        f"{isa.AluOp(ins.alu1).label}")


def _check_tensor_reduce(ins, ops, target) -> None:
    dst, src = ops[0], ops[1]
    alu = ins.alu0
    if alu not in REDUCE_OPS:
        raise ins.error(f"cannot reduce with {alu.label} (use one of "
                       f"{', '.join(o.label for o in REDUCE_OPS)})")
    r, ndim = ins.reduce_dims, len(src.shape) - 1
    if not 1 <= r <= ndim:
        raise ins.error(f"reduce_dims={r}, but the source has {ndim} free dims")
    kept = 1
    for n in src.shape[1:1 + ndim - r]:
        kept *= n
    if dst.partitions != src.partitions or dst.free_size != kept:
        raise ins.error(f"{dst.describe()} is [{dst.partitions}, {dst.free_size}], the "
                       f"reduction gives [{src.partitions}, {kept}]")


def _check_copy(ins, ops, target) -> None:
    _same_shape(ins, ops[1], ops[0])


def _check_select(ins, ops, target) -> None:
    _same_shape(ins, ops[0], ops[1], ops[2], ops[3])
    _two_psum_inputs(ins, ops[1:4])


def _check_dma(ins, ops, target) -> None:
    dst, src, index = ops[0], ops[1], ops[2]
    if dst.partitions * dst.free_size != src.partitions * src.free_size:
        raise ins.error(f"DMA copies {src.partitions * src.free_size} elements into "
                       f"{dst.partitions * dst.free_size}")
    indirect = bool(ins.flags & isa.FLAG_INDIRECT)
    if indirect != (index is not None):
        raise ins.error("an indirect DMA needs an index operand (slot 2), and only an "
                       "indirect DMA takes one")
    if not indirect:
        return
    if (dst.memory == isa.Memory.HBM) == (src.memory == isa.Memory.HBM):
        raise ins.error("an indirect DMA moves rows between HBM and SBUF: exactly one of "
                       "dst and src must be in HBM")
    rows = dst if dst.memory == isa.Memory.HBM else src
    other = src if rows is dst else dst
    if index.memory != isa.Memory.SBUF or index.isa_dtype.is_float:
        raise ins.error(f"{index.describe()}: the index must be integers in SBUF")
    if index.partitions != rows.partitions or index.free_size != 1 \
            or other.partitions != rows.partitions or other.free_size != rows.free_size:
        raise ins.error(f"{index.describe()}: an indirect DMA moves one row per partition: "
                       f"index [{index.partitions}, {index.free_size}], rows "
                       f"[{rows.partitions}, {rows.free_size}], SBUF side "
                       f"[{other.partitions}, {other.free_size}]")


_OPCODE_CHECKS = {
    Op.DMA: _check_dma,
    Op.MATMUL: _check_matmul,
    Op.TRANSPOSE: _check_transpose,
    Op.ACTIVATE: _check_activate,
    Op.TENSOR_TENSOR: _check_tensor_tensor,
    Op.TENSOR_SCALAR: _check_tensor_scalar,
    Op.TENSOR_REDUCE: _check_tensor_reduce,
    Op.TENSOR_SCALAR_REDUCE: _check_tensor_scalar_reduce,
    Op.TENSOR_COPY: _check_copy,
    Op.SELECT: _check_select,
}
