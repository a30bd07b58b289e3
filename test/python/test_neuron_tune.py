"""neuron-tune and the tuning database: a small kernel tuned, the database written atomically,
a later compilation reading it, a corrupt database reported with its file name. No torch."""

import json
import os
import re
import subprocess
import sys

import pytest

from torchneuron.compiler.tuning import TuningDB, TuningDBError, kernel_key

GEMM = """
func.func @gemm(%a: tensor<256x256xbf16>, %b: tensor<256x1024xbf16>) -> tensor<256x1024xbf16> {
  %k = "trn.kernel"() ({
    %y = "trn.matmul"(%a, %b) : (tensor<256x256xbf16>, tensor<256x1024xbf16>) -> tensor<256x1024xf32>
    %z = "trn.convert"(%y) : (tensor<256x1024xf32>) -> tensor<256x1024xbf16>
    "trn.yield"(%z) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<256x1024xbf16>) -> ()
  }) {kind = "matmul", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<256x1024xbf16>
  return %k : tensor<256x1024xbf16>
}
"""

EXP = """
func.func @ew(%x: tensor<128x8192xf32>) -> tensor<128x8192xf32> {
  %k = "trn.kernel"() ({
    %e = "trn.activation"(%x) {func = "exp", scale = 1.0 : f32, bias = 0.0 : f32} : (tensor<128x8192xf32>) -> tensor<128x8192xf32>
    "trn.yield"(%e) {operandSegmentSizes = array<i32: 1, 0, 0>} : (tensor<128x8192xf32>) -> ()
  }) {kind = "elementwise", resultSegmentSizes = array<i32: 1, 0, 0>} : () -> tensor<128x8192xf32>
  return %k : tensor<128x8192xf32>
}
"""


def _tune(args, env=None):
    return subprocess.run([sys.executable, "-m", "torchneuron.tools.neuron_tune", *args],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **(env or {})))


def _key(text: str, target: str = "trn2") -> str:
    from torch_mlir import ir

    from torchneuron.compiler import ir_utils as U
    from torchneuron.dialects import make_context

    with make_context():
        module = ir.Module.parse(text)
        kernel = next(op for f in U.functions(module.operation) for op in U.body_ops(f)
                      if op.name == "trn.kernel")
        return kernel_key(kernel, target)


def _tile(text: str, db: str) -> str:
    from torch_mlir import ir

    from torchneuron.compiler.passes import build_pass_manager, parse_pipeline
    from torchneuron.dialects import make_context

    context = make_context()
    with context:
        module = ir.Module.parse(text)
        build_pass_manager(parse_pipeline(f"trn-tile{{target=trn2 tuning-db={db}}}"),
                           context).run(module.operation)
        return str(module)


def test_tune_small_gemm_writes_database_and_compile_reads_it(tmp_path):
    source = tmp_path / "gemm.trn.mlir"
    source.write_text(GEMM)
    db = tmp_path / "tuning.json"
    result = _tune([str(source), "--db", str(db), "--max-candidates", "5"])
    assert result.returncode == 0, result.stderr
    # The progress bar (stderr, not a terminal: one line per candidate) and the summary.
    assert "1/" in result.stderr and "default:" in result.stderr
    assert "matmul 256x256 @ 256x1024 bf16" in result.stdout
    data = json.loads(db.read_text())
    assert data["format"] == "torchneuron-tuning" and data["version"] == 1
    key = _key(GEMM)
    entry = data["entries"][key]
    assert entry["target"] == "trn2" and entry["kind"] == "matmul"
    assert entry["tuned_ns"] <= entry["default_ns"]
    assert entry["config"]["orientation"] in ("mn", "nm")
    # No temporary file left behind by the atomic write.
    assert sorted(os.listdir(tmp_path)) == ["gemm.trn.mlir", "tuning.json"]

    # A later compilation takes the stored configuration (here forced to a distinctive one).
    entry["config"] = {"orientation": "nm", "gemm_resident": "f", "gemm_block": 1}
    db.write_text(json.dumps(data))
    tiled = _tile(GEMM, str(db))
    assert 'gemm_block = 1 : i64, gemm_resident = "f", kind = "matmul", orientation = "nm"' \
        in tiled
    # Another target does not share the entry.
    assert _key(GEMM, "trn1") != key


def test_compile_options_pass_the_database_to_trn_tile(tmp_path, monkeypatch):
    from torchneuron.compiler.pipeline import CompileOptions, stages

    assert "tuning-db" not in stages(CompileOptions())[0].passes
    assert f"tuning-db={tmp_path}/a.json" in stages(
        CompileOptions(tuning_db=f"{tmp_path}/a.json"))[0].passes
    monkeypatch.setenv("TORCHNEURON_TUNING_DB", f"{tmp_path}/b.json")
    assert f"tuning-db={tmp_path}/b.json" in stages(CompileOptions())[0].passes


def test_tuned_elementwise_free_tile_round_trip(tmp_path):
    from torchneuron.tools.neuron_tune import tune

    db = tmp_path / "db.json"
    results = tune(EXP, str(db), "trn2", max_candidates=2)
    assert len(results) == 1 and results[0].kind == "elementwise"
    config = TuningDB.load(db).lookup(_key(EXP))
    assert set(config) == {"free_tile"}
    assert f"free_tile = {config['free_tile']} : i64" in _tile(EXP, str(db))


def test_database_save_is_atomic_and_merges(tmp_path, monkeypatch):
    path = tmp_path / "db.json"
    first = TuningDB(path)
    first.record("a" * 64, {"config": {"free_tile": 512}})
    first.save()
    # Another tuner's entry, written meanwhile, survives our save.
    second = TuningDB(path)
    second.record("b" * 64, {"config": {"free_tile": 1024}})
    second.save()
    assert set(TuningDB.load(path).entries) == {"a" * 64, "b" * 64}
    # A failure while writing leaves the previous file intact and no temporary behind.
    before = path.read_text()
    third = TuningDB(path)
    third.record("c" * 64, {"config": {"free_tile": 64}})

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(TuningDBError, match=re.escape(str(path))):
        third.save()
    assert path.read_text() == before
    assert os.listdir(tmp_path) == ["db.json"]


@pytest.mark.parametrize("content, message", [
    ('{"format": "torchneuron-tuning", "version": 1, "entries": {', "is corrupt (not JSON"),
    ('[1, 2]', "is not a torchneuron tuning database"),
    ('{"format": "torchneuron-tuning", "version": 7, "entries": {}}', "has version 7"),
    ('{"format": "torchneuron-tuning", "version": 1, "entries": {"k": {"config": '
     '{"gemm_block": "big"}}}}', "sets gemm_block='big'"),
])
def test_corrupt_database_is_reported_with_its_file(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(TuningDBError, match=re.escape(message)) as info:
        TuningDB.load(path)
    assert str(path) in str(info.value)
    # Compiling warns (naming the file) and keeps the default tiling.
    with pytest.warns(RuntimeWarning, match=re.escape(str(path))):
        tiled = _tile(GEMM, str(path))
    assert 'kind = "matmul"' in tiled
    # neuron-tune refuses to overwrite it.
    source = tmp_path / "gemm.trn.mlir"
    source.write_text(GEMM)
    result = _tune([str(source), "--db", str(path), "--quiet"])
    assert result.returncode == 1
    assert "neuron-tune: error: tuning database" in result.stderr and str(path) in result.stderr
    assert path.read_text() == content


def test_neuron_tune_does_not_import_torch():
    code = ("import sys; from torchneuron.tools import neuron_tune; "
            "from torchneuron.compiler import tuning; "
            "assert 'torch' not in sys.modules, 'neuron-tune imported torch'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr


LINALG = """
#map = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @main(%a: tensor<256x128xbf16>, %b: tensor<128x256xbf16>) -> tensor<256x256xbf16> {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<256x256xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<256x256xf32>) -> tensor<256x256xf32>
    %2 = linalg.matmul ins(%a, %b : tensor<256x128xbf16>, tensor<128x256xbf16>) outs(%1 : tensor<256x256xf32>) -> tensor<256x256xf32>
    %3 = tensor.empty() : tensor<256x256xbf16>
    %4 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%2 : tensor<256x256xf32>) outs(%3 : tensor<256x256xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %5 = arith.truncf %in : f32 to bf16
      linalg.yield %5 : bf16
    } -> tensor<256x256xbf16>
    return %4 : tensor<256x256xbf16>
  }
}
"""


def test_linalg_graph_fusion_choice_is_stored_and_applied(tmp_path):
    from torch_mlir import ir

    from torchneuron.compiler.pipeline import CompileOptions, compile_linalg, tuned_options
    from torchneuron.compiler.tuning import graph_key
    from torchneuron.dialects import make_context
    from torchneuron.tools.neuron_tune import tune

    db = tmp_path / "db.json"
    results = tune(LINALG, str(db), "trn2", max_candidates=2)
    # The defaults and each of epilogue, elementwise, layout, mlp, weight-gradient, mlp-rows,
    # linear-rows, attention-output, attention-QKV, attention-FFN, saved-QKV, input-rows,
    # saved-mlp and saved-mlp weight-gradient fusion turned off.
    assert results[0].kind == "graph" and results[0].tried == 15
    assert {r.kind for r in results[1:]} == {"matmul"}
    with make_context():
        key = graph_key(ir.Module.parse(LINALG), "trn2")
    data = json.loads(db.read_text())
    assert set(data["entries"][key]["config"]) == {"fuse_matmul_epilogue", "fuse_elementwise",
                                                    "layout_assignment", "fuse_mlp",
                                                    "fuse_weight_gradients", "fuse_mlp_rows",
                                                    "fuse_linear_rows",
                                                    "fuse_attention_output",
                                                    "fuse_attention_qkv",
                                                    "fuse_attention_ffn",
                                                    "fuse_attention_qkv_saved",
                                                    "fuse_input_rows", "fuse_mlp_saved",
                                                    "fuse_mlp_saved_gradient"}
    # compile_linalg applies a graph entry before the trn stage (forced to a distinctive one).
    data["entries"][key]["config"]["fuse_matmul_epilogue"] = False
    db.write_text(json.dumps(data))
    with make_context():
        options = tuned_options(ir.Module.parse(LINALG), CompileOptions(tuning_db=str(db)))
    assert options.fuse_matmul_epilogue is False and options.fuse_elementwise is True
    compiled = compile_linalg(LINALG, "main", CompileOptions(tuning_db=str(db)),
                              dump_dir=str(tmp_path))
    assert compiled.neff
    assert (tmp_path / "main.trn.mlir").read_text().count('"trn.kernel"') == 2
