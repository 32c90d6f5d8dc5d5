"""Block Power EP / PITC: one objective + gradient of the streamed, hand-differentiated block
stream (`objectives.collapsed.blocks.BlockPowerEPSums`) against a naive implementation (the same
formula, one block at a time, differentiated by autograd) and against the point-wise family
(PEP without blocks) on the same data, interleaved, in one run; plus the machine's GEMM rate
on the N·M² product for scale. Blocks of about M points by k-means, as the bui2017 experiment.

    python benchmarks/block_pep.py [--N 7373] [--M 5 50 200] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
import torch

import sparsegp as sg


def naive_objective(m: sg.SGPR, labels: np.ndarray, alpha: float) -> torch.Tensor:
    """−F of block Power EP (docs/math.md §2), block by block under autograd: Woodbury on the
    whole data, each block's Λ_b factorised on its own."""
    X, y = m.X, m.y
    Z, k, s2 = m.feature.Z, m.kernel, m.value("noise_variance")
    M = Z.shape[0]
    L = torch.linalg.cholesky(k.K(Z) + 1e-8 * torch.eye(M, dtype=X.dtype))
    A = L.new_zeros(M, M)
    c = L.new_zeros(M)
    s_y = log_lam = pen = L.new_zeros(())
    for b in np.unique(labels):
        idx = torch.as_tensor(np.flatnonzero(labels == b))
        a = torch.linalg.solve_triangular(L, k.K(Z, X[idx]), upper=False)
        D = k.K(X[idx]) - a.mT @ a
        C = torch.linalg.cholesky(alpha * D + s2 * torch.eye(len(idx), dtype=X.dtype))
        Va = torch.linalg.solve_triangular(C, a.mT, upper=False)
        vy = torch.linalg.solve_triangular(C, y[idx, None], upper=False)[:, 0]
        A, c, s_y = A + Va.mT @ Va, c + Va.mT @ vy, s_y + vy @ vy
        ld = 2.0 * torch.log(torch.diagonal(C)).sum()
        log_lam = log_lam + ld
        pen = pen + (1.0 - alpha) / alpha * (ld - len(idx) * torch.log(s2))
    LB = torch.linalg.cholesky(torch.eye(M, dtype=X.dtype) + A)
    e = torch.linalg.solve_triangular(LB, c[:, None], upper=False)[:, 0]
    n = X.shape[0]
    return 0.5 * (n * math.log(2 * math.pi) + log_lam + 2.0 * torch.log(torch.diagonal(LB)).sum()
                  + s_y - e @ e + pen)


def _step(m: sg.SGPR, loss) -> None:
    m.zero_grad()
    loss().backward()


def timed(f, repeats: int) -> float:
    f()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--N", type=int, default=7373)  # kin8nm's training set
    p.add_argument("--M", type=int, nargs="+", default=[5, 50, 200])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.N, 8))
    y = np.sin(X.sum(1)) + 0.1 * rng.standard_normal(args.N)
    G = torch.randn(args.N, 256, dtype=torch.float64)
    gemm = 2 * args.N * 256**2 / timed(lambda: G.mT @ G, args.repeats)
    print(f"N = {args.N}, D = 8, float64, {args.threads} thread(s); "
          f"GEMM {gemm / 1e9:.1f} GFLOP/s on [256, N] x [N, 256]")
    print(f"{'M':>5} {'blocks':>7} {'stream s':>9} {'naive s':>8} {'naive/stream':>12} "
          f"{'point-wise s':>12} {'stream/point':>12} {'GEMM share':>10}")
    for M in args.M:
        print(row(X, y, M, args.repeats, gemm))


def row(X: np.ndarray, y: np.ndarray, M: int, repeats: int, gemm: float) -> str:
    """One table row: the three timings at M, blocks of about M points."""
    N = X.shape[0]
    labels = sg.cluster_blocks(X, math.ceil(N / M), seed=0)
    blocked = sg.SGPR(X, y, inducing_points=X[:M].copy(), approximation="pep", alpha=0.5,
                      blocks=labels)
    point = sg.SGPR(X, y, inducing_points=X[:M].copy(), approximation="pep", alpha=0.5)
    t_stream = timed(lambda: _step(blocked, blocked.training_loss), repeats)
    t_naive = timed(lambda: _step(blocked, lambda: naive_objective(blocked, labels, 0.5)),
                    repeats)
    t_point = timed(lambda: _step(point, point.training_loss), repeats)
    # the N·M² (a aᵀ) and Σ|b|²·M (a_bᵀa_b) products, forward and backward, at GEMM rate
    sizes = np.bincount(labels)
    flops = 2 * 2 * (N * M * M + (sizes**2).sum() * M)
    return (f"{M:>5} {len(sizes):>7} {t_stream:>9.3f} {t_naive:>8.3f} "
            f"{t_naive / t_stream:>12.1f} {t_point:>12.3f} {t_stream / t_point:>12.1f} "
            f"{flops / gemm / t_stream:>10.0%}")


if __name__ == "__main__":
    main()
