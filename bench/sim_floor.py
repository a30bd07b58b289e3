"""What one simulated instruction costs at least on this CPU: the single numpy call that
carries out the data movement or arithmetic of the instruction shapes bench/sim_speed.py's
programs are made of, on warm contiguous operands, against the eager PyTorch time of the
whole computation. The simulator executes each instruction with at least such a call, so
these put a floor under its wall time (README, "Simulator speed").

    .venv/bin/python bench/sim_floor.py
"""

from __future__ import annotations

import statistics
import time

import ml_dtypes
import numpy as np
from threadpoolctl import threadpool_limits

from torchneuron.sim import host_gemm


def median_us(fn, repeats: int = 200) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return 1e6 * statistics.median(samples)


def main() -> None:
    rng = np.random.default_rng(0)
    f32 = np.float32
    stationary = rng.standard_normal((128, 128)).astype(f32)
    moving_64 = rng.standard_normal((128, 64)).astype(f32)
    moving_512 = rng.standard_normal((128, 512)).astype(f32)
    psum = np.zeros((128, 4096), f32)
    rows = []
    for threads in (1, 2):
        with threadpool_limits(threads, "blas"):
            rows.append((f"matmul 128x128x64 fp32, BLAS on {threads} thread(s)",
                         median_us(lambda: stationary.T @ moving_64)))
            rows.append((f"matmul 128x128x512 fp32, BLAS on {threads} thread(s)",
                         median_us(lambda: stationary.T @ moving_512, 50)))
    # bf16 operands (sim/host_gemm.py): the widening the fp32 BLAS needs first, and the
    # host's bf16 GEMM with its subnormal check, which takes them as they are.
    bf16 = np.dtype(ml_dtypes.bfloat16)
    stationary_bf16, moving_bf16 = stationary.astype(bf16), moving_512.astype(bf16)
    out = np.empty((128, 512), f32)
    with threadpool_limits(1, "blas"):
        rows.append(("matmul 128x128x512 bf16, widened for BLAS on 1 thread",
                     median_us(lambda: np.matmul(stationary_bf16.astype(f32).T,
                                                 moving_bf16.astype(f32), out=out), 50)))
    gemm = host_gemm.load()
    if gemm is not None:
        rows.append(("matmul 128x128x512 bf16, host bf16 GEMM on 1 thread",
                     median_us(lambda: gemm.product(stationary_bf16, moving_bf16, out), 50)))
    rows.append(("transpose 128x128 fp32 into a PSUM-strided view",
                 median_us(lambda: psum[:, :128].__setitem__(Ellipsis, stationary.T))))
    rows.append(("copy 128x128 fp32 into a PSUM-strided view",
                 median_us(lambda: psum[:, :128].__setitem__(Ellipsis, stationary))))
    # SBUF -> PSUM transposes with partitions' rows exactly a partition's bytes apart (every
    # row in the same cache sets) and one cache line further apart (sim/memory.py's
    # host_row_bytes), as the simulator lays SBUF and PSUM out.
    for name, pad in (("rows a partition apart", 0), ("rows padded by 64 bytes", 64)):
        sbuf = np.zeros((128, (192 * 1024 + pad) // 4), f32)
        psum_rows = np.zeros((128, (16 * 1024 + pad) // 4), f32)
        tiles = [(sbuf[:, 256 * k:256 * k + 128], psum_rows[:, 128 * k:128 * k + 128])
                 for k in range(12)]
        for src, _ in tiles:
            src[...] = stationary

        def transposes(tiles=tiles):
            for src, dst in tiles:
                dst[...] = src.T
        rows.append((f"transpose 128x128 fp32 SBUF -> PSUM, {name}",
                     median_us(transposes, 50) / len(tiles)))
    for name, us in rows:
        print(f"{name:<52} {us:9.1f} us")


if __name__ == "__main__":
    main()
