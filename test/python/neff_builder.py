"""Build NEFF programs by hand, for tests of the runtime, the simulator and neuron-run.

    b = NeffBuilder("relu", target="trn2")
    x = b.input("x", (128, 64))                       # HBM tensors: ids
    y = b.output("y", (128, 64))
    loaded = b.semaphore()
    b.dma(sbuf(128, [64]), b.view(x), queue=0, signal=loaded)
    b.activate(sbuf(128, [64], offset=256), sbuf(128, [64]), "relu", waits=[(loaded, 1)], ...)
    ...
    neff = b.build()          # a format.Neff; b.to_bytes() gives the file

Operands: `sbuf(partitions, sizes, dtype, start=, offset=, strides=)` and `psum(...)` (byte
offset within each partition; strides in elements, row-major by default);
`hbm(tensor, partitions, sizes, dtype, offset=, partition_stride=, strides=)` (all in
elements); `b.view(tensor)` is a whole HBM tensor as [shape[0], rest...].
Every instruction helper takes `waits=[(sem, value), ...]`, `signal=sem` and `loc="text"`.
"""

from __future__ import annotations

import math

import numpy as np

from torchneuron.format import container, isa
from torchneuron.format.isa import Engine, Instruction, Memory, Opcode, Operand


def dtype_of(d) -> isa.DType:
    return d if isinstance(d, isa.DType) else isa.DType.parse(d)


def row_major(sizes) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(sizes):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _onchip(memory, partitions, sizes, dtype, start, offset, strides) -> Operand:
    sizes = tuple(sizes)
    return Operand(memory=memory, dtype=dtype_of(dtype), partition_count=partitions,
                   sizes=sizes, strides=tuple(strides) if strides is not None
                   else row_major(sizes), offset=offset, partition_start=start)


def sbuf(partitions, sizes, dtype="f32", *, start=0, offset=0, strides=None) -> Operand:
    return _onchip(Memory.SBUF, partitions, sizes, dtype, start, offset, strides)


def psum(partitions, sizes, dtype="f32", *, start=0, offset=0, strides=None) -> Operand:
    return _onchip(Memory.PSUM, partitions, sizes, dtype, start, offset, strides)


def hbm(tensor, partitions, sizes, dtype="f32", *, offset=0, partition_stride=None,
        strides=None) -> Operand:
    sizes = tuple(sizes)
    return Operand(memory=Memory.HBM, dtype=dtype_of(dtype), partition_count=partitions,
                   sizes=sizes, strides=tuple(strides) if strides is not None
                   else row_major(sizes), offset=offset,
                   partition_stride=math.prod(sizes) if partition_stride is None
                   else partition_stride, tensor=tensor)


def _engine(e) -> Engine:
    return e if isinstance(e, Engine) else Engine.parse(e)


class NeffBuilder:
    def __init__(self, name: str = "test", target: str = "trn2"):
        self.name, self.target = name, target
        self.tensors: list[container.TensorDecl] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.locations = ["unknown"]
        self.streams: dict[tuple[Engine, int], list[Instruction]] = {}
        self.num_semaphores = 0
        self.scratch_bytes = 0

    # -- tensors and semaphores ------------------------------------------------------------
    def _tensor(self, name, shape, dtype, kind, **extra) -> int:
        tid = len(self.tensors)
        self.tensors.append(container.TensorDecl(tid, name, dtype_of(dtype), tuple(shape),
                                                 kind, **extra))
        return tid

    def input(self, name, shape, dtype="f32") -> int:
        tid = self._tensor(name, shape, dtype, "input")
        self.inputs.append(tid)
        return tid

    def output(self, name, shape, dtype="f32") -> int:
        tid = self._tensor(name, shape, dtype, "output")
        self.outputs.append(tid)
        return tid

    def constant(self, name, array: np.ndarray, dtype="f32") -> int:
        dt = dtype_of(dtype)
        data = np.ascontiguousarray(array, dtype=dt.numpy()).tobytes()
        return self._tensor(name, np.shape(array), dt, "constant", data=data)

    def scratch(self, name, shape, dtype="f32", offset: int | None = None) -> int:
        dt = dtype_of(dtype)
        nbytes = math.prod(shape) * dt.itemsize
        if offset is None:
            offset = -(-self.scratch_bytes // 64) * 64
        self.scratch_bytes = max(self.scratch_bytes, offset + nbytes)
        return self._tensor(name, shape, dt, "scratch", scratch_offset=offset)

    def semaphore(self) -> int:
        self.num_semaphores += 1
        return self.num_semaphores - 1

    def view(self, tensor: int) -> Operand:
        """A whole HBM tensor as [shape[0], shape[1:]...] (a 1-D tensor as [1, n])."""
        t = self.tensors[tensor]
        shape = t.shape if len(t.shape) >= 2 else (1, *t.shape)
        return hbm(tensor, shape[0], shape[1:] or (1,), t.dtype)

    # -- instructions ----------------------------------------------------------------------
    def add(self, ins: Instruction) -> Instruction:
        queue = ins.queue if ins.engine == Engine.DMA else 0
        self.streams.setdefault((ins.engine, queue), []).append(ins)
        return ins

    def _ins(self, opcode, engine, operands, *, waits=(), signal=isa.NO_SIGNAL, loc=None,
             queue=0, **fields) -> Instruction:
        ops = list(operands) + [None] * (isa.NUM_OPERANDS - len(operands))
        if loc is None:
            loc_id = 0
        else:
            if loc not in self.locations:
                self.locations.append(loc)
            loc_id = self.locations.index(loc)
        return self.add(Instruction(opcode=opcode, engine=_engine(engine), operands=ops,
                                    queue=queue, waits=list(waits), signal=signal,
                                    loc=loc_id, **fields))

    def nop(self, engine="sp", queue=0, **sync) -> Instruction:
        return self._ins(Opcode.NOP, engine, [], queue=queue, **sync)

    def dma(self, dst, src, queue=0, **sync) -> Instruction:
        return self._ins(Opcode.DMA, Engine.DMA, [dst, src], queue=queue, **sync)

    def dma_indirect(self, dst, src, index, queue=0, **sync) -> Instruction:
        """Rows of the HBM side (dst or src) chosen by `index` (SBUF [P, 1] integers)."""
        return self._ins(Opcode.DMA, Engine.DMA, [dst, src, index], queue=queue,
                         flags=isa.FLAG_INDIRECT, **sync)

    def matmul(self, dst, stationary, moving, accumulate=False, **sync) -> Instruction:
        return self._ins(Opcode.MATMUL, Engine.PE, [dst, stationary, moving],
                         flags=isa.FLAG_ACCUMULATE if accumulate else 0, **sync)

    def transpose(self, dst, src, **sync) -> Instruction:
        return self._ins(Opcode.TRANSPOSE, Engine.PE, [dst, src], **sync)

    def activate(self, dst, src, func="identity", *, bias=None, scale=1.0, accum=None,
                 **sync) -> Instruction:
        """`scale` is an immediate (float) or a per-partition operand."""
        imm_scale = scale if isinstance(scale, (int, float)) else 0.0
        scale_op = None if isinstance(scale, (int, float)) else scale
        return self._ins(Opcode.ACTIVATE, Engine.ACT, [dst, src, bias, scale_op, accum],
                         func=isa.ActFunc.parse(func), imm=(float(imm_scale), 0.0, 0.0, 0.0),
                         **sync)

    def tensor_tensor(self, dst, a, b, op, engine="dve", **sync) -> Instruction:
        return self._ins(Opcode.TENSOR_TENSOR, engine, [dst, a, b], alu0=isa.AluOp.parse(op),
                         **sync)

    def tensor_scalar(self, dst, src, op0, s0, op1="bypass", s1=0.0, *, reverse0=False,
                      reverse1=False, engine="dve", **sync) -> Instruction:
        """`s0`/`s1` are immediates (float) or per-partition operands."""
        imm0 = float(s0) if isinstance(s0, (int, float)) else 0.0
        imm1 = float(s1) if isinstance(s1, (int, float)) else 0.0
        ops = [dst, src, None if isinstance(s0, (int, float)) else s0,
               None if isinstance(s1, (int, float)) else s1]
        flags = (isa.FLAG_REVERSE0 if reverse0 else 0) | (isa.FLAG_REVERSE1 if reverse1 else 0)
        return self._ins(Opcode.TENSOR_SCALAR, engine, ops, alu0=isa.AluOp.parse(op0),
                         alu1=isa.AluOp.parse(op1), imm=(imm0, imm1, 0.0, 0.0), flags=flags,
                         **sync)

    def tensor_scalar_reduce(self, dst, src, op0, s0, reduce_op, reduced, *, negate=False,
                             reverse0=False, engine="dve", **sync) -> Instruction:
        """`s0` an immediate (float) or a per-partition operand; `reduced` the [P, 1] slot."""
        imm0 = float(s0) if isinstance(s0, (int, float)) else 0.0
        ops = [dst, src, None if isinstance(s0, (int, float)) else s0, reduced]
        flags = (isa.FLAG_REVERSE0 if reverse0 else 0) | (isa.FLAG_NEGATE if negate else 0)
        return self._ins(Opcode.TENSOR_SCALAR_REDUCE, engine, ops, alu0=isa.AluOp.parse(op0),
                         alu1=isa.AluOp.parse(reduce_op), imm=(imm0, 0.0, 0.0, 0.0),
                         flags=flags, **sync)

    def tensor_reduce(self, dst, src, op, dims=1, engine="dve", **sync) -> Instruction:
        return self._ins(Opcode.TENSOR_REDUCE, engine, [dst, src], alu0=isa.AluOp.parse(op),
                         reduce_dims=dims, **sync)

    def copy(self, dst, src, engine="dve", **sync) -> Instruction:
        return self._ins(Opcode.TENSOR_COPY, engine, [dst, src], **sync)

    def memset(self, dst, value, engine="dve", **sync) -> Instruction:
        return self._ins(Opcode.MEMSET, engine, [dst], imm=(float(value), 0.0, 0.0, 0.0),
                         **sync)

    def iota(self, dst, base=0.0, partition_step=0.0, step=1.0, **sync) -> Instruction:
        return self._ins(Opcode.IOTA, Engine.POOL, [dst],
                         imm=(float(base), float(partition_step), float(step), 0.0), **sync)

    def select(self, dst, mask, a, b, engine="dve", **sync) -> Instruction:
        return self._ins(Opcode.SELECT, engine, [dst, mask, a, b], **sync)

    # -- output ----------------------------------------------------------------------------
    def build(self) -> container.Neff:
        streams = []
        for (engine, queue), instrs in sorted(self.streams.items()):
            records = np.frombuffer(isa.encode(instrs), dtype=isa.INSTRUCTION_DTYPE)
            streams.append(container.Stream(container.stream_name(engine, queue), engine,
                                            queue, records))
        return container.Neff(name=self.name, target=self.target, tensors=list(self.tensors),
                              inputs=list(self.inputs), outputs=list(self.outputs),
                              streams=streams, num_semaphores=self.num_semaphores,
                              scratch_bytes=self.scratch_bytes,
                              locations=list(self.locations))

    def to_bytes(self) -> bytes:
        return container.write_neff(self.build())


def gather_program(rows: int, width: int, count: int) -> NeffBuilder:
    """out[i] = table[ids[i]]: ids [count, 1] (i32) loaded on queue 0, rows of the f32 table
    [rows, width] gathered by one indirect DMA, stored from queue 2."""
    b = NeffBuilder("gather")
    table = b.input("table", (rows, width))
    ids = b.input("ids", (count, 1), "i32")
    out = b.output("out", (count, width))
    loaded, gathered = b.semaphore(), b.semaphore()
    index = sbuf(count, [1], "i32")
    data = sbuf(count, [width], offset=64)
    b.dma(index, b.view(ids), queue=0, signal=loaded, loc="load ids")
    b.dma_indirect(data, hbm(table, count, [width], partition_stride=width), index, queue=1,
                   waits=[(loaded, 1)], signal=gathered, loc="gather")
    b.dma(b.view(out), data, queue=2, waits=[(gathered, 1)])
    return b


def scatter_program() -> NeffBuilder:
    """out [6, 4] zeroed, then row ids[i] (ids [3, 1], i32) set to src[i] (src [3, 4]) by one
    indirect DMA into HBM."""
    b = NeffBuilder("scatter")
    src = b.input("src", (3, 4))
    ids = b.input("ids", (3, 1), "i32")
    out = b.output("out", (6, 4))
    s = b.semaphore()
    zero = sbuf(6, [4], offset=256)
    b.memset(zero, 0.0, signal=s)
    b.dma(b.view(out), zero, queue=3, waits=[(s, 1)], signal=s)
    index, data = sbuf(3, [1], "i32"), sbuf(3, [4], offset=64)
    b.dma(index, b.view(ids), queue=0, signal=s)
    b.dma(data, b.view(src), queue=1, signal=s)
    b.dma_indirect(hbm(out, 3, [4], partition_stride=4), data, index, queue=3,
                   waits=[(s, 4)])
    return b


def execute(program, inputs, target=None):
    """Load `program` (a NeffBuilder, Neff or NEFF bytes) and run it on a simulated device."""
    from torchneuron.runtime import Device, load

    if isinstance(program, NeffBuilder):
        program = program.to_bytes()
    elif isinstance(program, container.Neff):
        program = container.write_neff(program)
    loaded = load(program)
    return Device(target or loaded.target).execute(loaded, inputs)


_ISA_DTYPES = {dt.numpy(): dt for dt in isa.DType}


def run_kernel(inputs: dict, outputs: dict, body, target: str = "trn2"):
    """Run a one-step kernel: load each input [P, ...] into SBUF (queue 0), run `body`, store
    each output from SBUF (queue 1).

    `outputs` maps name -> (shape, dtype). `body(b, ins, outs, waits, signal)` gets the SBUF
    operands by name; its first instruction must take `waits=waits` and its last
    `signal=signal`. Returns ({name: array}, profile).
    """
    b = NeffBuilder("kernel", target)
    loaded, done = b.semaphore(), b.semaphore()
    offset = 0

    def place(shape, dtype) -> Operand:
        nonlocal offset
        op = sbuf(shape[0], shape[1:] or (1,), dtype, offset=offset)
        offset += -(-(math.prod(shape[1:]) * dtype_of(dtype).itemsize) // 64) * 64
        return op

    ins = {}
    for name, array in inputs.items():
        dt = _ISA_DTYPES[array.dtype]
        tid = b.input(name, array.shape, dt)
        ins[name] = place(array.shape, dt)
        b.dma(ins[name], b.view(tid), queue=0, signal=loaded)
    outs = {name: place(shape, dtype) for name, (shape, dtype) in outputs.items()}
    body(b, ins, outs, waits=[(loaded, len(inputs))] if inputs else [], signal=done)
    for name, (shape, dtype) in outputs.items():
        tid = b.output(name, shape, dtype)
        b.dma(b.view(tid), outs[name], queue=1, waits=[(done, 1)])
    result = execute(b, list(inputs.values()))
    return dict(zip(outputs, result.outputs)), result.profile
