"""Compiler errors that name the user's source."""

from __future__ import annotations

import re

from torch_mlir import ir


class CompileError(Exception):
    """A construct the compiler cannot compile. `location` is the MLIR location of the op,
    which carries the FX node name and the Python source line when the graph came from torch."""

    def __init__(self, message: str, location: ir.Location | str | None = None):
        if location is None:
            try:    # the location of the op being converted, when there is one
                location = ir.Location.current
            except (ValueError, RuntimeError):
                location = None
        self.message = message
        self.loc = location if isinstance(location, ir.Location) else None
        self.location = str(location) if location is not None else None
        super().__init__(self.describe())

    @property
    def fx_node(self) -> str | None:
        """Name of the FX node the failing op came from, when the location records it."""
        return fx_node_of(self.location) if self.location else None

    def describe(self) -> str:
        where = describe_location(self.location) if self.location else ""
        return f"{where}: {self.message}" if where else self.message


def stage_error(stage: str, exc: ir.MLIRError) -> CompileError:
    """The first diagnostic of a failed stage as a CompileError naming the op's location."""
    diags = list(exc.error_diagnostics)
    if not diags:
        return CompileError(f"stage {stage} failed: {exc}")
    first = diags[0]
    return CompileError(first.message, first.location)


class UnsupportedOpError(CompileError):
    """An operation with no lowering to the NeuronCore (yet)."""


_NAME_LOC = re.compile(r'loc\("(?P<name>[^"]*)"(?:\((?P<child>.*)\))?\)')
_FILE_LOC = re.compile(r'"(?P<file>[^"]+)":(?P<line>\d+):(?P<col>\d+)')


def describe_location(loc: str) -> str:
    """'FX node addmm at model.py:13' from 'loc("addmm"("model.py":13:0))' (best effort)."""
    if not loc or loc == "loc(unknown)":
        return ""
    name = None
    m = _NAME_LOC.fullmatch(loc.strip())
    if m:
        name = m.group("name")
    files = _FILE_LOC.findall(loc)
    parts = []
    if name is not None and not _FILE_LOC.fullmatch(f'"{name}"'):
        parts.append(f"FX node '{name}'")
    if files:
        file, line, _ = files[-1] if name is None else files[0]
        parts.append(f"{file}:{line}")
    return " at ".join(parts) if parts else loc


def fx_node_of(loc: str) -> str | None:
    """'addmm' from 'loc("addmm"("model.py":13:0))'; None for a location without a name."""
    m = _NAME_LOC.fullmatch(loc.strip())
    if m and not _FILE_LOC.fullmatch(f'"{m.group("name")}"'):
        return m.group("name")
    return None
