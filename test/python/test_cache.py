"""The persistent compile cache: keys, atomic entries, corruption handling, concurrency."""

import logging
import os
import subprocess
import sys

import pytest

from neff_builder import NeffBuilder, sbuf
from torchneuron import cache as cache_mod
from torchneuron.cache import CompileCache
from torchneuron.format import read_neff


def _program_bytes(name: str = "cached") -> bytes:
    b = NeffBuilder(name)
    x = b.input("x", (4, 8))
    y = b.output("y", (4, 8))
    s = b.semaphore()
    b.dma(sbuf(4, [8]), b.view(x), queue=0, signal=s)
    b.dma(b.view(y), sbuf(4, [8]), queue=1, waits=[(s, 1)])
    return b.to_bytes()


def test_key_depends_on_graph_target_and_options():
    k = CompileCache.key("graph-a", "trn2", {"fuse": True})
    assert k == CompileCache.key("graph-a", "trn2", {"fuse": True})
    assert k != CompileCache.key("graph-b", "trn2", {"fuse": True})
    assert k != CompileCache.key("graph-a", "trn1", {"fuse": True})
    assert k != CompileCache.key("graph-a", "trn2", {"fuse": False})


def test_store_and_load_round_trip(tmp_path):
    c = CompileCache(tmp_path)
    key = CompileCache.key("g", "trn2", {})
    assert c.load(key) is None
    data = _program_bytes()
    c.store(key, data, {"stage_seconds": {"isa": 1.0}})
    entry = c.load(key)
    assert entry.neff == data and entry.metadata == {"stage_seconds": {"isa": 1.0}}
    leftovers = [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupt_entry_is_reported_once_removed_and_missed(tmp_path, caplog, damage):
    c = CompileCache(tmp_path)
    key = CompileCache.key(f"g-{damage}", "trn2", {})
    c.store(key, _program_bytes())
    path = next(tmp_path.rglob("*.neff"))
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[-10] ^= 0x40
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="torchneuron"):
        assert c.load(key) is None
        assert not path.exists()
        c.store(key, bytes(data))          # corrupt again: reported only once
        assert c.load(key) is None
    warnings = [r for r in caplog.records if "corrupt compile cache entry" in r.message]
    assert len(warnings) == 1


def test_disabled_cache(monkeypatch):
    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", "off")
    assert cache_mod.cache_dir() is None
    c = CompileCache()
    assert not c.enabled
    c.store("k", b"x")
    assert c.load("k") is None


def test_default_directory_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCHNEURON_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_mod.cache_dir() == tmp_path / "torchneuron"


def test_concurrent_writers_leave_a_valid_entry(tmp_path):
    """Two processes storing the same key at once: the entry loads and is complete."""
    here = os.path.dirname(os.path.abspath(__file__))
    script = (
        "import sys; sys.path.insert(0, %r)\n"
        "from test_cache import _program_bytes\n"
        "from torchneuron.cache import CompileCache\n"
        "c = CompileCache(__import__('pathlib').Path(%r))\n"
        "data = _program_bytes()\n"
        "for _ in range(50):\n"
        "    c.store('k' * 64, data)\n"
        "    assert c.load('k' * 64) is not None\n" % (here, str(tmp_path)))
    procs = [subprocess.Popen([sys.executable, "-c", script]) for _ in range(2)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    entry = CompileCache(tmp_path).load("k" * 64)
    assert entry is not None and read_neff(entry.neff).name == "cached"
