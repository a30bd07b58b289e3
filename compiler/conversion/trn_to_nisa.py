"""convert-trn-to-nisa: tile trn kernels into NeuronCore instructions.

The function's tensors become HBM buffers: arguments (inputs), then one argument per result
(outputs, written in place); intermediates get `nisa.alloc {memory = "hbm"}` scratch and
constants `nisa.hbm_constant`. View ops become strided views of those buffers (no code).
Every `trn.kernel` (every loose compute op is first put in a kernel of its own) is expanded
into DMAs, PE/ACT/DVE/POOL instructions on SBUF/PSUM tiles created with `nisa.alloc`; tile
addresses and semaphores are left to trn-plan-memory and trn-schedule.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable

from torch_mlir import ir
from torch_mlir.dialects import func as func_d

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError, UnsupportedOpError
from torchneuron.compiler.kernels.attention import lower_attention, probabilities
from torchneuron.compiler.kernels.epilogue import store_accumulators
from torchneuron.compiler.kernels.elementwise import lower_elementwise
from torchneuron.compiler.kernels.conv import Padding, lower_conv, lower_pool
from torchneuron.compiler.kernels.emitter import Emitter, Tile
from torchneuron.compiler.kernels.gather import lower_gather
from torchneuron.compiler.kernels.matmul import column_sum_ops, lower_matmul
from torchneuron.compiler.kernels.mlp import (
    ComputedRows, RowTiles, _Mlp, lower_mlp, lower_mlp_rows, lower_mlp_saved,
)
from torchneuron.compiler.kernels.scan import lower_scan
from torchneuron.compiler.kernels.reduce import lower_reduce
from torchneuron.compiler.kernels.rows import LoadedRows, lower_rows
from torchneuron.compiler.kernels.tile_ops import ELEMENTWISE_OPS, ROOT_OPS, SOURCE_OPS, VIEW_OPS
from torchneuron.compiler.kernels.weight_gradient import lower_weight_gradient
from torchneuron.compiler.kernels.views import (
    HbmView, apply_view_op, row_major_strides, source_view, storage_less_view,
)
from torchneuron.compiler.passes import Pass, register
from torchneuron.compiler.transforms.fuse import (
    INPUT_ROWS, PRODUCER_RESULT, SAVED_GRADIENT, outline,
)
from torchneuron.compiler.transforms.fuse_attention_output import (
    ATTENTION_INPUT, ATTENTION_OUTPUT, KIND as ATTENTION_LINEAR_ROWS, ROWS_HANDED_ON,
    view_chain,
)
from torchneuron.compiler.transforms.tile import annotate, kernel_body
from torchneuron.target import get_target

NUM_INPUTS_ATTR = "nisa.num_inputs"
TARGET_ATTR = "nisa.target"


@register
@dataclasses.dataclass
class ConvertTrnToNisa(Pass):
    NAME = "convert-trn-to-nisa"
    SUMMARY = "Tile trn kernels into nisa instructions on SBUF/PSUM tiles and HBM buffers"
    target: str = ""
    # An attention kernel whose softmax adds a constant mask computes only the keys the mask
    # lets some row of each query tile see (kernels/attention.py, constant_mask_hooks), and
    # adds a mask of 0 and -inf before the scores' scaling only where it is not 0
    # (_mask_before_scale).
    masked_keys: bool = True
    # POOL shares with DVE (and ACT, for copies) the work whose operands are all in SBUF: each
    # instruction goes where the cost model says it would finish first (kernels/emitter.py).
    pool_sharing: bool = True
    # A copy between layouts that disagree on the contiguous dim (a head-to-token permutation)
    # is loaded in the source's order and stored in the destination's, reordered on an engine,
    # where the longer DMA runs pay for the engine's copy (kernels/elementwise.py).
    regroup_copies: bool = True
    # An attention kernel whose row part ends in a power-of-two scaling of a value linear in
    # its scores (a softmax backward's dS) multiplies Q^T by it as Q^T leaves PSUM instead of
    # making a pass over the rows (kernels/attention.py, _scale_into_q); the same bits.
    scale_into_q: bool = True
    # An attention kernel that computes its QKV projection (or a backward's dO) over several
    # batch indices computes the next batch index's rows while the attention works on this
    # one's: the projection's output tiles one at a time, and its tiles and the attention's
    # in disjoint parts of SBUF and PSUM (`_projection_beside`).
    overlap_projection: bool = True
    # An mlp kernel whose output block leaves PSUM room computes its hidden activation for
    # two blocks at once, kept in SBUF for the second (kernels/mlp.py,
    # hidden_tokens_per_block): the first matmul in half the instructions, the same bits. A
    # weight_gradient kernel likewise computes T for two blocks of hidden units at once
    # (kernels/weight_gradient.py, hidden_span).
    hidden_spans: bool = True

    def run(self, module: ir.Operation) -> None:
        target = get_target(self.target or None)
        for func in list(U.functions(module)):
            em = Emitter(target, self.pool_sharing, self.regroup_copies)
            em.hidden_spans = self.hidden_spans
            _FunctionLowering(func, em, self.masked_keys, self.scale_into_q,
                              self.overlap_projection).run()


# The share of the engines' earlier work an attention kernel's engine choices still count
# (the overlap with the kernels beside it). Measured, encoder_fwd / gpt2_fwd simulated us: all
# of it 589.9 / 2732.5, a half 584.5 / 2738.3, a quarter 580.2 / 2725.2, none 578.5 / 2739.7.
ATTENTION_CARRY_OVER = 0.25

# Ops whose result gets an HBM buffer of its own (the others are views of existing buffers).
_STORED = ("trn.kernel", "trn.insert_slice", "trn.empty", "trn.gather", "trn.scan")


@dataclasses.dataclass(eq=False)
class _Storage:
    """The HBM buffer of one or more values: an insert_slice writes in place into its
    destination's buffer when nothing else reads the destination."""
    buffer: ir.Value | None = None


# Kernels lowered after a returned view's value before it is copied to its output buffer.
COPY_AFTER_KERNELS = 1


@dataclasses.dataclass(eq=False)
class _PendingOutput:
    """A returned value not yet copied into its output buffer `out`."""
    value: ir.Value
    out: ir.Value
    kernels_since: int | None = None      # kernels lowered since the value was, once it is


def _whole_rows_kept(shape, message: str, location: ir.Location
                     ) -> tuple[dict[int, Tile], Callable[[Tile, HbmView, Tile | None], None]]:
    """(kept, keep): lower_rows' `consume` hook `keep`, which files each result tile of a
    value of `shape` in `kept` under its first row (counted over all dims but the last),
    and raises CompileError(`message`) for a tile that is not whole rows undivided."""
    kept: dict[int, Tile] = {}

    def keep(tile: Tile, rows_view: HbmView, divisor: Tile | None) -> None:
        t0, column = divmod(rows_view.offset, shape[-1])
        if divisor is not None or column or tile.free != shape[-1]:
            raise CompileError(message, location)
        kept[t0] = tile
    return kept, keep


class _FunctionLowering:
    def __init__(self, func: ir.Operation, em: Emitter, masked_keys: bool = True,
                 scale_into_q: bool = True, overlap_projection: bool = True):
        self.old = func
        self.em = em
        self.masked_keys = masked_keys
        self.scale_into_q = scale_into_q
        self.overlap_projection = overlap_projection
        # Co-run pairs within a kernel are numbered after trn-order's pairs of kernels.
        self.next_pair = 1 + max([U.int_attr(op, "co_run") for op in U.body_ops(func)
                                  if "co_run" in op.attributes], default=-1)
        self.views: dict[ir.Value, HbmView] = {}
        self.storage: dict[ir.Value, _Storage] = {}
        self.in_place: set = set()
        # Kernel results computed straight into the slice an insert_slice writes them to
        # (_kernels_into_slices): result -> that insert_slice.
        self.into_slice: dict[ir.Value, ir.Operation] = {}
        self.padded: dict[ir.Value, tuple[ir.Value, tuple[int, ...], float]] = {}
        self.folded: set = set()          # ops the padding they build is folded into
        self.row_kernels = 0              # row-wise kernels lowered: their reuse groups

    def run(self) -> None:
        old = self.old
        body = U.body_ops(old)
        for op in body:
            if op.name in ELEMENTWISE_OPS or op.name in ROOT_OPS:
                outline([op])
            elif not (op.name in VIEW_OPS or op.name in _STORED
                      or op.name in ("arith.constant", "func.return")):
                raise UnsupportedOpError(
                    f"'{op.name}' cannot be lowered to NeuronCore instructions here "
                    "(expected trn ops; run convert-linalg-to-trn first)", op.location)
        body = U.body_ops(old)
        ret = body[-1]
        ftype = ir.FunctionType(ir.TypeAttr(old.attributes["function_type"]).value)
        inputs = [_hbm_type(t) for t in ftype.inputs]
        outputs = [_hbm_type(t) for t in ftype.results]
        name = ir.StringAttr(old.attributes["sym_name"]).value
        with ir.InsertionPoint(old), old.location:
            new = func_d.FuncOp(name + ".nisa", ir.FunctionType.get(inputs + outputs, []))
            new.attributes[NUM_INPUTS_ATTR] = U.i64(len(inputs))
            new.attributes[TARGET_ATTR] = U.string(self.em.target.name)
            block = new.add_entry_block()
        new_args = list(block.arguments)
        for old_arg, new_arg in zip(U.entry_block(old).arguments, new_args):
            self.views[old_arg] = HbmView.of(new_arg)
        out_args = new_args[len(inputs):]

        # A returned value computed here is written straight into its output buffer, and so
        # is one whose reshape is returned (a reshape of a row-major buffer reads the same
        # bytes: the value is computed in place of a copy after it); an insert_slice shares
        # its destination's buffer when it is the destination's only user.
        for value, out in zip(ret.operands, out_args):
            owner = U.defining_op(value)
            while owner is not None and owner.name == "trn.reshape":
                value = owner.operands[0]
                owner = U.defining_op(value)
            if owner is not None and owner.name in _STORED and value not in self.storage:
                self.storage[value] = _Storage(out)
        position = {op: i for i, op in enumerate(body)}
        for op in reversed(body):
            if op.name != "trn.insert_slice":
                continue
            shared = self.storage.setdefault(op.results[0], _Storage())
            dest = op.operands[0]
            producer = U.defining_op(dest)
            if producer is not None and producer.name in _STORED and dest not in self.storage \
                    and _may_write_in_place(op, position):
                self.storage[dest] = shared
                self.in_place.add(op)

        self.into_slice = _kernels_into_slices(body)
        self._find_padded_windows(body)
        # A returned value that is not computed into its output buffer (a view of another
        # value, say) is copied there soon after it exists, not after the last kernel: the
        # copy's tiles then take memory the kernels around it freed, and it can run while
        # they do, instead of after every kernel that last used that memory. Not right
        # after its producer, though: the kernel after that one usually reads the producer's
        # result too (the encoder's attention reads the QKV projection whose q, k and v
        # views a training step returns), and placed between them the copy's tiles take the
        # memory that kernel's tiles reuse next, so it waits for the copy (encoder_train
        # forward 862.2 -> 833.4 us, the copies off its critical path).
        pending = [_PendingOutput(value, out) for value, out in zip(ret.operands, out_args)]
        with ir.InsertionPoint(block):
            for op in body[:-1]:
                if op in self.folded:
                    continue
                with op.location:
                    self._lower_op(op)
                if pending:
                    pending = self._copy_ready_outputs(pending, ret.location,
                                                       op.name == "trn.kernel")
            self._copy_ready_outputs(pending, ret.location, last=True)
            with ret.location:
                func_d.ReturnOp([])
        old.erase()
        new.attributes["sym_name"] = U.string(name)

    def _copy_ready_outputs(self, pending: list["_PendingOutput"], loc: ir.Location,
                            after_kernel: bool = False,
                            last: bool = False) -> list["_PendingOutput"]:
        """Copy each returned value of `pending` whose value was lowered and
        COPY_AFTER_KERNELS kernels since (`after_kernel`: the op just lowered was one; `last`:
        every op is lowered) into its output buffer, where it is not already there; return
        the rest."""
        waiting = []
        for entry in pending:
            view = self._pure_view(entry.value)
            if view is None:
                waiting.append(entry)
                continue
            if entry.kernels_since is None:
                entry.kernels_since = 0          # the op just lowered made it
            elif after_kernel:
                entry.kernels_since += 1
            if entry.kernels_since < COPY_AFTER_KERNELS and not last:
                waiting.append(entry)
            elif view.buffer is not entry.out:
                with loc:
                    self._copy(view, HbmView.of(entry.out))
        return waiting

    def _pure_view(self, value: ir.Value) -> HbmView | None:
        """The view of `value` if it is lowered already, or if it is a chain of view ops over
        a lowered value that strides express (no copy): trn-fuse sinks view ops to their
        users, so a returned view of an early kernel's result is defined at the end."""
        view = self.views.get(value)
        if view is not None:
            return view
        op = U.defining_op(value)
        if op is None or op.name not in VIEW_OPS:
            return None
        source = self._pure_view(op.operands[0])
        return apply_view_op(op, source) if source is not None else None

    def _find_padded_windows(self, body: list[ir.Operation]) -> None:
        """insert_slice(fill(c), x) read only as the input of convolutions and poolings, with
        the fill read by nothing else, x placed along its spatial dims: the windows' planes
        are filled with c on chip and x loaded into them (conv.Padding), so neither the fill
        nor the padded copy is written to HBM."""
        for op in body:
            if op.name != "trn.insert_slice":
                continue
            dest, source = op.operands
            fill_kernel = U.defining_op(dest)
            if fill_kernel is None or fill_kernel.name != "trn.kernel" or \
                    len(list(dest.uses)) != 1:
                continue
            fill_body = kernel_body(fill_kernel)
            if len(fill_body) != 2 or fill_body[0].name != "trn.fill" or \
                    fill_body[1].operands[0] != fill_body[0].results[0]:
                continue
            offsets = tuple(U.array_attr(op, "offsets"))
            if any(st != 1 for st in U.array_attr(op, "strides")) or len(offsets) < 3 or \
                    offsets[:2] != (0, 0) or U.shape(source)[:2] != U.shape(dest)[:2]:
                continue
            users = [(U.operation(u.owner), u.operand_number) for u in op.results[0].uses]
            if not users or any(user.name not in ("trn.conv", "trn.pool") or number != 0
                                for user, number in users):
                continue
            value = ir.FloatAttr(fill_body[0].attributes["value"]).value
            self.padded[op.results[0]] = (source, offsets, value)
            self.folded.update((op, fill_kernel))

    def _buffer(self, value: ir.Value) -> HbmView:
        """The whole-buffer view of a stored value (allocating HBM scratch on first need)."""
        storage = self.storage.setdefault(value, _Storage())
        if storage.buffer is None:
            storage.buffer = self.em.alloc_hbm(U.shape(value), U.element_type(value))
        view = HbmView.of(storage.buffer)
        shape = tuple(U.shape(value))
        # (An output buffer taken by a value whose reshape is returned has the reshape's.)
        return view if view.shape == shape else view.reshape(shape)

    def _result_view(self, result: ir.Value) -> HbmView:
        """Where an op computes `result`: its own buffer, or the slice an insert_slice puts it
        in (`_kernels_into_slices`)."""
        if result in self.into_slice:
            return self._slice_of(self.into_slice[result]).reshape(tuple(U.shape(result)))
        return self._buffer(result)

    def _slice_of(self, insert: ir.Operation) -> HbmView:
        """The view of the slice `insert` writes, in its result's buffer."""
        return _inserted_slice(self._buffer(insert.results[0]), insert)

    def _lower_op(self, op: ir.Operation) -> None:
        if op.name == "arith.constant":
            value = op.attributes["value"]
            fill = _splat_read_by_kernels(op)
            if fill is not None:
                self.views[op.results[0]] = fill
                return
            if isinstance(value, ir.DenseElementsAttr):
                mtype = _hbm_type(op.results[0].type)
                const = U.create("nisa.hbm_constant", [mtype], [], {"value": value})
                self.views[op.results[0]] = HbmView.of(const.results[0])
            return
        if op.name in VIEW_OPS:
            self.views[op.results[0]] = self._view(op, self.views[op.operands[0]])
            return
        result = op.results[0]
        out = self._result_view(result)
        if op.name == "trn.kernel":
            also = [self._result_view(r) for r in list(op.results)[1:]]
            # A kernel trn-order paired with another: its on-chip tiles say so, for
            # trn-plan-memory's disjoint parts of SBUF and PSUM
            if "co_run" in op.attributes:
                self.em.co_run = (U.int_attr(op, "co_run"), U.str_attr(op, "co_run_role"))
            try:
                self._lower_kernel(op, out, also)
            finally:
                self.em.co_run = None
            for value, view in zip(list(op.results)[1:], also):
                self.views[value] = view
        elif op.name == "trn.insert_slice":
            dest, source = op.operands
            producer = U.defining_op(dest)     # None for a function argument
            if op not in self.in_place and (producer is None or producer.name != "trn.empty"):
                self._copy(self.views[dest], out)
            if op not in self.into_slice.values():
                self._copy(self.views[source], self._slice_of(op))
        elif op.name == "trn.gather":
            source = self.views[op.operands[0]]
            if not source.is_contiguous():
                contiguous = HbmView.of(self.em.alloc_hbm(list(source.shape),
                                                          source.element_type))
                self._copy(source, contiguous)
                source = contiguous
            lower_gather(self.em, op, source, self.views[op.operands[1]], out)
        elif op.name == "trn.scan":
            lower_scan(self.em, op, self.views[op.operands[0]], out)
        self.views[result] = out

    def _view(self, op: ir.Operation, source: HbmView) -> HbmView:
        view = apply_view_op(op, source)
        if view is None:
            # Not expressible as a strided view: copy the source to a contiguous buffer.
            contiguous = HbmView.of(self.em.alloc_hbm(list(source.shape), source.element_type))
            self._copy(source, contiguous)
            view = apply_view_op(op, contiguous)
        return view

    def _batched_view(self, op: ir.Operation, source: HbmView) -> HbmView:
        """`_view`, except that a reshape merging a matmul operand's batch dims that no
        single stride spans leaves them unmerged (the kernel indexes them by a flat batch
        index) instead of copying the operand."""
        view = apply_view_op(op, source)
        if view is not None:
            return view
        if _merges_matmul_batch(op):
            return _without_unit_batch_dims(source)
        return self._view(op, source)

    def _copy(self, src: HbmView, dst: HbmView) -> None:
        if 0 in dst.shape:
            return          # nothing to move (e.g. a returned input with no elements)
        lower_elementwise(self.em, [], {_Marker.SOURCE: src}, [(_Marker.SOURCE, dst)],
                          free_tile=4096)

    def _lower_row_wise(self, kind: str, body: list[ir.Operation], out: HbmView,
                        saved: tuple[ir.Value, HbmView] | None = None,
                        further: list[tuple[ir.Value, HbmView]] = (),
                        input_contraction: tuple[ir.Value, HbmView] | None = None) -> None:
        """A rows, attention or matmul_rows kernel (`saved`: an attention kernel's second
        result -- its probabilities, or its row contraction's product -- and its view;
        `input_contraction`: its third, the product of its input contraction, and its view;
        `further`: a rows kernel's further results, per-row values or column sums, and their
        views). A row-wise kernel's SBUF tiles (rows, matmul_rows) get a reuse_group of their
        own, so that trn-plan-memory reuses the kernel's own bytes first: a footprint of a few
        tiles, clear of the kernels that run beside it."""
        if kind != "attention":
            self.em.reuse_group = self.row_kernels
            self.row_kernels += 1
        try:
            if kind == "rows":
                lower_rows(self.em, body[:-1], self.views, self._view,
                           (body[-1].operands[0], out), further_results=further)
            else:
                lower_attention(self.em, body[:-1], self.views, self._batched_view,
                                (body[-1].operands[0], out), masked_keys=self.masked_keys,
                                saved=saved, scale_into_q=self.scale_into_q,
                                input_contraction=input_contraction)
        finally:
            self.em.reuse_group = None

    def _views_and_compute(self, ops: list[ir.Operation], views: dict, kind: str
                           ) -> tuple[list[ir.Operation], dict]:
        """Record in `views` the view of every view and source op of a kernel's `ops`;
        returns the other ops and the views whose batch dims stay unmerged."""
        compute, unmerged = [], {}
        for op in ops:
            if op.name in SOURCE_OPS:
                views[op.results[0]] = source_view(op)
            elif op.name in VIEW_OPS:
                source = views.get(op.operands[0])
                if source is None and kind == "weight_gradient":
                    continue      # the transpose of the product it keeps on chip (it reads
                    #               that product's tiles as they are)
                if source is None:
                    raise UnsupportedOpError(f"'{op.name}' of a value computed inside the kernel",
                                             op.location)
                if source.buffer is None and apply_view_op(op, source) is None:
                    raise UnsupportedOpError(f"'{op.name}' of a generated value that no strided "
                                             "view expresses", op.location)
                if _merges_matmul_batch(op) and apply_view_op(op, source) is None:
                    # Batch dims no single stride spans (heads split out of a projection):
                    # the matmul loops over them as they are instead of copying them.
                    views[op.results[0]] = _without_unit_batch_dims(source)
                    unmerged[op.results[0]] = op
                    continue
                views[op.results[0]] = self._view(op, source)
            else:
                compute.append(op)
        return compute, unmerged

    def _lower_attention_output(self, kernel: ir.Operation, body: list[ir.Operation]
                                ) -> tuple[list[ir.Operation], dict, dict, tuple]:
        """The attention part of an attention_linear_rows kernel (and the QKV projection in
        front of it, where the kernel starts with one), lowered with its output's token rows
        kept on chip. Returns the rest of the body (the linear_rows kernel's ops and the
        yield), those rows by first token, a storage-less view of the output for the rest's
        views to derive from, and the QKV projection's RowTiles (whose loaded input rows
        the first residual reads), if any."""
        marked = [i for i, op in enumerate(body) if ATTENTION_OUTPUT in op.attributes]
        first = [i for i, op in enumerate(body) if ATTENTION_INPUT in op.attributes]
        if len(marked) != 1 or not marked[0] < len(body) - 2 or len(first) > 1 or \
                (first and not first[0] < marked[0]):
            raise CompileError(f"an {ATTENTION_LINEAR_ROWS} kernel needs one op marked "
                               f"{ATTENTION_OUTPUT}, not its last, and at most one before it "
                               f"marked {ATTENTION_INPUT}", kernel.location)
        views, computed, start = self.views, None, 0
        if first:
            # The QKV projection: its rows computed as the attention stages each batch index.
            start = first[0] + 1
            views = dict(self.views)
            computed = self._computed_rows(body, first[0], views, ATTENTION_LINEAR_ROWS)
        value = body[marked[0]].results[0]
        view = storage_less_view(value)
        rows: dict = {}
        self.em.discount_engine_work(ATTENTION_CARRY_OVER)
        attention = body[start:marked[0] + 1]
        with body[marked[0]].location, self._projection_beside(computed, attention):
            lower_attention(self.em, attention, views, self._batched_view, (value, view),
                            masked_keys=self.masked_keys, scale_into_q=self.scale_into_q,
                            token_rows=rows, computed=computed)
        return body[marked[0] + 1:], rows, {value: view}, (computed,) if computed else ()

    def _computed_rows(self, body: list[ir.Operation], marked: int, views: dict,
                       kind: str) -> RowTiles:
        """The rows of the projection whose ops begin `body` up to `body[marked]` (the op
        marked ATTENTION_INPUT), computed 128 tokens at a time as the attention part of the
        kernel stages them; records in `views` the projection's views and a storage-less
        view of its result, which the attention's operands derive from."""
        compute, _ = self._views_and_compute(body[:marked + 1], views, kind)
        value = body[marked].results[0]
        # (Each part's instructions carry its own location, the profile's attribution.)
        rows = RowTiles(_Mlp(self.em, compute, views, value, 1), value, body[marked].location,
                        tile_by_tile=self.overlap_projection)
        views[value] = storage_less_view(value)
        return rows

    @contextlib.contextmanager
    def _projection_beside(self, computed: RowTiles | None, attention: list[ir.Operation]):
        """While an attention part is lowered: where its operands' rows are `computed` by a
        projection over several batch indices (more tokens than the attention has query
        rows), the projection's tiles and the attention's form a co-run pair
        (trn-plan-memory gives each a part of SBUF and PSUM of its own), so that the next
        batch index's rows are computed while the attention works on this one's instead of
        each waiting for the bytes the other left. Only where each batch index has more
        than one query block: with one, the attention's work per batch index is too short
        to hide the next projection, and its tiles confined to their part wait for one
        another (a 2 x 128-token attention block: forward 23.7 -> 24.2 us, backward 42.4
        -> 44.6 us; 2 x 256 tokens: forward 48.8 -> 44.7 us). Not in a kernel that is
        itself one of a pair (a backward's attention kernel beside weight gradients)."""
        matmuls = [op for op in attention if op.name == "trn.matmul"]
        queries = U.shape(matmuls[0].results[0])[-2] if matmuls else 0
        if not self.overlap_projection or computed is None or self.em.co_run is not None or \
                queries <= self.em.target.pe_cols or computed.mlp.tokens <= queries:
            yield
            return
        pair, self.next_pair = self.next_pair, self.next_pair + 1
        computed.co_run = (pair, "partner")
        self.em.co_run = (pair, "primary")
        try:
            yield
        finally:
            self.em.co_run = None
            computed.co_run = None

    def _lower_input_rows(self, kernel: ir.Operation, rows_body: list[ir.Operation],
                          views: dict) -> tuple[dict[int, Tile], LoadedRows]:
        """The row-wise part `rows_body` of a kernel (its last op marked INPUT_ROWS) lowered
        with its result kept on chip: its row tiles by first token (counted over all the
        result's rows but the last dim), and the whole rows of its inputs it loaded (for a
        residual of the kernel's that reads them). Records a storage-less view of the result
        in `views`."""
        value = rows_body[-1].results[0]
        view = storage_less_view(value)
        kept, keep = _whole_rows_kept(
            U.shape(value), f"a row-wise part marked {INPUT_ROWS} hands the Linear after it "
            "whole rows only", kernel.location)
        loaded = LoadedRows(self.em)
        with rows_body[-1].location:
            lower_rows(self.em, rows_body, views, self._view, (value, view),
                       produce=loaded.produce, consume=keep)
        views[value] = view
        return kept, loaded

    def _lower_qkv_attention(self, kernel: ir.Operation, body: list[ir.Operation],
                             outs: list[HbmView]) -> None:
        """An attention kernel that the QKV projection joined, yielding the views of Q, K^T
        and V a training step saves (trn-fuse-attention-output qkv-saved): the projection's
        ops (up to the one marked ATTENTION_INPUT) compute its rows as the attention stages
        each batch index. Where an op after them is marked ATTENTION_OUTPUT, the attention's
        ops end there and the output projection's follow: the attention keeps its output's
        token rows (and stores them), and the projection turns them on PE. The kernel
        yields its probabilities (or its output) first, and the rest flat: each flat yield
        is a reshape of the value it stands for, whose destination is its buffer in that
        value's shape; the others are told apart by what computes them."""
        marked = [i for i, op in enumerate(body) if ATTENTION_INPUT in op.attributes]
        if len(marked) != 1 or not marked[0] < len(body) - 2:
            raise CompileError(f"an attention kernel that computes its operands needs one op "
                               f"marked {ATTENTION_INPUT}, not its last", kernel.location)
        views = dict(self.views)
        # A row-wise part in front (a pre-norm layer's norm: the op computing its result
        # marked INPUT_ROWS): its row tiles are computed first and kept, for the QKV
        # projection's staging to turn on PE where it would load them.
        handed = [i for i, op in enumerate(body[:marked[0]]) if INPUT_ROWS in op.attributes]
        head, given, loaded = 0, None, None
        if handed:
            head = handed[0] + 1
            given, loaded = self._lower_input_rows(kernel, body[:head], views)
        computed = self._computed_rows(body[head:], marked[0] - head, views, "attention")
        if given is not None:
            computed.mlp.x_t.given_rows = given
        start = marked[0] + 1
        qkv = computed.value
        flattening = set()
        yielded = []
        for i, (value, out) in enumerate(zip(body[-1].operands, outs)):
            op = U.defining_op(value)
            if i and op is not None and op.name == "trn.reshape" and \
                    len(U.shape(value)) == 1 and U.operation(op.parent) == kernel:
                flattening.add(op)
                value = op.operands[0]
                out = out.reshape(tuple(U.shape(value)))
            yielded.append((value, out))
        # The output projection's part, where one follows the attention's output op.
        marked = [i for i, op in enumerate(body) if ATTENTION_OUTPUT in op.attributes]
        end = marked[0] + 1 if marked else len(body) - 1
        if len(marked) > 1 or (marked and not start < marked[0] < len(body) - 2):
            raise CompileError(f"an attention kernel that computes its operands has at most "
                               f"one op marked {ATTENTION_OUTPUT}, after its attention's ops",
                               kernel.location)
        # (The attention's matmuls: not the output projection's, after them.)
        matmuls = [op for op in body[start:end] if op.name == "trn.matmul"]
        probs = probabilities(matmuls[1], set(body)) if len(matmuls) > 1 else None
        output_value = body[marked[0]].results[0] if marked else None
        projected = {op.results[0] for op in body[end:-1]}
        # A third matmul contracts the rows over their row dim (a softmax backward's dK^T):
        # what is computed from its product is the kernel's second result.
        # A fourth contracts an input of the row part (dV = P^T @ dO): its product is the
        # kernel's third result.
        contracted = _computed_from(matmuls[2], body) if len(matmuls) >= 3 else set()
        input_contracted = _computed_from(matmuls[3], body) if len(matmuls) == 4 else set()
        output, saved, saved_operands, projection = None, None, [], None
        input_contraction = None
        for value, out in yielded:
            if view_chain(value, kernel)[0] == qkv:
                saved_operands.append((value, out))
            elif value in input_contracted and input_contraction is None:
                input_contraction = (value, out)
            elif (value == probs or value in contracted) and saved is None:
                saved = (value, out)
            elif value in projected and projection is None:
                projection = (value, out)
            elif output is None and (output_value is None or value == output_value):
                output = (value, out)
            else:
                raise CompileError("an attention kernel yields its output, its probabilities, "
                                   "views of its operands and its output projection's result",
                                   kernel.location)
        if marked and projection is None:
            raise CompileError("an attention kernel with an output projection yields no "
                               "projection", kernel.location)
        # An output only the projection reads (inference) is kept on chip, not yielded.
        stored = output is not None
        if not stored and marked:
            output = (output_value, storage_less_view(output_value))
        if output is None:
            raise CompileError("an attention kernel that computes its operands yields no "
                               "output", kernel.location)
        rows = {} if marked else None
        attention = [op for op in body[start:end] if op not in flattening]
        with self._projection_beside(computed, attention):
            lower_attention(self.em, attention, views, self._batched_view, output,
                            masked_keys=self.masked_keys, saved=saved,
                            scale_into_q=self.scale_into_q, computed=computed,
                            saved_operands=saved_operands, token_rows=rows,
                            token_rows_stored=bool(marked) and stored,
                            input_contraction=input_contraction)
        if not marked:
            return
        # The output projection reads the output's token rows where it would load them, and
        # a residual that is the layer's input from the rows the QKV projection loaded.
        value, out = projection
        views[output_value] = storage_less_view(output_value)
        compute, _ = self._views_and_compute(
            [op for op in body[end:-1] if op not in flattening], views, "attention")
        linear = _Mlp(self.em, compute, views, value, 1)
        linear.x_t.given_rows = rows
        linear.epilogue2.given_part = computed.input_part if loaded is None else (
            lambda view: computed.input_part(view) or loaded.part(view))
        with body[end].location:
            for t0, tn in linear.blocks():
                store_accumulators(self.em, linear.epilogue2, linear.block(t0, tn), value, out)

    def _lower_mlp_saved(self, kernel: ir.Operation, body: list[ir.Operation],
                         outs: list[HbmView]) -> None:
        """An mlp_saved kernel (trn-fuse mlp-saved): the first Linear's ops up to the one
        marked PRODUCER_RESULT, then the second's."""
        marked = [i for i, op in enumerate(body) if PRODUCER_RESULT in op.attributes]
        if len(marked) != 1 or not marked[0] < len(body) - 2:
            raise CompileError(f"an mlp_saved kernel needs one op marked {PRODUCER_RESULT}, "
                               "not its last", kernel.location)
        split = marked[0] + 1
        # The weight gradient of the hidden value (trn-fuse mlp-saved-gradient) comes last.
        gradient = [i for i, op in enumerate(body) if SAVED_GRADIENT in op.attributes]
        if len(gradient) > 1 or (gradient and not split < gradient[0] < len(body) - 1):
            raise CompileError(f"an mlp_saved kernel has at most one op marked "
                               f"{SAVED_GRADIENT}, after its second Linear's", kernel.location)
        end = gradient[0] if gradient else len(body) - 1
        results = list(zip(body[-1].operands, outs))
        views = dict(self.views)
        first, _ = self._views_and_compute(body[:split], views, "mlp_saved")
        hidden = body[marked[0]].results[0]
        views[hidden] = storage_less_view(hidden)
        second, _ = self._views_and_compute(body[split:end], views, "mlp_saved")
        lower_mlp_saved(self.em, first, second, views, hidden,
                        results[:1] if gradient else results, body[marked[0]].location,
                        (lambda rows: self._lower_saved_gradient(
                            body[end:-1], views, rows, results[1:], kernel.location))
                        if gradient else None)

    def _lower_saved_gradient(self, body: list[ir.Operation], views: dict, rows: RowTiles,
                              outputs: list, location: ir.Location) -> None:
        """An mlp_saved kernel's weight-gradient part (`body`, trn.yield left out): the hidden
        value's transpose times X, and maybe the hidden value summed over its rows, its
        A^T the hidden value's row tiles the kernel computed (`rows`); `outputs`: (value,
        destination view) of the gradient and the sums."""
        compute, _ = self._views_and_compute(body, views, "mlp_saved")
        matmuls = [op for op in compute if op.name == "trn.matmul"]
        reduces = [op for op in compute if op.name == "trn.reduce"]
        if len(matmuls) != 1:
            raise CompileError("an mlp_saved kernel's weight-gradient part holds one matmul",
                               location)
        transpose = U.defining_op(matmuls[0].operands[0])
        if transpose is None or transpose.name != "trn.transpose" or \
                transpose.operands[0] != rows.value:
            raise CompileError("an mlp_saved kernel's weight gradient reads the transpose of "
                               "its hidden value", matmuls[0].location)
        sums = column_sum_ops(outputs[1][0], set(compute)) if len(outputs) == 2 else []
        if len(outputs) > 2 or sums is None or reduces != sums[:1] or \
                (sums and sums[0].operands[0] != rows.value):
            raise CompileError("an mlp_saved kernel's weight-gradient part yields the "
                               "gradient and at most the hidden value's sums over its rows",
                               location)
        lower_matmul(self.em, matmuls[0],
                     [op for op in compute if op != matmuls[0] and op not in sums], views,
                     outputs[:1], "mn", outputs[1][1] if sums else None,
                     given_a_rows=lambda view: ComputedRows(rows, view))

    def _lower_linear_rows_part(self, kernel: ir.Operation, body: list[ir.Operation],
                                handed_on: list[int], given_rows: dict, given_views: dict,
                                inputs_loaded: tuple) -> tuple[list[ir.Operation], dict, dict,
                                                               ir.Value]:
        """The linear_rows part of an attention_linear_rows kernel whose rows' result the
        mlp_rows part after it reads (trn-fuse-attention-output), lowered with that result
        kept on chip, 128 token rows per tile (`inputs_loaded`: the QKV projection's
        RowTiles, whose loaded input rows its residual reads). Returns the rest of the body
        (the mlp_rows ops and the yield), those tiles by first token, a storage-less view of
        the result, and the result."""
        marked = [i for i, op in enumerate(body[:handed_on[0]])
                  if PRODUCER_RESULT in op.attributes]
        if len(handed_on) != 1 or len(marked) != 1 or not handed_on[0] < len(body) - 2:
            raise CompileError(f"an {ATTENTION_LINEAR_ROWS} kernel hands on the rows of one "
                               f"linear_rows part: one op marked {ROWS_HANDED_ON} after one "
                               f"marked {PRODUCER_RESULT}, and not its last", kernel.location)
        end = handed_on[0] + 1
        value = body[handed_on[0]].results[0]
        shape = tuple(U.shape(value))
        view = storage_less_view(value)
        views = dict(self.views)
        views.update(given_views)
        compute, _ = self._views_and_compute(body[:marked[0] + 1], views, "linear_rows")
        kept, keep = _whole_rows_kept(shape, "a linear_rows part hands on whole rows only",
                                      kernel.location)
        with body[handed_on[0]].location:
            lower_mlp_rows(self.em, compute, views, body[marked[0]].results[0],
                           body[marked[0] + 1:end], self._view, (value, view), matmuls=1,
                           given_x_rows=given_rows, consume=keep, input_rows_of=inputs_loaded)
        return body[end:], kept, {value: view}, value

    def _lower_kernel(self, kernel: ir.Operation, out: HbmView, also: list[HbmView]) -> None:
        """Lower `kernel` writing its result to `out` and its second result, if it has one, to
        `also`'s view."""
        annotate(kernel, self.em.target)
        body = kernel_body(kernel)
        kind = U.str_attr(kernel, "kind")
        given_rows, given_views, given_x, inputs_loaded = None, {}, None, ()
        if kind == ATTENTION_LINEAR_ROWS and not also:
            # The attention's part first, its output kept on chip as token rows; the rest is
            # the linear_rows kernel that reads them (trn-fuse-attention-output), and where
            # that one's rows are handed on, the mlp_rows kernel that reads those.
            body, given_rows, given_views, inputs_loaded = self._lower_attention_output(
                kernel, body)
            kind = "linear_rows"
            handed_on = [i for i, op in enumerate(body) if ROWS_HANDED_ON in op.attributes]
            if handed_on:
                body, given_rows, given_views, given_x = self._lower_linear_rows_part(
                    kernel, body, handed_on, given_rows, given_views, inputs_loaded)
                kind, inputs_loaded = "mlp_rows", ()
        if kind == "attention":
            # Bound by ACT and DVE, an attention kernel runs mostly on its own (a sixth of an
            # encoder layer's time): what earlier kernels gave each engine is largely done by
            # then, and its copies should balance its own work (kernels/emitter.py).
            self.em.discount_engine_work(ATTENTION_CARRY_OVER)
        if also and kind not in ("matmul", "elementwise", "weight_gradient", "attention",
                                 "rows", "mlp_saved"):
            raise CompileError(f"a '{kind}' kernel has one result; only matmul, elementwise, "
                               "weight_gradient, attention, rows and mlp_saved kernels store "
                               "more", kernel.location)
        extra = list(zip(list(body[-1].operands)[1:], also))
        if kind == "rows":
            self._lower_row_wise(kind, body, out, further=extra)
            return
        if kind == "mlp_saved":
            self._lower_mlp_saved(kernel, body, [out] + also)
            return
        if kind == "attention" and any(ATTENTION_INPUT in op.attributes for op in body):
            self._lower_qkv_attention(kernel, body, [out] + also)
            return
        if kind in ("attention", "matmul_rows"):
            self._lower_row_wise(kind, body, out, extra[0] if extra else None,
                                 input_contraction=extra[1] if len(extra) > 1 else None)
            return
        rows_body = None
        if kind in ("mlp_rows", "linear_rows"):
            # The producer's ops (the mlp's, the Linear's) first, then the rows' (trn-fuse
            # marks the op computing the producer's result).
            marked = [i for i, op in enumerate(body) if PRODUCER_RESULT in op.attributes]
            if len(marked) != 1 or not marked[0] < len(body) - 2:
                raise CompileError(f"a{'n' if kind[0] == 'm' else ''} {kind} kernel needs one op "
                                   f"marked {PRODUCER_RESULT}, not its last", kernel.location)
            split = marked[0] + 1
            body, rows_body = body[:split] + [body[-1]], body[split:]
        views = dict(self.views)
        views.update(given_views)
        given_x_rows = loaded = None
        handed = [i for i, op in enumerate(body) if INPUT_ROWS in op.attributes]
        if handed and kind == "mlp":
            # A row-wise part in front (a pre-norm FFN's norm): its rows are computed first
            # and kept for the first Linear's staging to turn on PE, and the rows it loads
            # for a residual that reads them.
            given_x_rows, loaded = self._lower_input_rows(kernel, body[:handed[0] + 1],
                                                          views)
            body = body[handed[0] + 1:]
        elif handed:
            raise CompileError(f"only an mlp or attention kernel has an op marked {INPUT_ROWS}",
                               kernel.location)
        compute = []
        yielded = body[-1].operands[0]
        stored_view = _stored_transpose(body) if not extra and rows_body is None else None
        stored_views = [stored_view]
        if stored_view is not None:
            # The kernel stores its result transposed (trn-layout): the computed value is
            # written through the inverse permutation of the result's buffer (and, where a
            # reshape splits its batch dim first, as [B, H, S, D], through that view).
            yielded = stored_view.operands[0]
            out = out.transpose(U.inverse_permutation(U.array_attr(stored_view,
                                                                   "permutation")))
            split = U.defining_op(yielded)
            if split.name == "trn.reshape":
                stored_views.append(split)
                yielded = split.operands[0]
                out = out.reshape(tuple(U.shape(yielded))) or out
        compute, unmerged = self._views_and_compute(
            [op for op in body[:-1] if stored_view is None or op not in stored_views], views,
            kind)
        if kind == "mlp":
            lower_mlp(self.em, compute, views, (yielded, out), given_x_rows,
                      loaded.part if loaded is not None else None)
            return
        if rows_body is not None:
            # (The producer's last op computes the value the rows read: trn-fuse's check.)
            # (No reuse_group of its own, as a rows kernel's: reusing the kernel's own bytes
            # first would make each token block's output wait for the previous block's rows
            # to be done with theirs; encoder_fwd's output projection and layer norm then
            # took 601.7 us against 571.7.)
            lower_mlp_rows(self.em, compute, views, body[-2].results[0], rows_body[:-1],
                           self._view, (rows_body[-1].operands[0], out),
                           matmuls=2 if kind == "mlp_rows" else 1, given_x_rows=given_rows,
                           given_x=given_x, input_rows_of=inputs_loaded)
            return
        if kind == "weight_gradient":
            lower_weight_gradient(self.em, compute, views, [(yielded, out)] + extra)
            return
        matmuls = [op for op in compute if op.name == "trn.matmul"]
        reduces = [op for op in compute if op.name == "trn.reduce"]
        windows = [op for op in compute if op.name in ("trn.conv", "trn.pool")]
        column_sums = _column_sums(matmuls, reduces, compute, views, extra)
        if column_sums is not None:
            compute = [op for op in compute if op not in column_sums[0]]
            reduces, extra = [], []
        if len(matmuls) + len(reduces) + len(windows) > 1:
            raise CompileError("a kernel holds at most one matmul, convolution, pooling or "
                               "reduction", kernel.location)
        if windows:
            root = windows[0]
            lower = lower_conv if root.name == "trn.conv" else lower_pool
            padding = None
            if root.operands[0] in self.padded:
                source, offsets, value = self.padded[root.operands[0]]
                padding = Padding(self.views[source], offsets, value)
                padded_shape = tuple(U.shape(root.operands[0]))
                views[root.operands[0]] = HbmView(
                    None, 0, padded_shape, row_major_strides(padded_shape),
                    element_type_hint=U.element_type(root.operands[0]))
            lower(self.em, root, [op for op in compute if op != root], views, (yielded, out),
                  padding)
        elif matmuls:
            chain = [op for op in compute if op != matmuls[0]]
            outputs = [(yielded, out)] + extra
            rank = len(U.shape(matmuls[0].results[0]))
            copies = []
            if unmerged or any(view.rank > rank for _, view in outputs):
                outputs, copies = self._split_batch(matmuls[0], chain, views, unmerged,
                                                    outputs)
            lower_matmul(self.em, matmuls[0], chain, views, outputs,
                         U.str_attr(kernel, "orientation"),
                         column_sums[1] if column_sums is not None else None)
            for whole, out in copies:
                self._copy(whole, out)
        elif reduces:
            reduce = reduces[0]
            after = compute[compute.index(reduce) + 1:]
            in_shape = U.shape(reduce.operands[0])
            pre = [op for op in compute if op != reduce and op not in after
                   and U.shape(op.results[0]) == in_shape]
            post = [op for op in compute if op != reduce and op not in pre]
            lower_reduce(self.em, pre, reduce, post, views, (yielded, out),
                         U.int_attr(kernel, "free_tile"))
        else:
            lower_elementwise(self.em, compute, views, [(yielded, out)] + extra,
                              U.int_attr(kernel, "free_tile"))


    def _split_batch(self, matmul: ir.Operation, chain: list[ir.Operation], views: dict,
                     unmerged: dict, outputs: list) -> tuple[list, list]:
        """Give every view of a batched matmul kernel the batch dims of its unmerged operands
        or outputs (e.g. [4, 12] instead of [48]: heads split out of a projection, or a
        result stored token-major); where some view cannot take them, copy the unmerged
        operands to contiguous buffers, and compute such outputs into buffers of their own
        copied to them after (`views` is updated; returns `outputs`, the (value, view) pairs
        the kernel stores, with their views split likewise, and the (buffer, output) copies
        to make after it)."""
        rank = len(U.shape(matmul.results[0]))
        batch = max((tuple(w.shape[:-2]) for w in [views[v] for v in matmul.operands] +
                     [out for _, out in outputs] if w.rank > rank), key=len)
        leaves = [v for op in [matmul] + chain for v in op.operands
                  if v in views and views[v].rank == rank]

        def split(view: HbmView) -> HbmView | None:
            return view if tuple(view.shape[:-2]) == batch else \
                view.reshape(batch + tuple(view.shape[-2:]))

        new = {v: split(views[v]) for v in leaves}
        new_outputs = [(value, split(out)) for value, out in outputs]
        unmerged_ok = all(views[v].shape[:-2] == batch for v in unmerged)
        if unmerged_ok and all(out is not None for _, out in new_outputs) and \
                all(w is not None for w in new.values()):
            views.update(new)
            return new_outputs, []
        for value, op in unmerged.items():
            source = views[value]
            views[value] = self._view(op, source.reshape(U.shape(op.operands[0])) or source)
        merged, copies = [], []
        for value, out in outputs:
            if out.rank > rank:
                whole = HbmView.of(self.em.alloc_hbm(U.shape(value), out.element_type))
                copies.append((whole.reshape(out.shape), out))
                out = whole
            merged.append((value, out))
        return merged, copies


def _column_sums(matmuls: list, reduces: list, compute: list, views: dict,
                 extra: list) -> tuple[list, HbmView] | None:
    """For a kernel yielding a 2-D matmul's result and, second, the sum over dim 0 of the
    tensor whose transpose is the matmul's left operand (a Linear's weight and bias
    gradients: dY^T @ X and dY summed over tokens), possibly converted: (the ops computing
    the sum, the sum's output view), which the matmul's lowering computes from the tiles it
    loads (kernels/matmul.py, _ColumnSums); None for any other kernel."""
    if len(matmuls) != 1 or len(reduces) != 1 or len(extra) != 1:
        return None
    reduce, (value, out) = reduces[0], extra[0]
    ops = column_sum_ops(value, set(compute))
    if ops is None or ops[0] != reduce or \
            any(v == reduce.results[0] for op in compute if op not in ops for v in op.operands):
        return None
    lhs, summed = views.get(matmuls[0].operands[0]), views.get(reduce.operands[0])
    if lhs is None or summed is None or lhs.rank != 2 or summed.buffer is None:
        return None
    # (The same strided view, or the same value even where a view of it had to be copied to
    # a contiguous buffer: both operands then read that one copy.)
    lhs_t = lhs.transpose([1, 0])
    same = (lhs_t.buffer, lhs_t.offset, lhs_t.shape, lhs_t.strides) == \
        (summed.buffer, summed.offset, summed.shape, summed.strides)
    return (ops, out) if same else None


def _without_unit_batch_dims(view: HbmView) -> HbmView:
    """`view` with its batch dims (all but the last two) of size 1 dropped."""
    for dim in reversed(range(view.rank - 2)):
        if view.shape[dim] == 1:
            view = view.select(dim, 0)
    return view


def _merges_matmul_batch(op: ir.Operation) -> bool:
    """A reshape that only merges leading dims, read only by matmuls (as their batch)."""
    if op.name != "trn.reshape":
        return False
    old, new = U.shape(op.operands[0]), U.shape(op.results[0])
    users = [u.owner.operation if isinstance(u.owner, ir.OpView) else u.owner
             for u in op.results[0].uses]
    return len(old) > len(new) >= 3 and old[-2:] == new[-2:] and bool(users) and \
        all(u.name == "trn.matmul" for u in users)


def _splat_read_by_kernels(constant: ir.Operation) -> HbmView | None:
    """A float constant of one repeated value that only kernels read, as a storage-less view
    their lowerings generate on chip (as they do a trn.fill's): stored, a [1, 12, 512, 512]
    fp32 zero that an attention kernel selects from is 12.6 MB of HBM read per layer."""
    value = constant.attributes["value"]
    result = constant.results[0]
    if not isinstance(value, ir.DenseElementsAttr) or not value.is_splat or \
            not isinstance(U.element_type(result), ir.FloatType):
        return None
    if not all(U.operation(use.owner).parent.name == "trn.kernel" for use in result.uses):
        return None
    shape = tuple(U.shape(result))
    return HbmView(None, 0, shape, (0,) * len(shape), U.element_type(result),
                   ir.FloatAttr(value.get_splat_value()).value)


def _stored_transpose(body: list[ir.Operation]) -> ir.Operation | None:
    """The trn.transpose the kernel yields when it transposes a value it computes."""
    producer = U.defining_op(body[-1].operands[0])
    if producer is None or producer.name != "trn.transpose":
        return None
    source = U.defining_op(producer.operands[0])
    inside = set(body)
    if source is not None and source in inside and source.name == "trn.reshape":
        source = U.defining_op(source.operands[0])      # a batch dim split first
    return producer if source is not None and source in inside \
        and source.name not in VIEW_OPS + SOURCE_OPS else None


def _inserted_slice(whole: HbmView, insert: ir.Operation) -> HbmView:
    """The part of `whole` (a view of the insert's result) that `insert` writes."""
    for dim, (start, stride, size) in enumerate(zip(
            U.array_attr(insert, "offsets"), U.array_attr(insert, "strides"),
            U.shape(insert.operands[1]))):
        whole = whole.slice(dim, start, size, stride)
    return whole


def _computed_from(op: ir.Operation, body: list[ir.Operation]) -> set:
    """The values of `body` (a kernel's ops, its yield last) computed from `op`'s result."""
    found = {op.results[0]}
    for later in body[body.index(op) + 1:-1]:
        if any(v in found for v in later.operands):
            found.update(later.results)
    return found


def _kernels_into_slices(body: list[ir.Operation]) -> dict[ir.Value, ir.Operation]:
    """Kernel results to compute straight into the slice of the
    insert_slice that is their only reader (through reshapes), instead of into a buffer of
    their own that the insert copies from: a concatenation of per-head gradients ([4, 12,
    512, 64] pieces of a [12, 12, 512, 64] tensor) moved every piece twice more. Only for
    inserts into a chain built from a trn.empty whose intermediate values nothing else
    reads, writing disjoint contiguous-strided slices: whatever order the pieces are written
    in, nobody sees the buffer before the last, and the pieces never overlap. Maps result
    -> insert."""
    chosen: dict[ir.Value, ir.Operation] = {}
    for last in body:
        if last.name != "trn.insert_slice" or any(
                U.operation(u.owner).name == "trn.insert_slice" and u.operand_number == 0
                for u in last.results[0].uses):
            continue          # not the end of a chain
        chain, value = [], last.results[0]
        op = last
        while op is not None and op.name == "trn.insert_slice":
            if chain and len(list(value.uses)) != 1:
                break
            chain.append(op)
            value = op.operands[0]
            op = U.defining_op(value)
        else:
            if op is None or op.name != "trn.empty" or len(list(value.uses)) != 1:
                continue
            if any(st != 1 for insert in chain for st in U.array_attr(insert, "strides")):
                continue
            boxes = [[(o, o + n) for o, n in zip(U.array_attr(insert, "offsets"),
                                                   U.shape(insert.operands[1]))]
                     for insert in chain]
            if any(all(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in zip(x, y))
                   for i, x in enumerate(boxes) for y in boxes[i + 1:]):
                continue
            for insert in chain:
                source = insert.operands[1]
                producer = U.defining_op(source)
                while producer is not None and producer.name == "trn.reshape" and \
                        len(list(source.uses)) == 1:
                    source = producer.operands[0]
                    producer = U.defining_op(source)
                region = _inserted_slice(HbmView.abstract(tuple(U.shape(last.results[0]))),
                                         insert)
                if producer is not None and producer.name == "trn.kernel" and \
                        len(list(source.uses)) == 1 and \
                        region.reshape(tuple(U.shape(source))) is not None:
                    chosen[source] = insert
    return chosen


def _may_write_in_place(insert: ir.Operation, position: dict) -> bool:
    """Whether `insert` may write its slice into its destination's own buffer: every other
    reader of the destination (through views) runs before it, or is the insert itself reading
    its source from a part of the destination that the slice does not overwrite (a circular
    pad copies one end of a tensor into the other)."""
    dest, source = insert.operands
    for reader, through in _readers(dest, skip=(insert, 0)):
        if reader == insert:
            if not _disjoint_from_slice(insert, through):
                return False
        elif position[reader] > position[insert]:
            return False
    return True


def _readers(value: ir.Value, skip=None, through=()):
    """(op of the function body, view ops on the way) for every op that reads `value`,
    following view ops (which read nothing themselves); `skip` = (op, operand index)."""
    for use in value.uses:
        owner = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
        if skip is not None and owner == skip[0] and use.operand_number == skip[1]:
            continue
        top = owner
        while top.parent is not None and top.parent.name != "func.func":
            top = top.parent
        if top == owner and owner.name in VIEW_OPS:
            yield from _readers(owner.results[0], through=through + (owner,))
        else:
            yield top, through


def _disjoint_from_slice(insert: ir.Operation, views: tuple) -> bool:
    """Whether the insert's source, the destination seen through `views`, shares no element
    with the slice the insert writes."""
    import numpy as np

    dest = insert.operands[0]
    whole = HbmView.abstract(tuple(U.shape(dest)))
    read = whole
    for op in views:
        read = apply_view_op(op, read)
        if read is None:
            return False
    written = whole
    for dim, (start, stride, size) in enumerate(zip(
            U.array_attr(insert, "offsets"), U.array_attr(insert, "strides"),
            U.shape(insert.operands[1]))):
        written = written.slice(dim, start, size, stride)
    return not np.intersect1d(_elements(read), _elements(written)).size


def _elements(view: HbmView):
    import numpy as np

    flat = np.array(view.offset, dtype=np.int64)
    for size, stride in zip(view.shape, view.strides):
        flat = np.add.outer(flat, np.arange(size, dtype=np.int64) * stride)
    return flat.ravel()


class _Marker:
    """Key standing for the copied value in a copy kernel (which has no MLIR value)."""
    SOURCE = object()


def _hbm_type(t: ir.Type) -> ir.MemRefType:
    tensor = ir.RankedTensorType(t)
    return ir.MemRefType.get(list(tensor.shape), tensor.element_type,
                             memory_space=ir.StringAttr.get("hbm"))
