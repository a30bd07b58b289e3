"""Indirect DMA: rows of HBM gathered into (or scattered from) SBUF partitions by an index."""

import numpy as np
import pytest

from neff_builder import execute, gather_program, sbuf, scatter_program
from torchneuron.runtime import ConstraintError, OutOfBoundsError


def test_gather_rows_by_index():
    table = np.arange(10 * 8, dtype=np.float32).reshape(10, 8)
    ids = np.array([[3], [0], [9], [3], [7]], dtype=np.int32)
    result = execute(gather_program(10, 8, 5), [table, ids])
    np.testing.assert_array_equal(result.outputs[0], table[ids[:, 0]])


def test_gather_index_out_of_range_faults_naming_the_instruction():
    table = np.zeros((10, 8), dtype=np.float32)
    ids = np.array([[1], [10], [2], [0], [0]], dtype=np.int32)
    with pytest.raises(OutOfBoundsError, match=r"q1\[0\] dma \(loc: gather\).*index 10 of "
                                               r"partition 1"):
        execute(gather_program(10, 8, 5), [table, ids])
    with pytest.raises(OutOfBoundsError, match="index -1"):
        execute(gather_program(10, 8, 5), [table, -np.ones((5, 1), dtype=np.int32)])


def test_scatter_rows_by_index():
    values = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    result = execute(scatter_program(), [values, np.array([[5], [1], [2]], dtype=np.int32)])
    expected = np.zeros((6, 4), dtype=np.float32)
    expected[[5, 1, 2]] = values
    np.testing.assert_array_equal(result.outputs[0], expected)


def test_indirect_dma_rules():
    b = gather_program(10, 8, 5)
    ins = b.streams[(5, 1)][0]
    ins.operands[2] = sbuf(5, [1], "f32")          # a float index
    with pytest.raises(ConstraintError, match="index must be integers"):
        execute(b, [np.zeros((10, 8), np.float32), np.zeros((5, 1), np.int32)])
    b = gather_program(10, 8, 5)
    ins = b.streams[(5, 1)][0]
    ins.flags = 0                                  # an index without the flag
    with pytest.raises(ConstraintError, match="only an indirect DMA takes one"):
        execute(b, [np.zeros((10, 8), np.float32), np.zeros((5, 1), np.int32)])


def test_gather_of_a_single_row_uses_the_row_stride():
    """One partition: the index is still scaled by the partition stride."""
    table = np.arange(10 * 8, dtype=np.float32).reshape(10, 8)
    ids = np.array([[7]], dtype=np.int32)
    result = execute(gather_program(10, 8, 1), [table, ids])
    np.testing.assert_array_equal(result.outputs[0], table[[7]])
