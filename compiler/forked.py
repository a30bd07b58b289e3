"""Work on the machine's second core: a function run by a forked child of the compiling
process, its result sent back through a pipe.

The compiler is Python, and a program of tens of thousands of instructions takes Python
time per instruction in every pass. Work that only reads the program (verifying it, encoding
what the NEFF takes of it before it is scheduled) can run beside the passes that go on in
the parent: the child's module is its copy of the parent's, made at the fork. The child does
nothing but call the function, send what it returns (pickled) and exit without running the
parent's cleanup.

Where fork is missing, the process may use one core only, the pipe or the child cannot be
made, `fork_call` returns None and the caller does the work itself. A child that dies or
fails before sending, or sends nothing within CHILD_TIMEOUT_S (stuck on a lock another thread
held at the fork, say; it is killed), makes `ForkedCall.result` raise `ChildFailed`: the
caller then does the work itself, which is always correct, only slower.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import threading
import time
from typing import Any, Callable

# Far beyond any child's work (verifying GPT-2 small's program: about a second).
CHILD_TIMEOUT_S = 60.0


class ChildFailed(Exception):
    """The child sent no result: it died, raised, or ran out of time."""


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class ForkedCall:
    """A function running in a forked child; `result` waits for what it returned."""

    def __init__(self, pid: int, read_end: int):
        self._pid, self._read_end = pid, read_end
        self._outcome: tuple[bool, Any] | None = None

    def result(self) -> Any:
        """The function's return value; raises ChildFailed where the child sent none (the
        exception the function raised in the child is not re-raised: the caller redoes the
        work, which raises it where it belongs)."""
        if self._outcome is None:
            self._outcome = self._receive()
        sent, value = self._outcome
        if not sent:
            raise ChildFailed(value)
        return value

    def discard(self) -> None:
        """No result is wanted (the compile failed first): the child, if it has not sent
        its result, is killed and collected."""
        if self._outcome is not None:
            return
        self._outcome = (False, "discarded")
        try:
            os.kill(self._pid, signal.SIGKILL)
        except OSError:
            pass
        os.close(self._read_end)
        self._reap()

    def _reap(self) -> None:
        # The child's exit unmaps its copy of this process (milliseconds): collected aside.
        threading.Thread(target=os.waitpid, args=(self._pid, 0), daemon=True,
                         name="torchneuron-child-reaper").start()

    def _receive(self) -> tuple[bool, Any]:
        chunks, deadline = [], time.monotonic() + CHILD_TIMEOUT_S
        timed_out = False
        with os.fdopen(self._read_end, "rb") as pipe:
            while True:
                ready, _, _ = select.select([pipe], [], [],
                                            max(0.0, deadline - time.monotonic()))
                if not ready:       # hung: not waited for any longer
                    os.kill(self._pid, signal.SIGKILL)
                    timed_out = True
                    break
                chunk = os.read(pipe.fileno(), 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        self._reap()
        if timed_out:
            return False, f"no result within {CHILD_TIMEOUT_S} s"
        try:
            kind, value = pickle.loads(b"".join(chunks))
        except Exception:
            return False, "the child exited without a result"
        if kind != "returned":
            return False, value
        return True, value


def fork_call(fn: Callable[[], Any]) -> ForkedCall | None:
    """`fn()` started in a forked child, or None where no child can run it beside this
    process (see the module docstring)."""
    if not hasattr(os, "fork") or usable_cores() < 2:
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None
    if pid == 0:   # the child: call, send, exit without cleanup
        status = 0
        try:
            os.close(read_end)
            try:
                message = ("returned", fn())
            except Exception as exc:
                message = ("raised", f"{type(exc).__name__}: {exc}")
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(pickle.dumps(message))
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    return ForkedCall(pid, read_end)
