"""SVGP minibatch steps: the fused step (one evaluation of the bound gives the natural gradient
of q(u) and the hyperparameters' gradient; `training.minibatch._natural_step`) against the
two-pass step (a natural-gradient step, then a second evaluation for Adam), and the fused step
with the check that halves a step lowering its minibatch's bound (what the steps under a
likelihood of unbounded curvature, Poisson or the heteroscedastic noise, get: one more
evaluation of the bound; Bernoulli's are not checked), same model, same batches, interleaved,
in one run; and the rate of the batch's GEMM-shaped work for scale.

    python benchmarks/svgp_step.py [--N 20000] [--M 200] [--batch 1024] [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
from unittest import mock

import numpy as np
import torch

import sparsegp as sg
from sparsegp.training.minibatch import _natural_step
from sparsegp.training.natural_gradients import natural_gradient_step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--N", type=int, default=20_000)
    p.add_argument("--M", type=int, default=200)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (args.N, 4))
    y = (np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.3 * rng.standard_normal(args.N) > 0).astype(float)
    model = sg.SVGP(X, y, likelihood=sg.likelihoods.Bernoulli(), inducing_points=args.M)
    hyper = [p for n, p in model.named_parameters() if p.requires_grad and not n.startswith("q_")]
    opt = torch.optim.Adam(hyper, lr=0.01)
    g = torch.Generator().manual_seed(0)

    def batch():
        idx = torch.randperm(args.N, generator=g)[:args.batch]
        return model.X[idx], model.y[idx]

    def two_pass(Xb, yb):
        natural_gradient_step(lambda m, r: model.elbo(Xb, yb, q_mu=m, q_sqrt=r),
                              model.q_mu, model.q_sqrt, 0.1)
        opt.zero_grad()
        model(Xb, yb).backward()
        opt.step()

    times: dict[str, list[float]] = {"fused": [], "two-pass": [], "fused, checked": []}
    for step in range(args.steps + 2):
        for name in times:
            Xb, yb = batch()
            t = time.perf_counter()
            if name == "fused":
                _natural_step(model, Xb, yb, hyper, opt, 0.1)
            elif name == "fused, checked":
                with mock.patch.object(sg.SVGP, "natural_steps_can_overshoot", True):
                    _natural_step(model, Xb, yb, hyper, opt, 0.1)
            else:
                two_pass(Xb, yb)
            if step >= 2:  # the first steps set up the optimiser's state
                times[name].append(time.perf_counter() - t)
    A = torch.randn(args.M, args.batch, dtype=torch.float64)
    t = time.perf_counter()
    A @ A.mT
    gemm = 2 * args.M**2 * args.batch / (time.perf_counter() - t) / 1e9
    fused, two = statistics.median(times["fused"]), statistics.median(times["two-pass"])
    checked = statistics.median(times["fused, checked"])
    print(f"N = {args.N:,}, M = {args.M}, batch {args.batch}, Bernoulli, {args.threads} thread(s); "
          f"GEMM of the batch's shape {gemm:.1f} GFLOP/s")
    print(f"| step | median seconds | × fused |\n|---|---:|---:|\n| fused | {fused:.4f} | 1.00 |\n"
          f"| two-pass | {two:.4f} | {two / fused:.2f} |\n"
          f"| fused, with the damping check | {checked:.4f} | {checked / fused:.2f} |")


if __name__ == "__main__":
    main()
