"""neuron-run: run a .neff on the simulated NeuronCore and report time and utilisation.

    neuron-run NAME.neff --inputs NAME.inputs.npz [--expect NAME.expected.npz] [--out OUT.npz]
               [--trace TRACE.json] [--target trn1|trn2] [--rtol R] [--atol A]

Inputs are taken from the npz by key: `arg0, arg1, ...` (positional) where present, else the
program's input name. bf16/fp8 arrays, which npz stores as raw 2-/1-byte values, are read as
the program's declared dtype. Expected outputs are keyed `out0, out1, ...` (or by output name) and
compared like numpy.allclose (|actual - expected| <= atol + rtol * |expected|, NaN equal to
NaN). `--out` writes the outputs as `out0, out1, ...`; `--trace` writes a Chrome/Perfetto
trace. Exit status: 0 success, 1 error or mismatch, 2 usage error. Errors are one line on
stderr, "neuron-run: error: ...".
"""

from __future__ import annotations

import argparse
import sys
import zipfile

import numpy as np

from torchneuron import target as target_table
from torchneuron.runtime import Device, NeffFormatError, SimulationError, load


class _Failure(Exception):
    """An error to report on one line."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="neuron-run", description=__doc__.split("\n\n")[0])
    p.add_argument("neff", help="the program (.neff)")
    p.add_argument("--inputs", required=True, help="npz of inputs (arg0.. or input names)")
    p.add_argument("--expect", help="npz of expected outputs (out0.. or output names)")
    p.add_argument("--out", help="write the outputs to this npz (out0, out1, ...)")
    p.add_argument("--trace", help="write a Chrome/Perfetto trace (JSON) to this file")
    p.add_argument("--target", choices=sorted(target_table.TARGETS),
                   help="target the program must be compiled for (default: the program's)")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (1e-4)")
    p.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (1e-5)")
    return p


def _load_npz(path: str, what: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise _Failure(f"cannot read {what} {path}: {exc}") from None


def _match(arrays: dict[str, np.ndarray], specs, prefix: str, kind: str, what: str,
           required: bool) -> list[np.ndarray | None]:
    """Pick each tensor's array by positional key (prefix + index), else by name."""
    chosen, used = [], set()
    for i, spec in enumerate(specs):
        for key in (f"{prefix}{i}", spec.name):
            if key in arrays:
                chosen.append(_as_declared(arrays[key], spec.dtype))
                used.add(key)
                break
        else:
            if required:
                raise _Failure(f"{what} has no array for {prefix}{i} ({spec.name!r}); "
                               f"keys: {', '.join(sorted(arrays)) or 'none'}")
            chosen.append(None)
    extra = sorted(set(arrays) - used)
    if extra:
        raise _Failure(f"{what} has arrays that match no {kind}: {', '.join(extra)}")
    return chosen


def _as_declared(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """npz files store bf16/fp8 (ml_dtypes) arrays as raw bytes (void dtype); read them back
    as the program's dtype."""
    if array.dtype.kind == "V" and array.dtype.itemsize == dtype.itemsize:
        return array.view(dtype)
    return array


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
    program = load(args.neff, args.target)
    inputs = _match(_load_npz(args.inputs, "inputs file"), program.inputs, "arg",
                    "program input", "inputs file", required=True)
    result = Device(program.target).execute(program, inputs)
    profile = result.profile

    print(f"program: {program.name} (target {program.target.name}, {program.target.core})")
    print(profile.summary())
    if args.out:
        np.savez(args.out, **{f"out{i}": o for i, o in enumerate(result.outputs)})
        print(f"outputs written to {args.out}")
    if args.trace:
        profile.write_chrome_trace(args.trace)
        print(f"trace written to {args.trace}")

    status = 0
    if args.expect:
        expected = _match(_load_npz(args.expect, "expected file"), program.outputs, "out",
                          "program output", "expected file", required=False)
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
    except (_Failure, NeffFormatError, SimulationError, ValueError, OSError) as exc:
        message = str(exc).replace("\n", "\n  ")
        print(f"neuron-run: error: {message}", file=sys.stderr)
        return 1
    except Exception as exc:  # never a traceback for a user; say it is our fault
        print(f"neuron-run: error: internal error ({type(exc).__name__}: {exc})",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
