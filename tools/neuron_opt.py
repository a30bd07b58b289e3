"""neuron-opt: run torchneuron's passes on MLIR files, like mlir-opt.

    neuron-opt input.mlir --trn-fuse --trn-tile="target=trn1"
    neuron-opt input.mlir --pass-pipeline="builtin.module(convert-linalg-to-trn,trn-fuse)"
    neuron-opt --split-input-file tests.mlir --trn-schedule
    neuron-opt --help            # lists every pass with its summary and options

Upstream MLIR passes (canonicalize, cse, ...) mix with ours. Diagnostics print as
`file:line:col: error: message`; any failure exits with status 1. Never imports torch.
"""

from __future__ import annotations

import re
import sys

USAGE = "usage: neuron-opt [options] [input.mlir|-] [--<pass>[=\"opt=val ...\"]]..."

SPLIT_MARKER = re.compile(r"^// -----\s*$", re.M)
_LOC = re.compile(r'^loc\("(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+)\)$')


def _help(registry) -> str:
    lines = [USAGE, "", "Options:",
             "  -o FILE                  write output to FILE (default: stdout)",
             "  --split-input-file       process chunks separated by '// -----' separately",
             "  --pass-pipeline=PIPELINE run a textual pipeline, e.g. 'builtin.module(a,b{x=1})'",
             "  --mlir-print-debuginfo   print locations",
             "  --mlir-print-op-generic  print every op in generic form",
             "  --mlir-timing            print the time each pass took (and the verifier after "
             "it) to stderr",
             "  -h, --help               show this help", "",
             "Passes (also usable inside --pass-pipeline; upstream MLIR passes work too):"]
    for name in sorted(registry):
        cls = registry[name]
        lines.append(f"  --{name:<28} {cls.SUMMARY}")
        for f in cls.options():
            default = str(f.default).lower() if isinstance(f.default, bool) else (f.default or '""')
            lines.append(f"      {f.name.replace('_', '-')}={default}  ({f.type})")
    return "\n".join(lines)


def _format_location(loc, filename: str) -> str:
    text = str(loc)
    m = _LOC.match(text)
    if m:
        file = filename if m.group("file") in ("-", "") else m.group("file")
        return f"{file}:{m.group('line')}:{m.group('col')}"
    return text[len("loc("):-1] if text.startswith("loc(") else text


def read_text(tool: str, filename: str) -> str | None:
    """The MLIR text of `filename` ('-': stdin), or None after printing `tool`'s error for a
    file that cannot be read or is not UTF-8 text."""
    try:
        if filename == "-":
            return sys.stdin.read()
        with open(filename, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        print(f"{tool}: error: cannot read '{filename}': {exc.strerror}", file=sys.stderr)
    except UnicodeDecodeError as exc:
        print(f"{tool}: error: '{filename}' is not MLIR text (not UTF-8: {exc.reason} at byte "
              f"{exc.start})", file=sys.stderr)
    return None


def _print_diagnostics(exc, filename: str) -> None:
    for diag in exc.error_diagnostics:
        _print_diagnostic(diag, filename, "error")


def _print_diagnostic(diag, filename: str, severity: str) -> None:
    print(f"{_format_location(diag.location, filename)}: {severity}: {diag.message}",
          file=sys.stderr)
    for note in diag.notes:
        _print_diagnostic(note, filename, "note")


def parse_args(argv: list[str]):
    opts = {"input": "-", "output": "-", "split": False, "pipeline": None, "debuginfo": False,
            "generic": False, "timing": False, "passes": []}
    i = 0
    positional = []
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            return "help"
        if arg == "-o":
            if i + 1 >= len(argv):
                raise ValueError("-o needs a file name")
            opts["output"] = argv[i + 1]
            i += 2
            continue
        if arg.startswith("-o") and len(arg) > 2 and not arg.startswith("--"):
            opts["output"] = arg[2:]
        elif arg == "--split-input-file":
            opts["split"] = True
        elif arg.startswith("--pass-pipeline="):
            opts["pipeline"] = arg.split("=", 1)[1]
        elif arg == "--mlir-print-debuginfo":
            opts["debuginfo"] = True
        elif arg == "--mlir-print-op-generic":
            opts["generic"] = True
        elif arg == "--mlir-timing":
            opts["timing"] = True
        elif arg.startswith("--"):
            name, _, value = arg[2:].partition("=")
            opts["passes"].append((name, value))
        elif arg.startswith("-") and arg != "-":
            raise ValueError(f"unknown option '{arg}'")
        else:
            positional.append(arg)
        i += 1
    if len(positional) > 1:
        raise ValueError(f"expected one input file, got {len(positional)}")
    if positional:
        opts["input"] = positional[0]
    if opts["pipeline"] and opts["passes"]:
        raise ValueError("use either --pass-pipeline or pass flags, not both")
    return opts


def main(argv: list[str] | None = None) -> int:
    from torch_mlir import ir

    from torchneuron.compiler.passes import (
        PassOptionError, build_pass_manager, load_all_passes, parse_options, parse_pipeline,
    )
    from torchneuron.dialects import make_context
    from torchneuron.dialects.common import memref_info_cache
    from torchneuron.gc_pause import cyclic_gc_paused

    registry = load_all_passes()
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts = parse_args(argv)
    except ValueError as exc:
        print(f"neuron-opt: error: {exc}\n{USAGE}", file=sys.stderr)
        return 1
    if opts == "help":
        print(_help(registry))
        return 0

    filename = opts["input"]
    source = read_text("neuron-opt", filename)
    if source is None:
        return 1
    display = "<stdin>" if filename == "-" else filename

    try:
        items = parse_pipeline(opts["pipeline"]) if opts["pipeline"] \
            else [(name, parse_options(value.strip('"'))) for name, value in opts["passes"]]
        build_pass_manager(items, make_context())   # validate names and options up front
    except PassOptionError as exc:
        print(f"neuron-opt: error: {exc}", file=sys.stderr)
        return 1

    chunks = _split(source) if opts["split"] else [(0, source)]
    outputs = []
    failed = False
    for first_line, chunk in chunks:
        context = make_context()
        # (The cycle collector paused as compile_linalg pauses it: --mlir-timing then reports
        # what a compilation spends in each pass.)
        with context, memref_info_cache(), cyclic_gc_paused():
            padded = "\n" * first_line + chunk
            try:
                module = ir.Module.parse(padded)
                pm = build_pass_manager(items, context)
                if opts["timing"]:
                    pm.enable_timing()
                pm.run(module.operation)
            except ir.MLIRError as exc:
                _print_diagnostics(exc, display)
                failed = True
                continue
            outputs.append(module.operation.get_asm(enable_debug_info=opts["debuginfo"],
                                                    print_generic_op_form=opts["generic"]))
    text = "\n// -----\n".join(o.rstrip("\n") + "\n" for o in outputs)
    if opts["output"] == "-":
        sys.stdout.write(text)
    else:
        try:
            with open(opts["output"], "w") as f:
                f.write(text)
        except OSError as exc:
            print(f"neuron-opt: error: cannot write '{opts['output']}': {exc.strerror}",
                  file=sys.stderr)
            return 1
    return 1 if failed else 0


def _split(source: str) -> list[tuple[int, str]]:
    """Chunks of a --split-input-file input, each with the number of lines before it."""
    chunks = []
    line = 0
    pos = 0
    for m in SPLIT_MARKER.finditer(source):
        chunk = source[pos:m.start()]
        chunks.append((line, chunk))
        line += chunk.count("\n") + 1
        pos = m.end()
    chunks.append((line, source[pos:]))
    return chunks


if __name__ == "__main__":
    sys.exit(main())
