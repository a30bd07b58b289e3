"""Operator coverage of backend="neuron" against PyTorch's OpInfo database.

    .venv/bin/python bench/op_coverage.py --write docs/op-coverage.md     # the full sweep
    .venv/bin/python bench/op_coverage.py --fast                          # ~25 representative ops
    .venv/bin/python bench/op_coverage.py --ops sort,add --dtype float32 --samples 3 -v

For each OpInfo of `torch.testing._internal.common_methods_invocations.op_db` (optionally
filtered), the first N sample inputs of each dtype (preferring samples without zero-size tensors, which
always run in PyTorch) are compiled as
`lambda *tensors: op(sample.input, *sample.args, **sample.kwargs)` (non-tensor arguments are
constants) with torch.compile(backend="neuron", dynamic=False, fullgraph=True), run, and
compared with eager PyTorch. Each sample is:

  native    every node of every graph compiled to the NeuronCore, results match
  fallback  some node ran in PyTorch (the reason is recorded), results match
  wrong     results differ from eager beyond the tolerance
  error     the backend raised (or a worker timed out / crashed)
  skipped   eager raises for the sample, Dynamo cannot trace it, torch.compile fails even with
            the aot_eager backend, the op returns no tensor, or no graph was produced

and an op takes the worst status of its samples (wrong > error > fallback > native; skipped
only when every sample is). Outputs of ops whose eager results differ between two runs (random
ops; ops named *empty*, which return uninitialised memory) are compared by shape and dtype
only.

Tolerances: a sample matches when either
  (a) torch.testing.assert_close(compiled, eager) passes with the dtype's defaults (fp32 rtol
      1.3e-6, atol 1e-5; bf16 rtol 1.6e-2, atol 1e-5), raised to the OpInfo's own CPU
      toleranceOverride for the dtype where it has one, times TOLERANCE_SCALE (fp32 x10,
      bf16 x2: the NeuronCore sums and evaluates functions in another order than ATen's CPU
      kernels), or
  (b) the compiled result is as close to a higher-precision reference (the op run eagerly on
      inputs upcast to fp64 for fp32 samples, fp32 for bf16 samples) as eager is:
      |compiled - ref| <= rtol |ref| + max(atol, 2 max |eager - ref|) elementwise, with the
      dtype's default rtol/atol. This keeps eager's own rounding (e.g. a bf16 op that ATen
      computes in fp32 but AOTAutograd decomposes into several bf16 ops) from counting
      against the compiled result, while a wrong value still fails.
Integer and bool outputs must match exactly; NaNs compare equal.

"torch-mlir lowers" says whether torch-mlir alone lowers the sample's AOT graph(s) to
linalg-on-tensors (only builtin/func/arith/math/linalg/tensor ops left; tm_tensor, ml_program
and the like count as not lowered): the denominator of native coverage.

Ops run in worker processes (--workers, default 2), each op under a timeout (--timeout).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import multiprocessing
import os
import re
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Representative ops for --fast (and the test suite): elementwise, activations, matmuls,
# reductions, normalisation, data movement, and ops that must fall back.
FAST_OPS = [
    "add", "mul", "div.no_rounding_mode", "exp", "tanh", "sigmoid", "rsqrt", "abs", "where",
    "clamp", "maximum", "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu",
    "mm", "bmm", "addmm", "nn.functional.linear", "sum", "amax", "softmax",
    "nn.functional.layer_norm", "transpose", "reshape", "cat", "sort", "topk",
    "nn.functional.dropout",
]

STATUSES = ("native", "fallback", "wrong", "error", "skipped")
ORDER = {"wrong": 4, "error": 3, "fallback": 2, "native": 1, "skipped": 0}
TOLERANCE_SCALE = {"float32": 10.0, "bfloat16": 2.0}
BASE_TOLERANCE = {"float32": (1.3e-6, 1e-5), "bfloat16": (1.6e-2, 1e-5)}
LINALG_DIALECTS = ("builtin", "func", "arith", "math", "linalg", "tensor")


def op_key(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


# -- one sample ---------------------------------------------------------------------------------

@dataclasses.dataclass
class SampleResult:
    status: str
    detail: str = ""
    lowers: bool | None = None          # torch-mlir lowers the AOT graph(s) to linalg
    fallbacks: list = dataclasses.field(default_factory=list)   # "aten.op [category] reason"
    compiled_ops: int = 0
    shapes: str = ""
    seconds: float = 0.0


def tolerance(op, dtype_name: str) -> tuple[float, float]:
    import torch
    from torch.testing._internal.common_device_type import toleranceOverride

    dtype = getattr(torch, dtype_name)
    rtol, atol = BASE_TOLERANCE[dtype_name]
    for info in op.decorators:
        if getattr(info, "device_type", None) not in (None, "cpu"):
            continue
        for dec in getattr(info, "decorators", [info]):
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                rtol, atol = max(rtol, dec.d[dtype].rtol), max(atol, dec.d[dtype].atol)
    scale = TOLERANCE_SCALE[dtype_name]
    return rtol * scale, atol * scale


def _torch_mlir_linalg(gm, name: str) -> str:
    """torch-mlir alone: FX -> linalg-on-tensors; raises if other dialects remain."""
    from torch_mlir import fx, ir
    from torch_mlir.compiler_utils import OutputType

    module = fx.stateless_fx_import(gm, output_type=OutputType.LINALG_ON_TENSORS,
                                    model_name=name)
    foreign: set[str] = set()

    def visit(op):
        if op.name.split(".")[0] not in LINALG_DIALECTS:
            foreign.add(op.name)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    foreign.discard("cf.assert")      # run-time checks, not computation
    if foreign:
        raise RuntimeError(f"leaves {', '.join(sorted(foreign))}")
    return "ok"


def torch_mlir_lowers(graphs) -> bool:
    from torchneuron import backend

    for i, gm in enumerate(graphs):
        _, error, _ = backend._import(_torch_mlir_linalg, gm, f"coverage{i}")
        if error is not None:
            return False
    return True


def _describe_shapes(tensors) -> str:
    return ", ".join(f"{list(t.shape)}:{str(t.dtype).replace('torch.', '')}" for t in tensors)


def _clone(tree):
    import torch
    return torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: t.detach().clone(), tree)


def _same(a, b) -> bool:
    import torch
    la, lb = torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(
                    torch.nan_to_num(x.float() if x.is_complex() else x),
                    torch.nan_to_num(y.float() if y.is_complex() else y)):
                return False
        elif x != y and not (x != x and y != y):
            return False
    return True


def _torchneuron_raised(exc: BaseException) -> bool:
    tb = "".join(traceback.format_exception(exc))
    return "torchneuron" in tb and "BackendCompilerFailed" in type(exc).__name__ or \
        any("torchneuron" in (f.filename or "") for f in traceback.extract_tb(exc.__traceback__))


def run_sample(op, sample, dtype_name: str) -> SampleResult:
    import torch

    from torchneuron import backend

    start = time.perf_counter()
    leaves, spec = torch.utils._pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    tensors = [leaves[i] for i in positions]
    shapes = _describe_shapes(tensors)
    fn_op = op.op

    def fn(*ts):
        values = list(leaves)
        for i, t in zip(positions, ts):
            values[i] = t
        inp, args, kwargs = torch.utils._pytree.tree_unflatten(values, spec)
        return fn_op(inp, *args, **kwargs)

    def eager(seed):
        torch.manual_seed(seed)
        return fn(*_clone(tensors))

    try:
        expected = eager(0)
    except Exception as exc:
        return SampleResult("skipped", f"eager raises {type(exc).__name__}", shapes=shapes)
    out_tensors = [t for t in torch.utils._pytree.tree_leaves(expected)
                   if isinstance(t, torch.Tensor)]
    if not out_tensors:
        return SampleResult("skipped", "returns no tensor", shapes=shapes)
    try:   # random ops differ between seeds; empty* ops return uninitialised memory
        deterministic = (not UNINITIALISED.search(op_key(op)) and _same(expected, eager(0))
                         and _same(expected, eager(1)))
    except Exception:
        deterministic = False

    graphs: list = []
    real = backend.compile_fx_graph

    def capture(gm, example_inputs, name, options):
        graphs.append(gm)
        return real(gm, example_inputs, name, options)

    torch._dynamo.reset()
    first = len(backend.graph_reports())
    backend.compile_fx_graph = capture
    try:
        compiled = torch.compile(fn, backend="neuron", dynamic=False, fullgraph=True)
        torch.manual_seed(0)
        got = compiled(*_clone(tensors))
    except Exception as exc:
        return _classify_failure(exc, fn, tensors, shapes, start)
    finally:
        backend.compile_fx_graph = real
        torch._dynamo.reset()
    reports = backend.graph_reports()[first:]
    if not reports:
        return SampleResult("skipped", "no graph was compiled", shapes=shapes)
    lowers = torch_mlir_lowers(graphs)
    fallbacks = [f"{n.op} [{n.category}] {n.reason}" for r in reports for n in r.fallbacks]
    compiled_ops = sum(len(r.compiled) for r in reports)
    views_only = not fallbacks and not any(n.status == "compiled" for r in reports
                                           for n in r.nodes)
    result = SampleResult("fallback" if fallbacks else "native",
                          VIEWS_ONLY if views_only else "", lowers, fallbacks, compiled_ops,
                          shapes)
    try:
        if deterministic:
            check_close(op, fn, tensors, dtype_name, got, expected)
        else:
            _check_metadata(got, expected)
            result.detail = "values not compared (eager is not deterministic)"
    except Exception as exc:
        result.status = "wrong"
        result.detail = _mismatch(got, expected, exc)
    result.seconds = time.perf_counter() - start
    return result


VIEWS_ONLY = "views only: no compute to compile (runs in PyTorch)"
UNINITIALISED = re.compile(r"(^|[._])empty")
REFERENCE_DTYPE = {"float32": "float64", "bfloat16": "float32"}


def check_close(op, fn, tensors, dtype_name, got, expected) -> None:
    """Raise unless `got` matches eager `expected` within tolerance(op, dtype), or is as close
    to a higher-precision reference as eager is: |got - ref| <= rtol |ref| + max(atol,
    2 max |expected - ref|) with the dtype's base tolerances (eager's own rounding, e.g. bf16
    ops decomposed into several bf16 ops, is then not held against the compiled result)."""
    import torch

    rtol, atol = tolerance(op, dtype_name)
    try:
        torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, equal_nan=True)
        return
    except AssertionError as exc:
        first = exc
    dtype, ref_dtype = getattr(torch, dtype_name), getattr(torch, REFERENCE_DTYPE[dtype_name])
    try:
        torch.manual_seed(0)
        ref = fn(*[t.detach().clone().to(ref_dtype) if t.dtype == dtype else t.detach().clone()
                   for t in tensors])
    except Exception:
        raise first from None
    g, e, r = (torch.utils._pytree.tree_leaves(x) for x in (got, expected, ref))
    if not (len(g) == len(e) == len(r)):
        raise first
    base_rtol, base_atol = BASE_TOLERANCE[dtype_name]
    for gi, ei, ri in zip(g, e, r):
        if not (isinstance(gi, torch.Tensor) and isinstance(ri, torch.Tensor) and
                ei.dtype == dtype and ri.shape == ei.shape):
            torch.testing.assert_close(gi, ei, rtol=rtol, atol=atol, equal_nan=True)
            continue
        torch.testing.assert_close(gi, ei, rtol=1e9, atol=1e9, equal_nan=True)  # meta
        eager_err = (ei.to(ref_dtype) - ri).abs().nan_to_num(0.0, 0.0, 0.0)
        slack = max(base_atol, 2 * eager_err.max().item()) if eager_err.numel() else base_atol
        torch.testing.assert_close(gi.to(ref_dtype), ri.to(ref_dtype), rtol=base_rtol,
                                   atol=slack, equal_nan=True)


def _check_metadata(got, expected) -> None:
    import torch
    a, b = torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(expected)
    assert len(a) == len(b), f"{len(a)} outputs, expected {len(b)}"
    for x, y in zip(a, b):
        if isinstance(y, torch.Tensor):
            assert isinstance(x, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype, \
                f"got {getattr(x, 'shape', x)}/{getattr(x, 'dtype', '')}, expected " \
                f"{y.shape}/{y.dtype}"


def _mismatch(got, expected, exc) -> str:
    import torch
    a, b = torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(expected)
    parts = []
    for i, (x, y) in enumerate(zip(a, b)):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and \
                x.shape == y.shape and x.dtype == y.dtype and x.numel():
            if x.dtype.is_floating_point:
                diff = (x.double() - y.double()).abs()
                finite = torch.isfinite(diff)
                worst = diff[finite].max().item() if finite.any() else float("nan")
                nan_mismatch = (torch.isnan(x) != torch.isnan(y)).sum().item()
                parts.append(f"out{i} max abs err {worst:.3g}"
                             + (f", {nan_mismatch} NaN mismatches" if nan_mismatch else ""))
            elif not torch.equal(x, y):
                parts.append(f"out{i} {(x != y).sum().item()} of {x.numel()} elements differ")
    text = "; ".join(parts) or _first_line(str(exc))
    return text


def _first_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.strip().split("\n")[:1])
    return text if len(text) <= limit else text[:limit] + "..."


def _classify_failure(exc, fn, tensors, shapes, start) -> SampleResult:
    import torch

    name = type(exc).__name__
    if isinstance(exc, torch._dynamo.exc.Unsupported) or name in ("Unsupported", "UserError"):
        return SampleResult("skipped", f"Dynamo cannot trace it: {_first_line(str(exc), 120)}",
                            shapes=shapes)
    if name == "BackendCompilerFailed" or _torchneuron_raised(exc):
        return SampleResult("error", f"{name}: {_first_line(str(exc))}", shapes=shapes,
                            seconds=time.perf_counter() - start)
    torch._dynamo.reset()   # not ours? see whether torch.compile fails without torchneuron
    try:
        torch.compile(fn, backend="aot_eager", dynamic=False, fullgraph=True)(*_clone(tensors))
    except Exception as again:
        return SampleResult("skipped", f"torch.compile(aot_eager) raises "
                            f"{type(again).__name__}", shapes=shapes)
    finally:
        torch._dynamo.reset()
    return SampleResult("error", f"{name}: {_first_line(str(exc))}", shapes=shapes,
                        seconds=time.perf_counter() - start)


# -- one op -------------------------------------------------------------------------------------

def run_op(op, dtype_name: str, samples: int) -> dict:
    import torch

    start = time.perf_counter()
    dtype = getattr(torch, dtype_name)
    if dtype not in op.supported_dtypes("cpu"):
        return {"status": "skipped", "detail": f"no {dtype_name} support on CPU", "samples": []}
    torch.manual_seed(0)
    try:   # the first samples without zero-size tensors (those always run in PyTorch)
        inputs, empty = [], []
        for sample in op.sample_inputs("cpu", dtype):
            leaves = torch.utils._pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
            if any(isinstance(t, torch.Tensor) and t.numel() == 0 for t in leaves):
                empty.append(sample)
                continue
            inputs.append(sample)
            if len(inputs) >= samples:
                break
        inputs = inputs or empty[:samples]
    except Exception as exc:
        return {"status": "skipped", "detail": f"sample_inputs raises {type(exc).__name__}",
                "samples": []}
    results = []
    for sample in inputs:
        try:
            results.append(run_sample(op, sample, dtype_name))
        except Exception as exc:   # a bug in this script or in torch: say so
            results.append(SampleResult("error", f"sweep: {type(exc).__name__}: "
                                        f"{_first_line(str(exc))}"))
    return summarize(results, time.perf_counter() - start)


def summarize(results: list[SampleResult], seconds: float) -> dict:
    if not results:
        return {"status": "skipped", "detail": "no samples", "samples": []}
    status = max((r.status for r in results), key=ORDER.__getitem__)
    worst = next(r for r in results if r.status == status)
    detail = worst.detail
    if status == "native":
        details = {r.detail for r in results if r.status == "native"}
        detail = VIEWS_ONLY if details == {VIEWS_ONLY} else \
            next((d for d in details if d and d != VIEWS_ONLY), "")
    if status == "fallback":
        detail = collections.Counter(f for r in results for f in r.fallbacks).most_common(1)[0][0]
    lowers = [r.lowers for r in results if r.lowers is not None]
    return {
        "status": status, "detail": detail,
        "lowers": (all(lowers) if lowers else None),
        "seconds": round(seconds, 2),
        "samples": [dataclasses.asdict(r) for r in results],
    }


# -- workers ------------------------------------------------------------------------------------

def _worker(conn, dtype_names, samples) -> None:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("torchneuron").setLevel(logging.ERROR)
    import torch
    torch.set_num_threads(1)
    from torch.testing._internal.common_methods_invocations import op_db
    ops = {op_key(op): op for op in op_db}
    conn.send(("ready", None))
    while True:
        key = conn.recv()
        if key is None:
            return
        record = {}
        for dtype_name in dtype_names:
            try:
                record[dtype_name] = run_op(ops[key], dtype_name, samples)
            except BaseException as exc:  # noqa: BLE001 - report and go on
                record[dtype_name] = {"status": "error", "detail": f"sweep: {exc!r}",
                                      "samples": []}
        conn.send(("done", (key, record)))


class Pool:
    """N worker processes; an op that runs past its timeout or kills its worker is recorded as
    an error and the worker is replaced."""

    def __init__(self, workers: int, dtype_names, samples: int, timeout: float):
        self.ctx = multiprocessing.get_context("spawn")
        self.args = (dtype_names, samples)
        self.timeout = timeout
        self.dtype_names = dtype_names
        self.slots = [self._start() for _ in range(workers)]

    def _start(self):
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(child, *self.args), daemon=True)
        proc.start()
        child.close()
        return {"proc": proc, "conn": parent, "key": None, "since": None, "ready": False}

    def run(self, keys, on_result) -> None:
        pending = list(keys)
        while pending or any(s["key"] for s in self.slots):
            for i, slot in enumerate(self.slots):
                conn = slot["conn"]
                if slot["key"] is not None and time.monotonic() - slot["since"] > self.timeout:
                    self._fail(i, f"timeout after {self.timeout:.0f} s", on_result)
                    continue
                if not slot["proc"].is_alive() and not conn.poll():
                    if slot["key"] is not None:
                        self._fail(i, f"worker died (exit code {slot['proc'].exitcode})",
                                   on_result)
                    else:
                        self.slots[i] = self._start()
                    continue
                if conn.poll():
                    try:
                        kind, payload = conn.recv()
                    except (EOFError, OSError):
                        continue
                    if kind == "ready":
                        slot["ready"] = True
                    else:
                        on_result(*payload)
                        slot["key"] = None
                if slot["ready"] and slot["key"] is None and pending:
                    slot["key"], slot["since"] = pending.pop(0), time.monotonic()
                    conn.send(slot["key"])
            time.sleep(0.05)

    def _fail(self, i, why, on_result) -> None:
        slot = self.slots[i]
        slot["proc"].kill()
        slot["proc"].join()
        on_result(slot["key"], {d: {"status": "error", "detail": why, "samples": []}
                                for d in self.dtype_names})
        self.slots[i] = self._start()

    def close(self) -> None:
        for slot in self.slots:
            try:
                slot["conn"].send(None)
            except (OSError, BrokenPipeError):
                pass
        for slot in self.slots:
            slot["proc"].join(timeout=10)
            if slot["proc"].is_alive():
                slot["proc"].kill()


# -- reporting ------------------------------------------------------------------------------------

def totals(results: dict, dtype_name: str) -> dict:
    counts = collections.Counter(r[dtype_name]["status"] for r in results.values()
                                 if dtype_name in r)
    lowerable = [r[dtype_name] for r in results.values()
                 if dtype_name in r and r[dtype_name].get("lowers")]
    native_lowerable = sum(1 for r in lowerable if r["status"] == "native")
    views_only = sum(1 for r in results.values() if dtype_name in r and
                     r[dtype_name]["status"] == "native" and
                     r[dtype_name].get("detail") == VIEWS_ONLY)
    return {**{s: counts.get(s, 0) for s in STATUSES}, "native_views_only": views_only,
            "ops": sum(counts.values()),
            "torch_mlir_lowers": len(lowerable),
            "native_of_lowerable": native_lowerable,
            "native_pct_of_lowerable": round(100 * native_lowerable / len(lowerable), 1)
            if lowerable else 0.0}


def _cell(text: str, limit: int = 160) -> str:
    text = re.sub(r"\s+", " ", text or "").replace("|", "\\|")
    return text if len(text) <= limit else text[:limit] + "..."


def _normalise_reason(reason: str) -> str:
    """Without what varies between samples: numbers, file paths, node names."""
    reason = re.sub(r'loc\([^)]*\)+', "loc(...)", reason)
    reason = re.sub(r'"/[^"]*"', '"..."', reason)
    return re.sub(r"\d+", "N", reason)


def _reason_groups(results: dict, dtype_name: str, category=None):
    """(normalised '[category] reason', OpInfos affected, ATen ops) over all fallbacks."""
    ops: dict[str, set] = collections.defaultdict(set)
    atens: dict[str, set] = collections.defaultdict(set)
    for key, r in results.items():
        if dtype_name not in r or r[dtype_name]["status"] != "fallback":
            continue
        for sample in r[dtype_name]["samples"]:
            for f in sample["fallbacks"]:
                aten, _, reason = f.partition(" ")
                if category and not reason.startswith(f"[{category}]"):
                    continue
                reason = _normalise_reason(reason)
                ops[reason].add(key)
                atens[reason].add(aten)
    return sorted(((reason, ops[reason], atens[reason]) for reason in ops),
                  key=lambda item: (-len(item[1]), item[0]))


def markdown(results: dict, dtype_names, meta: dict) -> str:
    lines = ["# Operator coverage", "",
             "Generated by `.venv/bin/python bench/op_coverage.py --write docs/op-coverage.md` "
             f"({meta['date']}, commit {meta['commit']}, {meta['samples']} sample(s) per op and "
             f"dtype, {meta['minutes']:.0f} min). Do not edit by hand.", "",
             "Each OpInfo of PyTorch's `op_db` is compiled with `torch.compile(backend=\"neuron\")`"
             " on its sample inputs and compared with eager PyTorch (see the docstring of "
             "`bench/op_coverage.py` for statuses and tolerances). *native*: every node ran on "
             "the NeuronCore (or the graph had only views, see the last column); *fallback*: "
             "some node ran in PyTorch (the most frequent reason is shown); *wrong*: results "
             "differ; *error*: the backend raised; *skipped*: not testable this way. "
             "*torch-mlir lowers*: torch-mlir alone lowers the sample's graph to "
             "linalg-on-tensors; *native of those*: the share of those ops that is native.", "",
             "## Totals", "",
             "| dtype | ops | native | (views only) | fallback | wrong | error | skipped "
             "| torch-mlir lowers | native of those |", "|---|---|---|---|---|---|---|---|---|---|"]
    for d in dtype_names:
        t = totals(results, d)
        lines.append(f"| {d} | {t['ops']} | {t['native']} | {t['native_views_only']} | "
                     f"{t['fallback']} | {t['wrong']} | {t['error']} | {t['skipped']} | "
                     f"{t['torch_mlir_lowers']} | {t['native_of_lowerable']} "
                     f"({t['native_pct_of_lowerable']}%) |")
    for d in dtype_names:
        bad = [(k, r[d]) for k, r in sorted(results.items())
               if d in r and r[d]["status"] in ("wrong", "error")]
        if bad:
            lines += ["", f"## Wrong and error ({d})", ""]
            for k, r in bad:
                sample = next((s for s in r["samples"] if s["status"] == r["status"]), {})
                lines.append(f"- `{k}` **{r['status']}**: {_cell(r['detail'], 300)}"
                             + (f" (inputs {sample.get('shapes')})" if sample.get("shapes")
                                else ""))
    d0 = dtype_names[0]
    runtime = _reason_groups(results, d0, "runtime")
    if runtime:
        lines += ["", f"## Compiled, but the simulator rejected the program ({d0})", "",
                  "These partitions compiled and then failed on the device, so they ran in "
                  "PyTorch: compiler (or simulator) bugs rather than missing lowerings.", "",
                  "| OpInfos | reason | OpInfos affected |", "|---|---|---|"]
        for reason, ops, _ in runtime:
            lines.append(f"| {len(ops)} | {_cell(reason, 200)} | "
                         f"{_cell(', '.join(sorted(ops)), 300)} |")
    groups = _reason_groups(results, d0)
    if groups:
        lines += ["", f"## Most frequent fallback reasons ({d0})", "",
                  "| OpInfos | [category] reason | ATen ops that fell back |", "|---|---|---|"]
        for reason, ops, atens in groups[:40]:
            lines.append(f"| {len(ops)} | {_cell(reason, 200)} | "
                         f"{_cell(', '.join(sorted(atens)), 200)} |")
    lines += ["", "## Per op", "",
              "| op | " + " | ".join(dtype_names) + " | torch-mlir lowers | notes |",
              "|---|" + "---|" * len(dtype_names) + "---|---|"]
    for key in sorted(results):
        r = results[key]
        statuses = [r.get(d, {}).get("status", "") for d in dtype_names]
        lowers = r.get(d0, {}).get("lowers")
        lowers_text = {True: "yes", False: "no", None: ""}[lowers]
        notes = [f"{d}: {r[d]['detail']}" if len(dtype_names) > 1 and i else r[d]["detail"]
                 for i, d in enumerate(dtype_names)
                 if d in r and r[d].get("detail") and (i == 0 or r[d]["detail"] !=
                                                       r[d0].get("detail"))]
        lines.append(f"| `{key}` | " + " | ".join(statuses) + f" | {lowers_text} | "
                     f"{_cell('; '.join(notes))} |")
    return "\n".join(lines) + "\n"


def _commit() -> str:
    import subprocess
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def select_ops(args) -> list[str]:
    from torch.testing._internal.common_methods_invocations import op_db

    keys = [op_key(op) for op in op_db]
    if args.fast:
        wanted = FAST_OPS
    elif args.ops:
        wanted = [w.strip() for w in args.ops.split(",") if w.strip()]
    else:
        return list(dict.fromkeys(keys))
    chosen = []
    for w in wanted:      # an exact name.variant, else every variant of the name
        matches = [w] if w in keys else [k for k in keys if k.split(".")[0] == w]
        if not matches:
            raise SystemExit(f"op_coverage: no OpInfo named {w}")
        chosen += matches
    return list(dict.fromkeys(chosen))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", help="comma-separated OpInfo names (name or name.variant)")
    parser.add_argument("--fast", action="store_true", help=f"the {len(FAST_OPS)} ops of FAST_OPS")
    parser.add_argument("--dtype", default="float32,bfloat16",
                        help="comma-separated: float32, bfloat16 (default both)")
    parser.add_argument("--samples", type=int, default=2, help="samples per op and dtype")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per op")
    parser.add_argument("--write", metavar="MD", help="write the markdown report here")
    parser.add_argument("--json", metavar="FILE", help="write every result as JSON here")
    parser.add_argument("--commit", help="the commit named in the report (default: git HEAD "
                        "of this checkout; for a sweep of an exported snapshot)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every op's result")
    args = parser.parse_args(argv)
    dtype_names = [d.strip() for d in args.dtype.split(",") if d.strip()]
    for d in dtype_names:
        if d not in BASE_TOLERANCE:
            parser.error(f"unsupported dtype {d}")
    keys = select_ops(args)
    start = time.time()
    results: dict[str, dict] = {}

    def on_result(key, record):
        results[key] = record
        if args.verbose or any(r["status"] in ("wrong", "error") for r in record.values()):
            line = "  ".join(f"{d}={record[d]['status']}" for d in dtype_names if d in record)
            detail = next((record[d]["detail"] for d in dtype_names
                           if d in record and record[d].get("detail")), "")
            print(f"[{len(results)}/{len(keys)}] {key}: {line}  {_cell(detail, 150)}",
                  flush=True)
        elif len(results) % 50 == 0:
            print(f"[{len(results)}/{len(keys)}] {(time.time() - start) / 60:.1f} min",
                  flush=True)

    pool = Pool(max(1, args.workers), dtype_names, args.samples, args.timeout)
    try:
        pool.run(keys, on_result)
    finally:
        pool.close()
    minutes = (time.time() - start) / 60
    for d in dtype_names:
        t = totals(results, d)
        print(f"{d}: {t['ops']} ops: native {t['native']}, fallback {t['fallback']}, wrong "
              f"{t['wrong']}, error {t['error']}, skipped {t['skipped']}; torch-mlir lowers "
              f"{t['torch_mlir_lowers']}, native {t['native_of_lowerable']} of them "
              f"({t['native_pct_of_lowerable']}%)")
    print(f"{len(results)} ops in {minutes:.1f} min")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dtypes": dtype_names, "results": results,
                       "totals": {d: totals(results, d) for d in dtype_names}}, f, indent=1)
    if args.write:
        meta = {"date": time.strftime("%Y-%m-%d"), "commit": args.commit or _commit(),
                "samples": args.samples, "minutes": minutes}
        with open(args.write, "w") as f:
            f.write(markdown(results, dtype_names, meta))
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
