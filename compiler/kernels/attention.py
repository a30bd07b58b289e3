"""Tiled lowering of an attention kernel (kind "attention", formed by trn-fuse from a scores
matmul, a row-wise kernel over the scores, and the matmul of its result with the values).

For each batch index and each block of up to 128 query rows, all on chip:
1. scores [rows, Sk] = Q[rows, D] @ K^T[D, Sk]: PE into PSUM banks of one moving tile each,
   K-tiles of D accumulated; Q^T and K^T are staged as the matmul kernel stages operands
   (transposed on PE when stored row-major), once per batch index;
2. the scores epilogue (a rounding, a scaling) while evacuating PSUM into one SBUF row tile;
3. the row-wise body (softmax and whatever the row kernel holds: masks, scalings) on that
   tile, exactly as a row-wise kernel computes it (kernels/rows.py), with the row tile as its
   input instead of a load;
4. out [rows, Dv] = P[rows, Sk] @ V[Sk, Dv]: the contraction over Sk needs Sk on partitions,
   so each 128-column block of P is transposed on PE (the blocks side by side in one PSUM
   bank, evacuated by one copy) and used as the stationary operand against V's rows,
   accumulating in one PSUM tile;
5. the output epilogue while evacuating PSUM, and one store.
Scores and probabilities never reach HBM. A softmax's division by its row sum is deferred to
the product (rows.py `defer_division`), as flash attention does: P @ V is linear in each row
of P, so dividing the [rows, Dv] product costs Dv columns of DVE work instead of Sk. The
probabilities are then rounded to their type (bf16, say) before the division rather than
after: the same relative rounding error, in another place. Every other rounding the three
kernels spell out (the scores to bf16, say) happens where it did.

A matmul_rows kernel (trn-fuse: a scores matmul whose result only a row-wise kernel reads,
the probabilities being a result themselves, or a softmax's backward whose gradient of the
probabilities is a matmul) is steps 1-3 only: the row-wise body's result is stored as a
row-wise kernel stores it. Where the row body's first op reads the scores, still in PSUM, and
makes an fp32 value only later ops read, that value overwrites them there (rows.py
`_psum_in_place`), so those ops too read an operand from PSUM.

An attention kernel may yield a second result: its probabilities (a training step saves
them; each row tile is stored divided and rounded, as P @ V reads it), or the product of a
third matmul contracting them over their rows (a softmax backward's dK^T = Q^T @ dS, the
rows being dS), accumulated in PSUM over the query blocks of a batch index and stored after
the last; computed transposed where trn-layout made it so (dK = dS^T @ Q: each 128-key
block of the row tile the stationary operand, Q's rows the moving one), and then written
token-major like the output. A third result may follow: a fourth matmul contracting an
input of the row part over its rows (trn-fuse attention-input-contractions: dV = P^T @ dO,
P the probabilities the softmax backward reads), accumulated the same way from the row
tiles of that input as the row part loads them.

A row part linear in the scores up to a power-of-two scaling (a softmax backward's dS =
(dP * P - P * rowsum(dP * P)) * scale, dP = dO @ V^T) takes that scaling on Q instead: Q^T's
blocks are multiplied as they leave PSUM after their turn on PE, which they do anyway, and
the rows lose a pass (`_scale_into_q`; the same bits, as a power of two commutes with every
rounding).

A kernel that trn-layout made token-major yields transpose(reshape(O)) ([B, S, H, Dv]): O is
written through the inverse of those views, each query block's outputs of all heads
gathering in one SBUF tile, stored as whole token rows once the last head is done (one run
of H * Dv elements per row instead of H runs of Dv). Likewise a Q whose heads lie side by
side in its token rows is loaded in whole rows for all heads, also where K and V come per
head (a training step's backward reads the saved ones so): each head's columns are then
turned on PE from partition 0, where its K^T lies.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.kernels.emitter import Emitter, Tile
from torchneuron.compiler.kernels.elementwise import load_leaf
from torchneuron.compiler.kernels.epilogue import Epilogue
from torchneuron.compiler.kernels.matmul import _Staged, matmul_element_type
from torchneuron.compiler.kernels.mlp import ComputedRows, RowTiles, store_rows_of
from torchneuron.compiler.kernels.rows import lower_rows
from torchneuron.compiler.kernels.tile_ops import (
    SOURCE_OPS, UNARY_OPS, VIEW_OPS, emit_elementwise, power_of_two,
)
from torchneuron.compiler.kernels.transfers import store_tile, transposed_access
from torchneuron.compiler.kernels.views import HbmView, source_view, storage_less_view


def lower_attention(em: Emitter, body: list[ir.Operation], views: dict,
                    view_of: Callable[[ir.Operation, HbmView], HbmView],
                    output: tuple[ir.Value, HbmView], masked_keys: bool = True,
                    saved: tuple[ir.Value, HbmView] | None = None,
                    scale_into_q: bool = True,
                    token_rows: dict[int, Tile] | None = None,
                    computed: RowTiles | None = None,
                    saved_operands: list[tuple[ir.Value, HbmView]] = (),
                    token_rows_stored: bool = False,
                    input_contraction: tuple[ir.Value, HbmView] | None = None) -> None:
    """`body`: the kernel's ops without trn.yield; `views`: HbmViews of values defined above
    the kernel; `view_of(op, source)`: the view a view op makes (batch dims a reshape cannot
    merge stay unmerged: operands are indexed by a flat batch index); `output`: (yielded
    value, destination view); `masked_keys`: skip the keys a constant mask hides from a
    whole query tile (`constant_mask_hooks`); `saved`: (the probabilities, their
    destination view) where the kernel yields them too (a training step saves them): each
    row tile is stored as the row-wise body leaves it, divided and rounded, and P @ V reads
    that same tile (no deferred division, every key computed); `scale_into_q`: a
    power-of-two scaling of the row part's linear result is applied to Q^T instead
    (`_scale_into_q`); `token_rows`: where given, the token-major output is kept on chip, not
    stored: each query block's tile of all heads' values [rows, H * Dv] goes into it under
    its first token (counted over batch and sequence, the rows of O as [B * S, H * Dv]) once
    its last head is in, for a later part of the kernel to read (`output`'s view may then
    be storage-less); `computed`: the row tiles of the value Q, K and V are views of, where
    an earlier part of the kernel computes it (the QKV projection): their views are then
    storage-less, and each batch index's operands take its token rows from it as it comes
    (`ComputedRows`) instead of loading them; `saved_operands`: (value, destination view)
    of views of that computed value the kernel yields (trn-fuse-attention-output
    qkv-saved: a training step saves Q, K^T and V; a backward's dO, which another kernel
    reads too), only with `computed`: K^T's tiles are stored as they are turned on PE for a
    batch index's staging (all of them, as every key is), and any view that is runs of
    columns of the computed rows (Q, V, the whole value) from each computed row tile
    (`store_rows_of`); `token_rows_stored`:
    the token rows kept on chip are also stored to `output`'s view (a training step saves
    the output its projection reads on chip), and the kernel may then store its
    probabilities too; `input_contraction`: (value, destination view) of the product of a
    fourth matmul, C = L^T @ B with L an input the row part reads (trn-fuse
    attention-input-contractions: dV = P^T @ dO), accumulated from the row tiles of L the
    row part loads."""
    if masked_keys:
        body = _mask_before_scale(body, views, view_of)
    matmuls = [op for op in body if op.name == "trn.matmul"]
    if len(matmuls) not in (1, 2, 3, 4) or (len(matmuls) >= 3 and saved is None) or \
            (len(matmuls) == 4) != (input_contraction is not None):
        raise CompileError("an attention kernel holds two matmuls, or three where it yields "
                           "the third's result second, or four where it yields the fourth's "
                           "too (a matmul_rows kernel one)", body[-1].location)
    first = matmuls[0]
    second = matmuls[1] if len(matmuls) >= 2 else None
    # A third contracts the rows over their row dim (trn-fuse row_contractions: dK^T =
    # Q^T @ dS, or dK = dS^T @ Q where trn-layout transposed it), accumulated over the query
    # blocks.
    third = matmuls[2] if len(matmuls) >= 3 else None
    if third is not None:
        saved = _written_through_views(saved, set(body))
    # A fourth contracts an input of the row part over its rows (dV = P^T @ dO).
    fourth = matmuls[3] if len(matmuls) == 4 else None
    if fourth is not None:
        input_contraction = _written_through_views(input_contraction, set(body))
    position = {op: i for i, op in enumerate(body)}
    end = position[second] if second is not None else len(body)

    # The scores: the first matmul and the unary ops right after it over its own shape,
    # done while evacuating PSUM. Where the row-wise part works on that same shape, only
    # roundings are taken (its own lowering folds a scaling into the softmax).
    reduces = [op for op in body if op.name == "trn.reduce"]
    row_shape = U.shape(reduces[0].operands[0]) if reduces else None
    same_shape = row_shape == U.shape(first.results[0])
    chain1, scores = [], first.results[0]
    for op in body[position[first] + 1:end]:
        if op.name in VIEW_OPS + SOURCE_OPS:
            continue
        if op.name in UNARY_OPS and list(op.operands) == [scores] and \
                U.shape(op.results[0]) == U.shape(scores) and \
                (op.name == "trn.convert" or not same_shape) and \
                len(list(scores.uses)) == 1 and not _widening(op):
            chain1.append(op)
            scores = op.results[0]
            continue
        break
    # The probabilities: the value the second matmul's left operand reshapes (without a
    # second matmul, the kernel's result).
    probs = probabilities(second, position) if second is not None else output[0]
    # The row-wise part: what the probabilities depend on after the scores' chain.
    start = position[chain1[-1]] + 1 if chain1 else position[first] + 1
    needed, rows_body = {probs}, []
    for op in reversed(body[start:end]):
        if any(r in needed for r in op.results):
            rows_body.append(op)
            needed.update(op.operands)
    rows_body.reverse()
    rows_set = set(rows_body)
    yielded, out_view = output
    token_major = _token_major_views(body, position, yielded) if second is not None else ()
    if token_major:
        # Stored token-major (trn-layout): write O through the inverse permutation. Its
        # [B, H] batch dims stay unmerged; `pick` indexes them by O's flat batch index.
        out_view = out_view.transpose(
            U.inverse_permutation(U.array_attr(token_major[1], "permutation")))
        yielded = token_major[0].operands[0]
    chain2 = [op for op in _computing(body[position[second] + 1:], yielded)
              if op not in token_major] if second is not None else []

    # Views of the operands (Q, K^T, V, epilogue operands): everything outside the row part.
    views = dict(views)
    for op in body:
        if op in rows_set or op.name not in VIEW_OPS + SOURCE_OPS:
            continue
        if op.name in SOURCE_OPS:
            views[op.results[0]] = source_view(op)
        elif op.operands[0] in views:
            views[op.results[0]] = view_of(op, views[op.operands[0]])
    q_view, kt_view = views.get(first.operands[0]), views.get(first.operands[1])
    v_view = views.get(second.operands[1]) if second is not None else None
    if q_view is None or kt_view is None or (second is not None and v_view is None):
        raise CompileError("attention operands must come from HBM", first.location)
    # Saved views of the computed operand: K^T's destinations, shaped as its view; the rest
    # (Q, V, the value kept whole) are stored as the projection's row tiles are computed.
    kt_saved = []
    for value, dest in saved_operands:
        view = views.get(value)
        if computed is None or view is None:
            raise CompileError("an attention kernel stores views of its operands only where "
                               "it computes them on chip", first.location)
        if _same_elements(view, kt_view):
            kt_saved.append(dest.reshape(kt_view.shape))
            continue
        store = store_rows_of(em, view, dest, computed.mlp.out_features)
        if store is None:
            raise CompileError("a saved view of an attention kernel's operands must be K^T as "
                               "it is staged or runs of columns of the computed rows (Q, V, "
                               "or the whole value)", U.defining_op(value).location)
        computed.on_row_tile.append(store)

    sq, sk = U.shape(first.results[0])[-2:]
    dv = U.shape(second.results[0])[-1] if second is not None else 0
    batch_shape = U.shape(first.results[0])[:-2]
    etype1 = matmul_element_type(q_view.element_type, kt_view.element_type)
    probs_type = U.element_type(probs)
    etype2 = matmul_element_type(probs_type, v_view.element_type) if second is not None \
        else etype1
    scores_type = U.element_type(scores)
    tk, tf = em.target.pe_rows, em.target.matmul_max_moving

    def pick(view: HbmView, b: int) -> HbmView:
        """The 2-D operand of flat batch index `b` (a view's leading dims are its batch)."""
        for dim, size in reversed(list(enumerate(view.shape[:-2]))):
            b, i = divmod(b, size)
            view = view.select(dim, i)
        return view

    d = U.shape(first.operands[0])[-1]
    # Heads side by side in each token's row (a projection's output viewed per head): Q, K
    # and V of all heads of a batch index are staged together, loaded in runs of the whole
    # row instead of one head's d elements (128 B for d = 64 in bf16, which the per-run DMA
    # cost makes several times dearer); head h is the rows or columns [h*d, (h+1)*d).
    # Only where a head's rows stay inside one 128-aligned K-tile (as PE transposes and
    # panels cut them) and all heads' operands take at most a quarter of SBUF.
    wide = [q_view.merge_heads(-1), kt_view.merge_heads(-2)] + \
        ([v_view.merge_heads(-1)] if second is not None else [])
    quarter = em.target.sbuf_partition_bytes // 4
    heads = 1            # heads staged together: K^T and V (and Q^T)
    q_heads = 1          # Q^T's heads staged together
    if all(w is not None for w in wide) and \
            q_view.shape[-3] == kt_view.shape[-3] == \
            (v_view if v_view is not None else q_view).shape[-3] and \
            (tk % d == 0 or d % tk == 0) and \
            staged_bytes(q_view.shape[-3], d, dv, sq, sk, etype1, etype2, tk) <= quarter:
        heads = q_heads = q_view.shape[-3]
        q_view, kt_view = wide[:2]
        kt_saved = [dest.merge_heads(-2) for dest in kt_saved]
        if None in kt_saved:
            raise CompileError("a saved K^T's heads must follow one another as its rows",
                               first.location)
        v_view = wide[2] if second is not None else None
    elif wide[0] is not None and q_view.shape[-3] > 1 and (tk % d == 0 or d % tk == 0) and \
            staged_bytes(q_view.shape[-3], d, 0, sq, 0, etype1, etype2, tk) <= quarter:
        # Only Q's heads lie side by side in its token rows (K and V saved per head, as a
        # training step's backward reads them): Q^T alone is staged for all heads, loaded in
        # whole token rows, and K^T and V per head.
        q_heads = q_view.shape[-3]
        q_view = wide[0]
    staged: dict = {}
    staged_q: dict = {}
    # A power-of-two scaling of the row part's linear result moves onto Q (`_scale_into_q`),
    # where Q^T's tiles take it as they leave PSUM.
    q_scale = None
    if scale_into_q and transposed_access(pick(q_view, 0).transpose([1, 0])):
        folded = _scale_into_q(body, first)
        # (Not where the scaled value itself is what later steps name: the probabilities
        # the second matmul reads, or a result.)
        if folded is not None and folded in rows_set and folded.results[0] not in \
                (probs, yielded, output[0]) + ((saved[0],) if saved is not None else ()):
            q_scale = U.float_attr(folded, "scalar")
            folded.results[0].replace_all_uses_with(folded.operands[0])
            rows_body.remove(folded)
            rows_set.discard(folded)
            # (What follows reads from `body` only the ops after the third matmul.)
            folded.erase()

    def from_computed(staged: _Staged | None) -> _Staged | None:
        """`staged`, taking its rows from `computed` where its view has no storage."""
        if staged is not None and computed is not None and staged.view.buffer is None:
            staged.given_rows = ComputedRows(computed, staged.view)
        return staged

    def q_staged(view: HbmView) -> _Staged:
        q_t = from_computed(_Staged(em, view.transpose([1, 0]), etype1))
        q_t.scale = q_scale
        return q_t

    def release(cache: dict) -> None:
        for old in cache.values():
            for s in old:
                if s is not None:
                    s.release()
        cache.clear()

    def operands_of(b: int) -> tuple[_Staged, _Staged, _Staged, int, int, int]:
        """Q^T, K^T and V of flat batch index `b`, and the offsets of its head in Q^T's rows,
        in K^T's rows (d per head) and in V's columns (dv per head)."""
        outer, head = divmod(b, heads)
        if outer not in staged:
            release(staged)
            staged[outer] = (from_computed(_Staged(em, pick(kt_view, outer), etype1)),
                             from_computed(_Staged(em, pick(v_view, outer), etype2))
                             if v_view is not None else None)
            if q_heads == heads:
                release(staged_q)
                staged_q[outer] = (q_staged(pick(q_view, outer)),)
            for dest in kt_saved:
                store_staged(staged[outer][0], pick(dest, outer))
        q_outer, q_head = divmod(b, q_heads)
        if q_outer not in staged_q:
            release(staged_q)
            q_t = q_staged(pick(q_view, q_outer))
            # (Each head's Q^T from partition 0, where its K^T lies: the token rows of all
            # heads are loaded once, one head's columns transposed at a time.)
            q_t.parts_in_place = False
            staged_q[q_outer] = (q_t,)
        return staged_q[q_outer] + staged[outer] + (q_head * (d if q_heads > 1 else 0),
                                                    head * (d if heads > 1 else 0),
                                                    head * (dv if heads > 1 else 0))

    def store_staged(k_t: _Staged, dest: HbmView) -> None:
        """Every tile of the staged K^T (as the scores' matmuls take them) into `dest`."""
        rows, cols = k_t.view.shape
        for k0 in range(0, rows, tk):
            for f0 in range(0, cols, tf):
                kn, fn = min(tk, rows - k0), min(tf, cols - f0)
                store_tile(em, dest.slice(0, k0, kn).slice(1, f0, fn), k_t.tile(k0, kn, f0, fn))

    def locate(view: HbmView) -> tuple[int, int, int]:
        """(batch, first query row, rows) of a row tile's view of the scores/probabilities."""
        row0 = view.offset // sk
        b, q0 = divmod(row0, sq)
        qn = view.shape[0]
        if q0 + qn > sq:
            raise CompileError("an attention row tile spans two batch indices",
                               first.location)
        return b, q0, qn

    k_tiles = [(k0, min(tk, d - k0)) for k0 in range(0, d, tk)]
    epilogue1 = Epilogue(em, chain1, views, first.results[0], {scores})
    f32 = ir.F32Type.get()
    # (A conversion of fp32 to fp32 does nothing: it stays with the scores in PSUM.)
    in_place = sk <= tf and all(
        op.name in UNARY_OPS and (op.name != "trn.convert" or _no_op(op)) and
        len(op.operands) == 1 and U.element_type(op.results[0]) == f32 and
        op.results[0] not in epilogue1.aliases for op in chain1) and scores_type == f32
    epilogue2 = Epilogue(em, chain2, views, second.results[0], {yielded}) \
        if second is not None else None
    rounding_only = second is not None and [op.name for op in chain2] == ["trn.convert"] and \
        chain2[0].operands[0] == second.results[0] and chain2[0].results[0] == yielded and \
        isinstance(U.element_type(yielded), ir.FloatType)
    scores_leaves = {scores}
    for op in rows_body:
        if op.name in VIEW_OPS and op.operands[0] in scores_leaves:
            scores_leaves.add(op.results[0])

    # The scores' epilogue only rounds them (or there is none): an evacuation can also scale
    # them and take their max (rows.py asks for that where a softmax's exp reads them).
    rounding_scores = not in_place and isinstance(scores_type, ir.FloatType) and (
        not chain1 or [op.name for op in chain1] == ["trn.convert"])

    def produce(value: ir.Value, view: HbmView, scale: float | None = None):
        if value not in scores_leaves:
            return None
        b, q0, qn = locate(view)
        q_t, k_t, _, hq, h0, _ = operands_of(b)
        width = view.shape[-1]            # the keys computed (constant_mask_hooks)
        fused = scale is not None and width <= tf and rounding_scores
        tile = None
        for f0 in range(0, width, tf):
            fn = min(tf, width - f0)
            acc = em.alloc("psum", qn, fn, ir.F32Type.get())
            for k0, kn in k_tiles:
                # (K^T staged in whole column tiles, shared by query tiles of any width)
                em.matmul(acc, q_t.tile(hq + k0, kn, q0, qn),
                          k_t.tile(h0 + k0, kn, f0, min(tf, sk - f0)).columns(0, fn),
                          accumulate=k0 > 0)
            if fused:
                # scale * round(s) == round(scale * s) for a power of two: one DVE pass
                # writes the scaled scores in their type and their negated row max.
                tile = em.alloc("sbuf", qn, width, scores_type)
                negated_max = em.alloc("sbuf", qn, 1, ir.F32Type.get())
                em.tensor_scalar_reduce(tile, acc, "mul", scale, "max", negated_max,
                                        negate=True)
                return tile, negated_max
            part = acc
            if in_place and fn == width:
                # The scores stay in PSUM, each unary op rewriting them there: the row
                # part then reads one operand from PSUM (a mask add at one cycle per
                # element, not two), and no evacuation copy is made.
                for op in chain1:
                    if not _no_op(op):
                        emit_elementwise(em, op, [acc], acc, epilogue1.consts, share=True)
                return acc if scale is None else (acc, None)
            if chain1:
                part = epilogue1.run(acc, lambda v, b=b, f0=f0, fn=fn:
                                     pick(v, b).slice(0, q0, qn).slice(1, f0, fn))[scores]
                if fn == width and part.memory == "sbuf" and \
                        part.element_type == scores_type:
                    # the whole row in one evacuation
                    return part if scale is None else (part, None)
            if tile is None:
                tile = em.alloc("sbuf", qn, width, scores_type)
            em.copy(tile.columns(f0, fn), part)        # rounds to the scores' type

        return tile if scale is None else (tile, None)

    def consume(probs_tile: Tile, view: HbmView, divisor: Tile | None) -> None:
        b, q0, qn = locate(view)
        _, _, v_t, _, _, v0 = operands_of(b)
        width = v_t.view.shape[1]          # every head's values, loaded as whole rows
        acc = em.alloc("psum", qn, dv, ir.F32Type.get())
        # P^T in 128-key blocks, side by side in one PSUM bank where they fit, evacuated by
        # one copy (one instruction's fixed cost, not one per block).
        keys = probs_tile.free            # the keys computed (constant_mask_hooks)
        blocks = [(k0, min(tk, keys - k0)) for k0 in range(0, keys, tk)]
        together = max(1, min(len(blocks), tf // qn)) if keys % tk == 0 else 1
        for g0 in range(0, len(blocks), together):
            group = blocks[g0:g0 + together]
            kn = group[0][1]
            turned = em.alloc("psum", kn, len(group) * qn, ir.F32Type.get())
            for i, (k0, _) in enumerate(group):
                em.transpose(turned.columns(i * qn, qn), probs_tile.columns(k0, kn))
            stationary = em.alloc("sbuf", kn, len(group) * qn, etype2)
            em.copy(stationary, turned)
            for i, (k0, _) in enumerate(group):
                em.matmul(acc, stationary.columns(i * qn, qn),
                          v_t.tile(k0, kn, 0, width).columns(v0, dv), accumulate=k0 > 0)
        # softmax's division, deferred by the row part to this [rows, Dv] product (it is
        # linear in each row of P): Dv columns divided instead of Sk. Where the epilogue only
        # rounds, the division is the evacuation (DVE rounds its fp32 quotient as it writes).
        # With all heads' outputs gathered as token rows, this head's columns of its query
        # block's rows tile; the division writes there directly.
        slot = None
        if rows_out is not None:
            outer, head = divmod(b, gather.heads)
            slot = gather.slot(outer, q0, qn, head)
        if divisor is not None and rounding_only:
            quotient = slot if slot is not None and slot.element_type == \
                U.element_type(yielded) else em.alloc("sbuf", qn, dv, U.element_type(yielded))
            em.tensor_scalar(quotient, acc, "div", divisor)
            results = {yielded: quotient}
        else:
            if divisor is not None:
                em.tensor_scalar(acc, acc, "div", divisor)
            results = epilogue2.run(acc, lambda v, b=b: pick(v, b).slice(0, q0, qn))
        if slot is None:
            store_tile(em, pick(out_view, b).slice(0, q0, qn), results[yielded])
            return
        if results[yielded] != slot:
            em.copy(slot, results[yielded])
        whole = gather.filled(outer, q0)
        if whole is not None:
            if token_rows is not None:
                token_rows[outer * sq + q0] = whole
            if token_rows is None or token_rows_stored:
                store_tile(em, pick(rows_out, outer).slice(0, q0, qn), whole)

    # All heads' outputs of a query block as whole token rows, where the output holds head
    # h's values right after head h-1's in each row (a token-major output): each query
    # block's tile of all heads stays on chip until its last head's values are in.
    # (At most a quarter of SBUF for the tiles of one batch index's query blocks: the heads
    # of a batch index come one after another, each through all the query blocks.)
    rows_out, gather = _head_rows(em, out_view, -(-sq // em.target.num_partitions), dv) \
        if second is not None else (None, None)
    if token_rows is not None and (rows_out is None or
                                   (saved is not None and not token_rows_stored) or
                                   third is not None or not token_major):
        raise CompileError("an attention kernel keeps its output on chip only as token rows "
                           "of all heads, with no second result unless it stores them too",
                           first.location)

    # The scores and probabilities never get a buffer: storage-less row-major views of them
    # tell the row-wise lowering their layout, and `locate` their rows.
    rows_views = dict(views)
    rows_views[scores] = storage_less_view(scores)
    probs_view = storage_less_view(probs)
    if math.prod(batch_shape) * sq != math.prod(U.shape(probs)[:-1]):
        raise CompileError("an attention kernel's row part must keep the scores' rows",
                           first.location)
    if second is None:
        # matmul_rows: the rows' result is the kernel's, stored as a row-wise kernel stores.
        lower_rows(em, rows_body, rows_views, view_of, (probs, out_view), produce)
        return
    if third is not None:
        contract = _row_contraction(em, third, _computing(body[position[third] + 1:],
                                                          saved[0]),
                                    views, saved, probs, sq, pick, locate)
        produce_rows, contract_input = produce, None
        if fourth is not None:
            # The input's row tiles, as the row part loads them (through `produce`), for
            # the fourth matmul's stationary operand.
            leaf, leaf_view = _contracted_input(fourth, views, rows_body, sk)
            loaded: dict = {}

            def produce_rows(value: ir.Value, view: HbmView, *scaled):
                got = produce(value, view, *scaled)
                if got is None and not scaled and value == leaf:
                    got = loaded[locate(view)] = load_leaf(em, view)
                return got

            contract_input = _transposed_row_contraction(
                em, fourth, _computing(body[position[fourth] + 1:], input_contraction[0]),
                views, input_contraction, sq, pick, locate,
                lambda view: from_computed(_Staged(em, view, matmul_element_type(
                    leaf_view.element_type, view.element_type))))

        def consume_and_contract(probs_tile: Tile, view: HbmView,
                                 divisor: Tile | None) -> None:
            consume(probs_tile, view, divisor)
            contract(probs_tile, view)
            if contract_input is not None:
                tile = loaded.pop(locate(view), None)
                if tile is None:
                    raise CompileError("an attention kernel's fourth matmul needs the row "
                                       "tiles of its input as the row part loads them",
                                       fourth.location)
                contract_input(tile, view)

        lower_rows(em, rows_body, rows_views, view_of, (probs, probs_view), produce_rows,
                   consume_and_contract)
    elif saved is not None:
        if saved[0] != probs:
            raise CompileError("an attention kernel's second result must be its "
                               "probabilities", first.location)
        saved_view = saved[1]

        def consume_and_store(probs_tile: Tile, view: HbmView, divisor: Tile | None) -> None:
            b, q0, qn = locate(view)
            store_tile(em, pick(saved_view, b).slice(0, q0, qn), probs_tile)
            consume(probs_tile, view, divisor)

        lower_rows(em, rows_body, rows_views, view_of, (probs, probs_view), produce,
                   consume_and_store)
    else:
        lower_rows(em, rows_body, rows_views, view_of, (probs, probs_view), produce, consume,
                   defer_division=True,
                   **(constant_mask_hooks(rows_body, rows_views, view_of, scores_leaves,
                                          probs, sk, tk) if masked_keys else {}))
    if gather is not None and gather.tiles:
        raise CompileError("an attention kernel left query blocks of some heads unstored",
                           first.location)
    if computed is not None and computed.on_row_tile:
        computed.all_rows()         # (rows no query or key asked for still hold saved values)


def probabilities(matmul: ir.Operation, ops) -> ir.Value:
    """The value the attention's second matmul reads as its left operand (the
    probabilities), before the reshapes among `ops` (the kernel's body) that regroup it."""
    probs = matmul.operands[0]
    while U.defining_op(probs) in ops and U.defining_op(probs).name == "trn.reshape":
        probs = U.defining_op(probs).operands[0]
    return probs


def _same_elements(a: HbmView, b: HbmView) -> bool:
    """Whether two views hold the same elements in the same order (up to their shapes)."""
    if (a.buffer is None) != (b.buffer is None):
        return False        # (one computed on chip, the other in HBM)
    if a.shape != b.shape:
        a = a.reshape(b.shape)
    return a == b


def _scale_into_q(body: list[ir.Operation], first: ir.Operation) -> ir.Operation | None:
    """The op scaling by a power of two a value linear in the scores (the first matmul's
    result), in a row part linear in them up to the second matmul, whose scaling can move
    onto Q: a softmax backward's dS = (dP * P - P * rowsum(dP * P)) * scale, with dP =
    dO @ V^T. Linear: each op from the scores on is a view, a conversion, a sum, an add or
    sub of two linear values, a product of a linear value with one not computed from the
    scores, or a multiplication by a constant; and every reader of a linear value before the
    scaling is one of those ops. Multiplying by a power of two commutes with every rounding
    (outside fp32's subnormal range), so scaling Q^T gives the same values bit for bit,
    without the pass over the rows. None where there is no such op."""
    position = {op: i for i, op in enumerate(body)}
    linear = {first.results[0]}
    before: set = set()             # the linear values the scaling follows
    scaling = None
    for op in body[position[first] + 1:]:
        if op.name == "trn.matmul":
            break                   # the row part ends at the second matmul
        reads = [v in linear for v in op.operands]
        if not any(reads):
            continue
        name = op.name
        kind = U.str_attr(op, "op") if "op" in op.attributes else None
        if scaling is None and name == "trn.tensor_scalar" and kind == "mul" and \
                "scalar" in op.attributes and power_of_two(U.float_attr(op, "scalar")):
            scaling = op
            before = set(linear)
        elif not (name in VIEW_OPS or name == "trn.convert" or
                  (name == "trn.reduce" and kind == "add") or
                  (name == "trn.tensor_tensor" and (
                      (kind in ("add", "sub") and all(reads)) or
                      (kind == "mul" and reads.count(True) == 1))) or
                  (name == "trn.tensor_scalar" and kind == "mul" and
                   "scalar" in op.attributes)):
            # (Nonlinear rows, such as a forward's softmax, take the scaling in a pass they
            # make anyway.)
            return None
        linear.add(op.results[0])
    if scaling is None:
        return None
    # (What reads a linear value before the scaling must be linear itself, on the way to it.)
    inside = {U.defining_op(v) for v in before} | {scaling}
    for value in before:
        if any(U.operation(use.owner) not in inside for use in value.uses):
            return None
    return scaling


def _computing(ops: list[ir.Operation], value: ir.Value) -> list[ir.Operation]:
    """The ops of `ops` (in order) that `value` depends on."""
    needed, chosen = {value}, []
    for op in reversed(ops):
        if any(r in needed for r in op.results):
            chosen.append(op)
            needed.update(op.operands)
    return chosen[::-1]


def _written_through_views(saved: tuple[ir.Value, HbmView], body: set
                           ) -> tuple[ir.Value, HbmView]:
    """(value, view) of a kernel's second result with the view ops of `body` that make it
    (trn-layout's token-major transpose, the reshape splitting its heads) undone on the view:
    the value they are views of, and where its elements go. A reshape of batch dims that no
    strided view expresses leaves the view's batch dims as they are (`pick` takes a flat
    batch index)."""
    value, view = saved
    op = U.defining_op(value)
    while op in body and op.name in ("trn.transpose", "trn.reshape"):
        source = op.operands[0]
        if op.name == "trn.transpose":
            view = view.transpose(U.inverse_permutation(U.array_attr(op, "permutation")))
        else:
            shape = U.shape(source)
            reshaped = view.reshape(tuple(shape))
            if reshaped is None and (list(view.shape[-2:]) != shape[-2:] or
                                     math.prod(view.shape) != math.prod(shape)):
                break
            view = reshaped or view
        value, op = source, U.defining_op(source)
    return value, view


def _row_contraction(em: Emitter, matmul: ir.Operation, chain: list[ir.Operation],
                     views: dict, saved: tuple[ir.Value, HbmView], probs: ir.Value, sq: int,
                     pick: Callable, locate: Callable) -> Callable[[Tile, HbmView], None]:
    """The step that accumulates C = A @ R ([.., D, Sq] x [.., Sq, Sk], R the rows result) one
    row tile of R at a time: R's tile [rows, Sk] is the moving operand as it is (its rows
    are the contraction), A^T's rows [rows, D] the stationary one, into a PSUM tile [D, Sk]
    per batch index that the last row tile's step runs `chain` (the epilogue) on and
    stores to `saved`'s view. The row tiles come in order within a batch index, so C sums
    its row tiles in the order a matmul kernel's K-tiles would.

    Transposed (trn-layout transposed-contractions: C^T = R^T @ B, [.., Sk, Sq] x [.., Sq,
    D]), each 128-column block of R's tile is the stationary operand and B's rows [rows, D]
    the moving one, into one PSUM tile per key block, [128, D] each side by side: the same
    products summed in the same order. Where the view of C^T holds the heads of a batch
    index side by side in each row (stored token-major), a key block's rows of all heads
    gather in one SBUF tile, stored as whole rows once the last head's are in."""
    value, out_view = saved
    if U.defining_op(matmul.operands[0]) is not None and \
            matmul.operands[1] in views and matmul.operands[0] not in views:
        etype = matmul_element_type(U.element_type(probs),
                                    views[matmul.operands[1]].element_type)
        return _transposed_row_contraction(em, matmul, chain, views, saved, sq, pick,
                                           locate, lambda view: _Staged(em, view, etype))
    a_view = views.get(matmul.operands[0])
    if a_view is None or U.defining_op(matmul.operands[1]) is None:
        raise CompileError("an attention kernel's third matmul reads an operand from HBM "
                           "and the rows result", matmul.location)
    d, sk = U.shape(matmul.results[0])[-2:]
    etype = matmul_element_type(a_view.element_type, U.element_type(probs))
    epilogue = Epilogue(em, chain, views, matmul.results[0], {value})
    accumulators: dict[int, Tile] = {}
    staged: dict[int, _Staged] = {}

    def contract(probs_tile: Tile, view: HbmView) -> None:
        b, q0, qn = locate(view)
        if b not in accumulators:
            _stage_alone(staged, b, _Staged(em, pick(a_view, b).transpose([1, 0]), etype))
            accumulators[b] = em.alloc("psum", d, sk, ir.F32Type.get())
        acc = accumulators[b]
        em.matmul(acc, staged[b].tile(q0, qn, 0, d), probs_tile, accumulate=q0 > 0)
        if q0 + qn == sq:
            results = epilogue.run(acc, lambda v, b=b: pick(v, b))
            store_tile(em, pick(out_view, b), results[value])
            del accumulators[b]

    return contract


def _transposed_row_contraction(em: Emitter, matmul: ir.Operation, chain: list[ir.Operation],
                                views: dict, saved: tuple[ir.Value, HbmView], sq: int,
                                pick: Callable, locate: Callable,
                                stage: Callable[[HbmView], _Staged]
                                ) -> Callable[[Tile, HbmView], None]:
    """`_row_contraction`'s step for C^T = R^T @ B (B's operand of a batch index staged by
    `stage(view)`, in the element type the product takes). Also the fourth matmul's, C = L^T @ B
    for an input L of the row part (`lower_attention`'s `input_contraction`), given L's row
    tiles."""
    value, out_view = saved
    b_view = views[matmul.operands[1]]
    sk, d = U.shape(matmul.results[0])[-2:]
    tk = em.target.pe_rows
    blocks = [(k0, min(tk, sk - k0)) for k0 in range(0, sk, tk)]
    epilogue = Epilogue(em, chain, views, matmul.results[0], {value})
    rounding_only = [op.name for op in chain] == ["trn.convert"] and \
        chain[0].results[0] == value and isinstance(U.element_type(value), ir.FloatType)
    # Token-major: the heads of a batch index side by side in each of C^T's rows.
    rows_out, gather = _head_rows(em, out_view, len(blocks), d)
    heads = gather.heads if gather is not None else 1
    accumulators: dict[int, Tile] = {}
    staged: dict[int, _Staged] = {}

    def evacuate(b: int, acc: Tile) -> None:
        outer, head = divmod(b, heads)
        for i, (k0, kn) in enumerate(blocks):
            part = acc.columns(i * d, d).rows(kn)
            if rows_out is None:
                results = epilogue.run(part, lambda v, b=b, k0=k0, kn=kn:
                                       pick(v, b).slice(0, k0, kn))
                store_tile(em, pick(out_view, b).slice(0, k0, kn), results[value])
                continue
            slot = gather.slot(outer, k0, kn, head)
            if rounding_only and slot.element_type == U.element_type(value):
                em.copy(slot, part)                 # rounds to the result's type
            else:
                results = epilogue.run(part, lambda v, b=b, k0=k0, kn=kn:
                                       pick(v, b).slice(0, k0, kn))
                em.copy(slot, results[value])
            whole = gather.filled(outer, k0)
            if whole is not None:
                store_tile(em, pick(rows_out, outer).slice(0, k0, kn), whole)

    def contract(probs_tile: Tile, view: HbmView) -> None:
        b, q0, qn = locate(view)
        if b not in accumulators:
            _stage_alone(staged, b, stage(pick(b_view, b)))
            accumulators[b] = em.alloc("psum", blocks[0][1], len(blocks) * d,
                                       ir.F32Type.get())
        acc = accumulators[b]
        for i, (k0, kn) in enumerate(blocks):
            em.matmul(acc.columns(i * d, d).rows(kn), probs_tile.columns(k0, kn),
                      staged[b].tile(q0, qn, 0, d), accumulate=q0 > 0)
        if q0 + qn == sq:
            evacuate(b, acc)
            del accumulators[b]

    return contract


class _HeadRows:
    """Rows of all heads gathering in SBUF (a token-major result, head h's values right after
    head h-1's in each row): per (outer batch index, first row), one tile [rows, heads * d]
    that takes each head's [rows, d] in its columns."""

    def __init__(self, em: Emitter, heads: int, d: int, element_type: ir.Type):
        self.em, self.heads, self.d, self.element_type = em, heads, d, element_type
        self.tiles: dict[tuple[int, int], list] = {}     # (outer, row) -> [tile, heads in]

    def slot(self, outer: int, row: int, rows: int, head: int) -> Tile:
        """Head `head`'s columns of the tile of rows [row, row + rows) of `outer`."""
        entry = self.tiles.get((outer, row))
        if entry is None:
            entry = self.tiles[outer, row] = [
                self.em.alloc("sbuf", rows, self.heads * self.d, self.element_type), 0]
        return entry[0].columns(head * self.d, self.d)

    def filled(self, outer: int, row: int) -> Tile | None:
        """One more head's columns of that tile are in: the tile, where that was the last."""
        entry = self.tiles[outer, row]
        entry[1] += 1
        if entry[1] < self.heads:
            return None
        del self.tiles[outer, row]
        return entry[0]


def _head_rows(em: Emitter, out_view: HbmView, row_blocks: int, d: int
               ) -> tuple[HbmView | None, _HeadRows | None]:
    """(the view of whole rows of all heads, their gathering) where `out_view` [.., H, rows,
    d] holds head h's values right after head h-1's in each row and the tiles of one batch
    index's `row_blocks` blocks of rows take at most a quarter of SBUF (the heads of a batch
    index come one after another, each through all its row blocks); (None, None)
    otherwise."""
    if out_view.rank < 3 or out_view.shape[-3] < 2 or \
            row_blocks * out_view.shape[-3] * d * U.element_bytes(out_view.element_type) > \
            em.target.sbuf_partition_bytes // 4:
        return None, None
    rows_out = out_view.merge_heads(-1)
    if rows_out is None:
        return None, None
    return rows_out, _HeadRows(em, out_view.shape[-3], d, out_view.element_type)


def _contracted_input(matmul: ir.Operation, views: dict, rows_body: list[ir.Operation],
                      sk: int) -> tuple[ir.Value, HbmView]:
    """The input L, and its view, whose transpose (through reshapes of its batch dims) is the
    left operand of the fourth matmul C = L^T @ B; only where the row part reads L and L's
    view lays its rows out as the scores' (row-major, Sk to a row), so that a row tile's
    view of L locates it (`locate`)."""
    read = {v for op in rows_body for v in op.operands}
    op = U.defining_op(matmul.operands[0])
    leaf = None
    if op is not None and op.name == "trn.transpose":
        leaf = op.operands[0]
        while leaf not in read and U.defining_op(leaf) is not None and \
                U.defining_op(leaf).name == "trn.reshape":
            leaf = U.defining_op(leaf).operands[0]
    view = views.get(leaf) if leaf is not None else None
    if view is None or leaf not in read or not view.is_contiguous() or view.shape[-1] != sk:
        raise CompileError("an attention kernel's fourth matmul contracts the transpose of an "
                           "input its row part reads, laid out as the scores",
                           matmul.location)
    return leaf, view


def _stage_alone(staged: dict[int, _Staged], b: int, operand: _Staged) -> None:
    """`operand` becomes batch index `b`'s entry of `staged`, the earlier ones' tiles
    released (a row contraction's operand of one batch index at a time)."""
    for old in staged.values():
        old.release()
    staged.clear()
    staged[b] = operand


def _widening(op: ir.Operation) -> bool:
    """A conversion of a float to a wider float: the row body reads the narrower tile as
    it is (engines widen what they read), so the rounding before it stays."""
    if op.name != "trn.convert":
        return False
    narrow, wide = U.element_type(op.operands[0]), U.element_type(op.results[0])
    return isinstance(narrow, ir.FloatType) and isinstance(wide, ir.FloatType) and \
        wide.width > narrow.width


def _no_op(op: ir.Operation) -> bool:
    """A conversion to the type its operand has."""
    return op.name == "trn.convert" and op.operands[0].type == op.results[0].type


def _token_major_views(body: list[ir.Operation], position: dict,
                       yielded: ir.Value) -> tuple[ir.Operation, ir.Operation] | tuple:
    """(reshape, transpose) when the kernel yields transpose(reshape(O)) of a value O it
    computes (trn-layout's token-major output); () otherwise."""
    transpose = U.defining_op(yielded)
    if transpose is None or transpose not in position or transpose.name != "trn.transpose":
        return ()
    reshape = U.defining_op(transpose.operands[0])
    if reshape is None or reshape not in position or reshape.name != "trn.reshape":
        raise CompileError("a token-major attention kernel yields transpose(reshape(O))",
                           transpose.location)
    return reshape, transpose


def staged_bytes(heads: int, d: int, dv: int, sq: int, sk: int, qk_type: ir.Type,
                 v_type: ir.Type, tk: int) -> int:
    """Bytes per partition that one batch index's Q^T and K^T (each head's d rows on
    partitions, with the row panels they are transposed from) and V (all heads' columns per
    128 keys) take staged."""
    qk, v = U.element_bytes(qk_type), U.element_bytes(v_type)
    tiles = lambda n: -(-n // tk)          # noqa: E731
    return (qk * heads * tiles(d) * (sq + sk) + qk * (tiles(sq) + tiles(sk)) * heads * d
            + v * tiles(sk) * heads * dv)


def _mask_before_scale(body: list[ir.Operation], views: dict, view_of) -> list[ir.Operation]:
    """`body` with the scores' scaling moved after a constant mask's addition where the mask
    holds only 0 and -inf: c s + m becomes c (s + m), exactly (c > 0: for m = 0 both are
    fl(c s); for m = -inf both are -inf, or NaN where s is +inf or NaN). The softmax then
    reads a scaling of the masked scores, which its lowering makes in the max's own pass
    (rows.py `scaled`, `rescaled_in_place`), instead of a pass over the scores to scale them
    before the mask's."""
    local = {op.results[0]: op for op in body}
    f32 = ir.F32Type.get()

    def single_use(value: ir.Value) -> bool:
        return len(list(value.uses)) == 1

    def mask_values(value: ir.Value):
        chain = []
        while value in local and local[value].name in VIEW_OPS:
            chain.append(local[value])
            value = local[value].operands[0]
        view = views.get(value)
        if view is None or view.buffer is None:
            return None
        try:
            for op in reversed(chain):
                view = view_of(op, view)
        except CompileError:
            return None
        return _constant_of(view.buffer)

    for add in list(body):
        if add.name != "trn.tensor_tensor" or U.str_attr(add, "op") != "add" or \
                U.element_type(add.results[0]) != f32:
            continue
        for side in (0, 1):
            scaled, mask = add.operands[side], add.operands[1 - side]
            reshape = local.get(scaled)
            if reshape is not None and reshape.name == "trn.reshape" and single_use(scaled):
                scaled = reshape.operands[0]
            else:
                reshape = None
            mul = local.get(scaled)
            if mul is None or mul.name != "trn.tensor_scalar" or \
                    U.str_attr(mul, "op") != "mul" or \
                    ir.BoolAttr(mul.attributes["reverse"]).value or \
                    not 0.0 < U.float_attr(mul, "scalar") < math.inf or \
                    not single_use(scaled) or U.element_type(scaled) != f32:
                continue
            source = local.get(mul.operands[0])
            if source is None or source.name != "trn.matmul" or \
                    U.element_type(mul.operands[0]) != f32:
                continue
            values = mask_values(mask)
            if values is None or not np.all((values == 0) | (values == -np.inf)):
                continue
            with ir.InsertionPoint(add), add.location:
                scores = mul.operands[0]
                if reshape is not None:
                    scores = U.clone_with_operands(reshape, [scores]).results[0]
                masked = U.clone_with_operands(
                    add, [scores, mask] if side == 0 else [mask, scores])
                rescaled = U.create("trn.tensor_scalar", [add.results[0].type],
                                    [masked.results[0]], U.attributes_of(mul), mul.location)
            add.results[0].replace_all_uses_with(rescaled.results[0])
            # (Users before what they use: an op must have no uses left when erased.)
            gone = [add] + ([reshape] if reshape is not None else []) + [mul]
            new = ([U.defining_op(scores)] if reshape is not None else []) + [masked, rescaled]
            at = body.index(add)
            body = [op for op in body[:at] + new + body[at + 1:]
                    if not any(op == g for g in gone)]
            for op in gone:
                op.erase()
            return body
    return body


# Dead-key states of a row value: on the keys a constant mask hides from every row of a
# tile, it is "neginf" (-inf there), "zero" (+0 there), or "finite" (finite values that
# matter only through the states above); per-row values are "row" (the same whether computed
# over all keys or over the others only). Anything else: no narrowing.
def constant_mask_hooks(rows_body: list[ir.Operation], views: dict, view_of,
                        scores: set, probs: ir.Value, sk: int, tk: int):
    """lower_rows' `row_width`, `mask_columns` and `rows_see_a_key` for an attention whose row
    part is a softmax of the scores masked by a constant (a causal mask folded by the
    frontend): added to them (-inf where hidden), or a select of -inf by a bool mask
    (scaled_dot_product_attention's is_causal). `row_width`: per query tile, the keys up to
    the last one the mask lets some row of the tile see, in whole 128-key blocks; the keys
    after it are -inf in every row. `mask_columns` (an added mask): the tile's columns where
    the mask is not 0 in some row. `rows_see_a_key`: whether every row of the tile sees some
    key. None of them where the row part is not such a softmax or the mask is not a readable
    constant.

    Skipping those keys leaves each probability on the other keys as it is: a row's max
    ignores -inf (its max is over the seen keys either way); exp(-inf - max) is +0 and adds
    nothing to the sum; the probability there is 0 (PyTorch's zeroing of an all-masked row
    included), and adds nothing to P @ V. The scores are taken to be finite: a masked +inf
    or NaN score, or a NaN or infinite value row under a masked key, would make eager's row
    NaN, and here does not, as in fused attention kernels that skip masked blocks."""
    state: dict = {}
    leaf_views: dict = dict(views)
    # The one constant that masks, and which of its values hide a key: "-inf" (added), "1"
    # (a select's condition choosing -inf where true), "0" (... where false).
    mask: dict = {}

    def leaf_state(value):
        if value in scores:
            return "finite"
        view = leaf_views.get(value)
        if view is None:
            return None
        if view.buffer is None:
            return ("fill", view.fill) if view.fill is not None else None
        return ("constant", value) if _hbm_constant(view.buffer) is not None else None

    def masking(leaf, hidden: str) -> str | None:
        if mask and mask != {"leaf": leaf, "hidden": hidden}:
            return None
        mask.update(leaf=leaf, hidden=hidden)
        return "neginf"

    def of(value):
        if value in state:
            return state[value]
        found = leaf_state(value)
        state[value] = found
        return found

    for op in rows_body:
        result = op.results[0]
        if op.name in SOURCE_OPS:
            leaf_views[result] = source_view(op)
            continue
        if op.name in VIEW_OPS:
            source = op.operands[0]
            if source in leaf_views:
                try:
                    leaf_views[result] = view_of(op, leaf_views[source])
                except CompileError:
                    return {}
            elif source in scores or result in scores:
                state[result] = "finite"
            elif of(source) == "row" and op.name in ("trn.reshape", "trn.broadcast"):
                state[result] = "row"
            else:
                return {}
            continue
        operands = [of(v) for v in op.operands]
        constant = [s for s in operands if isinstance(s, tuple) and s[0] == "constant"]
        if op.name == "trn.tensor_tensor" and U.str_attr(op, "op") == "add" and \
                len(constant) == 1 and "finite" in operands:
            state[result] = masking(constant[0][1], "-inf")
        elif op.name == "trn.select" and operands[0] in constant and \
                sorted(operands[1:], key=str) == sorted(["finite", ("fill", -math.inf)], key=str):
            state[result] = masking(operands[0][1],
                                    "1" if operands[1] == ("fill", -math.inf) else "0")
        else:
            state[result] = _dead_key_state(op, operands)
        if state[result] is None:
            return {}
    if of(probs) != "zero" or not mask:
        return {}
    mask_leaf, hidden = mask["leaf"], mask["hidden"]

    known: dict = {}             # the mask's flat values, read once
    tiles: dict = {}             # per tile view of the mask (each hook asks for it)

    def tile_of(leaf_tile_views: dict):
        """The mask's values for the tile's rows, [rows, sk], or None."""
        view = leaf_tile_views.get(mask_leaf)
        if view is None or view.rank != 2 or view.shape[1] != sk:
            return None
        if view not in tiles:
            if view.buffer not in known:
                known[view.buffer] = _constant_of(view.buffer)
            values = known[view.buffer]
            rows = np.arange(view.shape[0])[:, None] * view.strides[0]
            cols = np.arange(sk)[None, :] * view.strides[1]
            tiles[view] = None if values is None else values[view.offset + rows + cols]
        return tiles[view]

    def shown_of(tile):
        """Where the mask lets a row see a key."""
        return tile != -np.inf if hidden == "-inf" else (tile == 0 if hidden == "1" else
                                                         tile != 0)

    def width(leaf_tile_views: dict) -> int:
        tile = tile_of(leaf_tile_views)
        if tile is None:
            return sk
        seen = np.nonzero(shown_of(tile).any(axis=0))[0]
        last = int(seen[-1]) + 1 if seen.size else 0
        return min(sk, max(tk, -(-last // tk) * tk))

    def added_columns(leaf_tile_views: dict):
        # An added mask's 0 leaves a score as it is but for -0, which becomes +0: the same
        # to the max (either is the max, and x - max is 0 either way) and to the exp.
        tile = tile_of(leaf_tile_views)
        if tile is None or hidden != "-inf":
            return None
        nonzero = np.nonzero((tile != 0).any(axis=0))[0]
        return (mask_leaf, int(nonzero[0]), int(nonzero[-1]) + 1) if nonzero.size else \
            (mask_leaf, 0, 0)

    def rows_see_a_key(leaf_tile_views: dict) -> bool:
        tile = tile_of(leaf_tile_views)
        return tile is not None and bool(shown_of(tile).any(axis=1).all())

    return {"row_width": width, "mask_columns": added_columns,
            "rows_see_a_key": rows_see_a_key}


def _dead_key_state(op: ir.Operation, operands: list):
    """The state (see constant_mask_hooks) of op's result from its operands', or None."""
    name = op.name
    if name == "trn.convert":
        if not isinstance(U.element_type(op.results[0]), ir.FloatType) or \
                U.element_bytes(U.element_type(op.results[0])) < 2 or \
                isinstance(U.element_type(op.results[0]), ir.F16Type):
            return None          # (an fp16 or fp8 rounding may overflow a finite score)
        return operands[0]
    if name == "trn.tensor_scalar":
        kind, c = U.str_attr(op, "op"), U.float_attr(op, "scalar")
        reverse = ir.BoolAttr(op.attributes["reverse"]).value
        if operands[0] == "row":
            return "row"
        if kind in ("mul", "div") and c > 0 and math.isfinite(c) and not reverse:
            return operands[0]
        if kind in ("add", "sub") and math.isfinite(c) and operands[0] in ("finite", "neginf"):
            return operands[0]
        return None
    if name == "trn.activation":
        func = U.str_attr(op, "func")
        if operands[0] == "row":
            return "row"
        if func == "exp" and U.float_attr(op, "scale") > 0 and \
                math.isfinite(U.float_attr(op, "bias")):
            return {"neginf": "zero", "finite": "finite"}.get(operands[0])
        return None
    if name == "trn.reduce":
        kind = U.str_attr(op, "op")
        if (kind == "max" and operands[0] == "neginf") or \
                (kind == "add" and operands[0] == "zero"):
            return "row"
        return None
    if name == "trn.tensor_tensor":
        kind, (a, b) = U.str_attr(op, "op"), operands
        if a == "row" and b == "row":
            return "row"
        if kind == "add" and {a, b} <= {"finite", "neginf"}:
            return "neginf" if "neginf" in (a, b) else "finite"
        if kind == "sub" and b == "row" and a in ("finite", "neginf"):
            return a             # (-inf - max: -inf, or NaN in a row NaN throughout)
        if kind == "div" and b == "row" and a in ("finite", "zero"):
            return a             # (0 / sum: 0, the sum being at least 1, or NaN as above)
        return None
    if name == "trn.select":
        cond, on_true, on_false = operands
        if cond != "row":
            return None
        chosen = {"zero" if s == ("fill", 0.0) else s for s in (on_true, on_false)}
        return "zero" if chosen == {"zero"} else None
    return None


def _constant_of(buffer: ir.Value):
    """The flat values of an HBM constant (nisa.hbm_constant) as float64, or None."""
    from torchneuron.compiler.codegen.neff_writer import constant_array

    op = _hbm_constant(buffer)
    if op is None:
        return None
    try:
        return constant_array(op).astype(np.float64).reshape(-1)
    except CompileError:         # (a constant the program could not hold either)
        return None


def _hbm_constant(buffer: ir.Value) -> ir.Operation | None:
    """The nisa.hbm_constant defining `buffer`, or None."""
    owner = buffer.owner
    op = owner.operation if isinstance(owner, ir.OpView) else owner
    return op if isinstance(op, ir.Operation) and op.name == "nisa.hbm_constant" else None
