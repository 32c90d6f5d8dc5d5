"""SVGP's training plans: full-batch L-BFGS-B on the collapsed bound (Gaussian likelihood,
q(u) at its optimum throughout), or minibatches with natural gradients on q(u) and Adam."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn

from .. import covariances as cov
from ..diagnostics import quadratic_rows_after_fit, warn_if_unhealthy
from ..distributed import is_distributed
from ..likelihoods import Gaussian
from ..objectives.collapsed import collapsed_objective, posterior_q
from ..posteriors import SparsePosterior
from ..runtime.threads import threads_for
from ..training import FitResult, fit_lbfgsb
from ..training.guard import FitGuard
from ..training.lbfgs import MAXITER
from ..training.minibatch import fit_minibatch
from .fitting import (
    FitOptions,
    TrainingPlan,
    default,
    probe_rows,
    settle_rule,
    stall_rule,
)

if TYPE_CHECKING:  # the mixin's methods use the model's attributes
    from .base import Model as _MixinBase
else:
    _MixinBase = object


class SVGPTraining(_MixinBase):
    """`fit()`'s plans for `SVGP` (see `training_plan`)."""

    fit_options = frozenset({"maxiter", "tol", "progress", "callback", "diagnose", "batch_size",
                             "epochs", "lr", "natgrad", "gamma", "seed", "data"})

    def training_plan(self, options: FitOptions) -> TrainingPlan:
        """Every option has a default that works for a few thousand points.

        Gaussian likelihood, `batch_size=None` and no `data`: full-batch L-BFGS-B (`maxiter`,
        default 2000; `tol`, else the stall rule of `fitting.stall_rule` or, for one output,
        once the predictions under the optimal q(u) have settled, `fitting.settle_rule`) on the
        hyperparameters with q(u) at its optimum throughout — the collapsed bound (Titsias
        2009), which is the ELBO maximised over q(u) — then one natural-gradient step of size 1
        puts q(u) at that optimum; with `diagnose` (default) and one output the fitted model is
        then checked as `SGPR.fit` checks it (`diagnostics()`; one
        `sparsegp.ApproximationWarning` lists what tripped, never an error). A minibatch fit is
        not checked (the checks cost several passes over the data): call `diagnostics()`.
        Otherwise minibatches of `batch_size` (default min(N, 256)) from (X, y) or from `data`
        (a DataLoader of (X, y) batches in the units of X) for `epochs` (default: about 2,000
        steps, drawn with `seed`, default 0), each step an Adam step (`lr`, default 0.01) on
        the hyperparameters and, with `natgrad` (default True), a natural-gradient step of size
        `gamma` (default 0.1) on q(u) — or Adam on q(u) too without `natgrad`. Options of the
        way not taken give a warning that names them. Ctrl-C (or SIGTERM) at any moment of
        either plan, the setup and the work after training included, stops at the last
        completed step."""
        m: Any = self  # the SVGP this mixin is part of
        why = m._why_minibatch(options.batch_size, options.data)
        if why is None:
            return TrainingPlan("full-batch L-BFGS-B (`maxiter`)",
                                frozenset({"maxiter", "tol", "callback", "diagnose",
                                           "natgrad"}),
                                m._fit_collapsed,
                                "minibatch training (batch_size or data given)")
        return TrainingPlan(f"minibatch training because of {why} (`epochs` sets its length)",
                            m.fit_options - {"maxiter", "tol", "diagnose"}, m._fit_minibatch,
                            "the full-batch L-BFGS-B fit (a Gaussian likelihood without "
                            "batch_size or data)")

    def _fit_collapsed(self, options: FitOptions) -> FitResult:
        m: Any = self  # the SVGP this mixin is part of
        # Ctrl-C after L-BFGS-B (in the q(u) step): its hyperparameters, q(u) as it was
        with FitGuard(m) as guard:
            start = time.perf_counter()
            # q(u) frozen (in part): the ELBO at that q(u), not the bound at the optimal one
            q_free = m.q_mu.requires_grad and m.q_sqrt.requires_grad
            with threads_for(m.evaluation_work()):
                res = fit_lbfgsb(CollapsedBound(m) if q_free else m,
                                 maxiter=default(options.maxiter, MAXITER), tol=options.tol,
                                 progress=options.progress, callback=options.callback,
                                 stall=stall_rule(m.num_data, options),
                                 settle=settle_rule(options),
                                 probe=collapsed_probe(m) if q_free else None)
            if q_free:
                m.natural_gradient_step(1.0)  # the optimal q(u) at the fitted hyperparameters
                res.objective = m.log_marginal_likelihood() + float(m.log_prior().detach())
            res.seconds = time.perf_counter() - start
            if options.diagnose is not False and not res.interrupted and m.num_outputs == 1:
                warn_if_unhealthy(self, stacklevel=4,  # the caller of fit()
                                  quadratic_max_data=quadratic_rows_after_fit(
                                      res.evaluations, m.num_inducing))
            return res
        return guard.interrupted_result()

    def _fit_minibatch(self, options: FitOptions) -> FitResult:
        m: Any = self  # the SVGP this mixin is part of
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
                res = fit_minibatch(self, options.batch_size, options.epochs, options.lr,
                                    natgrad, options.gamma, options.data, options.progress,
                                    options.seed, callback)
            if offset:
                res.objective += offset
                res.history = [h + offset for h in res.history]
            return res
        return guard.interrupted_result()

    def _why_minibatch(self, batch_size: int | None, data: Any) -> str | None:
        """Why `fit` trains by minibatches (None: it fits the collapsed bound by L-BFGS-B)."""
        m: Any = self  # the SVGP this mixin is part of
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


def collapsed_probe(model: Any) -> Any:
    """The settling rule's probe (`training.settle.Probe`) of the full-batch fit of an SVGP
    of one output: the predictive mean and variance of y (internal units) at the training
    inputs `fitting.probe_rows` picks, under the optimal q(u) at the current
    hyperparameters — what the fit ends with, as SGPR's probe sees its own posterior. None
    for several outputs or data sharded over ranks."""
    if model.y.dim() != 1 or (model.shards_data and is_distributed()):
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


def shifted_callback(callback: Any, offset: float) -> Any:
    """`callback(epoch, objective)` given the objective plus `offset` (the units of y)."""
    def shifted(epoch: int, objective: float) -> Any:
        return callback(epoch, objective + offset)
    return shifted
