"""HuggingFace `transformers` models through torch.compile(backend="neuron"): per model, the
forward pass (eval, no grad) and one training step (forward + backward), with the compile
time, the simulated device time, the fraction of FLOPs on the NeuronCore and the ops that fell
back to PyTorch, all from torchneuron.explain. Models are built from small configs with random
weights (2 layers, width 64, 4 heads; batch 2 x 16 tokens); nothing is downloaded.

    .venv/bin/python bench/models.py                  # gpt2, bert, llama: the README's table
    .venv/bin/python bench/models.py --only gpt2 --json out.json
    .venv/bin/python bench/models.py --cache          # the same models in two processes on one
                                                      # fresh compile cache: cold vs warm

Compile time is the backend's own figure (partitioning, FX import, every pipeline stage and
loading the NEFF, summed over the graphs), not wall clock around torch.compile; --cache also
shows the NEFFs' part alone (compiling them cold, loading them from the cache warm), without
the partitioning of the FX graph that both processes do. Unless
TORCHNEURON_CACHE_DIR is set, the persistent compile cache is off here, so that the figure is
a compilation and not a cache load. Simulated time is the simulator's end-to-end time for the
graphs of one call (forward, or forward + backward). FLOPs follow torchneuron.explain: matmul-
like ops by torch.utils.flop_counter's formulas, every other compute op 1 FLOP per element.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile

VOCAB, BATCH, LENGTH = 128, 2, 16
MODELS = ("gpt2", "bert", "llama")


def make_model(name: str):
    """The small configs (also test/python/test_hf_models.py's): 2 layers, width 64, 4 heads,
    no dropout, random weights."""
    import torch
    import transformers as T

    logging.getLogger("transformers").setLevel(logging.ERROR)
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = T.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                           attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0, use_cache=False,
                           bos_token_id=0, eos_token_id=0)
        return T.GPT2LMHeadModel(cfg)
    if name == "bert":
        cfg = T.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=128,
                           max_position_embeddings=64, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0)
        return T.BertForMaskedLM(cfg)
    if name == "llama":      # RMSNorm, rotary embeddings, SiLU-gated MLP, grouped KV heads
        cfg = T.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=64, use_cache=False)
        return T.LlamaForCausalLM(cfg)
    raise ValueError(f"unknown model {name!r} (one of {', '.join(MODELS)})")


def make_inputs(batch: int = BATCH, length: int = LENGTH):
    """(input_ids, labels) of shape [batch, length]."""
    import torch

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (batch, length), generator=g)
    return ids, ids.clone()


def measure(name: str, step: str) -> dict:
    """One row: `step` is 'forward' (eval, no grad) or 'train' (forward with labels, and the
    backward of the loss and logits that torchneuron.explain runs)."""
    import torch

    import torchneuron

    model = make_model(name)
    ids, labels = make_inputs()
    if step == "forward":
        model.eval()
        with torch.no_grad():
            report = torchneuron.explain(model, input_ids=ids)
    else:
        model.train()
        report = torchneuron.explain(model, input_ids=ids, labels=labels)
    fallbacks: dict[str, int] = {}
    for node in report.fallbacks:
        fallbacks[node.op] = fallbacks.get(node.op, 0) + 1
    partitions = [p for g in report.graphs for p in g.partition_records]
    return {
        "model": name, "step": step,
        "graphs": len(report.graphs), "graph_breaks": len(report.graph_breaks),
        "partitions": len(partitions),
        "cache_hits": sum(1 for p in partitions if p.cache == "hit"),
        "compile_s": report.compile_seconds,
        # compiling (or loading from the cache) the NEFFs alone, without partitioning
        "partition_compile_s": sum(p.compile_seconds for p in partitions),
        "simulated_us": report.simulated_ns / 1e3,
        "mflop": report.flops_total / 1e6,
        "neuron_flop_fraction": report.flop_fraction,
        "fallback_ops": fallbacks,
    }


HEADER = ("model", "step", "graphs", "breaks", "compile s", "simulated us", "MFLOP",
          "FLOPs on NeuronCore", "fallback ops")


def row_cells(row: dict) -> tuple:
    fallbacks = ", ".join(f"{op} x{n}" for op, n in sorted(row["fallback_ops"].items()))
    return (row["model"], row["step"], str(row["graphs"]), str(row["graph_breaks"]),
            f"{row['compile_s']:.2f}", f"{row['simulated_us']:.1f}", f"{row['mflop']:.2f}",
            f"{100 * row['neuron_flop_fraction']:.1f}%", fallbacks or "none")


def print_table(rows: list[dict]) -> None:
    print(" | ".join(HEADER))
    print(" | ".join("---" for _ in HEADER))
    for row in rows:
        print(" | ".join(row_cells(row)))


def run_models(names, steps) -> list[dict]:
    rows = []
    for name in names:
        for step in steps:
            rows.append(measure(name, step))
            print("  ".join(row_cells(rows[-1])), file=sys.stderr, flush=True)
    return rows


def cold_and_warm(argv: list[str]) -> int:
    """Run this script twice, one process after the other, on one fresh compile cache: the
    first compiles and fills the cache, the second loads every partition from it."""
    with tempfile.TemporaryDirectory(prefix="torchneuron-cache-") as cache_dir:
        env = dict(os.environ, TORCHNEURON_CACHE_DIR=cache_dir)
        runs = []
        for _ in ("cold", "warm"):
            out = os.path.join(cache_dir, "rows.json")
            subprocess.run([sys.executable, os.path.abspath(__file__), *argv, "--json", out],
                           env=env, check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                runs.append(json.load(f))
            os.remove(out)
    header = ("model", "step", "partitions", "warm cache hits", "cold compile s",
              "warm compile s", "warm / cold", "cold NEFF compile s", "warm NEFF load s",
              "warm / cold (NEFFs)")
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.3f}" if b else "-"

    for cold, warm in zip(*runs):
        print(" | ".join((
            cold["model"], cold["step"], str(cold["partitions"]),
            f"{warm['cache_hits']} of {warm['partitions']}",
            f"{cold['compile_s']:.2f}", f"{warm['compile_s']:.3f}",
            ratio(warm["compile_s"], cold["compile_s"]),
            f"{cold['partition_compile_s']:.2f}", f"{warm['partition_compile_s']:.3f}",
            ratio(warm["partition_compile_s"], cold["partition_compile_s"]))))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help=f"comma-separated models ({', '.join(MODELS)})")
    parser.add_argument("--steps", default="forward,train",
                        help="comma-separated steps: forward, train (default both)")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--cache", action="store_true",
                        help="run twice on one fresh compile cache; print cold vs warm compile")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(MODELS)
    steps = args.steps.split(",")
    for step in steps:
        if step not in ("forward", "train"):
            parser.error(f"unknown step {step!r}")
    if args.cache:
        forwarded = ["--only", ",".join(names), "--steps", ",".join(steps)]
        return cold_and_warm(forwarded)
    os.environ.setdefault("TORCHNEURON_CACHE_DIR", "off")
    rows = run_models(names, steps)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
