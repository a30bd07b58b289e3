"""Python's cycle collector kept off work that allocates many short-lived objects: paused
(`cyclic_gc_paused`), or kept from walking the objects older than the work
(`older_objects_set_aside`).

The collector's collections are set off by allocation counts, and its full ones walk every
tracked object of the process -- in a torch.compile process, PyTorch's and Dynamo's too. A
compilation or a checked simulation allocates objects per instruction and sets them off
over and over. Measured with torch imported: compile_linalg called directly (neuron-tune,
scripts) on an encoder layer's two graphs, 2.5 s with the collector and 1.9 s without; a
checked simulated run of the encoder layer, 1.26-1.43 s and 0.97-1.16 s. Inside the
backend, which already sets the process's older objects aside with gc.freeze
(`older_objects_set_aside`), the compilation's own objects still cost
collections: `bench/perf.py` compile seconds of mlp_train and encoder_fwd together,
4.1-5.1 s and 3.9-4.4 s over three runs each. What such work leaves in reference cycles is
little (compiling a GPT-2 graph: about 7,500 objects, 12 MB), collected at the next
collection after it."""

from __future__ import annotations

import contextlib
import gc
import threading


@contextlib.contextmanager
def cyclic_gc_paused():
    """The cycle collector off while the body runs, and afterwards as it was (also when the
    body raises). Another thread's pause ending first re-enables it early, which only costs
    this one the saving."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# Blocks of `older_objects_set_aside` open in the process (any thread), and whether the
# outermost one froze the heap (it found nothing frozen).
_set_aside_lock = threading.Lock()
_set_aside_depth = 0
_set_aside_froze = False


@contextlib.contextmanager
def older_objects_set_aside():
    """Within the block, Python's cycle collector leaves alone the objects that existed
    before it. A PyTorch process holds hundreds of thousands of long-lived objects, and each
    full collection that a compilation's allocations trigger walks all of them (0.3 s apiece
    here, a third of a BERT layer's compile time). `gc.freeze` sets them aside for the block
    (the compilation's own cyclic garbage is still collected) and `gc.unfreeze` hands them
    back when the last open block ends. A program that froze its heap itself is left as it
    is.

    Only the outermost block asks `gc.get_freeze_count()`, which walks every frozen object:
    a block inside another (the backend's graph compile within its AOTAutograd call, on
    the same or another thread) asked it of the whole frozen heap, 31 ms per call with
    PyTorch and Dynamo loaded, 8% of an encoder layer's compile time."""
    global _set_aside_depth, _set_aside_froze
    with _set_aside_lock:
        if _set_aside_depth == 0:
            _set_aside_froze = gc.get_freeze_count() == 0
            if _set_aside_froze:
                gc.freeze()
        _set_aside_depth += 1
    try:
        yield
    finally:
        with _set_aside_lock:
            _set_aside_depth -= 1
            if _set_aside_depth == 0 and _set_aside_froze:
                _set_aside_froze = False
                gc.unfreeze()
