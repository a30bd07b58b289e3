"""The persistent compile cache: compiled NEFFs on disk, keyed by what determines them.

Key = sha256 of (the graph's key text, the compiler's identity, the target, the options). The
compiler's identity is its version plus a digest of its source files, so editing the compiler
invalidates old entries. Entries are `<dir>/<key[:2]>/<key>.neff` (with a `.json` sidecar for
metadata) written atomically (a temporary file in the same directory, then `os.replace`), so
concurrent processes compiling the same graph never leave a torn file: the last writer wins
with an equally valid entry. A corrupt or truncated entry fails the NEFF's own checksum on
load; it is reported once, removed, and recompiled.

A graph the compiler rejected is cached too, as `<key>.fail.json` (the failure, with a sha256
of its own text), so that a later process decides the same CPU fallback without compiling.

The backend (torchneuron.backend) keys each compiled partition by its FX graph before
importing it with torch-mlir: see `backend._graph_cache_key`.

The directory is `TORCHNEURON_CACHE_DIR`, default `~/.cache/torchneuron` (honouring
`XDG_CACHE_HOME`); `TORCHNEURON_CACHE_DIR=off` disables the cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torchneuron
from torchneuron import config
from torchneuron.format import NeffFormatError, read_neff

log = logging.getLogger("torchneuron")

# Package folders whose sources determine the compiler's output.
_COMPILER_PACKAGES = ("compiler", "dialects", "format")
_reported_corrupt: set[str] = set()
_identity: str | None = None


def compiler_identity() -> str:
    """Version and a digest of every source file that decides what the compiler emits."""
    global _identity
    if _identity is None:
        import importlib.util

        digest = hashlib.sha256(torchneuron.__version__.encode())
        for package in _COMPILER_PACKAGES:
            spec = importlib.util.find_spec(f"torchneuron.{package}")
            if spec is None or not spec.submodule_search_locations:
                continue
            root = Path(list(spec.submodule_search_locations)[0])
            for path in sorted(root.rglob("*.py")):
                digest.update(str(path.relative_to(root)).encode())
                digest.update(path.read_bytes())
        digest.update((Path(torchneuron.__file__).parent / "target.py").read_bytes())
        _identity = f"{torchneuron.__version__}+{digest.hexdigest()[:16]}"
    return _identity


def cache_dir() -> Path | None:
    """The cache directory, or None when the cache is disabled."""
    configured = config.CACHE_DIR.get()
    if configured is not None and configured.strip().lower() in ("off", "0", "none"):
        return None
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torchneuron"


@dataclass
class CacheEntry:
    neff: bytes | None        # None for a cached failure
    metadata: dict

    @property
    def failure(self) -> dict | None:
        """What the compiler said when it rejected the graph (a cached failure), else None."""
        return self.metadata.get("failure") if self.neff is None else None


class CompileCache:
    def __init__(self, directory: Path | None = None):
        self.directory = directory if directory is not None else cache_dir()

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    @staticmethod
    def key(graph_key: str, target: str, options: dict) -> str:
        payload = json.dumps({"graph": graph_key, "compiler": compiler_identity(),
                              "target": target, "options": options}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    def _paths(self, key: str) -> tuple[Path, Path]:
        folder = self.directory / key[:2]
        return folder / f"{key}.neff", folder / f"{key}.json"

    def _failure_path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.fail.json"

    def load(self, key: str) -> CacheEntry | None:
        """The entry for `key`, or None (missing, or corrupt: then reported and removed)."""
        if not self.enabled:
            return None
        neff_path, meta_path = self._paths(key)
        try:
            data = neff_path.read_bytes()
            metadata = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        except FileNotFoundError:
            return self._load_failure(key)
        except (OSError, ValueError) as exc:
            self._corrupt(key, neff_path, meta_path, str(exc))
            return None
        try:
            read_neff(data, source=str(neff_path))
        except NeffFormatError as exc:
            self._corrupt(key, neff_path, meta_path, str(exc))
            return None
        return CacheEntry(data, metadata)

    def _load_failure(self, key: str) -> CacheEntry | None:
        path = self._failure_path(key)
        try:
            record = json.loads(path.read_bytes())
            payload = json.dumps(record["failure"], sort_keys=True)
            if hashlib.sha256(payload.encode()).hexdigest() != record["sha256"]:
                raise ValueError("checksum mismatch")
            if not isinstance(record["failure"], dict):
                raise ValueError("malformed failure record")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._corrupt(key, path, path, str(exc) or type(exc).__name__)
            return None
        return CacheEntry(None, {"failure": record["failure"]})

    def store_failure(self, key: str, failure: dict) -> None:
        """Remember that the compiler rejected the graph of `key` (`failure` is JSON-able)."""
        if not self.enabled:
            return
        path = self._failure_path(key)
        payload = json.dumps(failure, sort_keys=True)
        record = {"failure": failure, "sha256": hashlib.sha256(payload.encode()).hexdigest()}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write(path, json.dumps(record).encode())
        except OSError as exc:
            log.warning("torchneuron: could not write compile cache entry %s: %s", path, exc)

    def store(self, key: str, neff: bytes, metadata: dict | None = None) -> None:
        if not self.enabled:
            return
        neff_path, meta_path = self._paths(key)
        try:
            neff_path.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write(meta_path, json.dumps(metadata or {}).encode())
            _atomic_write(neff_path, neff)
        except OSError as exc:
            log.warning("torchneuron: could not write compile cache entry %s: %s", neff_path,
                        exc)

    def _corrupt(self, key: str, neff_path: Path, meta_path: Path, reason: str) -> None:
        if str(neff_path) not in _reported_corrupt:      # once per entry and process
            _reported_corrupt.add(str(neff_path))
            log.warning("torchneuron: corrupt compile cache entry %s (%s); recompiling",
                        neff_path, reason)
        for path in (neff_path, meta_path):
            try:
                path.unlink()
            except OSError:
                pass


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
