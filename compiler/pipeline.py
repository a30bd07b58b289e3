"""The compiler's stages, in order. Each stage's output can be dumped and fed back in:

    [fx]     torch.fx.GraphModule                       (NAME.fx.txt)
      | torch_mlir.fx import + torch-mlir's backend pipeline   (frontend/fx_import.py)
    [linalg] linalg-on-tensors                          (NAME.linalg.mlir)
      | convert-linalg-to-trn, trn-fuse, trn-layout, trn-tile
    [trn]    trn dialect, fused kernels with tiling decisions (NAME.trn.mlir)
      | convert-trn-to-nisa, trn-plan-memory, trn-schedule
    [isa]    nisa dialect: scheduled instructions on placed buffers (NAME.isa.mlir)
      | codegen/neff_writer.py
    [neff]   the binary                                 (NAME.neff)
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping

from torch_mlir import ir

from torchneuron import config
from torchneuron.compiler.codegen.neff_writer import emit_neff
from torchneuron.compiler.errors import CompileError, stage_error
from torchneuron.compiler.passes import build_pass_manager, parse_pipeline
from torchneuron.compiler.verify import verify_concurrently
from torchneuron.dialects import make_context
from torchneuron.dialects.common import memref_info_cache
from torchneuron.gc_pause import cyclic_gc_paused
from torchneuron.target import get_target


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """What the user can choose (torch.compile(..., options={...}) uses these names)."""
    target: str = ""                  # "" -> TORCHNEURON_TARGET, default trn2
    # Frontend: values computed from no graph input (a causal mask from aranges) folded into
    # constants of the program before import (compiler/frontend/fx_import.fold_constants)
    fold_constants: bool = True
    # Backend: in an inference graph, a weight read transposed is handed to the device
    # transposed, laid out as a deployment loads it (torchneuron/pretransposed_weights.py)
    pretransposed_weights: bool = True
    fuse_matmul_epilogue: bool = True
    fuse_elementwise: bool = True
    fuse_rows: bool = True            # trn-fuse rows: softmax/norm-style groups in one kernel
    fuse_attention: bool = True       # trn-fuse attention: scores -> softmax -> @ values on chip
    # trn-fuse attention-saved: an attention kernel also where its probabilities are saved (a
    # training step's forward), storing them as it computes them
    fuse_attention_saved: bool = True
    # trn-fuse attention-contractions: a matmul contracting the rows an attention kernel stores
    # over their row dim (a softmax backward's dK^T = Q^T @ dS) computed inside it
    fuse_attention_contractions: bool = True
    # trn-fuse attention-input-contractions: a matmul contracting an input that such a kernel's
    # row part reads over its rows (a softmax backward's dV = P^T @ dO) computed inside it
    # from the row tiles it loads
    fuse_attention_input_contractions: bool = True
    fuse_matmul_rows: bool = True     # trn-fuse matmul-rows: a matmul's result rows-reduced on chip
    # trn-fuse epilogue-producers: an elementwise kernel only a matmul's epilogue reads is
    # computed in that epilogue
    fuse_epilogue_producers: bool = True
    # trn-fuse epilogue-results: an elementwise kernel reading a matmul's result that is also
    # stored runs in the matmul's epilogue, the kernel storing both
    fuse_epilogue_results: bool = True
    # trn-fuse epilogue-residuals: a sum read by a norm's rows and elsewhere (a residual
    # stream), one of whose operands a matmul's epilogue computes, is added in that epilogue
    # and stored once, not recomputed by the rows and stored by a kernel of its own
    fuse_epilogue_residuals: bool = True
    # trn-fuse bias-gradients: a Linear's bias gradient (a sum over tokens) computed by the
    # kernel of its weight gradient, on PE from the tiles that kernel loads
    fuse_bias_gradients: bool = True
    # trn-fuse weight-gradients: a matmul whose result only a weight gradient reads (T^T @ X)
    # computed inside that gradient's kernel, T kept on chip
    fuse_weight_gradients: bool = True
    fuse_mlp: bool = True             # trn-fuse mlp: Linear - activation - Linear in one kernel
    # trn-fuse mlp-saved: the same where the hidden activation is also saved (a training
    # step's forward): stored as computed, handed to the second Linear on chip
    fuse_mlp_saved: bool = True
    # trn-fuse mlp-saved-gradient: where an mlp_saved kernel's hidden value is read only by its
    # weight gradient besides (a backward's dH^T @ X), that gradient is computed in the kernel
    # from the hidden rows kept on chip: the hidden value is neither stored nor loaded
    fuse_mlp_saved_gradient: bool = True
    # trn-fuse mlp-rows: an mlp kernel read only by a row-wise kernel over its output rows
    # (the residual add and layer norm after a post-norm FFN) hands it its output on chip
    fuse_mlp_rows: bool = True
    # trn-fuse linear-rows: likewise a Linear's (an attention block's output projection)
    fuse_linear_rows: bool = True
    # trn-fuse row-results: a row-wise kernel also stores the per-row values read outside it
    # (a layer norm's saved mean and 1/std), which are not computed again from the rows
    fuse_row_results: bool = True
    # trn-fuse column-sums: a row-wise kernel also sums a row value over every row (a layer
    # norm's weight and bias gradients), which is not loaded again by a reduction kernel
    fuse_column_sums: bool = True
    layout_assignment: bool = True    # trn-layout: matmul results stored as consumers read them
    # trn-layout attention-token-major: attention outputs stored as [B, S, H, Dv] where the
    # output projection reads them so
    attention_token_major: bool = True
    # trn-layout concat-reader-order: a concatenation its readers split and transpose alike
    # (a QKV gradient read as token rows) built in that order
    concat_reader_order: bool = True
    # trn-layout transposed-contractions: an attention kernel's row contraction that is read
    # transposed (a softmax backward's dK^T, taken as dK) computed transposed
    transposed_contractions: bool = True
    # trn-fuse-attention-output: a token-major attention kernel read only by a linear_rows
    # kernel (the output projection, residual add and norm) merges into it; the attention
    # output's token rows stay on chip as the projection's operand
    fuse_attention_output: bool = True
    # trn-fuse-attention-output qkv: the QKV projection joins that kernel in front; each
    # batch index's Q, K and V rows are computed on chip as the attention stages them
    fuse_attention_qkv: bool = True
    # trn-fuse-attention-output ffn: the post-norm FFN's mlp_rows kernel that reads that
    # kernel's result (the first layer norm's) joins it behind; the norm's rows stay on chip
    fuse_attention_ffn: bool = True
    # trn-fuse-attention-output qkv-saved: in a training step's forward, the QKV projection
    # joins the attention kernel, which stores the Q, K^T and V views the step saves from
    # what it has on chip; the projection's result never reaches HBM. (Also where nothing is
    # saved and the output projection is a plain matmul kernel: a pre-norm layer's inference.)
    fuse_attention_qkv_saved: bool = True
    # trn-fuse and trn-fuse-attention-output input-rows: a pre-norm layer's norm whose rows
    # only the next kernel's first Linear reads (an mlp's, such an attention kernel's QKV
    # projection) joins that kernel in front; the rows stay on chip
    fuse_input_rows: bool = True
    kernel_order: bool = True         # trn-order: kernels on the longest chain of work first
    # trn-order co-run: an attention kernel and an independent PE-bound kernel run side by
    # side, in disjoint parts of SBUF and PSUM (trn-plan-memory)
    co_run: bool = True
    # convert-trn-to-nisa masked-keys: an attention kernel computes only the keys a constant
    # mask lets some row of each query tile see, and adds a 0/-inf mask before the scaling
    # only where it is not 0
    attention_masked_keys: bool = True
    # convert-trn-to-nisa scale-into-q: a power-of-two scaling an attention kernel's row part
    # applies last to a value linear in its scores (a softmax backward's) is applied to Q^T
    # as it leaves PSUM instead, the same bits without a pass over the rows
    attention_scale_into_q: bool = True
    # convert-trn-to-nisa overlap-projection: an attention kernel that computes its QKV
    # projection over several batch indices computes the next one's rows while the attention
    # works on this one's (the projection's output tiles one at a time, in its own part of
    # SBUF and PSUM)
    attention_overlap_projection: bool = True
    # convert-trn-to-nisa hidden-spans: an mlp kernel whose token block's output tiles leave
    # PSUM room for the first matmul's accumulators twice as wide computes its hidden
    # activation for two blocks at once, kept in SBUF for the second block: the first matmul
    # in half the instructions (512 columns each, not 256), the same products in the same
    # order; a weight_gradient kernel likewise computes T over two blocks of hidden units
    mlp_hidden_spans: bool = True
    # convert-trn-to-nisa pool-sharing: POOL (GpSimd) takes its share of the tensor_tensor ops
    # and copies whose operands are all in SBUF, where it would finish them before DVE (or ACT)
    pool_sharing: bool = True
    # convert-trn-to-nisa regroup-copies: a copy between layouts that disagree on the
    # contiguous dim is loaded in the source's order and stored in the destination's,
    # reordered on an engine, where the longer DMA runs pay for that copy
    regroup_copies: bool = True
    # trn-plan-memory oldest-freed: on-chip bytes whose last use ended earliest are reused first
    onchip_oldest_freed: bool = True
    # trn-plan-memory group-reuse: a row-wise kernel's SBUF tiles reuse the kernel's own bytes
    # first (a footprint of a few tiles, clear of the kernels beside it)
    onchip_group_reuse: bool = True
    # trn-schedule justify: the list schedule improved by a backward and a second forward pass
    schedule_justify: bool = True
    # neuron-tune's database, read by trn-tile (default: TORCHNEURON_TUNING_DB when set; taken
    # at construction so that the persistent compile cache keys on it).
    tuning_db: str = dataclasses.field(default_factory=lambda: config.TUNING_DB.get() or "")

    @staticmethod
    def from_dict(options: dict | None) -> "CompileOptions":
        """The options named in `options`, each checked: a misspelt name, a value of the
        wrong type or an unknown target (given here or by TORCHNEURON_TARGET) raises
        ValueError (TypeError for options that are not a dict) naming it, before anything is
        compiled."""
        options = options_dict(options)
        fields = {f.name: f for f in dataclasses.fields(CompileOptions)}
        unknown = sorted(set(options) - set(fields))
        if unknown:
            raise ValueError(f"unknown torchneuron option(s) {', '.join(unknown)}; "
                             f"known: {', '.join(sorted(fields))}")
        for name, value in options.items():
            expected = bool if fields[name].type == "bool" else str
            if type(value) is not expected:
                raise ValueError(f"torchneuron option {name} must be a {expected.__name__}, "
                                 f"not {value!r}")
        compile_options = CompileOptions(**options)
        compile_options.target_name          # an unknown target raises UnknownTargetError
        return compile_options

    @property
    def target_name(self) -> str:
        return get_target(self.target or None).name

    @property
    def tuning_db_path(self) -> str:
        return self.tuning_db


def options_dict(options) -> dict:
    """A copy of torch.compile's `options` (None: none) as a dict; TypeError where they are
    not a mapping of option names to values."""
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(f"torchneuron options must be a dict of option names to values, "
                        f"not {type(options).__name__}")
    return dict(options or {})


@dataclasses.dataclass(frozen=True)
class Stage:
    name: str          # also the dump file extension: NAME.<name>.mlir
    summary: str
    passes: str        # a pass pipeline for neuron-opt


def stages(options: CompileOptions) -> list[Stage]:
    """The MLIR stages after import, as one readable list."""
    target = options.target_name
    fuse = (f"trn-fuse{{matmul-epilogue={str(options.fuse_matmul_epilogue).lower()} "
            f"elementwise={str(options.fuse_elementwise).lower()} "
            f"rows={str(options.fuse_rows).lower()} "
            f"attention={str(options.fuse_attention).lower()} "
            f"attention-saved={str(options.fuse_attention_saved).lower()} "
            f"attention-contractions={str(options.fuse_attention_contractions).lower()} "
            f"attention-input-contractions="
            f"{str(options.fuse_attention_input_contractions).lower()} "
            f"matmul-rows={str(options.fuse_matmul_rows).lower()} "
            f"epilogue-producers={str(options.fuse_epilogue_producers).lower()} "
            f"epilogue-results={str(options.fuse_epilogue_results).lower()} "
            f"epilogue-residuals={str(options.fuse_epilogue_residuals).lower()} "
            f"bias-gradients={str(options.fuse_bias_gradients).lower()} "
            f"weight-gradients={str(options.fuse_weight_gradients).lower()} "
            f"mlp={str(options.fuse_mlp).lower()} "
            f"mlp-saved={str(options.fuse_mlp_saved).lower()} "
            f"mlp-saved-gradient={str(options.fuse_mlp_saved_gradient).lower()} "
            f"mlp-rows={str(options.fuse_mlp_rows).lower()} "
            f"linear-rows={str(options.fuse_linear_rows).lower()} "
            f"row-results={str(options.fuse_row_results).lower()} "
            f"column-sums={str(options.fuse_column_sums).lower()} "
            f"input-rows={str(options.fuse_input_rows).lower()} "
            f"target={target}}}")
    layout = (f"trn-layout{{attention-token-major="
              f"{str(options.attention_token_major).lower()} concat-reader-order="
              f"{str(options.concat_reader_order).lower()} transposed-contractions="
              f"{str(options.transposed_contractions).lower()}}}," if options.layout_assignment
              else "")
    attention_output = (f"trn-fuse-attention-output{{target={target} qkv="
                        f"{str(options.fuse_attention_qkv).lower()} ffn="
                        f"{str(options.fuse_attention_ffn).lower()} qkv-saved="
                        f"{str(options.fuse_attention_qkv_saved).lower()} input-rows="
                        f"{str(options.fuse_input_rows).lower()}}},"
                        if options.fuse_attention_output else "")
    order = (f"trn-order{{target={target} co-run={str(options.co_run).lower()}}},"
             if options.kernel_order else "")
    db = f" tuning-db={options.tuning_db_path}" if options.tuning_db_path else ""
    return [
        Stage("trn", "recognise engine ops, fuse kernels, choose layouts and tiles",
              f"convert-linalg-to-trn,{fuse},{layout}{attention_output}{order}"
              f"trn-tile{{target={target}{db}}}"),
        Stage("isa", "tile into instructions, place buffers, synchronise engines",
              f"convert-trn-to-nisa{{target={target} masked-keys="
              f"{str(options.attention_masked_keys).lower()} scale-into-q="
              f"{str(options.attention_scale_into_q).lower()} overlap-projection="
              f"{str(options.attention_overlap_projection).lower()} hidden-spans="
              f"{str(options.mlp_hidden_spans).lower()} pool-sharing="
              f"{str(options.pool_sharing).lower()} regroup-copies="
              f"{str(options.regroup_copies).lower()}}},"
              f"trn-plan-memory{{oldest-freed={str(options.onchip_oldest_freed).lower()} "
              f"group-reuse={str(options.onchip_group_reuse).lower()}}},"
              f"trn-schedule{{justify={str(options.schedule_justify).lower()}}}"),
    ]


@dataclasses.dataclass
class CompiledGraph:
    name: str
    neff: bytes
    stage_seconds: dict[str, float]


def compile_linalg(linalg_text: str, name: str, options: CompileOptions,
                   dump_dir: str | None = None) -> CompiledGraph:
    """Compile linalg-on-tensors text (the frontend's output) down to a NEFF."""
    seconds: dict[str, float] = {}
    _dump(dump_dir, f"{name}.linalg.mlir", linalg_text)
    context = make_context()
    with context, memref_info_cache(), cyclic_gc_paused():
        try:
            module = ir.Module.parse(linalg_text)
        except ir.MLIRError as exc:
            raise CompileError(f"cannot parse the linalg module: {exc}") from None
        options = tuned_options(module, options)
        verify_each = config.VERIFY_EACH.get()
        all_stages = stages(options)
        verdict = None
        for stage in all_stages:
            start = time.perf_counter()
            pm = build_pass_manager(parse_pipeline(stage.passes), context)
            # Verifying after every pass costs as much as the passes on large programs;
            # each stage's result is verified once instead (TORCHNEURON_VERIFY_EACH=1 for
            # every pass, as neuron-opt does).
            pm.enable_verifier(verify_each)
            try:
                pm.run(module.operation)
                if not verify_each:
                    if stage is all_stages[-1] and not dump_dir:
                        # The last stage's program is verified by a child process while
                        # this one writes the NEFF from it (where the machine has a core
                        # for it); its verdict is awaited before the NEFF is returned. (A
                        # dump prints the program, which is verified before it is printed.)
                        verdict = verify_concurrently(module, stage.name)
                    else:
                        module.operation.verify()
            except ir.MLIRError as exc:
                raise stage_error(stage.name, exc) from None
            seconds[stage.name] = time.perf_counter() - start
            if dump_dir:
                _dump(dump_dir, f"{name}.{stage.name}.mlir", module.operation.get_asm(
                    enable_debug_info=True, assume_verified=True))
        start = time.perf_counter()
        try:
            neff = emit_neff(module, metadata={"options": dataclasses.asdict(options)})
        finally:
            # Awaited also when the NEFF writer raised: an invalid program is reported as
            # the verifier finds it, not as whatever the writer tripped over first.
            if verdict is not None:
                verdict()
        seconds["neff"] = time.perf_counter() - start
    _dump(dump_dir, f"{name}.neff", neff)
    return CompiledGraph(name, neff, seconds)


def tuned_options(module: ir.Module, options: CompileOptions) -> CompileOptions:
    """`options` with the fusion and layout choices neuron-tune stored for this graph in the
    tuning database, if any (a corrupt database warns, in trn-tile, and changes nothing)."""
    if not options.tuning_db_path:
        return options
    from torchneuron.compiler.tuning import TuningDB, TuningDBError, graph_key

    try:
        db = TuningDB.load(options.tuning_db_path)
    except TuningDBError:
        return options
    config = db.lookup(graph_key(module, options.target_name))
    return dataclasses.replace(options, **config) if config else options


def _dump(dump_dir: str | None, filename: str, data: str | bytes) -> None:
    if not dump_dir:
        return
    os.makedirs(dump_dir, exist_ok=True)
    path = os.path.join(dump_dir, filename)
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(path, mode) as f:
        f.write(data)
