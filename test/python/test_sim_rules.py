"""Every rule of TARGET.md that the simulator enforces fails with an error naming the
instruction (stream[index] opcode (loc: ...)), the operand and the rule."""

import dataclasses

import numpy as np
import pytest

from neff_builder import NeffBuilder, execute, hbm, psum, sbuf
from torchneuron.runtime import Device, load
from torchneuron.sim import (
    ConstraintError, OutOfBoundsError, SimulationError, UninitializedReadError,
)
from torchneuron.target import TRN2


def fails(builder, error, *fragments, inputs=()):
    """Run `builder`'s program and check the error names the instruction and the rule."""
    with pytest.raises(error) as info:
        execute(builder, list(inputs))
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return info.value


def one(ins_fn, *fragments, error=ConstraintError, loc="kernel.py:7 bad"):
    """A program whose only instruction is `ins_fn(builder, loc)`; expect it to fail."""
    b = NeffBuilder("bad")
    ins_fn(b, loc)
    return fails(b, error, f"(loc: {loc})", *fragments)


# -- PE limits -----------------------------------------------------------------------------

def test_matmul_moving_free_size_513_is_rejected():
    err = one(lambda b, loc: b.matmul(psum(128, [513]), sbuf(128, [128], "bf16"),
                                      sbuf(128, [513], "bf16", offset=256), loc=loc),
              "pe[0] matmul", "N=513", "512")
    assert (err.stream, err.index, err.opcode) == ("pe", 0, "matmul")


def test_matmul_contraction_of_129_partitions_is_rejected():
    one(lambda b, loc: b.matmul(psum(128, [64]), sbuf(129, [128], "bf16"),
                                sbuf(129, [64], "bf16", offset=256), loc=loc),
        "pe[0] matmul", "beyond 128 partitions", error=OutOfBoundsError)


def test_matmul_contraction_beyond_pe_rows_is_rejected():
    # With 128 partitions K can never exceed the 128 PE rows; check the rule itself on a
    # target with a smaller array.
    b = NeffBuilder("k")
    b.matmul(psum(32, [64]), sbuf(128, [32], "bf16"), sbuf(128, [64], "bf16", offset=64),
             loc="k rows")
    small = Device(dataclasses.replace(TRN2, pe_rows=64))
    with pytest.raises(ConstraintError, match=r"pe\[0\] matmul .*K=128 exceeds the 64 PE rows"):
        small.execute(load(b.to_bytes()), [])


def test_matmul_operands_on_different_partitions_are_rejected():
    # Partition p feeds PE row p: a K = 64 contraction pairs rows 0..63 of both operands, or
    # rows 64..127 of both, never the one with the other.
    one(lambda b, loc: b.matmul(psum(32, [64]), sbuf(64, [32], "bf16"),
                                sbuf(64, [64], "bf16", offset=256, start=64), loc=loc),
        "pe[0] matmul", "stationary starts at partition 0 but moving at 64")


def test_matmul_operands_on_the_upper_partitions_are_accepted():
    b = NeffBuilder("upper")
    y = b.output("y", (32, 64))
    ones, product, done = b.semaphore(), b.semaphore(), b.semaphore()
    b.memset(sbuf(64, [32], "bf16", start=64), 1.0)
    b.memset(sbuf(64, [64], "bf16", offset=256, start=64), 2.0, signal=ones)
    b.matmul(psum(32, [64]), sbuf(64, [32], "bf16", start=64),
             sbuf(64, [64], "bf16", offset=256, start=64), waits=[(ones, 1)], signal=product)
    b.copy(sbuf(32, [64], offset=512), psum(32, [64]), waits=[(product, 1)], signal=done)
    b.dma(b.view(y), sbuf(32, [64], offset=512), waits=[(done, 1)])
    assert (execute(b, []).outputs[0] == 128.0).all()      # 64 rows of 1 x 2


def test_matmul_stationary_free_size_beyond_pe_columns_is_rejected():
    one(lambda b, loc: b.matmul(psum(128, [64]), sbuf(128, [129], "bf16"),
                                sbuf(128, [64], "bf16", offset=512), loc=loc),
        "M=129", "128 PE columns")


def test_matmul_straddling_psum_banks_is_rejected():
    one(lambda b, loc: b.matmul(psum(128, [256], offset=1536), sbuf(128, [128], "bf16"),
                                sbuf(128, [256], "bf16", offset=256), loc=loc),
        "straddling PSUM banks", "[1536, 2560)")


def test_matmul_must_write_fp32_psum_and_read_sbuf():
    one(lambda b, loc: b.matmul(sbuf(128, [64], offset=4096), sbuf(128, [128], "bf16"),
                                sbuf(128, [64], "bf16", offset=256), loc=loc),
        "the PE writes only PSUM")
    one(lambda b, loc: b.matmul(psum(128, [64], "bf16"), sbuf(128, [128], "bf16"),
                                sbuf(128, [64], "bf16", offset=256), loc=loc),
        "matmul writes fp32")
    one(lambda b, loc: b.matmul(psum(128, [64]), psum(128, [128], "bf16", offset=2048),
                                sbuf(128, [64], "bf16", offset=256), loc=loc),
        "reads its inputs from SBUF only")


def test_matmul_fp32_pairs_only_with_fp32_and_no_integer_inputs():
    one(lambda b, loc: b.matmul(psum(128, [64]), sbuf(128, [128], "f32"),
                                sbuf(128, [64], "bf16", offset=1024), loc=loc),
        "fp32 matmul inputs pair only with fp32")
    one(lambda b, loc: b.matmul(psum(128, [64]), sbuf(128, [128], "i8"),
                                sbuf(128, [64], "i8", offset=1024), loc=loc),
        "not i8")


def test_pe_transpose_limits():
    one(lambda b, loc: b.transpose(psum(128, [128]), sbuf(128, [129]), loc=loc),
        "pe[0] transpose", "exceeds [128, 128]")
    one(lambda b, loc: b.transpose(psum(64, [128], "bf16"), sbuf(128, [64]), loc=loc),
        "fp32 or the source dtype")


# -- partitions and capacity ---------------------------------------------------------------

def test_tile_beyond_128_partitions_is_rejected():
    b = NeffBuilder("bad")
    x = b.input("x", (64, 4))
    b.dma(sbuf(64, [4], start=96), b.view(x), queue=3, loc="load")
    fails(b, OutOfBoundsError, "q3[0] dma (loc: load)", "beyond 128 partitions",
          inputs=[np.zeros((64, 4), np.float32)])


def test_sbuf_overflow_is_rejected():
    end = TRN2.sbuf_partition_bytes
    one(lambda b, loc: b.memset(sbuf(128, [64], offset=end - 128), 0.0, loc=loc),
        "dve[0] memset", "sbuf overflow", f"a partition holds {end} bytes",
        error=OutOfBoundsError)


def test_negative_sbuf_offset_is_rejected():
    one(lambda b, loc: b.memset(sbuf(128, [4], offset=-4), 0.0, loc=loc), "sbuf overflow",
        error=OutOfBoundsError)


def test_psum_overflow_is_rejected():
    one(lambda b, loc: b.memset(psum(128, [16], offset=TRN2.psum_partition_bytes - 32), 0.0,
                                engine="act", loc=loc),
        "act[0] memset", "psum overflow", error=OutOfBoundsError)


@pytest.mark.parametrize("count, start", [(65, 32), (64, 32), (33, 32), (32, 16), (1, 8),
                                          (96, 32)])
def test_bad_start_partition_is_rejected(count, start):
    one(lambda b, loc: b.memset(sbuf(count, [8], start=start), 0.0, loc=loc),
        f"bad start partition {start} for {count} partitions")


@pytest.mark.parametrize("count, start", [(128, 0), (64, 64), (33, 64), (32, 96), (1, 32)])
def test_good_start_partitions_are_accepted(count, start):
    b = NeffBuilder("ok")
    y = b.output("y", (count, 8))
    done = b.semaphore()
    b.memset(sbuf(count, [8], start=start), 1.0, signal=done)
    b.dma(b.view(y), sbuf(count, [8], start=start), waits=[(done, 1)])
    assert execute(b, []).outputs[0].sum() == count * 8


def test_dma_has_no_start_partition_rule():
    b = NeffBuilder("dma")
    x = b.input("x", (3, 4))
    y = b.output("y", (3, 4))
    done = b.semaphore()
    b.dma(sbuf(3, [4], start=5), b.view(x), signal=done)
    b.dma(b.view(y), sbuf(3, [4], start=5), waits=[(done, 1)])
    xv = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(execute(b, [xv]).outputs[0], xv)


# -- memories and engines ------------------------------------------------------------------

def test_compute_engine_touching_hbm_is_rejected():
    b = NeffBuilder("bad")
    x = b.input("x", (128, 4))
    b.activate(sbuf(128, [4]), b.view(x), "relu", loc="relu")
    fails(b, ConstraintError, "act[0] activate (loc: relu)", "compute engine act touching HBM",
          inputs=[np.zeros((128, 4), np.float32)])


def test_dma_touching_psum_is_rejected():
    b = NeffBuilder("bad")
    y = b.output("y", (128, 4))
    b.dma(b.view(y), psum(128, [4]), queue=2, loc="store")
    fails(b, ConstraintError, "q2[0] dma (loc: store)", "HBM and SBUF only, not psum")


def test_pool_touching_psum_is_rejected():
    # GpSimd cannot access PSUM (NKI ISA reference); ACT and DVE can.
    b = NeffBuilder("bad")
    s = b.semaphore()
    b.memset(psum(128, [4]), 0.0, engine="dve", signal=s)
    b.copy(sbuf(128, [4]), psum(128, [4]), engine="pool", waits=[(s, 1)], loc="evacuate")
    fails(b, ConstraintError, "pool[0] tensor_copy (loc: evacuate)", "pool cannot access PSUM")
    b = NeffBuilder("bad")
    b.memset(psum(128, [4]), 0.0, engine="pool", loc="clear")
    fails(b, ConstraintError, "pool[0] memset (loc: clear)", "pool cannot access PSUM")
    b = NeffBuilder("good")
    s = b.semaphore()
    b.memset(psum(128, [4]), 0.0, engine="act", signal=s)
    b.copy(sbuf(128, [4]), psum(128, [4]), engine="dve", waits=[(s, 1)])
    execute(b, [])


def test_opcode_on_wrong_engine_is_rejected():
    from torchneuron.format import isa
    b = NeffBuilder("bad")
    b.add(isa.Instruction(isa.Opcode.MATMUL, isa.Engine.ACT,
                          [psum(128, [64]), sbuf(128, [128], "bf16"),
                           sbuf(128, [64], "bf16", offset=256), None, None]))
    fails(b, ConstraintError, "act[0] matmul", "cannot run on act (only on pe)")
    b = NeffBuilder("bad")
    b.iota(sbuf(128, [4]))
    b.streams = {(isa.Engine.DVE, 0): [dataclasses.replace(ins, engine=isa.Engine.DVE)
                                       for ins in b.streams[(isa.Engine.POOL, 0)]]}
    fails(b, ConstraintError, "dve[0] iota", "only on pool")


def test_missing_and_extra_operands_are_rejected():
    from torchneuron.format import isa
    b = NeffBuilder("bad")
    b.add(isa.Instruction(isa.Opcode.TENSOR_TENSOR, isa.Engine.DVE,
                          [sbuf(128, [4]), sbuf(128, [4], offset=64), None, None, None]))
    fails(b, ConstraintError, "operand 2 (b) is missing")
    b = NeffBuilder("bad")
    b.add(isa.Instruction(isa.Opcode.MEMSET, isa.Engine.DVE,
                          [sbuf(128, [4]), sbuf(128, [4], offset=64), None, None, None]))
    fails(b, ConstraintError, "operand slot 1 is not used by memset")


def test_both_tensor_tensor_inputs_in_psum_are_rejected():
    one(lambda b, loc: b.tensor_tensor(sbuf(128, [64]), psum(128, [64]),
                                       psum(128, [64], offset=2048), "add", loc=loc),
        "dve[0] tensor_tensor", "both a and b are in PSUM")


def test_select_reads_at_most_one_psum_operand():
    one(lambda b, loc: b.select(sbuf(128, [8]), psum(128, [8]), sbuf(128, [8], offset=64),
                                psum(128, [8], offset=2048), loc=loc),
        "both mask and b are in PSUM")


# -- shapes and dtypes ---------------------------------------------------------------------

def test_elementwise_shapes_must_agree():
    one(lambda b, loc: b.tensor_tensor(sbuf(128, [64]), sbuf(128, [64], offset=256),
                                       sbuf(64, [64], offset=512), "add", loc=loc),
        "operand 2 (b) sbuf[p0:64]+512B", "has 64 partitions x 64 elements, but a has 128 x 64")
    one(lambda b, loc: b.copy(sbuf(128, [2, 31]), sbuf(128, [64], offset=256), loc=loc),
        "operand 0 (dst)", "has 128 partitions x 62 elements")


def test_per_partition_operands_must_be_p_by_1():
    one(lambda b, loc: b.activate(sbuf(128, [64]), sbuf(128, [64], offset=256), "relu",
                                  bias=sbuf(128, [2], offset=512), loc=loc),
        "operand 2 (bias)", "must be a per-partition scalar [128, 1], not [128, 2]")
    one(lambda b, loc: b.tensor_scalar(sbuf(128, [64]), sbuf(128, [64], offset=256), "add",
                                       sbuf(64, [1], offset=512), loc=loc),
        "operand 2 (s0)", "must be a per-partition scalar [128, 1], not [64, 1]")


def test_hbm_operand_dtype_must_be_the_tensor_dtype():
    b = NeffBuilder("bad")
    x = b.input("x", (4, 4))
    b.dma(sbuf(4, [4], "bf16"), hbm(x, 4, [4], "bf16"), loc="load")
    fails(b, ConstraintError, "q0[0] dma (loc: load)", "dtype bf16 reads tensor 'x' of dtype f32",
          inputs=[np.zeros((4, 4), np.float32)])


def test_hbm_operand_beyond_its_tensor_is_rejected():
    b = NeffBuilder("bad")
    x = b.input("x", (4, 4))
    b.dma(sbuf(4, [4]), hbm(x, 4, [4], offset=1), loc="load")
    fails(b, OutOfBoundsError, "reaches elements [1, 16] of tensor 'x', which has 16",
          inputs=[np.zeros((4, 4), np.float32)])


def test_dma_element_counts_must_match():
    b = NeffBuilder("bad")
    x = b.input("x", (4, 4))
    b.dma(sbuf(4, [3]), b.view(x))
    fails(b, ConstraintError, "DMA copies 16 elements into 12",
          inputs=[np.zeros((4, 4), np.float32)])


def test_tensor_scalar_reduce_rules():
    one(lambda b, loc: b.tensor_scalar_reduce(sbuf(8, [16]), sbuf(8, [16], offset=64), "mul",
                                              1.0, "max", sbuf(8, [2], offset=128), loc=loc),
        "must be a per-partition scalar [8, 1]")
    one(lambda b, loc: b.tensor_scalar_reduce(sbuf(8, [16]), sbuf(8, [16], offset=64), "mul",
                                              1.0, "xor", sbuf(8, [1], offset=128), loc=loc),
        "reduces with add/mul/max/min, not xor")
    one(lambda b, loc: b.tensor_scalar_reduce(sbuf(8, [16]), sbuf(8, [16], offset=64), "eq",
                                              1.0, "max", sbuf(8, [1], offset=128), loc=loc),
        "computes arithmetic, not eq")
    one(lambda b, loc: b.tensor_scalar_reduce(sbuf(8, [16]), sbuf(8, [16], offset=64), "mul",
                                              1.0, "max", sbuf(8, [1], offset=128),
                                              engine="act", loc=loc),
        "tensor_scalar_reduce", "act")


def test_tensor_reduce_rules():
    one(lambda b, loc: b.tensor_reduce(sbuf(128, [1]), sbuf(128, [8], offset=64), "sub",
                                       loc=loc), "cannot reduce with sub")
    one(lambda b, loc: b.tensor_reduce(sbuf(128, [1]), sbuf(128, [8], offset=64), "add",
                                       dims=2, loc=loc), "reduce_dims=2, but the source has 1")
    one(lambda b, loc: b.tensor_reduce(sbuf(128, [2]), sbuf(128, [8], offset=64), "add",
                                       loc=loc), "the reduction gives [128, 1]")


def test_destination_writing_an_element_twice_is_rejected():
    one(lambda b, loc: b.memset(sbuf(128, [4, 8], strides=[0, 1]), 0.0, loc=loc),
        "operand 0 (dst)", "writes some element more than once")


def test_interleaved_destination_pattern_is_accepted():
    b = NeffBuilder("interleaved")
    x = b.input("x", (1, 8))
    y = b.output("y", (1, 8))
    s = b.semaphore()
    # Write elements in the order 0, 2, 4, 6, 1, 3, 5, 7.
    b.dma(sbuf(1, [2, 4], strides=[1, 2]), b.view(x), signal=s)
    b.dma(b.view(y), sbuf(1, [8]), waits=[(s, 1)])
    out = execute(b, [np.arange(8, dtype=np.float32)[None]]).outputs[0]
    np.testing.assert_array_equal(out[0], [0, 4, 1, 5, 2, 6, 3, 7])


def test_tensor_scalar_second_operand_without_second_op_is_rejected():
    one(lambda b, loc: b.tensor_scalar(sbuf(128, [4]), sbuf(128, [4], offset=64), "add", 1.0,
                                       "bypass", sbuf(128, [1], offset=128), loc=loc),
        "operand 3 (s1) is given but alu1 is bypass")


def test_dma_queue_beyond_the_target_is_rejected():
    b = NeffBuilder("bad")
    b.nop(engine="dma", queue=16)
    fails(b, ConstraintError, "stream q16", "16 DMA queues")


# -- never-written memory ------------------------------------------------------------------

def test_read_of_never_written_sbuf_is_detected():
    one(lambda b, loc: b.activate(sbuf(128, [64]), sbuf(128, [64], offset=256), "relu",
                                  loc=loc),
        "act[0] activate (loc: kernel.py:7 bad)", "operand 1 (src)",
        "reads 8192 of 8192 elements that were never written", error=UninitializedReadError)


def test_partially_written_operand_is_detected():
    b = NeffBuilder("partial")
    done = b.semaphore()
    b.memset(sbuf(128, [32]), 0.0, signal=done)
    b.tensor_scalar(sbuf(128, [33], offset=1024), sbuf(128, [33]), "add", 1.0, engine="pool",
                    waits=[(done, 1)], loc="reads one column too many")
    fails(b, UninitializedReadError, "pool[0] tensor_scalar (loc: reads one column too many)",
          "reads 128 of 4224 elements")


def test_accumulating_matmul_into_unwritten_psum_is_detected():
    b = NeffBuilder("acc")
    done = b.semaphore()
    b.memset(sbuf(128, [192], "bf16"), 1.0, signal=done)
    b.matmul(psum(128, [64]), sbuf(128, [128], "bf16"), sbuf(128, [64], "bf16", offset=256),
             accumulate=True, waits=[(done, 1)], loc="acc")
    fails(b, UninitializedReadError, "pe[0] matmul (loc: acc)", "operand 0 (dst)")


def test_output_left_unwritten_is_reported():
    b = NeffBuilder("lazy")
    x = b.input("x", (2, 4))
    b.output("y", (2, 4))
    b.dma(sbuf(2, [4]), b.view(x))
    fails(b, UninitializedReadError, "output 'y'", "8 of 8 elements were never written",
          inputs=[np.zeros((2, 4), np.float32)])


def test_all_errors_are_simulation_errors():
    for cls in (ConstraintError, OutOfBoundsError, UninitializedReadError):
        assert issubclass(cls, SimulationError)
