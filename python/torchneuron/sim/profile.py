"""What a simulated run reports: time, per-engine/queue activity, bytes, FLOPs and a trace."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import NamedTuple

from torchneuron.target import Target

ENGINE_STREAMS = ("pe", "act", "dve", "pool", "sp")


class TraceEvent(NamedTuple):
    """One instruction's occupancy of its engine or DMA queue, in simulated ns.

    For a DMA, [start_ns, end_ns) is the transfer on the queue; `issue_ns` is when its
    descriptor was issued (its waits met), `issue_ns + dma_latency_ns` the earliest start.
    """
    stream: str
    index: int
    opcode: str
    location: str
    start_ns: float
    end_ns: float
    issue_ns: float
    nbytes: int


@dataclass
class StreamStats:
    name: str
    instructions: int = 0
    busy_ns: float = 0.0
    dma_bytes: int = 0

    @property
    def is_dma(self) -> bool:
        return self.name not in ENGINE_STREAMS


@dataclass
class Profile:
    """The result of simulating one program.

    `streams` holds one `StreamStats` per engine (pe, act, dve, pool, sp -- always present)
    and per DMA queue the program uses, in that order. Busy time of a DMA queue is the time
    it spends transferring (the fixed latency overlaps other work and is not counted).
    """
    program: str
    target: Target
    total_ns: float = 0.0
    streams: dict[str, StreamStats] = field(default_factory=dict)
    opcode_counts: dict[str, int] = field(default_factory=dict)
    pe_flops: int = 0
    events: list[TraceEvent] = field(default_factory=list, repr=False)

    @property
    def total_us(self) -> float:
        return self.total_ns / 1000.0

    @property
    def instruction_count(self) -> int:
        return sum(s.instructions for s in self.streams.values())

    @property
    def busy_ns(self) -> dict[str, float]:
        return {name: s.busy_ns for name, s in self.streams.items()}

    @property
    def utilisation(self) -> dict[str, float]:
        """Busy time / total time of each engine and queue (0 for an empty program)."""
        return {name: (s.busy_ns / self.total_ns if self.total_ns else 0.0)
                for name, s in self.streams.items()}

    @property
    def dma_bytes_per_queue(self) -> dict[str, int]:
        return {name: s.dma_bytes for name, s in self.streams.items() if s.is_dma}

    @property
    def dma_bytes(self) -> int:
        return sum(s.dma_bytes for s in self.streams.values())

    @property
    def pe_peak_fraction(self) -> float:
        """PE FLOPs executed / what the PE could do at its bf16 peak in the total time."""
        if not self.total_ns:
            return 0.0
        return self.pe_flops / (self.total_ns * self.target.pe_peak_flops_per_ns(2))

    def summary(self) -> str:
        """A human-readable table (what `neuron-run` prints)."""
        lines = [f"simulated time: {self.total_us:.3f} us "
                 f"({self.instruction_count} instructions)",
                 f"{'engine/queue':<14}{'busy us':>12}{'util %':>9}{'instrs':>9}"
                 f"{'DMA bytes':>14}"]
        util = self.utilisation
        for name, s in self.streams.items():
            dma = f"{s.dma_bytes:>14}" if s.is_dma else f"{'':>14}"
            lines.append(f"{name:<14}{s.busy_ns / 1000.0:>12.3f}{100.0 * util[name]:>9.1f}"
                         f"{s.instructions:>9}{dma}")
        lines.append(f"DMA bytes: {self.dma_bytes}")
        lines.append(f"PE: {100.0 * util.get('pe', 0.0):.1f}% busy, "
                     f"{self.pe_flops / 1e9:.3f} GFLOP, {100.0 * self.pe_peak_fraction:.1f}% "
                     f"of bf16 peak ({self.target.pe_peak_flops_per_ns(2) / 1e3:.1f} TFLOP/s)")
        mix = ", ".join(f"{op} {n}" for op, n in sorted(self.opcode_counts.items()))
        lines.append(f"instruction mix: {mix or 'none'}")
        return "\n".join(lines)

    def chrome_trace(self) -> dict:
        """The run as Chrome/Perfetto trace JSON (chrome://tracing, ui.perfetto.dev).

        One track (tid) per engine and DMA queue, named by thread_name metadata; one complete
        event ("ph": "X") per instruction, ts/dur in microseconds.
        """
        tids = {name: tid for tid, name in enumerate(self.streams)}
        events: list[dict] = [{
            "name": "process_name", "ph": "M", "pid": 0, "tid": 0,
            "args": {"name": f"{self.program} on {self.target.name} ({self.target.core})"},
        }]
        for name, tid in tids.items():
            events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid,
                           "args": {"name": name}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": tid,
                           "args": {"sort_index": tid}})
        for e in self.events:
            args = {"index": e.index, "opcode": e.opcode, "loc": e.location}
            if e.nbytes:
                args["bytes"] = e.nbytes
                args["issue_us"] = e.issue_ns / 1000.0
            events.append({"name": e.opcode, "cat": e.stream, "ph": "X", "pid": 0,
                           "tid": tids[e.stream], "ts": e.start_ns / 1000.0,
                           "dur": (e.end_ns - e.start_ns) / 1000.0, "args": args})
        return {"traceEvents": events, "displayTimeUnit": "ns"}

    def write_chrome_trace(self, path: str | os.PathLike) -> None:
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)
