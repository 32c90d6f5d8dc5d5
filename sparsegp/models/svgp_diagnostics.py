"""Is SVGP's approximation good? Under a Gaussian likelihood with one output: the ELBO
against the collapsed bound (its maximum over q(u)) and the upper bound, with the noise and
inducing-input checks; otherwise the ELBO and the inducing-input checks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..diagnostics import Diagnostics, RegressionView, diagnose
from ..diagnostics.latent import LatentDiagnostics, LatentView, diagnose_latent
from ..distributed import is_distributed
from ..likelihoods import Gaussian
from ..objectives.collapsed import VFE, CollapsedProblem, titsias_upper_bound

if TYPE_CHECKING:  # the mixin's methods use the model's attributes
    from .base import Model as _MixinBase
else:
    _MixinBase = object


class SVGPDiagnostics(_MixinBase):
    """`collapsed_problem`, `upper_bound`, `diagnostic_view` and `diagnostics` of `SVGP`."""

    def collapsed_problem(self) -> CollapsedProblem:
        """The collapsed bound (Titsias 2009) at this model's kernel, inducing variables and
        noise, internal units: the ELBO's maximum over q(u). A Gaussian likelihood and one
        output (several outputs and mixing couple the bound: no single problem)."""
        m: Any = self  # the SVGP this mixin is part of
        m._require_data()
        if not isinstance(m.likelihood, Gaussian):
            raise ValueError("the collapsed bound, its upper bound and the diagnostics need a "
                             "Gaussian likelihood; this SVGP's is "
                             f"{type(m.likelihood).__name__}")
        if m.num_outputs > 1 or m.mixing_matrix is not None:
            raise ValueError(f"the collapsed bound, its upper bound and the diagnostics take one "
                             f"output; this SVGP has {m.num_outputs}"
                             + (" and a mixing matrix" if m.mixing_matrix is not None else "")
                             + " (fit a single-output model per column to diagnose it)")
        return m._bound_problem()

    def _bound_problem(self) -> CollapsedProblem:
        m: Any = self  # the SVGP this mixin is part of
        return CollapsedProblem(m.kernel, m.feature, m.X, m.y,
                                m.likelihood.value("variance"), VFE, m.jitter,
                                m.chunk_size, mean=m.prior_mean())

    def upper_bound(self) -> float:
        """Titsias (2014) upper bound on the exact log evidence at the current hyperparameters
        and inducing variables (Gaussian likelihood, one output)."""
        m: Any = self  # the SVGP this mixin is part of
        with torch.no_grad():
            return float(titsias_upper_bound(m.collapsed_problem())) + m._objective_offset()

    def diagnostic_view(self) -> RegressionView:
        """What the diagnostics read of this model: the collapsed problem, with the ELBO at
        this q(u) as the model's objective (see `RegressionView`)."""
        m: Any = self  # the SVGP this mixin is part of
        problem = m.collapsed_problem()
        residual = m.zero_mean_targets()
        with torch.no_grad():
            elbo = float(m.elbo())
        noise = problem.noise.detach()
        return RegressionView(type(self).__name__, m.kernel, m.X, residual, noise,
                              m.jitter, m._objective_offset(),
                              m._variance_in_target_units(float(noise)), m.x_shift,
                              m.x_scale,
                              problem._replace(y=residual, mean=None),
                              m.shards_data and is_distributed(), m.feature_names,
                              objective=elbo,
                              approximation="ELBO, mean-field q(u)" if m.mean_field else "ELBO",
                              objective_remedy=(
                                  "a mean-field q(u) cannot reach it: the gap includes the cost "
                                  "of the factorisation; train longer" if m.mean_field else
                                  "train longer; one natural-gradient step of size 1 on all "
                                  "the data reaches it: model.natural_gradient_step(1.0)"))

    def diagnostics(self, **kwargs: Any) -> Diagnostics | LatentDiagnostics:
        """Is the approximation good? With a Gaussian likelihood and one output: the ELBO
        against the VFE bound (its maximum over q(u)) and the upper bound, with the noise and
        inducing-input checks of `sparsegp.diagnostics.diagnose` (`kwargs`: its thresholds).
        Otherwise (no upper bound exists): the ELBO and the inducing-input checks
        (`sparsegp.diagnostics.diagnose_latent`)."""
        m: Any = self  # the SVGP this mixin is part of
        if (isinstance(m.likelihood, Gaussian) and m.num_outputs == 1
                and m.mixing_matrix is None):
            return diagnose(self, **kwargs)
        m._require_data()
        with torch.no_grad():
            elbo = float(m.elbo()) + m._objective_offset()  # the units of y
        view = LatentView(type(self).__name__, f"ELBO, {type(m.likelihood).__name__}",
                          elbo, "ELBO, a lower bound on log p(y)", m.feature, m.kernel,
                          m.X, "a variational fit stacks spare inducing inputs on top of "
                          "each other when fewer suffice")
        return diagnose_latent(view, **kwargs)
