"""neuron-tune: search each kernel's tiling with the simulator's cost model and store the best
configuration in a tuning database that later compilations read.

    neuron-tune GRAPH.trn.mlir [--db PATH] [--target trn2|trn1] [--max-candidates N]
                [--quiet] [--json]

GRAPH is a `.trn.mlir` (what TORCHNEURON_DUMP_DIR leaves for every compiled graph; the trn
stage) or a `.linalg.mlir`. For a linalg graph the fusion and layout choices come first: the
default pipeline and each of matmul-epilogue fusion, elementwise fusion, layout assignment, mlp
fusion, weight-gradient fusion, mlp-rows and linear-rows fusion, the attention output's
fusion into its projection, the QKV projection's into the attention and the FFN's behind
them turned off are compiled and simulated, and the fastest is stored
as the graph's entry (keyed by the linalg IR; compile_linalg applies it); its kernels are
then tuned as below. For each kernel, in program
order, candidate configurations are set on it as attributes (the other kernels keep the best
found so far), the whole graph is compiled (convert-trn-to-nisa, trn-plan-memory,
trn-schedule, NEFF) and simulated with random inputs, and the fastest simulated time wins;
a candidate that does not compile (SBUF overflow, ...) is skipped. Candidates:
- matmul kernels: orientation ("mn", "nm"), then for the better one which operand stays
  resident ("p", "f") and the resident block size (gemm_resident, gemm_block);
- elementwise and reduce kernels: free_tile (the default, halved, quartered, doubled).
The database (--db, else TORCHNEURON_TUNING_DB, else ./torchneuron-tuning.json) is keyed by
a hash of the kernel's IR and the target (compiler/tuning.py); entries for kernels whose
default was already the fastest are stored too, so a later compilation need not guess.
Compilations use it with CompileOptions(tuning_db=PATH) or TORCHNEURON_TUNING_DB=PATH
(trn-tile applies it). A progress bar goes to stderr (--quiet: none). Exit status: 0 done,
1 error (unreadable input or database: the file is named), 2 usage. Never imports torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

DEFAULT_DB = "torchneuron-tuning.json"


@dataclasses.dataclass
class KernelResult:
    index: int
    key: str
    kind: str
    summary: str
    default_ns: float
    best_ns: float
    config: dict
    tried: int
    failed: int


class Progress:
    """A one-line progress bar on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, total: int, enabled: bool = True, stream=None):
        self.total, self.done, self.enabled = total, 0, enabled
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.monotonic()

    def grow(self, extra: int) -> None:
        self.total += extra

    def step(self, text: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        width = 24
        filled = min(width, width * self.done // max(1, self.total))
        bar = "#" * filled + "." * (width - filled)
        line = (f"[{bar}] {self.done}/{self.total} {time.monotonic() - self.start:5.0f}s "
                f"{text}")
        if self.tty:
            self.stream.write("\r\x1b[K" + line[:200])
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _candidates_matmul(m: int, n: int, target, orientation: str) -> list[dict]:
    """gemm_resident x gemm_block configurations for one orientation of C[m, n]."""
    parts, free = (m, n) if orientation == "mn" else (n, m)
    counts = {"p": -(-parts // target.pe_cols), "f": -(-free // target.matmul_max_moving)}
    configs = []
    for resident in ("p", "f"):
        count = counts[resident]
        blocks = sorted({count, -(-count // 2), -(-count // 3), -(-count // 4)}, reverse=True)
        for block in blocks:
            configs.append({"orientation": orientation, "gemm_resident": resident,
                            "gemm_block": block})
    return configs


def _candidates_free_tile(default: int) -> list[dict]:
    sizes = [default, default // 2, default // 4, default * 2]
    seen = []
    for size in sizes:
        if size >= 64 and size not in seen:
            seen.append(size)
    return [{"free_tile": s} for s in seen]


class Tuner:
    def __init__(self, text: str, target_name: str, progress: Progress, max_candidates: int,
                 seed: int = 0):
        from torchneuron.target import get_target

        self.text = text
        self.target = get_target(target_name or None)
        self.progress = progress
        self.max_candidates = max_candidates
        self.seed = seed
        self._inputs = None

    # -- one candidate -------------------------------------------------------------------

    def measure(self, configs: dict[int, dict]) -> float:
        """Simulated ns of the graph with `configs` (kernel index -> attributes) applied;
        raises on a compile or simulation failure."""
        from torch_mlir import ir

        from torchneuron.compiler.codegen.neff_writer import emit_neff
        from torchneuron.compiler.passes import build_pass_manager, parse_pipeline
        from torchneuron.compiler.tuning import apply_config
        from torchneuron.dialects import make_context
        from torchneuron.runtime import Device, load

        context = make_context()
        with context:
            module = ir.Module.parse(self.text)
            for index, kernel in enumerate(kernels_of(module)):
                if index in configs:
                    apply_config(kernel, configs[index])
            passes = (f"trn-tile{{target={self.target.name}}},"
                      f"convert-trn-to-nisa{{target={self.target.name}}},"
                      "trn-plan-memory,trn-schedule")
            build_pass_manager(parse_pipeline(passes), context).run(module.operation)
            neff = emit_neff(module)
        program = load(neff)
        result = Device(self.target).execute(program, self._random_inputs(program))
        return float(result.profile.total_ns)

    def _random_inputs(self, program) -> list:
        import numpy as np

        if self._inputs is None:
            rng = np.random.default_rng(self.seed)
            arrays = []
            for spec in program.inputs:
                dtype = np.dtype(spec.dtype)
                if dtype.kind == "f" or dtype.kind == "V" or "float" in str(spec.dtype):
                    arrays.append(rng.standard_normal(spec.shape).astype(spec.dtype))
                elif dtype.kind == "b":
                    arrays.append(np.zeros(spec.shape, dtype=spec.dtype))
                else:      # indices: zero is in range of every gather
                    arrays.append(np.zeros(spec.shape, dtype=spec.dtype))
            self._inputs = arrays
        return self._inputs

    # -- the search ------------------------------------------------------------------------

    def run(self) -> list[KernelResult]:
        from torch_mlir import ir

        from torchneuron.compiler import ir_utils as U
        from torchneuron.compiler.passes import build_pass_manager, parse_pipeline
        from torchneuron.compiler.tuning import TUNING_ATTRS, kernel_key, kernel_summary
        from torchneuron.dialects import make_context

        infos = []       # the kernels with something to tune, by position in program order
        context = make_context()
        with context:
            module = ir.Module.parse(self.text)
            # The defaults as trn-tile chooses them, to start each search from.
            build_pass_manager(parse_pipeline(f"trn-tile{{target={self.target.name}}}"),
                               context).run(module.operation)
            for position, kernel in enumerate(kernels_of(module)):
                kind = U.str_attr(kernel, "kind") if "kind" in kernel.attributes else ""
                if kind == "mlp":
                    continue        # its lowering fixes its tiling
                info = {"position": position, "key": kernel_key(kernel, self.target.name),
                        "kind": kind, "summary": kernel_summary(kernel)}
                body = [op.operation for op in kernel.regions[0].blocks[0].operations]
                matmul = next((op for op in body if op.name == "trn.matmul"), None)
                if matmul is not None:
                    info.update(kind="matmul", m=U.shape(matmul.operands[0])[-2],
                                n=U.shape(matmul.operands[1])[-1],
                                default={name: (U.str_attr(kernel, name) if kind is str
                                                else U.int_attr(kernel, name))
                                         for name, kind in TUNING_ATTRS.items()
                                         if name != "free_tile"
                                         and name in kernel.attributes})
                elif kind in ("elementwise", "reduce") and "free_tile" in kernel.attributes:
                    info["free_tile"] = U.int_attr(kernel, "free_tile")
                    info["default"] = {"free_tile": info["free_tile"]}
                else:
                    continue
                infos.append(info)

        def planned(info) -> int:
            return min(self.max_candidates, 1 + 8 if info["kind"] == "matmul" else 3)

        self.progress.grow(1 + sum(planned(info) for info in infos))
        best_configs: dict[int, dict] = {}
        current_ns = self.measure({})
        self.progress.step(f"default: {current_ns / 1e3:.1f} us")
        results = []
        seen: dict[str, dict] = {}
        for info in infos:
            position = info["position"]
            if info["key"] in seen:      # the same kernel again: same configuration
                best_configs[position] = seen[info["key"]]
                continue
            tried = failed = 0
            kernel_default = current_ns
            best: list = [current_ns, None]

            def attempt(config: dict) -> None:
                nonlocal tried, failed
                if tried >= self.max_candidates:
                    return
                tried += 1
                label = f"kernel {position} {_fmt(config)}"
                try:
                    ns = self.measure({**best_configs, position: config})
                except Exception as exc:     # a candidate that cannot compile or run
                    failed += 1
                    self.progress.step(f"{label}: skipped ({type(exc).__name__}: "
                                       f"{str(exc)[:60]})")
                    return
                if ns < best[0]:
                    best[:] = [ns, config]
                self.progress.step(f"{label}: {ns / 1e3:.1f} us (best {best[0] / 1e3:.1f})")
                return ns

            if info["kind"] == "matmul":
                default_orientation = info["default"]["orientation"]
                timed = {default_orientation: kernel_default}
                for orientation in ("mn", "nm"):
                    if orientation != default_orientation:
                        ns = attempt({"orientation": orientation})
                        if ns is not None:
                            timed[orientation] = ns
                chosen = min(timed, key=timed.get)
                for config in _candidates_matmul(info["m"], info["n"], self.target, chosen):
                    if config != info["default"]:
                        attempt(config)
            else:
                for config in _candidates_free_tile(info["free_tile"])[1:]:
                    attempt(config)
            self.progress.grow(tried - planned(info))
            # The default's attributes when nothing beat them (trn-tile's choices, recorded so a
            # later compilation need not redo the search), else the best found.
            config = best[1] or info["default"]
            if best[1] is not None:
                best_configs[position] = best[1]
                current_ns = best[0]
            seen[info["key"]] = config
            results.append(KernelResult(position, info["key"], info["kind"], info["summary"],
                                        kernel_default, best[0], config, tried, failed))
        return results


def _fmt(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def kernels_of(module) -> list:
    from torchneuron.compiler import ir_utils as U

    return [op for func in U.functions(module.operation) for op in U.body_ops(func)
            if op.name == "trn.kernel"]


def is_trn_stage(text: str) -> bool:
    return "trn.kernel" in text


def to_trn_stage(text: str, target: str, choices: dict | None = None) -> str:
    """The trn stage of a module: unchanged if it already holds trn kernels, else the trn
    stage of the pipeline, with the fusion/layout `choices` (CompileOptions fields), run on
    it (a linalg module)."""
    if is_trn_stage(text):
        return text
    from torch_mlir import ir

    from torchneuron.compiler.passes import build_pass_manager, parse_pipeline
    from torchneuron.compiler.pipeline import CompileOptions, stages
    from torchneuron.dialects import make_context

    options = CompileOptions(target=target, tuning_db="", **(choices or {}))
    context = make_context()
    with context:
        module = ir.Module.parse(text)
        build_pass_manager(parse_pipeline(stages(options)[0].passes), context).run(
            module.operation)
        return module.operation.get_asm(enable_debug_info=True)


def tune(text: str, db_path: str, target: str = "", max_candidates: int = 12,
         progress: Progress | None = None) -> list[KernelResult]:
    """Tune every kernel of a trn (or linalg) module's text and record the results in the
    database at `db_path` (written atomically). Returns one result per tuned kernel."""
    from torchneuron.compiler.tuning import TuningDB
    from torchneuron.target import get_target

    target_name = get_target(target or None).name
    db = TuningDB.load(db_path)          # fail before searching if the file is corrupt
    progress = progress or Progress(0, enabled=False)
    results = []
    if not is_trn_stage(text):
        graph, text = _tune_graph(text, target_name, progress)
        results.append(graph)
    results += Tuner(text, target_name, progress, max_candidates).run()
    for r in results:
        db.record(r.key, {"target": target_name, "kind": r.kind, "summary": r.summary,
                          "config": r.config, "default_ns": r.default_ns,
                          "tuned_ns": r.best_ns})
    db.save()
    return results


# Fusion and layout choices tried for a linalg graph: the defaults, and each turned off.
GRAPH_VARIANTS = ({}, {"fuse_matmul_epilogue": False}, {"fuse_elementwise": False},
                  {"layout_assignment": False}, {"fuse_mlp": False},
                  {"fuse_weight_gradients": False}, {"fuse_mlp_rows": False},
                  {"fuse_linear_rows": False}, {"fuse_attention_output": False},
                  {"fuse_attention_qkv": False}, {"fuse_attention_ffn": False},
                  {"fuse_attention_qkv_saved": False}, {"fuse_input_rows": False},
                  {"fuse_mlp_saved": False}, {"fuse_mlp_saved_gradient": False})


def _tune_graph(text: str, target: str, progress: Progress) -> tuple[KernelResult, str]:
    """The fastest fusion/layout choices for a linalg graph (each variant compiled with its
    kernels' default tiling and simulated); returns its result and the trn stage it gives."""
    from torch_mlir import ir

    from torchneuron.compiler.pipeline import CompileOptions
    from torchneuron.compiler.tuning import GRAPH_OPTIONS, graph_key
    from torchneuron.dialects import make_context

    with make_context():
        key = graph_key(ir.Module.parse(text), target)
    defaults = {name: getattr(CompileOptions(), name) for name in GRAPH_OPTIONS}
    progress.grow(len(GRAPH_VARIANTS))
    timed = []
    for variant in GRAPH_VARIANTS:
        label = "graph " + (_fmt(variant) or "default fusion")
        try:
            trn = to_trn_stage(text, target, variant)
            ns = Tuner(trn, target, progress, 1).measure({})
        except Exception as exc:     # a variant that does not compile
            progress.step(f"{label}: skipped ({type(exc).__name__})")
            continue
        progress.step(f"{label}: {ns / 1e3:.1f} us")
        timed.append((ns, len(timed), variant, trn))
    if not timed:
        raise RuntimeError("no fusion variant of the graph compiles")
    best_ns, _, variant, trn = min(timed)
    default_ns = next(ns for ns, _, v, _ in timed if not v) if any(not v for *_, v, _ in timed) \
        else best_ns
    return KernelResult(-1, key, "graph", "fusion and layout", default_ns, best_ns,
                        {**defaults, **variant}, len(timed), len(GRAPH_VARIANTS) - len(timed)), trn


def main(argv: list[str] | None = None) -> int:
    from torchneuron import config
    from torchneuron.compiler.tuning import TuningDBError
    from torchneuron.target import TARGETS
    from torchneuron.tools.neuron_opt import read_text

    parser = argparse.ArgumentParser(prog="neuron-tune", description=__doc__.split("\n")[0])
    parser.add_argument("input", help="a .trn.mlir (or .linalg.mlir) graph")
    parser.add_argument("--db", help="tuning database to update (default: "
                        f"TORCHNEURON_TUNING_DB, else ./{DEFAULT_DB})")
    parser.add_argument("--target", choices=sorted(TARGETS), help="target (default: "
                        "TORCHNEURON_TARGET, else trn2)")
    parser.add_argument("--max-candidates", type=int, default=12,
                        help="candidates simulated per kernel at most (12)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    db_path = args.db or config.TUNING_DB.get() or DEFAULT_DB
    text = read_text("neuron-tune", args.input)
    if text is None:
        return 1
    progress = Progress(0, enabled=not args.quiet)
    try:
        results = tune(text, db_path, args.target or "", args.max_candidates, progress)
    except TuningDBError as exc:
        progress.close()
        print(f"neuron-tune: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:     # the input does not parse or its default does not compile
        progress.close()
        print(f"neuron-tune: error: {args.input}: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 1
    progress.close()
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in results], indent=1))
    else:
        print(f"tuning database: {os.path.abspath(db_path)}")
        for r in results:
            gain = r.default_ns / r.best_ns if r.best_ns else float("nan")
            what = "graph" if r.kind == "graph" else f"kernel {r.index}"
            print(f"{what} {r.summary}: {r.default_ns / 1e3:.1f} us -> "
                  f"{r.best_ns / 1e3:.1f} us ({gain:.2f}x) with {_fmt(r.config)} "
                  f"[{r.tried} tried, {r.failed} skipped]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
