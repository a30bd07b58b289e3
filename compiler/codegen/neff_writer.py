"""Emit a NEFF from a scheduled `nisa` function: one instruction stream per engine/queue,
the tensor table (inputs, outputs, constants, scratch) and the debug-location table."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
from torch_mlir import ir

import torchneuron
from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.transforms.schedule import stream_names
from torchneuron.dialects.common import access_patterns, memo, memref_info
from torchneuron.dialects.nisa import (
    INSTRUCTION_OPS, instruction_roles, memory_of, memory_of_type,
)
from torchneuron.format import isa
from torchneuron.format.container import Neff, Stream, TensorDecl, write_neff

_ELEMENT_DTYPES = {
    "f32": isa.DType.F32, "bf16": isa.DType.BF16, "f16": isa.DType.F16,
    "f8E4M3FN": isa.DType.F8E4M3, "f8E5M2": isa.DType.F8E5M2,
    "i1": isa.DType.U8, "i8": isa.DType.I8, "ui8": isa.DType.U8, "i16": isa.DType.I16,
    "ui16": isa.DType.U16, "i32": isa.DType.I32, "ui32": isa.DType.U32, "i64": isa.DType.I64,
}


def dtype_of(element_type: ir.Type | str) -> isa.DType:
    """The storage dtype of an element type (or its printed name, as `MemRefInfo` has it)."""
    try:
        return _ELEMENT_DTYPES[str(element_type)]
    except KeyError:
        raise CompileError(f"element type {element_type} has no NeuronCore storage type") from None


def function_to_neff(func: ir.Operation, metadata: dict | None = None) -> Neff:
    for attribute in ("nisa.target", "nisa.num_inputs"):
        if attribute not in func.attributes:
            raise CompileError(f"the function is not a nisa program (no {attribute} attribute): "
                               "a NEFF is written from the isa stage, after convert-trn-to-nisa, "
                               "trn-plan-memory and trn-schedule")
    name = ir.StringAttr(func.attributes["sym_name"]).value
    target = ir.StringAttr(func.attributes["nisa.target"]).value
    num_inputs = U.int_attr(func, "nisa.num_inputs")
    block = U.entry_block(func)
    tensors: list[TensorDecl] = []
    # Per buffer, where it is and its type: an on-chip tile's address, or -1 - the id of a
    # tensor (HBM), apart from addresses. (Looked up per operand: the type comes with it.)
    place_of: dict[ir.Value, tuple[int, ir.Type]] = {}

    def declare(value: ir.Value, kind: str, label: str, **extra) -> None:
        value_type = value.type
        mtype = ir.MemRefType(value_type)
        decl = TensorDecl(len(tensors), label, dtype_of(mtype.element_type),
                          tuple(mtype.shape), kind, **extra)
        tensors.append(decl)
        place_of[value] = (-1 - decl.id, value_type)

    args = list(block.arguments)
    for i, arg in enumerate(args[:num_inputs]):
        declare(arg, "input", f"input{i}")
    for i, arg in enumerate(args[num_inputs:]):
        declare(arg, "output", f"output{i}")

    locations = ["unknown"]
    location_index: dict[str, int] = {}
    index_of_location: dict[ir.Attribute, int] = {}
    per_stream: dict[str, list[isa.Instruction]] = {}
    for op in U.body_ops(func):
        op_name = op.name
        if op_name == "nisa.hbm_constant":
            declare(op.results[0], "constant", f"const{len(tensors)}",
                    data=_constant_bytes(op))
        elif op_name == "nisa.alloc":
            memory = U.str_attr(op, "memory")
            if "address" not in op.attributes:
                raise CompileError("buffer has no address (run trn-plan-memory first)",
                                   op.location)
            if memory == "hbm":
                declare(op.results[0], "scratch", f"scratch{len(tensors)}",
                        scratch_offset=U.int_attr(op, "address"))
            else:
                result = op.results[0]
                place_of[result] = (U.int_attr(op, "address"), result.type)
        elif op_name in INSTRUCTION_OPS:
            # Locations are uniqued attributes: each distinct one is printed once.
            location = op.location
            loc_index = index_of_location.get(location.attr)
            if loc_index is None:
                loc = str(location)
                if loc not in location_index:
                    location_index[loc] = len(locations)
                    locations.append(loc)
                loc_index = index_of_location[location.attr] = location_index[loc]
            ins = _instruction(op, place_of)
            ins.loc = loc_index
            # (the stream as stream_of(op) names it, from what _instruction read)
            stream = f"q{ins.queue}" if ins.engine == isa.Engine.DMA else _STREAMS[ins.engine]
            instructions = per_stream.get(stream)
            if instructions is None:
                instructions = per_stream[stream] = []
            instructions.append(ins)

    num_semaphores = U.int_attr(func, "nisa.num_semaphores") \
        if "nisa.num_semaphores" in func.attributes else 0
    streams = []
    for sname in stream_names(max([0] + [int(s[1:]) + 1 for s in per_stream if s[0] == "q"])):
        if sname not in per_stream:
            continue
        engine = isa.Engine.DMA if sname.startswith("q") else isa.Engine.parse(sname)
        queue = int(sname[1:]) if engine == isa.Engine.DMA else 0
        records = isa.decode_records(isa.encode(per_stream[sname]))
        streams.append(Stream(sname, engine, queue, records))
    scratch = U.int_attr(func, "nisa.scratch_bytes") if "nisa.scratch_bytes" in func.attributes \
        else 0
    meta = {
        "compiler": f"torchneuron {torchneuron.__version__}",
        "sbuf_bytes_per_partition": _opt_int(func, "nisa.sbuf_bytes"),
        "psum_bytes_per_partition": _opt_int(func, "nisa.psum_bytes"),
        **(metadata or {}),
    }
    return Neff(name=name, target=target, tensors=tensors,
                inputs=list(range(num_inputs)),
                outputs=list(range(num_inputs, len(args))),
                streams=streams, num_semaphores=num_semaphores, scratch_bytes=scratch,
                locations=locations, metadata=meta)


def emit_neff(module: ir.Module, metadata: dict | None = None) -> bytes:
    funcs = list(U.functions(module.operation))
    if len(funcs) != 1:
        raise CompileError(f"a NEFF holds one program; the module has {len(funcs)} functions")
    return write_neff(function_to_neff(funcs[0], metadata))


def _opt_int(func: ir.Operation, name: str) -> int:
    return U.int_attr(func, name) if name in func.attributes else 0


def _constant_bytes(op: ir.Operation) -> bytes:
    return constant_array(op).tobytes()


def constant_array(op: ir.Operation) -> np.ndarray:
    """The value of a `nisa.hbm_constant`, C-ordered in its storage dtype."""
    attr = op.attributes["value"]
    mtype = ir.MemRefType(op.results[0].type)
    dtype = dtype_of(mtype.element_type)
    try:
        array = np.array(attr)
    except Exception as exc:   # the bindings' buffer protocol has no bf16 (nor fp8)
        array = _parse_dense(attr, dtype.numpy())
        if array is None:
            raise CompileError(f"cannot read constant of type {mtype}: {exc}",
                               op.location) from None
    if array.size not in (1, np.prod(mtype.shape)):
        raise CompileError(f"constant of type {mtype} holds {array.size} elements", op.location)
    if array.size == 1 and np.prod(mtype.shape) != 1:
        array = np.full(mtype.shape, array.reshape(()))
    return np.ascontiguousarray(array.astype(dtype.numpy()))


_DENSE = re.compile(r'^dense<(.*)> : [^<>]*<[^<>]*>$', re.S)
_HEX_DATA = re.compile(r'^"0x([0-9A-Fa-f]*)"$')
_ELEMENT = re.compile(r'0x[0-9A-Fa-f]+|[-+]?(?:inf|nan|[0-9][0-9.]*(?:[eE][-+]?[0-9]+)?)')


def _parse_dense(attr: ir.Attribute, dtype: np.dtype) -> np.ndarray | None:
    """The values of a dense elements attribute of a float type that the bindings cannot hand
    to numpy, read from its text: `dense<"0x...">` holds the raw little-endian bytes; otherwise
    each element is a decimal (printed so that it round-trips) or a bit pattern `0x7FC0`.
    None when the text has another form (e.g. a resource blob)."""
    match = _DENSE.match(str(attr))
    if match is None:
        return None
    body = match.group(1).strip()
    hexdata = _HEX_DATA.match(body)
    if hexdata:
        return np.frombuffer(bytes.fromhex(hexdata.group(1)), dtype=dtype).copy()
    bits = np.dtype(f"u{np.dtype(dtype).itemsize}")
    values = [np.array(int(tok, 16), dtype=bits).view(dtype) if tok.startswith("0x")
              else np.array(float(tok), dtype=np.float64).astype(dtype)
              for tok in _ELEMENT.findall(body)]
    return np.array(values, dtype=dtype)


_OPCODES = {
    "nisa.dma": isa.Opcode.DMA, "nisa.dma_indirect": isa.Opcode.DMA,
    "nisa.matmul": isa.Opcode.MATMUL,
    "nisa.transpose": isa.Opcode.TRANSPOSE, "nisa.activation": isa.Opcode.ACTIVATE,
    "nisa.tensor_tensor": isa.Opcode.TENSOR_TENSOR,
    "nisa.tensor_scalar": isa.Opcode.TENSOR_SCALAR,
    "nisa.tensor_reduce": isa.Opcode.TENSOR_REDUCE, "nisa.tensor_copy": isa.Opcode.TENSOR_COPY,
    "nisa.memset": isa.Opcode.MEMSET, "nisa.iota": isa.Opcode.IOTA,
    "nisa.select": isa.Opcode.SELECT, "nisa.nop": isa.Opcode.NOP,
    "nisa.tensor_scalar_reduce": isa.Opcode.TENSOR_SCALAR_REDUCE,
}
# Operand slot of each role (isa.py's instruction table).
_SLOTS = {
    "dst": 0, "src": 1, "stationary": 1, "moving": 2, "lhs": 1, "rhs": 2, "bias": 2,
    "scale": 3, "accum": 4, "operand0": 2, "operand1": 3, "mask": 1, "on_true": 2,
    "on_false": 3, "index": 2, "reduce": 3,
}


_ENGINES = {engine.label: engine for engine in isa.Engine}
_STREAMS = {engine: engine.label for engine in isa.Engine if engine != isa.Engine.DMA}


def _instruction(op: ir.Operation, place_of: dict) -> isa.Instruction:
    # (Each read through the bindings costs about a microsecond, and a program has tens of
    # thousands of instructions: the attribute map is fetched once, enums are looked up in
    # dicts, and a `waits` attribute is decoded once per distinct value.)
    name = op.name
    attributes = op.attributes
    engine_label = ir.StringAttr(attributes["engine"]).value
    engine = _ENGINES.get(engine_label) or isa.Engine.parse(engine_label)
    ins = isa.Instruction(opcode=_OPCODES[name], engine=engine)
    if engine == isa.Engine.DMA:
        ins.queue = ir.IntegerAttr(attributes["queue"]).value
    operands = ins.operands
    for role, buffer, ap in zip(instruction_roles(op), op.operands, access_patterns(op)):
        operands[_SLOTS[role]] = _operand(buffer, ap, place_of, op)
    if "waits" in attributes:
        ins.waits = _waits(attributes["waits"])
    if "signal" in attributes:
        ins.signal = ir.IntegerAttr(attributes["signal"]).value
    if name == "nisa.dma_indirect":
        ins.flags |= isa.FLAG_INDIRECT
    elif name == "nisa.matmul":
        if ir.BoolAttr(attributes["accumulate"]).value:
            ins.flags |= isa.FLAG_ACCUMULATE
    elif name == "nisa.activation":
        ins.func = isa.ActFunc.parse(U.str_attr(op, "func"))
        ins.imm = (U.float_attr(op, "scale"), 0.0, 0.0, 0.0)
    elif name in ("nisa.tensor_tensor", "nisa.tensor_reduce"):
        ins.alu0 = isa.AluOp.parse(U.str_attr(op, "op"))
        if name == "nisa.tensor_reduce":
            ins.reduce_dims = U.int_attr(op, "reduce_dims")
    elif name == "nisa.tensor_scalar":
        ins.alu0 = isa.AluOp.parse(U.str_attr(op, "op0"))
        ins.alu1 = isa.AluOp.parse(U.str_attr(op, "op1"))
        ins.imm = (U.float_attr(op, "imm0"), U.float_attr(op, "imm1"), 0.0, 0.0)
        if ir.BoolAttr(op.attributes["reverse0"]).value:
            ins.flags |= isa.FLAG_REVERSE0
        if ir.BoolAttr(op.attributes["reverse1"]).value:
            ins.flags |= isa.FLAG_REVERSE1
    elif name == "nisa.tensor_scalar_reduce":
        ins.alu0 = isa.AluOp.parse(U.str_attr(op, "op0"))
        ins.alu1 = isa.AluOp.parse(U.str_attr(op, "reduce_op"))
        ins.imm = (U.float_attr(op, "imm0"), 0.0, 0.0, 0.0)
        if ir.BoolAttr(op.attributes["reverse0"]).value:
            ins.flags |= isa.FLAG_REVERSE0
        if ir.BoolAttr(op.attributes["negate"]).value:
            ins.flags |= isa.FLAG_NEGATE
    elif name == "nisa.memset":
        ins.imm = (U.float_attr(op, "value"), 0.0, 0.0, 0.0)
    elif name == "nisa.iota":
        ins.imm = (U.float_attr(op, "base"), U.float_attr(op, "partition_step"),
                   U.float_attr(op, "free_step"), 0.0)
    return ins


def _waits(attribute: ir.Attribute) -> list[tuple[int, int]]:
    """A `waits` attribute as (semaphore, value) pairs (remembered per attribute within a
    memref_info_cache block: a program has few distinct ones)."""
    table = memo("neff.waits")
    found = table.get(attribute) if table is not None else None
    if found is None:
        w = list(ir.DenseI64ArrayAttr(attribute))
        found = tuple((w[i], w[i + 1]) for i in range(0, len(w), 2))
        if table is not None:
            table[attribute] = found
    return list(found)


def _operand(buffer: ir.Value, ap: tuple[int, ...], place_of: dict,
             op: ir.Operation) -> isa.Operand:
    """The encoded operand; equal ones are one object (the writer does not change them)."""
    placed = place_of.get(buffer)
    if placed is None:
        what = "HBM operand is not a program tensor" if memory_of(buffer) == "hbm" else \
            "on-chip operand has no address (run trn-plan-memory first)"
        raise CompileError(what, op.location)
    place, buffer_type = placed
    table = memo("neff.operands")
    key = (buffer_type, ap, place)
    if table is not None:
        found = table.get(key)
        if found is not None:
            return found
    memory, dtype, pstride, pcount, sizes, strides, row = _pattern_fields(buffer_type, ap)
    offset = ap[0]
    if memory == "hbm":
        found = isa.Operand(isa.Memory.HBM, dtype, pcount, sizes, strides, offset=offset,
                            partition_stride=pstride, tensor=-1 - place)
    else:
        found = isa.Operand(isa.Memory.SBUF if memory == "sbuf" else isa.Memory.PSUM, dtype,
                            pcount, sizes, strides, offset=place + (offset % row) * dtype.itemsize,
                            partition_start=offset // row)
    if table is not None:
        table[key] = found
    return found


def _pattern_fields(buffer_type: ir.Type, ap: tuple[int, ...]) -> tuple:
    """What an operand's encoding takes from its buffer type and access pattern alone:
    memory, dtype, partition stride and count, free sizes and strides, and the tile row
    length (elements; on chip)."""
    info = memref_info(buffer_type)
    free = ap[3:]
    return (info.memory, dtype_of(info.element), ap[1], ap[2], tuple(free[1::2]),
            tuple(free[0::2]), info.shape[1] if len(info.shape) == 2 else 0)


@dataclasses.dataclass(frozen=True)
class OperandCost:
    """What the cost model reads of an operand (the simulator's Access has the same fields)."""
    memory: isa.Memory
    isa_dtype: isa.DType
    dtype: np.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]      # bytes; the partition axis first
    free_size: int

    @property
    def partitions(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.free_size * self.dtype.itemsize


@dataclasses.dataclass(frozen=True)
class InstructionCost:
    opcode: isa.Opcode
    alu0: isa.AluOp
    ops: tuple


def cost_view(op: ir.Operation) -> InstructionCost:
    """An instruction op as the cost model sees it (see torchneuron/cost_model.py)."""
    return instruction_cost(op.name, cost_alu_attribute(op), instruction_roles(op),
                            [v.type for v in op.operands], access_patterns(op))


def instruction_cost(name: str, alu: ir.Attribute | None, roles: list[str],
                     types: list[ir.Type], aps: tuple[tuple[int, ...], ...]) -> InstructionCost:
    """cost_view from what a pass has already read of the op: its name, ALU attribute
    (cost_alu_attribute), operand roles, buffer types and access patterns."""
    ops: list = [None] * isa.NUM_OPERANDS
    for role, buffer_type, ap in zip(roles, types, aps):
        ops[_SLOTS[role]] = _operand_cost(buffer_type, ap)
    return InstructionCost(_OPCODES[name],
                           isa.AluOp.parse(ir.StringAttr(alu).value if alu else "bypass"),
                           tuple(ops))


_MEMORIES = {memory.label: memory for memory in isa.Memory}


def _operand_cost(buffer_type: ir.Type, ap: tuple[int, ...]) -> OperandCost:
    """An operand as the cost model sees it: depends on the buffer type and pattern alone,
    so remembered per pair within a memref_info_cache block (a frozen dataclass takes
    microseconds to build, and a pattern recurs over many instructions)."""
    table = memo("neff.operand_costs")
    key = (buffer_type, ap)
    found = table.get(key) if table is not None else None
    if found is not None:
        return found
    info = memref_info(buffer_type)
    dtype = dtype_of(info.element)
    itemsize = dtype.itemsize
    memory = _MEMORIES[memory_of_type(buffer_type)]
    sizes = tuple(ap[4::2])
    free_size = 1
    for n in sizes:
        free_size *= n
    pstride = ap[1] * itemsize if memory == isa.Memory.HBM else info.shape[1] * itemsize
    found = OperandCost(memory, dtype, dtype.numpy(), (ap[2], *sizes),
                        (pstride, *(s * itemsize for s in ap[3::2])), free_size)
    if table is not None:
        table[key] = found
    return found


def cost_alu_attribute(op: ir.Operation):
    """The ALU attribute the cost model reads: "op", else the first stage "op0", else None (bypass).
    Schedulers key their cost memo on it, so both must take it from here."""
    attributes = op.attributes
    if "op" in attributes:
        return attributes["op"]
    if "op0" in attributes:
        return attributes["op0"]
    return None
