"""Indirect DMA: rows of HBM gathered into (or scattered from) SBUF partitions by an index."""

import numpy as np
import pytest

from neff_builder import NeffBuilder, execute, hbm, sbuf
from torchneuron.runtime import ConstraintError, OutOfBoundsError


def _gather_program(rows: int, width: int, count: int):
    b = NeffBuilder("gather")
    table = b.input("table", (rows, width))
    ids = b.input("ids", (count, 1), "i32")
    out = b.output("out", (count, width))
    loaded, gathered = b.semaphore(), b.semaphore()
    index = sbuf(count, [1], "i32")
    data = sbuf(count, [width], offset=64)
    b.dma(index, b.view(ids), queue=0, signal=loaded, loc="load ids")
    b.dma_indirect(data, hbm(table, count, [width], partition_stride=width), index, queue=1,
                   waits=[(loaded, 1)], signal=gathered, loc="gather")
    b.dma(b.view(out), data, queue=2, waits=[(gathered, 1)])
    return b


def test_gather_rows_by_index():
    table = np.arange(10 * 8, dtype=np.float32).reshape(10, 8)
    ids = np.array([[3], [0], [9], [3], [7]], dtype=np.int32)
    result = execute(_gather_program(10, 8, 5), [table, ids])
    np.testing.assert_array_equal(result.outputs[0], table[ids[:, 0]])


def test_gather_index_out_of_range_faults_naming_the_instruction():
    table = np.zeros((10, 8), dtype=np.float32)
    ids = np.array([[1], [10], [2], [0], [0]], dtype=np.int32)
    with pytest.raises(OutOfBoundsError, match=r"q1\[0\] dma \(loc: gather\).*index 10 of "
                                               r"partition 1"):
        execute(_gather_program(10, 8, 5), [table, ids])
    with pytest.raises(OutOfBoundsError, match="index -1"):
        execute(_gather_program(10, 8, 5), [table, -np.ones((5, 1), dtype=np.int32)])


def test_scatter_rows_by_index():
    b = NeffBuilder("scatter")
    src = b.input("src", (3, 4))
    ids = b.input("ids", (3, 1), "i32")
    out = b.output("out", (6, 4))
    s = b.semaphore()
    zero = sbuf(6, [4], offset=256)
    b.memset(zero, 0.0, signal=s)
    b.dma(b.view(out), zero, queue=3, waits=[(s, 1)], signal=s)
    index, data = sbuf(3, [1], "i32"), sbuf(3, [4], offset=64)
    b.dma(index, b.view(ids), queue=0, signal=s)
    b.dma(data, b.view(src), queue=1, signal=s)
    b.dma_indirect(hbm(out, 3, [4], partition_stride=4), data, index, queue=3,
                   waits=[(s, 4)])
    values = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    result = execute(b, [values, np.array([[5], [1], [2]], dtype=np.int32)])
    expected = np.zeros((6, 4), dtype=np.float32)
    expected[[5, 1, 2]] = values
    np.testing.assert_array_equal(result.outputs[0], expected)


def test_indirect_dma_rules():
    b = _gather_program(10, 8, 5)
    ins = b.streams[(5, 1)][0]
    ins.operands[2] = sbuf(5, [1], "f32")          # a float index
    with pytest.raises(ConstraintError, match="index must be integers"):
        execute(b, [np.zeros((10, 8), np.float32), np.zeros((5, 1), np.int32)])
    b = _gather_program(10, 8, 5)
    ins = b.streams[(5, 1)][0]
    ins.flags = 0                                  # an index without the flag
    with pytest.raises(ConstraintError, match="only an indirect DMA takes one"):
        execute(b, [np.zeros((10, 8), np.float32), np.zeros((5, 1), np.int32)])


def test_gather_of_a_single_row_uses_the_row_stride():
    """One partition: the index is still scaled by the partition stride."""
    table = np.arange(10 * 8, dtype=np.float32).reshape(10, 8)
    ids = np.array([[7]], dtype=np.int32)
    result = execute(_gather_program(10, 8, 1), [table, ids])
    np.testing.assert_array_equal(result.outputs[0], table[[7]])
