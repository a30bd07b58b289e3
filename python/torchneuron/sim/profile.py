"""What a simulated run reports: time, per-engine/queue activity, bytes, FLOPs, the roofline
bound, a trace and a timeline picture."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from typing import NamedTuple

from torchneuron.cost_model import PE_RATE_CLASSES
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
    opcodes: dict[str, int] = field(default_factory=dict)   # instruction mix: opcode -> count

    @property
    def is_dma(self) -> bool:
        return self.name not in ENGINE_STREAMS


@dataclass(frozen=True)
class Roofline:
    """The roofline bound of one program on one target (DESIGN.md, "Correctness, performance
    and honesty"): `bound_ns = max(compute_bound_ns, memory_bound_ns)`.

    - `flops`: PE FLOPs of all matmuls (2*K*M*N each); `flops_by_class` splits them by the PE
      rate they run at ("bf16" = the bf16/fp16 rate, "fp32" = peak / pe_fp32_slowdown, "fp8"
      = peak x pe_fp8_speedup, only when both inputs are fp8; see costs.matmul_rate_class).
    - `compute_bound_ns` = sum over classes of flops / that class's peak rate.
    - `compulsory_bytes`: bytes of every input, constant and output tensor, each moved once;
      `memory_bound_ns` = compulsory_bytes / the core's HBM bandwidth
      (`Target.hbm_bytes_per_ns`).
    - `binding`: "compute" or "memory" (whichever term is larger; "none" when both are 0).
    - `efficiency` = bound / simulated time, `ratio` = simulated time / bound. For a run that
      took no simulated time both are nan; for a zero bound `ratio` is inf.
    """
    flops: int
    flops_by_class: dict[str, int]
    compulsory_bytes: int
    compute_bound_ns: float
    memory_bound_ns: float
    bound_ns: float
    binding: str
    simulated_ns: float
    efficiency: float
    ratio: float


@dataclass
class Profile:
    """The result of simulating one program.

    `streams` holds one `StreamStats` per engine (pe, act, dve, pool, sp -- always present)
    and per DMA queue the program uses, in that order. Busy time of a DMA queue is the time
    it spends transferring (the fixed latency overlaps other work and is not counted).
    `pe_flops_by_class` splits `pe_flops` by PE rate class (see `Roofline`);
    `compulsory_bytes` is what `Roofline.compulsory_bytes` says.
    """
    program: str
    target: Target
    total_ns: float = 0.0
    streams: dict[str, StreamStats] = field(default_factory=dict)
    opcode_counts: dict[str, int] = field(default_factory=dict)
    pe_flops: int = 0
    pe_flops_by_class: dict[str, int] = field(default_factory=dict)
    compulsory_bytes: int = 0
    events: list[TraceEvent] = field(default_factory=list, repr=False)

    def copy(self) -> "Profile":
        """An independent copy (the events themselves are immutable and shared)."""
        streams = {name: StreamStats(s.name, s.instructions, s.busy_ns, s.dma_bytes,
                                     dict(s.opcodes)) for name, s in self.streams.items()}
        return dataclasses.replace(self, streams=streams, opcode_counts=dict(self.opcode_counts),
                                   pe_flops_by_class=dict(self.pe_flops_by_class),
                                   events=list(self.events))

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

    @property
    def dma_bytes_per_ns(self) -> float:
        """Achieved DMA bandwidth: all bytes moved / simulated time (B/ns = GB/s)."""
        return self.dma_bytes / self.total_ns if self.total_ns else 0.0

    def roofline(self) -> Roofline:
        """The program's roofline bound and how close the simulated time came to it."""
        t = self.target
        compute_ns = sum(flops / t.pe_peak_flops_per_ns(PE_RATE_CLASSES[cls])
                         for cls, flops in self.pe_flops_by_class.items())
        memory_ns = self.compulsory_bytes / t.hbm_bytes_per_ns
        bound = max(compute_ns, memory_ns)
        binding = "none" if bound == 0 else ("compute" if compute_ns >= memory_ns else "memory")
        sim = self.total_ns
        if sim > 0:
            efficiency = bound / sim
            ratio = sim / bound if bound > 0 else math.inf
        else:
            efficiency = ratio = math.nan
        return Roofline(flops=self.pe_flops, flops_by_class=dict(self.pe_flops_by_class),
                        compulsory_bytes=self.compulsory_bytes, compute_bound_ns=compute_ns,
                        memory_bound_ns=memory_ns, bound_ns=bound, binding=binding,
                        simulated_ns=sim, efficiency=efficiency, ratio=ratio)

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

    def report(self) -> str:
        """The full profile (what `neuron-profile` and `neuron-run --profile` print): per
        engine/queue busy time, utilisation, instruction count and mix; DMA bytes and achieved
        bandwidth in total and per queue; PE FLOPs; the roofline bound, which term binds, and
        simulated time / bound."""
        t = self.target
        util = self.utilisation
        lines = [f"program: {self.program} on {t.name} ({t.core})",
                 f"simulated time: {self.total_us:.3f} us ({self.instruction_count} "
                 "instructions)", "",
                 f"{'engine/queue':<13}{'busy us':>11}{'util %':>8}{'instrs':>8}  "
                 "instruction mix"]
        for name, st in self.streams.items():
            mix = ", ".join(f"{op} {n}" for op, n in
                            sorted(st.opcodes.items(), key=lambda kv: (-kv[1], kv[0])))
            lines.append(f"{name:<13}{st.busy_ns / 1000.0:>11.3f}{100.0 * util[name]:>8.1f}"
                         f"{st.instructions:>8}  {mix or '-'}")
        lines.append("")
        roof = self.roofline()
        compulsory = (f", {self.dma_bytes / self.compulsory_bytes:.2f}x the compulsory bytes"
                      if self.compulsory_bytes else "")
        lines.append(f"DMA: {self.dma_bytes} bytes in {self.total_us:.3f} us = "
                     f"{self.dma_bytes_per_ns:.2f} GB/s achieved (core peak "
                     f"{t.dma_bytes_per_ns:.1f} GB/s){compulsory}")
        queues = [st for st in self.streams.values() if st.is_dma]
        if queues:
            lines.append(f"  {'queue':<8}{'bytes':>14}{'busy us':>11}{'GB/s (run)':>12}"
                         f"{'GB/s (busy)':>13}")
            for st in queues:
                run_bw = st.dma_bytes / self.total_ns if self.total_ns else 0.0
                busy_bw = st.dma_bytes / st.busy_ns if st.busy_ns else 0.0
                lines.append(f"  {st.name:<8}{st.dma_bytes:>14}{st.busy_ns / 1000.0:>11.3f}"
                             f"{run_bw:>12.2f}{busy_bw:>13.2f}")
        by_class = ", ".join(f"{cls} {f / 1e9:.6g}" for cls, f in
                             sorted(roof.flops_by_class.items()))
        lines.append(f"PE: {roof.flops / 1e9:.6g} GFLOP{f' ({by_class})' if by_class else ''}, "
                     f"{100.0 * util.get('pe', 0.0):.1f}% busy, "
                     f"{100.0 * self.pe_peak_fraction:.1f}% of bf16 peak "
                     f"({t.pe_peak_flops_per_ns(2) / 1e3:.1f} TFLOP/s)")
        lines.append(f"roofline: compute {roof.compute_bound_ns / 1000.0:.3f} us, memory "
                     f"{roof.memory_bound_ns / 1000.0:.3f} us ({roof.compulsory_bytes} "
                     f"compulsory bytes at {t.hbm_bytes_per_ns:.1f} GB/s) -> bound "
                     f"{roof.bound_ns / 1000.0:.3f} us, "
                     + (f"{roof.binding}-bound" if roof.binding != "none" else "no work"))
        if math.isnan(roof.ratio):
            lines.append("simulated / bound: n/a (no simulated time)")
        else:
            lines.append(f"simulated / bound: {roof.ratio:.2f}x (efficiency "
                         f"{100.0 * roof.efficiency:.1f}%)")
        return "\n".join(lines)

    def write_timeline_png(self, path: str | os.PathLike) -> None:
        """A timeline picture of the run (one row per engine and DMA queue, one bar per
        instruction coloured by opcode). Needs matplotlib, imported only here."""
        from torchneuron.sim.timeline import write_timeline_png

        write_timeline_png(self, path)

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
            # dur as a difference of the rounded microsecond times keeps ts + dur of one
            # event at or before the next event's ts on the same track.
            ts = e.start_ns / 1000.0
            events.append({"name": e.opcode, "cat": e.stream, "ph": "X", "pid": 0,
                           "tid": tids[e.stream], "ts": ts,
                           "dur": max(e.end_ns / 1000.0 - ts, 0.0), "args": args})
        return {"traceEvents": events, "displayTimeUnit": "ns"}

    def write_chrome_trace(self, path: str | os.PathLike) -> None:
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)
