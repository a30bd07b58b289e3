"""The NEFF's instruction records encoded by a forked child while trn-schedule runs, and
completed from what the schedule set (compiler/pipeline.py, codegen/neff_writer.py
`unscheduled_program` and `scheduled_neff`): the same NEFF as writing it from the scheduled
program, including the nops and DMA queues the schedule chose; a program changed otherwise,
a child that fails or no second core fall back to writing it whole. No torch."""

from __future__ import annotations

import pytest
from torch_mlir import ir

from torchneuron.compiler import forked, pipeline
from torchneuron.compiler import ir_utils as U
from torchneuron.compiler.codegen import neff_writer
from torchneuron.compiler.passes import build_pass_manager, parse_pipeline
from torchneuron.dialects import make_context
from torchneuron.dialects.common import memref_info_cache
from torchneuron.dialects.nisa import INSTRUCTION_OPS
from torchneuron.format.container import HEADER_SIZE, read_neff, write_neff

# A matmul kernel and an elementwise kernel reading its result: DMAs on several queues, PE,
# ACT and DVE, and instructions waiting for more semaphores than one record holds (nops).
SOURCE = """
func.func @f(%a: tensor<512x1024xbf16>, %b: tensor<1024x512xbf16>, %r: tensor<512x512xbf16>) -> (tensor<512x512xbf16>, tensor<512x512xbf16>) {
  %0 = "trn.kernel"() ({
    %m = "trn.matmul"(%a, %b) : (tensor<512x1024xbf16>, tensor<1024x512xbf16>) -> tensor<512x512xf32>
    %c = "trn.convert"(%m) : (tensor<512x512xf32>) -> tensor<512x512xbf16>
    "trn.yield"(%c) : (tensor<512x512xbf16>) -> ()
  }) {kind = "matmul", orientation = "mn"} : () -> tensor<512x512xbf16>
  %1 = "trn.kernel"() ({
    %s = "trn.tensor_tensor"(%0, %r) {op = "add"} : (tensor<512x512xbf16>, tensor<512x512xbf16>) -> tensor<512x512xbf16>
    %n = "trn.tensor_scalar"(%s) {op = "mul", reverse = false, scalar = -1.0 : f32} : (tensor<512x512xbf16>) -> tensor<512x512xbf16>
    "trn.yield"(%n) : (tensor<512x512xbf16>) -> ()
  }) {kind = "elementwise"} : () -> tensor<512x512xbf16>
  return %0, %1 : tensor<512x512xbf16>, tensor<512x512xbf16>
}
"""
PLACED = "trn-tile{target=trn2},convert-trn-to-nisa{target=trn2},trn-plan-memory"

LINALG = """
#map = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @main(%a: tensor<256x512xf32>, %b: tensor<256x512xf32>) -> tensor<256x512xf32> {
    %0 = tensor.empty() : tensor<256x512xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<256x512xf32>, tensor<256x512xf32>) outs(%0 : tensor<256x512xf32>) {
    ^bb0(%x: f32, %y: f32, %out: f32):
      %2 = arith.addf %x, %y : f32
      linalg.yield %2 : f32
    } -> tensor<256x512xf32>
    return %1 : tensor<256x512xf32>
  }
}
"""


def _payload(neff: bytes) -> bytes:
    """A NEFF without its header (which holds the file's random uuid)."""
    return neff[HEADER_SIZE:]


def _placed_and_scheduled(extra_before_schedule=None):
    """(function, unscheduled program, its instruction ops) with the function scheduled
    afterwards, inside an open context and cache block (yielded)."""
    context = make_context()
    with context, memref_info_cache():
        module = ir.Module.parse(SOURCE)
        build_pass_manager(parse_pipeline(PLACED), context).run(module.operation)
        func = next(U.functions(module.operation))
        program = neff_writer.unscheduled_program(func)
        ops = [op for op in U.body_ops(func) if op.name in INSTRUCTION_OPS]
        build_pass_manager(parse_pipeline("trn-schedule"), context).run(module.operation)
        yield func, program, ops


def test_scheduled_neff_is_the_neff_written_from_the_scheduled_program():
    for func, program, ops in _placed_and_scheduled():
        whole = neff_writer.function_to_neff(func)
        completed = neff_writer.scheduled_neff(func, program, ops)
        assert completed is not None
        names = [op.name for op in U.body_ops(func)]
        assert names.count("nisa.nop") > 0, "the program has no nops to complete"
        assert sum(s.name.startswith("q") for s in whole.streams) > 1
        assert _payload(write_neff(completed)) == _payload(write_neff(whole))
        # (Read back: a NEFF the runtime accepts.)
        assert read_neff(write_neff(completed)).streams


def test_a_program_changed_otherwise_is_not_completed_from_its_old_records():
    for func, program, ops in _placed_and_scheduled():
        # An instruction the records do not hold (here: one left out of the list).
        assert neff_writer.scheduled_neff(func, program, ops[1:]) is None
        # A recorded instruction the function no longer holds.
        alloc = next(op for op in U.body_ops(func) if op.name == "nisa.alloc")
        assert neff_writer.scheduled_neff(func, program, ops + [alloc]) is None


def _compile() -> bytes:
    return pipeline.compile_linalg(LINALG, "main", pipeline.CompileOptions()).neff


needs_two_cores = pytest.mark.skipif(
    forked.usable_cores() < 2 or not hasattr(forked.os, "fork"),
    reason="no child runs beside the compile on this machine")


@needs_two_cores
def test_compile_encodes_beside_the_schedule_with_the_same_result(monkeypatch):
    calls = []
    real = forked.fork_call
    monkeypatch.setattr(forked, "fork_call", lambda fn: calls.append(fn) or real(fn))
    beside = _compile()
    assert len(calls) == 2, "expected the encoding and the verification in children"
    monkeypatch.setattr(pipeline, "_encode_unscheduled", lambda module: None)
    assert _payload(beside) == _payload(_compile())


@needs_two_cores
def test_a_child_that_sends_nothing_leaves_the_neff_to_the_parent(monkeypatch):
    """Pickling fails in the children: both exit with nothing sent; the parent encodes and
    verifies the program itself, with the same NEFF."""
    expected = _payload(_compile())

    def no_pickle(*args, **kwargs):
        raise RuntimeError("no result")
    monkeypatch.setattr(forked.pickle, "dumps", no_pickle)
    assert _payload(_compile()) == expected


def test_one_core_writes_the_neff_in_place(monkeypatch):
    expected = _payload(_compile())
    monkeypatch.setattr(forked, "usable_cores", lambda: 1)
    monkeypatch.setattr(forked.os, "fork", lambda: pytest.fail("forked on one core"))
    assert _payload(_compile()) == expected


def test_a_program_compiled_twice_is_the_same_bytes_but_its_uuid():
    assert _payload(_compile()) == _payload(_compile())
