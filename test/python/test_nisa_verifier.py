"""The nisa verifier's access-pattern check, which remembers what does not depend on a
pattern's offset, against the check made from scratch."""

from __future__ import annotations

import random

import pytest

from torch_mlir import ir

from torchneuron.dialects import make_context
from torchneuron.dialects.common import VerifyError
from torchneuron.dialects.nisa import _check_pattern, _check_pattern_remembered


def _outcome(check) -> str:
    try:
        check()
    except VerifyError as exc:
        return str(exc)
    return ""


@pytest.mark.parametrize("seed", range(4))
def test_remembered_pattern_check_agrees_with_the_check_from_scratch(seed):
    """Random patterns, legal and not (out of bounds either way, past a partition's end,
    negative on-chip strides, a partition stride other than a row, empty dims, too many
    dims, malformed lengths), on HBM and on-chip buffers, checked in random order through
    one memo: the remembered check passes or fails exactly where `_check_pattern` does, with
    its message."""
    rng = random.Random(seed)
    with make_context():
        types = [ir.Type.parse(t) for t in (
            'memref<128x64xbf16, "sbuf">', 'memref<64x512xf32, "psum">',
            'memref<4x8x16xf32, "hbm">', 'memref<32xbf16, "hbm">')]
        reaches: dict = {}
        failures = 0
        for _ in range(4000):
            buffer_type = types[rng.randrange(len(types))]
            shape = [int(d) for d in ir.MemRefType(buffer_type).shape]
            row = shape[-1]
            dims = rng.choice([1, 2, 2, 3, 3, 4, 6])
            ap = [rng.randrange(-4, shape[0] * row + 4)]
            for k in range(dims):
                stride = rng.choice([0, 1, 1, 2, row, row, -1, 3, row + 1])
                size = rng.choice([0, 1, 2, 4, 8, 16, 64] if k else [1, 2, 4, 32, 128])
                ap += [stride, size]
            if rng.random() < 0.05:
                ap = ap[:-1]           # an even length: malformed
            ap = tuple(ap)
            role = rng.choice(["dst", "src"])
            dynamic = rng.random() < 0.1
            expected = _outcome(lambda: _check_pattern(list(ap), buffer_type, role, dynamic))
            got = _outcome(lambda: _check_pattern_remembered(ap, buffer_type, role, dynamic,
                                                             reaches))
            assert got == expected, (ap, str(buffer_type))
            failures += bool(expected)
        assert 400 < failures < 3600, failures
        assert len(reaches) < 4000          # shapes recurred with other offsets
