"""Streaming sparse GP classification by Power EP (Bui, Nguyen & Turner 2017): `update` turns a
fitted SGPC and a new batch of data into a `StreamingSGPC` that has seen both, without the
old data.

The old data enter as the summary of the old posterior q_old(a) that `StreamingSGPR` keeps
(`objectives.online.Summary`: r pseudo-observations h = Tᵀa + ε, ε ~ N(0, I)). That factor
is Gaussian, so Power EP (power α) projects it without error onto one block site on the new
inducing variables b (the block of docs/math.md §10, noise I + αQ_h), whatever the cavity:
its statistics join the new batch's sites in q(b) (`pep_classification.with_block`), and
only the new batch's sites are swept. The energy is SGPC's (docs/math.md §5) plus the
block's terms (§10.3); hyperparameters and inducing inputs b are fitted to it as SGPC's
are. Cost O(N_new·M² + M³) per update.

Units: the new model keeps the old model's units (x_shift, x_scale) and label convention.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ..diagnostics.latent import LatentDiagnostics, diagnose_latent
from ..features.inducing_points import InducingPoints
from ..likelihoods import Bernoulli
from ..objectives.collapsed import Statistics, family
from ..objectives.online import Summary, summary_statistics
from ..runtime.config import PARAMETER_DTYPE
from ..validation import as_tensor, check_finite, check_same_rows
from .sgpc import SGPC
from .streamed import (
    Streamed,
    Summarised,
    assemble,
    check_fit_arguments,
    summary_of,
    summary_sizes,
)
from .streaming_inducing import new_feature


class StreamingSGPC(Summarised, Streamed, SGPC):
    """An SGPC fitted to a new batch of data and a summary of the data before it (made by
    `SGPC.update`; Bui, Nguyen & Turner 2017, with Power EP). q(u) holds the new batch's
    sites and one Gaussian block site for the old data; `log_marginal_likelihood()` is the
    Power-EP energy of the new batch given the summary (an approximation to
    log p(y_new | y_old)). `X` and `y` are the new batch only (internal units), `num_data`
    its rows and `num_data_seen` every row the chain of updates has seen. The summary is
    saved with the model (`save`), so a loaded model predicts, refits (with
    include_data=True) and updates as before. `diagnostics()` report the energy and the
    inducing inputs against the new batch and the old inducing inputs.

    Example:

        >>> import numpy as np, sparsegp as sg
        >>> rng = np.random.default_rng(0)
        >>> X = rng.uniform(-3, 3, (200, 1)); y = (np.sin(2 * X[:, 0]) > 0).astype(int)
        >>> m = sg.SGPC(X[:100], y[:100], inducing_points=8)
        >>> _ = m.update_sites()
        >>> new = m.update(X[100:], y[100:], fit=False)  # never sees X[:100] again
        >>> type(new).__name__, new.num_data, new.num_data_seen, new.num_updates
        ('StreamingSGPC', 100, 200, 1)
        >>> new.predict_proba(X[:3]).shape
        (3,)
    """

    @classmethod
    def from_update(cls, model: SGPC, X_new: Any, y_new: Any, inducing_points: Any = None,
                    fit: bool = True, **fit_options: Any) -> StreamingSGPC:
        """`update(model, X_new, y_new, ...)`: what `SGPC.update` calls, through the model
        registry, so that sgpc.py need not import this module."""
        return update(model, X_new, y_new, inducing_points, fit, **fit_options)

    def _gaussian_block(self) -> Callable[[Tensor], Statistics]:
        """L = chol(K_bb) ↦ the old data's block statistics (power α, noise I + αQ_h)."""
        fam = family("pep", self.alpha)
        return lambda L: summary_statistics(self.kernel, self.feature, L, self.old_summary(),
                                            fam)

    def diagnostics(self, **kwargs: Any) -> LatentDiagnostics:
        """The Power-EP energy of the new batch given the summary, and where the inducing
        variables sit, judged against the new inputs and the old inducing inputs (where the
        old data are represented); as for an SGPC, there is no upper bound (`kwargs`: the
        thresholds of `sparsegp.diagnostics.diagnose_latent`)."""
        view = self._latent_view()
        return diagnose_latent(view._replace(
            objective_name="Power-EP energy of the new batch given the summary, an "
                           "approximation to log p(y_new | y_old)",
            X=torch.cat([self.X, self.summary_Z.to(self.X)], 0), num_data=self.X.shape[0],
            no_upper_bound="for Power EP"), **kwargs)

    def minibatch_energy(self, idx: Tensor | None, statistics_idx: Tensor | None = None,
                         totals: Callable[[Tensor], tuple[Tensor, Tensor]] | None = None
                         ) -> Tensor:
        """SGPC's energy (or its minibatch estimate) with the old data's block, plus the
        summary's constant −log p_old(h) − (r/2) log 2π (docs/math.md §10)."""
        F = super().minibatch_energy(idx, statistics_idx, totals)
        return F + self.summary_offset.to(F)


def update(model: SGPC, X_new: Any, y_new: Any, inducing_points: Any = None, fit: bool = True,
           **fit_options: Any) -> StreamingSGPC:
    """A `StreamingSGPC` that has seen the data of `model` (through its posterior q(u), not its
    data) and the new batch X_new [N, D], y_new [N] (units of X; labels in the model's
    convention, or targets of its likelihood).

    `model`: an SGPC (or StreamingSGPC) with inducing points and a zero prior mean, any
    single-latent likelihood; one loaded without its data will do, as long as its saved
    posterior is current. The new model starts from the old hyperparameters, keeps the old
    units, α, damping and likelihood, and starts the new batch's sites at zero.
    `inducing_points` as in `SGPR.update`: None or an int M chooses M inputs by seeded
    k-means++ from the old inducing inputs and X_new together; an array [M, D] (units of X) or
    an `InducingPoints` is taken as given (`model.inducing_points` keeps the old ones).
    With `fit` (default) the model is then fitted as an SGPC is (`fit_options`: those of
    `SGPC.fit`); `fit=False` only sweeps the new sites to convergence (`update_sites()`) at
    the old hyperparameters. A batch may hold one class only. Cost O(N·M² + M³); the old
    data are never needed.

    Kept inducing inputs and hyperparameters (b = a, `fit=False`, jitter=0): with a Gaussian
    likelihood the posterior is the batch posterior of all the data seen; with any other, it
    is Power EP on the new batch with q_old(a) as the prior (the old data's sites are not
    revisited, so it differs slightly from the batch SGPC's posterior).
    """
    summary = _checked_summary(model)
    check_fit_arguments(fit, fit_options)
    X, y = _new_batch(model, X_new, y_new)
    feature = new_feature(model, inducing_points, X, summary.Z)
    new = _assemble(model, X, y, feature, summary)
    if fit:
        new.fit(**fit_options)
    else:
        new.update_sites()
    return new


def _checked_summary(model: Any) -> Summary:
    """The summary of the posterior q(a) of `model`, or a clear error."""
    if not isinstance(model, SGPC):
        raise TypeError(f"update takes an SGPC; got {type(model).__name__}")
    return summary_of(model, "the Power-EP posterior of one latent function (an "
                                       "SGPC's)")


def _new_batch(model: SGPC, X_new: Any, y_new: Any) -> tuple[Tensor, Tensor]:
    """X_new in the old model's internal units and y_new as its likelihood takes them (labels
    mapped to {0, 1}), both float64; labels must follow the model's convention."""
    check_same_rows(X_new, y_new)
    X = model._internal_inputs(X_new, "X_new").detach()
    t = as_tensor(y_new.detach() if isinstance(y_new, Tensor) else y_new, "y_new",
                  device=model.device)
    if t.dim() == 2 and t.shape[1] == 1:
        t = t[:, 0]
    if t.dim() != 1 or t.shape[0] != X.shape[0]:
        raise ValueError(f"y_new must be a vector of {X.shape[0]} targets (one per row of "
                         f"X_new); got shape {tuple(t.shape)}")
    t = check_finite(t, "y_new").to(PARAMETER_DTYPE)
    if isinstance(model.likelihood, Bernoulli):
        allowed = {float(c) for c in model.classes}
        bad = sorted(set(torch.unique(t).tolist()) - allowed)
        if bad:
            raise ValueError(f"y_new holds labels {', '.join(f'{v:g}' for v in bad[:5])} "
                             f"outside this model's classes {model.classes}: give the new "
                             "batch's labels in the convention of the training labels")
    return X, model.likelihood.check_targets(t)


def _assemble(model: SGPC, X: Tensor, y: Tensor, feature: InducingPoints,
              summary: Summary) -> StreamingSGPC:
    """The StreamingSGPC at the old model's hyperparameters, units and options, with the
    summary and zero sites for the new batch."""
    new = assemble(StreamingSGPC, model, X, y,
                   {"likelihood": copy.deepcopy(model.likelihood), "feature": feature},
                   summary_sizes(summary))
    new.keep_summary(summary)
    new.tau, new.nu = torch.zeros_like(y), torch.zeros_like(y)
    return new
