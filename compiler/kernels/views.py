"""Strided views of HBM buffers: how trn's view ops (transpose, broadcast, reshape) fold into
DMA access patterns instead of costing instructions."""

from __future__ import annotations

import dataclasses
import math

from torch_mlir import ir


@dataclasses.dataclass(frozen=True)
class HbmView:
    """Element (i0, i1, ...) of the view is element `offset + sum(i_k * strides[k])` of
    `buffer`'s row-major storage.

    A view without a buffer is generated on chip instead of loaded: a constant (`fill` set)
    or a loop index, whose value at (i0, i1, ...) is the "address" `offset + sum(i_k *
    strides[k])` itself (see `source_view`). Views used only to reason about layout have no
    buffer either."""
    buffer: ir.Value | None
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    element_type_hint: ir.Type | None = None     # element type of a storage-less view
    fill: float | None = None                    # value of a generated constant

    @staticmethod
    def of(buffer: ir.Value) -> "HbmView":
        shape = tuple(ir.MemRefType(buffer.type).shape)
        return HbmView(buffer, 0, shape, row_major_strides(shape))

    @staticmethod
    def abstract(shape: tuple[int, ...]) -> "HbmView":
        return HbmView(None, 0, tuple(shape), row_major_strides(tuple(shape)))

    @property
    def element_type(self) -> ir.Type:
        if self.buffer is None:
            return self.element_type_hint
        return ir.MemRefType(self.buffer.type).element_type

    @property
    def rank(self) -> int:
        return len(self.shape)

    def relaid(self, offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> "HbmView":
        """The view of the same storage with another layout (dataclasses.replace does the
        same, several times slower: kernels derive hundreds of thousands of views)."""
        return HbmView(self.buffer, offset, shape, strides, self.element_type_hint, self.fill)

    def transpose(self, permutation: list[int]) -> "HbmView":
        return self.relaid(self.offset, tuple(self.shape[p] for p in permutation),
                           tuple(self.strides[p] for p in permutation))

    def merge_heads(self, axis: int) -> "HbmView | None":
        """This view [..., H, rows, cols] with its last batch dim H merged into the matrix dim
        `axis` (-1: cols, -2: rows), when head h's elements follow head h-1's along that dim
        (an H stride of that dim's size times its stride); None otherwise."""
        if self.rank < 3:
            return None
        h, m = self.rank - 3, self.rank + axis
        if self.strides[h] != self.shape[m] * self.strides[m]:
            return None
        shape, strides = list(self.shape), list(self.strides)
        shape[m] *= shape[h]
        del shape[h], strides[h]
        return self.relaid(self.offset, tuple(shape), tuple(strides))

    def broadcast(self, dimensions: list[int], shape: tuple[int, ...]) -> "HbmView":
        strides, src = [], iter(self.strides)
        for d in range(len(shape)):
            strides.append(0 if d in dimensions else next(src))
        return self.relaid(self.offset, tuple(shape), tuple(strides))

    def reshape(self, shape: tuple[int, ...]) -> "HbmView | None":
        """The same elements with a new row-major shape, or None when no strided view can
        express it (then the data must be copied)."""
        strides = reshape_strides(self.shape, self.strides, tuple(shape))
        if strides is None:
            return None
        return self.relaid(self.offset, tuple(shape), strides)

    def select(self, dim: int, index: int) -> "HbmView":
        """The view with dim `dim` fixed at `index` (the dim is removed)."""
        return self.relaid(self.offset + index * self.strides[dim],
                           self.shape[:dim] + self.shape[dim + 1:],
                           self.strides[:dim] + self.strides[dim + 1:])

    def slice(self, dim: int, start: int, size: int, step: int = 1) -> "HbmView":
        shape = list(self.shape)
        shape[dim] = size
        strides = list(self.strides)
        strides[dim] *= step
        return self.relaid(self.offset + start * self.strides[dim], tuple(shape),
                           tuple(strides))

    def affine(self, coefficients: list[tuple[int, list[int]]],
               shape: tuple[int, ...]) -> "HbmView":
        """The view whose element i is this view's element (c_k + sum_j a_kj * i_j)_k for
        per-dim (c_k, a_k) (a trn.view's affine map); strides may come out negative."""
        offset = self.offset + sum(st * c for st, (c, _) in zip(self.strides, coefficients))
        strides = tuple(sum(st * a[j] for st, (_, a) in zip(self.strides, coefficients))
                        for j in range(len(shape)))
        return self.relaid(offset, tuple(shape), strides)

    def access_pattern(self, partition_dim: int | None, free_dims: list[int]) -> list[int]:
        """A DMA access pattern [offset, pstride, partitions, (stride, size)...] walking the
        given dims (partition first); None for partition_dim means a single partition."""
        ap = [self.offset]
        if partition_dim is None:
            ap += [0, 1]
        else:
            ap += [self.strides[partition_dim], self.shape[partition_dim]]
        for d in free_dims:
            ap += [self.strides[d], self.shape[d]]
        if not free_dims:
            ap += [1, 1]
        return ap

    def is_contiguous(self) -> bool:
        return self.strides == row_major_strides(self.shape) or math.prod(self.shape) <= 1


def source_view(op: ir.Operation) -> HbmView:
    """A trn.fill or trn.iota as a storage-less view. An iota's "address" is the index along
    its dim, so slicing and tiling it like any operand gives, per tile, an affine function of
    (partition, free element) that one IOTA instruction generates; its strides also keep that
    dim apart when contiguous dims are merged."""
    from torchneuron.compiler import ir_utils as U

    shape = tuple(U.shape(op.results[0]))
    etype = U.element_type(op.results[0])
    if op.name == "trn.fill":
        return HbmView(None, 0, shape, (0,) * len(shape), etype, U.float_attr(op, "value"))
    if op.name == "trn.iota":
        dim = U.int_attr(op, "dimension")
        strides = tuple(1 if d == dim else 0 for d in range(len(shape)))
        return HbmView(None, 0, shape, strides, etype)
    raise ValueError(f"{op.name} is not a source op")


def storage_less_view(value: ir.Value) -> HbmView:
    """A row-major view of `value`'s shape and element type with no storage: the layout the
    views of a value kept on chip derive from (a kernel's lowering locates its tiles by
    their offsets in it)."""
    from torchneuron.compiler import ir_utils as U

    return HbmView(None, 0, tuple(U.shape(value)), row_major_strides(tuple(U.shape(value))),
                   U.element_type(value))


def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= size
    return tuple(reversed(strides))


def reshape_strides(old_shape, old_strides, new_shape) -> tuple[int, ...] | None:
    """Strides for viewing (old_shape, old_strides) as new_shape in row-major element order,
    or None if impossible. Same rule as PyTorch's view: each group of old dims that merges into
    (or splits from) a group of new dims must be contiguous within itself."""
    if math.prod(old_shape) != math.prod(new_shape):
        return None
    if math.prod(new_shape) == 0:
        return row_major_strides(new_shape)
    old = [(s, st) for s, st in zip(old_shape, old_strides) if s != 1]
    new_strides = [0] * len(new_shape)
    oi, ni = 0, 0
    new_dims = [i for i, s in enumerate(new_shape) if s != 1]
    while oi < len(old) or ni < len(new_dims):
        # Grow an old group and a new group until their element counts agree.
        if oi >= len(old) or ni >= len(new_dims):
            return None
        old_group = [old[oi]]
        oi += 1
        new_group = [new_dims[ni]]
        ni += 1
        old_n = old_group[0][0]
        new_n = new_shape[new_group[0]]
        while old_n != new_n:
            if old_n < new_n:
                if oi >= len(old):
                    return None
                old_group.append(old[oi])
                old_n *= old[oi][0]
                oi += 1
            else:
                if ni >= len(new_dims):
                    return None
                new_group.append(new_dims[ni])
                new_n *= new_shape[new_dims[ni]]
                ni += 1
        for (_, stride_a), (size_b, stride_b) in zip(old_group, old_group[1:]):
            if stride_a != stride_b * size_b:
                return None
        stride = old_group[-1][1]
        for d in reversed(new_group):
            new_strides[d] = stride
            stride *= new_shape[d]
    # Unit dims take any stride; give them the row-major one for readability.
    rm = row_major_strides(tuple(new_shape))
    for i, s in enumerate(new_shape):
        if s == 1:
            new_strides[i] = rm[i]
    return tuple(new_strides)



def apply_view_op(op: ir.Operation, source: HbmView) -> HbmView | None:
    """The view a trn view op (transpose, broadcast, reshape, view) makes of `source`, or None
    when a reshape cannot be expressed as a strided view."""
    from torchneuron.compiler import ir_utils as U

    result_shape = tuple(U.shape(op.results[0]))
    if op.name == "trn.transpose":
        return source.transpose(U.array_attr(op, "permutation"))
    if op.name == "trn.broadcast":
        return source.broadcast(U.array_attr(op, "dimensions"), result_shape)
    if op.name == "trn.reshape":
        return source.reshape(result_shape)
    if op.name == "trn.view":
        from torchneuron.dialects.trn import affine_view_coefficients
        return source.affine(affine_view_coefficients(op), result_shape)
    raise ValueError(f"{op.name} is not a view op")
