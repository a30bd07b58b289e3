"""neuron-translate: turn a scheduled `.isa.mlir` into a `.neff` (like mlir-translate).

    neuron-translate --isa-to-neff model.isa.mlir -o model.neff

The input must have been through trn-plan-memory and trn-schedule (every buffer placed, every
cross-engine dependency synchronised). Never imports torch.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from torch_mlir import ir

    from torchneuron.compiler.codegen.neff_writer import emit_neff
    from torchneuron.compiler.errors import CompileError
    from torchneuron.dialects import make_context
    from torchneuron.tools.neuron_opt import _print_diagnostics, read_text

    parser = argparse.ArgumentParser(prog="neuron-translate", description=__doc__.split("\n")[0])
    parser.add_argument("--isa-to-neff", action="store_true", required=True,
                        help="emit the NEFF binary of a scheduled nisa module")
    parser.add_argument("input", help="input .isa.mlir ('-' for stdin)")
    parser.add_argument("-o", dest="output", required=True, help="output .neff")
    args = parser.parse_args(argv)

    source = read_text("neuron-translate", args.input)
    if source is None:
        return 1
    with make_context():
        try:
            module = ir.Module.parse(source)
            data = emit_neff(module)
        except ir.MLIRError as exc:
            _print_diagnostics(exc, "<stdin>" if args.input == "-" else args.input)
            return 1
        except CompileError as exc:
            print(f"neuron-translate: error: {exc}", file=sys.stderr)
            return 1
    try:
        with open(args.output, "wb") as f:
            f.write(data)
    except OSError as exc:
        print(f"neuron-translate: error: cannot write '{args.output}': {exc.strerror}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
