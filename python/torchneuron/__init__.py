"""torchneuron: a PyTorch backend for AWS Trainium NeuronCores, and a NeuronCore simulator.

`torch.compile(model, backend="neuron")` compiles through MLIR (see DESIGN.md) and runs the
emitted NEFF on the simulator. Importing this package does not import torch or the compiler.
"""

__version__ = "0.1.0"
