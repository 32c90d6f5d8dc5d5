"""Small problems: one SGPR (VFE) objective + gradient at small N, where per-call dispatch
and Python work, not flops, set the time — sparsegp against the least eager PyTorch can do.

    OMP_NUM_THREADS=1 python benchmarks/small_overhead.py [--N 500] [--M 20] [--compile]

Three versions of the same number (the collapsed VFE bound and its gradient in Z, the
lengthscales, the signal and noise variances; SE-ARD, D = 8, float64), in interleaved rounds
in one process, best of the rounds:

* sparsegp's `SGPR.training_loss()` (the streamed statistics with their hand-derived
  gradient, the parameter transforms, the checks);
* a minimal eager version: the bound written in as few torch operations as it takes (two
  kernel matrices, two Cholesky factors, two triangular solves, the sums), differentiated by
  autograd — the floor for an eager implementation of this formula; its value is checked
  against sparsegp's (the same parameters, to 1e-10 relative);
* GPyTorch's SGPR (`InducingPointKernel`) with the exact marginal-likelihood objective, where
  installed;
* with `--compile`: the minimal version under `torch.compile` (its compile time printed
  apart: it is paid once per process and shape).

Also printed: sparsegp's torch operations per evaluation (forward and backward, top level, by
torch.profiler) and its Python calls (cProfile).
"""

from __future__ import annotations

import argparse
import cProfile
import math
import pstats
import time
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

import sparsegp as sg

F64 = torch.float64


def problem(N: int, M: int, D: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(N, D, dtype=F64, generator=g)
    y = torch.sin(X.sum(1)) + 0.1 * torch.randn(N, dtype=F64, generator=g)
    return X, y, X[:M].clone()


def sparsegp_step(X, y, Z) -> tuple[Callable[[], None], Callable[[], float], sg.SGPR]:
    model = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=[2.0] * X.shape[1]),
                    inducing_points=Z, noise_variance=0.1, standardize_y=False, jitter=0.0)
    params = [q for q in model.parameters() if q.requires_grad]

    def step() -> None:
        torch.autograd.grad(model.training_loss(), params)

    return step, lambda: float(model.training_loss().detach()), model


def minimal_step(X, y, model: sg.SGPR, compile_: bool = False
                 ) -> tuple[Callable[[], None], Callable[[], float]]:
    """The VFE bound in few operations, from sparsegp's parameter values (free copies)."""
    N, M = X.shape[0], model.inducing_points.shape[0]
    Z = torch.as_tensor(model.inducing_points, dtype=F64).clone().requires_grad_()
    log_ell = torch.log(torch.as_tensor(model.kernel.lengthscale, dtype=F64)).requires_grad_()
    log_var = torch.log(torch.tensor(float(model.kernel.variance), dtype=F64)).requires_grad_()
    log_s2 = torch.log(torch.tensor(float(model.noise_variance), dtype=F64)).requires_grad_()
    eye = torch.eye(M, dtype=F64)

    def k(A, B, ell, var):
        A, B = A / ell, B / ell
        r2 = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * A @ B.T
        return var * torch.exp(-0.5 * r2.clamp_min(0.0))

    def loss():
        ell, var, s2 = log_ell.exp(), log_var.exp(), log_s2.exp()
        L = torch.linalg.cholesky(k(Z, Z, ell, var))
        A = torch.linalg.solve_triangular(L, k(Z, X, ell, var), upper=False) / s2.sqrt()
        LB = torch.linalg.cholesky(eye + A @ A.T)
        c = torch.linalg.solve_triangular(LB, (A @ y)[:, None], upper=False) / s2.sqrt()
        bound = (-0.5 * N * math.log(2 * math.pi) - torch.log(torch.diagonal(LB)).sum()
                 - 0.5 * N * torch.log(s2) - 0.5 * (y @ y) / s2 + 0.5 * (c * c).sum()
                 - 0.5 * N * var / s2 + 0.5 * (A * A).sum())
        return -bound

    run = torch.compile(loss) if compile_ else loss
    params = [Z, log_ell, log_var, log_s2]

    def step() -> None:
        torch.autograd.grad(run(), params)

    return step, lambda: float(loss().detach())


def gpytorch_step(X, y, M) -> Callable[[], None] | None:
    try:
        import gpytorch
    except ImportError:
        return None

    class Model(gpytorch.models.ExactGP):
        def __init__(self, lik):
            super().__init__(X, y, lik)
            self.mean_module = gpytorch.means.ZeroMean()
            base = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=X.shape[1]))
            self.covar_module = gpytorch.kernels.InducingPointKernel(
                base, inducing_points=X[:M].clone(), likelihood=lik)

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    lik = gpytorch.likelihoods.GaussianLikelihood().double()
    model = Model(lik).double()
    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    params = list(model.parameters())

    def step() -> None:
        torch.autograd.grad(-mll(model(X), y), params)

    return step


def best_seconds(steps: dict[str, Callable[[], None]], rounds: int, per_round: int
                 ) -> dict[str, float]:
    for step in steps.values():  # warm up
        for _ in range(10):
            step()
    best = {name: math.inf for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(per_round):
                step()
            best[name] = min(best[name], (time.perf_counter() - start) / per_round)
    return best


def counts(step: Callable[[], None]) -> tuple[int, int]:
    """(top-level torch operations, Python calls) of one evaluation."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    ops = sum(1 for e in prof.events() if e.cpu_parent is None)
    profiler = cProfile.Profile()
    profiler.enable()
    step()
    profiler.disable()
    calls = pstats.Stats(profiler).total_calls  # type: ignore[attr-defined]
    return ops, calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--N", type=int, default=500)
    p.add_argument("--M", type=int, default=20)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--per-round", type=int, default=100)
    p.add_argument("--compile", action="store_true", help="also the minimal version compiled")
    args = p.parse_args()
    X, y, Z = problem(args.N, args.M)
    ours, ours_value, model = sparsegp_step(X, y, Z)
    minimal, minimal_value = minimal_step(X, y, model)
    gap = abs(ours_value() - minimal_value()) / abs(ours_value())
    if gap > 1e-10:
        raise SystemExit(f"the minimal version's bound differs from sparsegp's by {gap:.1e}")
    steps = {"sparsegp SGPR": ours, "minimal eager VFE": minimal}
    if args.compile:
        compiled, _ = minimal_step(X, y, model, compile_=True)
        start = time.perf_counter()
        compiled()
        print(f"torch.compile of the minimal version: {time.perf_counter() - start:.1f} s "
              "(first call)")
        steps["minimal VFE, torch.compile"] = compiled
    peer = gpytorch_step(X, y, args.M)
    if peer is not None:
        steps["GPyTorch SGPR"] = peer
    else:
        print("GPyTorch is not installed: its row is left out")
    print(f"N = {args.N}, M = {args.M}, D = 8, float64, {torch.get_num_threads()} torch "
          f"thread(s), torch {torch.__version__}; bound agrees with the minimal version to "
          f"{gap:.1e}")
    best = best_seconds(steps, args.rounds, args.per_round)
    ops, calls = counts(ours)
    print("| version | ms per objective + gradient | × sparsegp |\n|---|---:|---:|")
    for name, seconds in best.items():
        print(f"| {name} | {seconds * 1e3:.3f} | {seconds / best['sparsegp SGPR']:.2f} |")
    print(f"sparsegp: {ops} top-level torch operations and {calls} Python calls per evaluation")


if __name__ == "__main__":
    main()
