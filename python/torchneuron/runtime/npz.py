"""Reading program inputs and expected outputs from .npz files (used by neuron-run and
neuron-profile).

Arrays are matched to a program's tensors by positional key (`arg0, arg1, ...` for inputs,
`out0, out1, ...` for outputs) where present, else by the tensor's name. npz files store
bf16/fp8 (ml_dtypes) arrays as raw 2-/1-byte values (a void dtype); those are read back as the
tensor's declared dtype. Every problem raises `NpzError` (a ValueError) with a one-line
message.
"""

from __future__ import annotations

import zipfile
from typing import Sequence

import numpy as np

from torchneuron.runtime.program import TensorSpec


class NpzError(ValueError):
    """An .npz file that cannot be read or does not fit the program."""


def read_npz(path: str, what: str) -> dict[str, np.ndarray]:
    """All arrays of the npz at `path`; `what` ("inputs file" ...) names it in errors."""
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):    # a .npy: one array, no names
            raise NpzError(f"cannot read {what} {path}: it holds one array (.npy), not an "
                           ".npz archive of named arrays (numpy.savez)")
        with loaded as f:
            return {k: f[k] for k in f.files}
    except NpzError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise NpzError(f"cannot read {what} {path}: {exc}") from None
    except Exception as exc:   # np.load of a damaged file can fail in many ways
        raise NpzError(f"cannot read {what} {path}: {type(exc).__name__}: {exc}") from None


def match_arrays(arrays: dict[str, np.ndarray], specs: Sequence[TensorSpec], prefix: str,
                 kind: str, what: str, required: bool) -> list[np.ndarray | None]:
    """Pick each tensor's array by positional key (prefix + index), else by name; None for a
    missing one unless `required`. Arrays that match no tensor are an error."""
    chosen, used = [], set()
    for i, spec in enumerate(specs):
        for key in (f"{prefix}{i}", spec.name):
            if key in arrays:
                chosen.append(as_declared(arrays[key], spec.dtype))
                used.add(key)
                break
        else:
            if required:
                raise NpzError(f"{what} has no array for {prefix}{i} ({spec.name!r}); "
                               f"keys: {', '.join(sorted(arrays)) or 'none'}")
            chosen.append(None)
    extra = sorted(set(arrays) - used)
    if extra:
        raise NpzError(f"{what} has arrays that match no {kind}: {', '.join(extra)}")
    return chosen


def as_declared(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A bf16/fp8 array that npz stored as raw bytes (void dtype), read as `dtype`."""
    if array.dtype.kind == "V" and array.dtype.itemsize == dtype.itemsize:
        return array.view(dtype)
    return array


def read_inputs(path: str, program) -> list[np.ndarray]:
    """The program's inputs from the npz at `path`, in input order."""
    return match_arrays(read_npz(path, "inputs file"), program.inputs, "arg",
                        "program input", "inputs file", required=True)
