"""The `neuron` backend for torch.compile.

    torch.compile(model, backend="neuron")                       # registered entry point
    torch.compile(model, backend="neuron", options={"target": "trn1"})
    torch.compile(model, backend="neuron", options={"fallback": False})   # raise, don't fall back

Dynamo hands over an FX graph; AOTAutograd turns it into functional, core-ATen forward (and
backward) graphs. Each graph is split (torchneuron.partition): the nodes the compiler takes are
grouped into partitions, each compiled to a NEFF (see torchneuron.compiler.pipeline) and run on
the simulated NeuronCore through the runtime; the rest runs in PyTorch on the CPU, and every
such fallback is reported with its reason and source line (torchneuron.report, logged at INFO
on the "torchneuron" logger; `torchneuron.explain` collects them). With TORCHNEURON_DUMP_DIR
set, every compiled partition leaves its stages and a replay bundle (NAME.inputs.npz,
NAME.expected.npz) there, and every graph its split (NAME.split.fx.txt).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import os
import re
import sys
import threading
import time
from typing import Any, Callable

from torchneuron import config, early_backward
from torchneuron.gc_pause import older_objects_set_aside

log = logging.getLogger("torchneuron")

_graph_ids = itertools.count()
_lock = threading.Lock()
_compiled: list["CompiledGraph"] = []
_reports: list = []


def compiled_graphs() -> list["CompiledGraph"]:
    """Every partition this process has compiled, oldest first (for reports and tools)."""
    return list(_compiled)


def graph_reports() -> list:
    """The torchneuron.report.GraphReport of every graph this process has compiled, oldest
    first: what was compiled, what fell back to PyTorch and why."""
    return list(_reports)


@dataclasses.dataclass(frozen=True)
class BackendOptions:
    compile: Any          # torchneuron.compiler.pipeline.CompileOptions
    fallback: bool = True  # False: raise the compiler's error instead of falling back

    @staticmethod
    def from_dict(options: dict | None) -> "BackendOptions":
        from torchneuron.compiler.pipeline import CompileOptions, options_dict

        options = options_dict(options)
        fallback = options.pop("fallback", True)
        if not isinstance(fallback, bool):
            raise ValueError(f"torchneuron option fallback must be a bool, not {fallback!r}")
        return BackendOptions(CompileOptions.from_dict(options), fallback)


def _backend_options(options) -> BackendOptions:
    if isinstance(options, BackendOptions):
        return options
    if options is None or isinstance(options, dict):
        return BackendOptions.from_dict(options)
    return BackendOptions(options)       # a CompileOptions


def neuron(gm, example_inputs, options: dict | None = None, mode: str | None = None):
    """torch.compile backend: `backend="neuron"`."""
    import torch._dynamo.backends.common as dynamo_common
    from torch._functorch.aot_autograd import make_boxed_func

    opts = BackendOptions.from_dict(options)
    config.check_environment()
    graph_ids: list[int] = []

    def graph_name(kind: str) -> str:
        # Numbered on first use: a trace Dynamo restarts (RestartAnalysis) takes no number.
        if not graph_ids:
            with _lock:
                graph_ids.append(next(_graph_ids))
        return f"graph{graph_ids[0]}_{kind}"

    # A training graph's backward, as the partition made it, and its early compile
    # (torchneuron.early_backward): started with the forward's compile, taken by the
    # backward's.
    early: dict[str, Any] = {}

    def partition(joint_module, joint_inputs, **kwargs):
        from torch._functorch.partitioners import default_partition

        forward, backward = default_partition(joint_module, joint_inputs, **kwargs)
        if "num_fwd_outputs" in kwargs:
            saved_views.recompute_in_backward(forward, backward, kwargs["num_fwd_outputs"])
        early["backward"] = backward
        return forward, backward

    def start_backward() -> None:
        backward = early.pop("backward", None)
        if backward is None or not early_backward.usable():
            return
        name = graph_name("backward")
        inputs = [node.meta.get("val") for node in backward.graph.find_nodes(op="placeholder")]
        early["compile"] = early_backward.start(
            lambda: compile_fx_graph(backward, inputs, name, opts))
        early["forward_started"] = time.perf_counter()

    def backward_compiled_early() -> dict:
        child = early.pop("compile", None)
        if child is None:
            return {}
        forward_seconds = early.pop("forward_seconds", time.perf_counter() - child.started)
        return child.results(early_backward.wait_seconds(forward_seconds))

    def compiler(kind: str, inference: bool = False) -> Callable:
        def compile_graph(graph_module, inputs):
            if kind == "forward" and not inference:
                start_backward()
            if kind == "backward":
                with early_backward.precompiled(backward_compiled_early()):
                    return _compile_graph(graph_module, inputs)
            compiled = _compile_graph(graph_module, inputs)
            if "forward_started" in early:
                early["forward_seconds"] = time.perf_counter() - early.pop("forward_started")
            return compiled

        def _compile_graph(graph_module, inputs):
            name = graph_name(kind)
            transposed = []
            if inference and opts.compile.pretransposed_weights:
                transposed = pretransposed_weights.rewrite(
                    graph_module, pretransposed_weights.static_input_positions())
            if transposed:
                log.info("%s: %s handed to the device transposed (torchneuron."
                         "pretransposed_weights)", name,
                         pretransposed_weights.describe(inputs, transposed))
                inputs = pretransposed_weights.with_transposes(inputs, transposed)
            compiled = compile_fx_graph(graph_module, inputs, name, opts)
            if transposed:
                compiled = pretransposed_weights.WithTransposedWeights(compiled, transposed)
            return make_boxed_func(compiled)
        return compile_graph

    from torchneuron import decompositions, pretransposed_weights, saved_views

    decompositions.rewrite_dynamo_graph(gm)
    backend = dynamo_common.aot_autograd(
        fw_compiler=compiler("forward"),
        bw_compiler=compiler("backward"),
        # A graph nothing needs a gradient of (torch.no_grad, frozen weights)
        inference_compiler=compiler("forward", inference=True),
        decompositions=decompositions.table(),
        partition_fn=partition,
    )
    try:
        with older_objects_set_aside():
            return backend(gm, example_inputs)
    except Exception as exc:
        if not opts.fallback or _is_dynamo_control_flow(exc):
            raise
        # AOTAutograd could not trace the graph into ATen (e.g. a decomposition that needs a
        # data-dependent size): the whole Dynamo graph runs in PyTorch, reported as such.
        from torchneuron import report

        node, message = _summarize(exc)
        graph_report = report.whole_graph_fallback(
            graph_name("forward"), gm, "trace",
            f"AOTAutograd could not trace the graph: {message}")
        with _lock:
            _reports.append(graph_report)
        log.warning("%s", graph_report)
        return gm.forward


def _is_dynamo_control_flow(exc: BaseException) -> bool:
    """Exceptions by which Dynamo restarts or skips its analysis (e.g. with dynamic shapes,
    TensorifyScalarRestartAnalysis): Dynamo's to handle, not a reason to fall back."""
    from torch._dynamo import exc as dynamo_exc

    return isinstance(exc, (dynamo_exc.RestartAnalysis, dynamo_exc.SkipFrame))


class CompiledGraph:
    """Runs one compiled FX graph on the simulated NeuronCore."""

    def __init__(self, name: str, program, device, graph_module, dump_dir: str | None,
                 stage_seconds: dict[str, float]):
        import numpy as np

        self.name = name
        # linalg is signless and has no storable i1: bool travels as ui8, uint8 as i8. The
        # bits are right; the boundary reinterprets them as the graph's dtypes.
        self._input_dtypes = [np.dtype(spec.dtype) for spec in program.inputs]
        values = _output_values(graph_module)
        self._output_dtypes = [getattr(v, "dtype", None) for v in values]
        # The strides each output has in PyTorch where they are not the contiguous ones (a
        # channels_last convolution's): the program's output is laid out afresh so.
        self._output_strides = [_dense_strides(v) for v in values]
        self.program = program
        self.device = device
        self.graph_module = graph_module
        self.dump_dir = dump_dir
        self.stage_seconds = stage_seconds
        # (spent in this process, or in the child that compiled it early: early_backward)
        self.compile_seconds = sum(stage_seconds.values())
        self.cache_status = "off"        # 'hit' | 'miss' | 'off' (the persistent cache)
        self.original_compile_seconds = None   # for a hit: what compiling it took
        self.compiled_early = False      # by a backward's early compile (early_backward)
        self.last_profile = None
        self._replay_written = False

    def __call__(self, *args) -> tuple:
        arrays = [_to_numpy(a) for a in args]
        arrays = [_reinterpret_array(a, d) for a, d in zip(arrays, self._input_dtypes)]
        result = self.device.execute(self.program, arrays)
        self.last_profile = result.profile
        outputs = tuple(_laid_out(_reinterpret_tensor(_to_torch(o), d), strides)
                        for o, d, strides in zip(result.outputs, self._output_dtypes,
                                                 self._output_strides))
        if self.dump_dir and not self._replay_written:
            self._write_replay(args)
        return outputs

    def _write_replay(self, args) -> None:
        import numpy as np
        import torch

        self._replay_written = True
        with torch.no_grad():
            expected = self.graph_module(*args)
        if not isinstance(expected, (tuple, list)):
            expected = (expected,)
        np.savez(os.path.join(self.dump_dir, f"{self.name}.inputs.npz"),
                 **{f"arg{i}": _to_numpy(a) for i, a in enumerate(args)})
        np.savez(os.path.join(self.dump_dir, f"{self.name}.expected.npz"),
                 **{f"out{i}": _to_numpy(o) for i, o in enumerate(expected)})


class ShapeSpecializedGraph:
    """A graph with symbolic sizes (dynamic shapes): compiled once per concrete input
    signature, on first use, since a NEFF's shapes are static; a signature seen before reuses
    its compiled variant (NAME_v0, NAME_v1, ...). Every compile of a new signature is logged
    at INFO with the number of recompiles so far."""

    def __init__(self, gm, name: str, options):
        self.gm, self.name, self.options = gm, name, options
        self.variants: dict[tuple, CompiledGraph] = {}

    @property
    def recompiles(self) -> int:
        """Compiles for a new input signature after the first."""
        return max(len(self.variants) - 1, 0)

    def __call__(self, *args) -> tuple:
        key = _signature(args)
        compiled = self.variants.get(key)
        if compiled is None:
            static = _specialise(self.gm, args)
            name = f"{self.name}_v{len(self.variants)}"
            if self.variants:
                log.info("%s: new input shapes %s: recompiling as %s (recompile %d of this "
                         "dynamic-shape graph)", self.name, _describe_signature(key), name,
                         len(self.variants))
            else:
                log.info("%s: input shapes %s: compiling as %s", self.name,
                         _describe_signature(key), name)
            compiled = compile_fx_graph(static, [a for a in args if _is_tensor(a)], name,
                                        self.options)
            self.variants[key] = compiled
        return compiled(*[a for a in args if _is_tensor(a)])


def _is_tensor(value) -> bool:
    import torch
    return isinstance(value, torch.Tensor)


def _signature(args) -> tuple:
    return tuple((tuple(a.shape), str(a.dtype)) if _is_tensor(a) else ("int", int(a))
                 for a in args)


def _describe_signature(key: tuple) -> str:
    """'(f32[8, 32], 8)': tensors as dtype[sizes], symbolic sizes as their values."""
    parts = []
    for first, second in key:
        if first == "int":                     # ("int", value)
            parts.append(str(second))
        else:                                  # (shape, "torch.float32")
            parts.append(f"{second.removeprefix('torch.')}[{', '.join(map(str, first))}]")
    return f"({', '.join(parts)})"


def _specialise(gm, args):
    """Re-trace `gm` with concrete sizes: symbolic int inputs become constants. Nodes keep
    their stack traces (fallback reports name the user's source line)."""
    import torch.fx.traceback as fx_traceback
    from torch.fx import Interpreter
    from torch.fx.experimental.proxy_tensor import make_fx

    tensor_positions = [i for i, a in enumerate(args) if _is_tensor(a)]

    def with_constants(*tensors):
        full = list(args)
        for i, t in zip(tensor_positions, tensors):
            full[i] = t
        return Interpreter(gm).run(*full)

    with fx_traceback.preserve_node_meta():
        return make_fx(with_constants, tracing_mode="real")(
            *[args[i] for i in tensor_positions])


def _has_symbolic_sizes(example_inputs) -> bool:
    import torch
    for value in example_inputs:
        if isinstance(value, torch.SymInt):
            return True
        if isinstance(value, torch.Tensor) and any(isinstance(s, torch.SymInt)
                                                   for s in value.shape):
            return True
    return False


def compile_fx_graph(gm, example_inputs, name: str, options):
    """FX graph -> the callable the backend returns: supported partitions compiled to NEFFs
    running on the simulator, the rest in PyTorch (see torchneuron.partition)."""
    with older_objects_set_aside():
        return _compile_fx_graph(gm, example_inputs, name, options)


def _compile_fx_graph(gm, example_inputs, name: str, options):
    if _has_symbolic_sizes(example_inputs):
        log.info("%s has symbolic sizes (dynamic=True, mark_dynamic, or Dynamo's automatic "
                 "dynamic shapes after a shape changed): compiled once per concrete input "
                 "shape, on first use", name)
        return ShapeSpecializedGraph(gm, name, options)
    from torchneuron import partition, report
    from torchneuron import runtime  # noqa: F401  (imported once here, not inside the
    from torchneuron.compiler.errors import UnsupportedOpError   # graph's compile time)

    opts = _backend_options(options)

    def compile_partition(sub, part_name: str, dump: bool):
        return _compile_partition(sub, part_name, opts.compile, dump)

    try:
        split = partition.split_and_compile(gm, name, compile_partition,
                                            strict=not opts.fallback)
    except partition.NotCompilable as exc:
        raise UnsupportedOpError(str(exc)) from None
    graph_report = report.graph_report(split)
    split.report = graph_report
    with _lock:
        _reports.append(graph_report)
    dump_dir = config.DUMP_DIR.get()
    if dump_dir:
        os.makedirs(dump_dir, exist_ok=True)
        with open(os.path.join(dump_dir, f"{name}.split.fx.txt"), "w") as f:
            f.write(split.split.print_readable(print_output=False))
    log.info("%s", graph_report)
    return split


def _compile_partition(sub, name: str, options, dump: bool) -> "CompiledGraph":
    """One partition: FX -> linalg -> NEFF -> a loaded program, or the NEFF (or the failure)
    the persistent compile cache holds for the same graph (torchneuron.cache). Every failure
    becomes a PartitionFailure naming the FX node to blame when the error says which."""
    from torchneuron import cache as cache_mod
    from torchneuron.partition import PartitionFailure

    dump_dir = config.DUMP_DIR.get() if dump else None
    if dump_dir:
        os.makedirs(dump_dir, exist_ok=True)
        with open(os.path.join(dump_dir, f"{name}.fx.txt"), "w") as f:
            f.write(sub.print_readable(print_output=False))
    start = time.perf_counter()
    store = cache_mod.CompileCache()
    recorder = early_backward.recording()
    # The key also names the partition between a backward's early compile (the child that
    # records it) and the compile AOTAutograd asks for (which takes it).
    early_key = _graph_cache_key(sub, options) \
        if recorder is not None or early_backward.active() else None
    key = (early_key or _graph_cache_key(sub, options)) if store.enabled else None
    early = early_backward.take(early_key)
    if early is not None:
        compiled_graph = _load_early(early, sub, name, dump_dir)
        if compiled_graph is not None:
            if dump:
                with _lock:
                    _compiled.append(compiled_graph)
            return compiled_graph
    first_record = len(recorder[1]) if recorder is not None else 0

    def done(compiled_graph: "CompiledGraph", neff: bytes) -> "CompiledGraph":
        if recorder is not None and early_key is not None:
            recorder[0][early_key] = early_backward.Compiled(
                neff, compiled_graph.stage_seconds, compiled_graph.cache_status,
                compiled_graph.original_compile_seconds, recorder[1][first_record:])
        if dump:
            with _lock:
                _compiled.append(compiled_graph)
        return compiled_graph

    # With TORCHNEURON_DUMP_DIR set the partition is compiled even when cached, so that every
    # stage's file is written; the result still refreshes the cache.
    if key is not None and not dump_dir:
        entry = store.load(key)
        if entry is not None and entry.failure is not None:
            failure = entry.failure
            log.info("%s: compile failure loaded from compile cache (%s)", name, key[:16])
            raise PartitionFailure(failure["category"], failure["message"], failure.get("node"),
                                   None)
        if entry is not None:
            compiled_graph = _load_cached(entry, key, sub, name, start)
            if compiled_graph is not None:
                return done(compiled_graph, entry.neff)
    try:
        compiled_graph, neff = _compile_uncached(sub, name, options, dump_dir, start)
    except PartitionFailure as failure:
        if key is not None and getattr(failure, "cacheable", True):
            store.store_failure(key, {"category": failure.category, "message": failure.message,
                                      "node": failure.node, "name": name})
        raise
    compiled_graph.cache_status = "miss" if key is not None else "off"
    if key is not None:
        store.store(key, neff, {"name": name, "stage_seconds": compiled_graph.stage_seconds,
                                "compile_seconds": compiled_graph.compile_seconds,
                                "compiler": cache_mod.compiler_identity()})
    return done(compiled_graph, neff)


def _loaded(neff: bytes, name: str, what: str):
    """The runtime's Program of a NEFF compiled before (`what` it is, for the warning), or
    None where the runtime rejects it: then the partition is compiled again."""
    from torchneuron import runtime
    from torchneuron.format import NeffFormatError

    try:
        return runtime.load(neff)
    except NeffFormatError as exc:
        log.warning("torchneuron: %s: %s rejected by the runtime (%s); compiling it again",
                    name, what, exc)
        return None


def _load_early(early, sub, name: str, dump_dir: str | None) -> "CompiledGraph | None":
    """A CompiledGraph from the partition a backward's early compile made (None when the
    runtime rejects its NEFF: then it is compiled here)."""
    from torchneuron import runtime

    program = _loaded(early.neff, name, "the early compile's NEFF")
    if program is None:
        return None
    log.debug("%s: compiled early, beside the forward (%.2f s)", name,
              sum(early.stage_seconds.values()))
    compiled_graph = CompiledGraph(name, program, runtime.Device(program.target), sub, dump_dir,
                                   early.stage_seconds)
    compiled_graph.cache_status = early.cache_status
    compiled_graph.original_compile_seconds = early.original_compile_seconds
    compiled_graph.compiled_early = True
    return compiled_graph


def _load_cached(entry, key: str, sub, name: str, start: float) -> "CompiledGraph | None":
    """A CompiledGraph from a cache entry (None when the runtime rejects the NEFF: then it is
    recompiled)."""
    from torchneuron import runtime

    program = _loaded(entry.neff, name, f"compile cache entry {key[:16]}")
    if program is None:
        return None
    seconds = time.perf_counter() - start
    original = entry.metadata.get("compile_seconds")
    log.info("%s: loaded from compile cache in %.3f s (compiled in %s originally; key %s)",
             name, seconds, f"{original:.2f} s" if isinstance(original, (int, float)) else "?",
             key[:16])
    compiled_graph = CompiledGraph(name, program, runtime.Device(program.target), sub, None,
                                   {"cache": seconds})
    compiled_graph.cache_status = "hit"
    compiled_graph.original_compile_seconds = original
    return compiled_graph


def _compile_uncached(sub, name: str, options, dump_dir: str | None,
                      start: float) -> tuple["CompiledGraph", bytes]:
    from torchneuron import runtime
    from torchneuron.compiler.errors import CompileError
    from torchneuron.compiler.frontend.fx_import import fold_constants, import_fx_graph
    from torchneuron.compiler.pipeline import compile_linalg
    from torchneuron.partition import PartitionFailure

    # Folded here, not in the importing child: PyTorch's thread pool, started in this
    # process, hangs a forked child that runs parallel ops.
    linalg, error, diagnostics = _import(
        import_fx_graph, fold_constants(sub) if options.fold_constants else sub, name)
    if error is not None:
        node, message = _import_diagnostic(diagnostics, sub)
        if message is None:
            node, message = _summarize(error)
        failure = PartitionFailure("import", message, node, error)
        # A timeout or a crash of torch-mlir may depend on the machine: not cached.
        failure.cacheable = not (isinstance(error, ImportFailure) and error.transient)
        raise failure
    if diagnostics.strip():
        log.debug("torch-mlir diagnostics for %s:\n%s", name, diagnostics)
    import_seconds = time.perf_counter() - start
    try:
        compiled = compile_linalg(linalg, name, options, dump_dir)
        program = runtime.load(compiled.neff)
    except CompileError as exc:
        node, message = _summarize(exc)
        if node is None:
            node, op = _foreign_op(linalg)
            if op is not None:
                message = f"no lowering to the NeuronCore for '{op}'"
        raise PartitionFailure("compile", message, node, exc) from None
    except Exception as exc:     # a compiler bug: reported, and the partition falls back
        node, message = _summarize(exc)
        raise PartitionFailure("compile", f"internal compiler error: {message}", node,
                               exc) from None
    seconds = {"linalg": import_seconds, **compiled.stage_seconds}
    log.debug("compiled %s in %.2f s (%s)", name, sum(seconds.values()),
              ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items()))
    compiled_graph = CompiledGraph(name, program, runtime.Device(program.target), sub, dump_dir,
                                   seconds)
    return compiled_graph, compiled.neff


def _graph_cache_key(sub, options) -> str | None:
    """The persistent cache key of a partition, computed from the FX graph alone (before
    torch-mlir runs): the graph's code, every input's shape/dtype/stride, the value of every
    constant tensor, the source line of every node (the NEFF's debug info records them), the
    torch and torch-mlir versions; CompileCache.key adds the compiler's identity, the target
    and the options. None when an input's metadata is missing (not cached)."""
    import hashlib

    import torch

    from torchneuron.cache import CompileCache

    digest = hashlib.sha256()

    def add(*parts) -> None:
        for part in parts:
            digest.update(str(part).encode())
            digest.update(b"\0")

    add("code", sub.code, "versions", *_library_versions())
    for node in sub.graph.nodes:
        if node.op == "placeholder":
            value = node.meta.get("val")
            if not isinstance(value, torch.Tensor):
                return None
            add("input", node.name, value.dtype, tuple(value.shape), tuple(value.stride()),
                value.storage_offset())
        elif node.op == "get_attr":
            value = _fetch_attr(sub, node.target)
            if isinstance(value, torch.Tensor):
                add("constant", node.target, value.dtype, tuple(value.shape),
                    _tensor_digest(value))
            else:
                add("attr", node.target, repr(value))
        frames = _FRAME_LINE.findall(node.meta.get("stack_trace") or "")
        if frames:
            add("source", node.name, *frames[-1])
    target = options.target_name
    option_values = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    option_values["target"] = target
    if options.tuning_db_path:
        # What a compilation reads from the tuning database is its contents, not its path:
        # re-tuning into the same file must not reuse a build made with the old entries.
        try:
            with open(options.tuning_db_path, "rb") as f:
                option_values["tuning_db_contents"] = hashlib.sha256(f.read()).hexdigest()
        except OSError as exc:
            option_values["tuning_db_contents"] = f"unreadable: {exc.strerror}"
    return CompileCache.key(digest.hexdigest(), target, option_values)


_FRAME_LINE = re.compile(r'File "([^"]+)", line ([0-9]+)')


@functools.lru_cache(maxsize=1)
def _library_versions() -> tuple[str, str]:
    from importlib import metadata

    import torch
    try:
        torch_mlir = metadata.version("torch-mlir")
    except metadata.PackageNotFoundError:
        torch_mlir = "unknown"
    return torch.__version__, torch_mlir


def _fetch_attr(module, target: str):
    value = module
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _tensor_digest(tensor) -> str:
    import hashlib

    return hashlib.sha256(_to_numpy(tensor).tobytes()).hexdigest()


class ImportFailure(Exception):
    """torch-mlir's importer failed with something other than a CompileError, or killed the
    process it ran in (an LLVM fatal error or abort)."""

    def __init__(self, message: str, fx_node: str | None = None, transient: bool = False):
        super().__init__(message)
        self.fx_node = fx_node
        self.transient = transient      # a timeout or a crash: not cached


# torch-mlir's C++ aborts on some graphs (e.g. "LLVM ERROR: out of memory" for a scatter along
# dim -1) and would take the user's process with it, so the import runs in a forked child.
IMPORT_IN_CHILD = hasattr(os, "fork")
IMPORT_TIMEOUT_S = 300


def _import(import_fx_graph, sub, name: str) -> tuple[str | None, Exception | None, str]:
    """(linalg text, error, what torch-mlir printed on stderr) of importing `sub`."""
    if not IMPORT_IN_CHILD:
        with _captured_stderr() as diagnostics:
            try:
                return import_fx_graph(sub, name), None, ""
            except Exception as exc:   # CompileError, or a bug in torch-mlir's importer
                error = exc
        return None, error, diagnostics[0]
    import pickle
    import select
    import signal
    import tempfile

    from torchneuron.compiler.errors import CompileError

    with tempfile.TemporaryFile() as err:
        read_end, write_end = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:   # the child: import, send the result, exit without cleanup
            status = 0
            try:
                import faulthandler
                faulthandler.disable()     # an abort is the parent's to report
                os.close(read_end)
                os.dup2(err.fileno(), 2)
                # torch-mlir's importer runs torch ops itself (its as_strided rewrite builds
                # index tensors with torch.full and arange): a parallel op here waits for
                # OpenMP workers that the fork did not copy, until the import times out.
                # One thread runs them without the pool.
                import torch
                torch.set_num_threads(1)
                try:
                    result = ("ok", import_fx_graph(sub, name))
                except CompileError as exc:
                    result = ("compile-error", exc.message, exc.location)
                except Exception as exc:
                    result = ("error", *_summarize(exc))
                data = pickle.dumps(result)
                with os.fdopen(write_end, "wb") as pipe:
                    pipe.write(data)
            except BaseException:
                status = 1
            finally:
                os._exit(status)
        os.close(write_end)
        chunks, deadline = [], time.monotonic() + IMPORT_TIMEOUT_S
        with os.fdopen(read_end, "rb") as pipe:
            while True:
                ready, _, _ = select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))
                if not ready:
                    os.kill(pid, signal.SIGKILL)
                    break
                chunk = os.read(pipe.fileno(), 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        try:
            result = pickle.loads(b"".join(chunks)) if chunks else None
        except Exception:
            result = None
        if result is None:
            _, status = os.waitpid(pid, 0)
        else:
            # The child sent its whole result and closed the pipe; what is left is its exit,
            # which unmaps a copy of this process's address space (12-18 ms with PyTorch
            # loaded). A thread collects it while the compilation goes on.
            threading.Thread(target=os.waitpid, args=(pid, 0), daemon=True,
                             name="torchneuron-import-reaper").start()
        err.seek(0)
        diagnostics = err.read().decode("utf-8", errors="replace")
    if result is None:
        how = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exit status {os.WEXITSTATUS(status)}")
        last = [line for line in diagnostics.strip().splitlines() if line.strip()]
        detail = f": {last[0].strip()}" if last else ""
        if time.monotonic() >= deadline:
            return None, ImportFailure(f"torch-mlir import timed out after "
                                       f"{IMPORT_TIMEOUT_S} s", transient=True), diagnostics
        return None, ImportFailure(f"torch-mlir crashed ({how}){detail}",
                                   transient=True), diagnostics
    if result[0] == "ok":
        return result[1], None, diagnostics
    if result[0] == "compile-error":
        return None, CompileError(result[1], result[2]), diagnostics
    return None, ImportFailure(result[2], result[1]), diagnostics


@contextlib.contextmanager
def _captured_stderr():
    """Collect what is written to file descriptor 2 (MLIR prints the diagnostics of a failed
    torch-mlir lowering there, with the location naming the FX node) into box[0]."""
    import tempfile

    box: list[str] = []
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):   # no usable fd 2: do not capture
        box.append("")
        yield box
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield box
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            box.append(tmp.read().decode("utf-8", errors="replace"))


_DIAGNOSTIC = re.compile(r'^loc\("(?P<node>[^"]+)"[^\n]*?\): error: (?P<msg>.*)$', re.M)
_TORCH_OPERATOR = re.compile(r'%\S+ = "torch\.operator"\(.*<\{name = "(?P<op>[^"]+)"\}>.*')


def _import_diagnostic(text: str, sub) -> tuple[str | None, str | None]:
    """(FX node, message) of the first error diagnostic torch-mlir printed, if any."""
    names = {n.name for n in sub.graph.nodes if n.op == "call_function"}
    for m in _DIAGNOSTIC.finditer(text or ""):
        message = _TORCH_OPERATOR.sub(lambda o: f"torch.operator {o.group('op')}", m.group("msg"))
        node = m.group("node") if m.group("node") in names else None
        return node, "torch-mlir: " + _first_line(message)
    return None, None


def _foreign_op(linalg_text: str) -> tuple[str | None, str | None]:
    """(FX node, op name) of the first op in torch-mlir's output that belongs to a dialect the
    compiler does not load (e.g. tm_tensor.sort), which it cannot even parse."""
    from torch_mlir import ir

    from torchneuron.compiler.errors import fx_node_of
    from torchneuron.dialects import make_context

    found: list = []

    def visit(op):
        if found:
            return ir.WalkResult.INTERRUPT
        if not context.is_registered_operation(op.name):
            found.append((fx_node_of(str(op.location)), op.name))
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    try:
        context = make_context()
        context.allow_unregistered_dialects = True
        with context:
            module = ir.Module.parse(linalg_text)
            module.operation.walk(visit)
    except Exception:
        return None, None
    return found[0] if found else (None, None)


_FX_NODE = re.compile(r"FX node '(?P<node>[^']+)'(?: at [^:]+:\d+)?: ")


def _summarize(exc: BaseException) -> tuple[str | None, str]:
    """(FX node, one-line message) of a compiler exception. A CompileError names its node; an
    exception raised inside an MLIR callback arrives as a RuntimeError carrying the original
    traceback, whose last line is the original error."""
    from torchneuron.compiler.errors import CompileError

    if isinstance(exc, CompileError):
        return exc.fx_node, _first_line(exc.message)
    if isinstance(exc, ImportFailure):
        return exc.fx_node, str(exc)
    text = str(exc).strip()
    if "Traceback (most recent call last)" in text:
        last = text.splitlines()[-1].strip()
        m = _FX_NODE.search(last)
        if m:
            return m.group("node"), _first_line(last[m.end():])
        return None, _first_line(last)
    return None, f"{type(exc).__name__}: {_first_line(text)}"


def _first_line(text: str, limit: int = 300) -> str:
    text = text.strip()
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= limit else line[:limit] + "..."


def _dense_strides(value) -> tuple[int, ...] | None:
    """The strides of example value `value` where they lay it out densely in an order other
    than row-major (channels_last), else None."""
    import torch

    if not isinstance(value, torch.Tensor) or value.dim() < 2 or value.is_contiguous():
        return None
    try:
        shape, strides = [int(n) for n in value.shape], [int(s) for s in value.stride()]
    except TypeError:          # symbolic sizes: left as they come
        return None
    expected = 1
    for d in sorted(range(len(shape)), key=lambda d: strides[d]):
        if shape[d] != 1 and strides[d] != expected:
            return None        # overlapping or with gaps: not a layout to reproduce
        expected *= shape[d]
    return tuple(strides)


def _laid_out(tensor, strides):
    """`tensor` (row-major) with `strides`, its values copied, where they are given."""
    if strides is None or tuple(tensor.stride()) == strides:
        return tensor
    import torch

    return torch.empty_strided(tensor.shape, strides, dtype=tensor.dtype).copy_(tensor)


def _output_values(gm) -> list:
    out = gm.graph.output_node().args[0]
    out = out if isinstance(out, (tuple, list)) else (out,)
    return [o.meta.get("val") if hasattr(o, "meta") else None for o in out]


def _reinterpret_array(array, dtype):
    """An integer/bool array as the same-size integer/bool dtype the program declares."""
    if array.dtype != dtype and array.dtype.kind in "biu" and dtype.kind in "biu" and \
            array.dtype.itemsize == dtype.itemsize:
        return array.view(dtype)
    return array


def _reinterpret_tensor(tensor, dtype):
    """A program output as the dtype the graph expects, when only signedness or bool-ness
    differ (any other difference is left for the comparison with eager to expose)."""
    torch = _torch()
    if dtype is None or tensor.dtype == dtype:
        return tensor
    if dtype == torch.bool and not tensor.dtype.is_floating_point:
        return tensor != 0
    if not tensor.dtype.is_floating_point and not dtype.is_floating_point and \
            not tensor.dtype.is_complex and tensor.element_size() == dtype.itemsize \
            and tensor.dtype != torch.bool:
        return tensor.view(dtype)
    return tensor


def _torch():
    import torch
    return torch


# Dtypes numpy stores through ml_dtypes, with the same-size integer torch views them as.
_ML_DTYPES = {"bfloat16": ("int16", "bfloat16"), "float8_e4m3fn": ("uint8", "float8_e4m3fn"),
              "float8_e5m2": ("uint8", "float8_e5m2")}


def _to_numpy(value: Any):
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        for np_name, (int_name, torch_name) in _ML_DTYPES.items():
            if tensor.dtype == getattr(torch, torch_name):
                import ml_dtypes
                bits = tensor.view(getattr(torch, int_name)).numpy()
                return bits.view(getattr(ml_dtypes, np_name))
        return tensor.numpy()
    return np.asarray(value)


def _to_torch(array):
    import torch

    entry = _ML_DTYPES.get(array.dtype.name)
    if entry is not None:
        int_name, torch_name = entry
        bits = array.view(int_name)
        return torch.from_numpy(_writable(bits)).view(getattr(torch, torch_name))
    return torch.from_numpy(_writable(array))


def _writable(array):
    return array if array.flags.writeable else array.copy()
