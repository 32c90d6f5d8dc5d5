"""The peers' usual recipes in `sparsegp bench fit`: GPyTorch's SGPR (an `ExactGP` with an
`InducingPointKernel`, the Titsias bound) trained as its tutorials do — Adam at a learning
rate of 0.1 for a fixed number of steps — on the same data, the same M inducing inputs (the
first M training points, a random subset) and targets standardised by their mean and
standard deviation. Each step's parameters are kept, as for sparsegp's own fits, and scored
afterwards against the converged sparsegp SGPR (VFE) of the same case."""

from __future__ import annotations

import importlib.util
import time
from typing import Any

import numpy as np

#: GPyTorch's tutorial recipe: Adam at this learning rate for this many steps.
GPYTORCH_LR = 0.1
GPYTORCH_STEPS = 200


def gpytorch_available() -> bool:
    return importlib.util.find_spec("gpytorch") is not None


def gpytorch_sgpr_row(case: Any, reference: tuple[float, float], M: int, steps: int,
                      good: Any) -> dict[str, Any]:
    """The row of GPyTorch's SGPR on `case` (see the module docstring); `good(rmse, nlpd,
    reference)` says whether a state is within 1% of the reference."""
    import gpytorch
    import torch

    from ..models.predictions import gaussian_log_density

    dtype = torch.float64
    X, Xs = (torch.as_tensor(a, dtype=dtype) for a in (case.X, case.Xs))
    shift, scale = float(case.y.mean()), float(case.y.std())
    y = torch.as_tensor((case.y - shift) / scale, dtype=dtype)

    class SGPR(gpytorch.models.ExactGP):
        def __init__(self, likelihood: Any) -> None:
            super().__init__(X, y, likelihood)
            self.mean_module = gpytorch.means.ConstantMean()
            base = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(
                ard_num_dims=X.shape[1]))
            self.covar_module = gpytorch.kernels.InducingPointKernel(
                base, inducing_points=X[:M].clone(), likelihood=likelihood)

        def forward(self, x: Any) -> Any:
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    likelihood = gpytorch.likelihoods.GaussianLikelihood().to(dtype)
    model = SGPR(likelihood).to(dtype)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    optimiser = torch.optim.Adam(model.parameters(), lr=GPYTORCH_LR)
    states, seconds = [], []
    spent, start = 0.0, time.perf_counter()
    model.train()
    likelihood.train()
    for _ in range(steps):
        optimiser.zero_grad()
        loss = -mll(model(X), y)
        loss.backward()
        optimiser.step()
        t = time.perf_counter()
        states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        seconds.append(t - start - spent)
        spent += time.perf_counter() - t
    total = time.perf_counter() - start - spent

    def score(state: dict[str, Any]) -> tuple[float, float]:
        model.load_state_dict(state)
        model.eval()
        likelihood.eval()
        with torch.no_grad():
            pred = likelihood(model(Xs))
            mean = pred.mean.numpy() * scale + shift
            var = pred.variance.numpy() * scale**2
        model.train()
        likelihood.train()
        nlpd = -float(gaussian_log_density(mean, var, case.ys).mean())
        return float(np.sqrt(np.mean((mean - case.ys) ** 2))), nlpd

    final = score(states[-1])
    at = None
    for i in list(range(0, steps, max(1, steps // 40))) + [steps - 1]:
        if good(*score(states[i]), reference):
            at = i
            break
    if at is not None:  # the first good one in the stretch before
        step = max(1, steps // 40)
        at = next(j for j in range(max(0, at - step + 1), at + 1)
                  if good(*score(states[j]), reference))
    return {"case": case.name, "N": case.X.shape[0],
            "model": f"GPyTorch SGPR (Adam lr {GPYTORCH_LR}, {steps} steps)",
            "fit_seconds": total, "iterations": steps, "stopped": "fixed budget",
            "good_seconds": None if at is None else seconds[at], "good_at": at,
            "default": final, "reference": reference, "reference_seconds": float("nan")}
