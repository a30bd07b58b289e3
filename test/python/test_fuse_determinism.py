"""trn-fuse's row-wise groups are formed the same way on every compile.

A row group grows backward from its members to the producers they read, greedily, while its
row tiles fit the SBUF budget; when two producers compete for the last tile, the one tried
first joins and the other stays outside. They must be tried in block order: trying them in the
iteration order of a set of ops (their addresses, which change from run to run) made the same
graph (a BERT encoder layer's backward) fuse differently from one compile to the next.

The function below holds many independent copies of such a contest; each copy's group must be
the one block order gives. With an address-ordered walk each copy is a coin toss, so a
regression fails here essentially always. No torch: the compiler's MLIR side runs without it.
"""

from torch_mlir import ir

from torchneuron.compiler.passes import build_pass_manager
from torchneuron.compiler.transforms import fuse
from torchneuron.dialects import make_context
from torchneuron.dialects.common import memref_info_cache
from torchneuron.target import get_target

COPIES = 32
TARGET = "trn2"


def _row_length() -> int:
    # Rows long enough that the budget holds exactly four row tiles (fp32), not five.
    budget = get_target(TARGET).sbuf_partition_bytes // fuse.ROW_BUDGET_SHARE
    length = budget // (4 * fuse._ROW_BYTES)
    assert 4 * length * fuse._ROW_BYTES <= budget < 5 * length * fuse._ROW_BYTES
    return length


def _contest(i: int, t: str) -> list[str]:
    # m = max(exp(p)) over the rows, then d = tanh(q) - broadcast(m). The group grows forward
    # to {m, broadcast, d}: three row tiles (its leaves exp(p) and tanh(q), and d). Pulling in
    # either producer costs one tile more (its result is computed inside, its input read
    # instead), so only one fits: exp(p), read by the reduction, which comes first in the block;
    # tanh(q), read by the subtraction, stays a kernel of its own.
    act = "{func = \"%s\", scale = 1.0 : f32, bias = 0.0 : f32}"
    return [
        f'%a{i} = "trn.activation"(%p{i}) {act % "exp"} : ({t}) -> {t}',
        f'%b{i} = "trn.activation"(%q{i}) {act % "tanh"} : ({t}) -> {t}',
        f'%m{i} = "trn.reduce"(%a{i}) {{op = "max", dimensions = array<i64: 1>}} '
        f': ({t}) -> tensor<4xf32>',
        f'%mb{i} = "trn.broadcast"(%m{i}) {{dimensions = array<i64: 1>}} '
        f': (tensor<4xf32>) -> {t}',
        f'%d{i} = "trn.tensor_tensor"(%b{i}, %mb{i}) {{op = "sub"}} : ({t}, {t}) -> {t}',
    ]


def _source() -> str:
    t = f"tensor<4x{_row_length()}xf32>"
    args = ", ".join(f"%p{i}: {t}, %q{i}: {t}" for i in range(COPIES))
    body = [line for i in range(COPIES) for line in _contest(i, t)]
    results = ", ".join(f"%d{i}" for i in range(COPIES))
    return (f"func.func @contests({args}) -> ({', '.join([t] * COPIES)}) {{\n  "
            + "\n  ".join(body)
            + f"\n  return {results} : {', '.join([t] * COPIES)}\n}}\n")


def _ops(block: ir.Block) -> list[ir.Operation]:
    return [op.operation for op in block.operations]


def _describe(op: ir.Operation, args: list) -> str:
    """`name` or `name(func)` for an activation, with the function argument it reads."""
    text = op.name
    if op.name == "trn.activation":
        text += "(" + ir.StringAttr(op.attributes["func"]).value + ")"
    for v in op.operands:
        if v in args:
            text += f" %arg{args.index(v)}"
    return text


def test_row_groups_take_competing_producers_in_block_order():
    context = make_context()
    with context, memref_info_cache():
        module = ir.Module.parse(_source())
        build_pass_manager([("trn-fuse", {"target": TARGET})], context).run(module.operation)
        func = _ops(module.body)[0]
        block = func.regions[0].blocks[0]
        args = list(block.arguments)
        rows = []
        for op in _ops(block):
            if op.name == "trn.kernel" and ir.StringAttr(op.attributes["kind"]).value == "rows":
                rows.append([_describe(inner, args) for inner in _ops(op.regions[0].blocks[0])])
    # Copy i reads %p_i = %arg(2i) and %q_i = %arg(2i+1); its rows kernel computes exp(p_i)
    # inside and reads tanh(q_i) from the elementwise kernel before it.
    expected = [[f"trn.activation(exp) %arg{2 * i}", "trn.reduce", "trn.broadcast",
                 "trn.tensor_tensor", "trn.yield"] for i in range(COPIES)]
    wrong = [i for i, (got, want) in enumerate(zip(rows, expected)) if got != want]
    assert len(rows) == COPIES and not wrong, (
        f"{len(wrong)} of {COPIES} copies fused otherwise, e.g. copy {wrong[:1]}: "
        f"{[rows[i] for i in wrong[:1]]}")
