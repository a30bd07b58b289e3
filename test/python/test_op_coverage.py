"""The OpInfo sweep (bench/op_coverage.py) on its --fast subset: no op may be wrong or raise
from the backend; ops without a NeuronCore lowering fall back, visibly."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")   # torch.testing._internal's op_db needs it

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def fast_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("coverage") / "fast.json"
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "op_coverage.py"), "--fast",
         "--dtype", "float32,bfloat16", "--samples", "1", "--workers", "2", "--json", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(out.read_text()), result.stdout


def test_no_fast_op_is_wrong_or_errors(fast_sweep):
    data, printed = fast_sweep
    bad = {f"{op} ({dtype})": record[dtype]["detail"]
           for op, record in data["results"].items() for dtype in data["dtypes"]
           if record[dtype]["status"] in ("wrong", "error")}
    assert not bad, f"{bad}\n{printed}"


def test_fast_sweep_classifies_native_fallback_and_lowering(fast_sweep):
    data, _ = fast_sweep
    results = data["results"]
    f32 = {op: record["float32"] for op, record in results.items()}
    assert f32["add"]["status"] == "native" and f32["add"]["lowers"] is True
    assert f32["mm"]["status"] == "native"
    # sorts have no NeuronCore lowering (torch-mlir leaves tm_tensor.sort): they run in PyTorch
    assert f32["sort"]["status"] == "fallback" and f32["sort"]["lowers"] is False
    assert "aten.sort" in f32["sort"]["detail"]
    totals = data["totals"]["float32"]
    assert totals["ops"] == len(results) and totals["native"] >= 15
