"""A training graph's backward, compiled on the machine's second core while its forward
compiles.

AOTAutograd splits the joint graph into a forward and a backward graph before it compiles
either, then compiles the forward, and the backward only when it is first needed (the first
backward call; right away under `force_non_lazy_backward_lowering`). The backend wraps the
partition function (AOTAutograd's own default, unchanged) to see the backward graph there,
and when the forward's compile starts it forks a child that compiles the backward through
the same code path (`backend.compile_fx_graph`, the same options) while this process
compiles the forward. The child sends back, for each partition it compiled, keyed by the
partition's compile-cache key (its FX code, inputs, constants and source lines, the library
versions, the target and options: `backend._graph_cache_key`), the NEFF, what compiling it
took and the log records the compile emitted.

When AOTAutograd asks for the backward, the backend waits for the child, partitions the
graph as always, and loads each partition whose key the child answered from that NEFF
instead of compiling it again (its log records are emitted then, here). Everything else is
compiled here as before: a partition the child failed on (so that its error, fallback or
strict-mode exception, arises here), a key that differs, a child that died or sent nothing
readable, or one that has not answered `wait_seconds` after it is asked for (then it is
killed). The programs are the same NEFFs either way; only where the work runs changes.

Like the importer's and the verifier's children, the child exists only where `os.fork` does
and two cores are usable. It runs at a lower priority (BACKGROUND_NICENESS), so that where it
and this process want the same core, the forward's compile goes first. A training graph that
is only ever run forward (an evaluation without torch.no_grad) still shares the machine with
a backward compile it never uses: its forward compiled in 0.96-1.23 s against 0.84-1.07 s
without the child (the MLP benchmark's forward, three runs each). `TORCHNEURON_EARLY_BACKWARD=0`
compiles every backward when it is asked for, in this process.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import dataclasses
import logging
import os
import pickle
import signal
import sys
import threading
import time
import weakref
from typing import Callable

from torchneuron import config

log = logging.getLogger("torchneuron")

# A child that has not answered this long after the backward is asked for is taken to be
# stuck (a lock some other thread held at the fork, say) and killed. The backward's compile
# takes about as long as the forward's, which has run meanwhile, so a wait beyond a few
# times that, and beyond a minimum that covers a slow machine, is not a compile any more.
MIN_WAIT_S = 120.0
WAIT_PER_FORWARD_SECOND = 4.0
# How much the child yields to this process where both want one core (os.nice).
BACKGROUND_NICENESS = 10


@dataclasses.dataclass
class Compiled:
    """One partition as the child compiled it."""
    neff: bytes
    stage_seconds: dict[str, float]
    cache_status: str
    original_compile_seconds: float | None
    records: list[logging.LogRecord]      # emitted while it compiled, formatted


def usable() -> bool:
    """Whether backwards are compiled early here: the knob, fork, and two usable cores."""
    from torchneuron.compiler.verify import usable_cores

    return config.EARLY_BACKWARD.get() and hasattr(os, "fork") and usable_cores() >= 2


class EarlyCompile:
    """A forked child compiling a backward graph; `results` waits for what it compiled."""

    def __init__(self, pid: int, read_end: int):
        self.pid = pid
        self.started = time.perf_counter()
        self._chunks: list[bytes] = []
        self._done = threading.Event()
        # (Held while the child is reaped: a kill after that would hit whatever process
        # got its pid next.)
        self._reaping = threading.Lock()
        self._reaped = False
        # Read as the child writes, so that a child whose backward is never asked for (a
        # training graph only ever run forward) is not left blocked on a full pipe.
        self._reader = threading.Thread(target=self._read, args=(read_end,), daemon=True,
                                        name="torchneuron-early-backward")
        self._reader.start()
        _running.add(self)

    def _read(self, read_end: int) -> None:
        try:
            with os.fdopen(read_end, "rb") as pipe:
                while chunk := pipe.read(1 << 20):
                    self._chunks.append(chunk)
        except OSError:
            self._chunks = []
        finally:
            with self._reaping:
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(self.pid, 0)
                self._reaped = True
            self._done.set()
            _running.discard(self)

    def kill(self) -> None:
        with self._reaping:
            if not self._reaped:
                with contextlib.suppress(ProcessLookupError, OSError):
                    os.kill(self.pid, signal.SIGKILL)

    def results(self, wait_seconds: float) -> dict[str, Compiled]:
        """Per cache key, the partitions the child compiled; {} when it died, sent nothing
        readable, or had not finished within `wait_seconds` (it is then killed)."""
        if not self._done.wait(wait_seconds):
            log.warning("torchneuron: the early compile of a backward graph (process %d) has "
                        "not finished after %.0f s; killed, the backward is compiled here",
                        self.pid, time.perf_counter() - self.started)
            self.kill()
            self._done.wait()
            return {}
        try:
            kind, compiled = pickle.loads(b"".join(self._chunks))
        except Exception:
            return {}
        self._chunks = []
        return compiled if kind == "compiled" else {}


# Children still running, killed when the process exits (their work is of no more use).
_running: "weakref.WeakSet[EarlyCompile]" = weakref.WeakSet()


@atexit.register
def _kill_running() -> None:
    for child in list(_running):
        child.kill()


def start(compile_backward: Callable[[], None]) -> EarlyCompile | None:
    """Fork a child that runs `compile_backward()` with `recording()` active and sends what
    it recorded; None where no child can be made (no pipe, no process)."""
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
    if pid == 0:            # the child: compile, send, exit without the parent's cleanup
        status = 0
        try:
            os.close(read_end)
            _child(compile_backward, write_end)
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    return EarlyCompile(pid, read_end)


def _child(compile_backward: Callable[[], None], write_end: int) -> None:
    import faulthandler

    import torch

    faulthandler.disable()          # a crash here is the parent's to notice (no results)
    # Background work: where the forward's compile (or anything else of the user's) wants
    # the same core, it goes first. A graph only ever run forward (an evaluation without
    # torch.no_grad) pays for the backward's compile only in the contention that is left.
    with contextlib.suppress(OSError):
        os.nice(BACKGROUND_NICENESS)
    # PyTorch's thread pool, started in the parent, is not in this process: its ops must run
    # on this thread (the compile folds constants and hashes tensors with them).
    torch.set_num_threads(1)
    # Log records go back to the parent, which emits them when it uses the compiled
    # partition; none is written by this process (the parent's handlers were copied).
    handler = _Collect()
    logger = logging.getLogger("torchneuron")
    logger.handlers = [handler]
    logger.propagate = False
    compiled: dict[str, Compiled] = {}
    token = _recording.set((compiled, handler.records))
    try:
        compile_backward()
    except BaseException:           # what compiled before the error is still sent
        pass
    finally:
        _recording.reset(token)
    with os.fdopen(write_end, "wb") as pipe:
        pipe.write(pickle.dumps(("compiled", compiled)))


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        # Formatted here: a record's arguments need not pickle.
        record.msg = record.getMessage()
        record.args = None
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        self.records.append(record)


# In the child, while compiling: (compiled partitions by key, the log records so far).
_recording: contextvars.ContextVar = contextvars.ContextVar("torchneuron_early_recording",
                                                            default=None)
# In the parent, while the backward is compiled: the child's partitions by key.
_precompiled: contextvars.ContextVar = contextvars.ContextVar("torchneuron_early_precompiled",
                                                             default=None)


def recording() -> tuple[dict, list] | None:
    """In the child: the table to record compiled partitions in, and the log records so far
    (the ones a partition's compile emitted are those added while it ran)."""
    return _recording.get()


@contextlib.contextmanager
def precompiled(compiled: dict[str, Compiled]):
    """While the block runs, `take(key)` hands out the child's partitions."""
    token = _precompiled.set(dict(compiled))
    try:
        yield
    finally:
        _precompiled.reset(token)


def active() -> bool:
    return bool(_precompiled.get())


def take(key: str | None) -> Compiled | None:
    """The child's partition of cache key `key` (once), emitting its log records here."""
    table = _precompiled.get()
    if not table or key is None:
        return None
    found = table.pop(key, None)
    if found is not None:
        for record in found.records:
            logger = logging.getLogger(record.name)
            if logger.isEnabledFor(record.levelno):
                logger.handle(record)
    return found


def wait_seconds(forward_seconds: float) -> float:
    return max(MIN_WAIT_S, WAIT_PER_FORWARD_SECOND * forward_seconds)
