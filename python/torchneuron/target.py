"""The table of target machines: every hardware figure the compiler and the simulator use.

All figures are public facts from AWS's Neuron documentation (the Trainium/Trainium2
architecture guides, the NKI ISA reference and the NKI performance guide). Each field's comment
names its source. No pass and no part of the simulator may hard-code one of these numbers; they
read them from a `Target`.

Sources (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/ + path):
    [trn1-arch]   general/arch/neuron-hardware/trainium.html -- Trainium: 2 NeuronCore-v2,
                  32 GiB HBM at 820 GB/s
    [trn2-arch]   general/arch/neuron-hardware/trainium2.html -- Trainium2: 8 NeuronCore-v3,
                  96 GiB HBM at 2.9 TB/s, SBUF 24 -> 28 MiB per core
    [nki-arch-v2] general/nki/arch/trainium_inferentia2_arch.html -- Trainium/Inferentia2
                  Architecture Guide for NKI: NeuronCore-v2 engines and clocks, SBUF/PSUM,
                  32 DMA engines per device (16 per core)
    [nki-arch-v3] general/nki/arch/trainium2_arch.html -- Trainium2 Architecture Guide for
                  NKI: NeuronCore-v3 engine updates (clocks, fp8 "double row"), 128 DMA
                  engines per device (16 per core)
    [nki-model]   general/nki/programming_model.html -- NKI programming model: 128
                  partitions, SBUF and PSUM layout, 8 PSUM banks of 2 KiB per partition
    [nki-isa]     general/nki/api/nki.isa.html -- NKI ISA reference (nc_matmul limits)
    [nki-perf]    general/nki/nki_perf_guide.html -- NKI performance guide: fp32 matmul rate,
                  instruction cost model (MIN_II, fixed overhead, iota), DMA fixed cost
TARGET.md (the project's description of the target) collects these figures in one table.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchneuron import config


class UnknownTargetError(ValueError):
    """A target name that is not in the table."""


@dataclass(frozen=True)
class Target:
    name: str
    core: str

    # -- On-chip layout ------------------------------------------------------------------
    # NKI programming model [nki-model]: SBUF and PSUM are 2-D, 128 partitions.
    num_partitions: int
    # trn2: 24 MiB -> 28 MiB SBUF per NeuronCore-v3 (Trainium2 architecture guide [trn2-arch]);
    # trn1: 24 MiB per NeuronCore-v2 (Trainium architecture guide, [nki-arch-v2]). Bytes per
    # partition.
    sbuf_partition_bytes: int
    # PSUM: 2 MiB per core = 128 partitions x 16 KiB, organised as 8 banks of 2 KiB
    # (NKI programming model, "PSUM" [nki-model]). A matmul accumulation group lives in one
    # bank.
    psum_partition_bytes: int
    psum_banks: int

    # -- Tensor engine (PE) --------------------------------------------------------------
    # 128x128 systolic array (architecture guides [nki-arch-v2]). matmul: K (contraction,
    # partition axis of both inputs) <= 128, M (stationary free size) <= 128, N (moving free
    # size) <= 512 (one PSUM bank of fp32) -- NKI ISA reference, nki.isa.nc_matmul [nki-isa].
    # PE clock: 2.8 GHz on NeuronCore-v2 [nki-arch-v2], 2.4 GHz on NeuronCore-v3
    # [nki-arch-v3]; peak = 128 * 128 MACs * 2 FLOP * clock (TARGET.md: 91.8 / 78.6 TFLOP/s).
    pe_rows: int
    pe_cols: int
    matmul_max_moving: int
    pe_ghz: float
    # PE fp32 runs at 1/4 of the bf16 rate (NKI performance guide, "fp32 matmul performance"
    # [nki-perf]).
    pe_fp32_slowdown: int
    # trn2 runs fp8 at twice the bf16 rate ("double row", K split in two [nki-arch-v3]; the
    # Trainium2 page's FP8 TFLOPS are twice its BF16 TFLOPS [trn2-arch]); trn1 at the bf16
    # rate (Trainium's FP8 and BF16 TFLOPS are equal [trn1-arch]).
    pe_fp8_speedup: int

    # -- Other engines -------------------------------------------------------------------
    # Clock of the Vector (DVE), Scalar/activation (ACT) and GpSimd (POOL) engines, GHz
    # (NKI performance guide, engine table [nki-perf]; architecture guides [nki-arch-v2],
    # [nki-arch-v3]).
    dve_ghz: float
    act_ghz: float
    pool_ghz: float
    # Minimum initiation interval of an ACT/DVE/POOL instruction, cycles (NKI cost model
    # [nki-perf]).
    min_ii: int
    # Fixed overhead added to a dependent back-to-back instruction on one engine, or to an
    # instruction with a tiny free size (N << 128), cycles (NKI performance guide [nki-perf]).
    fixed_overhead_cycles: int
    # Free size below which an instruction counts as "tiny" for the fixed overhead: not a
    # published figure but the simulator's reading of the guide's "N << 128" (a modelling
    # parameter; 16 = 128 / 8).
    tiny_free_size: int
    # iota / affine_select on POOL: ~150 cycles + N (NKI cost model [nki-perf]).
    pool_iota_base_cycles: int

    # -- DMA -----------------------------------------------------------------------------
    # 16 DMA queues (rings) per core: 32 DMA engines per 2-core Trainium [nki-arch-v2], 128
    # per 8-core Trainium2 [nki-arch-v3]. Each sustains ~23 B/ns on trn2, ~17 B/ns on trn1
    # (TARGET.md; 16 x 23 B/ns = 368 GB/s per trn2 core, within 2% of its 2.9 TB/s / 8 share
    # of HBM bandwidth [trn2-arch]).
    dma_queues: int
    dma_queue_bytes_per_ns: float
    # ~1.3 us from trigger to start of a DMA (NKI performance guide, "DMA fixed cost"
    # [nki-perf]).
    dma_latency_ns: float
    # Each contiguous chunk of a transfer pays this much fixed work; chosen so that a 512 B
    # chunk runs at half the queue bandwidth and 2 KiB chunks at 80% ("under 512 B per
    # partition is overhead-bound, 2 KiB+ is efficient", NKI performance guide [nki-perf]).
    dma_chunk_overhead_bytes: int

    # -- HBM -----------------------------------------------------------------------------
    # trn2: 96 GiB per chip, 8 cores -> 12 GiB each; 2.9 TB/s per chip shared by 8 cores
    # [trn2-arch], [nki-arch-v3]. trn1: 32 GiB per chip, 2 cores -> 16 GiB each; 820 GB/s
    # per chip [trn1-arch], [nki-arch-v2].
    hbm_bytes: int
    hbm_chip_bytes_per_ns: float
    cores_per_chip: int

    @property
    def psum_bank_bytes(self) -> int:
        return self.psum_partition_bytes // self.psum_banks

    @property
    def sbuf_bytes(self) -> int:
        return self.sbuf_partition_bytes * self.num_partitions

    @property
    def hbm_bytes_per_ns(self) -> float:
        """HBM bandwidth available to one core (its share of the chip)."""
        return self.hbm_chip_bytes_per_ns / self.cores_per_chip

    @property
    def dma_bytes_per_ns(self) -> float:
        """Peak DMA bandwidth of one core: all queues together, capped by its HBM share."""
        return min(self.dma_queues * self.dma_queue_bytes_per_ns, self.hbm_bytes_per_ns)

    def pe_peak_flops_per_ns(self, dtype_bytes: int = 2) -> float:
        """Peak PE rate in FLOP/ns: 128x128 MACs per cycle for bf16/fp16, /4 for fp32,
        x2 for fp8 where the target double-rows it."""
        flops = 2.0 * self.pe_rows * self.pe_cols * self.pe_ghz
        if dtype_bytes >= 4:
            return flops / self.pe_fp32_slowdown
        if dtype_bytes == 1:
            return flops * self.pe_fp8_speedup
        return flops

    def allowed_start_partitions(self, count: int) -> tuple[int, ...]:
        """Partitions a compute engine's on-chip operand of `count` partitions may start at
        (TARGET.md): 0 if it uses more than half of them, 0 or half if more than a quarter,
        a multiple of a quarter otherwise (0/64, 0/32/64/96 for 128)."""
        half, quarter = self.num_partitions // 2, self.num_partitions // 4
        if count > half:
            return (0,)
        if count > quarter:
            return (0, half)
        return (0, quarter, half, 3 * quarter)

    def engine_ghz(self, engine: str) -> float:
        return {"pe": self.pe_ghz, "act": self.act_ghz, "dve": self.dve_ghz,
                "pool": self.pool_ghz, "sp": self.act_ghz}[engine]


TRN2 = Target(
    name="trn2", core="NeuronCore-v3",
    num_partitions=128,
    sbuf_partition_bytes=224 * 1024,
    psum_partition_bytes=16 * 1024, psum_banks=8,
    pe_rows=128, pe_cols=128, matmul_max_moving=512,
    pe_ghz=2.4, pe_fp32_slowdown=4, pe_fp8_speedup=2,
    dve_ghz=0.96, act_ghz=1.2, pool_ghz=1.2,
    min_ii=64, fixed_overhead_cycles=100, tiny_free_size=16, pool_iota_base_cycles=150,
    dma_queues=16, dma_queue_bytes_per_ns=23.0, dma_latency_ns=1300.0,
    dma_chunk_overhead_bytes=512,
    hbm_bytes=12 * 1024**3, hbm_chip_bytes_per_ns=2900.0, cores_per_chip=8,
)

TRN1 = Target(
    name="trn1", core="NeuronCore-v2",
    num_partitions=128,
    sbuf_partition_bytes=192 * 1024,
    psum_partition_bytes=16 * 1024, psum_banks=8,
    pe_rows=128, pe_cols=128, matmul_max_moving=512,
    pe_ghz=2.8, pe_fp32_slowdown=4, pe_fp8_speedup=1,
    dve_ghz=1.12, act_ghz=1.4, pool_ghz=1.4,
    min_ii=64, fixed_overhead_cycles=100, tiny_free_size=16, pool_iota_base_cycles=150,
    dma_queues=16, dma_queue_bytes_per_ns=17.0, dma_latency_ns=1300.0,
    dma_chunk_overhead_bytes=512,
    hbm_bytes=16 * 1024**3, hbm_chip_bytes_per_ns=820.0, cores_per_chip=2,
)

TARGETS: dict[str, Target] = {t.name: t for t in (TRN2, TRN1)}


def get_target(name: str | None = None) -> Target:
    """The target called `name`, or the one `TORCHNEURON_TARGET` names (default trn2)."""
    chosen = name if name else config.TARGET.get()
    try:
        return TARGETS[chosen]
    except KeyError:
        source = "" if name else f" (from {config.TARGET.name})"
        raise UnknownTargetError(
            f"unknown target {chosen!r}{source}; known targets: {', '.join(TARGETS)}"
        ) from None
