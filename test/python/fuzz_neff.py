"""Mutated NEFFs for the loader fuzz tests (test_fuzz_loader.py).

Three small valid programs (built with neff_builder) are the seeds. Mutations:
- raw: byte flips, overwrites, insertions, deletions and truncations anywhere in the file
  (the header's checksum then rejects almost all of them);
- resigned: the same on the payload (the zip archive), with the header's payload size and
  sha256 recomputed so that the archive and everything inside it is parsed;
- member: bytes of one archive member (def.json, a stream, a constant, debug.json) mutated,
  the archive rebuilt and the header re-signed;
- json: one node of def.json (or debug.json) replaced by another JSON value, nudged, removed
  or duplicated, the archive rebuilt and re-signed;
- record: one field of one instruction record (opcode, semaphores, operand sizes, strides,
  offsets ...) set to another value of its type, the archive rebuilt and re-signed.

`outcome(data)` loads and runs a NEFF and says what happened; anything but the documented
outcomes (NeffFormatError; SimulationError; outputs) propagates as a failure.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import zipfile
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from neff_builder import NeffBuilder, hbm, psum, sbuf
from torchneuron.format import container, isa
from torchneuron.runtime import Device, NeffFormatError, SimulationError, load
from torchneuron.runtime.program import plan_hbm

HEADER = container._HEADER
H = container.HEADER_SIZE
# Header bytes the reader does not check against anything (it may accept any value): the
# minor format version and the uuid.
UNVALIDATED_HEADER = set(range(12, 16)) | set(range(64, 80))
# A mutated program with inputs or HBM larger than these is only loaded and prepared, not run:
# the runtime would allocate what it asks for (up to the target's HBM, checked at load), and
# the point here is the loader's and simulator's robustness, not the test machine's RAM.
MAX_INPUT_BYTES = 8 << 20
MAX_HBM_BYTES = 64 << 20


# -- seed programs --------------------------------------------------------------------------

def _relu_bf16() -> NeffBuilder:
    """DMA in, ACT relu with a per-partition bias, DVE add, bf16 output cast, DMA out."""
    b = NeffBuilder("relu_bf16")
    x = b.input("x", (32, 16))
    bias = b.input("bias", (32, 1))
    y = b.output("y", (32, 16), "bf16")
    loaded, act, done = b.semaphore(), b.semaphore(), b.semaphore()
    b.dma(sbuf(32, [16]), b.view(x), queue=0, signal=loaded, loc="load x")
    b.dma(sbuf(32, [1], offset=512), b.view(bias), queue=1, signal=loaded, loc="load bias")
    b.activate(sbuf(32, [16], offset=64), sbuf(32, [16]), "relu", bias=sbuf(32, [1], offset=512),
               waits=[(loaded, 2)], signal=act, loc="relu")
    b.tensor_scalar(sbuf(32, [16], "bf16", offset=128), sbuf(32, [16], offset=64), "add", 1.0,
                    waits=[(act, 1)], signal=done, loc="add")
    b.dma(b.view(y), sbuf(32, [16], "bf16", offset=128), queue=2, waits=[(done, 1)])
    return b


def _matmul_scratch() -> NeffBuilder:
    """bf16 matmul of an input by a constant, accumulate, through a scratch tensor, with a
    PE transpose (evacuated by DVE), a POOL iota and a DVE reduction."""
    b = NeffBuilder("matmul_scratch")
    x = b.input("x", (64, 24), "bf16")
    w = b.constant("w", (np.arange(64 * 8).reshape(64, 8) % 5 - 2).astype(np.float32), "bf16")
    y = b.output("y", (8, 24))
    r = b.output("r", (8, 1))
    t = b.output("t", (24, 8))
    idx = b.output("idx", (4, 6), "i32")
    tmp = b.scratch("tmp", (8, 24))
    loaded, mm, ev, st1, red, tr, made = (b.semaphore() for _ in range(7))
    b.dma(sbuf(64, [24], "bf16"), b.view(x), queue=0, signal=loaded)
    b.dma(sbuf(64, [8], "bf16", offset=64), b.view(w), queue=1, signal=loaded)
    b.matmul(psum(8, [24]), sbuf(64, [8], "bf16", offset=64), sbuf(64, [24], "bf16"),
             waits=[(loaded, 2)], loc="mm0")
    b.matmul(psum(8, [24]), sbuf(64, [8], "bf16", offset=64), sbuf(64, [24], "bf16"),
             accumulate=True, signal=mm, loc="mm1")
    b.copy(sbuf(8, [24], offset=256), psum(8, [24]), engine="act", waits=[(mm, 1)], signal=ev)
    b.dma(b.view(tmp), sbuf(8, [24], offset=256), queue=2, waits=[(ev, 1)], signal=st1)
    b.dma(b.view(y), b.view(tmp), queue=2, waits=[(st1, 1)])
    b.tensor_reduce(sbuf(8, [1], offset=512), sbuf(8, [24], offset=256), "max",
                    waits=[(ev, 1)], signal=red)
    b.dma(b.view(r), sbuf(8, [1], offset=512), queue=3, waits=[(red, 1)])
    b.transpose(psum(24, [8], offset=2048), sbuf(8, [24], offset=256), waits=[(ev, 1)],
                signal=tr)
    b.copy(sbuf(24, [8], offset=1024), psum(24, [8], offset=2048), engine="dve",
           waits=[(tr, 1)], signal=tr)
    b.dma(b.view(t), sbuf(24, [8], offset=1024), queue=3, waits=[(tr, 2)])
    b.iota(sbuf(4, [2, 3], "i32", offset=4096), base=1, partition_step=10, step=2,
           signal=made)
    b.dma(b.view(idx), sbuf(4, [2, 3], "i32", offset=4096), queue=4, waits=[(made, 1)])
    return b


def _patterns() -> NeffBuilder:
    """Strided DMAs (a transpose, a broadcast), memset, select, a DMA-queue NOP fence."""
    b = NeffBuilder("patterns", "trn1")
    x = b.input("x", (8, 12))
    m = b.input("m", (12, 8), "ui8")
    yt = b.output("yt", (12, 8))
    s = b.output("s", (12, 8), "f16")
    step, fence = b.semaphore(), b.semaphore()
    b.dma(sbuf(12, [8]), hbm(x, 12, [8], partition_stride=1, strides=[12]), queue=0,
          signal=step, loc="transpose load")
    b.dma(sbuf(12, [8], "ui8", offset=64), b.view(m), queue=0, signal=step)
    b.memset(sbuf(12, [8], offset=128), -1.5, engine="pool", signal=step)
    b.nop(engine="dma", queue=0, waits=[(step, 2)], signal=fence)
    b.select(sbuf(12, [8], "f16", offset=256), sbuf(12, [8], "ui8", offset=64), sbuf(12, [8]),
             sbuf(12, [8], offset=128), waits=[(fence, 1), (step, 3)], signal=fence)
    b.dma(b.view(yt), sbuf(12, [8]), queue=1, waits=[(fence, 1)])
    b.dma(b.view(s), sbuf(12, [8], "f16", offset=256), queue=1, waits=[(fence, 2)])
    return b


@dataclass(frozen=True)
class Seed:
    name: str
    data: bytes
    members: dict[str, bytes]       # archive members, in archive order
    outputs: tuple


def make_inputs(program) -> list[np.ndarray] | None:
    """Deterministic inputs of the program's declared shapes and dtypes (None if too big)."""
    if sum(int(np.prod(s.shape, dtype=object)) * s.dtype.itemsize
           for s in program.inputs) > MAX_INPUT_BYTES:
        return None
    arrays = []
    for i, spec in enumerate(program.inputs):
        n = int(np.prod(spec.shape, dtype=object))
        values = (np.arange(n, dtype=np.int64) * (i + 3)) % 11 - 5
        arrays.append(values.astype(np.float32).astype(spec.dtype).reshape(spec.shape))
    return arrays


@functools.lru_cache(maxsize=None)
def seeds() -> tuple[Seed, ...]:
    out = []
    for make in (_relu_bf16, _matmul_scratch, _patterns):
        data = make().to_bytes()
        with zipfile.ZipFile(io.BytesIO(data[H:])) as zf:
            members = {i.filename: zf.read(i) for i in zf.infolist()}
        program = load(data)
        result = Device(program.target).execute(program, make_inputs(program))
        out.append(Seed(program.name, data, members, tuple(result.outputs)))
    return tuple(out)


# -- running one case -----------------------------------------------------------------------

def outcome(data: bytes):
    """("format", message) | ("simulation", message) | ("skipped", None) | ("ran", outputs).

    Any other exception is a bug in the loader or simulator and propagates."""
    try:
        program = load(data)
    except NeffFormatError as exc:
        return "format", str(exc)
    inputs = make_inputs(program)
    try:
        if inputs is None or plan_hbm(program.neff, program.target).size > MAX_HBM_BYTES:
            program.prepared()
            return "skipped", None
        return "ran", Device(program.target).execute(program, inputs).outputs
    except SimulationError as exc:
        return "simulation", str(exc)


def same_outputs(a, b) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        for x, y in zip(a, b))


# -- building mutated files -----------------------------------------------------------------

def signed(payload: bytes, like: bytes) -> bytes:
    """`payload` behind the header of `like`, with payload size and sha256 recomputed."""
    fields = list(HEADER.unpack_from(like, 0))
    fields[5] = len(payload)
    fields[6] = hashlib.sha256(payload).digest()
    return HEADER.pack(*fields).ljust(H, b"\0") + payload


def rezipped(members: dict[str, bytes], compress: bool = True) -> bytes:
    buf = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(buf, "w", compression=method) as zf:
        for name, content in members.items():
            zf.writestr(name, content)
    return buf.getvalue()


def apply_edits(data: bytes, edits) -> bytes:
    """Apply byte edits (kind, position as a fraction of the length, value)."""
    out = bytearray(data)
    for kind, where, value in edits:
        if not out and kind != "insert":
            continue
        pos = min(int(where * len(out)), max(len(out) - 1, 0))
        if kind == "flip":
            out[pos] ^= 1 << (value % 8)
        elif kind == "set":
            out[pos] = value
        elif kind == "insert":
            out[pos:pos] = bytes([value])
        elif kind == "delete":
            del out[pos]
        elif kind == "truncate":
            del out[pos:]
    return bytes(out)


def changed_positions(original: bytes, mutated: bytes) -> set[int]:
    """Positions of `original` whose byte differs in `mutated` (for a change of length:
    every position from the first difference on)."""
    if len(original) == len(mutated):
        a = np.frombuffer(original, np.uint8)
        b = np.frombuffer(mutated, np.uint8)
        return set(np.flatnonzero(a != b).tolist())
    first = next((i for i, (x, y) in enumerate(zip(original, mutated)) if x != y),
                 min(len(original), len(mutated)))
    return set(range(first, max(len(original), len(mutated))))


BYTE_EDIT = st.tuples(
    st.sampled_from(["flip", "flip", "set", "set", "insert", "delete", "truncate"]),
    st.floats(0.0, 1.0, allow_nan=False), st.integers(0, 255))
# Edits aimed at the header more often than its share of the file would give.
HEADER_EDIT = st.tuples(st.sampled_from(["flip", "set"]),
                        st.floats(0.0, 1.0, allow_nan=False).map(lambda f: f * 0.999),
                        st.integers(0, 255))

SPECIAL_INTS = [0, 1, -1, 2, 3, 7, 8, 31, 32, 63, 64, 65, 127, 128, 129, 255, 256, 511, 512,
                513, 1023, 1024, 2047, 2048, 4096, 16384, 65535, 65536, 2**20, 2**24, 2**31 - 1,
                2**31, 2**32 - 1, 2**32, 2**40, 2**40 + 1, 2**48, 2**53 + 1, 2**62, 2**63 - 1,
                2**63, 2**64, 10**30, -2, -128, -2**31, -2**63]

JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.sampled_from(SPECIAL_INTS),
    st.integers(-2**70, 2**70), st.integers(-5, 600),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.5, 1.0, -0.0, 1e300]),
    st.text(max_size=12),
    st.sampled_from(["f32", "bf16", "f8E4M3FN", "i64", "input", "output", "constant",
                     "scratch", "pe", "act", "dve", "pool", "sp", "dma", "q0", "q15", "q16",
                     "streams/pe.bin", "def.json", "debug.json", "constants/0.bin", "trn1",
                     "trn2", "", "\x00", "é" * 40]),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=5),
                               st.dictionaries(st.text(max_size=6), children, max_size=4)),
    max_leaves=12)


def json_paths(node, path=()):
    """Every node of a JSON tree as a tuple of keys/indices."""
    yield path
    if isinstance(node, dict):
        for k, v in node.items():
            yield from json_paths(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from json_paths(v, path + (i,))


def _nudged(value, how: int):
    if isinstance(value, bool) or not isinstance(value, int):
        return value
    return [value + 1, value - 1, value * 2, value * 1000, -value, value + 2**32,
            value * 2**31][how % 7]


@st.composite
def json_mutation(draw, tree):
    """A mutated copy of a JSON tree (replace / nudge / delete / duplicate / add a key)."""
    tree = json.loads(json.dumps(tree))
    paths = list(json_paths(tree))
    path = draw(st.sampled_from(paths))
    action = draw(st.sampled_from(["replace", "nudge", "nudge", "delete", "duplicate",
                                   "add key"]))
    if not path:
        return draw(JSON_VALUES) if action == "replace" else tree
    parent = tree
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    if action == "replace":
        parent[key] = draw(JSON_VALUES)
    elif action == "nudge":
        parent[key] = _nudged(parent[key], draw(st.integers(0, 6)))
    elif action == "delete":
        del parent[key]
    elif action == "duplicate" and isinstance(parent, list):
        parent.insert(key, json.loads(json.dumps(parent[key])))
    elif action == "add key" and isinstance(parent[key], dict):
        parent[key][draw(st.text(max_size=8))] = draw(JSON_VALUES)
    return tree


def record_fields() -> list[tuple]:
    """Every leaf field of an instruction record: (field, operand slot or None, subfield,
    element index or None)."""
    out = []
    for name in isa.INSTRUCTION_DTYPE.names:
        if name == "operands":
            for slot in range(isa.NUM_OPERANDS):
                for sub in isa.OPERAND_DTYPE.names:
                    shape = isa.OPERAND_DTYPE[sub].shape
                    for k in (range(shape[0]) if shape else [None]):
                        out.append((name, slot, sub, k))
        else:
            shape = isa.INSTRUCTION_DTYPE[name].shape
            for k in (range(shape[0]) if shape else [None]):
                out.append((name, None, None, k))
    return out


RECORD_FIELDS = record_fields()


def _field_dtype(field) -> np.dtype:
    name, slot, sub, _ = field
    dt = isa.INSTRUCTION_DTYPE[name] if slot is None else isa.OPERAND_DTYPE[sub]
    return dt.base


@st.composite
def field_value(draw, dtype: np.dtype):
    if dtype.kind == "f":
        return draw(st.one_of(st.floats(width=32, allow_nan=True, allow_infinity=True),
                              st.sampled_from([0.0, 1.0, -1.0, 1e30, 3.0e38]).map(float)))
    info = np.iinfo(dtype)
    specials = [v for v in SPECIAL_INTS if info.min <= v <= info.max] + [info.max, info.min]
    return draw(st.one_of(st.sampled_from(specials), st.integers(info.min, info.max),
                          st.integers(max(info.min, -3), min(info.max, 20))))


@st.composite
def record_mutation(draw, raw: bytes):
    """The bytes of a stream with one field of one record changed (1-3 times)."""
    records = np.frombuffer(raw, dtype=isa.INSTRUCTION_DTYPE).copy()
    if not len(records):
        return raw
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(records) - 1))
        field = draw(st.sampled_from(RECORD_FIELDS))
        name, slot, sub, k = field
        value = draw(field_value(_field_dtype(field)))
        column = records[name] if slot is None else records[name][sub][:, slot]
        if k is None:
            column[i] = value
        else:
            column[i, k] = value
    return records.tobytes()


@st.composite
def raw_case(draw):
    seed = draw(st.sampled_from(seeds()))
    edits = draw(st.lists(st.one_of(BYTE_EDIT, HEADER_EDIT.map(
        lambda e: (e[0], e[1] * H / len(seed.data), e[2]))), min_size=1, max_size=4))
    data = apply_edits(seed.data, edits)
    return seed, data, changed_positions(seed.data, data)


@st.composite
def resigned_payload_case(draw):
    seed = draw(st.sampled_from(seeds()))
    edits = draw(st.lists(BYTE_EDIT, min_size=1, max_size=4))
    payload = apply_edits(seed.data[H:], edits)
    return signed(payload, seed.data)


@st.composite
def member_case(draw):
    seed = draw(st.sampled_from(seeds()))
    members = dict(seed.members)
    name = draw(st.sampled_from(sorted(members)))
    edits = draw(st.lists(BYTE_EDIT, min_size=1, max_size=3))
    members[name] = apply_edits(members[name], edits)
    return signed(rezipped(members, draw(st.booleans())), seed.data)


@st.composite
def json_case(draw):
    seed = draw(st.sampled_from(seeds()))
    members = dict(seed.members)
    name = draw(st.sampled_from(["def.json", "def.json", "def.json", "debug.json"]))
    tree = draw(json_mutation(json.loads(members[name])))
    members[name] = json.dumps(tree).encode()
    return signed(rezipped(members), seed.data)


@st.composite
def record_case(draw):
    seed = draw(st.sampled_from(seeds()))
    members = dict(seed.members)
    streams = sorted(n for n in members if n.startswith("streams/"))
    name = draw(st.sampled_from(streams))
    members[name] = draw(record_mutation(members[name]))
    return signed(rezipped(members), seed.data)
