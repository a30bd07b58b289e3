"""Simulator speed: wall time of simulating a compiled program against eager PyTorch on the
CPU for the same computation, side by side in one process.

    .venv/bin/python bench/sim_speed.py            # all workloads
    .venv/bin/python bench/sim_speed.py --quick    # skip the 2048^3 bf16 GEMM (eager bf16 on
                                                   # a CPU without bf16 units takes a minute)

Each workload is compiled once with torch.compile(backend="neuron") and called twice before
timing; the timed simulator call is the compiled function (inputs to HBM, every instruction
executed, outputs back). After its first call a program's calls are replays of that verified
run, built on the second call (sim/replay.py: the same instructions in the same order,
without the never-written checks the first run settled); "checked ms" is one call with
every check made, as the first call is. Eager PyTorch runs the same module/function on the
same inputs, its calls alternating with the simulator's; times are medians, "sim / eager"
the median of each pair's ratio (see `side_by_side`).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from torchneuron import backend


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_seconds(fn, repeats: int) -> float:
    return statistics.median(_seconds(fn) for _ in range(repeats))


def side_by_side(first, second, repeats: int) -> tuple[float, float, float]:
    """Median seconds of `first` and of `second`, called alternately, and the median ratio
    of the pairs. This machine's speed drifts by 2x and more over seconds (a shared host):
    alternating calls see the same drift, so their ratio holds where separate runs' do not."""
    pairs = [(_seconds(first), _seconds(second)) for _ in range(repeats)]
    return (statistics.median(a for a, _ in pairs), statistics.median(b for _, b in pairs),
            statistics.median(a / b for a, b in pairs))


class MLP(torch.nn.Module):
    """The demo model (examples/demo.py)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(256, 512)
        self.fc2 = torch.nn.Linear(512, 128)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc2(torch.relu(self.fc1(x))))


def workloads(quick: bool):
    torch.manual_seed(0)
    mlp = MLP().eval()
    x = torch.randn(64, 256)
    yield "demo MLP fp32 (64x256)", mlp, (x,), 200
    n = 2048
    a = torch.randn(n, n, dtype=torch.bfloat16)
    b = torch.randn(n, n, dtype=torch.bfloat16)
    if not quick:
        yield f"GEMM {n}^3 bf16", (lambda p, q: p @ q), (a, b), 3
    yield f"GEMM {n}^3 bf16 (eager run in fp32)", (lambda p, q: p @ q), (a, b), 7


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="skip the eager bf16 GEMM")
    args = parser.parse_args()
    print(f"{'workload':<40} {'eager ms':>10} {'simulator ms':>13} {'sim / eager':>12}  "
          f"{'checked ms':>11} {'simulated us':>12}")
    for name, fn, inputs, repeats in workloads(args.quick):
        compiled = torch.compile(fn, backend="neuron")
        with torch.no_grad():
            compiled(*inputs)                                   # compile once
            compiled(*inputs)                                   # the replay is built
            graph = backend.compiled_graphs()[-1]
            eager_inputs = inputs
            if "eager run in fp32" in name:
                eager_inputs = tuple(t.float() for t in inputs)
            sim, eager, ratio = side_by_side(lambda: compiled(*inputs),
                                             lambda: fn(*eager_inputs), repeats)
            # The same calls with every check made, as a program's first call is.
            prepared = graph.program.prepared(graph.device.target)
            replay, prepared.replay = prepared.replay, "timed with every check"
            checked = median_seconds(lambda: compiled(*inputs), repeats)
            prepared.replay = replay
        print(f"{name:<40} {eager * 1e3:10.2f} {sim * 1e3:13.2f} {ratio:11.2f}x  "
              f"{checked * 1e3:11.2f} {graph.last_profile.total_us:12.2f}")


if __name__ == "__main__":
    main()
