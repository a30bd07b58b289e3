"""Environment knobs of torchneuron, declared once and typed.

Every `TORCHNEURON_*` variable the project reads is declared here; code asks this module
instead of reading `os.environ` itself, so the full list of knobs is in one place and a bad
value fails with an error that names the variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """An environment variable holds a value the project cannot use."""


@dataclass(frozen=True)
class Knob(Generic[T]):
    name: str
    parse: Callable[[str], T]
    default: T
    help: str

    def is_set(self) -> bool:
        """Whether the variable is set (to a non-empty value) in the environment."""
        return bool(os.environ.get(self.name))

    def get(self) -> T:
        raw = os.environ.get(self.name)
        if raw is None or raw == "":
            return self.default
        try:
            return self.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{self.name}={raw!r}: {exc}") from None


def _path_or_none(raw: str) -> str | None:
    return raw


def _bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected one of 1/0, true/false, yes/no, on/off")


def _target_name(raw: str) -> str:
    # Validated against the target table lazily (target.py imports this module).
    return raw.strip()


DUMP_DIR: Knob[str | None] = Knob(
    "TORCHNEURON_DUMP_DIR", _path_or_none, None,
    "Directory where every compiled graph leaves its stages (.fx.txt, .linalg.mlir, .trn.mlir, "
    ".isa.mlir, .neff) and a replay bundle (.inputs.npz, .expected.npz).",
)
TARGET: Knob[str] = Knob(
    "TORCHNEURON_TARGET", _target_name, "trn2",
    "Default target NeuronCore generation (trn2 or trn1).",
)
VERIFY_EACH: Knob[bool] = Knob(
    "TORCHNEURON_VERIFY_EACH", _bool, False,
    "Verify the IR after every compiler pass (default: once per pipeline stage).",
)

CACHE_DIR: Knob[str | None] = Knob(
    "TORCHNEURON_CACHE_DIR", _path_or_none, None,
    "Directory of the persistent compile cache (default ~/.cache/torchneuron; 'off' disables).",
)

TUNING_DB: Knob[str | None] = Knob(
    "TORCHNEURON_TUNING_DB", _path_or_none, None,
    "Tuning database (JSON written by neuron-tune) whose per-kernel tiling choices "
    "compilations use in place of the defaults (CompileOptions.tuning_db overrides it).",
)

SIM_REPLAY: Knob[bool] = Knob(
    "TORCHNEURON_SIM_REPLAY", _bool, True,
    "Run a program's later executions as replays of its first verified one (same "
    "instructions, same order, checks already settled; see torchneuron/sim/replay.py); "
    "0 checks every execution in full.",
)



def _thread_count(raw: str) -> int:
    if raw.strip() not in ("1", "2"):
        raise ValueError("expected 1 or 2")
    return int(raw)


SIM_THREADS: Knob[int] = Knob(
    "TORCHNEURON_SIM_THREADS", _thread_count, min(2, os.cpu_count() or 1),
    "Host threads a replay spreads its instructions over (1 or 2, default 2 on a machine "
    "with two or more cores; see torchneuron/sim/host_threads.py). The results are the "
    "same bit for bit either way.",
)

SIM_BF16_GEMM: Knob[bool] = Knob(
    "TORCHNEURON_SIM_BF16_GEMM", _bool, True,
    "Compute bf16 MATMUL instructions with the host's bf16 GEMM (oneDNN, on the CPU's bf16 "
    "dot-product instructions) where no subnormal can arise (see "
    "torchneuron/sim/host_gemm.py); 0 widens every operand to fp32 for numpy's BLAS. The "
    "values are the same sums of exact products either way, in each library's order.",
)

EARLY_BACKWARD: Knob[bool] = Knob(
    "TORCHNEURON_EARLY_BACKWARD", _bool, True,
    "Compile a training graph's backward in a forked child while its forward compiles (where "
    "fork exists and two cores are usable; see torchneuron/early_backward.py); 0 compiles it "
    "when AOTAutograd asks for it, in the process. The NEFFs are the same either way.",
)

ALL_KNOBS = (DUMP_DIR, TARGET, VERIFY_EACH, CACHE_DIR, TUNING_DB, SIM_REPLAY, SIM_THREADS,
             SIM_BF16_GEMM, EARLY_BACKWARD)


def check_environment() -> None:
    """Read every knob, so that a bad value fails where the backend starts, with a
    ConfigError naming its variable, instead of inside each graph's compile (where it would
    send every op to the CPU as a compile failure)."""
    for knob in ALL_KNOBS:
        knob.get()
    dump_dir = DUMP_DIR.get()
    if dump_dir and os.path.exists(dump_dir) and not os.path.isdir(dump_dir):
        raise ConfigError(f"{DUMP_DIR.name}={dump_dir!r}: not a directory")
