"""Shared pytest set-up for test/python."""

import os

# The persistent compile cache (torchneuron.cache) is off in the tests, so that every test
# compiles what it tests (and tests that inject compiler failures see them); test_cache.py and
# test_compile_cache.py turn it on with a temporary TORCHNEURON_CACHE_DIR. Subprocesses inherit.
os.environ["TORCHNEURON_CACHE_DIR"] = "off"
