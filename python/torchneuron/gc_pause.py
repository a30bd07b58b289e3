"""Python's cycle collector held off around work that allocates many short-lived objects.

The collector's full collections walk every tracked object of the process -- in a
torch.compile process, PyTorch's and Dynamo's too -- and they are triggered by allocation
counts, so a compilation or a checked simulation, each allocating hundreds of thousands of
objects, set them off over and over: a quarter of an encoder layer's compile time (its two
graphs: 2.5 s with the collector, 1.9 s without) and of its first simulated run. What such
work leaves in reference cycles is little (compiling a GPT-2 graph: about 7,500 objects,
12 MB), collected at the next collection after it."""

from __future__ import annotations

import contextlib
import gc


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
