"""The last stage's program verified by a forked child while the NEFF is written
(compiler/verify.py): the same verdict, with the same message and location, as verifying in
place; a child that dies before reporting, a single usable core and a module of several
functions fall back to verifying in place."""

from __future__ import annotations

import pytest

from torch_mlir import ir

from torchneuron.compiler import verify
from torchneuron.compiler.errors import CompileError
from torchneuron.dialects import make_context
from torchneuron.dialects.common import memref_info_cache

_VALID = """
func.func @f(%x: memref<128x64xf32, "hbm">) {
  %a = "nisa.alloc"() {memory = "sbuf", address = 0 : i64} : () -> memref<128x64xf32, "sbuf">
  "nisa.dma"(%a, %x) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
  return
}
"""
# An activation at the FX node "exp_1", made to read HBM (which only DMA touches) once
# parsed: the parser verifies what it reads.
_INVALID = """
func.func @f(%x: memref<128x64xf32, "hbm">) {
  %a = "nisa.alloc"() {memory = "sbuf", address = 0 : i64} : () -> memref<128x64xf32, "sbuf">
  "nisa.activation"(%a, %a) {engine = "act", func = "exp", scale = 1.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "sbuf">) -> () loc("exp_1")
  return
}
"""
_LOCATION = 'loc("exp_1")'
_MESSAGE = "'nisa.activation' op src is in hbm; act may use src only in sbuf, psum"


def _verdict_of(text: str):
    """What verify_concurrently reports for the module `text`: None, or the CompileError's
    (message, location), or the MLIRError's first diagnostic when it verified in place."""
    with make_context(), memref_info_cache():
        module = ir.Module.parse(text)
        for func in module.body.operations:
            block = func.regions[0].blocks[0]
            for op in block.operations:
                if op.operation.name == "nisa.activation":
                    op.operation.operands[1] = block.arguments[0]
        try:
            wait = verify.verify_concurrently(module, "isa")
            wait()
        except CompileError as exc:
            return exc.message, exc.location
        except ir.MLIRError as exc:
            first = exc.error_diagnostics[0]
            return first.message, str(first.location)
    return None


def test_valid_program_passes():
    assert _verdict_of(_VALID) is None


@pytest.mark.skipif(verify.usable_cores() < 2 or not hasattr(verify.os, "fork"),
                    reason="verified in place on this machine")
def test_child_reports_the_first_diagnostic_with_its_location(monkeypatch):
    forks = []
    real_fork = verify.os.fork
    monkeypatch.setattr(verify.os, "fork", lambda: forks.append(1) or real_fork())
    message, location = _verdict_of(_INVALID)
    assert forks, "the program was not verified by a child"
    assert message == _MESSAGE
    assert location == _LOCATION


def test_in_place_on_one_core_gives_the_same_diagnostic(monkeypatch):
    monkeypatch.setattr(verify, "usable_cores", lambda: 1)
    monkeypatch.setattr(verify.os, "fork", lambda: pytest.fail("forked on one core"))
    assert _verdict_of(_INVALID) == (_MESSAGE, _LOCATION)
    assert _verdict_of(_VALID) is None


def test_several_functions_are_verified_in_place(monkeypatch):
    monkeypatch.setattr(verify.os, "fork", lambda: pytest.fail("forked for two functions"))
    two = _INVALID + _VALID.replace("@f", "@g")
    assert _verdict_of(two) == (_MESSAGE, _LOCATION)


@pytest.mark.skipif(verify.usable_cores() < 2 or not hasattr(verify.os, "fork"),
                    reason="verified in place on this machine")
def test_child_that_dies_before_reporting_is_replaced_by_verifying_in_place(monkeypatch):
    """The child's report cannot be made (pickling fails there): it exits with nothing
    sent, and the parent verifies the program itself, reaching the same verdict."""
    def no_pickle(*args, **kwargs):
        raise RuntimeError("no report")
    monkeypatch.setattr(verify.pickle, "dumps", no_pickle)
    assert _verdict_of(_INVALID) == (_MESSAGE, _LOCATION)
    assert _verdict_of(_VALID) is None


@pytest.mark.skipif(verify.usable_cores() < 2 or not hasattr(verify.os, "fork"),
                    reason="verified in place on this machine")
def test_child_that_hangs_is_killed_and_replaced_by_verifying_in_place(monkeypatch):
    """A child that never answers (its report waits forever) is killed once the time is
    up, and the parent reaches the verdict itself."""
    import time

    monkeypatch.setattr(verify.pickle, "dumps", lambda *a, **k: time.sleep(3600))
    monkeypatch.setattr(verify, "CHILD_TIMEOUT_S", 0.5)
    start = time.monotonic()
    assert _verdict_of(_INVALID) == (_MESSAGE, _LOCATION)
    assert time.monotonic() - start < 30


def test_fork_failure_verifies_in_place(monkeypatch):
    """A process that cannot fork (no memory for the child's page tables) verifies the
    program itself instead of failing the compile."""
    def no_fork():
        raise OSError(12, "Cannot allocate memory")
    monkeypatch.setattr(verify, "usable_cores", lambda: 2)
    monkeypatch.setattr(verify.os, "fork", no_fork)
    assert _verdict_of(_INVALID) == (_MESSAGE, _LOCATION)
    assert _verdict_of(_VALID) is None
