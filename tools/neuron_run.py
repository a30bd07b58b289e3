"""neuron-run: run a .neff on the simulated NeuronCore and report time and utilisation.

    neuron-run NAME.neff --inputs NAME.inputs.npz [--expect NAME.expected.npz] [--out OUT.npz]
               [--trace TRACE.json] [--profile] [--target trn1|trn2] [--rtol R] [--atol A]

The device is a core of `--target`, else of the target `TORCHNEURON_TARGET` names when that is
set, else of the program's own target; a program compiled for another target is refused.
Inputs are taken from the npz by key: `arg0, arg1, ...` (positional) where present, else the
program's input name. bf16/fp8 arrays, which npz stores as raw 2-/1-byte values, are read as
the program's declared dtype. Expected outputs are keyed `out0, out1, ...` (or by output name) and
compared like numpy.allclose (|actual - expected| <= atol + rtol * |expected|, NaN equal to
NaN). `--out` writes the outputs as `out0, out1, ...`; `--trace` writes a Chrome/Perfetto
trace; `--profile` prints neuron-profile's full report (instruction mix, DMA bandwidth,
roofline) instead of the short summary. Exit status: 0 success, 1 error or mismatch, 2 usage error. Errors are one line on
stderr, "neuron-run: error: ...".
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from torchneuron import target as target_table
from torchneuron.runtime import (
    Device, NeffFormatError, SimulationError, load, requested_target,
)
from torchneuron.runtime.npz import match_arrays, read_inputs, read_npz


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="neuron-run", description=__doc__.split("\n\n")[0])
    p.add_argument("neff", help="the program (.neff)")
    p.add_argument("--inputs", required=True, help="npz of inputs (arg0.. or input names)")
    p.add_argument("--expect", help="npz of expected outputs (out0.. or output names)")
    p.add_argument("--out", help="write the outputs to this npz (out0, out1, ...)")
    p.add_argument("--trace", help="write a Chrome/Perfetto trace (JSON) to this file")
    p.add_argument("--profile", action="store_true",
                   help="print the full profile report (as neuron-profile does)")
    p.add_argument("--target", choices=sorted(target_table.TARGETS),
                   help="run on a core of this target (default: TORCHNEURON_TARGET when "
                        "set, else the program's target)")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (1e-4)")
    p.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (1e-5)")
    return p


def _compare(actual: np.ndarray, expected: np.ndarray, rtol: float,
             atol: float) -> tuple[bool, float]:
    if actual.shape != expected.shape:
        return False, float("inf")
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    both_nan = np.isnan(a) & np.isnan(e)
    with np.errstate(invalid="ignore"):
        diff = np.where(both_nan, 0.0, np.abs(a - e))
    ok = bool(np.all(diff <= atol + rtol * np.abs(np.where(both_nan, 0.0, e))))
    return ok, float(np.nanmax(diff)) if diff.size else 0.0


def _run(args) -> int:
    program = load(args.neff, requested_target(args.target))
    inputs = read_inputs(args.inputs, program)
    result = Device(program.target).execute(program, inputs)
    profile = result.profile

    if args.profile:
        print(profile.report())          # starts with its own "program: ..." line
    else:
        print(f"program: {program.name} (target {program.target.name}, "
              f"{program.target.core})")
        print(profile.summary())
    if args.out:
        np.savez(args.out, **{f"out{i}": o for i, o in enumerate(result.outputs)})
        print(f"outputs written to {args.out}")
    if args.trace:
        profile.write_chrome_trace(args.trace)
        print(f"trace written to {args.trace}")

    status = 0
    if args.expect:
        expected = match_arrays(read_npz(args.expect, "expected file"), program.outputs,
                                "out", "program output", "expected file", required=False)
        for i, (spec, actual, want) in enumerate(zip(program.outputs, result.outputs,
                                                     expected)):
            if want is None:
                print(f"out{i} ({spec.name}): no expected value, not checked")
                continue
            ok, err = _compare(actual, want, args.rtol, args.atol)
            shape_note = "" if actual.shape == want.shape else \
                f" (shape {list(actual.shape)} vs expected {list(want.shape)})"
            print(f"out{i} ({spec.name}): max abs error {err:.3g}{shape_note} "
                  f"{'ok' if ok else 'MISMATCH'} (rtol {args.rtol:g}, atol {args.atol:g})")
            if not ok:
                status = 1
        print("all outputs match" if status == 0 else "outputs do not match")
    return status


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:      # usage error (2) or --help (0); argparse printed why
        return int(exc.code or 0)
    try:
        return _run(args)
    except (NeffFormatError, SimulationError, ValueError, OSError) as exc:
        message = str(exc).replace("\n", "\n  ")
        print(f"neuron-run: error: {message}", file=sys.stderr)
        return 1
    except Exception as exc:  # never a traceback for a user; say it is our fault
        print(f"neuron-run: error: internal error ({type(exc).__name__}: {exc})",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
