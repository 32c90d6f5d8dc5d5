"""The exact GP's objective + gradient: seconds and peak memory (in N×N float64 matrices above
the process's baseline) of the radial-kernel path by hand (`objectives.exact.exact_objective`)
against autograd through K (`exact_log_marginal_likelihood(kernel.K(X), ...)`), each case in a
fresh process, in one run.

    python benchmarks/exact_memory.py [--sizes 2000,4000] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def worker(N: int, path: str, threads: int) -> dict:
    import torch

    import sparsegp as sg
    from sparsegp.objectives.exact import exact_log_marginal_likelihood, exact_objective

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(N, 8, dtype=torch.float64, generator=g)
    y = torch.sin(X[:, 0]) + 0.1 * torch.randn(N, dtype=torch.float64, generator=g)
    kernel = sg.kernels.SquaredExponential(lengthscale=[2.0] * 8, variance=1.0)
    noise = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    params = [*kernel.parameters(), noise]
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t = time.perf_counter()
    F = (exact_objective(kernel, X, y, noise) if path == "by hand"
         else exact_log_marginal_likelihood(kernel.K(X), y, noise))
    torch.autograd.grad(F, params)
    seconds = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"N": N, "path": path, "seconds": seconds, "matrices": (peak - base) / (N * N * 8),
            "value": float(F.detach())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default="2000,4000")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        N, path = json.loads(args.worker)
        print(json.dumps(worker(N, path, args.threads)))
        return 0
    print("| N | path | seconds | peak N×N matrices | × by hand (s) | objective |\n"
          "|---:|---|---:|---:|---:|---:|")
    for N in (int(n) for n in args.sizes.split(",")):
        rows = []
        for path in ("by hand", "autograd through K"):
            out = subprocess.run([sys.executable, __file__, "--worker", json.dumps([N, path]),
                                  "--threads", str(args.threads)], capture_output=True, text=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        for r in rows:
            print(f"| {N:,} | {r['path']} | {r['seconds']:.2f} | {r['matrices']:.2f} | "
                  f"{r['seconds'] / rows[0]['seconds']:.2f} | {r['value']:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
