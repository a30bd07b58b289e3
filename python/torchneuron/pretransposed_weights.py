"""Inference graphs take the weights they read transposed as transposed inputs.

PE contracts over the partition axis, so both matmul operands need the contraction dim on
partitions. A Linear layer's weight W [out, in] is stored with its contraction dim `in`
contiguous, and its graph reads it as permute(W, [1, 0]): compiled as is, every call
transposes W on the device (PE transposes and their PSUM evacuations; a GPT-2 LM head's tied
[50257, 768] embedding: 2,382 transposes, 127 us of PE and 467 us of ACT/DVE copies). Neuron
deployments lay weights out once, when they are loaded, in the layout the program reads
(TARGET.md: "weights are usually pre-arranged (transposed) once at load time").

For a graph AOTAutograd compiles for inference (nothing needs a gradient), every static input
(a parameter or buffer: AOTAutograd's `static_input_indices`, the inputs Inductor's CUDA graphs
also treat as fixed) of two dims that the graph reads through a transpose
(`aten.permute(w, [1, 0])`, `aten.t(w)`, `aten.transpose(w, 0, 1)`) gets a new graph input
that takes its place there: w^T, handed to the device as a contiguous [in, out] tensor by the
same conversion that copies every input into the device's HBM (backend._to_numpy). The
device program then reads the weight already laid out; the transposition is done by the host
on every call, as part of handing the inputs over, and is not device time, as uploading a
weight is not. Uses of w other than transposes (a tied embedding's row lookup) keep reading w.

Training graphs are left as they are: their weights change every step on the device, where
a layout change would cost device time each step. `options={"pretransposed_weights": False}`
turns this off (so its effect can be measured).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

log = logging.getLogger("torchneuron")


def _transposes(node) -> bool:
    """Whether FX node `node` is a transpose of a 2-D tensor's two dims."""
    import torch

    aten = torch.ops.aten
    if node.op != "call_function":
        return False
    if node.target == aten.t.default:
        return True
    if node.target == aten.permute.default:
        return list(node.args[1]) in ([1, 0], [-1, -2], [1, -2], [-1, 0])
    if node.target == aten.transpose.int:
        return sorted(d % 2 for d in node.args[1:3]) == [0, 1]
    return False


def static_input_positions() -> list[int]:
    """Positions of the graph inputs AOTAutograd marks static (parameters, buffers) for the
    graph being compiled, or [] outside such a compilation."""
    import torch

    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None) if context is not None else None
    return list(getattr(meta, "static_input_indices", None) or [])


def rewrite(gm, static_positions: list[int]) -> list[int]:
    """Give each static 2-D input of `gm` that some node transposes a new input (appended
    after the others) holding its transpose, and make those nodes' users read that input.
    Returns the positions, among `gm`'s original inputs, of the weights so rewritten, in the
    order of the new inputs."""
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    rewritten: list[int] = []
    last = placeholders[-1] if placeholders else None
    for position in static_positions:
        if position >= len(placeholders):
            continue
        weight = placeholders[position]
        value = weight.meta.get("val")
        if getattr(value, "ndim", None) != 2:
            continue
        transposes = [user for user in weight.users if _transposes(user)]
        if not transposes:
            continue
        with gm.graph.inserting_after(last):
            transposed = gm.graph.placeholder(f"{weight.name}_transposed")
        transposed.meta["val"] = value.t().contiguous()
        if "stack_trace" in weight.meta:
            transposed.meta["stack_trace"] = weight.meta["stack_trace"]
        for node in transposes:
            node.replace_all_uses_with(transposed)
            gm.graph.erase_node(node)
        last = transposed
        rewritten.append(position)
    if rewritten:
        gm.graph.lint()
        gm.recompile()
    return rewritten


def with_transposes(args, positions: list[int]) -> list:
    """`args` followed by the transposed views of `args[i]` for each i in `positions`: the
    rewritten graph's inputs."""
    return [*args, *[args[i].t() for i in positions]]


class WithTransposedWeights:
    """The compiled graph, called with its original inputs: appends the transposed views of
    the rewritten weights (a view; the copy into the device's layout is made as every input
    is handed over). Other attributes are the compiled graph's."""

    def __init__(self, compiled: Callable, positions: list[int]):
        self.compiled = compiled
        self.positions = positions

    def __call__(self, *args: Any):
        return self.compiled(*with_transposes(args, self.positions))

    def __getattr__(self, name: str):
        # (Only for names not set on self: `compiled` itself is, once constructed.)
        if name == "compiled":
            raise AttributeError(name)
        return getattr(self.compiled, name)


def describe(gm_inputs: list, positions: list[int]) -> str:
    """'3 weights ([2304, 768], ...)': the rewritten weights' shapes, for the log."""
    shapes = [list(getattr(gm_inputs[i], "shape", ())) for i in positions]
    return f"{len(positions)} weight(s) ({', '.join(map(str, shapes))})"
