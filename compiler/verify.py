"""Verifying a stage's program on the machine's second core.

MLIR's verifier calls back into Python for every instruction op (each `nisa` op's checks are
Python, dialects/nisa.py): on a program of tens of thousands of instructions it takes as long
as writing the NEFF from it (mlp_fwd's dumped graph: 40-52 ms against 90 ms; GPT-2 small's:
0.7-1.0 s against 1.1 s). Both only read the program, so a forked child verifies it while the
compiling process goes on; the child reports the first diagnostic (message and location) or
nothing through a pipe. Where fork is missing or the process may use one core only, the
program is verified in place, as before.

The child does nothing but verify and report: the module is its copy of the parent's, made
at the fork, and it exits without running the parent's cleanup. MLIR verifies a module's
functions in parallel only when there are several, on threads a forked child does not have:
a module of more than one function is verified in place.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import threading
import time
from typing import Callable

from torch_mlir import ir

from torchneuron.compiler.errors import CompileError, stage_error


# Far beyond any verification's time (GPT-2 small's program: about a second); a child that
# has not answered by then (stuck on a lock another thread held at the fork, say) is killed
# and the program verified in place, which is always correct, only slower.
CHILD_TIMEOUT_S = 60.0


def usable_cores() -> int:
    """The cores this process may run on, which children compiling beside it share."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _functions(module: ir.Module) -> int:
    return sum(1 for _ in module.body.operations)


def verify_concurrently(module: ir.Module, stage: str) -> Callable[[], None]:
    """Start verifying `module` (the result of `stage`); the returned function waits for the
    verdict and raises the CompileError `stage_error` makes of the first diagnostic. Raises
    ir.MLIRError right away where the program is verified in place."""
    pid, read_end = _fork_verifier(module, stage) \
        if hasattr(os, "fork") and usable_cores() >= 2 and _functions(module) == 1 \
        else (None, None)
    if pid is None:
        module.operation.verify()
        return lambda: None

    def verdict() -> None:
        chunks, deadline = [], time.monotonic() + CHILD_TIMEOUT_S
        with os.fdopen(read_end, "rb") as pipe:
            while True:
                ready, _, _ = select.select([pipe], [], [],
                                            max(0.0, deadline - time.monotonic()))
                if not ready:       # hung: its verdict is not waited for any longer
                    os.kill(pid, signal.SIGKILL)
                    chunks = []
                    break
                chunk = os.read(pipe.fileno(), 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        # The child's exit unmaps its copy of this process (milliseconds): collected aside.
        threading.Thread(target=os.waitpid, args=(pid, 0), daemon=True,
                         name="torchneuron-verify-reaper").start()
        try:
            kind, report = pickle.loads(b"".join(chunks))
        except Exception:
            kind, report = None, None
        if kind != "verified":
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


def _fork_verifier(module: ir.Module, stage: str) -> tuple[int | None, int | None]:
    """(pid, read end of its pipe) of a child verifying `module`, which sends ("verified",
    None or the (message, location) of `stage_error`'s CompileError) and exits; (None, None)
    where no pipe or child can be made (out of file descriptors, memory or processes)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return None, None
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None, None
    if pid == 0:   # the child: verify, report, exit without cleanup
        status = 0
        try:
            os.close(read_end)
            try:
                module.operation.verify()
                report = None
            except ir.MLIRError as exc:
                error = stage_error(stage, exc)
                report = (error.message, error.location)
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(pickle.dumps(("verified", report)))
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    return pid, read_end
