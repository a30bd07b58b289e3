"""The chained-matmul kernel (kind "mlp"): Y = f(X @ A) @ B + epilogue, with the hidden
activation f(X @ A) [tokens, hidden] never leaving the chip (trn-fuse's `mlp` groups: a
Linear - activation - Linear block). The same plan computes the producer of an mlp_rows
kernel (an mlp whose output a row-wise kernel reads on chip) and, with one matmul, of a
linear_rows kernel (`lower_mlp_rows`).

Both weight operands stay resident in SBUF (loaded, and transposed on PE where stored
transposed, once); the tokens go by in blocks of `tokens_per_block` (the PSUM that block's
output accumulators take). For each block and each 128-row chunk j of the hidden dim:
- H^T_j [128 hidden, block] = A[:, j]^T X_block^T accumulates over K-tiles of X's features
  (hidden on partitions, "nm"), and the first epilogue (bias per hidden unit on ACT's bias
  port, the activation) evacuates it into SBUF, rounded as the graph rounds it;
- every output tile [128 tokens, <= 512 features] of the block accumulates H^T_j's columns
  against B's rows j ("mn": K = hidden on partitions).
After the last chunk, the second epilogue evacuates each output tile and it is stored. The
PE does the two matmuls' work and transposes of X and, once, of the weights; DMA moves X,
the weights and Y once.

Where the output accumulators leave PSUM room for the first matmul's at a wider span of
tokens (`hidden_tokens_per_block`: 512 where the output block is 256, an MLP's 1024
features taking half of PSUM), H^T_j is computed for that span at once and kept in SBUF:
the block that computes it reads its own columns, the next block of the span reads the rest
without computing anything again. The first matmul then streams 512 columns per
instruction, not 256: half its instructions (and their evacuations) for the same products,
each summed in the same order.
"""

from __future__ import annotations

import contextlib
import math
from typing import Callable

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.kernels.emitter import Emitter, Tile
from torchneuron.compiler.kernels.epilogue import Epilogue, store_accumulators
from torchneuron.compiler.kernels.matmul import _Staged, matmul_element_type
from torchneuron.compiler.kernels.rows import lower_rows
from torchneuron.compiler.kernels.transfers import store_tile
from torchneuron.compiler.kernels.tile_ops import VIEW_OPS
from torchneuron.compiler.kernels.views import HbmView, row_major_strides, storage_less_view

# PSUM kept for the first matmul's accumulators (two, so one evacuates while PE fills the
# next); the rest holds a token block's output tiles.
_FIRST_ACCUMULATORS = 2


# Token blocks a kernel should have at least: its first block starts once the rows it needs
# are in, while the kernel that produces them still writes the rest, and its last block's
# stores overlap the next kernel likewise.
_MIN_BLOCKS = 4


def tokens_per_block(target, tokens: int, features: int) -> int | None:
    """The token block (512, 256 or 128 rows) for the kernel: among those whose output tiles
    [128, <= 512] fp32 and the first matmul's accumulators fit PSUM, the largest that still
    makes `_MIN_BLOCKS` blocks, else the smallest that fits; None when not even 128 rows
    fit. Larger blocks are fewer, longer instructions (at 128 rows the MLP forward over
    2048 tokens measured 10% slower than at its largest block), but a block starts only
    once all its rows of the input are written: GPT-2's MLPs over 512 tokens, in two
    blocks, waited for most of their layer norm, which waited for the attention output
    projection (dumped graph: 2721.4 us; in four blocks of 128, 2658.4 us, the same bits)."""
    padded = -(-tokens // target.pe_cols) * target.pe_cols
    fitting = []
    for block in (512, 256, 128):
        block = min(block, padded)
        if _fits_psum(target, block, features, block) and block not in fitting:
            fitting.append(block)
    for block in fitting:
        if -(-tokens // block) >= _MIN_BLOCKS:
            return block
    return fitting[-1] if fitting else None


def hidden_tokens_per_block(target, tokens: int, block: int, out_features: int,
                            hidden: int, spare_sbuf: int, itemsize: int) -> int:
    """The span of tokens whose hidden activation H^T [hidden, span] one pass of the first
    matmul computes, for output blocks of `block` tokens: twice the block where the first
    matmul's accumulators at that width fit PSUM beside the block's output tiles, the span
    still makes `_MIN_BLOCKS` spans (the reason the block is not wider), its 512 columns
    fit one matmul, and H^T for it (`itemsize` bytes per element) takes at most
    `spare_sbuf` bytes per partition; else the block itself."""
    wide = 2 * block
    h_bytes = -(-hidden // target.pe_cols) * wide * itemsize
    if wide > target.matmul_max_moving or -(-tokens // wide) < _MIN_BLOCKS or \
            not _fits_psum(target, block, out_features, wide) or h_bytes > spare_sbuf:
        return block
    return wide


def _fits_psum(target, block: int, features: int, first_tokens: int) -> bool:
    """Whether a token block's output tiles [128, <= 512] fp32 over `features` and the first
    matmul's accumulators over `first_tokens` tokens fit PSUM, a bank's worth left for the
    PE transposes that stage X and the weights."""
    chunks = -(-features // target.matmul_max_moving)
    outputs = -(-block // target.pe_cols) * chunks * target.matmul_max_moving * 4
    return outputs + _FIRST_ACCUMULATORS * first_tokens * 4 <= \
        target.psum_partition_bytes - target.psum_bank_bytes


# The share of SBUF an mlp kernel's resident weights and a span's hidden activation
# (`hidden_tokens_per_block`) may take together: the rest holds the block's staging of X,
# its evacuated outputs and the epilogues' operands.
HIDDEN_SPAN_SBUF_SHARE = 0.8


def resident_bytes(target, features: int, hidden: int, out_features: int,
                   itemsize: int) -> int:
    """SBUF bytes per partition the two resident weights take: A as K-tiles [128 features,
    hidden] and B as K-tiles [128 hidden, out features]."""
    tiles = lambda n: -(-n // target.pe_rows)       # noqa: E731
    return itemsize * (tiles(features) * hidden + tiles(hidden) * out_features)


class _Mlp:
    """An mlp kernel's plan: its resident weights, epilogues and token blocks; `block`
    computes one block's output accumulators. With one matmul (a linear_rows kernel's
    Linear), the staged X^T takes the hidden activation's place: Y = X @ B + epilogue."""

    def __init__(self, em: Emitter, compute: list[ir.Operation], views: dict,
                 yielded: ir.Value, matmul_count: int = 2, also: tuple = ()):
        """`compute`: the kernel's ops but views, sources and trn.yield (those are in
        `views`); `yielded`: the value the kernel yields; `matmul_count`: 2 for an mlp, 1
        for a Linear; `also`: values of the second epilogue stored too (rounded to their
        types, as the kernel yields them)."""
        target = em.target
        matmuls = [op for op in compute if op.name == "trn.matmul"]
        if len(matmuls) != matmul_count:
            raise CompileError("an mlp kernel holds two matmuls" if matmul_count == 2 else
                               "a linear_rows kernel holds one matmul", compute[-1].location)
        first, second = matmuls if matmul_count == 2 else (None, matmuls[0])
        self.em, self.first, self.second = em, first, second
        self.hidden_value = second.operands[0]
        position = {op: i for i, op in enumerate(compute)}
        # (A Linear's epilogue also holds the producers merged ahead of its matmul: a
        # backward's GELU derivative, multiplied into the gradient it computes.)
        chain2 = compute[position[second] + 1:] if first is not None else \
            [op for op in compute if op is not second]
        x, b = views.get((first or second).operands[0]), views.get(second.operands[1])
        a = views.get(first.operands[1]) if first is not None else None
        if x is None or b is None or (first is not None and a is None) or x.rank != 2:
            raise CompileError("mlp kernel operands must come from HBM",
                               (first or second).location)
        self.x = x
        self.tokens, features = x.shape
        # First token -> X's rows [128 tokens, all features] as X^T's staging loaded them
        # (to turn on PE), kept for an mlp_rows kernel's rows that read the same rows.
        self.x_rows: dict[int, Tile] = {}
        self.out_features = b.shape[1]
        self.etype2 = matmul_element_type(U.element_type(self.hidden_value), b.element_type)
        etype1 = matmul_element_type(x.element_type, a.element_type) if first is not None \
            else self.etype2
        hidden = a.shape[1] if first is not None else features
        self.block_tokens = tokens_per_block(target, self.tokens, self.out_features)
        if self.block_tokens is None:
            raise CompileError("mlp kernel: its output tiles do not fit PSUM", second.location)
        tp, tf, tk = target.pe_cols, target.matmul_max_moving, target.pe_rows
        self.tp = tp
        self.x_t = _Staged(em, x.transpose([1, 0]), etype1)            # [features, tokens]
        self.a_res = _Staged(em, a, etype1, row_panels=True) \
            if first is not None else None                             # [features, hidden]
        self.b_res = _Staged(em, b, self.etype2, row_panels=True)      # [hidden, out features]
        self.k1 = [(k0, min(tk, features - k0)) for k0 in range(0, features, tk)]
        # (A Linear's K-tiles are its features', as X^T's staging cuts them.)
        self.j_tiles = [(j0, min(tp if first is not None else tk, hidden - j0))
                        for j0 in range(0, hidden, tp if first is not None else tk)]
        self.n_tiles = [(n0, min(tf, self.out_features - n0))
                        for n0 in range(0, self.out_features, tf)]
        self.epilogue1 = Epilogue(em, compute[position[first] + 1:position[second]], views,
                                  first.results[0], set()) if first is not None else None
        self.epilogue2 = Epilogue(em, chain2, views, second.results[0], {yielded, *also})
        self.hidden_block = self.block_tokens
        if first is not None and em.hidden_spans:
            itemsize = U.element_bytes(self.etype2)
            spare = int(target.sbuf_partition_bytes * HIDDEN_SPAN_SBUF_SHARE) - resident_bytes(
                target, features, hidden, self.out_features, max(
                    itemsize, U.element_bytes(etype1)))
            self.hidden_block = hidden_tokens_per_block(
                target, self.tokens, self.block_tokens, self.out_features, hidden, spare,
                itemsize)
        # The span (first token, tokens) whose H^T_j tiles `hidden_tiles` holds, by j0.
        self.hidden_span: tuple[int, int] | None = None
        self.hidden_tiles: dict[int, Tile] = {}

    def blocks(self):
        """(first token, tokens) of each token block."""
        for t0 in range(0, self.tokens, self.block_tokens):
            yield t0, min(self.block_tokens, self.tokens - t0)

    def block(self, t0: int, tn: int) -> dict:
        """The output accumulators {(first token, first feature): PSUM tile} of the tokens
        [t0, t0 + tn), their second matmul summed over every hidden chunk."""
        em, tp = self.em, self.tp
        a_res, b_res, x_t = self.a_res, self.b_res, self.x_t
        rows = [(r0, min(tp, t0 + tn - r0)) for r0 in range(t0, t0 + tn, tp)]
        accs = {(r0, n0): em.alloc("psum", rn, nn, ir.F32Type.get())
                for r0, rn in rows for n0, nn in self.n_tiles}
        span = self._hidden_span(t0, tn)
        computed = self.hidden_tiles if span == self.hidden_span else None
        if computed is None and self.first is not None:
            self.hidden_span, self.hidden_tiles = span, {}
        s0, sn = span
        for j0, jn in self.j_tiles:
            if self.first is None:
                h_t = x_t.tile(j0, jn, t0, tn)                       # [features j, tokens]
            elif computed is not None:
                h_t = computed[j0]
            else:
                acc = em.alloc("psum", jn, sn, ir.F32Type.get())
                for k0, kn in self.k1:
                    em.matmul(acc, a_res.tile(k0, kn, j0, jn), x_t.tile(k0, kn, s0, sn),
                              accumulate=k0 > 0)
                a_res.panels.clear()          # A's tiles stay; the rows they came from go
                tiles = self.epilogue1.run(acc, lambda view, j0=j0, jn=jn, s0=s0, sn=sn:
                                           view.transpose([1, 0]).slice(0, j0, jn)
                                           .slice(1, s0, sn))
                h_t = em.in_sbuf(tiles[self.hidden_value], self.etype2)  # [hidden j, span]
                self.hidden_tiles[j0] = h_t
            first_column = t0 if self.first is None else s0
            for r0, rn in rows:
                for n0, nn in self.n_tiles:
                    em.matmul(accs[(r0, n0)], h_t.columns(r0 - first_column, rn),
                              b_res.tile(j0, jn, n0, nn), accumulate=j0 > 0)
            if (j0 + jn) % b_res.panel_k == 0:    # B's row panels hold panel_k hidden units
                b_res.panels.clear()
        self._release_staging()
        return accs

    def _hidden_span(self, t0: int, tn: int) -> tuple[int, int]:
        """The span of tokens whose H^T the block [t0, t0 + tn) reads: the block itself
        where spans are not wider, where the kernel runs beside another (trn-order's
        co-run: each has only its part of PSUM), and where an earlier part of the kernel
        computes X's rows on chip: a span's first matmul waits for all of its rows, which
        such a part computes one after another (the BERT layer's FFN after its attention
        and norm, in spans of 512: 548.0 -> 554.3 us)."""
        width = self.hidden_block
        if width == self.block_tokens or self.em.co_run is not None or self.x_t.given_rows:
            return t0, tn
        s0 = t0 - t0 % width
        return s0, min(width, self.tokens - s0)

    def output_tiles(self, t0: int, tn: int):
        """A Linear's output tiles of the tokens [t0, t0 + tn), each summed over every K-tile
        before the next is begun: (first token, tokens, first feature, features, PSUM
        tile), column tile by column tile. PSUM then holds one output tile at a time where
        `block` holds the block's whole width (a QKV projection's 2304 features: 4.5 of
        PSUM's 8 banks). The same matmuls, each output tile's in the same order."""
        em, tp, x_t, b_res = self.em, self.tp, self.x_t, self.b_res
        rows = [(r0, min(tp, t0 + tn - r0)) for r0 in range(t0, t0 + tn, tp)]
        for n0, nn in self.n_tiles:
            for r0, rn in rows:
                acc = em.alloc("psum", rn, nn, ir.F32Type.get())
                for j0, jn in self.j_tiles:
                    em.matmul(acc, x_t.tile(j0, jn, t0, tn).columns(r0 - t0, rn),
                              b_res.tile(j0, jn, n0, nn), accumulate=j0 > 0)
                yield r0, rn, n0, nn, acc
        self._release_staging()

    def _release_staging(self) -> None:
        """Drop the block's X^T staging, keeping the row panels of X it loaded whole
        (`x_rows`)."""
        x_t = self.x_t
        features = x_t.view.shape[0]
        for (c0, cn, k_start), panel in x_t.panels.items():
            if k_start == 0 and panel.free == features:
                self.x_rows[c0] = panel
        x_t.release()


class RowTiles:
    """An mlp's (or a Linear's) output [tokens, features] as whole-row SBUF tiles of 128
    tokens, for a part of the same kernel that reads it on chip: the first ask for a token
    computes its token block (`_Mlp.block`), and the block's output tiles are evacuated
    through the second epilogue into row tiles in the output's type."""

    def __init__(self, mlp: _Mlp, value: ir.Value, location: ir.Location | None = None,
                 tile_by_tile: bool = False):
        """`location`: the instructions' location, where it is not the enclosing one (a
        part of a merged kernel computed while another part is lowered); `tile_by_tile`: a
        Linear's output tiles are computed and evacuated one at a time (`_Mlp.output_tiles`),
        not a token block's at once."""
        self.mlp, self.value, self.location = mlp, value, location
        self.tile_by_tile = tile_by_tile and mlp.first is None
        # The co-run pair and role its on-chip tiles take (Emitter.co_run), where another part
        # of the kernel runs beside its computation in a part of SBUF and PSUM of its own.
        self.co_run: tuple[int, str] | None = None
        self.value_type = U.element_type(value)
        self.tiles: dict[int, Tile] = {}         # first token -> its evacuated row tile
        # Values of the epilogue stored as each output tile is evacuated: {value: view of its
        # destination [tokens, features]} (a training step's saved pre-activation).
        self.chunk_stores: dict[ir.Value, HbmView] = {}
        # Called with (first token, row tile) as each row tile is evacuated: stores of parts
        # of the value a training step saves (`store_rows_of`).
        self.on_row_tile: list[Callable[[int, Tile], None]] = []

    def input_rows(self, view: HbmView) -> Tile | None:
        """The tile the mlp's X^T staging loaded for these rows of its input X, where `view`
        is whole 128-token rows of X (a post-norm block's residual: its FFN reads the norm's
        output X and adds X back), so that they are loaded once; None otherwise."""
        flat = view.reshape((view.shape[0], math.prod(view.shape[1:]))) \
            if view.buffer is not None else None
        at = self._input_at(flat)
        if at is None or at[1]:
            return None
        self.of(at[0])          # (the block's staging loads X's rows)
        tile = self.mlp.x_rows.get(at[0])
        return tile if tile is not None and tile.partitions == view.shape[0] else None

    def input_part(self, view: HbmView) -> Tile | None:
        """The part of the rows of the mlp's input X that its X^T staging loaded, where
        `view` is rows of 128-token tiles already computed, any run of columns (a second
        Linear's residual that is the first's input: the part is not loaded again); None
        otherwise."""
        at = self._input_at(view)
        if at is None:
            return None
        (t0, c0), (rows, columns) = at, view.shape
        tile = self.mlp.x_rows.get(t0)
        if tile is None or tile.partitions != rows or c0 + columns > tile.free:
            return None
        return tile.columns(c0, columns)

    def _input_at(self, view: HbmView | None) -> tuple[int, int] | None:
        """(first token, first column) where `view` [rows, columns] is those rows and
        columns of the mlp's input X, its first row starting a 128-token tile; else None."""
        mlp, x = self.mlp, self.mlp.x
        if view is None or view.rank != 2 or view.buffer is None or x.buffer is None or \
                view.buffer != x.buffer or x.strides[0] <= 0:
            return None
        t0, c0 = divmod(view.offset - x.offset, x.strides[0])
        rows, columns = view.shape
        if t0 % mlp.tp or not 0 <= t0 < mlp.tokens or \
                view != x.slice(0, t0, min(rows, mlp.tokens - t0)).slice(1, c0, columns):
            return None
        return t0, c0

    def of(self, t0: int) -> Tile:
        """The row tile of the 128 tokens from t0 (a multiple of 128)."""
        if t0 not in self.tiles:
            mlp = self.mlp
            b0 = t0 - t0 % mlp.block_tokens
            outer = mlp.em.co_run
            if self.co_run is not None:
                mlp.em.co_run = self.co_run
            try:
                with self.location or contextlib.nullcontext():
                    self._evacuate(b0, min(mlp.block_tokens, mlp.tokens - b0))
            finally:
                mlp.em.co_run = outer
        return self.tiles[t0]

    def _evacuate(self, t0: int, tn: int) -> None:
        mlp, em = self.mlp, self.mlp.em
        if self.tile_by_tile:
            tiles = mlp.output_tiles(t0, tn)
        else:
            accs = mlp.block(t0, tn)
            tiles = ((r0, min(mlp.tp, t0 + tn - r0), n0, nn, accs[(r0, n0)])
                     for r0 in range(t0, t0 + tn, mlp.tp) for n0, nn in mlp.n_tiles)
        last = mlp.n_tiles[-1][0]
        row_tiles: dict[int, Tile] = {}
        for r0, rn, n0, nn, acc in tiles:
            row_tile = row_tiles.get(r0)
            if row_tile is None:
                row_tile = row_tiles[r0] = em.alloc("sbuf", rn, mlp.out_features,
                                                    self.value_type)
            columns = row_tile.columns(n0, nn)
            results = mlp.epilogue2.run(
                acc, lambda view, r0=r0, rn=rn, n0=n0, nn=nn:
                    view.slice(0, r0, rn).slice(1, n0, nn),
                into={self.value: columns})
            if results[self.value] is not columns:
                em.copy(columns, results[self.value])
            for value, dest in self.chunk_stores.items():
                store_tile(em, dest.slice(0, r0, rn).slice(1, n0, nn), results[value])
            if n0 == last:
                self.tiles[r0] = row_tile
                for store in self.on_row_tile:
                    store(r0, row_tile)

    def all_rows(self) -> None:
        """Evacuate every row tile not asked for yet (their `on_row_tile` stores then run)."""
        for t0 in range(0, self.mlp.tokens, self.mlp.tp):
            self.of(t0)


def store_rows_of(em: Emitter, view: HbmView, dest: HbmView, features: int
                  ) -> Callable[[int, Tile], None] | None:
    """A function of (first token, row tile) that stores, from a row tile of a value
    [tokens, features] computed 128 tokens at a time, its elements that `view` (a view of
    the value) holds into `dest` (a view of `view`'s shape): where `view`, its dims ordered
    by stride, is whole token rows (its leading dims, row-major with the innermost a row
    apart) of a run of columns (its other dims, row-major and contiguous) -- Q or V of all
    heads, as [B, H, S, D] of a QKV projection's [B * S, 3 * H * D] rows -- each row tile
    stores [rows, that run] into `dest` in one transfer; None otherwise."""
    order = sorted(range(view.rank), key=lambda d: -view.strides[d])
    v, d = view.transpose(order), dest.transpose(order)
    k = sum(1 for st in v.strides if st >= features)
    if not 0 < k < v.rank or v.strides[k - 1] != features or v.strides[-1] != 1 or any(
            v.strides[i] != v.strides[i + 1] * v.shape[i + 1]
            for i in range(v.rank - 1) if i != k - 1):
        return None
    token0, col0 = divmod(v.offset, features)
    width, tokens, inner = math.prod(v.shape[k:]), math.prod(v.shape[:k]), v.shape[k - 1]
    if col0 + width > features:
        return None

    def store(r0: int, tile: Tile) -> None:
        t = r0 - token0
        if not 0 <= t < tokens:
            return
        outer, s0 = divmod(t, inner)
        if s0 + tile.partitions > inner:
            raise CompileError(f"a row tile of tokens {r0}..{r0 + tile.partitions} spans two "
                               f"runs of {inner} tokens of a saved view")
        rows = d
        for dim in reversed(range(k - 1)):
            outer, i = divmod(outer, d.shape[dim])
            rows = rows.select(dim, i)
        rows = rows.slice(0, s0, tile.partitions)
        em.store(rows, 0, list(range(1, rows.rank)),
                 em.in_sbuf(tile.columns(col0, width), rows.element_type))
    return store


class ComputedRows:
    """Rows of a 2-D view of a `RowTiles` value [tokens, features], as a `_Staged` operand
    takes them (`given_rows`): row r is the row tile of token `token0` + r, its columns
    [col0, col0 + width). A view that runs along the tokens (rows) reads them so; a
    transposed one [width features, tokens] turns them on PE, as it turns loaded rows."""

    def __init__(self, rows: RowTiles, view: HbmView):
        features = rows.mlp.out_features
        self.rows = rows
        self.token0, self.col0 = divmod(view.offset, features)
        if len(view.shape) != 2 or view.strides not in ((features, 1), (1, features)):
            raise CompileError(f"a view {view.shape} with strides {view.strides} of a value "
                               f"computed as [tokens, {features}] rows")
        if view.strides == (1, features):       # [width features, tokens]
            self.width, tokens = view.shape
        else:                                   # [tokens, width features]
            tokens, self.width = view.shape
        if self.col0 + self.width > features or self.token0 % rows.mlp.tp or \
                self.token0 + tokens > rows.mlp.tokens:
            raise CompileError(f"a view of tokens {self.token0}..{self.token0 + tokens}, "
                               f"columns {self.col0}..{self.col0 + self.width} of a value "
                               "computed as 128-token row tiles")

    def get(self, r: int) -> Tile | None:
        token = self.token0 + r
        if token % self.rows.mlp.tp:
            return None
        return self.rows.of(token).columns(self.col0, self.width)


def lower_mlp(em: Emitter, compute: list[ir.Operation], views: dict,
              output: tuple[ir.Value, HbmView],
              given_x_rows: dict[int, Tile] | None = None,
              given_part: Callable[[HbmView], Tile | None] | None = None) -> None:
    """`compute`: the kernel's ops but views, sources and trn.yield (those are in `views`);
    `output`: (yielded value, destination view); `given_x_rows`: X's row tiles [128 tokens,
    features] by first token, computed on chip by a part of the kernel in front (a pre-norm
    FFN's norm), which X^T's staging turns on PE instead of loading them; `given_part`: the
    second epilogue's Epilogue.given_part (that part's loaded rows, for a residual)."""
    yielded, out = output
    mlp = _Mlp(em, compute, views, yielded)
    if given_x_rows is not None:
        mlp.x_t.given_rows = given_x_rows
    mlp.epilogue2.given_part = given_part
    for t0, tn in mlp.blocks():
        store_accumulators(em, mlp.epilogue2, mlp.block(t0, tn), yielded, out)


def lower_mlp_saved(em: Emitter, first: list[ir.Operation], second: list[ir.Operation],
                    views: dict, hidden: ir.Value, outputs: list[tuple[ir.Value, HbmView]],
                    first_location: ir.Location | None = None,
                    hidden_read: Callable[[RowTiles], None] | None = None) -> None:
    """An mlp_saved kernel (trn-fuse mlp-saved): a Linear `first` (ops but views, sources and
    trn.yield; those are in `views`) computing `hidden` [tokens, hidden features] and
    values on the way, whose rows a second Linear `second` reads as its input X (`views`
    holds a storage-less view of `hidden`, which the second's views derive from). `outputs`:
    (value, destination view) of the kernel's results -- the second Linear's result, then
    `hidden` and values of the first's epilogue that a training step saves.

    The first Linear's rows are computed 128 tokens at a time, as an mlp_rows kernel's
    producer (`RowTiles`, its weight resident); each row tile of `hidden` is stored whole
    and the other saved values tile by tile as they are evacuated. The second Linear (its
    weight resident too) turns `hidden`'s row tiles on PE where it would have loaded them:
    `hidden` is not read back from HBM.

    With `hidden_read` (trn-fuse mlp-saved-gradient), `hidden` is not stored and every row
    tile of it stays on chip: all are computed first (the first Linear's resident weight is
    then free before the second's is loaded), the second Linear turns them, and last
    `hidden_read(rows)` lowers the part of the kernel that reads them all (the first Linear's
    weight gradient), so that the second Linear's result, which the kernels after this one
    wait for, is not held up by it."""
    (value, out), saved = outputs[0], dict(outputs[1:])
    if hidden not in saved and hidden_read is None:
        raise CompileError("an mlp_saved kernel stores the first Linear's result",
                           first[-1].location)
    rows = RowTiles(_Mlp(em, first, views, hidden, 1,
                         also=tuple(v for v in saved if v != hidden)), hidden, first_location)
    rows.chunk_stores = {v: dest for v, dest in saved.items() if v != hidden}
    if hidden in saved:
        whole = store_rows_of(em, views[hidden], saved[hidden], U.shape(hidden)[1])
        if whole is None:
            raise CompileError("an mlp_saved kernel's first Linear yields its result as whole "
                               "token rows", first[-1].location)
        rows.on_row_tile.append(whole)
    mlp = _Mlp(em, second, views, value, 1)
    mlp.x_t.given_rows = ComputedRows(rows, mlp.x_t.view)
    # A residual that is the first Linear's input (a post-norm FFN's, or its backward's
    # gradient of it) is read from the rows the first loaded.
    mlp.epilogue2.given_part = rows.input_part
    if hidden_read is not None:
        rows.all_rows()
    for t0, tn in mlp.blocks():
        store_accumulators(em, mlp.epilogue2, mlp.block(t0, tn), value, out)
    rows.all_rows()
    if hidden_read is not None:
        hidden_read(rows)


def lower_mlp_rows(em: Emitter, compute: list[ir.Operation], views: dict,
                   mlp_value: ir.Value, rows_body: list[ir.Operation],
                   view_of: Callable[[ir.Operation, HbmView], HbmView],
                   output: tuple[ir.Value, HbmView], matmuls: int = 2,
                   given_x_rows: dict[int, Tile] | None = None,
                   given_x: ir.Value | None = None,
                   consume: Callable[[Tile, HbmView, Tile | None], None] | None = None,
                   input_rows_of: tuple["RowTiles", ...] = ()) -> None:
    """An mlp_rows kernel (trn-fuse; with `matmuls` = 1, a linear_rows kernel, its producer
    one Linear): the producer part `compute` (as for `lower_mlp`) computes `mlp_value`
    [tokens, features], which the row-wise part `rows_body` (trn.yield left out) reads,
    directly or through reshapes, with rows of `features`. The rows' lowering
    asks for each row tile's values (kernels/rows.py `produce`); the first ask within a
    token block computes the block, and its output tiles are evacuated, through the mlp's
    second epilogue, into whole-row SBUF tiles of 128 tokens, handed to the rows as they
    ask: `mlp_value` never reaches HBM. `output`: (yielded value, destination view).
    `given_x_rows`: the rows of the input X [tokens, features] as SBUF tiles computed on
    chip by an earlier part of the kernel, by first token (an attention's output, a layer
    norm's: trn-fuse-attention-output), turned on PE where they would have been loaded;
    `given_x`, the value they hold, where the rows read it too (a post-norm FFN's residual):
    its row tiles are those. `consume(tile, view, divisor)`: where given, the rows' result
    tiles go to it instead of being stored (`lower_rows`). `input_rows_of`: other producers
    of the kernel whose loaded input rows the rows may read (`RowTiles.input_rows`)."""
    mlp = _Mlp(em, compute, views, mlp_value, matmuls)
    if given_x_rows:
        mlp.x_t.given_rows = given_x_rows
    given_values = {given_x} if given_x is not None and given_x_rows else set()
    for op in rows_body:
        if op.name == "trn.reshape" and op.operands[0] in given_values:
            given_values.add(op.results[0])
    tokens, features = mlp.tokens, mlp.out_features
    rows_views = dict(views)
    # A storage-less row-major view of the mlp's output: the rows' lowering derives its
    # tiles' views from it, and `produce` locates their tokens by their offset.
    rows_views[mlp_value] = storage_less_view(mlp_value)
    kind, producer = ("an mlp_rows", "mlp") if matmuls == 2 else ("a linear_rows", "Linear")
    leaves = {mlp_value}
    for op in rows_body:
        if op.name in VIEW_OPS and op.operands[0] in leaves:
            # Only reshapes keep its row tiles whole rows one after another: another view
            # would have the rows' lowering load the storage-less view (trn-fuse rules it out).
            if op.name != "trn.reshape":
                raise CompileError(f"{kind} kernel's rows read the {producer}'s output "
                                   f"only as it is or reshaped, not through '{op.name}'",
                                   op.location)
            leaves.add(op.results[0])
    row_tiles = RowTiles(mlp, mlp_value)

    def whole_rows(view: HbmView, width: int, what: str) -> int:
        """The first token of a row tile's view of a [tokens, `width`] value; a CompileError
        unless it is whole 128-token rows, one after another (a tile whose rows were strided
        would take other tokens' values from the tile held for them)."""
        t0, column = divmod(view.offset, width)
        rows = math.prod(view.shape[:-1])
        if column or view.shape[-1] != width or t0 % mlp.tp or \
                (rows != mlp.tp and t0 + rows != tokens) or \
                any(stride != expected for size, stride, expected in
                    zip(view.shape, view.strides, row_major_strides(tuple(view.shape)))
                    if size > 1):
            raise CompileError(f"{kind} kernel's row tile is not whole 128-token rows of "
                               f"{what}", mlp.second.location)
        return t0

    def produce(value: ir.Value, view: HbmView, scale: float | None = None):
        if scale is not None:
            return None
        if value in given_values:
            given = given_x_rows.get(whole_rows(view, mlp.x.shape[1], "its input"))
            if given is None or given.partitions != math.prod(view.shape[:-1]):
                raise CompileError(f"{kind} kernel's input rows are not the row tiles computed "
                                   "on chip for it", mlp.second.location)
            return given
        if value not in leaves:
            # Rows of an input some part of the kernel loaded (the mlp's X, or the QKV
            # projection's for the first residual of an encoder layer), else loaded here.
            return next((tile for tile in (rows.input_rows(view)
                                           for rows in (row_tiles, *input_rows_of))
                         if tile is not None), None)
        return row_tiles.of(whole_rows(view, features, f"the {producer}'s output"))

    lower_rows(em, rows_body, rows_views, view_of, output, produce, consume)
