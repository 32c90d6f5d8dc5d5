"""SVGP's training plans (`SVGP.training_plan`): full-batch L-BFGS-B on the collapsed bound
(Gaussian likelihood, q(u) at its optimum throughout), or minibatches with natural gradients on
q(u) and Adam."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import Tensor, nn

from ... import covariances as cov
from ...diagnostics import quadratic_rows_after_fit, warn_if_unhealthy
from ...distributed import is_distributed
from ...likelihoods import Gaussian
from ...objectives.collapsed.members import collapsed_objective, posterior_q
from ...posteriors import SparsePosterior
from ...runtime.threads import threads_for
from ...training import FitResult, fit_lbfgsb
from ...training.guard import FitGuard
from ...training.lbfgs import MAXITER
from ...training.minibatch import fit_minibatch
from ..core.fitting import (
    FitOptions,
    default,
    probe_rows,
    settle_rule,
    stall_rule,
)


def fit_collapsed(m: Any, options: FitOptions) -> FitResult:
    """The full-batch plan of an SVGP with a Gaussian likelihood (`SVGP.training_plan`):
    L-BFGS-B on the hyperparameters under the collapsed bound (q(u) at its optimum
    throughout), then the optimal q(u), then the checks after fitting."""
    # Ctrl-C after L-BFGS-B (in the q(u) step): its hyperparameters, q(u) as it was
    with FitGuard(m) as guard:
        start = time.perf_counter()
        # q(u) frozen (in part): the ELBO at that q(u), not the bound at the optimal one
        q_free = m.q_mu.requires_grad and m.q_sqrt.requires_grad
        callback = options.callback
        if q_free and callable(callback):
            callback = at_optimal_q(m, callback)
        with threads_for(m.evaluation_work()):
            res = fit_lbfgsb(CollapsedBound(m) if q_free else m,
                             maxiter=default(options.maxiter, MAXITER), tol=options.tol,
                             progress=options.progress, callback=callback,
                             stall=stall_rule(m.num_data, options),
                             settle=settle_rule(options),
                             probe=collapsed_probe(m) if q_free else None)
        if q_free:
            m.natural_gradient_step(1.0)  # the optimal q(u) at the fitted hyperparameters
            res.objective = m.log_marginal_likelihood() + float(m.log_prior().detach())
        res.seconds = time.perf_counter() - start
        if options.diagnose is not False and not res.interrupted and m.num_outputs == 1:
            warn_if_unhealthy(m, stacklevel=6,  # the caller of fit()
                              quadratic_max_data=quadratic_rows_after_fit(
                                  res.evaluations, m.num_inducing))
        return res
    return guard.interrupted_result()


def at_optimal_q(m: Any, callback: Callable[[int, float], None]
                 ) -> Callable[[int, float], None]:
    """`callback` seeing the model being fitted on the collapsed bound: q(u) set to its
    optimum at the current hyperparameters before each call (one natural-gradient step of
    size 1: one more pass over the data per iteration, taken only when there is a callback),
    so that its predictions and `-training_loss()` are those of the objective passed."""

    def seeing(iteration: int, objective: float) -> None:
        m.natural_gradient_step(1.0)
        callback(iteration, objective)

    return seeing


def fit_by_minibatches(m: Any, options: FitOptions) -> FitResult:
    """The minibatch plan of an SVGP (`SVGP.training_plan`): Adam on the hyperparameters
    and natural gradients (or Adam) on q(u)."""
    with FitGuard(m) as guard:
        natgrad = default(options.natgrad, True) and not m.mean_field
        B = float(min(m.num_data, options.batch_size or 256))
        M = float(m.num_inducing)
        cost = getattr(m.kernel, "evaluation_cost", 1)
        # the minibatch bounds are of the internal targets: reported in the units of y
        offset = m._objective_offset()
        callback = options.callback
        if offset and callable(callback):
            callback = shifted_callback(callback, offset)
        with threads_for((B * M * M * m.num_latent + M**3) * cost):
            res = fit_minibatch(m, options.batch_size, options.epochs, options.lr, natgrad,
                                options.gamma, options.data, options.progress, options.seed,
                                callback)
        if offset:
            res.objective += offset
            res.history = [h + offset for h in res.history]
        return res
    return guard.interrupted_result()


def why_minibatch(m: Any, batch_size: int | None, data: object) -> str | None:
    """Why an SVGP's `fit` trains by minibatches (None: it fits the collapsed bound by
    L-BFGS-B)."""
    reasons = [(batch_size is not None, "batch_size given"), (data is not None, "data given"),
               (not isinstance(m.likelihood, Gaussian), "a non-Gaussian likelihood"),
               (is_distributed(), "data sharded over processes"),
               (m.mean_field, "mean_field=True"),
               (m.mixing_matrix is not None, "a mixing matrix")]
    return next((why for applies, why in reasons if applies), None)


class CollapsedBound:
    """The SVGP's hyperparameters under the collapsed bound max_q ELBO (Gaussian likelihood)."""

    def __init__(self, model: Any) -> None:  # an SVGP
        self.model = model
        self.display_name = type(model).__name__  # what fit's messages name
        self._params = [p for n, p in model.named_parameters() if not n.startswith("q_")]

    def parameters(self) -> list[nn.Parameter]:
        return self._params

    def training_loss(self) -> Tensor:
        m = self.model
        problem = m._bound_problem()
        noise = problem.noise
        if noise.dim() == 0:
            bound = collapsed_objective(problem)
        else:  # one noise per output: the outputs' bounds one by one, each on its points
            observed = ~torch.isnan(m.y)
            pairs = cov.separate_pairs(m.feature, m.kernel)
            bound = cast(Tensor, sum(collapsed_objective(problem._replace(
                X=m.X[observed[:, p]], y=m.y[observed[:, p], p], noise=noise[p],
                feature=m.feature if pairs is None else pairs[p][0],
                kernel=m.kernel if pairs is None else pairs[p][1]))
                for p in range(m.y.shape[1])))
        return -(bound + m._objective_offset() + m.log_prior())

    def summary(self) -> str:
        return self.model.summary()


def collapsed_probe(model: Any) -> Callable[[], tuple[Tensor, Tensor]] | None:
    """The settling rule's probe (`training.settle.Probe`) of the full-batch fit of an SVGP
    of one output: the predictive mean and variance of y (internal units) at the training
    inputs `fitting.probe_rows` picks, under the optimal q(u) at the current
    hyperparameters — what the fit ends with, as SGPR's probe sees its own posterior. None
    for several outputs."""
    if model.y.dim() != 1:
        return None
    X = model.X[probe_rows(model.X)]

    def probe() -> tuple[Tensor, Tensor]:
        with torch.no_grad():
            problem = model._bound_problem()
            L, q, used = posterior_q(problem)
            post = SparsePosterior(model.kernel, model.feature, L, q, problem.noise, used,
                                   model.prior_mean())
            mean, var = post.predict_f(X)
            return mean, var + problem.noise

    return probe


def shifted_callback(callback: Callable[[int, float], None], offset: float
                     ) -> Callable[[int, float], None]:
    """`callback(epoch, objective)` given the objective plus `offset` (the units of y)."""
    def shifted(epoch: int, objective: float) -> None:
        callback(epoch, objective + offset)
    return shifted
