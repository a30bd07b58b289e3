"""The critical path of a simulated run: the chain of instructions that set its total time.

Walking back from the instruction that finished last, each instruction started when the
latest of its conditions was met, and that condition names the step before it:
- `engine`: its engine finished the previous instruction of its stream;
- `queue`: a DMA whose transfer waited for the previous transfer on its queue to end, or
  whose descriptor waited for the previous descriptor of its queue to be issued (queues
  issue in order);
- `wait`: a semaphore wait, met when the producing instruction ended. A wait for the v-th
  increment of a semaphore is met by the increment that came v-th in time, as the simulator
  counts them.
- `start`: nothing: it began the run.
The path's steps tile the run: each step is charged the time from its predecessor's end to
its own end (a DMA's fixed latency included), so the charges add up to the total time. What
the time is charged to (a kernel's PE work, its DMA waits behind a queue, a row-wise kernel's
DVE work) is what would have to get faster for the program to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torchneuron.sim.profile import ENGINE_STREAMS, Profile, TraceEvent

# Two times closer than this (ns) are the same moment (sums of float durations).
_SAME_NS = 1e-6


@dataclass(frozen=True)
class PathStep:
    event: TraceEvent
    cause: str           # what held this instruction until it started (module docstring)
    charged_ns: float    # time from the previous step's end to this step's end


def critical_path(profile: Profile, prepared) -> list[PathStep]:
    """The run's critical path, first instruction first. `prepared`: the simulator's form of
    the program that produced `profile` (`Program.prepared(target)`)."""
    if not profile.events:
        return []
    instrs = {s.name: s.instrs for s in prepared.streams}
    by_stream: dict[str, list[TraceEvent]] = {}
    for e in profile.events:
        by_stream.setdefault(e.stream, []).append(e)
    for events in by_stream.values():
        events.sort(key=lambda e: e.index)
    # Per semaphore, the signalling instructions' events in the order their increments land.
    increments: dict[int, list[TraceEvent]] = {}
    for name, events in by_stream.items():
        for e in events:
            signal = instrs[name][e.index].signal
            if signal >= 0:
                increments.setdefault(signal, []).append(e)
    for events in increments.values():
        events.sort(key=lambda e: e.end_ns)
    latency = profile.target.dma_latency_ns

    steps: list[tuple[TraceEvent, str]] = []
    seen: set[tuple[str, int]] = set()
    event = max(profile.events, key=lambda e: (e.end_ns, e.stream, e.index))
    # (Every step goes to an instruction that ended no later; `seen` only guards against
    # zero-time instructions that end together being taken for each other's cause.)
    while event is not None and (event.stream, event.index) not in seen:
        seen.add((event.stream, event.index))
        is_dma = _engine(event) == "dma"
        previous = by_stream[event.stream][event.index - 1] if event.index else None
        cause, before = "start", None
        # (A DMA's transfer starts a fixed latency after its issue; a queue's nop at once.)
        earliest = event.issue_ns + (latency if event.opcode == "dma" else 0.0)
        if is_dma and previous is not None and event.start_ns > earliest + _SAME_NS and \
                abs(previous.end_ns - event.start_ns) <= _SAME_NS:
            cause, before = "queue", previous            # the transfer queued behind it
        else:
            for sem, value in instrs[event.stream][event.index].waits:
                producer = increments[sem][value - 1]
                if abs(producer.end_ns - event.issue_ns) <= _SAME_NS and \
                        (before is None or producer.end_ns > before.end_ns):
                    cause, before = "wait", producer
            if before is None and previous is not None:
                ready = previous.issue_ns if is_dma else previous.end_ns
                if abs(ready - event.issue_ns) <= _SAME_NS:
                    cause, before = ("queue" if is_dma else "engine"), previous
        steps.append((event, cause))
        event = before
    steps.reverse()
    path, reached = [], 0.0
    for event, cause in steps:
        path.append(PathStep(event, cause, max(event.end_ns - reached, 0.0)))
        reached = max(reached, event.end_ns)
    return path


_LOCATION = re.compile(r'loc\("([^"]+)"\("(?:[^"]*/)?([^"/]+)":(\d+)')


def source_label(location: str) -> str:
    """'addmm (model.py:12)' for an instruction's MLIR location naming an FX node and its
    source line; the location itself otherwise."""
    m = _LOCATION.match(location)
    if m:
        return f"{m.group(1)} ({m.group(2)}:{m.group(3)})"
    named = re.match(r'loc\("([^"]+)"\)$', location)
    return named.group(1) if named else (location or "?")


def _engine(event: TraceEvent) -> str:
    """The event's engine, every DMA queue counted as "dma" (as `StreamStats.is_dma`)."""
    return event.stream if event.stream in ENGINE_STREAMS else "dma"


class _Phase:
    """Consecutive path steps of one source location: when, and the time each engine took."""

    def __init__(self, label: str, begin_ns: float):
        self.label, self.begin_ns, self.end_ns = label, begin_ns, begin_ns
        self.engines: dict[str, float] = {}

    @property
    def charged_ns(self) -> float:
        return sum(self.engines.values())

    def add(self, step: PathStep) -> None:
        engine = _engine(step.event)
        self.engines[engine] = self.engines.get(engine, 0.0) + step.charged_ns
        self.end_ns = step.event.end_ns

    def merge(self, later: "_Phase") -> None:
        for engine, t in later.engines.items():
            self.engines[engine] = self.engines.get(engine, 0.0) + t
        self.end_ns = later.end_ns


def report(path: list[PathStep], total_ns: float, top: int = 12) -> str:
    """The critical path as text: its phases in time order (consecutive steps of one source
    location merged, the engines they were charged to), then the locations and engines that
    take the most time on it."""
    if not path:
        return "critical path: empty program"
    lines = [f"critical path: {len(path)} instructions over {total_ns / 1000.0:.3f} us"]
    labels = [source_label(step.event.location) for step in path]
    phases: list[_Phase] = []
    for step, label in zip(path, labels):
        if not phases or phases[-1].label != label:
            phases.append(_Phase(label, step.event.end_ns - step.charged_ns))
        phases[-1].add(step)
    # Short phases (under 1% of the time) are left out, and the phases around them merged
    # where they belong to the same location.
    shown: list[_Phase] = []
    for phase in phases:
        if phase.charged_ns < 0.01 * total_ns:
            continue
        if shown and shown[-1].label == phase.label:
            shown[-1].merge(phase)
        else:
            shown.append(phase)
    lines.append(f"  phases over 1% of the time ({len(phases)} phases in all):")
    for phase in shown:
        spent = ", ".join(f"{e} {t / 1000.0:.1f}" for e, t in
                          sorted(phase.engines.items(), key=lambda kv: -kv[1]) if t > 0)
        lines.append(f"  {phase.begin_ns / 1000.0:>10.1f} - {phase.end_ns / 1000.0:>10.1f} us  "
                     f"{phase.label}: {spent}")
    totals: dict[tuple[str, str], float] = {}
    for step, label in zip(path, labels):
        k = (label, _engine(step.event))
        totals[k] = totals.get(k, 0.0) + step.charged_ns
    _table(lines, "location / engine", totals, total_ns, top)
    # A model's repeated blocks run the same source lines under other FX node names (one
    # per layer): the same time summed per line.
    line_of = {label: label[label.index("(") + 1:-1] if label.endswith(")") and "(" in label
               else label for label, _ in totals}
    lines_total: dict[tuple[str, str], float] = {}
    for (label, engine), t in totals.items():
        k = (line_of[label], engine)
        lines_total[k] = lines_total.get(k, 0.0) + t
    if len(set(line_of.values())) < len(line_of):
        _table(lines, "source line / engine (all FX nodes of the line)", lines_total,
               total_ns, top)
    return "\n".join(lines)


def _table(lines: list[str], title: str, totals: dict, total_ns: float, top: int) -> None:
    lines.append(f"  {'us':>10}  {'share':>6}  {title}")
    for (label, engine), t in sorted(totals.items(), key=lambda kv: -kv[1])[:top]:
        share = 100.0 * t / total_ns if total_ns else 0.0
        lines.append(f"  {t / 1000.0:>10.1f}  {share:>5.1f}%  {label} / {engine}")
