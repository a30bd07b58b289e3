"""Verifying a stage's program on the machine's second core.

MLIR's verifier calls back into Python for every instruction op (each `nisa` op's checks are
Python, dialects/nisa.py): on a program of tens of thousands of instructions it takes as long
as writing the NEFF from it (mlp_fwd's dumped graph: 40-52 ms against 90 ms; GPT-2 small's:
0.7-1.0 s against 1.1 s). Both only read the program, so a forked child (compiler/forked.py)
verifies it while the compiling process goes on; the child reports the first diagnostic
(message and location) or nothing. Where no child can run beside the process, or the child
sends no verdict, the program is verified in place, as before.

MLIR verifies a module's functions in parallel only when there are several, on threads a
forked child does not have: a module of more than one function is verified in place.
"""

from __future__ import annotations

from typing import Callable

from torch_mlir import ir

from torchneuron.compiler import forked
from torchneuron.compiler.errors import CompileError, stage_error


def _functions(module: ir.Module) -> int:
    return sum(1 for _ in module.body.operations)


def _verdict(module: ir.Module, stage: str):
    """None, or the (message, location) of the CompileError `stage_error` makes of the first
    diagnostic of verifying `module` (what the child sends)."""
    try:
        module.operation.verify()
        return None
    except ir.MLIRError as exc:
        error = stage_error(stage, exc)
        return error.message, error.location


def verify_concurrently(module: ir.Module, stage: str) -> Callable[[], None]:
    """Start verifying `module` (the result of `stage`); the returned function waits for the
    verdict and raises the CompileError `stage_error` makes of the first diagnostic. Raises
    ir.MLIRError right away where the program is verified in place."""
    call = forked.fork_call(lambda: _verdict(module, stage)) \
        if _functions(module) == 1 else None
    if call is None:
        module.operation.verify()
        return lambda: None

    def verdict() -> None:
        try:
            report = call.result()
        except forked.ChildFailed:
            # The child died or hung before reporting (killed, out of memory): verified
            # here.
            try:
                module.operation.verify()
            except ir.MLIRError as exc:
                raise stage_error(stage, exc) from None
            return
        if report is not None:
            raise CompileError(*report)
    return verdict
