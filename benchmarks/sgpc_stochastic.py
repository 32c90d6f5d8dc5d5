"""SGPC's stochastic Power-EP schedule: one epoch with running sums of the sites
(`training.site_sums`, the default refresh interval) against recomputing the sums over all
the sites at every step (`refresh_every=1`, what each step did before), same model, same
batches, in one run; and the time of one such pass against the machine's GEMM rate.

    python benchmarks/sgpc_stochastic.py [--N 50000] [--M 50] [--batch 200] [--threads 1]
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch

import sparsegp as sg
from sparsegp.benchmarking.speed import gemm_seconds
from sparsegp.training import ep
from sparsegp.training.site_sums import RunningSiteSums


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--N", type=int, default=50_000)
    p.add_argument("--M", type=int, default=50)
    p.add_argument("--batch", type=int, default=200)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # its first use imports torch._dynamo
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (args.N, 2))
    prob = 1 / (1 + np.exp(-4 * np.sin(X[:, 0]) * np.cos(X[:, 1])))
    y = (rng.uniform(size=args.N) < prob).astype(float)
    base = sg.SGPC(X, y, inducing_points=args.M, alpha=0.5)
    base.update_sites(max_sweeps=20)
    sweep = float("inf")
    for _ in range(3):  # one pass over all the sites for the sums A, c of q(u), best of 3
        t = time.perf_counter()
        RunningSiteSums(base)
        sweep = min(sweep, time.perf_counter() - t)
    rate = 2 * 1024 * 1024 * 4096 / gemm_seconds(1024, 4096)  # the machine's GEMM rate
    print(f"N = {args.N}, M = {args.M}, batch {args.batch}, {args.threads} thread(s); one pass "
          f"for the sums over all the sites {sweep:.3f} s = "
          f"{sweep * rate / (2 * args.N * args.M**2):.1f}× the GEMM time of its 2·N·M² "
          f"products ({rate / 1e9:.1f} GFLOP/s)")
    steps = -(-args.N // args.batch)
    # `fit` ends with sweeps of all the sites to convergence: time them apart (they are
    # the same for both schedules) and count the epochs alone
    final = [0.0]
    sweeps = ep.site_sweeps

    def timed(model, *a, batch=None, **kw):
        t = time.perf_counter()
        out = sweeps(model, *a, batch=batch, **kw)
        if batch is None:
            final[0] += time.perf_counter() - t
        return out

    ep.site_sweeps = timed
    rows = []
    for name, every in (("running sums", None), ("all sites every step", 1)):
        model, final[0] = copy.deepcopy(base), 0.0
        t = time.perf_counter()
        model.fit(schedule="stochastic", epochs=2, batch_size=args.batch, lr=0.01,
                  progress=False, refresh_every=every)
        rows.append((name, (time.perf_counter() - t - final[0]) / 2,
                     model.log_marginal_likelihood()))
    ep.site_sweeps = sweeps
    print(f"| schedule ({steps} steps an epoch) | s / epoch | × running sums | "
          "passes over all the sites | energy after 2 epochs |")
    print("|---|---:|---:|---:|---:|")
    for name, sec, F in rows:
        print(f"| {name} | {sec:.2f} | {sec / rows[0][1]:.2f} | {sec / sweep:.0f} | {F:.2f} |")


if __name__ == "__main__":
    main()
