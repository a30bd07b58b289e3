"""DMA bytes of a compiled program per source location (the FX node a kernel was formed
around), loads and stores apart, and the part of the loads that DMA broadcasts to every
partition (a bias or a norm's gamma and beta read by each of 128 partitions).

    TORCHNEURON_DUMP_DIR=/tmp/dump TORCHNEURON_CACHE_DIR=off \\
        .venv/bin/python bench/perf.py --only encoder_fwd --no-inductor
    .venv/bin/python bench/dma_by_location.py /tmp/dump/graph0_forward.neff

docs/perf.md's per-kernel DMA figures for encoder_fwd come from this.
"""

from __future__ import annotations

import argparse
import collections

from torchneuron import runtime
from torchneuron.format import isa


def dma_bytes(path: str) -> dict[str, collections.Counter]:
    """{location: Counter(load=..., store=..., broadcast=...)} of the program at `path`."""
    with open(path, "rb") as f:
        program = runtime.load(f.read())
    prepared = program.prepared(program.target)
    by_location: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for stream in prepared.streams:
        for ins in stream.instrs:
            if ins.opcode != isa.Opcode.DMA:
                continue
            dst, src = ins.ops[0], ins.ops[1]
            counts = by_location[ins.location]
            if src.memory == isa.Memory.HBM:
                counts["load"] += dst.nbytes
                if dst.partitions > 1 and src.strides[0] == 0:
                    counts["broadcast"] += dst.nbytes
            else:
                counts["store"] += dst.nbytes
    return by_location


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("neff", help="a compiled program (.neff)")
    args = parser.parse_args()
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
