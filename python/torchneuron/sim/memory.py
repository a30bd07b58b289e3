"""The memories of the simulated NeuronCore and strided access to them.

SBUF and PSUM are uint8 arrays [num_partitions, host_row_bytes(partition_bytes)] (each row a
partition, padded for the host's caches); HBM is one flat uint8 array
holding every tensor of the program at a base address the runtime chooses (`HbmLayout`). Each
memory has a parallel "written" mask of the same shape (0x00 = never written, 0xFF = written),
so a read of never-written bytes is detected without poisoning data.

An operand (an access pattern, see format/isa.py) is decoded once per program into an
`Access`: its logical shape, and the byte offset and byte strides of its elements in the
memory's flat buffer. Reading or writing it is then one numpy view (`np.ndarray` over the
memory's buffer with those strides) -- no per-element Python work. The view is built only
after the operand was checked to lie inside its memory (see `sim/rules.py`), so a view never
reaches outside the array. The mask is viewed the same way with an unsigned integer dtype of
the element's size, so "every byte of every element written" is one vectorised comparison.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from torchneuron.format import isa

# Unsigned dtype with the same itemsize as an element, used to view the written-mask.
MASK_DTYPES = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32),
               8: np.dtype(np.uint64)}
ALL_WRITTEN = {size: dt.type(np.iinfo(dt).max) for size, dt in MASK_DTYPES.items()}

# numpy dtype of each ISA dtype, as a plain dict for the simulator's hot paths.
NUMPY_DTYPES: dict[isa.DType, np.dtype] = {dt: dt.numpy() for dt in isa.DType}


class Access(NamedTuple):
    """A decoded operand: which elements of which memory it names, in logical order."""
    slot: int
    role: str                    # the operand's role in its instruction ("src", "moving" ...)
    memory: isa.Memory
    isa_dtype: isa.DType
    dtype: np.dtype
    shape: tuple[int, ...]       # [partition_count, *sizes]
    free_size: int               # elements per partition
    offset: int                  # byte offset of element (0, 0, ...) in the flat buffer
    strides: tuple[int, ...]     # byte strides, partition axis first
    tensor: int                  # HBM tensor id (HBM operands only)
    # Bounding box on chip, for dependency checks: partitions [p0, p1), bytes [b0, b1) of each.
    p0: int
    p1: int
    b0: int
    b1: int
    text: str                    # human-readable description for messages

    @property
    def partitions(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.free_size * self.dtype.itemsize

    def overlaps(self, other: "Access") -> bool:
        """Whether the on-chip bounding boxes of two operands intersect (same memory)."""
        return (self.memory == other.memory and self.memory != isa.Memory.HBM
                and self.p0 < other.p1 and other.p0 < self.p1
                and self.b0 < other.b1 and other.b0 < self.b1)

    def describe(self) -> str:
        return f"operand {self.slot} ({self.role}) {self.text}"


# Memories at least this large are anonymous memory maps: the OS hands out zero pages on
# first touch, so a run pays only for the bytes it uses. (np.zeros of a block the C heap has
# recycled -- glibc raises its mmap threshold after large frees -- memsets all of it: about a
# millisecond per SBUF-sized array, six arrays per execution.)
_MMAP_BYTES = 1 << 20


def _zeroed(shape: tuple[int, ...]) -> np.ndarray:
    size = 1
    for n in shape:
        size *= n
    if size < _MMAP_BYTES:
        return np.zeros(shape, dtype=np.uint8)
    return np.frombuffer(mmap.mmap(-1, size), dtype=np.uint8).reshape(shape)


def host_row_bytes(partition_bytes: int) -> int:
    """Bytes between two partitions' rows in the host array of an on-chip memory.

    A partition holds a power-of-two-ish number of bytes (16 KiB of PSUM, 192 KiB of SBUF),
    so rows exactly that far apart would all map to the same sets of the host CPU's caches:
    walking an operand down its partitions (a transpose, a matmul operand, any [128, n] tile)
    would evict its own lines and run several times slower. One extra cache line per row
    spreads consecutive partitions over consecutive sets. The padding is never addressed: an
    operand's bytes are checked to lie inside `partition_bytes` (sim/rules.py)."""
    return partition_bytes + 64


class Store:
    """One memory: its bytes and its written-mask (same shape), both zero to begin with."""

    def __init__(self, kind: isa.Memory, shape: tuple[int, ...]):
        self.kind = kind
        self.data = _zeroed(shape)
        self.written = _zeroed(shape)

    @classmethod
    def onchip(cls, kind: isa.Memory, partitions: int, partition_bytes: int) -> "Store":
        """SBUF or PSUM: `partitions` rows of `partition_bytes`, `host_row_bytes` apart."""
        return cls(kind, (partitions, host_row_bytes(partition_bytes)))

    def view(self, a: Access) -> np.ndarray:
        return np.ndarray(a.shape, a.dtype, buffer=self.data, offset=a.offset,
                          strides=a.strides)

    def mask(self, a: Access) -> np.ndarray:
        return np.ndarray(a.shape, MASK_DTYPES[a.dtype.itemsize], buffer=self.written,
                          offset=a.offset, strides=a.strides)

    def unwritten_elements(self, a: Access) -> int:
        """How many elements of `a` have at least one byte nobody wrote."""
        m = self.mask(a)
        full = ALL_WRITTEN[a.dtype.itemsize]
        if (m == full).all():
            return 0
        return int(np.count_nonzero(m != full))

    def store(self, a: Access, values: np.ndarray) -> None:
        """Write `values` (already in a's dtype, any shape with a's element count); the
        caller marks the bytes written (`mark_written`)."""
        self.view(a)[...] = values.reshape(a.shape)

    def mark_written(self, a: Access) -> None:
        self.mask(a)[...] = ALL_WRITTEN[a.dtype.itemsize]


@dataclass(frozen=True)
class HbmLayout:
    """Where each NEFF tensor lives in the flat HBM array.

    `bases[t]` is the byte address of tensor t (scratch tensors: the arena base plus their
    `scratch_offset`, so scratch tensors the compiler overlapped share bytes); `size` is the
    number of bytes HBM must hold.
    """
    bases: tuple[int, ...]
    size: int


class Hbm(Store):
    """The core's HBM: every tensor of one program at the addresses of an `HbmLayout`."""

    def __init__(self, layout: HbmLayout, tensors: list):
        super().__init__(isa.Memory.HBM, (layout.size,))
        self.layout = layout
        self.tensors = tensors

    def tensor_access(self, tid: int) -> Access:
        """The whole tensor `tid` as a flat, contiguous access."""
        t = self.tensors[tid]
        dtype = NUMPY_DTYPES[t.dtype]
        n = t.num_elements
        return Access(slot=-1, role=t.kind, memory=isa.Memory.HBM, isa_dtype=t.dtype,
                      dtype=dtype, shape=(n,), free_size=1, offset=self.layout.bases[tid],
                      strides=(dtype.itemsize,), tensor=tid, p0=0, p1=0, b0=0, b1=0,
                      text=f"hbm tensor {t.name!r}")

    def write_tensor(self, tid: int, array: np.ndarray) -> None:
        """Store a host array (already of the tensor's dtype and element count)."""
        if array.size:
            a = self.tensor_access(tid)
            self.store(a, np.ascontiguousarray(array).reshape(-1))
            self.mark_written(a)

    def read_tensor(self, tid: int) -> tuple[np.ndarray, int]:
        """A copy of tensor `tid` in its declared shape, and how many elements are unwritten."""
        t = self.tensors[tid]
        if t.num_elements == 0:
            return np.zeros(t.shape, NUMPY_DTYPES[t.dtype]), 0
        a = self.tensor_access(tid)
        return self.view(a).copy().reshape(t.shape), self.unwritten_elements(a)
