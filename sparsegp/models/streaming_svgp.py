"""Streaming SVGP for any likelihood (Bui, Nguyen & Turner 2017): `update` turns a fitted SVGP
and a new batch of data into a `StreamingSVGP` that has seen both, without the old data.

The old data are carried by the old posterior q_old(a) over the old inducing inputs a and the
old prior p_old(a) (`objectives.online_svgp.OldPosterior`, M_a² numbers per latent function);
the new model's q(b), hyperparameters and inducing inputs b are learnt from the new batch and
that summary alone (`objectives.online_svgp.streaming_elbo`), in O(N_new·M² + M³). It
predicts, fits, saves and loads as an SVGP does, and can be updated again.

Units: the new model keeps the old model's units (x_shift, x_scale, y_shift, y_scale).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, cast

import torch
from torch import Tensor

from .. import conditionals
from ..diagnostics import Diagnostics, RegressionView, diagnose
from ..diagnostics.latent import LatentDiagnostics, LatentView, diagnose_latent
from ..features.inducing_points import InducingPoints
from ..likelihoods import Gaussian
from ..objectives.online import StreamingProblem, Summary
from ..objectives.online_bounds import streaming_upper_bound, summary_of_posterior
from ..objectives.online_svgp import OldPosterior, old_posterior, streaming_elbo
from ..runtime.config import PARAMETER_DTYPE
from ..validation import check_same_rows
from .streamed import Streamed, assemble, check_fit_arguments, check_streamable
from .streaming_inducing import new_feature
from .svgp import SVGP


class StreamingSVGP(Streamed, SVGP):
    """An SVGP fitted to a new batch of data and the posterior of the data before it (made by
    `SVGP.update`). Its objective (`elbo`, `log_marginal_likelihood`) is the streaming bound
    of `objectives.online_svgp`; `X` and `y` are the new batch only, `num_data` its rows,
    `num_data_seen` every row the chain of updates has seen. The old posterior is saved with
    the model. `fit()` trains by minibatches (Adam on the hyperparameters, natural gradients
    on q(b)) whatever the likelihood: the collapsed full-batch fit of a Gaussian SVGP would
    drop the old data's term. `diagnostics()` reports the streamed bound; with a Gaussian
    likelihood and q_old narrower than p_old it is sandwiched as a `StreamingSGPR`'s is
    (`upper_bound()`).

    Example:

        >>> import numpy as np, sparsegp as sg
        >>> rng = np.random.default_rng(0)
        >>> X = rng.uniform(-3, 3, (200, 1)); y = (np.sin(2 * X[:, 0]) > 0).astype(float)
        >>> m = sg.SVGP(X[:100], y[:100], likelihood=sg.likelihoods.Bernoulli(),
        ...             inducing_points=8)
        >>> for _ in range(10):
        ...     _ = m.natural_gradient_step(0.5)
        >>> new = m.update(X[100:], y[100:], fit=False)  # never sees X[:100] again
        >>> type(new).__name__, new.num_data, new.num_data_seen
        ('StreamingSVGP', 100, 200)
        >>> new.predict_proba(X[:3]).shape
        (3,)
    """

    old_Z: Tensor  # buffers: the old posterior (`objectives.online_svgp.OldPosterior`)
    old_L: Tensor
    old_mean: Tensor
    old_root: Tensor

    def _build(self, config: dict[str, Any], parts: dict[str, Any]) -> None:
        super()._build(config, parts)
        info = config["streaming"]
        M, C, D = int(info["old_inducing"]), int(config["num_latent"]), int(config["input_dim"])
        for name, shape in (("old_Z", (M, D)), ("old_L", (M, M)), ("old_mean", (M, C)),
                            ("old_root", (C, M, M))):
            self.register_buffer(name, torch.zeros(shape, dtype=PARAMETER_DTYPE))

    @classmethod
    def from_update(cls, model: SVGP, X_new: Any, y_new: Any, inducing_points: Any = None,
                    fit: bool = True, **fit_options: Any) -> StreamingSVGP:
        """`update(model, X_new, y_new, ...)`: what `SVGP.update` calls, through the model
        registry, so that svgp.py need not import this module."""
        return update(model, X_new, y_new, inducing_points, fit, **fit_options)



    def old_posterior(self) -> OldPosterior:
        """The posterior of the data before this batch (internal units)."""
        return OldPosterior(self.old_Z, self.old_L, self.old_mean, self.old_root)

    def elbo(self, X: Tensor | None = None, y: Tensor | None = None, q_mu: Tensor | None = None,
             q_sqrt: Tensor | None = None) -> Tensor:
        """The streaming bound: the ELBO (estimate) of the new batch plus the old data's term
        (internal units of y)."""
        X, y = (self.X, self.y) if X is None else (X, cast(Tensor, y))
        return streaming_elbo(self.kernel, self.feature, self.likelihood, X, y,
                              self._cholesky_kuu(), self.q_mu if q_mu is None else q_mu,
                              self._root(self.q_sqrt if q_sqrt is None else q_sqrt),
                              self.whiten, self.num_data, self._chunk(), self.old_posterior(),
                              self.prior_mean())

    def _why_minibatch(self, batch_size: int | None, data: Any) -> str | None:
        return super()._why_minibatch(batch_size, data) or "the old data's term in the bound"

    def old_summary(self) -> Summary:
        """The old posterior as r pseudo-observations of unit noise (`objectives.online.Summary`),
        which needs q_old narrower than p_old in every direction (else a ValueError says so):
        with a Gaussian likelihood, the bound is then the collapsed bound of the new batch
        and the pseudo-observations, and has an upper bound."""
        return summary_of_posterior(self.old_posterior())

    def upper_bound(self) -> float:
        """An upper bound on the evidence the streamed bound approximates (the new batch's
        density given the old posterior, `objectives.online_bounds`): a Gaussian likelihood,
        one output, and q_old narrower than p_old in every direction (so that q_old/p_old is
        a likelihood of pseudo-observations); a clear error otherwise."""
        problem = self.collapsed_problem()  # checks: a Gaussian likelihood, one output
        with torch.no_grad():
            U = streaming_upper_bound(StreamingProblem(problem, self.old_summary()))
        return float(U) + self._objective_offset()

    def diagnostic_view(self) -> RegressionView:
        """What the diagnostics read of this model (Gaussian likelihood, one output, q_old
        narrower than p_old): the new batch's collapsed problem, the streamed ELBO as the
        model's objective, and the old posterior as a summary (see `RegressionView`)."""
        view = SVGP.diagnostic_view(self)
        return dataclasses.replace(view, summary=self.old_summary(),
                                   approximation="streamed " + str(view.approximation))

    def diagnostics(self, **kwargs: Any) -> Diagnostics | LatentDiagnostics:
        """Is the approximation good? With a Gaussian likelihood, one output and q_old narrower
        than p_old: the streamed ELBO against the streamed VFE bound (its maximum over q(b))
        and the upper bound, as `sparsegp.diagnostics.diagnose` reports them for a streamed
        model. Otherwise (no upper bound): the streamed ELBO and the inducing-input checks
        (`sparsegp.diagnostics.diagnose_latent`), the inputs being the new batch and the old
        inducing inputs; the report says why there is no upper bound."""
        if (isinstance(self.likelihood, Gaussian) and self.num_outputs == 1
                and self.mixing_matrix is None):
            try:
                self.old_summary()
            except ValueError as err:
                why = f"here: {err}"
            else:
                return diagnose(self, **kwargs)
        else:
            why = f"for a {type(self.likelihood).__name__} likelihood"
        self._require_data()
        with torch.no_grad():
            elbo = float(self.elbo()) + self._objective_offset()  # the units of y
        inputs = torch.cat([self.X, self.old_Z.to(self.X)], 0)
        view = LatentView(type(self).__name__, f"streamed ELBO, {type(self.likelihood).__name__}",
                          elbo, "streamed ELBO, a lower bound",
                          self.feature, self.kernel, inputs, "a variational fit stacks spare "
                          "inducing inputs on top of each other when fewer suffice",
                          num_data=self.X.shape[0], no_upper_bound=why)
        return diagnose_latent(view, **kwargs)




def update(model: SVGP, X_new: Any, y_new: Any, inducing_points: Any = None, fit: bool = True,
           **fit_options: Any) -> StreamingSVGP:
    """A `StreamingSVGP` that has seen the data of `model` (through its q(u), not its data)
    and the new batch X_new [N, D], y_new [N] (units of X and y).

    `model`: an SVGP (or StreamingSVGP) with inducing points, a zero prior mean, one kernel
    shared by its latent functions and no mixing matrix; any likelihood. The new model starts
    from the old hyperparameters and keeps the old units. `inducing_points` as in
    `SGPR.update`: None or an int M chooses M inputs by seeded k-means++ from the old inducing
    inputs and X_new together; an array or `InducingPoints` is taken as given
    (`model.inducing_points` keeps the old ones). q(b) starts at the old q when b = a, else at
    the prior. With `fit` (default) the model is then fitted (`fit_options`: those of
    `SVGP.fit`; minibatch training); `fit=False` returns it as assembled. Cost O(N·M² + M³);
    the old data are never needed.

    With b = a, the same hyperparameters and a Gaussian likelihood, the optimal q(b) (one
    natural-gradient step of size 1) is the batch VFE posterior of all the data seen; for other
    likelihoods the old data's term is the Gaussian that matches their expected
    log-likelihood at q_old, so the result is close to, not equal to, the batch posterior.
    """
    _check_model(model)
    check_fit_arguments(fit, fit_options)
    check_same_rows(X_new, y_new)
    X = model._internal_inputs(X_new, "X_new")
    y = model._internal_targets(y_new, "y_new", X.shape[0])
    with torch.no_grad():
        L = model._cholesky_kuu()
        q = conditionals.from_parameters(L, model.q_mu, model._root(model.q_sqrt), model.whiten)
        old = old_posterior(cast(InducingPoints, model.feature).locations(), L, q)
    feature = new_feature(model, inducing_points, X, old.Z)
    new = _assemble(model, X, y, feature, old)
    if fit:
        new.fit(**fit_options)
    return new


def _check_model(model: Any) -> None:
    if not isinstance(model, SVGP):
        raise TypeError(f"update takes an SVGP; got {type(model).__name__}")
    if model.mixing_matrix is not None or model.num_outputs != 1:
        raise ValueError("streaming updates take a model of one output, y [N] (no mixing matrix)")
    check_streamable(model)


def _assemble(model: SVGP, X: Tensor, y: Tensor, feature: InducingPoints,
              old: OldPosterior) -> StreamingSVGP:
    """The StreamingSVGP at the old model's hyperparameters and units; q(b) is the old q when
    b = a (same inputs), else the prior."""
    new = assemble(StreamingSVGP, model, X, y,
                   {"likelihood": copy.deepcopy(model.likelihood), "feature": feature},
                   {"old_inducing": old.Z.shape[0]})
    with torch.no_grad():
        for name, value in zip(("old_Z", "old_L", "old_mean", "old_root"), old, strict=True):
            getattr(new, name).copy_(value)
        same = feature.Z.shape == old.Z.shape and bool((feature.Z == old.Z.to(feature.Z)).all())
        if same:
            new.q_mu.copy_(model.q_mu)
            new.q_sqrt.copy_(model.q_sqrt)
        elif not new.whiten:
            new.q_sqrt.copy_(new._cholesky_kuu().expand_as(new.q_sqrt))
    new.q_mu.requires_grad_(model.q_mu.requires_grad)
    new.q_sqrt.requires_grad_(model.q_sqrt.requires_grad)
    return new
