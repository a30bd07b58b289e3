"""torchneuron: a PyTorch backend for AWS Trainium NeuronCores, and a NeuronCore simulator.

`torch.compile(model, backend="neuron")` compiles through MLIR (see DESIGN.md) and runs the
emitted NEFF on the simulator. Importing this package does not import torch or the compiler.
"""

__version__ = "0.1.0"

__all__ = ["explain"]


def __getattr__(name: str):
    # Lazy: `import torchneuron` stays free of torch and the compiler.
    if name == "explain":
        from torchneuron.report import explain
        return explain
    raise AttributeError(f"module 'torchneuron' has no attribute {name!r}")
