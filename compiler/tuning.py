"""The tuning database: the best tiling decisions `neuron-tune` found for a kernel, by a hash
of the kernel's IR and the target, read back by trn-tile in later compilations.

The file is JSON:

    {"format": "torchneuron-tuning", "version": 1,
     "entries": {"<key>": {"target": "trn2", "kind": "matmul",
                           "summary": "matmul 4096x4096 @ 4096x4096 bf16",
                           "config": {"orientation": "mn", "gemm_resident": "p",
                                      "gemm_block": 11},
                           "default_ns": 1848900.0, "tuned_ns": 1840000.0}}}

`config` holds kernel attributes (`TUNING_ATTRS`) that trn-tile sets on the kernel in place of
its own choices. An entry of kind "graph" (keyed by `graph_key`: the whole linalg module)
holds fusion and layout choices instead (`GRAPH_OPTIONS`, CompileOptions fields), which
compile_linalg applies before the trn stage. The key covers the kernel's body (ops, types, attributes other than the tuning
attributes, no source locations), how it uses the values it captures, and the target; a kernel
that differs in any of these misses. Writes are atomic (a temporary file in the same folder,
then a rename) and merge with what is on disk, so concurrent tuners lose no entry wholesale.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U

FORMAT = "torchneuron-tuning"
VERSION = 1

# Kernel attributes the tuner chooses (and trn-tile otherwise chooses itself).
TUNING_ATTRS = {
    "orientation": str,       # matmul: "mn" or "nm"
    "gemm_resident": str,     # matmul: "p" (stationary tiles stay on chip) or "f" (moving)
    "gemm_block": int,        # matmul: resident output tiles per block
    "free_tile": int,         # elementwise/reduce: free elements per tile
}


# CompileOptions fields a graph entry may set (fusion choices made before kernels exist).
GRAPH_OPTIONS = {
    "fuse_matmul_epilogue": bool,
    "fuse_elementwise": bool,
    "layout_assignment": bool,
    "fuse_mlp": bool,
    "fuse_mlp_saved": bool,
    "fuse_mlp_saved_gradient": bool,
    "fuse_weight_gradients": bool,
    "fuse_mlp_rows": bool,
    "fuse_linear_rows": bool,
    "fuse_attention_output": bool,
    "fuse_attention_qkv": bool,
    "fuse_attention_ffn": bool,
    "fuse_attention_qkv_saved": bool,
    "fuse_input_rows": bool,
}


class TuningDBError(Exception):
    """The tuning database cannot be read or written; the message names the file."""


def kernel_key(kernel: ir.Operation, target: str) -> str:
    """sha256 of the kernel's IR without its tuning attributes and locations, the types and
    sharing of the values it captures, and the target name."""
    saved = {name: kernel.attributes[name] for name in TUNING_ATTRS
             if name in kernel.attributes}
    for name in saved:
        del kernel.attributes[name]
    try:
        text = kernel.get_asm(enable_debug_info=False, print_generic_op_form=True,
                              use_local_scope=True)
    finally:
        for name, value in saved.items():
            kernel.attributes[name] = value
    inside = set()
    captured: dict = {}
    uses = []
    for op in kernel.regions[0].blocks[0].operations:
        op = op.operation
        for i, v in enumerate(op.operands):
            if v in inside:
                continue
            ident = captured.setdefault(v, len(captured))
            producer = U.defining_op(v)
            uses.append(f"{i}:{ident}:{v.type}:{producer.name if producer else 'arg'}")
        inside.update(op.results)
    digest = hashlib.sha256()
    for part in (target, text, "|".join(uses)):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def graph_key(module: ir.Module, target: str) -> str:
    """sha256 of a linalg module's IR (no locations) and the target."""
    text = module.operation.get_asm(enable_debug_info=False, print_generic_op_form=True)
    digest = hashlib.sha256()
    for part in ("graph", target, text):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def kernel_summary(kernel: ir.Operation) -> str:
    """A one-line description of a kernel for reports: its root op and shapes."""
    body = [op.operation for op in kernel.regions[0].blocks[0].operations]
    for op in body:
        if op.name == "trn.matmul":
            a, b = (U.shape(v) for v in op.operands)
            dtype = U.element_type(op.operands[0])
            return f"matmul {'x'.join(map(str, a))} @ {'x'.join(map(str, b))} {dtype}"
    kind = U.str_attr(kernel, "kind") if "kind" in kernel.attributes else "kernel"
    shape = U.shape(kernel.results[0]) if len(kernel.results) else []
    ops = ",".join(op.name.removeprefix("trn.") for op in body[:-1])
    return f"{kind} {'x'.join(map(str, shape))} ({ops})"


class TuningDB:
    """A tuning database file (which need not exist yet)."""

    def __init__(self, path: str | os.PathLike, entries: dict | None = None):
        self.path = os.fspath(path)
        self.entries: dict[str, dict] = dict(entries or {})

    @staticmethod
    def load(path: str | os.PathLike, missing_ok: bool = True) -> "TuningDB":
        """Read `path`; a missing file is an empty database (unless `missing_ok` is false).
        Raises TuningDBError naming the file when it is not a valid database."""
        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            if missing_ok:
                return TuningDB(path)
            raise TuningDBError(f"tuning database {path}: no such file") from None
        except OSError as exc:
            raise TuningDBError(f"tuning database {path}: cannot read: {exc}") from None
        return TuningDB(path, _parse(path, text))

    def lookup(self, key: str) -> dict | None:
        entry = self.entries.get(key)
        return dict(entry["config"]) if entry is not None else None

    def record(self, key: str, entry: dict) -> None:
        _check_entry(self.path, key, entry)
        self.entries[key] = entry

    def save(self) -> None:
        """Write atomically, merged over the entries now on disk (ours win)."""
        merged = dict(TuningDB.load(self.path).entries) if os.path.exists(self.path) else {}
        merged.update(self.entries)
        self.entries = merged
        text = json.dumps({"format": FORMAT, "version": VERSION, "entries": merged},
                          indent=1, sort_keys=True)
        folder = os.path.dirname(os.path.abspath(self.path))
        try:
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tuning-", suffix=".tmp", dir=folder)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            raise TuningDBError(f"tuning database {self.path}: cannot write: {exc}") from None


def _parse(path: str, text: str) -> dict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TuningDBError(f"tuning database {path} is corrupt (not JSON: {exc}); "
                            "delete it or tune again into another file") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise TuningDBError(f"tuning database {path} is not a torchneuron tuning database "
                            f"(expected \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise TuningDBError(f"tuning database {path} has version {data.get('version')!r}; "
                            f"this compiler reads version {VERSION}")
    entries = data.get("entries")
    if not isinstance(entries, dict):
        raise TuningDBError(f"tuning database {path} is corrupt: \"entries\" is not an object")
    for key, entry in entries.items():
        _check_entry(path, key, entry)
    return entries


def _check_entry(path: str, key: str, entry) -> None:
    if not isinstance(entry, dict) or not isinstance(entry.get("config"), dict):
        raise TuningDBError(f"tuning database {path} is corrupt: entry {key[:12]} has no "
                            "\"config\" object")
    known = GRAPH_OPTIONS if entry.get("kind") == "graph" else TUNING_ATTRS
    for name, value in entry["config"].items():
        kind = known.get(name)
        if kind is None or type(value) is not kind:
            raise TuningDBError(f"tuning database {path} is corrupt: entry {key[:12]} sets "
                                f"{name}={value!r} (known: "
                                f"{', '.join(f'{n} ({t.__name__})' for n, t in known.items())})")


def apply_config(kernel: ir.Operation, config: dict) -> None:
    """Replace the kernel's tuning attributes by `config` (those it leaves out are chosen by
    trn-tile afresh, consistently with the ones it sets)."""
    for name in TUNING_ATTRS:
        if name in kernel.attributes:
            del kernel.attributes[name]
    for name, value in config.items():
        kernel.attributes[name] = U.string(value) if isinstance(value, str) else U.i64(value)
