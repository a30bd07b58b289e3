"""Where a replay's wall time goes: bench/sim_speed.py's programs compiled, then their replayed
instructions timed one by one (summed per opcode), against the whole replay run one after
another and on two host threads (sim/host_threads.py), in one process.

    .venv/bin/python bench/sim_breakdown.py

The per-opcode sums include each step's Python call; "one thread" and "two threads" are
medians of whole replays without the call path around them (inputs in, outputs out).
"""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_speed import median_seconds, workloads  # noqa: E402

from torchneuron import backend  # noqa: E402
from torchneuron.sim.simulator import blas_single_thread  # noqa: E402

REPEATS = 9


def programs():
    """sim_speed.py's programs, each once (its fp32-eager GEMM row compiles the same graph)."""
    for name, fn, inputs, _ in workloads(quick=False):
        if "eager run in fp32" not in name:
            yield name, fn, inputs


def _median_ms(fn) -> float:
    return 1e3 * median_seconds(fn, REPEATS)


def main() -> None:
    for name, fn, inputs in programs():
        compiled = torch.compile(fn, backend="neuron")
        with torch.no_grad():
            compiled(*inputs)
            compiled(*inputs)                   # the replay is built
        graph = backend.compiled_graphs()[-1]
        replay = graph.program.prepared(graph.device.target).replay
        if replay is None:
            print(f"{name}: no replay")
            continue
        per_opcode: collections.Counter = collections.Counter()
        count = collections.Counter(ins.opcode.name for ins in replay.order)

        def one_by_one():
            replay.scans.run += 1
            for ins, step in zip(replay.order, replay.steps):
                start = time.perf_counter()
                step()
                per_opcode[ins.opcode.name] += time.perf_counter() - start

        def sequential():
            replay.scans.run += 1
            for step in replay.steps:
                step()

        def threaded():
            replay.scans.run += 1
            replay.runner.try_run()

        with blas_single_thread(), np.errstate(all="ignore"):
            for _ in range(REPEATS):
                one_by_one()
            one = _median_ms(sequential)
            two = _median_ms(threaded) if replay.runner is not None else None
        print(f"{name}: {len(replay.order)} instructions")
        for opcode, seconds in per_opcode.most_common():
            ms = 1e3 * seconds / REPEATS
            print(f"  {opcode:<22} {count[opcode]:6d}  {ms:8.2f} ms  "
                  f"{1e3 * ms / count[opcode]:8.2f} us each")
        print(f"  one thread {one:8.2f} ms   two threads "
              + (f"{two:8.2f} ms" if two is not None else "   (not used: too little to split)"))


if __name__ == "__main__":
    main()
