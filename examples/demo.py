"""torchneuron demo: an MLP through torch.compile(backend="neuron"), run on the simulator.

Prints compile time per stage, instructions per engine, simulated device time, PE
utilisation, and the largest difference from eager PyTorch. Run with `make demo`.
"""

import time

import torch

from torchneuron import backend


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(256, 512)
        self.fc2 = torch.nn.Linear(512, 128)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc2(torch.relu(self.fc1(x))))


def main() -> None:
    torch.manual_seed(0)
    model = MLP().eval()
    x = torch.randn(64, 256)
    compiled = torch.compile(model, backend="neuron")

    start = time.perf_counter()
    with torch.no_grad():
        y = compiled(x)
        expected = model(x)
    first_call = time.perf_counter() - start

    graph = backend.compiled_graphs()[-1]
    profile = graph.last_profile
    print("torchneuron demo: MLP 256 -> 512 (ReLU) -> 128 (GELU), fp32, batch 64, "
          f"target {profile.target.name}")
    print(f"\nfirst call (Dynamo + compile + simulate): {first_call:.2f} s")
    print("compile time per stage:")
    for stage, seconds in graph.stage_seconds.items():
        print(f"  {stage:<8} {seconds * 1000:8.1f} ms")
    print("instructions per engine / DMA queue:")
    for stream, count in graph.program.instruction_counts.items():
        print(f"  {stream:<8} {count:8d}")
    print(f"\nsimulated device time: {profile.total_us:.2f} us")
    print(f"PE utilisation: {100 * profile.utilisation['pe']:.1f}% busy, "
          f"{100 * profile.pe_peak_fraction:.2f}% of bf16 peak")
    error = (y - expected).abs().max().item()
    print(f"max abs error vs eager: {error:.3e}")
    if not torch.allclose(y, expected, rtol=1e-4, atol=1e-5):
        raise SystemExit("demo: output does not match eager PyTorch")


if __name__ == "__main__":
    main()
