"""The project's MLIR dialects: `trn` (tensor level) and `nisa` (instruction level)."""

from __future__ import annotations

from torch_mlir import ir


_SEARCH_PREFIX = "torchneuron.dialects"


def load_dialects(context: ir.Context) -> None:
    """Load `trn` and `nisa` into `context` (upstream dialects are registered already)."""
    from torch_mlir.dialects._ods_common import _cext

    from torchneuron.dialects import nisa, trn

    # Where the bindings look for a dialect's Python module when they wrap one of its ops;
    # without it they retry (and fail) to import torch_mlir.dialects.<name> for every op.
    if _SEARCH_PREFIX not in _cext.globals.dialect_search_modules:
        _cext.globals.append_dialect_search_prefix(_SEARCH_PREFIX)

    with context:
        for dialect in (trn.Trn, nisa.Nisa):
            if not context.is_dialect_loaded(dialect.DIALECT_NAMESPACE):
                dialect.load()


def make_context() -> ir.Context:
    """A fresh MLIR context with upstream dialects and the project's dialects loaded."""
    context = ir.Context()
    load_dialects(context)
    return context
