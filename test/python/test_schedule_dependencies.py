"""trn-schedule's dependency analysis (compiler/transforms/schedule.py): the byte-range index
that keeps it near-linear must find exactly the conflicts a scan of every earlier access
finds, and a buffer placed where another lived must wait for every access of that one
(through the other's last accesses, which come after the rest)."""

import random

import pytest

from torchneuron.compiler.transforms.schedule import _take_over, box_dependencies


def _overlaps(a, b):
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def _covers(outer, inner):
    return outer[0] <= inner[0] and inner[1] <= outer[1] and outer[2] <= inner[2] \
        and inner[3] <= outer[3]


def _scanned_dependencies(records, address_range):
    """The analysis by definition: every live earlier access of the buffer is tested."""
    writes, reads, accesses, inherited = {}, {}, {}, {}
    occupants = {"sbuf": [], "psum": [], "hbm": []}
    preds = []
    for index, operands in enumerate(records):
        needs = set()
        for buffer, role, box in operands:
            if buffer not in writes:
                writes[buffer], reads[buffer], accesses[buffer] = [], [], []
                inherited[buffer] = set()
                placed = address_range(buffer)
                if placed is not None:
                    for previous in _take_over(occupants[placed[0]], *placed[1:], buffer):
                        inherited[buffer].update(accesses[previous])
            needs |= inherited[buffer]
            write = role in ("dst", "accum")
            needs |= {i for b, i in writes[buffer] if _overlaps(b, box)}
            if write:
                needs |= {i for b, i in reads[buffer] if _overlaps(b, box)}
            (writes if write else reads)[buffer].append((box, index))
            accesses[buffer].append(index)
            if role == "dst":
                writes[buffer] = [(b, i) for b, i in writes[buffer]
                                  if i == index or not _covers(box, b)]
                reads[buffer] = [(b, i) for b, i in reads[buffer] if not _covers(box, b)]
        needs.discard(index)
        preds.append(sorted(needs))
    return preds


def _random_box(rng, width_scale):
    p0 = rng.randrange(128)
    b0 = rng.randrange(1 << 22)
    width = max(1, int(rng.paretovariate(0.7) * width_scale)) if rng.random() < 0.3 \
        else rng.choice([2, 64, 1536, 16384])
    return (p0, min(128, p0 + rng.choice([1, 16, 128])), b0, b0 + width)


@pytest.mark.parametrize("seed", range(4))
def test_indexed_dependencies_equal_a_scan_of_every_access(seed):
    rng = random.Random(seed)
    roles = ["src", "src", "dst", "dst", "accum"]
    buffers = ["a", "b", "c", "d"]             # few buffers: thousands of accesses each
    records = []
    for _ in range(3000):
        records.append([(rng.choice(buffers), rng.choice(roles), _random_box(rng, 4096))
                        for _ in range(rng.randint(1, 3))])
        if rng.random() < 0.02:           # a covering write retires what it covers
            records.append([(rng.choice(buffers), "dst", (0, 128, 0, 1 << 23))])
    # Two buffers share addresses, so the second inherits the first's accesses.
    placed = {"c": ("hbm", 0, 1 << 23), "d": ("hbm", 4096, 8192)}
    want = _scanned_dependencies(records, placed.get)
    got = box_dependencies(records, placed.get)
    # The same order: every edge is one of the scan's, and every one of the scan's is implied.
    assert all(set(g) <= set(w) for g, w in zip(got, want))
    assert _ancestors(got) == _ancestors(want)
    assert sum(map(len, want)) > len(records)         # the analysis found conflicts


def _ancestors(preds):
    """Per instruction, the set of instructions it comes after (transitively), as a bitset."""
    reach = []
    for needs in preds:
        bits = 0
        for p in needs:
            bits |= reach[p] | (1 << p)
        reach.append(bits)
    return reach


def test_a_buffer_placed_where_another_lived_waits_only_for_its_last_accesses():
    # "a": written by two DMA pieces (0, 1), read by one instruction (2) and by another that
    # depends on nothing else of it (3). "b" then takes a's place: its accesses wait for 2
    # and 3, which come after 0 and 1, not for all four; a read of what b's first piece
    # wrote (6) waits for that piece alone, which waited for them.
    records = [
        [("a", "dst", (0, 64, 0, 256))],
        [("a", "dst", (64, 128, 0, 256))],
        [("x", "dst", (0, 128, 0, 256)), ("a", "src", (0, 128, 0, 256))],
        [("y", "dst", (0, 64, 0, 256)), ("a", "src", (0, 64, 0, 128))],
        [("b", "dst", (0, 64, 0, 256))],
        [("b", "dst", (64, 128, 0, 256))],
        [("z", "dst", (0, 64, 0, 256)), ("b", "src", (0, 64, 0, 256))],
    ]
    placed = {"a": ("sbuf", 0, 256), "b": ("sbuf", 0, 256)}
    got = box_dependencies(records, placed.get)
    assert got[4] == [2, 3] and got[5] == [2, 3]
    assert got[6] == [4]
    assert _ancestors(got) == _ancestors(_scanned_dependencies(records, placed.get))


def test_list_schedule_charges_a_dependent_back_to_back_pair_the_fixed_overhead():
    """trn-schedule's forward pass estimates end times as the simulator charges them: an ACT,
    DVE or POOL instruction placed right after one it depends on, on the same engine, pays
    TARGET.md's fixed overhead; an independent neighbour, or a dependency on another engine,
    does not; PE's accumulating matmuls pipeline."""
    from torchneuron.compiler.transforms.schedule import _forward_pass
    from torchneuron.target import TRN2

    cost = 1000.0
    overhead = TRN2.fixed_overhead_cycles / TRN2.engine_ghz("dve")

    def makespan(engines, preds):
        succs = [[] for _ in engines]
        for i, ps in enumerate(preds):
            for p in ps:
                succs[p].append(i)
        priority = [float(len(engines) - i) for i in range(len(engines))]
        return _forward_pass(engines, [cost] * len(engines), [set(ps) for ps in preds], succs,
                             priority, TRN2).makespan

    assert makespan(["dve", "dve"], [[], [0]]) == pytest.approx(2 * cost + overhead)
    assert makespan(["pool", "pool"], [[], [0]]) == pytest.approx(
        2 * cost + TRN2.fixed_overhead_cycles / TRN2.engine_ghz("pool"))
    assert makespan(["dve", "dve"], [[], []]) == pytest.approx(2 * cost)
    assert makespan(["act", "dve"], [[], [0]]) == pytest.approx(2 * cost)
    assert makespan(["pe", "pe"], [[], [0]]) == pytest.approx(2 * cost)
    # Between the dependent pair, an independent instruction takes the engine: no overhead.
    assert makespan(["dve", "dve", "dve"], [[], [], [0]]) == pytest.approx(3 * cost)


def test_hbm_boxes_hold_every_element_their_pattern_touches():
    """An HBM access's box, in rows of any length its buffer's trailing dims make, holds
    every element the access pattern touches (boxes that do not meet mean no conflict),
    strides of either sign included."""
    import itertools

    from torch_mlir import ir

    from torchneuron.compiler.transforms.schedule import _box
    from torchneuron.dialects import make_context

    rng = random.Random(7)
    with make_context():
        for _ in range(300):
            shape = [rng.choice([1, 2, 3, 4, 8]) for _ in range(rng.randrange(1, 5))]
            total = 1
            for d in shape:
                total *= d
            buffer_type = ir.Type.parse(f"memref<{'x'.join(map(str, shape))}xf32, \"hbm\">")
            # (Strides of either sign: a flipped view reads with a negative one.)
            dims = [(rng.choice([1, 1, -1, 2, 3, shape[-1], -shape[-1], total // shape[0]]),
                     rng.randrange(1, 4)) for _ in range(rng.randrange(1, 4))]
            low = sum(min(0, s * (n - 1)) for s, n in dims)
            high = sum(max(0, s * (n - 1)) for s, n in dims)
            if high - low >= total:
                continue
            offset = rng.randrange(-low, total - high)
            ap = (offset, *[x for d in dims for x in d])
            touched = {offset + sum(s * i for (s, _), i in zip(dims, index))
                       for index in itertools.product(*[range(n) for _, n in dims])}
            rows = [None] + [total // shape[0] // k for k in (1, 2) if shape[0] > 0]
            size = 1
            for d in reversed(shape[1:]):
                size *= d
                rows.append(size)
            for row in rows:
                p0, p1, b0, b1 = _box(buffer_type, ap, row)
                length = row or shape[-1]
                for element in touched:
                    r, c = divmod(element, length)
                    assert p0 <= r < p1 and b0 <= c * 4 and (c + 1) * 4 <= b1, \
                        (shape, ap, row, element, (p0, p1, b0, b1))


def test_schedule_cost_memo_tells_operand_roles_and_ignores_offsets():
    """trn-schedule remembers instruction costs per what the cost model reads. Two ACTIVATEs
    on the same buffer types and patterns differ in cost when one sums into an `accum` tile
    and the other reads a `bias` (the memo once keyed without roles and handed the first's
    cost to the second); patterns that differ only in their offsets cost the same, and each
    answer equals the cost model's for the op itself."""
    from torch_mlir import ir

    from torchneuron import cost_model
    from torchneuron.compiler import ir_utils as U
    from torchneuron.compiler.codegen.neff_writer import cost_view
    from torchneuron.compiler.transforms.schedule import _cost, _Decoded
    from torchneuron.dialects import make_context
    from torchneuron.dialects.common import memref_info_cache
    from torchneuron.target import TRN2

    tile = 'memref<128x1536xf32, "sbuf">'
    column = 'memref<128x1xf32, "sbuf">'
    aps = ("[array<i64: {o}, 1536, 128, 1, 768>, array<i64: {o}, 1536, 128, 1, 768>, "
           "array<i64: 0, 1, 128, 1, 1>]")
    activation = ('"nisa.activation"(%t, %t, %c) {{aps = {aps}, engine = "act", '
                  'func = "exp", operandSegmentSizes = array<i32: 1, 1, {segments}>, '
                  'scale = 1.0 : f32}} : ({tile}, {tile}, {column}) -> ()')
    text = f"""
    func.func @f() {{
      %t = "nisa.alloc"() {{memory = "sbuf"}} : () -> {tile}
      %c = "nisa.alloc"() {{memory = "sbuf"}} : () -> {column}
      {activation.format(aps=aps.format(o=0), segments="0, 0, 1", tile=tile, column=column)}
      {activation.format(aps=aps.format(o=0), segments="1, 0, 0", tile=tile, column=column)}
      {activation.format(aps=aps.format(o=0), segments="1, 0, 0", tile=tile, column=column)}
      {activation.format(aps=aps.format(o=0), segments="0, 0, 1", tile=tile, column=column)}
      {activation.format(aps=aps.format(o=768), segments="0, 0, 1", tile=tile, column=column)}
      return
    }}"""
    with make_context(), memref_info_cache():
        module = ir.Module.parse(text)
        func = next(U.functions(module.operation))
        ops = [op for op in U.body_ops(func) if op.name == "nisa.activation"]
        known: dict = {}
        costs = [_cost(_Decoded(op), TRN2, cost_model, known) for op in ops]
        expected = [cost_model.compute_cycles(cost_view(op), TRN2) / TRN2.engine_ghz("act")
                    for op in ops]
    assert costs == expected
    assert costs[0] != costs[1]          # accum against bias
    assert costs[0] == costs[3] == costs[4] and costs[1] == costs[2]
    assert len(known) == 2
