"""Pass registry and pipeline parsing for the project's Python-defined MLIR passes.

A pass is a dataclass whose fields are its options, with a flag `NAME` (e.g. `trn-fuse`), a
one-line `SUMMARY`, and `run(module)`. It lives in the file named after its flag and runs inside
MLIR's pass manager, so upstream passes (canonicalize, cse, ...) mix freely with ours.
Pass options are spelled like MLIR's: `trn-fuse{matmul-epilogue=false}` in a pipeline, or
`--trn-fuse="matmul-epilogue=false"` on the command line.
"""

from __future__ import annotations

import dataclasses
import re
import traceback
from typing import ClassVar

from torch_mlir import ir, passmanager

from torchneuron.compiler.errors import CompileError

REGISTRY: dict[str, type["Pass"]] = {}


class PassOptionError(ValueError):
    """A pass name or option that does not exist or does not parse."""


@dataclasses.dataclass
class Pass:
    NAME: ClassVar[str] = ""
    SUMMARY: ClassVar[str] = ""

    def run(self, module: ir.Operation) -> None:
        raise NotImplementedError

    @classmethod
    def options(cls) -> list[dataclasses.Field]:
        return list(dataclasses.fields(cls))

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "Pass":
        fields = {f.name.replace("_", "-"): f for f in cls.options()}
        kwargs = {}
        for key, raw in options.items():
            f = fields.get(key)
            if f is None:
                known = ", ".join(fields) or "none"
                raise PassOptionError(f"pass '{cls.NAME}' has no option '{key}' (options: {known})")
            kwargs[f.name] = _parse_value(cls.NAME, key, raw, f.type)
        if "target" in fields:
            # The target it names (or TORCHNEURON_TARGET names) exists: checked before any
            # pass runs, as every other option is.
            from torchneuron.target import get_target

            try:
                get_target(kwargs.get("target") or None)
            except ValueError as exc:
                raise PassOptionError(f"pass '{cls.NAME}': {exc}") from None
        return cls(**kwargs)


def _parse_value(pass_name: str, key: str, raw: str, typ) -> object:
    typ = typ if isinstance(typ, str) else getattr(typ, "__name__", str(typ))
    try:
        if typ == "bool":
            if raw in ("true", "1"):
                return True
            if raw in ("false", "0"):
                return False
            raise ValueError("expected true or false")
        if typ == "int":
            return int(raw)
        if typ == "float":
            return float(raw)
        return raw
    except ValueError as exc:
        raise PassOptionError(f"option '{key}' of pass '{pass_name}': {raw!r}: {exc}") from None


def register(cls: type[Pass]) -> type[Pass]:
    if cls.NAME in REGISTRY:
        raise RuntimeError(f"pass {cls.NAME} registered twice")
    REGISTRY[cls.NAME] = cls
    return cls


def load_all_passes() -> dict[str, type[Pass]]:
    """Import every module of compiler/conversion and compiler/transforms (one pass per file)
    so that each pass registers itself."""
    import importlib
    import pkgutil

    from torchneuron.compiler import conversion, transforms

    for package in (conversion, transforms):
        for info in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{info.name}")
    return REGISTRY


_PIPELINE_ITEM = re.compile(r"\s*([A-Za-z0-9_.-]+)\s*(\{[^{}]*\})?\s*")


def parse_pipeline(text: str) -> list[tuple[str, dict[str, str]]]:
    """Parse `builtin.module(a, b{x=1 y=2}, func.func(c))` or `a,b` into (name, options).

    Nested anchors other than builtin.module are passed to MLIR unchanged as one item."""
    text = text.strip()
    m = re.fullmatch(r"builtin\.module\((.*)\)", text, re.S)
    if m:
        text = m.group(1)
    items: list[tuple[str, dict[str, str]]] = []
    depth, start = 0, 0
    for i, ch in enumerate(text + ","):
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
        elif ch == "," and depth == 0:
            chunk = text[start:i].strip()
            start = i + 1
            if not chunk:
                continue
            if "(" in chunk:
                items.append((chunk, {}))   # an op-anchored nested pipeline, for MLIR
                continue
            mm = _PIPELINE_ITEM.fullmatch(chunk)
            if not mm:
                raise PassOptionError(f"cannot parse pipeline element '{chunk}'")
            items.append((mm.group(1), parse_options(mm.group(2)[1:-1] if mm.group(2) else "")))
    if depth != 0:
        raise PassOptionError(f"unbalanced brackets in pipeline '{text}'")
    return items


def parse_options(text: str) -> dict[str, str]:
    options = {}
    for part in text.split():
        key, sep, value = part.partition("=")
        if not sep:
            value = "true"
        options[key] = value
    return options


def add_pass(pm: passmanager.PassManager, name: str, options: dict[str, str]) -> None:
    """Add our pass `name` (or, when it is not ours, the upstream MLIR pass) to `pm`."""
    cls = REGISTRY.get(name)
    if cls is None:
        spec = name
        if options:
            spec += "{" + " ".join(f"{k}={v}" for k, v in options.items()) + "}"
        try:
            pm.add(spec)
        except ValueError as exc:
            raise PassOptionError(f"unknown pass '{name}': {exc}") from None
        return
    instance = cls.from_options(options)
    pm.add(_runner(instance), name=cls.NAME, argument=cls.NAME, description=cls.SUMMARY)


def _runner(instance: Pass):
    def run(op: ir.Operation, pass_) -> None:
        try:
            with op.context, op.location:
                instance.run(op)
        except CompileError as exc:
            loc = exc.loc if exc.loc is not None else op.location
            loc.emit_error(f"{instance.NAME}: {exc.message}")
            pass_.signal_pass_failure()
        except Exception as exc:  # an internal error must surface as a diagnostic, not a crash
            op.location.emit_error(
                f"{instance.NAME}: internal compiler error: {type(exc).__name__}: {exc}\n"
                + "".join(traceback.format_exception(exc)[-4:]))
            pass_.signal_pass_failure()
    return run


def build_pass_manager(items: list[tuple[str, dict[str, str]]],
                       context: ir.Context) -> passmanager.PassManager:
    load_all_passes()
    with context:
        pm = passmanager.PassManager("builtin.module")
        for name, options in items:
            add_pass(pm, name, options)
    return pm
