"""The NEFF-like container: a fixed-size header followed by a zip archive.

Layout (little-endian):
    header (HEADER_SIZE bytes): magic, format version (major, minor), header size, payload size,
        sha256 of the payload, uuid, program name, target name, number of cores.
    payload: a zip archive holding
        def.json         tensors (inputs, outputs, constants, scratch), streams, semaphores,
                         target, memory use
        streams/<s>.bin  one file of fixed-width instruction records (see isa.py) per stream
        constants/<i>.bin raw little-endian bytes of constant tensor i
        debug.json       instruction -> source location table (records carry an index into it)

`read_neff` validates everything it returns: a truncated, bit-flipped, wrong-magic,
future-version or otherwise malformed file raises `NeffFormatError` and nothing else (no
IndexError, KeyError, zipfile/zlib error, RecursionError ...; test_fuzz_loader.py feeds it
thousands of mutated files). Sizes and counts are bounded before anything is allocated for
them: members by MAX_MEMBER_BYTES (def.json, debug.json by MAX_DEF_JSON_BYTES), a stream's
or constant's member must have exactly the size def.json implies, semaphores by
MAX_SEMAPHORES and a tensor by MAX_TENSOR_BYTES (the runtime then checks that all tensors fit
the target's HBM). Header flags are reserved and must be 0.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import struct
import uuid as uuidlib
import zipfile
from dataclasses import dataclass, field

import numpy as np

from torchneuron.format import isa

MAGIC = b"NEFF\x7fTNC"
FORMAT_MAJOR = 0
FORMAT_MINOR = 1
HEADER_SIZE = 256
_HEADER = struct.Struct("<8sIIIIQ32s16s64s16sI")
assert _HEADER.size <= HEADER_SIZE

TENSOR_KINDS = ("input", "output", "constant", "scratch")
MAX_DEF_JSON_BYTES = 64 << 20
MAX_MEMBER_BYTES = 4 << 30
# Format limits (not hardware figures): far above what a program uses (the compiler uses one
# semaphore per engine and DMA queue), low enough that nothing absurd is ever allocated.
MAX_SEMAPHORES = 1 << 16
MAX_TENSOR_BYTES = 1 << 40
MAX_TENSOR_DIMS = 32


class NeffFormatError(ValueError):
    """A NEFF that cannot be loaded: truncated, corrupt, wrong version or malformed."""

    def __init__(self, message: str, source: str | None = None):
        self.source = source
        super().__init__(f"{source}: {message}" if source else message)


@dataclass
class TensorDecl:
    id: int
    name: str
    dtype: isa.DType
    shape: tuple[int, ...]
    kind: str
    data: bytes | None = None        # constants only
    scratch_offset: int = 0          # scratch only: byte offset in the scratch arena

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.num_elements * self.dtype.itemsize


@dataclass
class Stream:
    name: str              # "pe", "act", "dve", "pool", "sp" or "q<k>" for DMA queue k
    engine: isa.Engine
    queue: int
    records: np.ndarray    # structured array of isa.INSTRUCTION_DTYPE

    @property
    def count(self) -> int:
        return int(self.records.shape[0])


def stream_name(engine: isa.Engine, queue: int = 0) -> str:
    return f"q{queue}" if engine == isa.Engine.DMA else engine.label


@dataclass
class Neff:
    name: str
    target: str
    tensors: list[TensorDecl]
    inputs: list[int]
    outputs: list[int]
    streams: list[Stream]
    num_semaphores: int
    scratch_bytes: int = 0
    locations: list[str] = field(default_factory=lambda: ["unknown"])
    metadata: dict = field(default_factory=dict)
    uuid: bytes = field(default_factory=lambda: uuidlib.uuid4().bytes)
    num_cores: int = 1

    def stream(self, name: str) -> Stream | None:
        for s in self.streams:
            if s.name == name:
                return s
        return None

    def instruction_counts(self) -> dict[str, int]:
        return {s.name: s.count for s in self.streams}


# -- Writing ---------------------------------------------------------------------------------

# The date stored with each member of the archive (the earliest a zip can hold).
_MEMBER_DATE = (1980, 1, 1, 0, 0, 0)


def write_neff(neff: Neff) -> bytes:
    buf = io.BytesIO()
    definition = {
        "format_version": [FORMAT_MAJOR, FORMAT_MINOR],
        "name": neff.name,
        "target": neff.target,
        "num_semaphores": neff.num_semaphores,
        "scratch_bytes": neff.scratch_bytes,
        "inputs": neff.inputs,
        "outputs": neff.outputs,
        "tensors": [
            {
                "id": t.id, "name": t.name, "dtype": t.dtype.label, "shape": list(t.shape),
                "kind": t.kind,
                **({"data": f"constants/{t.id}.bin"} if t.kind == "constant" else {}),
                **({"scratch_offset": t.scratch_offset} if t.kind == "scratch" else {}),
            }
            for t in neff.tensors
        ],
        "streams": [
            {"name": s.name, "engine": s.engine.label, "queue": s.queue,
             "file": f"streams/{s.name}.bin", "count": s.count}
            for s in neff.streams
        ],
        "metadata": neff.metadata,
    }
    # Level 1: an encoder layer's streams deflate in 8 ms instead of level 6's 20 ms (1% of
    # its compile time), to 253 KB instead of 144 KB.
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        def member(name: str, data: str | bytes) -> None:
            # Every member dated the same: a program compiled twice is the same bytes.
            info = zipfile.ZipInfo(name, date_time=_MEMBER_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data, compresslevel=1)

        member("def.json", json.dumps(definition, indent=1, sort_keys=True))
        for s in neff.streams:
            member(f"streams/{s.name}.bin", s.records.tobytes())
        for t in neff.tensors:
            if t.kind == "constant":
                member(f"constants/{t.id}.bin", t.data or b"")
        member("debug.json", json.dumps({"locations": neff.locations}))
    payload = buf.getvalue()
    header = _HEADER.pack(
        MAGIC, FORMAT_MAJOR, FORMAT_MINOR, HEADER_SIZE, 0, len(payload),
        hashlib.sha256(payload).digest(), neff.uuid,
        neff.name.encode()[:64], neff.target.encode()[:16], neff.num_cores,
    )
    return header.ljust(HEADER_SIZE, b"\0") + payload


# -- Reading ---------------------------------------------------------------------------------

def read_neff(data: bytes, source: str | None = None) -> Neff:
    """Parse and validate a NEFF; `source` (e.g. a file name) prefixes every error."""
    def fail(msg: str) -> NeffFormatError:
        return NeffFormatError(msg, source)

    if len(data) < HEADER_SIZE:
        raise fail(f"truncated: {len(data)} bytes is shorter than the {HEADER_SIZE}-byte header")
    (magic, major, minor, header_size, flags, payload_size, digest, file_uuid, name, target,
     num_cores) = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise fail(f"not a NEFF file (magic {magic!r}, expected {MAGIC!r})")
    if major > FORMAT_MAJOR:
        raise fail(f"format version {major}.{minor} is newer than this runtime supports "
                   f"({FORMAT_MAJOR}.{FORMAT_MINOR}); upgrade torchneuron")
    if major != FORMAT_MAJOR:
        raise fail(f"unsupported format version {major}.{minor}")
    if header_size != HEADER_SIZE:
        raise fail(f"header size {header_size} (expected {HEADER_SIZE})")
    if flags != 0:
        raise fail(f"header flags {flags:#x} are reserved and must be 0")
    if any(data[_HEADER.size:HEADER_SIZE]):
        raise fail("reserved header bytes are not zero")
    actual = len(data) - HEADER_SIZE
    if actual < payload_size:
        raise fail(f"truncated: payload has {actual} of {payload_size} bytes")
    if actual > payload_size:
        raise fail(f"{actual - payload_size} trailing bytes after the payload")
    payload = bytes(data[HEADER_SIZE:])
    if hashlib.sha256(payload).digest() != digest:
        raise fail("payload checksum mismatch (the file is corrupt)")
    if num_cores != 1:
        raise fail(f"{num_cores} cores requested; this runtime runs single-core programs")
    header_name = name.rstrip(b"\0")
    header_target = target.rstrip(b"\0")

    try:
        zf = zipfile.ZipFile(io.BytesIO(payload))
        members = {i.filename: i for i in zf.infolist()}
    except Exception as exc:  # BadZipFile, NotImplementedError (zip version), ... : corrupt
        raise fail(f"payload is not a valid archive: {type(exc).__name__}: {exc}") from None

    def member(path: str, limit: int = MAX_MEMBER_BYTES, size: int | None = None) -> bytes:
        """The bytes of archive member `path`: at most `limit` bytes, exactly `size` when
        given (both checked against the directory before anything is decompressed)."""
        info = members.get(path)
        if info is None:
            raise fail(f"archive has no {path}")
        if info.file_size > limit:
            raise fail(f"{path} is {info.file_size} bytes (limit {limit})")
        if size is not None and info.file_size != size:
            raise fail(f"{path} is {info.file_size} bytes, expected {size}")
        try:
            content = zf.read(info)
        except Exception as exc:  # zlib.error, BadZipFile, ... all mean a corrupt member
            raise fail(f"cannot read {path}: {type(exc).__name__}: {exc}") from None
        if len(content) != info.file_size:
            raise fail(f"{path} has {len(content)} bytes, its directory entry says "
                       f"{info.file_size}")
        return content

    def parse_json(path: str):
        try:
            return json.loads(member(path, MAX_DEF_JSON_BYTES))
        except (ValueError, RecursionError) as exc:
            # JSONDecodeError, UnicodeDecodeError, an integer of more than 4300 digits,
            # nesting deeper than the parser's recursion limit.
            raise fail(f"malformed JSON in {path}: {type(exc).__name__}: "
                       f"{str(exc)[:200]}") from None

    definition = parse_json("def.json")
    debug = parse_json("debug.json")
    locations = debug.get("locations") if isinstance(debug, dict) else None
    if not isinstance(locations, list) or not all(isinstance(x, str) for x in locations):
        raise fail("debug.json has no list of locations")

    d = _Checker(definition, fail)
    version = d.get("format_version", list)
    if version[:1] != [major]:
        raise fail(f"def.json format version {version} disagrees with the header ({major})")
    neff_name = d.get("name", str)
    neff_target = d.get("target", str)
    if neff_name.encode()[:64] != header_name:
        raise fail("program name in def.json disagrees with the header")
    if neff_target.encode()[:16] != header_target:
        raise fail("target in def.json disagrees with the header")
    num_semaphores = d.get("num_semaphores", int, minimum=0)
    if num_semaphores > MAX_SEMAPHORES:
        raise fail(f"{num_semaphores} semaphores (the format allows {MAX_SEMAPHORES})")
    scratch_bytes = d.get("scratch_bytes", int, minimum=0)
    if scratch_bytes > MAX_TENSOR_BYTES:
        raise fail(f"scratch arena of {scratch_bytes} bytes is implausibly large")

    tensors: list[TensorDecl] = []
    for i, t in enumerate(d.get("tensors", list)):
        tc = _Checker(t, fail, f"tensors[{i}]")
        tid = tc.get("id", int)
        if tid != i:
            raise fail(f"tensors[{i}] has id {tid}; ids must be 0..n-1 in order")
        try:
            dtype = isa.DType.parse(tc.get("dtype", str))
        except isa.IsaError as exc:
            raise fail(f"tensors[{i}]: {exc}") from None
        shape = tuple(tc.get("shape", list))
        if len(shape) > MAX_TENSOR_DIMS or not all(
                isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**40
                for s in shape):
            raise fail(f"tensors[{i}] has an invalid shape {list(shape)[:MAX_TENSOR_DIMS + 1]}")
        kind = tc.get("kind", str)
        if kind not in TENSOR_KINDS:
            raise fail(f"tensors[{i}] has unknown kind {kind!r}")
        decl = TensorDecl(tid, tc.get("name", str), dtype, shape, kind)
        if decl.nbytes > MAX_TENSOR_BYTES:
            raise fail(f"tensors[{i}] is implausibly large ({decl.nbytes} bytes)")
        if kind == "constant":
            decl.data = member(tc.get("data", str), size=decl.nbytes)
        if kind == "scratch":
            decl.scratch_offset = tc.get("scratch_offset", int, minimum=0)
            if decl.scratch_offset + decl.nbytes > scratch_bytes:
                raise fail(f"scratch tensor {i} lies outside the {scratch_bytes}-byte arena")
        tensors.append(decl)

    def tensor_list(key: str, kind: str) -> list[int]:
        ids = d.get(key, list)
        for tid in ids:
            if not isinstance(tid, int) or isinstance(tid, bool) \
                    or not 0 <= tid < len(tensors) or tensors[tid].kind != kind:
                raise fail(f"{key} entry {tid!r} is not an {kind} tensor")
        if len(set(ids)) != len(ids):
            raise fail(f"{key} lists a tensor twice")
        return ids

    inputs = tensor_list("inputs", "input")
    outputs = tensor_list("outputs", "output")

    streams: list[Stream] = []
    seen = set()
    for i, s in enumerate(d.get("streams", list)):
        sc = _Checker(s, fail, f"streams[{i}]")
        sname = sc.get("name", str)
        try:
            engine = isa.Engine.parse(sc.get("engine", str))
        except isa.IsaError as exc:
            raise fail(f"streams[{i}]: {exc}") from None
        queue = sc.get("queue", int, minimum=0)
        if sname != stream_name(engine, queue) or sname in seen:
            raise fail(f"streams[{i}] has a bad or duplicate name {sname!r}")
        seen.add(sname)
        count = sc.get("count", int, minimum=0)
        raw = member(sc.get("file", str), size=count * isa.RECORD_SIZE)
        records = isa.decode_records(raw)
        _check_records(records, engine, queue, num_semaphores, len(tensors), len(locations),
                       lambda msg, sname=sname: fail(f"stream {sname}: {msg}"))
        streams.append(Stream(sname, engine, queue, records))

    metadata = definition.get("metadata", {})
    if not isinstance(metadata, dict):
        raise fail("metadata is not an object")
    return Neff(name=neff_name, target=neff_target, tensors=tensors, inputs=inputs,
                outputs=outputs, streams=streams, num_semaphores=num_semaphores,
                scratch_bytes=scratch_bytes, locations=locations, metadata=metadata,
                uuid=file_uuid, num_cores=num_cores)


def _check_records(records: np.ndarray, engine: isa.Engine, queue: int, num_semaphores: int,
                   num_tensors: int, num_locations: int, fail) -> None:
    """Structural checks of a stream's records; semantic checks belong to the simulator."""
    if records.shape[0] == 0:
        return
    opcodes = records["opcode"]
    if int(opcodes.max()) > max(isa.Opcode):
        raise fail(f"unknown opcode {int(opcodes.max())}")
    if np.any(records["engine"] != engine):
        raise fail(f"an instruction names an engine other than {engine.label}")
    if engine == isa.Engine.DMA and np.any(records["queue"] != queue):
        raise fail(f"an instruction names a queue other than {queue}")
    if np.any(records["nwaits"] > isa.MAX_WAITS):
        raise fail(f"an instruction has more than {isa.MAX_WAITS} waits")
    waits_used = np.arange(isa.MAX_WAITS)[None, :] < records["nwaits"][:, None]
    if np.any(records["wait_sem"][waits_used] >= num_semaphores):
        raise fail("an instruction waits on a semaphore that does not exist")
    signals = records["signal"]
    if np.any((signals != isa.NO_SIGNAL) & ((signals < 0) | (signals >= num_semaphores))):
        raise fail("an instruction signals a semaphore that does not exist")
    if np.any(records["loc"] >= num_locations):
        raise fail("an instruction refers to a debug location that does not exist")
    for name, enum in (("func", isa.ActFunc), ("alu0", isa.AluOp), ("alu1", isa.AluOp)):
        if int(records[name].max()) > max(enum):
            raise fail(f"unknown {name} value {int(records[name].max())}")
    ops = records["operands"]
    used = ops["memory"] != isa.Memory.NONE
    if int(ops["memory"].max()) > max(isa.Memory):
        raise fail("an operand names an unknown memory")
    if np.any(ops["dtype"][used] > max(isa.DType)):
        raise fail("an operand has an unknown dtype")
    if np.any(ops["ndim"][used] > isa.MAX_FREE_DIMS):
        raise fail(f"an operand has more than {isa.MAX_FREE_DIMS} free dims")
    hbm = ops["memory"] == isa.Memory.HBM
    if np.any(ops["tensor"][hbm] >= num_tensors):
        raise fail("an operand refers to a tensor that does not exist")


class _Checker:
    """Typed access to a JSON object, raising the container's error on a bad field."""

    def __init__(self, obj, fail, where: str = "def.json"):
        if not isinstance(obj, dict):
            raise fail(f"{where} is not an object")
        self.obj, self.fail, self.where = obj, fail, where

    def get(self, key: str, typ: type, minimum: int | None = None):
        if key not in self.obj:
            raise self.fail(f"{self.where} has no field {key!r}")
        value = self.obj[key]
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            raise self.fail(f"{self.where}.{key} is not a {typ.__name__}")
        if minimum is not None and value < minimum:
            raise self.fail(f"{self.where}.{key} is {value} (must be >= {minimum})")
        return value
