"""A training graph's saved tensors that are views of another saved tensor, taken by the
backward from that one.

AOTAutograd's default partition saves every forward value the backward reads. Where two of
them are views of one value -- an attention's probabilities, saved as they are for the
softmax's backward and as the [B * H, S, S] view the gradient of the values is a batched
product with -- the backward graph takes them as two inputs that share their storage at run
time. The compiled backward then knows nothing of the sharing: it reads the same bytes
through each input, and counts each as bytes it must move (BERT-base's backward: 25 MB of
probabilities twice).

`recompute_in_backward` rewrites the partition, as a min-cut partition recomputes cheap ops:
a saved value that a chain of view ops makes from a value that is saved as it is (or through
alias/detach, which keep it as it is) is no longer saved; the backward makes it from that
one with the same view ops. Views cost nothing and run where the backward runs, so the
tensors the backward sees are the same; there is one input fewer, and the compiler sees that
both read one tensor.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

# Ops that make a view of their first argument from it and constant arguments.
VIEW_TARGETS = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default,
    aten.permute.default, aten.transpose.int, aten.t.default,
    aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.expand.default,
}
# Views that keep their argument as it is (shape, strides, offset).
IDENTITY_TARGETS = {aten.alias.default, aten.detach.default}


def _chain(node: torch.fx.Node) -> tuple[torch.fx.Node, list[torch.fx.Node]] | None:
    """(the value `node` is a view of, the view ops from it to `node`, in order); None where
    a view op reads another node besides its source (a size computed in the graph)."""
    chain = []
    while node.op == "call_function" and node.target in VIEW_TARGETS | IDENTITY_TARGETS:
        found = []
        torch.fx.node.map_arg((node.args[1:], node.kwargs), found.append)
        if found:
            return None
        chain.append(node)
        node = node.args[0]
    return node, chain[::-1]


def recompute_in_backward(forward: torch.fx.GraphModule, backward: torch.fx.GraphModule,
                          num_fwd_outputs: int) -> int:
    """Rewrite the partition (`forward`'s outputs after its first `num_fwd_outputs` are the
    saved values, the backward's placeholders of the same names take them) so that no
    saved value is a view of another one saved as it is; returns how many were dropped."""
    output = forward.graph.find_nodes(op="output")[0]
    outputs = list(output.args[0])
    saved = outputs[num_fwd_outputs:]
    placeholders = {p.name: p for p in backward.graph.find_nodes(op="placeholder")}
    # Per value, the saved values that are it as it is.
    whole: dict[torch.fx.Node, torch.fx.Node] = {}
    chains: dict[torch.fx.Node, tuple] = {}
    for node in saved:
        if not isinstance(node, torch.fx.Node) or node.name not in placeholders or \
                not isinstance(node.meta.get("val"), torch.Tensor):
            continue
        found = _chain(node)
        if found is None:
            continue
        source, chain = found
        if all(op.target in IDENTITY_TARGETS for op in chain):
            whole.setdefault(source, node)
        else:
            chains[node] = (source, chain)
    dropped = []
    for node, (source, chain) in chains.items():
        kept = whole.get(source)
        if kept is None:
            continue
        ph = placeholders[node.name]
        # (After the last placeholder: the views are the backward's first ops.)
        value = placeholders[kept.name]
        at = backward.graph.find_nodes(op="placeholder")[-1]
        for op in chain:
            if op.target in IDENTITY_TARGETS:
                continue
            with backward.graph.inserting_after(at):
                value = at = backward.graph.call_function(op.target, (value, *op.args[1:]),
                                                          dict(op.kwargs))
            value.meta.update({k: v for k, v in op.meta.items()
                               if k in ("val", "tensor_meta", "stack_trace")})
        ph.replace_all_uses_with(value)
        backward.graph.erase_node(ph)
        dropped.append(node)
    if not dropped:
        return 0
    descriptions = output.meta.get("desc")
    traces = output.meta.get("output_stack_traces")
    positions = [i for i, n in enumerate(outputs)
                 if i < num_fwd_outputs or n not in dropped]
    output.args = (tuple(outputs[i] for i in positions),)
    if isinstance(descriptions, list) and len(descriptions) == len(outputs):
        kept_descriptions = [descriptions[i] for i in positions]
        # (The saved values' descriptions number them in order.)
        for j, i in enumerate(range(num_fwd_outputs, len(kept_descriptions))):
            description = kept_descriptions[i]
            if type(description).__name__ == "SavedForBackwardsAOTOutput":
                kept_descriptions[i] = type(description)(j)
        output.meta["desc"] = kept_descriptions
    if isinstance(traces, list) and len(traces) == len(outputs):
        output.meta["output_stack_traces"] = [traces[i] for i in positions]
    forward.graph.eliminate_dead_code()
    forward.recompile()
    backward.graph.lint()
    backward.recompile()
    return len(dropped)
