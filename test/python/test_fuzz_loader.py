"""Loader fuzzing: thousands of mutated and truncated NEFFs (see fuzz_neff.py) fed to
`runtime.load` and `Device.execute`. Deterministic (derandomized hypothesis, no example
database), bounded (2400 cases plus 150 for the coverage check, each under a 2 s deadline;
about 20 s on 2 cores).

Allowed outcomes:
- raw byte mutations: `NeffFormatError`, or -- only when the bytes changed are header bytes
  the format does not check (minor version, uuid) -- a load and run with outputs identical to
  the original's;
- re-signed mutations (payload bytes, archive members, def.json/debug.json nodes, instruction
  record fields, with the header's size and sha256 recomputed): `NeffFormatError` at load,
  or a load followed by a completed run (any outputs) or a `SimulationError` subclass.
Anything else (IndexError, KeyError, numpy's ValueError, MemoryError, OverflowError,
struct.error, zipfile/zlib errors, RecursionError ...) fails the test.

Below the fuzz tests, one regression test per hole the fuzzer (or reading the loader with its
findings in mind) found.
"""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import fuzz_neff as F
from neff_builder import NeffBuilder, hbm, sbuf
from torchneuron.format import container
from torchneuron.runtime import Device, NeffFormatError, load
from torchneuron.sim import ConstraintError


def fuzz_settings(n: int):
    return settings(max_examples=n, derandomize=True, database=None, deadline=2000,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@fuzz_settings(600)
@given(F.raw_case())
def test_raw_mutations_are_rejected_or_harmless(case):
    seed, data, changed = case
    kind, value = F.outcome(data)
    if kind == "format" or not changed:
        return
    assert changed <= F.UNVALIDATED_HEADER, (
        f"a mutation of bytes {sorted(changed)[:8]} was accepted ({kind}: {value})")
    assert kind == "ran" and F.same_outputs(value, seed.outputs)


@fuzz_settings(400)
@given(F.resigned_payload_case())
def test_resigned_payload_mutations(data):
    F.outcome(data)


@fuzz_settings(500)
@given(F.member_case())
def test_archive_member_mutations(data):
    F.outcome(data)


@fuzz_settings(400)
@given(F.json_case())
def test_def_json_and_debug_json_mutations(data):
    F.outcome(data)


@fuzz_settings(500)
@given(F.record_case())
def test_instruction_record_mutations(data):
    F.outcome(data)


def test_seeds_run_and_fuzz_outcomes_cover_every_kind():
    """The seeds are valid programs, and the mutation kinds reach every outcome (so the deep
    checks are exercised, not just the checksum)."""
    for seed in F.seeds():
        kind, outputs = F.outcome(seed.data)
        assert kind == "ran" and F.same_outputs(outputs, seed.outputs)
    kinds = set()

    @settings(max_examples=150, derandomize=True, database=None, deadline=None)
    @given(F.record_case())
    def collect(data):
        kinds.add(F.outcome(data)[0])

    collect()
    assert {"format", "simulation", "ran"} <= kinds


# -- regression tests: one per hole -----------------------------------------------------------

def seed_members(i=0):
    seed = F.seeds()[i]
    return seed, dict(seed.members)


def resigned(seed, members) -> bytes:
    return F.signed(F.rezipped(members), seed.data)


def with_json(member: str, edit, i=0) -> bytes:
    seed, members = seed_members(i)
    tree = json.loads(members[member])
    edit(tree)
    members[member] = json.dumps(tree).encode()
    return resigned(seed, members)


def test_unsupported_zip_version_is_a_format_error():
    """zipfile raised NotImplementedError ("zip file version 12.8") for a central directory
    entry that needs a newer zip version."""
    seed = F.seeds()[0]
    payload = bytearray(seed.data[container.HEADER_SIZE:])
    entry = payload.find(b"PK\x01\x02")
    payload[entry + 6:entry + 8] = (128).to_bytes(2, "little")   # version needed to extract
    with pytest.raises(NeffFormatError, match="not a valid archive"):
        load(F.signed(bytes(payload), seed.data))


@pytest.mark.parametrize("debug", [{"locations": None}, {"locations": 5}, {}, [],
                                   {"locations": ["a", 3]}])
def test_debug_json_without_a_list_of_locations(debug):
    """len() of a non-list locations value raised TypeError."""
    seed, members = seed_members()
    members["debug.json"] = json.dumps(debug).encode()
    with pytest.raises(NeffFormatError, match="debug.json has no list of locations"):
        load(resigned(seed, members))


def test_empty_location_table_with_instructions():
    """Records name location 0; with an empty table the loader let location 0 through and
    prepare() raised IndexError."""
    b = NeffBuilder("no locations")
    b.memset(sbuf(128, [4]), 0.0)             # location 0
    neff = b.build()
    neff.locations = []
    with pytest.raises(NeffFormatError, match="debug location that does not exist"):
        Device().execute(load(container.write_neff(neff)), [])


def test_deeply_nested_json_is_a_format_error():
    """json.loads raised RecursionError."""
    seed, members = seed_members()
    members["def.json"] = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(NeffFormatError, match="malformed JSON in def.json: RecursionError"):
        load(resigned(seed, members))


def test_huge_integer_literal_is_a_format_error():
    """json.loads raised ValueError (not JSONDecodeError) for an integer of > 4300 digits."""
    import re

    seed, members = seed_members()
    members["def.json"], n = re.subn(rb'"num_semaphores": \d+', b'"num_semaphores": '
                                     + b"9" * 5000, members["def.json"])
    assert n == 1
    with pytest.raises(NeffFormatError, match="malformed JSON in def.json"):
        load(resigned(seed, members))


def test_absurd_semaphore_count_is_rejected_before_allocation():
    """prepare() and run() allocate a list per semaphore: 10^12 of them raised MemoryError."""
    data = with_json("def.json", lambda d: d.update(num_semaphores=10**12))
    with pytest.raises(NeffFormatError, match="semaphores"):
        load(data)


def test_reserved_header_flags_must_be_zero():
    """The header's flags were ignored: a file with unknown flags loaded and ran."""
    data = bytearray(F.seeds()[0].data)
    data[20] = 1
    with pytest.raises(NeffFormatError, match="flags 0x1 are reserved"):
        load(bytes(data))


def test_boolean_tensor_ids_are_rejected():
    """JSON true passed as tensor id 1 (bool is an int in Python)."""
    def edit(d):
        d["outputs"] = [True if t == 1 else t for t in d["outputs"]]
        d["inputs"] = [True if t == 1 else t for t in d["inputs"]]

    with pytest.raises(NeffFormatError, match="is not an input tensor"):
        load(with_json("def.json", edit))


def test_program_larger_than_hbm_is_rejected_at_load():
    """A tensor that fits the format's limit but not the core's HBM loaded, and only the
    first execution said no: it is now refused before anything is allocated for it."""
    def edit(d):
        d["tensors"][d["outputs"][0]]["shape"] = [2**17, 2**17]     # 64 GiB of bf16/f32
    with pytest.raises(NeffFormatError, match="bytes of HBM"):
        load(with_json("def.json", edit))


def test_member_size_is_checked_before_decompression():
    seed, members = seed_members()
    members["streams/act.bin"] += b"\0" * container.isa.RECORD_SIZE
    with pytest.raises(NeffFormatError, match="streams/act.bin is .* bytes, expected"):
        load(resigned(seed, members))


def _memset_program(sizes, strides, engine="dve"):
    b = NeffBuilder("absurd")
    b.memset(sbuf(128, sizes, strides=strides), 0.0, engine=engine)
    return b.to_bytes()


def test_stride_zero_operand_of_billions_of_elements_is_rejected():
    """A record mutation gave an on-chip operand sizes [65535, 65535] with stride 0: it lies
    within one byte, passed the bounds check, and numpy raised ValueError ("Maximum allowed
    dimension exceeded") building the view (or tried to enumerate its addresses)."""
    with pytest.raises(ConstraintError, match="elements per partition, more than an? sbuf "
                                              "partition holds"):
        Device().execute(load(_memset_program([65535, 65535], [0, 0])), [])
    b = NeffBuilder("absurd read")
    done = b.semaphore()
    b.memset(sbuf(128, [1]), 1.0, signal=done)
    b.tensor_reduce(sbuf(128, [1], offset=64), sbuf(128, [4000, 4000, 4000], strides=[0, 0, 0]),
                    "add", dims=3, waits=[(done, 1)])
    with pytest.raises(ConstraintError, match="elements per partition"):
        Device().execute(load(b.to_bytes()), [])


def test_absurd_stride_of_a_size_1_dimension_is_ignored():
    """A record mutation set the stride of a size-1 dimension to -2**63: harmless to the bounds
    checks (the dimension never moves), but its byte stride overflowed numpy's ("Maximum
    allowed dimension exceeded"). Such strides are now taken as 0."""
    b = NeffBuilder("size-1 stride")
    x = b.input("x", (32, 1))
    y = b.output("y", (32, 1))
    s = b.semaphore()
    b.dma(sbuf(32, [1], strides=[-2**63]), hbm(x, 32, [1], strides=[2**63 - 1]), signal=s)
    b.dma(hbm(y, 32, [1], strides=[-2**63]), sbuf(32, [1], strides=[2**62]), waits=[(s, 1)])
    xv = np.arange(32, dtype=np.float32).reshape(32, 1)
    np.testing.assert_array_equal(Device().execute(load(b.to_bytes()), [xv]).outputs[0], xv)


def test_overlapping_write_is_found_without_enumerating_it():
    """Pigeonhole: 200000 elements within a 2-byte span must overlap; no enumeration."""
    b = NeffBuilder("overlap")
    b.memset(sbuf(128, [2, 100000], "ui8", strides=[1, 0]), 0.0)
    with pytest.raises(ConstraintError, match="more than once"):
        Device().execute(load(b.to_bytes()), [])


def test_huge_irregular_hbm_write_is_rejected_not_enumerated():
    """An interleaved HBM write pattern of more than MAX_CHECKED_ELEMENTS elements (here
    injective: partition p, element i at 3p + 2i) is refused instead of materialising and
    sorting every address."""
    from torchneuron.sim.rules import MAX_CHECKED_ELEMENTS

    free = 32769
    n = 128 * free // 2
    assert 2 * n > MAX_CHECKED_ELEMENTS
    b = NeffBuilder("irregular")
    y = b.output("y", (2 * n + 2,), "ui8")
    b.dma(hbm(y, 2, [n], "ui8", partition_stride=3, strides=[2]), sbuf(128, [free], "ui8"))
    with pytest.raises(ConstraintError, match="too irregular to check"):
        Device().execute(load(b.to_bytes()), [])
    # The same pattern, small, is checked exactly and accepted.
    from torchneuron.sim.rules import _distinct_addresses
    assert _distinct_addresses((2, 1000), (3, 2), 1) is True
    assert _distinct_addresses((2, 1000), (2, 2), 1) is False     # 2p + 2i repeats


def test_fuzz_helpers_detect_changes():
    data = F.seeds()[0].data
    assert F.changed_positions(data, data) == set()
    flipped = bytearray(data)
    flipped[70] ^= 4
    assert F.changed_positions(data, bytes(flipped)) == {70}
    assert F.changed_positions(data, data[:-3]) == {len(data) - 3, len(data) - 2,
                                                     len(data) - 1}
    np.testing.assert_array_equal(F.seeds()[1].outputs[3], [[1, 3, 5, 7, 9, 11],
                                                             [11, 13, 15, 17, 19, 21],
                                                             [21, 23, 25, 27, 29, 31],
                                                             [31, 33, 35, 37, 39, 41]])
