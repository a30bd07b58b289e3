"""Tiled lowering of row-wise kernels (kind "rows", formed by trn-fuse): reductions over the
trailing dims R of an iteration space S = K x R, with the ops before them and the ops that
bring the reduced (per-row) values back to the rows (softmax, layer/RMS norm and their
backward).

Layout: rows on partitions, a whole row on the free axis. The kept dims K are merged where
every operand's layout allows; the innermost merged group is tiled 128 rows at a time, the
others loop. Per tile, each value over S is one [P, L] SBUF tile (L = elements of a row)
and each per-row value one [P, 1] tile:
- a reduction is one tensor_reduce along the free axis;
- an elementwise op between a row value and a broadcast per-row value is a tensor_scalar
  with that [P, 1] tile as its per-partition operand (no broadcast is materialised);
- operands constant over K (a norm's weight and bias) are loaded once, before the loops;
- the scalar engine takes what it does in one pass: `f(x - m)` for a per-row m (softmax's
  exp) is one activation with bias -m, and a sum of that activation's results is
  accumulated by the activation as it writes (no tensor_reduce), as is a sum of squares
  (a variance's: one square activation); a per-row m read only to be subtracted (a norm's
  mean) is made negated in the multiply that makes it; scalings by a constant go to
  whichever of ACT and DVE has less work in the tile, so the two engines share it.
So the rows are read from HBM once and the result written once, however many reductions and
broadcasts the group holds.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Callable

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError, UnsupportedOpError
from torchneuron.compiler.kernels.elementwise import load_leaf, spread_column
from torchneuron.compiler.kernels.emitter import Emitter, Tile
from torchneuron.compiler.kernels.tile_ops import (
    ELEMENTWISE_OPS, SOURCE_OPS, VIEW_OPS, ConstantVectors, emit_elementwise, power_of_two,
    rounding_writes, widening_aliases,
)
from torchneuron.compiler.kernels.views import HbmView, source_view
from torchneuron.dialects.nisa import MAX_FREE_DIMS


@dataclasses.dataclass
class _Layout:
    """How the kept dims K are walked: groups of dims merged into one (contiguous in every
    view that varies over K), the last group on partitions."""
    kept: tuple[int, ...]             # the sizes of K
    groups: list[list[int]]           # dims of K with size > 1, merged; the last on partitions

    @property
    def rows(self) -> int:
        return math.prod(self.kept[d] for d in self.groups[-1]) if self.groups else 1

    @property
    def loops(self) -> list[list[int]]:
        return self.groups[:-1]


class LoadedRows:
    """The whole rows of HBM values that a row-wise part of a kernel loads, kept by where they
    start, for a later part of the same kernel that reads some of them (a pre-norm layer's
    residual add after the norm that loaded the same rows) to take from SBUF instead of
    loading them again. `produce` is lower_rows' hook; `part` is Epilogue.given_part."""

    def __init__(self, em: Emitter):
        self.em = em
        # (buffer, offset of the first row) -> (tile, elements between rows)
        self.tiles: dict[tuple, tuple[Tile, int]] = {}

    def produce(self, value: ir.Value, view: HbmView, *scaled) -> Tile | None:
        """Load a leaf that is whole rows of a buffer as lower_rows would (`load_leaf`) and
        keep its tile; None for any other leaf (lower_rows loads it), and for a scaled one."""
        if scaled or view.buffer is None or view.rank != 2 or view.strides[1] != 1 or \
                view.strides[0] < view.shape[1] or view.offset % view.strides[0]:
            return None
        tile = load_leaf(self.em, view)
        self.tiles[(view.buffer, view.offset)] = (tile, view.strides[0])
        return tile

    def part(self, view: HbmView) -> Tile | None:
        """The kept tile's part holding `view` [rows, columns] (rows from the tile's first
        row on, a run of columns), or None."""
        if view.buffer is None or view.rank != 2 or view.strides[1] != 1:
            return None
        row = view.strides[0]
        if row <= 0:
            return None
        column = view.offset % row
        found = self.tiles.get((view.buffer, view.offset - column))
        if found is None:
            return None
        tile, stride = found
        rows, columns = view.shape
        if stride != row or rows > tile.partitions or column + columns > tile.free:
            return None
        return tile.rows(rows).columns(column, columns)


def lower_rows(em: Emitter, body: list[ir.Operation], views: dict,
               view_of: Callable[[ir.Operation, HbmView], HbmView],
               output: tuple[ir.Value, HbmView],
               produce: Callable[..., Tile | tuple[Tile, Tile] | None] | None = None,
               consume: Callable[[Tile, HbmView, Tile | None], None] | None = None,
               defer_division: bool = False,
               row_width: Callable[[dict], int] | None = None,
               mask_columns: Callable[[dict], tuple[ir.Value, int, int]] | None = None,
               rows_see_a_key: Callable[[dict], bool] | None = None,
               further_results: list[tuple[ir.Value, HbmView]] = ()) -> None:
    """`body`: the kernel's ops (without trn.yield); `views`: HbmViews of the values defined
    above the kernel; `view_of(op, source)`: the view a view op makes of an HBM view;
    `output`: (yielded value, destination view).

    A kernel that computes the rows' inputs or uses the result on chip (an attention kernel)
    passes `produce(value, view)`, which returns the tile of a row leaf for the rows `view`
    covers (or None: load it); `produce(value, view, c)` returns the tile of c * value and
    the [P, 1] tile of its negated row max (asked where the max only feeds a softmax's exp,
    c a power of two), or the tile of value and None where it cannot.
    `consume(tile, view, divisor)` takes each result
    tile in place of its store to `view`. With `defer_division`, a result that is a row
    value divided by a per-row one (softmax's e / sum(e)) is handed over undivided, in the
    result's type, with the [P, 1] divisor: a consumer that contracts the row (attention's
    P @ V) divides its far smaller product instead of the row.
    `row_width(leaf_views)`, given the view of each row leaf for a tile's rows, says how many
    leading elements of those rows to compute (a one-dimensional row, with `consume`): the
    caller has proven that the rest leave the consumed result as it is (attention's keys
    that a constant mask hides from every row of the tile).
    `mask_columns(leaf_views)` names a row leaf added to the row in place and the columns
    [c0, c1) of the tile's rows outside which it is 0: the caller has proven that adding 0
    there leaves the result as it is (a softmax's constant mask), so only those are added.
    `rows_see_a_key(leaf_views)`: the caller has proven that no row of the tile is masked
    whole, so a safe softmax's guards for such rows (_safe_softmax) are left out there.
    `further_results`: further results, (value, destination view) pairs: per-row values, each
    stored as computed for a tile's rows (a layer norm's mean and 1/std, saved for its
    backward), and column values (`_columns`), stored once every tile has gone by (a layer
    norm's weight and bias gradients)."""
    reduces = [op for op in body if op.name == "trn.reduce"
               and min(U.array_attr(op, "dimensions")) > 0]
    if not reduces:
        raise CompileError("a row-wise kernel needs a reduction", body[-1].location)
    shape = tuple(U.shape(reduces[0].operands[0]))
    kept_rank = min(U.array_attr(reduces[0], "dimensions"))
    kept = shape[:kept_rank]
    row_elements = math.prod(shape[kept_rank:])

    def is_row(value: ir.Value) -> bool:
        return tuple(U.shape(value)) == shape

    leaf_views = dict(views)
    per_row_alias: dict = {}       # reshape of a per-row value -> that value
    broadcast_of: dict = {}        # broadcast over the rows -> the per-row value
    compute: list[ir.Operation] = []
    columns = _Columns()
    for op in body:
        result = op.results[0]
        if columns.take(op, shape, kept_rank):
            continue
        if op.name in SOURCE_OPS:
            leaf_views[result] = source_view(op)
        elif op.name in VIEW_OPS:
            source = op.operands[0]
            if source in leaf_views:
                leaf_views[result] = view_of(op, leaf_views[source])
            elif op.name == "trn.reshape" and not is_row(source) and not is_row(result):
                per_row_alias[result] = per_row_alias.get(source, source)
            elif op.name == "trn.broadcast" and is_row(result):
                broadcast_of[result] = per_row_alias.get(source, source)
            else:
                raise UnsupportedOpError(f"'{op.name}' of a value computed inside a row-wise "
                                         "kernel", op.location)
        else:
            if op.name == "trn.reduce" and (tuple(U.shape(op.operands[0])) != shape or
                                            min(U.array_attr(op, "dimensions")) != kept_rank):
                raise CompileError("a row-wise kernel's reductions must share their rows",
                                   op.location)
            compute.append(op)

    yielded, out_view = output
    yielded = per_row_alias.get(yielded, yielded)
    if yielded in columns.values:
        raise CompileError("a row-wise kernel's first result is over its rows, not a column sum",
                           body[-1].location)
    per_row_results = [(v, view) for v, view in further_results if v not in columns.values]
    column_results = [(v, view) for v, view in further_results if v in columns.values]
    for value, _ in per_row_results:
        if is_row(per_row_alias.get(value, value)):
            raise CompileError("a row-wise kernel's further results are per-row values or "
                               "column sums", body[-1].location)
    if columns.sums and (row_width is not None or mask_columns is not None):
        raise CompileError("a row-wise kernel that computes part of its rows sums no columns",
                           body[-1].location)
    leaves: list[ir.Value] = []
    for op in compute + columns.sums:
        for v in op.operands:
            if v in leaf_views and v not in leaves:
                leaves.append(v)
    invariant = [v for v in leaves if is_row(v) and all(
        s == 0 for s in leaf_views[v].strides[:kept_rank])]
    varying = [leaf_views[v] for v in leaves if v not in invariant] + [out_view]
    layout = _kept_layout(kept, [view.strides[:kept_rank] for view in varying])

    tp = min(layout.rows, em.target.num_partitions)
    if row_width is not None and (consume is None or len(shape) - kept_rank != 1):
        raise CompileError("a row-wise kernel narrows one-dimensional rows it hands over",
                           body[-1].location)
    consts = ConstantVectors(em)
    stored_per_row = {per_row_alias.get(value, value) for value, _ in per_row_results}
    storage, aliases = rounding_writes(compute, {yielded} | stored_per_row)
    # A loaded row widened only for elementwise ops (a saved bf16 softmax read back in fp32)
    # is read as loaded: the engines widen their inputs exactly as they read them, and so
    # does PE summing a column (a bf16 row times bf16 ones, accumulated in fp32).
    aliases.update(widening_aliases(compute, {yielded} | stored_per_row,
                                    readers=set(columns.sums)))
    # Values stored as they are, or summed over the rows, which no folding below may leave
    # uncomputed or compute negated or scaled in their place (a stored per-row value,
    # through the roundings that write it in place of its source, too).
    summed = {op.operands[0] for op in columns.sums}
    results = {yielded, output[0]} | stored_per_row | summed | \
        {aliases[v] for v in stored_per_row | summed if v in aliases}


    users = {}
    for op in compute:
        for v in op.operands:
            users.setdefault(v, []).append(op)
    # f(x - m): the subtraction folds into the activation's per-partition bias.
    biased = {}
    for op in compute:
        (user,) = users.get(op.results[0], [None])[:1] or [None]
        if op.name == "trn.tensor_tensor" and U.str_attr(op, "op") == "sub" and \
                op.operands[1] in broadcast_of and op.operands[0] not in broadcast_of and \
                len(users.get(op.results[0], [])) == 1 and user.name == "trn.activation" and \
                U.float_attr(user, "bias") == 0.0 and op.results[0] not in results:
            biased[user] = op
    # sum(f(...)) over the row: accumulated by the activation that computes f.
    producer_of = {op.results[0]: op for op in compute}
    accumulated = {}
    for op in compute:
        if op.name == "trn.reduce" and U.str_attr(op, "op") == "add":
            producer = producer_of.get(op.operands[0])
            if producer is not None and producer.name == "trn.activation" and \
                    producer not in accumulated:
                accumulated[producer] = op
    # sum(x * x) over the row (a variance's sum of squares), the squares read by nothing
    # else: one square activation on ACT that sums its fp32 results as it writes, instead of
    # a DVE pass to reduce them. The squares are summed as computed, not rounded to their
    # storage type first: a fused intermediate read unrounded, as trn-fuse's other fused
    # intermediates are (and Inductor's).
    alias_of = {}                     # a value -> the roundings of it written in its place
    for alias, source in aliases.items():
        alias_of.setdefault(source, []).append(alias)
    squares_summed = {}
    for op in compute:
        if op.name != "trn.reduce" or U.str_attr(op, "op") != "add":
            continue
        squared = aliases.get(op.operands[0], op.operands[0])
        producer = producer_of.get(squared)
        readers = [u for v in [squared] + alias_of.get(squared, [])
                   for u in users.get(v, []) if u.results[0] not in aliases]
        if producer is not None and producer.name == "trn.tensor_tensor" and \
                U.str_attr(producer, "op") == "mul" and \
                producer.operands[0] == producer.operands[1] and readers == [op] and \
                isinstance(U.element_type(squared), ir.FloatType) and \
                squared not in results:
            squares_summed[producer] = op
    folded = {op for op in biased.values()} | set(accumulated.values()) | \
        set(squares_summed.values())
    # y = x * c (c > 0) read only by max(y) and by f(y - m) (softmax's scaling): the max is
    # taken of x and scaled, and f reads x with the scale folded into its own (ACT applies
    # scale, then bias, each rounded to fp32, as the separate multiply and subtraction did;
    # rounding is monotonic, so max(fl(c x)) = fl(c max(x))). One pass over the row fewer.
    scaled = {}                       # y -> (x, c)
    for op in compute:
        y = op.results[0]
        if op.name != "trn.tensor_scalar" or U.str_attr(op, "op") != "mul" or \
                ir.BoolAttr(op.attributes["reverse"]).value or not is_row(y) or \
                not U.float_attr(op, "scalar") > 0.0 or y in results or \
                storage.get(y, U.element_type(y)) != ir.F32Type.get():
            continue
        names = [y] + alias_of.get(y, [])
        readers = [u for v in names for u in users.get(v, []) if u.results[0] not in aliases]
        if readers and all(
                (r.name == "trn.reduce" and U.str_attr(r, "op") == "max") or
                (r in {sub: act for act, sub in biased.items()} and r.operands[0] in names
                 and U.float_attr({sub: act for act, sub in biased.items()}[r], "scale") == 1.0)
                for r in readers):
            scaled[y] = (op.operands[0], U.float_attr(op, "scalar"))
            folded.add(op)
    scaled_names = {a: y for y in scaled for a in [y] + alias_of.get(y, [])}
    # ... and where that scaled max m = c max(x) is read only as the bias -m of such an f, the
    # bias is max(x) * -c in one multiply (fl(-c v) = -fl(c v) exactly; m itself unneeded).
    scaled_subs = {sub for sub in biased.values() if sub.operands[0] in scaled_names}
    safe = _safe_softmax(compute, users, broadcast_of, per_row_alias, biased, accumulated,
                         storage, leaf_views, results)
    # (A _safe_softmax's test of the max is folded away: it reads nothing.)
    safe_tests = {cond for cond, _, _ in safe.values()}
    bias_only = set()
    for op in compute:
        m = op.results[0]
        if op.name != "trn.reduce" or op.operands[0] not in scaled_names or \
                m in results or storage.get(m, U.element_type(m)) != ir.F32Type.get():
            continue
        names = {m} | {a for a, v in per_row_alias.items() if v == m}
        spread = [b for b, v in broadcast_of.items() if v == m]
        if not any(u not in safe_tests for v in names for u in users.get(v, [])) and \
                all(u in scaled_subs and u.operands[1] == b for b in spread
                    for u in users.get(b, [])):
            bias_only.add(op)
    # ... and where that x is a leaf a producer evacuates from PSUM (attention's scores) and c
    # a power of two no greater than 1, the evacuation writes c x (exactly c times the
    # rounded x: such a scaling commutes with rounding) and its negated max in one DVE pass
    # (tensor_scalar_reduce): that is the bias -m as it is, and f reads c x at scale 1. No
    # reduction pass and no [P, 1] multiply (`prescaled`). Where x is instead computed here in
    # fp32 and read by nothing but that scaling, one DVE pass overwrites it with c x (rounded
    # to fp32, as ACT's scale would round it) and takes its negated max: the bias as it is,
    # f reading c x at scale 1; no [P, 1] multiply (`rescaled_in_place`).
    prescaled = {}                    # leaf x -> c
    rescaled_in_place = set()
    computed = {op.results[0] for op in compute}
    for op in bias_only:
        y = scaled_names[op.operands[0]]
        x, c = scaled[y]
        reduces_of_y = [u for v in [y] + alias_of.get(y, []) for u in users.get(v, [])
                        if u.name == "trn.reduce"]
        if reduces_of_y != [op] or len(users.get(x, [])) != 1:
            continue
        if produce is not None and x in leaves and power_of_two(c) and c <= 1.0:
            prescaled[x] = c
        elif x in computed and not alias_of.get(x) and x not in results and \
                storage.get(x, U.element_type(x)) == ir.F32Type.get():
            rescaled_in_place.add(x)
    safe_exp = {act: select for select, (_, act, _) in safe.items()}
    folded |= safe_tests
    safe_div = {div: select for select, (_, _, div) in safe.items()}
    unread = {select.operands[1] for select in safe if all(u in safe for u in
                                                             users[select.operands[1]])}
    deferred = _deferred_division(compute, users, broadcast_of, accumulated, safe, aliases,
                                  yielded) if defer_division and consume is not None else None
    if deferred is not None:
        # The numerator is written in the result's type (it is read by nothing else but
        # its folded sum, which the activation takes of its fp32 results).
        storage[deferred.numerator] = storage.get(deferred.result,
                                                  U.element_type(deferred.result))
        folded |= deferred.skipped
    def one_step(op: ir.Operation) -> tuple | None:
        """(the value it reads, ALU op, its other operand: a constant or a per-row value,
        reversed) for one ALU step on a value: a constant tensor_scalar, or a tensor_tensor
        of a value and a broadcast per-row value (a norm's x - mean, its * rstd); else
        None."""
        if op.name == "trn.tensor_scalar":
            return (op.operands[0], U.str_attr(op, "op"), U.float_attr(op, "scalar"),
                    ir.BoolAttr(op.attributes["reverse"]).value)
        if op.name == "trn.tensor_tensor" and sum(v in broadcast_of for v in op.operands) == 1:
            lhs, rhs = op.operands
            reverse = lhs in broadcast_of
            return (rhs, U.str_attr(op, "op"), lhs, True) if reverse else \
                (lhs, U.str_attr(op, "op"), rhs, False)
        return None

    # Two such steps in a row (a variance's mean and its epsilon, x * c + e; a norm's
    # (x - mean) * rstd, or its backward's 768 g - sum), the first's fp32 result read by the
    # second alone: one instruction with two ALU ops, which computes each in fp32 as the two
    # instructions did (`chained`: second -> first), one pass over the row where there were
    # two.
    chained = {}
    broadcast_sources = set(broadcast_of.values()) | set(per_row_alias.values())
    for op in compute:
        y = op.results[0]
        readers = users.get(y, [])
        # (Not a step that is already the second of a chain: an instruction takes two.)
        if one_step(op) is None or op in folded or op in safe_div or op in chained or \
                len(readers) != 1 or \
                y in results or y in alias_of or y in broadcast_sources or \
                y in scaled_names or y in prescaled or y in rescaled_in_place or \
                storage.get(y, U.element_type(y)) != ir.F32Type.get():
            continue
        (second,) = readers
        step = one_step(second)
        if step is not None and step[0] == y and second not in folded and \
                second not in safe_div and second not in chained and \
                is_row(second.results[0]) == is_row(y):
            chained[second] = op
    folded |= set(chained.values())

    # A per-row value m = v * c read only to be taken from rows, x - m (a norm's mean,
    # centring them), by an activation's bias -m (f(x - m) at scale 1) or by an identity
    # activation or DVE op adding -m (`_per_row_op`): -m is computed in its place, v * -c in
    # one multiply (fl(-c v) = -fl(c v) exactly, and so is its rounding to m's storage
    # type), instead of m and then a [P, 1] negation per tile (`negated`: such m).
    negated = set()
    centring = {sub for act, sub in biased.items()
                if act not in safe_exp and U.float_attr(act, "scale") == 1.0 and
                sub.operands[0] not in scaled_names}
    centring |= {op for op in compute
                 if op.name == "trn.tensor_tensor" and U.str_attr(op, "op") == "sub" and
                 op not in folded and op not in safe_div and is_row(op.results[0]) and
                 op.operands[1] in broadcast_of and op.operands[0] not in broadcast_of}
    for op in compute:
        m = op.results[0]
        if op.name != "trn.tensor_scalar" or U.str_attr(op, "op") != "mul" or \
                ir.BoolAttr(op.attributes["reverse"]).value or is_row(m) or \
                m in results or op in folded or op in chained:
            continue
        names = {m} | set(alias_of.get(m, []))
        names |= {r for r, v in per_row_alias.items() if v in names}
        spread = [b for b, v in broadcast_of.items() if v in names]
        if spread and not names & results and \
                not any(u.results[0] not in aliases for v in names
                        for u in users.get(v, [])) and \
                all(u in centring and u.operands[1] == b
                    for b in spread for u in users.get(b, [])):
            negated.add(m)
    negated_names = negated | {a for m in negated for a in alias_of.get(m, [])}

    # Operands constant over K: loaded once, every partition the same row.
    resident = {v: load_leaf(em, _tile_view(leaf_views[v], layout, kept_rank, {}, 0, tp,
                                            row=True)) for v in invariant if v not in unread}
    # Leaves broadcast over a loop's dims (a causal mask over heads) would be loaded again
    # on each of its iterations: their distinct tiles are kept and read again instead, where
    # all of them take at most a sixteenth of SBUF.
    kept_tiles: dict[HbmView, Tile] = {}
    repeated_bytes = {v: _repeated_tiles_bytes(leaf_views[v], layout, tp,
                                               row_elements if is_row(v) else 1)
                      for v in leaves if v not in invariant and v not in unread and
                      leaf_views[v].buffer is not None}
    repeated = {v for v, n in repeated_bytes.items() if n is not None}
    if sum(repeated_bytes[v] for v in repeated) > em.target.sbuf_partition_bytes // 16:
        repeated = set()

    sums = _ColumnSums(em, columns, row_elements)
    for outer in itertools.product(*(range(math.prod(kept[d] for d in group))
                                     for group in layout.loops)):
        index = dict(zip(map(tuple, layout.loops), outer))
        for p0 in range(0, layout.rows, tp):
            pn = min(tp, layout.rows - p0)
            leaf_tile_views = {v: _tile_view(leaf_views[v], layout, kept_rank, index, p0, pn,
                                             row=is_row(v))
                               for v in leaves if v not in unread}
            width = row_elements if row_width is None else row_width(leaf_tile_views)
            added = mask_columns(leaf_tile_views) if mask_columns is not None else None
            # (_safe_softmax's guards are for rows masked whole: none in this tile.)
            guarded = rows_see_a_key is None or not rows_see_a_key(leaf_tile_views)

            def narrow(view: HbmView, row: bool = True) -> HbmView:
                """A row tile's view of the `width` elements of each row computed."""
                return view.slice(1, 0, width) if row and width < row_elements else view

            tiles: dict = {v: t.rows(pn) if not is_row(v) or width == row_elements else
                           t.rows(pn).columns(0, width) for v, t in resident.items()}
            produced_in_psum: set = set()   # leaves a producer left in PSUM for this tile
            unscaled_by: dict = {}     # a bias-only max (bias_only) -> the c it omits
            negated_max: dict = {}     # x of `prescaled` -> the [P, 1] -max(c x) produced
            for v in leaves:
                if v not in tiles and v not in unread:
                    view = narrow(leaf_tile_views[v], is_row(v))
                    got = produce(v, view, prescaled[v]) if v in prescaled else None
                    if got is not None:
                        # (No max where the producer cannot: then the tile holds x as it is.)
                        tiles[v], negmax = got
                        if negmax is not None:
                            negated_max[v] = negmax
                        continue
                    tile = produce(v, view) if produce is not None else None
                    if tile is not None and tile.memory == "psum":
                        produced_in_psum.add(v)
                    if tile is None and v in repeated:
                        tile = kept_tiles.get(view)
                        if tile is None:
                            tile = kept_tiles[view] = load_leaf(em, view)
                    tiles[v] = tile if tile is not None else load_leaf(em, view)

            def operand(v: ir.Value) -> Tile:
                v = per_row_alias.get(v, v)
                if v in broadcast_of:           # only where no per-partition form exists
                    return spread_column(em, tiles[broadcast_of[v]], width)
                return tiles[v]

            def step_operand(alu: str, other) -> tuple[str, float | Tile]:
                """A chained step's ALU op and operand: a constant, or the [P, 1] tile of a
                per-row value (x - m as x + (-m) where -m is what was made)."""
                if not isinstance(other, ir.Value):
                    return alu, other
                per_row = broadcast_of[other]
                return ("add" if per_row in negated_names else alu), tiles[per_row]

            for op in compute:
                result = op.results[0]
                if result in aliases:
                    if aliases[result] in tiles:        # (not when its producer folded away)
                        tiles[result] = tiles[aliases[result]]
                    continue
                if op in folded or result in tiles:     # (the select: _safe_softmax)
                    continue
                free = width if is_row(result) else 1
                etype = storage.get(result, U.element_type(result))
                dst = _psum_in_place(op, etype, tiles, produced_in_psum, users, aliases,
                                     results) if op.name == "trn.tensor_tensor" and \
                    op not in safe_div and is_row(result) else None
                if dst is None:
                    dst = em.alloc("sbuf", pn, free, etype)
                if op in chained:
                    first = chained[op]
                    source, alu0, operand0, reverse0 = one_step(first)
                    _, alu1, operand1, reverse1 = one_step(op)
                    alu0, operand0 = step_operand(alu0, operand0)
                    alu1, operand1 = step_operand(alu1, operand1)
                    engines = ("dve", "pool") if em.pool_sharing and is_row(result) and all(
                        t.memory == "sbuf" for t in (dst, operand(source))) else ("dve",)
                    em.tensor_scalar(dst, operand(source), alu0, operand0, reverse0,
                                     alu1, operand1, reverse1,
                                     engine=em.sooner_engine(dict.fromkeys(engines, free)))
                elif op in biased or op in accumulated:
                    scale = U.float_attr(op, "scale")
                    bias = None
                    # (_safe_softmax: a row all -inf gets the largest float as its bias, not
                    # +inf, so its exp is exp(-inf) = 0, not NaN.)
                    clamp = ("min", _FLT_MAX) if op in safe_exp and guarded else \
                        ("bypass", 0.0)
                    if op not in biased:
                        source = operand(op.operands[0])
                    elif biased[op].operands[0] in scaled_names:
                        sub = biased[op]
                        x, scale = scaled[scaled_names[sub.operands[0]]]
                        source = operand(x)
                        m = broadcast_of[sub.operands[1]]
                        if x in negated_max and clamp[0] == "bypass":   # c x already
                            scale, bias = 1.0, negated_max[x]
                        elif x in negated_max:
                            scale = 1.0
                            bias = em.alloc("sbuf", pn, 1, ir.F32Type.get())
                            em.tensor_scalar(bias, negated_max[x], "min", _FLT_MAX)
                        else:
                            bias = em.alloc("sbuf", pn, 1, ir.F32Type.get())
                            em.tensor_scalar(bias, tiles[m], "mul", -unscaled_by.get(m, 1.0),
                                             op1=clamp[0], operand1=clamp[1])
                    elif broadcast_of[biased[op].operands[1]] in negated_names:
                        source = operand(biased[op].operands[0])
                        bias = tiles[broadcast_of[biased[op].operands[1]]]      # -m
                    else:
                        sub = biased[op]
                        source = operand(sub.operands[0])
                        bias = em.alloc("sbuf", pn, 1, ir.F32Type.get())
                        em.tensor_scalar(bias, tiles[broadcast_of[sub.operands[1]]], "mul",
                                         -scale, op1=clamp[0], operand1=clamp[1])
                    if U.float_attr(op, "bias") != 0.0:
                        bias = consts.get(U.float_attr(op, "bias"), pn)
                    accum = None
                    if op in accumulated:
                        total = accumulated[op].results[0]
                        accum = em.alloc("sbuf", pn, 1, U.element_type(total))
                        tiles[total] = accum
                    em.activation(dst, source, U.str_attr(op, "func"), scale, bias, accum)
                elif result in negated:
                    em.tensor_scalar(dst, operand(op.operands[0]), "mul",
                                     -U.float_attr(op, "scalar"))
                elif op in squares_summed:
                    total = squares_summed[op].results[0]
                    accum = em.alloc("sbuf", pn, 1, storage.get(total, U.element_type(total)))
                    tiles[total] = accum
                    em.activation(dst, operand(op.operands[0]), "square", 1.0, None, accum)
                elif op in safe_div:
                    select = safe_div[op]
                    total = tiles[broadcast_of[op.operands[1]]]
                    if guarded:
                        total = em.alloc("sbuf", pn, 1, ir.F32Type.get())
                        em.tensor_scalar(total, tiles[broadcast_of[op.operands[1]]], "max",
                                         _FLT_MIN_NORMAL)
                    etype = storage.get(select.results[0], U.element_type(select.results[0]))
                    if etype != dst.element_type:
                        dst = em.alloc("sbuf", pn, free, etype)
                    em.tensor_scalar(dst, operand(op.operands[0]), "div", total)
                    tiles[select.results[0]] = dst
                elif op.name == "trn.reduce" and op in bias_only:
                    x, factor = scaled[scaled_names[op.operands[0]]]
                    if x in negated_max:            # produced with x (prescaled)
                        continue
                    if x in rescaled_in_place:
                        negated_max[x] = em.alloc("sbuf", pn, 1, ir.F32Type.get())
                        em.tensor_scalar_reduce(tiles[x], tiles[x], "mul", factor, "max",
                                                negated_max[x], negate=True)
                        continue
                    em.tensor_reduce(dst, operand(x), "max")
                    unscaled_by[result] = factor
                elif op.name == "trn.reduce" and op.operands[0] in scaled_names:
                    x, factor = scaled[scaled_names[op.operands[0]]]
                    unscaled = em.alloc("sbuf", pn, 1, ir.F32Type.get())
                    em.tensor_reduce(unscaled, operand(x), "max")
                    em.tensor_scalar(dst, unscaled, "mul", factor)
                elif op.name == "trn.reduce":
                    _reduce(em, dst, tiles[op.operands[0]], U.str_attr(op, "op"))
                elif op.name == "trn.tensor_tensor" and \
                        sum(v in broadcast_of for v in op.operands) == 1:
                    row_value, alu, per_row, reverse = one_step(op)
                    alu, per_row_tile = step_operand(alu, per_row)
                    _per_row_op(em, dst, operand(row_value), alu, per_row_tile, reverse)
                elif added is not None and op.name == "trn.tensor_tensor" and \
                        U.str_attr(op, "op") == "add" and added[0] in op.operands and \
                        any(tiles.get(v) is dst for v in op.operands if v != added[0]):
                    # In place: the columns where the mask is 0 stay as they are.
                    c0, cn = added[1], min(added[2], width) - added[1]
                    if cn > 0:
                        emit_elementwise(em, op, [operand(v).columns(c0, cn)
                                                  for v in op.operands],
                                         dst.columns(c0, cn), consts, share=is_row(result))
                else:
                    # Whole-row arithmetic may go to ACT when it would finish sooner there
                    # (a square, a constant multiply or add: the same roundings); a per-row
                    # [P, 1] value stays beside the DVE reduction that made it.
                    emit_elementwise(em, op, [operand(v) for v in op.operands], dst, consts,
                                     share=is_row(result))
                tiles[result] = dst

            divisor = None
            if deferred is not None:
                tile = tiles[deferred.numerator]
                divisor = tiles[deferred.divisor]
                if deferred.clamped and guarded:
                    divisor = em.alloc("sbuf", pn, 1, ir.F32Type.get())
                    em.tensor_scalar(divisor, tiles[deferred.divisor], "max", _FLT_MIN_NORMAL)
            else:
                tile = operand(yielded)
            if tile.element_type != out_view.element_type:
                cast = em.alloc("sbuf", pn, tile.free, out_view.element_type)
                em.copy(cast, tile)
                tile = cast
            target = narrow(_tile_view(out_view, layout, kept_rank, index, p0, pn,
                                       row=is_row(output[0])), is_row(output[0]))
            if consume is not None:
                consume(tile, target, divisor)
            else:
                em.store(target, 0, list(range(1, target.rank)), tile)
            for value, view in per_row_results:
                tile = operand(value)
                if tile.element_type != view.element_type:
                    cast = em.alloc("sbuf", pn, 1, view.element_type)
                    em.copy(cast, tile)
                    tile = cast
                target = _tile_view(view, layout, kept_rank, index, p0, pn, row=False)
                em.store(target, 0, list(range(1, target.rank)), tile)
            sums.add(operand, pn)
    sums.store(column_results, consts)


def is_column_sum(op: ir.Operation, shape: tuple, kept_rank: int) -> bool:
    """Whether `op` sums a row value of a row-wise space (`shape`, its first `kept_rank` dims
    the rows') over every row: a float add over exactly the kept dims (trn-fuse's
    `column-sums`, which `_Columns` lowers)."""
    return op.name == "trn.reduce" and \
        sorted(U.array_attr(op, "dimensions")) == list(range(kept_rank)) and \
        tuple(U.shape(op.operands[0])) == tuple(shape) and U.str_attr(op, "op") == "add" and \
        isinstance(U.element_type(op.operands[0]), ir.FloatType)


class _Columns:
    """A row-wise kernel's column sums (trn-fuse's `column-sums`): sums over every kept dim
    (all rows) of a row value, and the elementwise ops computing on those sums."""

    def __init__(self):
        self.sums: list[ir.Operation] = []
        self.ops: list[ir.Operation] = []        # after the sums, over a row's shape
        self.values: set = set()

    def take(self, op: ir.Operation, shape: tuple, kept_rank: int) -> bool:
        """Whether `op` is a column sum or computes on column sums (then it is taken)."""
        if op.name == "trn.reduce" and min(U.array_attr(op, "dimensions")) == 0:
            if not is_column_sum(op, shape, kept_rank):
                raise CompileError("a row-wise kernel's sum over its rows is a float sum over "
                                   "every kept dim of a row value", op.location)
            self.sums.append(op)
        elif any(v in self.values for v in op.operands):
            if op.name not in ELEMENTWISE_OPS or \
                    any(v not in self.values for v in op.operands):
                raise CompileError(f"a row-wise kernel computes on its column sums only with "
                                   f"elementwise ops of them alone, not '{op.name}'",
                                   op.location)
            self.ops.append(op)
        else:
            return False
        self.values.add(op.results[0])
        return True


class _ColumnSums:
    """Accumulates a row-wise kernel's column sums: each tile's rows are summed on PE, a
    ones column [P, 1] (stationary) times the tile [P, <= 512 columns] (moving), into a
    PSUM row that the next tile accumulates into; after the last tile the sums are moved
    to SBUF, the ops after them run, and they are stored. The ones have the summed tile's
    type (fp32 pairs only with fp32): a bf16 row is summed as loaded, exactly (products by
    1, fp32 accumulation)."""

    def __init__(self, em: Emitter, columns: _Columns, row_elements: int):
        self.em, self.columns, self.row_elements = em, columns, row_elements
        self.chunks = [(c0, min(_PSUM_ROW, row_elements - c0))
                       for c0 in range(0, row_elements, _PSUM_ROW)]
        f32 = ir.F32Type.get()
        self.psum = {op: [em.alloc("psum", 1, cn, f32) for _, cn in self.chunks]
                     for op in columns.sums}
        self.ones: dict = {}
        self.started = False

    def add(self, operand: Callable[[ir.Value], Tile], pn: int) -> None:
        em = self.em
        for op in self.columns.sums:
            tile = operand(op.operands[0])
            etype = tile.element_type
            if etype not in (ir.F32Type.get(), ir.BF16Type.get(), ir.F16Type.get()):
                wide = em.alloc("sbuf", pn, tile.free, ir.F32Type.get())
                em.copy(wide, tile)
                tile, etype = wide, wide.element_type
            ones = self.ones.get(str(etype))
            if ones is None:
                ones = self.ones[str(etype)] = em.alloc("sbuf", em.target.num_partitions, 1,
                                                        etype)
                em.memset(ones, 1.0)
            # (Under the sum's location: a profile tells the sums' PE work from the rows'.)
            with op.location:
                for (c0, cn), acc in zip(self.chunks, self.psum[op]):
                    em.matmul(acc, ones.rows(pn), tile.rows(pn).columns(c0, cn),
                              accumulate=self.started)
        self.started = True

    def store(self, results: list[tuple[ir.Value, HbmView]], consts: ConstantVectors) -> None:
        em = self.em

        def in_sbuf(tile: Tile, etype: ir.Type) -> Tile:
            if tile.memory == "sbuf" and tile.element_type == etype:
                return tile
            copy = em.alloc("sbuf", 1, tile.free, etype)
            em.copy(copy, tile)
            return copy
        for i, (c0, cn) in enumerate(self.chunks):
            # The ops after the sums read them in PSUM (a rounding to bf16 is then the one
            # copy out); an op of two operands reads at most one there.
            tiles = {op.results[0]: self.psum[op][i] for op in self.columns.sums}
            for op in self.columns.ops:
                operands = [tiles[v] for v in op.operands]
                if len(operands) > 1:
                    operands = [in_sbuf(t, t.element_type) if j else t
                                for j, t in enumerate(operands)]
                dst = em.alloc("sbuf", 1, cn, U.element_type(op.results[0]))
                with op.location:
                    emit_elementwise(em, op, operands, dst, consts)
                tiles[op.results[0]] = dst
            for value, view in results:
                row = view.reshape((1, self.row_elements))
                if row is None:
                    raise CompileError("a row-wise kernel's column sum is stored to a "
                                       "view it cannot write as one row",
                                       U.defining_op(value).location)
                em.store(row.slice(1, c0, cn), 0, [1], in_sbuf(tiles[value], view.element_type))


_PSUM_ROW = 512        # fp32 elements of one PSUM bank row: the matmul's N limit
_FLT_MAX = 3.4028234663852886e38            # the largest fp32
_FLT_MIN_NORMAL = 1.1754943508222875e-38    # the smallest normal fp32


def _safe_softmax(compute, users, broadcast_of, per_row_alias, biased, accumulated,
                  storage, leaf_views, results) -> dict:
    """select(max == -inf, 0, e / sum) with e = exp(x - max), sum = sum(e) and max = max(x)
    (PyTorch's attention softmax zeroing fully masked rows): {select: (the == -inf op, read
    by nothing else, the exp, the division)}.

    Such a row is all -inf. Its exp's bias -max is +inf; clamped to the largest float, the
    row's exp is exp(-inf) = 0 (not NaN) and its sum 0; dividing by max(sum, smallest normal)
    gives the select's +0. Any other row is unchanged: its bias is finite or NaN (the clamp
    keeps both), and its sum is at least 1 (its max gives exp(0)) or NaN (kept by the max).
    Two [P, 1] ops replace the comparison and the select over the whole row."""
    found = {}
    producer = {op.results[0]: op for op in compute}
    for op in compute:
        if op.name != "trn.select":
            continue
        cond_v, zero, quotient = op.operands
        cond_op = producer.get(broadcast_of.get(cond_v))
        div = producer.get(quotient)
        view = leaf_views.get(zero)
        if cond_op is None or div is None or view is None or view.buffer is not None or \
                view.fill != 0.0 or cond_op.name != "trn.tensor_scalar" or \
                U.str_attr(cond_op, "op") != "eq" or \
                U.float_attr(cond_op, "scalar") != float("-inf") or \
                div.name != "trn.tensor_tensor" or U.str_attr(div, "op") != "div" or \
                users.get(quotient) != [op] or quotient in results or \
                storage.get(quotient, U.element_type(quotient)) != ir.F32Type.get():
            continue
        act = producer.get(div.operands[0])
        total = broadcast_of.get(div.operands[1])
        if act is None or total is None or act not in biased or \
                accumulated.get(act) is None or accumulated[act].results[0] != total or \
                div.operands[0] in results:
            continue
        sub = biased[act]
        maximum = broadcast_of.get(sub.operands[1])
        reduce = producer.get(maximum)
        if reduce is None or reduce.name != "trn.reduce" or \
                U.str_attr(reduce, "op") != "max" or reduce.operands[0] != sub.operands[0] or \
                U.str_attr(act, "func") != "exp" or \
                any(broadcast_of.get(v, per_row_alias.get(v, v)) == cond_op.results[0]
                    for u in compute if u is not op for v in u.operands) or \
                per_row_alias.get(cond_op.operands[0], cond_op.operands[0]) != maximum or \
                users.get(act.results[0]) != [accumulated[act], div]:
            continue
        found[op] = (cond_op, act, div)
    return found


@dataclasses.dataclass
class _Deferred:
    """A row-wise result `result` = numerator / broadcast(divisor) whose division is left to
    the consumer: the ops computing it from the numerator (`skipped`) emit nothing."""
    result: ir.Value
    numerator: ir.Value
    divisor: ir.Value                 # the per-row value
    clamped: bool                     # _safe_softmax's form: divide by max(divisor, tiny)
    skipped: set


def _deferred_division(compute, users, broadcast_of, accumulated, safe, aliases,
                       yielded) -> _Deferred | None:
    """The division `lower_rows(defer_division=True)` leaves to its consumer, if the result
    is one: e / broadcast(s) (or _safe_softmax's select around it) with e a row value read
    by nothing but that division and the activation's own folded sum."""
    result = yielded
    while result in aliases:
        result = aliases[result]
    producer = {op.results[0]: op for op in compute}
    op = producer.get(result)
    skipped = set()
    clamped = False
    if op is not None and op in safe:
        skipped |= {op, safe[op][0]}
        op = safe[op][2]
        clamped = True
    if op is None or op.name != "trn.tensor_tensor" or U.str_attr(op, "op") != "div":
        return None
    numerator, per_row = op.operands
    if per_row not in broadcast_of or numerator in broadcast_of or \
            numerator not in producer or producer[numerator].name != "trn.activation":
        return None
    if any(r is not op and r is not accumulated.get(producer[numerator])
           for r in users.get(numerator, [])):
        return None
    return _Deferred(result, numerator, broadcast_of[per_row], clamped, skipped | {op})


def _per_row_op(em: Emitter, dst: Tile, row: Tile, alu: str, per_row: Tile,
                reverse: bool) -> None:
    """dst = row <alu> per_row (operands swapped with `reverse`), for a [P, 1] per-row tile.

    On DVE a tensor_scalar; a norm's x - mean, x + c and x * rstd go to ACT instead when it
    would finish sooner there, as an identity activation with the per-row value as its bias
    (negated for a subtraction: x + (-m) is x - m exactly) or its scale (the product alone,
    with no bias added), so the rows' arithmetic is shared by the two engines. (The
    negation is a [P, 1] DVE op of MIN_II cycles: worth it only for rows several times
    longer.) A division, which ACT cannot take, goes to POOL instead where every operand is
    in SBUF and POOL would finish it sooner (with `pool_sharing`): a softmax whose
    probabilities are saved divides whole rows, as its attention kernel's DVE already takes
    the scores' scaled max."""
    act = (alu in ("add", "mul") or (alu == "sub" and not reverse and
                                      dst.free >= 4 * em.target.min_ii)) and \
        em.sooner_engine({"dve": dst.free, "act": dst.free}) == "act"
    if not act:
        pool = alu == "div" and em.pool_sharing and dst.buffer != row.buffer and \
            all(t.memory == "sbuf" for t in (dst, row, per_row)) and \
            em.sooner_engine({"dve": dst.free, "pool": dst.free}) == "pool"
        em.tensor_scalar(dst, row, alu, per_row, reverse0=reverse,
                         engine="pool" if pool else "dve")
    elif alu == "mul":
        em.activation(dst, row, "identity", scale=per_row)
    elif alu == "add":
        em.activation(dst, row, "identity", bias=per_row)
    else:
        negated = em.alloc("sbuf", per_row.partitions, 1, ir.F32Type.get())
        em.tensor_scalar(negated, per_row, "mul", -1.0)
        em.activation(dst, row, "identity", bias=negated)


def _reduce(em: Emitter, dst: Tile, src: Tile, op: str) -> None:
    """dst [P, 1] = the reduction of each row of src. A sum goes to ACT, as an identity
    activation that accumulates its fp32 results (the same sum; its output, rounded to bf16,
    is not read), where DVE has more work than ACT by more than the sum takes there: the
    rows' other work may leave DVE the busier (a softmax's backward: two tensor_tensors and
    the sum on DVE, the rest on ACT). Only for fp32 rows: DVE sums bf16 at two elements per
    cycle."""
    if op == "add" and dst.free == 1 and src.element_type == ir.F32Type.get():
        act = em.busy_ns("act", src.free + em.target.min_ii)
        if em.engine_work["dve"] - em.engine_work["act"] > act:
            discarded = em.alloc("sbuf", src.partitions, src.free, ir.BF16Type.get())
            em.activation(discarded, src, "identity", 1.0, None, accum=dst)
            return
    em.tensor_reduce(dst, src, op)


def _psum_in_place(op: ir.Operation, etype: ir.Type, tiles: dict, produced: set,
                   users: dict, aliases: dict, results: set) -> Tile | None:
    """The PSUM tile of a produced row leaf that `op` (a tensor_tensor) reads last, where
    its fp32 result can overwrite it there: ops reading the result then read one operand
    from PSUM, at one cycle per element instead of two for fp32 in SBUF (TARGET.md). (A
    softmax's backward: g * p of the gradient g a matmul left in PSUM, then reduced and
    taken away from, stays in PSUM.)"""
    if etype != ir.F32Type.get() or op.results[0] in results or \
            op.operands[0] == op.operands[1]:
        return None
    # (With no other PSUM operand about, nothing can then read two operands from PSUM.)
    for v in op.operands:
        tile = tiles.get(v)
        if produced == {v} and tile is not None and tile.element_type == etype and \
                users.get(v) == [op] and v not in aliases.values():
            produced.discard(v)
            return tile
    return None


def _kept_layout(kept: tuple[int, ...], strides: list[tuple[int, ...]]) -> _Layout:
    """Merge consecutive dims of K (of size > 1) that are contiguous in every view."""
    groups: list[list[int]] = []
    for d in range(len(kept)):
        if kept[d] == 1:
            continue
        if groups and all(st[groups[-1][-1]] == st[d] * kept[d] for st in strides):
            groups[-1].append(d)
        else:
            groups.append([d])
    return _Layout(kept, groups)


def _repeated_tiles_bytes(view: HbmView, layout: _Layout, tp: int, free: int) -> int | None:
    """Bytes per partition of the distinct tiles of a leaf that is broadcast (stride 0) over
    every dim of some loop group, so that its tiles repeat over that loop's iterations; None
    for a leaf whose tiles never repeat."""
    varies = [group for group in layout.loops if any(view.strides[d] for d in group)]
    if len(varies) == len(layout.loops):
        return None
    count = math.prod(math.prod(layout.kept[d] for d in group) for group in varies)
    return count * -(-layout.rows // tp) * free * U.element_bytes(view.element_type)


def _tile_view(view: HbmView, layout: _Layout, kept_rank: int, index: dict, p0: int, pn: int,
               row: bool) -> HbmView:
    """The [pn, free...] part of `view` (over S for a row value, over K x 1... for a per-row
    one) at loop indices `index` ({group dims: flat index}) and rows p0 .. p0 + pn of the
    partition group."""
    strides = view.strides
    offset = view.offset
    for group, flat in index.items():
        for d in reversed(group):
            flat, i = divmod(flat, layout.kept[d])
            offset += i * strides[d]
    if layout.groups:
        pstride = strides[layout.groups[-1][-1]]
    else:
        pstride = 0
    offset += p0 * pstride
    if row:
        free = [(view.shape[d], strides[d]) for d in range(kept_rank, view.rank)
                if view.shape[d] != 1]
        merged: list[list[int]] = []
        for size, stride in free:
            if merged and merged[-1][1] == stride * size:
                merged[-1] = [merged[-1][0] * size, stride]
            else:
                merged.append([size, stride])
        if len(merged) > MAX_FREE_DIMS - 1:
            raise CompileError(f"a row-wise kernel operand's row spans {len(merged)} "
                               f"non-contiguous dims (at most {MAX_FREE_DIMS - 1})")
        sizes = [n for n, _ in merged] or [1]
        free_strides = [s for _, s in merged] or [1]
    else:
        sizes, free_strides = [1], [1]
    return view.relaid(offset, (pn, *sizes), (pstride, *free_strides))
