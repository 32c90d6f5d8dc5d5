"""The peers' usual recipes in `sparsegp bench fit`: GPyTorch's SGPR (an `ExactGP` with an
`InducingPointKernel`, the Titsias bound) trained as its tutorials do — Adam at a learning
rate of 0.1 for a fixed number of steps — on the same data, the same M inducing inputs (the
first M training points, a random subset) and targets standardised by their mean and
standard deviation. Each step's parameters are kept, as for sparsegp's own fits, and scored
afterwards against the converged sparsegp SGPR (VFE) of the same case.

GPflow's SGPR (the same bound) is trained as its documentation does, `gpflow.optimizers.Scipy`
(L-BFGS-B at SciPy's default tolerances, at most `GPFLOW_MAXITER` iterations), from sparsegp's
default SGPR's starting values: the same inputs, standardised targets, inducing inputs,
lengthscales, kernel variance and noise variance, in float64. Its first kept state is the
starting one, and the time includes TensorFlow's tracing of the objective (part of that recipe)."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .compare import gpflow_model


class Case(Protocol):
    """What a peer's fit reads of a data set (`fit.Case`): training and test arrays."""

    X: np.ndarray
    y: np.ndarray
    Xs: np.ndarray
    ys: np.ndarray

#: GPyTorch's tutorial recipe: Adam at this learning rate for this many steps.
GPYTORCH_LR = 0.1
GPYTORCH_STEPS = 200
#: GPflow's L-BFGS-B runs at most this many iterations: `fit()`'s default maxiter (SciPy's own
#: default, 15,000, lets it run on for thousands of iterations of tiny gains).
GPFLOW_MAXITER = 1000


@dataclass
class PeerFit:
    """A peer's fit: the elapsed seconds at each kept state, `score(i)` -> (test RMSE, test
    NLPD) of the i-th kept state, and the fit's total seconds, iterations and stopping cause."""

    model: str
    seconds: list[float]
    score: Callable[[int], tuple[float, float]]
    fit_seconds: float
    iterations: int
    stopped: str


def gpytorch_available() -> bool:
    return importlib.util.find_spec("gpytorch") is not None


def gpflow_missing() -> str | None:
    """Why GPflow's row is left out (None when GPflow imports)."""
    try:
        import gpflow  # noqa: F401
    except Exception as error:  # TensorFlow fails to import in more ways than ImportError
        return f"GPflow cannot be imported ({type(error).__name__}: {error}): its row is left out"
    return None


def gaussian_scores(mean: np.ndarray, var: np.ndarray, case: Case) -> tuple[float, float]:
    """(test RMSE, test NLPD) of Gaussian predictions `mean`, `var` of case.ys."""
    from ..models.core.predictions import gaussian_log_density

    nlpd = -float(gaussian_log_density(mean, var, case.ys).mean())
    return float(np.sqrt(np.mean((mean - case.ys) ** 2))), nlpd


def gpytorch_sgpr_fit(case: Case, M: int, steps: int) -> PeerFit:
    """GPyTorch's SGPR on `case` (see the module docstring)."""
    import gpytorch
    import torch

    dtype = torch.float64
    X, Xs = (torch.as_tensor(a, dtype=dtype) for a in (case.X, case.Xs))
    shift, scale = float(case.y.mean()), float(case.y.std())
    y = torch.as_tensor((case.y - shift) / scale, dtype=dtype)

    class SGPR(gpytorch.models.ExactGP):
        def __init__(self, likelihood: gpytorch.likelihoods.Likelihood) -> None:
            super().__init__(X, y, likelihood)
            self.mean_module = gpytorch.means.ConstantMean()
            base = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(
                ard_num_dims=X.shape[1]))
            self.covar_module = gpytorch.kernels.InducingPointKernel(
                base, inducing_points=X[:M].clone(), likelihood=likelihood)

        def forward(self, x: torch.Tensor) -> gpytorch.distributions.MultivariateNormal:
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    likelihood = gpytorch.likelihoods.GaussianLikelihood().to(dtype)
    model = SGPR(likelihood).to(dtype)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    optimiser = torch.optim.Adam(model.parameters(), lr=GPYTORCH_LR)
    states = [{k: v.detach().clone() for k, v in model.state_dict().items()}]
    seconds = [0.0]
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

    def score(i: int) -> tuple[float, float]:
        model.load_state_dict(states[i])
        model.eval()
        likelihood.eval()
        with torch.no_grad():
            pred = likelihood(model(Xs))
            mean = pred.mean.numpy() * scale + shift
            var = pred.variance.numpy() * scale**2
        model.train()
        likelihood.train()
        return gaussian_scores(mean, var, case)

    return PeerFit(f"GPyTorch SGPR (Adam lr {GPYTORCH_LR}, {steps} steps)", seconds, score,
                   total, steps, "fixed budget")


def gpflow_sgpr_fit(case: Case, start: Any) -> PeerFit:
    """GPflow's SGPR on `case` from the starting values of the sparsegp SGPR `start` (unfitted;
    see the module docstring)."""
    import gpflow

    def array(name: str) -> np.ndarray:
        return start.state_dict()[name].detach().cpu().numpy().astype(np.float64)

    x_shift, x_scale = array("x_shift"), array("x_scale")
    shift, scale = float(array("y_shift")), float(array("y_scale"))
    X, Xs = ((a - x_shift) / x_scale for a in (case.X, case.Xs))
    model = gpflow_model(X, (case.y - shift) / scale,
                         np.asarray(start.kernel.lengthscale, dtype=np.float64),
                         float(start.kernel.variance), start.noise_variance / scale**2,
                         array("feature.Z"))
    variables = model.trainable_variables
    states = [[v.numpy().copy() for v in variables]]
    seconds = [0.0]
    spent = [0.0]

    def keep(_step: int, _variables: object, values: Iterable[object]) -> None:
        t = time.perf_counter()
        states.append([np.array(v, copy=True) for v in values])
        seconds.append(t - begin - spent[0])
        spent[0] += time.perf_counter() - t

    begin = time.perf_counter()
    result = gpflow.optimizers.Scipy().minimize(model.training_loss, variables,
                                                method="L-BFGS-B", step_callback=keep,
                                                options={"maxiter": GPFLOW_MAXITER})
    total = time.perf_counter() - begin - spent[0]

    def score(i: int) -> tuple[float, float]:
        for variable, value in zip(variables, states[i]):
            variable.assign(value)
        mean, var = model.predict_y(Xs)
        return gaussian_scores(mean.numpy().ravel() * scale + shift,
                               var.numpy().ravel() * scale**2, case)

    return PeerFit("GPflow SGPR (Scipy L-BFGS-B)", seconds, score, total, int(result.nit),
                   str(result.message))
