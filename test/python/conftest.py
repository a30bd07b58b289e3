"""Shared pytest set-up for test/python."""

import gc
import os

import pytest

# The persistent compile cache (torchneuron.cache) is off in the tests, so that every test
# compiles what it tests (and tests that inject compiler failures see them); test_cache.py and
# test_compile_cache.py turn it on with a temporary TORCHNEURON_CACHE_DIR. Subprocesses inherit.
os.environ["TORCHNEURON_CACHE_DIR"] = "off"


@pytest.fixture(params=[True, False], ids=["collector_on", "collector_off"])
def collector_enabled_before(request):
    """Python's cycle collector switched on or off (the parameter, also returned) for the
    test, and back to how it was after it, whatever the test did to it."""
    was = gc.isenabled()
    (gc.enable if request.param else gc.disable)()
    yield request.param
    (gc.enable if was else gc.disable)()
