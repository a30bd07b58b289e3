"""The compiler's tooling: pass registry, lit coverage, neuron-opt behaviour, views.

None of these tests import torch (the compiler's MLIR side must not need it)."""

import os
import subprocess
import sys

import pytest

from torchneuron.compiler.kernels.views import HbmView, reshape_strides
from torchneuron.compiler.passes import (
    PassOptionError, load_all_passes, parse_pipeline,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_registered_pass_has_a_lit_test():
    registry = load_all_passes()
    assert {"convert-linalg-to-trn", "trn-fuse", "trn-tile", "convert-trn-to-nisa",
            "trn-plan-memory", "trn-schedule"} <= set(registry)
    for name, cls in registry.items():
        module = cls.__module__.rsplit(".", 1)[-1]
        folder = cls.__module__.split(".")[-2]        # conversion or transforms
        path = os.path.join(ROOT, "test", folder, f"{module}.mlir")
        assert os.path.exists(path), f"pass {name} has no lit test {path}"
        text = open(path).read()
        assert f"--{name}" in text, f"{path} does not run --{name}"
        assert "not neuron-opt" in text, f"{path} has no invalid-IR case"


def _neuron_opt(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "torchneuron.tools.neuron_opt", *args],
                          capture_output=True, text=True, input=stdin, cwd=ROOT)


def test_neuron_opt_does_not_import_torch():
    code = ("import sys; from torchneuron.tools import neuron_opt; "
            "rc = neuron_opt.main(['--split-input-file', '--trn-fuse', "
            "'test/transforms/fuse.mlir', '-o', '/dev/null']); "
            "assert rc == 0, rc; "
            "assert 'torch' not in sys.modules, 'neuron-opt imported torch'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_neuron_opt_reports_malformed_input_with_location(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @f() {\n  %0 = \"trn.fill\"() : () -> tensor<4xf32>\n  return\n}\n")
    result = _neuron_opt(str(bad))
    assert result.returncode == 1
    assert f"{bad}:2:8: error: 'trn.fill' op" in result.stderr
    assert "Traceback" not in result.stderr
    syntax = tmp_path / "syntax.mlir"
    syntax.write_text("func.func @f( {\n")
    result = _neuron_opt(str(syntax))
    assert result.returncode == 1
    assert f"{syntax}:1:14: error:" in result.stderr
    assert "Traceback" not in result.stderr


def test_view_sinking_that_does_not_settle_is_an_error_not_a_hang(tmp_path, monkeypatch,
                                                                  capsys):
    """trn-fuse bounds how often it moves views below elementwise ops: a rewrite that kept
    finding something to move (here one that always claims a move and changes nothing) is
    reported as a compile error of the pass at the function's location, instead of looping."""
    from torchneuron.compiler.transforms import fuse
    from torchneuron.tools import neuron_opt

    source = tmp_path / "residual.mlir"
    source.write_text(
        'func.func @f(%x: tensor<4x8xf32>) -> tensor<1x4x8xf32> {\n'
        '  %r = "trn.reshape"(%x) : (tensor<4x8xf32>) -> tensor<1x4x8xf32>\n'
        '  return %r : tensor<1x4x8xf32>\n'
        '}\n')
    monkeypatch.setattr(fuse, "_sink_view",
                        lambda view: fuse._ViewMove(view, [], lambda: [view]))
    assert neuron_opt.main(["--trn-fuse", str(source), "-o", os.devnull]) != 0
    err = capsys.readouterr().err
    assert f"{source}:1:1: error: trn-fuse: moving views below elementwise ops did not " \
        "settle" in err
    assert "Traceback" not in err


def test_neuron_opt_help_lists_every_pass_with_summary():
    result = _neuron_opt("--help")
    assert result.returncode == 0
    for name, cls in load_all_passes().items():
        assert f"--{name}" in result.stdout
        assert cls.SUMMARY in result.stdout


def test_neuron_opt_rejects_unknown_pass_and_option():
    result = _neuron_opt("--no-such-pass", "test/transforms/fuse.mlir")
    assert result.returncode == 1 and "unknown pass 'no-such-pass'" in result.stderr
    result = _neuron_opt("--trn-fuse=bogus=1", "test/transforms/fuse.mlir")
    assert result.returncode == 1 and "has no option 'bogus'" in result.stderr
    assert "Traceback" not in result.stderr



def test_tools_report_bad_files_and_targets_without_a_traceback(tmp_path):
    # Each of these once ended in a Python traceback or an 'internal compiler error'.
    binary = tmp_path / "binary.mlir"
    binary.write_bytes(b"\x00\x01\x02\xff\xfe")
    result = _neuron_opt(str(binary), "--trn-fuse")
    assert result.returncode == 1 and "is not MLIR text (not UTF-8" in result.stderr
    result = _neuron_opt("test/transforms/fuse.mlir", "--split-input-file", "--trn-fuse",
                         "-o", str(tmp_path / "no" / "such" / "dir.mlir"))
    assert result.returncode == 1 and "cannot write" in result.stderr
    out = tmp_path / "out.mlir"
    result = _neuron_opt("test/conversion/trn_to_nisa.mlir", "--split-input-file",
                         "--convert-trn-to-nisa=target=trn9", "-o", str(out))
    assert result.returncode == 1 and "unknown target 'trn9'" in result.stderr
    assert not out.exists()              # rejected before anything is written
    tensor_level = tmp_path / "f.mlir"      # one function, before convert-trn-to-nisa
    tensor_level.write_text("func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                            "  return %x : tensor<4xf32>\n}\n")
    translate = subprocess.run(
        [sys.executable, "-m", "torchneuron.tools.neuron_translate", "--isa-to-neff",
         str(tensor_level), "-o", str(tmp_path / "x.neff")],
        capture_output=True, text=True, cwd=ROOT)
    assert translate.returncode == 1 and "not a nisa program" in translate.stderr
    for stderr in (result.stderr, translate.stderr):
        assert "Traceback" not in stderr


def test_a_npy_given_as_inputs_is_named_as_such(tmp_path):
    import numpy as np

    from torchneuron.runtime.npz import NpzError, read_npz

    np.save(tmp_path / "plain.npy", np.zeros(3))
    with pytest.raises(NpzError, match=r"one array \(\.npy\), not an \.npz archive"):
        read_npz(str(tmp_path / "plain.npy"), "inputs file")

def test_neuron_opt_pipeline_matches_pass_flags():
    via_flags = _neuron_opt("--split-input-file", "--trn-fuse", "--trn-tile",
                            "test/transforms/fuse.mlir")
    via_pipeline = _neuron_opt("--split-input-file",
                               "--pass-pipeline=builtin.module(trn-fuse,trn-tile{target=trn2})",
                               "test/transforms/fuse.mlir")
    assert via_flags.returncode == 0 and via_pipeline.returncode == 0
    assert via_flags.stdout == via_pipeline.stdout
    assert "orientation" in via_flags.stdout


def test_neuron_opt_timing_reports_each_pass():
    """--mlir-timing (mlir-opt's flag): MLIR's execution time report on stderr, a line per
    pass run, the output unchanged."""
    timed = _neuron_opt("--split-input-file", "--trn-fuse", "--trn-tile", "--mlir-timing",
                        "test/transforms/fuse.mlir")
    plain = _neuron_opt("--split-input-file", "--trn-fuse", "--trn-tile",
                        "test/transforms/fuse.mlir")
    assert timed.returncode == 0 and timed.stdout == plain.stdout
    assert "Execution time report" in timed.stderr
    lines = timed.stderr.splitlines()
    assert any(line.rstrip().endswith(" trn-fuse") for line in lines)
    assert any(line.rstrip().endswith(" trn-tile") for line in lines)
    assert "Execution time report" not in plain.stderr


def test_parse_pipeline():
    assert parse_pipeline("builtin.module(a,b{x=1 y=true},c)") == [
        ("a", {}), ("b", {"x": "1", "y": "true"}), ("c", {})]
    assert parse_pipeline("a, b") == [("a", {}), ("b", {})]
    with pytest.raises(PassOptionError):
        parse_pipeline("builtin.module(a,b{x=1)")


@pytest.mark.parametrize("old_shape,old_strides,new_shape,expected", [
    ((4, 6), (6, 1), (24,), (1,)),
    ((4, 6), (1, 4), (24,), None),                 # a transposed view does not flatten
    ((4, 6), (6, 1), (4, 2, 3), (6, 3, 1)),
    ((2, 3, 4), (0, 4, 1), (2, 12), (0, 1)),       # broadcast dim kept apart
    ((2, 3, 4), (0, 4, 1), (6, 4), None),          # ... and not merged
    ((8,), (1,), (2, 1, 4), (4, 4, 1)),
])
def test_reshape_strides(old_shape, old_strides, new_shape, expected):
    assert reshape_strides(old_shape, old_strides, new_shape) == expected


def test_views_compose_into_access_patterns():
    view = HbmView(None, 0, (16, 8), (8, 1))
    t = view.transpose([1, 0]).slice(0, 2, 4).slice(1, 4, 8)
    # element (i, j) of the slice is original [4 + j, 2 + i]: offset 4*8 + 2
    assert t.offset == 34 and t.strides == (1, 8) and t.shape == (4, 8)
    assert t.access_pattern(0, [1]) == [34, 1, 4, 8, 8]
    b = HbmView(None, 0, (8,), (1,)).broadcast([0], (3, 8))
    assert b.strides == (0, 1)


def test_memref_info_is_remembered_only_within_its_cache_block():
    from torch_mlir import ir

    from torchneuron.dialects import common, make_context

    with make_context():
        tile = ir.Type.parse('memref<128x512xbf16, "sbuf">')
        with common.memref_info_cache():
            first = common.memref_info(tile)
            assert common.memref_info(tile) is first
        assert first == common.MemRefInfo("sbuf", (128, 512), "bf16", 2)
        # Outside the block nothing holds the type (nor its context) any longer.
        assert common._cache.types is None
        assert common.memref_info(tile) is not first
        assert common.memo("aps") is None
        with pytest.raises(ValueError, match="must be a memref"):
            common.memref_info(ir.Type.parse("f32"))


def test_access_patterns_are_decoded_once_per_attribute_within_a_cache_block():
    from torch_mlir import ir

    from torchneuron.dialects import common, make_context

    with make_context():
        module = ir.Module.parse("""
        func.func @f(%x: memref<128x64xf32, "hbm">) {
          %a = "nisa.alloc"() {memory = "sbuf"} : () -> memref<128x64xf32, "sbuf">
          "nisa.dma"(%a, %x) {engine = "dma", queue = 0 : i64, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "sbuf">, memref<128x64xf32, "hbm">) -> ()
          "nisa.dma"(%x, %a) {engine = "dma", queue = 1 : i64, aps = [array<i64: 0, 64, 128, 1, 64>, array<i64: 0, 64, 128, 1, 64>]} : (memref<128x64xf32, "hbm">, memref<128x64xf32, "sbuf">) -> ()
          return
        }""")
        body = module.body.operations[0].regions[0].blocks[0].operations
        load, store = body[1].operation, body[2].operation
        expected = ((0, 64, 128, 1, 64), (0, 64, 128, 1, 64))
        with common.memref_info_cache():
            first = common.access_patterns(load)
            assert first == expected
            # The same (uniqued) attribute on another instruction: the same decoded tuple.
            assert common.access_patterns(store) is first
            assert len(common.memo("aps")) == 1
        assert common.memo("aps") is None
        assert common.access_patterns(load) == expected
        del load.attributes["aps"]
        with pytest.raises(KeyError):
            common.access_patterns(load)


def test_emitter_queue_choice_counts_the_hbm_sides_short_runs():
    # A transposing load (8 partitions x 12 rows of 64 bf16: 96 runs of 128 B) queues about
    # four times the transfer time of a contiguous one of the same bytes (8 runs, one per
    # partition). Counting only the on-chip side's runs would rate them equal and put the
    # thirteenth load back on the transposing one's queue, behind its long transfer.
    from torch_mlir import ir

    from torchneuron.compiler.kernels.emitter import Emitter
    from torchneuron.dialects import make_context
    from torchneuron.target import get_target

    with make_context(), ir.Location.unknown():
        module = ir.Module.parse("""
        func.func @f(%x: memref<4x12x512x64xbf16, "hbm">, %y: memref<2048x768xbf16, "hbm">) {
          return
        }""")
        func = module.body.operations[0]
        block = func.regions[0].blocks[0]
        x, y = block.arguments
        with ir.InsertionPoint.at_block_terminator(block):
            em = Emitter(get_target("trn2"))
            tile = em.alloc("sbuf", 8, 768, ir.BF16Type.get())
            sbuf_ap = [0, 768, 8, 1, 768]
            em.dma(tile.buffer, sbuf_ap, x, [0, 64, 8, 32768, 12, 1, 64])
            for i in range(12):
                em.dma(tile.buffer, sbuf_ap, y, [i * 8 * 768, 768, 8, 1, 768])
        queues = [ir.IntegerAttr(op.attributes["queue"]).value
                  for op in block.operations if op.name == "nisa.dma"]
        assert queues[:12] == list(range(12))        # each to the emptiest load queue
        assert queues[12] != 0


_SMALL_LINALG = """
#map = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @main(%a: tensor<128x64xf32>, %b: tensor<128x64xf32>) -> tensor<128x64xf32> {
    %0 = tensor.empty() : tensor<128x64xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<128x64xf32>, tensor<128x64xf32>) outs(%0 : tensor<128x64xf32>) {
    ^bb0(%x: f32, %y: f32, %out: f32):
      %2 = arith.addf %x, %y : f32
      linalg.yield %2 : f32
    } -> tensor<128x64xf32>
    return %1 : tensor<128x64xf32>
  }
}
"""


def test_compile_pauses_the_cycle_collector_and_restores_it(monkeypatch,
                                                            collector_enabled_before):
    """compile_linalg holds Python's cycle collector off while its passes run (its full
    collections walked the whole process's objects, a quarter of the compile time) and leaves
    it as it found it, also when the compilation fails."""
    import gc

    from torchneuron.compiler import pipeline
    from torchneuron.compiler.errors import CompileError

    seen = []
    real_emit = pipeline.emit_neff

    def emit_watching(*args, **kwargs):
        seen.append(gc.isenabled())
        return real_emit(*args, **kwargs)

    monkeypatch.setattr(pipeline, "emit_neff", emit_watching)
    assert pipeline.compile_linalg(_SMALL_LINALG, "main", pipeline.CompileOptions()).neff
    assert seen == [False]
    assert gc.isenabled() is collector_enabled_before
    with pytest.raises(CompileError):
        pipeline.compile_linalg("func.func @main(", "broken", pipeline.CompileOptions())
    assert gc.isenabled() is collector_enabled_before
