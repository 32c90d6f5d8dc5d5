"""Bayesian optimisation loops: on Branin sparsegp's SGPR and GPR (through `as_botorch`) find
the optimum as BoTorch's SingleTaskGP does, on the same seeds, initial designs, acquisition
(qLogExpectedImprovement, q = 1) and acquisition optimiser; on Hartmann-6 GPR with BoTorch's
lengthscale prior (`set_botorch_priors`) gets as close as SingleTaskGP does on the same
budget. (More seeds and a large-budget 10-D Ackley comparison are in
benchmarks/bayesopt_scaling.py.)"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from botorch.acquisition import qLogExpectedImprovement
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.optim import optimize_acqf
from botorch.sampling import SobolQMCNormalSampler
from botorch.test_functions import Hartmann
from gpytorch.mlls import ExactMarginalLogLikelihood

import sparsegp as sg
from sparsegp.botorch import as_botorch, set_botorch_priors

DT = torch.float64
BRANIN_MIN = 0.397887  # at (−π, 12.275), (π, 2.275) and (9.42478, 2.475)
SEEDS = (0, 1, 2, 3, 4)
N_INITIAL, ITERATIONS, M = 8, 16, 16
#: A loop either ends near the optimum or stalls in a basin (regret 0.5–1.6), and which one a
#: seed does depends on rounding: on Intel AVX512 seed 0's sparse loop ended at 0.20, on the
#: portable ATen kernels at 0.05; seed 1 stalls near 1.55 for SingleTaskGP on both, the
#: sparse loop only on the first. Over seeds 0–11 (AVX512) 10 of 12 loops ended within
#: SOLVED of the optimum for SGPR and for SingleTaskGP alike, 12 of 12 for GPR. So the test
#: counts solved seeds, a binomial count: with 5 seeds and a per-seed rate of 0.83, at least
#: MIN_SOLVED = 2 fails with probability 0.004, and no fewer than SingleTaskGP's count less
#: SLACK = 2 with about 0.015 (a mean or a worst seed over 3 seeds failed on one CPU of two)
SOLVED, MIN_SOLVED, SLACK = 0.25, 2, 2


def branin(u: torch.Tensor) -> torch.Tensor:
    """Branin on the unit square (x1 = 15u1 − 5, x2 = 15u2), minimised."""
    x1, x2 = 15.0 * u[..., 0] - 5.0, 15.0 * u[..., 1]
    return ((x2 - 5.1 / (4 * math.pi ** 2) * x1 ** 2 + 5.0 / math.pi * x1 - 6.0) ** 2
            + 10.0 * (1.0 - 1.0 / (8.0 * math.pi)) * torch.cos(x1) + 10.0)


def fitted(kind: str, X: torch.Tensor, y: torch.Tensor):
    if kind == "stgp":
        model = SingleTaskGP(X, y[:, None])
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
        return model
    if kind == "gpr":
        sparse = sg.GPR(X, y)
    else:  # at most M inducing inputs among the distinct evaluated points
        sparse = sg.SGPR(X, y, inducing_points=min(M, int(torch.unique(X, dim=0).shape[0])))
    # Branin is noiseless: hold the noise variance small rather than let the fit explain
    # the data as noise (a mode of the marginal likelihood that SingleTaskGP's noise prior
    # avoids)
    sparse.noise_variance = 1e-6 * float(y.var())
    sparse.freeze("noise_variance")
    # to L-BFGS-B's own tolerance, as `fit_gpytorch_mll` fits SingleTaskGP (the stall rule is
    # sized for fits on many points; over seeds 0-9 it left two loops near 1.5, the tolerance
    # one, and one at 0.7)
    sparse.fit(maxiter=100, tol=1e-9, progress=False)
    return as_botorch(sparse)


def best_regret(kind: str, seed: int) -> tuple[float, float]:
    """(regret of the initial design, best regret after the loop)."""
    X = torch.quasirandom.SobolEngine(2, scramble=True, seed=seed).draw(N_INITIAL).to(DT)
    y = -branin(X)  # BoTorch maximises
    start = -float(y.max()) - BRANIN_MIN
    torch.manual_seed(seed)
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DT)
    for _ in range(ITERATIONS):
        acq = qLogExpectedImprovement(fitted(kind, X, y), best_f=y.max(),
                                      sampler=SobolQMCNormalSampler(torch.Size([128]), seed=0))
        x, _ = optimize_acqf(acq, bounds=bounds, q=1, num_restarts=4, raw_samples=64)
        X, y = torch.cat([X, x]), torch.cat([y, -branin(x)])
    return start, -float(y.max()) - BRANIN_MIN


@pytest.fixture(scope="module")
def reference() -> list[float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BoTorch's notes on input scaling and restarts
        return [best_regret("stgp", s)[1] for s in SEEDS]


@pytest.mark.parametrize("kind", ["sgpr", "gpr"])
def test_a_sparsegp_model_finds_the_branin_optimum_as_singletaskgp_does(kind, reference):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = [best_regret(kind, s) for s in SEEDS]
    starts, regrets = [r[0] for r in runs], [r[1] for r in runs]
    assert min(starts) > 3.0  # the initial designs are far from the optimum
    solved = sum(r < SOLVED for r in regrets)
    assert solved >= MIN_SOLVED, (regrets, reference)
    assert solved >= sum(r < SOLVED for r in reference) - SLACK, (regrets, reference)


HARTMANN6_MIN = -3.32237
H_SEEDS, H_INITIAL, H_ITERATIONS = tuple(range(12)), 10, 15
#: the mean best regret over H_SEEDS after 10 + 15 evaluations is at most this: SingleTaskGP
#: (BoTorch's defaults, a MAP fit) ends at 0.73 on these seeds and initial designs, GPR with
#: BoTorch's lengthscale prior at 0.68, GPR fitted by maximum marginal likelihood (no prior)
#: at 1.02 (from 1.6–2.5 after the initial design; Hartmann-6 spans 3.3). After 10 + 25 the
#: three are at 0.14, 0.19 and 0.35 (benchmarks/bayesopt_scaling.py has more seeds)
H_MEAN = 0.85


def hartmann_regret(seed: int, prior: bool) -> float:
    """Best regret of a GPR loop on Hartmann-6 (maximised as −f) after the budget."""
    fn = Hartmann(dim=6)
    X = torch.quasirandom.SobolEngine(6, scramble=True, seed=seed).draw(H_INITIAL).to(DT)
    y = -fn.evaluate_true(X)
    torch.manual_seed(seed)
    bounds = torch.stack([torch.zeros(6, dtype=DT), torch.ones(6, dtype=DT)])
    for _ in range(H_ITERATIONS):
        model = sg.GPR(X, y)
        if prior:
            set_botorch_priors(model)
        model.noise_variance = 1e-6 * float(y.var())  # noiseless: held small
        model.freeze("noise_variance")
        model.fit(maxiter=100, progress=False)
        acq = qLogExpectedImprovement(as_botorch(model), best_f=y.max(),
                                      sampler=SobolQMCNormalSampler(torch.Size([128]), seed=0))
        x, _ = optimize_acqf(acq, bounds=bounds, q=1, num_restarts=8, raw_samples=256)
        X, y = torch.cat([X, x]), torch.cat([y, -fn.evaluate_true(x)])
    return -float(y.max()) - HARTMANN6_MIN


def test_with_botorchs_lengthscale_prior_gpr_gets_as_close_on_hartmann6_as_singletaskgp():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        regrets = [hartmann_regret(s, prior=True) for s in H_SEEDS]
    assert sum(regrets) / len(regrets) <= H_MEAN, regrets


def test_an_sgpr_with_as_many_inducing_inputs_as_points_takes_the_exact_gps_steps():
    """While N ≤ M the default SGPR is the exact GP (`is_exact`): the same fits, the same
    acquisition values, the same points chosen, seed for seed, as GPR's loop (before, its
    inducing inputs were trained and Kuu jittered: a different loop, and a worse one)."""
    paths = {}
    for kind in ("gpr", "sgpr"):
        X = torch.quasirandom.SobolEngine(2, scramble=True, seed=0).draw(N_INITIAL).to(DT)
        y = -branin(X)
        torch.manual_seed(0)
        for _ in range(4):
            model = sg.GPR(X, y) if kind == "gpr" else sg.SGPR(X, y)
            assert kind == "gpr" or model.is_exact
            model.noise_variance = 1e-6 * float(y.var())
            model.freeze("noise_variance")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(maxiter=100, progress=False)
            acq = qLogExpectedImprovement(as_botorch(model), best_f=y.max(),
                                          sampler=SobolQMCNormalSampler(torch.Size([64]), seed=0))
            x, _ = optimize_acqf(acq, bounds=torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DT),
                                 q=1, num_restarts=2, raw_samples=32)
            X, y = torch.cat([X, x]), torch.cat([y, -branin(x)])
        paths[kind] = X
    torch.testing.assert_close(paths["sgpr"], paths["gpr"], rtol=0, atol=0)
