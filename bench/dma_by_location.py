"""DMA bytes of a compiled program per source location (the FX node a kernel was formed
around), loads and stores apart, and the part of the loads that DMA broadcasts to every
partition (a bias or a norm's gamma and beta read by each of 128 partitions). With
`--per-tensor`, per HBM tensor instead: its size, the bytes loaded from and stored to it,
what of that is beyond compulsory (an input, output or constant moved once; a scratch
tensor's every byte), and the locations that move it.

    TORCHNEURON_DUMP_DIR=/tmp/dump TORCHNEURON_CACHE_DIR=off \\
        .venv/bin/python bench/perf.py --only encoder_fwd --no-inductor
    .venv/bin/python bench/dma_by_location.py /tmp/dump/graph0_forward.neff
    .venv/bin/python bench/dma_by_location.py --per-tensor /tmp/dump/graph0_forward.neff

docs/perf.md's per-kernel DMA figures for encoder_fwd come from this.
"""

from __future__ import annotations

import argparse
import collections
import re

from torchneuron import runtime
from torchneuron.format import isa


def _load(path: str):
    with open(path, "rb") as f:
        return runtime.load(f.read())


def _dmas(program):
    """The DMA instructions of `program`, as the simulator prepared them."""
    for stream in program.prepared(program.target).streams:
        for ins in stream.instrs:
            if ins.opcode == isa.Opcode.DMA:
                yield ins


def dma_bytes(path: str) -> dict[str, collections.Counter]:
    """{location: Counter(load=..., store=..., broadcast=...)} of the program at `path`."""
    by_location: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for ins in _dmas(_load(path)):
        dst, src = ins.ops[0], ins.ops[1]
        counts = by_location[ins.location]
        if src.memory == isa.Memory.HBM:
            counts["load"] += dst.nbytes
            if dst.partitions > 1 and src.strides[0] == 0:
                counts["broadcast"] += dst.nbytes
        else:
            counts["store"] += dst.nbytes
    return by_location


_NODE = re.compile(r'loc\("([^"]*)"')      # a location's FX node name


def dma_bytes_per_tensor(path: str) -> tuple[list, dict[int, collections.Counter],
                                             dict[int, set]]:
    """(the program's tensors, {tensor id: Counter(load=..., store=...)}, {tensor id: the
    FX node names (or locations) of the DMAs that move it})."""
    program = _load(path)
    moved: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    where: dict[int, set] = collections.defaultdict(set)
    for ins in _dmas(program):
        dst, src = ins.ops[0], ins.ops[1]
        for operand, kind in ((src, "load"), (dst, "store")):
            if operand.memory == isa.Memory.HBM:
                moved[operand.tensor][kind] += dst.nbytes
                name = _NODE.match(ins.location)
                where[operand.tensor].add(name.group(1) if name else ins.location)
    return program.neff.tensors, moved, where


def print_per_tensor(path: str) -> None:
    tensors, moved, where = dma_bytes_per_tensor(path)
    print(f"{'tensor':<10} {'kind':<8} {'shape':<22} {'MB':>7} {'load':>7} {'store':>7} "
          f"{'beyond':>7}  locations")
    beyond_total = 0
    for t in tensors:
        load, store = moved[t.id]["load"], moved[t.id]["store"]
        if not load and not store:
            continue
        compulsory = t.nbytes if t.kind in ("input", "output", "constant") else 0
        beyond = load + store - compulsory
        beyond_total += beyond
        print(f"{t.name:<10} {t.kind:<8} {str(list(t.shape)):<22} {t.nbytes / 1e6:7.2f} "
              f"{load / 1e6:7.2f} {store / 1e6:7.2f} {beyond / 1e6:7.2f}  "
              f"{', '.join(sorted(where[t.id]))}")
    print(f"beyond compulsory {beyond_total / 1e6:.2f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("neff", help="a compiled program (.neff)")
    parser.add_argument("--per-tensor", action="store_true",
                        help="bytes per HBM tensor instead of per location")
    args = parser.parse_args()
    if args.per_tensor:
        print_per_tensor(args.neff)
        return
    by_location = dma_bytes(args.neff)
    print(f"{'load MB':>9} {'of it broadcast':>15} {'store MB':>9}  location")
    for location, counts in sorted(by_location.items(),
                                   key=lambda item: -sum(item[1][k] for k in ("load", "store"))):
        print(f"{counts['load'] / 1e6:9.2f} {counts['broadcast'] / 1e6:15.2f} "
              f"{counts['store'] / 1e6:9.2f}  {location}")
    total = sum(c["load"] + c["store"] for c in by_location.values())
    print(f"total {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
