"""Epilogues: the elementwise ops that follow a matmul, convolution or pooling, applied to
each result tile while it is on chip (PSUM evacuation for PE results).

A binary op whose other operand is constant along the tile's free axes (a bias over output
features on partitions) reads it as a per-partition [P, 1] vector: an `add` followed by an
activation folds into the activation's bias (one ACT instruction reading PSUM), anything else
becomes a DVE tensor_scalar with a per-partition operand.
"""

from __future__ import annotations

from typing import Callable

from torch_mlir import ir

from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.kernels.elementwise import load_leaf
from torchneuron.compiler.kernels.emitter import Emitter, Tile
from torchneuron.compiler.kernels.tile_ops import (
    COMMUTATIVE, ConstantVectors, emit_elementwise, rounding_writes, widening_aliases,
)
from torchneuron.compiler.kernels.transfers import load_tile, store_tile
from torchneuron.compiler.kernels.views import HbmView

# SBUF per partition that operands broadcast across partitions, kept for every partition
# block, may take (1 / this of a partition).
BROADCAST_BUDGET_SHARE = 16

# Maps a view over the kernel's result shape to the part one tile covers: [P, free dims...].
Locate = Callable[[HbmView], HbmView]


class Epilogue:
    def __init__(self, em: Emitter, chain: list[ir.Operation], views: dict, product: ir.Value,
                 stored: set):
        """`stored`: the values the kernel writes back to HBM."""
        self.em, self.chain, self.views, self.product = em, chain, views, product
        self.storage, self.aliases = rounding_writes(chain, stored)
        self.aliases.update(widening_aliases(chain, stored))
        self.consts = ConstantVectors(em)
        self.vectors: dict[tuple, Tile] = {}
        self.broadcasts: dict[tuple, Tile] = {}
        self.broadcast_bytes = 0
        # Where set: an operand's part already on chip (the rows an earlier part of the kernel
        # loaded), or None to load it.
        self.given_part: Callable[[HbmView], Tile | None] | None = None

    def run(self, acc: Tile, locate: Locate, into: dict | None = None) -> dict:
        """Apply the chain to `acc` ([pn, fn], the part of the result `locate` maps views to);
        returns the tile of every value computed. `into`: tiles that the op computing a value
        writes, where the value's storage type is theirs (a caller assembling whole rows from
        several accumulators' columns)."""
        em = self.em
        pn, fn = acc.partitions, acc.free
        tiles: dict[ir.Value, Tile] = {self.product: acc}
        into = dict(into or {})
        # A value that only names another's tile (a rounding its producer writes already)
        # gets its tile from that producer.
        for value, tile in list(into.items()):
            source = self.aliases.get(value)
            while source is not None and source not in into:
                into[source] = tile
                source = self.aliases.get(source)

        def destination(result: ir.Value, etype: ir.Type) -> Tile:
            given = into.get(result)
            if given is not None and given.element_type == etype and \
                    (given.partitions, given.free) == (pn, fn):
                return given
            return em.alloc("sbuf", pn, fn, etype)
        # An activation's input -> (its source tile, scale: an immediate or a per-partition
        # tile, bias: a per-partition tile), where the steps computing it fold into it.
        folded: dict[ir.Value, tuple[Tile, float | Tile, Tile]] = {}
        done: set[ir.Operation] = set()     # computed together with the step before them
        for i, op in enumerate(self.chain):
            if op in done:
                continue
            result = op.results[0]
            if result in self.aliases:
                tiles[result] = self._operand_tile(self.aliases[result], locate, tiles)
                continue
            etype = self.storage.get(result, U.element_type(result))
            if op.name == "trn.tensor_tensor":
                step = self._step(op, tiles, locate)
                if step is not None:
                    chain_side, alu, vec, reverse = step
                    src = tiles[chain_side]
                    nxt = self.chain[i + 1] if i + 1 < len(self.chain) else None
                    if alu == "add" and _takes_bias(nxt, result):
                        folded[result] = (src, U.float_attr(nxt, "scale"), vec)
                        continue
                    second = self._second_step(nxt, result, etype, into, locate)
                    if second is not None:
                        done.add(nxt)
                        second_result = nxt.results[0]
                        alu1, vec1, reverse1 = second
                        after = self.chain[i + 2] if i + 2 < len(self.chain) else None
                        if alu == "mul" and alu1 == "add" and _takes_bias(after, second_result):
                            # x * s + b, then the activation: one ACT instruction.
                            folded[second_result] = (src, vec, vec1)
                            continue
                        # Two steps in one pass: (x op0 v0) op1 v1, the intermediate in fp32
                        # as the two instructions would have left it. x * s + b is also ACT's
                        # identity with a per-partition scale and bias (exact in fp32): there
                        # where ACT would finish it first.
                        dst = destination(second_result, self.storage.get(
                            second_result, U.element_type(second_result)))
                        if alu == "mul" and alu1 == "add" and not reverse and not reverse1 \
                                and em.sooner_engine({"dve": dst.free, "act": dst.free}) == "act":
                            em.activation(dst, src, "identity", vec, vec1)
                        else:
                            em.tensor_scalar(dst, src, alu, vec, reverse0=reverse, op1=alu1,
                                             operand1=vec1, reverse1=reverse1)
                        tiles[second_result] = dst
                        continue
                    dst = destination(result, etype)
                    em.tensor_scalar(dst, src, alu, vec, reverse0=reverse)
                    tiles[result] = dst
                    continue
            dst = destination(result, etype)
            if op.name == "trn.activation" and op.operands[0] in folded:
                src, scale, vec = folded[op.operands[0]]
                em.activation(dst, src, U.str_attr(op, "func"), scale, vec)
                tiles[result] = dst
                continue
            operands = [self._operand_tile(v, locate, tiles) for v in op.operands]
            if len(operands) == 2 and all(t.memory == "psum" for t in operands):
                staged = em.alloc("sbuf", pn, fn, operands[1].element_type)
                em.copy(staged, operands[1])
                operands[1] = staged
            emit_elementwise(em, op, operands, dst, self.consts, share=True)
            tiles[result] = dst
        return tiles

    def _step(self, op: ir.Operation, computed, locate: Locate
              ) -> tuple[ir.Value, str, Tile, bool] | None:
        """(operand computed on chip, ALU op, per-partition operand, reversed) of a binary op
        one of whose operands is among `computed` and the other constant along the tile's
        free axes."""
        per_partition = self._per_partition_operand(op, computed, locate)
        if per_partition is None:
            return None
        chain_side, other, other_is_lhs = per_partition
        alu = U.str_attr(op, "op")
        return (chain_side, alu, self._vector(other, locate),
                other_is_lhs and alu not in COMMUTATIVE)

    def _second_step(self, op: ir.Operation | None, first: ir.Value, first_type: ir.Type,
                     into: dict, locate: Locate) -> tuple[str, Tile, bool] | None:
        """(ALU op, per-partition operand, reversed) of `op` where it is a step reading
        `first` (a step's fp32 result that nothing else reads, written nowhere), so that the
        two make one instruction."""
        if op is None or op.name != "trn.tensor_tensor" or first in into or \
                first in self.aliases or first_type != ir.F32Type.get() or \
                len(list(first.uses)) != 1:
            return None
        step = self._step(op, (first,), locate)
        return None if step is None else step[1:]

    def _vector(self, value: ir.Value, locate: Locate) -> Tile:
        """A per-partition operand [pn, 1], loaded once per part of HBM it reads (a
        convolution's per-channel vector: once per channel block, not per output tile)."""
        view = locate(self.views[value])
        column = view
        for dim in range(1, view.rank):
            column = column.slice(dim, 0, 1)
        key = (value, column.offset, column.shape, column.strides)
        tile = self.vectors.get(key)
        if tile is None:
            pn = view.shape[0]
            tile = self.em.alloc("sbuf", pn, 1, ir.F32Type.get())
            if view.element_type == tile.element_type:
                self.em.load(tile, column, 0, list(range(1, column.rank)))
            else:
                staged = load_leaf(self.em, column)
                self.em.copy(tile, staged)
            self.vectors[key] = tile
        return tile

    def _per_partition_operand(self, op: ir.Operation, computed, locate: Locate):
        """(chain operand, other operand, other-is-lhs) when one operand of a binary op is
        among `computed` (values computed on chip) and the other is a view constant along
        the tile's free axes."""
        lhs, rhs = op.operands
        for chain_side, other, other_is_lhs in ((lhs, rhs, False), (rhs, lhs, True)):
            view = self.views.get(other)
            if chain_side in computed and view is not None and view.buffer is not None \
                    and all(st == 0 for st in locate(view).strides[1:]):
                return chain_side, other, other_is_lhs
        return None

    def _operand_tile(self, value: ir.Value, locate: Locate, tiles: dict) -> Tile:
        if value in tiles:
            return tiles[value]
        view = self.views.get(value)
        if view is None:
            raise CompileError("epilogue operand is neither computed in the kernel nor in HBM")
        part = locate(view)
        # The same for every partition (a bias over output features along the free axis): the
        # tile is the same for every partition block, so it is loaded once per free range.
        key = (value, part.offset, part.shape, part.strides) \
            if part.buffer is not None and part.strides[0] == 0 else None
        tile = self.broadcasts.get(key) if key is not None else None
        if tile is None and key is None and self.given_part is not None:
            tile = self.given_part(part)
            if tile is not None:
                tiles[value] = tile
                return tile
        if tile is None:
            if part.rank == 2 and part.buffer is not None:
                tile = load_tile(self.em, part, view.element_type)
            else:
                tile = load_leaf(self.em, part)
            size = tile.free * U.element_bytes(tile.element_type)
            if key is not None and self.broadcast_bytes + size <= \
                    self.em.target.sbuf_partition_bytes // BROADCAST_BUDGET_SHARE:
                self.broadcasts[key] = tile
                self.broadcast_bytes += size
        tiles[value] = tile
        return tile


def store_accumulators(em: Emitter, epilogue: Epilogue, accs: dict, value: ir.Value,
                       out: HbmView) -> None:
    """Run `epilogue` on each PSUM accumulator of `accs` ({(row, column): tile} of a 2-D
    result whose tiles start there) and store its `value` to the same part of `out`."""
    for (r0, c0), acc in accs.items():
        rn, cn = acc.partitions, acc.free
        results = epilogue.run(acc, lambda view, r0=r0, rn=rn, c0=c0, cn=cn:
                               view.slice(0, r0, rn).slice(1, c0, cn))
        store_tile(em, out.slice(0, r0, rn).slice(1, c0, cn), results[value])


def _takes_bias(op: ir.Operation | None, value: ir.Value) -> bool:
    """`op` is an activation of `value` that can absorb a per-partition bias."""
    return (op is not None and op.name == "trn.activation" and op.operands[0] == value
            and U.float_attr(op, "bias") == 0.0 and U.float_attr(op, "scale") == 1.0
            and len(list(value.uses)) == 1)
