"""The `neuron` backend for torch.compile.

    torch.compile(model, backend="neuron")                       # registered entry point
    torch.compile(model, backend="neuron", options={"target": "trn1"})

Dynamo hands over an FX graph; AOTAutograd turns it into functional, core-ATen forward (and
backward) graphs; each is compiled to a NEFF (see torchneuron.compiler.pipeline) and runs on
the simulated NeuronCore through the runtime. With TORCHNEURON_DUMP_DIR set, every graph
leaves its stages and a replay bundle (NAME.inputs.npz, NAME.expected.npz) there.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from typing import Any, Callable

from torchneuron import config

log = logging.getLogger("torchneuron")

_graph_ids = itertools.count()
_lock = threading.Lock()
_compiled: list["CompiledGraph"] = []


def compiled_graphs() -> list["CompiledGraph"]:
    """Every graph this process has compiled, oldest first (for reports and tools)."""
    return list(_compiled)


def neuron(gm, example_inputs, options: dict | None = None, mode: str | None = None):
    """torch.compile backend: `backend="neuron"`."""
    import torch._dynamo.backends.common as dynamo_common
    from torch._decomp import core_aten_decompositions

    from torchneuron.compiler.pipeline import CompileOptions

    opts = CompileOptions.from_dict(options)
    with _lock:
        graph_id = next(_graph_ids)

    def compiler(kind: str) -> Callable:
        def compile_graph(graph_module, inputs):
            return compile_fx_graph(graph_module, inputs, f"graph{graph_id}_{kind}", opts)
        return compile_graph

    backend = dynamo_common.aot_autograd(
        fw_compiler=compiler("forward"),
        bw_compiler=compiler("backward"),
        decompositions=core_aten_decompositions(),
    )
    return backend(gm, example_inputs)


class CompiledGraph:
    """Runs one compiled FX graph on the simulated NeuronCore."""

    def __init__(self, name: str, program, device, graph_module, dump_dir: str | None,
                 stage_seconds: dict[str, float]):
        self.name = name
        self.program = program
        self.device = device
        self.graph_module = graph_module
        self.dump_dir = dump_dir
        self.stage_seconds = stage_seconds
        self.last_profile = None
        self._replay_written = False

    def __call__(self, *args) -> tuple:
        arrays = [_to_numpy(a) for a in args]
        result = self.device.execute(self.program, arrays)
        self.last_profile = result.profile
        outputs = tuple(_to_torch(o) for o in result.outputs)
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
    signature, on first use, since a NEFF's shapes are static."""

    def __init__(self, gm, name: str, options):
        self.gm, self.name, self.options = gm, name, options
        self.variants: dict[tuple, CompiledGraph] = {}

    def __call__(self, *args) -> tuple:
        key = _signature(args)
        compiled = self.variants.get(key)
        if compiled is None:
            static = _specialise(self.gm, args)
            name = f"{self.name}_v{len(self.variants)}"
            log.info("compiling %s for input shapes %s (%d variant(s) so far)", name, key,
                     len(self.variants))
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


def _specialise(gm, args):
    """Re-trace `gm` with concrete sizes: symbolic int inputs become constants."""
    from torch.fx.experimental.proxy_tensor import make_fx

    tensor_positions = [i for i, a in enumerate(args) if _is_tensor(a)]

    def with_constants(*tensors):
        full = list(args)
        for i, t in zip(tensor_positions, tensors):
            full[i] = t
        return gm(*full)

    return make_fx(with_constants, tracing_mode="real")(*[args[i] for i in tensor_positions])


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
    """FX graph -> NEFF -> a callable running it on the simulator."""
    if _has_symbolic_sizes(example_inputs):
        return ShapeSpecializedGraph(gm, name, options)
    from torchneuron import runtime
    from torchneuron.compiler.frontend.fx_import import import_fx_graph
    from torchneuron.compiler.pipeline import compile_linalg

    dump_dir = config.DUMP_DIR.get()
    if dump_dir:
        os.makedirs(dump_dir, exist_ok=True)
        with open(os.path.join(dump_dir, f"{name}.fx.txt"), "w") as f:
            f.write(gm.print_readable(print_output=False))
    start = time.perf_counter()
    linalg = import_fx_graph(gm, name)
    import_seconds = time.perf_counter() - start
    compiled = compile_linalg(linalg, name, options, dump_dir)
    seconds = {"linalg": import_seconds, **compiled.stage_seconds}
    program = runtime.load(compiled.neff)
    log.info("compiled %s in %.2f s (%s)", name, sum(seconds.values()),
             ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items()))
    compiled_graph = CompiledGraph(name, program, runtime.Device(program.target), gm, dump_dir,
                                   seconds)
    with _lock:
        _compiled.append(compiled_graph)
    return compiled_graph


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
