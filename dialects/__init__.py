"""The project's MLIR dialects: `trn` (tensor level) and `nisa` (instruction level)."""

from __future__ import annotations

from torch_mlir import ir


def load_dialects(context: ir.Context) -> None:
    """Load `trn` and `nisa` into `context` (upstream dialects are registered already)."""
    from torchneuron.dialects import nisa, trn

    with context:
        for dialect in (trn.Trn, nisa.Nisa):
            if not context.is_dialect_loaded(dialect.DIALECT_NAMESPACE):
                dialect.load()


def make_context() -> ir.Context:
    """A fresh MLIR context with upstream dialects and the project's dialects loaded."""
    context = ir.Context()
    load_dialects(context)
    return context
