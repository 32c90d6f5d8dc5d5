"""Streaming SVGP for any likelihood (Bui, Nguyen & Turner 2017): the `StreamingSVGP` that
`SVGP.update` makes from a fitted SVGP and a new batch of data, without the old data.

The old data are carried by the old posterior q_old(a) over the old inducing inputs a and the
old prior p_old(a) (`objectives.online.svgp.OldPosterior`, M_a² numbers per latent function);
the new model's q(b), hyperparameters and inducing inputs b are learnt from the new batch and
that summary alone (`objectives.online.svgp.streaming_elbo`), in O(N_new·M² + M³). It
predicts, fits, saves and loads as an SVGP does, and can be updated again. It keeps the old
model's units (x_shift, x_scale, y_shift, y_scale).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch
from torch import Tensor

from ...diagnostics import Diagnostics, RegressionView, diagnose
from ...diagnostics.latent import LatentDiagnostics, LatentView, diagnose_latent
from ...diagnostics.report import (
    EXACT_MAX_DATA,
    FAR_LENGTHSCALES,
    GAP_PER_POINT,
    MERGE_FRACTION,
    NOISE_FRACTION,
    QUADRATIC_MAX_DATA,
)
from ...features.base import InducingLike
from ...likelihoods import Gaussian
from ...objectives.online.bounds import streaming_upper_bound, summary_of_posterior
from ...objectives.online.regression import StreamingProblem, Summary
from ...objectives.online.svgp import OldPosterior, streaming_elbo
from ...runtime.config import PARAMETER_DTYPE
from ...training import FitResult
from ...training.guard import FitGuard
from ...validation import ArrayLike
from ..core import streaming
from ..core.fitting import FitOptions
from ..core.model import Parts
from ..core.spec import ModelSpec, StreamSpec
from .model import SVGP, SVGPSpec

#: The natural-gradient steps on q(b) before a streamed fit of a non-Gaussian likelihood
#: (`StreamingSVGP.settle_q`), and their size.
SETTLE_STEPS, SETTLE_GAMMA = 20, 0.5


@dataclass(frozen=True, kw_only=True)
class StreamingSVGPSpec(SVGPSpec):
    """A `StreamingSVGP`'s spec: an SVGP's and its history of updates."""

    streaming: StreamSpec


class StreamingSVGP(SVGP, streams=SVGP):
    """An SVGP fitted to a new batch of data and the posterior of the data before it (made by
    `SVGP.update`). Its objective (`elbo`, `log_marginal_likelihood`) is the streaming bound
    of `objectives.online.svgp`; `X` and `y` are the new batch only, `num_data` its rows,
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

    spec: StreamingSVGPSpec
    spec_type: ClassVar[type[ModelSpec]] = StreamingSVGPSpec

    old_Z: Tensor  # buffers: the old posterior (`objectives.online.svgp.OldPosterior`)
    old_L: Tensor
    old_mean: Tensor
    old_root: Tensor
    num_data_seen = streaming.FromStream("seen", streaming.NUM_DATA_SEEN_DOC)
    num_updates = streaming.FromStream("updates", streaming.NUM_UPDATES_DOC)

    def _declare(self, spec: ModelSpec, parts: Parts) -> None:
        super()._declare(spec, parts)
        assert isinstance(spec, StreamingSVGPSpec)
        M, C, D = spec.streaming.old_inducing, spec.num_latent, spec.input_dim
        for name, shape in (("old_Z", (M, D)), ("old_L", (M, M)), ("old_mean", (M, C)),
                            ("old_root", (C, M, M))):
            self.register_buffer(name, torch.zeros(shape, dtype=PARAMETER_DTYPE))

    @classmethod
    def from_update(cls, model: SVGP, X_new: ArrayLike, y_new: ArrayLike,
                    inducing_points: InducingLike = None, fit: bool = True,
                    **fit_options: Any) -> SVGP:
        """`model.update(X_new, y_new, ...)` (see `SVGP.update`)."""
        return update(model, X_new, y_new, inducing_points, fit, **fit_options)

    def old_posterior(self) -> OldPosterior:
        """The posterior of the data before this batch (internal units)."""
        return OldPosterior(self.old_Z, self.old_L, self.old_mean, self.old_root)

    def elbo(self, X: Tensor | None = None, y: Tensor | None = None, q_mu: Tensor | None = None,
             q_sqrt: Tensor | None = None) -> Tensor:
        """The streaming bound: the ELBO (estimate) of the new batch plus the old data's term
        (internal units of y)."""
        X, y = (self.X, self.y) if X is None else (X, y)
        assert X is not None and y is not None
        return streaming_elbo(self.kernel, self.feature, self.likelihood, X, y,
                              self._cholesky_kuu(), self.q_mu if q_mu is None else q_mu,
                              self._root(self.q_sqrt if q_sqrt is None else q_sqrt),
                              self.whiten, self.num_data, self._chunk(), self.old_posterior(),
                              self.prior_mean())

    def _why_minibatch(self, batch_size: int | None, data: object) -> str | None:
        return super()._why_minibatch(batch_size, data) or "the old data's term in the bound"

    def _stream_start(self) -> None:
        """An update without a fit leaves q(b) where it starts: the old q, or the old
        posterior at the new inducing inputs (`SVGP._projected_q`)."""

    def _fit_minibatch(self, options: FitOptions) -> FitResult:
        """Natural-gradient steps on q(b) at the current hyperparameters (`settle_q`), then
        the minibatch fit of an SVGP."""
        with FitGuard(self) as guard:
            self.settle_q()
            return super()._fit_minibatch(options)
        return guard.interrupted_result()

    def settle_q(self) -> None:
        """q(b) brought to the new batch and the old data's term before the hyperparameters
        train: one natural-gradient step of size 1 with a Gaussian likelihood (its optimum),
        else `SETTLE_STEPS` steps of size `SETTLE_GAMMA`, each over the whole new batch. An
        update starts q(b) from the old posterior, which knows nothing of the new rows; Adam
        steps on the hyperparameters against that q(b) pull them towards values that explain
        the new rows by the kernel alone, and a stream of small batches then forgets (20
        updates of 8 Poisson rows: the correlation of the predicted mean with the truth fell
        from 0.94 to 0.87 without these steps, and rose to 0.97 with them). Nothing for a
        frozen q(b) or `mean_field`."""
        if self.mean_field or not (self.q_mu.requires_grad and self.q_sqrt.requires_grad):
            return
        gaussian = type(self.likelihood) is Gaussian
        for _ in range(1 if gaussian else SETTLE_STEPS):
            self.natural_gradient_step(1.0 if gaussian else SETTLE_GAMMA)

    def old_summary(self) -> Summary:
        """The old posterior as r pseudo-observations of unit noise (`objectives.online.Summary`),
        which needs q_old narrower than p_old in every direction (else a ValueError says so):
        with a Gaussian likelihood, the bound is then the collapsed bound of the new batch
        and the pseudo-observations, and has an upper bound."""
        return summary_of_posterior(self.old_posterior())

    def upper_bound(self) -> float:
        """An upper bound on the evidence the streamed bound approximates (the new batch's
        density given the old posterior, `objectives.online.bounds`): a Gaussian likelihood,
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
        view = super().diagnostic_view()
        return replace(view, summary=self.old_summary(),
                       approximation="streamed " + str(view.approximation))

    def diagnostics(self, *, merge_fraction: float = MERGE_FRACTION,
                    far_lengthscales: float = FAR_LENGTHSCALES,
                    noise_fraction: float = NOISE_FRACTION,
                    gap_per_point: float = GAP_PER_POINT, exact_max_data: int = EXACT_MAX_DATA,
                    extra_inducing: int | None = None, overestimate_nats: float | None = None,
                    quadratic_max_data: int = QUADRATIC_MAX_DATA
                    ) -> Diagnostics | LatentDiagnostics:
        """Is the approximation good? With a Gaussian likelihood, one output and q_old narrower
        than p_old: the streamed ELBO against the streamed VFE bound (its maximum over q(b))
        and the upper bound, as `sparsegp.diagnostics.diagnose` reports them for a streamed
        model. Otherwise (no upper bound): the streamed ELBO and the inducing-input checks
        (`sparsegp.diagnostics.diagnose_latent`), the inputs being the new batch and the old
        inducing inputs; the report says why there is no upper bound."""
        if self._bounded():
            try:
                self.old_summary()
            except ValueError as err:
                why = f"here: {err}"
            else:
                return diagnose(self, merge_fraction=merge_fraction,
                                far_lengthscales=far_lengthscales,
                                noise_fraction=noise_fraction, gap_per_point=gap_per_point,
                                exact_max_data=exact_max_data, extra_inducing=extra_inducing,
                                overestimate_nats=overestimate_nats,
                                quadratic_max_data=quadratic_max_data)
        else:
            why = f"for a {type(self.likelihood).__name__} likelihood"
        self._require_data()
        assert self.X is not None
        with torch.no_grad():
            elbo = float(self.elbo()) + self._objective_offset()  # the units of y
        inputs = torch.cat([self.X, self.old_Z.to(self.X)], 0)
        view = LatentView(type(self).__name__, f"streamed ELBO, {type(self.likelihood).__name__}",
                          elbo, "streamed ELBO, a lower bound", self.feature, self.kernel,
                          inputs, "a variational fit stacks spare inducing inputs on top of "
                          "each other when fewer suffice", num_data=self.X.shape[0],
                          no_upper_bound=why)
        return diagnose_latent(view, merge_fraction=merge_fraction,
                               far_lengthscales=far_lengthscales)


def update(model: SVGP, X_new: ArrayLike, y_new: ArrayLike,
           inducing_points: InducingLike = None, fit: bool = True, **fit_options: Any
           ) -> SVGP:
    """`model.update(X_new, y_new, inducing_points, fit, **fit_options)`: the streamed model
    that has seen the data of `model` (through its posterior) and the new batch (see
    `SVGP.update`)."""
    if not isinstance(model, SVGP):
        raise TypeError(f"update takes an SVGP; got {type(model).__name__}")
    return model.update(X_new, y_new, inducing_points, fit, **fit_options)
