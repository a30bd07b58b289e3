"""A timeline picture of a simulated run (PNG, matplotlib with the Agg backend).

One row per engine (pe, act, dve, pool, sp) and per DMA queue the program uses, top to
bottom in that order; one bar per instruction over [start, end) of its engine or queue,
coloured by opcode, with a legend (a DMA's wait from descriptor issue to transfer start --
fixed latency or a busy queue -- is a thin grey bar under its row); time in microseconds. The title names the program, the
target, the simulated time and the roofline efficiency.

Bars are drawn as one collection per (row, opcode) (like `broken_barh`, built with numpy),
and bars of one colour closer than a
fraction of a pixel are merged first, so a run of hundreds of thousands of instructions draws
in a second or two. The figure is rendered by the Agg canvas directly
(no pyplot, no global backend state). matplotlib is imported when this module is, and only
`Profile.write_timeline_png` imports this module: the simulator itself never needs it.
"""

from __future__ import annotations

import math
import os

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

ROW_HEIGHT = 0.8
WAIT_COLOUR = "0.75"
# Bars of one colour in one row closer than total time / MERGE_RESOLUTION (a third of a pixel
# at the figure's width) are drawn as one bar.
MERGE_RESOLUTION = 4000


def _merged(spans: list[tuple[float, float]], gap: float) -> np.ndarray:
    """(start, width) spans with those that touch or overlap within `gap` merged."""
    xs = np.asarray(spans, dtype=np.float64)
    if len(xs) < 2:
        return xs
    xs = xs[np.argsort(xs[:, 0], kind="stable")]
    starts, ends = xs[:, 0], xs[:, 0] + xs[:, 1]
    reach = np.maximum.accumulate(ends)
    first = np.concatenate(([True], starts[1:] > reach[:-1] + gap))
    idx = np.flatnonzero(first)
    group_end = np.maximum.reduceat(ends, idx)
    return np.column_stack((starts[idx], group_end - starts[idx]))


def write_timeline_png(profile, path: str | os.PathLike, dpi: int = 110) -> None:
    timeline_figure(profile).savefig(path, format="png", dpi=dpi, bbox_inches="tight")


def _bars(ax, spans: np.ndarray, y: float, height: float, colour) -> None:
    """One row's bars of one colour as a single PolyCollection (what broken_barh draws,
    built with numpy instead of one Python call per bar)."""
    if not len(spans):
        return
    x0, x1 = spans[:, 0], spans[:, 0] + spans[:, 1]
    verts = np.empty((len(spans), 4, 2))
    verts[:, 0, 0] = verts[:, 1, 0] = x0
    verts[:, 2, 0] = verts[:, 3, 0] = x1
    verts[:, 0, 1] = verts[:, 3, 1] = y
    verts[:, 1, 1] = verts[:, 2, 1] = y + height
    ax.add_collection(PolyCollection(verts, facecolors=colour, edgecolors="none",
                                     linewidths=0), autolim=False)


def timeline_figure(profile) -> Figure:
    rows = list(profile.streams)
    row_of = {name: i for i, name in enumerate(rows)}
    opcodes = sorted({e.opcode for e in profile.events})
    cmap = matplotlib.colormaps["tab10" if len(opcodes) <= 10 else "tab20"]
    colour = {op: cmap(i % cmap.N) for i, op in enumerate(opcodes)}

    # Group (start, width) pairs per (row, opcode), in microseconds; for DMA transfers also
    # the wait from descriptor issue to transfer start (fixed latency, busy queue).
    groups: dict[tuple[int, str], list] = {}
    waiting: dict[int, list] = {}
    for e in profile.events:
        row = row_of[e.stream]
        groups.setdefault((row, e.opcode), []).append(
            (e.start_ns / 1000.0, (e.end_ns - e.start_ns) / 1000.0))
        if e.nbytes and e.start_ns > e.issue_ns:
            waiting.setdefault(row, []).append(
                (e.issue_ns / 1000.0, (e.start_ns - e.issue_ns) / 1000.0))

    fig = Figure(figsize=(12, 1.6 + 0.42 * len(rows)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    total_us = profile.total_ns / 1000.0
    gap = (total_us if total_us > 0 else 1.0) / MERGE_RESOLUTION
    for row, spans in waiting.items():
        _bars(ax, _merged(spans, gap), row + ROW_HEIGHT / 2 - 0.12, 0.12, WAIT_COLOUR)
    for (row, op), spans in groups.items():
        _bars(ax, _merged(spans, gap), row - ROW_HEIGHT / 2, ROW_HEIGHT, colour[op])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, family="monospace")
    ax.set_ylim(len(rows) - 0.5, -0.5)          # first engine on top
    ax.set_xlim(0.0, total_us if total_us > 0 else 1.0)
    ax.set_xlabel("time (us)")
    ax.grid(axis="x", alpha=0.3)
    for y in range(len(rows) + 1):
        ax.axhline(y - 0.5, color="0.85", linewidth=0.5)

    roof = profile.roofline()
    eff = "n/a" if math.isnan(roof.efficiency) else f"{100.0 * roof.efficiency:.1f}%"
    target = profile.target
    ax.set_title(f"{profile.program} on {target.name} ({target.core}): simulated "
                 f"{total_us:.3f} us, {profile.instruction_count} instructions, roofline "
                 f"efficiency {eff} ({roof.binding}-bound)", fontsize=10)
    if opcodes:
        handles = [Patch(facecolor=colour[op], label=op) for op in opcodes]
        if waiting:
            handles.append(Patch(facecolor=WAIT_COLOUR, label="DMA issued,\nwaiting"))
        ax.legend(handles=handles,
                  loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False,
                  title="opcode", title_fontsize=8)
    return fig
