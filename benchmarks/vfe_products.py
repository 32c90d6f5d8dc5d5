"""How much of VFE's objective + gradient its matrix products alone take: the floor of the
streamed VFE bound on this machine.

    python benchmarks/vfe_products.py [--N 100000] [--M 500] [--rounds 3]

With `bench speed`'s data (D = 8 standard normal inputs, SE-ARD with lengthscales 2,
σ² = 0.1) and the chunk size sparsegp chooses, three loops over the full chunks, in
interleaved rounds in one process:

* the products only: per chunk the forward's lower-triangle Gram panels of [Kuf; yᵀ] and the
  backward's [M, M+1]·[M+1, B] product, on buffers held from chunk to chunk — the 3·N·M²
  flops VFE's gradient cannot do without;
* the same with the kernel matrix evaluated before each product (as the forward and backward
  passes do);
* sparsegp's whole `SGPR.training_loss()` and its gradient.

A goal below the first line cannot be met by changing anything but the products themselves.
"""

from __future__ import annotations

import argparse
import time

import torch

import sparsegp as sg
from sparsegp.benchmarking.speed import random_problem
from sparsegp.covariances import cross_covariance
from sparsegp.objectives.collapsed.sums import add_gram_lower_
from sparsegp.runtime.chunking import auto_chunk_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--N", type=int, default=100_000)
    parser.add_argument("--M", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    N, M = args.N, args.M
    X, y, Z = random_problem(N, M)
    kernel = sg.kernels.SquaredExponential(lengthscale=[2.0] * X.shape[1])
    kuf = cross_covariance(sg.features.InducingPoints(Z.clone()), kernel)
    B = min(N, auto_chunk_size(M, 8))
    full = [slice(i, i + B) for i in range(0, N - B + 1, B)]
    KY = torch.zeros(M + 1, B, dtype=torch.float64)
    KY[M] = 1.0
    H = torch.randn(M, M + 1, dtype=torch.float64)
    S = torch.zeros(M + 1, M + 1, dtype=torch.float64)
    G = torch.empty(M, B, dtype=torch.float64)

    def loop(with_kernel: bool) -> float:
        start = time.perf_counter()
        with torch.no_grad():
            for s in full:
                if with_kernel:
                    kuf.value(X[s], out=KY[:M])
                add_gram_lower_(S, KY)
                if with_kernel:
                    kuf.value(X[s], out=KY[:M])
                torch.mm(H, KY, out=G)
        return time.perf_counter() - start

    model = sg.SGPR(X, y, kernel=kernel, inducing_points=Z, noise_variance=0.1,
                    standardize_y=False)
    params = [p for p in model.parameters() if p.requires_grad]

    def whole() -> float:
        start = time.perf_counter()
        torch.autograd.grad(model.training_loss(), params)
        return time.perf_counter() - start

    whole()  # warm-up
    print(f"N = {N}, M = {M}, chunks of {B} ({len(full)} full), {torch.get_num_threads()} "
          "threads; seconds:")
    for r in range(args.rounds):
        print(f"round {r + 1}: products only {loop(False):.3f}, with the kernel matrices "
              f"{loop(True):.3f}, whole objective + gradient {whole():.3f}", flush=True)


if __name__ == "__main__":
    main()
