"""neuron-profile: run a .neff on the simulated NeuronCore and report where the time went.

    neuron-profile NAME.neff --inputs NAME.inputs.npz [--target trn1|trn2]
                   [--trace TRACE.json] [--png TIMELINE.png] [--critical-path]

Prints, for the run:
- per engine and DMA queue: busy time, utilisation, instruction count and instruction mix;
- DMA bytes and achieved bandwidth (all bytes / simulated time, and per queue over the run
  and while the queue was transferring);
- PE FLOPs by rate class (bf16/fp16, fp32, fp8);
- the roofline bound max(PE FLOPs / PE peak for the dtypes the matmuls used, compulsory HBM
  bytes / the core's HBM bandwidth) -- compulsory bytes being every input, constant and
  output tensor moved once --, which term binds, and simulated time / bound (efficiency =
  bound / simulated time). `Profile.roofline()` computes the same figures for benchmarks.

`--critical-path` adds the chain of instructions that set the total time
(`torchneuron.sim.critical_path`): its phases in time order and the source locations and
engines that take the most time on it -- what has to get faster for the program to.

`--trace` writes a Chrome/Perfetto trace (one track per engine and used DMA queue; open in
ui.perfetto.dev); `--png` draws the timeline (one row per engine and used DMA queue, bars
coloured by opcode; needs matplotlib). Inputs are read from the npz as by neuron-run
(`arg0, arg1, ...` or input names). The device target is `--target`, else the target
`TORCHNEURON_TARGET` names when set, else the program's own.

Exit status: 0 success, 1 error, 2 usage error. Errors are one line on stderr,
"neuron-profile: error: ...".
"""

from __future__ import annotations

import argparse
import sys

from torchneuron import target as target_table
from torchneuron.runtime import (
    Device, NeffFormatError, SimulationError, load, requested_target,
)
from torchneuron.runtime.npz import read_inputs
from torchneuron.sim.critical_path import critical_path
from torchneuron.sim.critical_path import report as critical_path_report

PROG = "neuron-profile"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("neff", help="the program (.neff)")
    p.add_argument("--inputs", required=True, help="npz of inputs (arg0.. or input names)")
    p.add_argument("--target", choices=sorted(target_table.TARGETS),
                   help="run on a core of this target (default: TORCHNEURON_TARGET when "
                        "set, else the program's target)")
    p.add_argument("--trace", help="write a Chrome/Perfetto trace (JSON) to this file")
    p.add_argument("--png", help="draw the timeline to this PNG file (needs matplotlib)")
    p.add_argument("--critical-path", action="store_true",
                   help="report the instructions that set the total time, by source location "
                        "and engine")
    return p


def _run(args) -> int:
    program = load(args.neff, requested_target(args.target))
    inputs = read_inputs(args.inputs, program)
    profile = Device(program.target).execute(program, inputs).profile
    print(profile.report())
    if args.critical_path:
        path = critical_path(profile, program.prepared(profile.target))
        print()
        print(critical_path_report(path, profile.total_ns))
    if args.trace:
        profile.write_chrome_trace(args.trace)
        print(f"trace written to {args.trace}")
    if args.png:
        try:
            profile.write_timeline_png(args.png)
        except ImportError as exc:
            raise RuntimeError(f"--png needs matplotlib ({exc})") from None
        print(f"timeline written to {args.png}")
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:      # usage error (2) or --help (0); argparse printed why
        return int(exc.code or 0)
    try:
        return _run(args)
    except (NeffFormatError, SimulationError, ValueError, OSError, RuntimeError) as exc:
        message = str(exc).replace("\n", "\n  ")
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 1
    except Exception as exc:  # never a traceback for a user; say it is our fault
        print(f"{PROG}: error: internal error ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
