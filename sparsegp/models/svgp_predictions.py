"""SVGP's predictions: the latent functions, the outputs of the linear model of
coregionalisation they make, and y under the likelihood — in the units of y, in the
caller's types (`predictions`), with labels under a classification likelihood."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.distributions import Distribution

from ..conditionals import mix_outputs
from ..likelihoods import Gaussian
from ..likelihoods.base import Likelihood
from .labels import classifies, predicted_labels
from .predictions import Call, label_distribution, tensor_of

if TYPE_CHECKING:  # the mixin's methods use the model's attributes
    from .base import Model as _MixinBase
else:
    _MixinBase = object


class SVGPPredictions(_MixinBase):
    """`predict_f`, `predict_y`, `predict`, `predict_proba`, `predict_log_density` and the
    observed predictive distribution of `SVGP` (list it first among the bases)."""

    likelihood: Likelihood
    mixing_matrix: nn.Parameter | None
    y_scale: Tensor
    y_shift: Tensor

    if TYPE_CHECKING:
        @property
        def num_latent(self) -> int: ...

        @property
        def num_outputs(self) -> int: ...

        def _internal_targets(self, yb: Any, name: str = ..., rows: int | None = ...
                              ) -> Tensor: ...

    def _latent(self, call: Call, full_cov: bool = False) -> tuple[Tensor, Tensor]:
        """Mean and variance of the latent functions, always [N*, C] (or [C, N*, N*])."""
        mean, var = call.posterior.predict_f(call.X, full_cov)
        if self.num_latent == 1:
            mean, var = mean[:, None], (var[None] if full_cov else var[:, None])
        return mean, var

    def _functions(self, call: Call, full_cov: bool = False, full_output_cov: bool = False
                   ) -> tuple[Tensor, Tensor]:
        """Mean [N*, C] of the functions the likelihood sees (the latent functions, or the P
        outputs W g of the LMC) and their variances [N*, C], covariances over the points
        [C, N*, N*] (`full_cov`) or over the outputs at each point [N*, C, C]
        (`full_output_cov`)."""
        if full_cov and full_output_cov:
            raise ValueError("full_cov (over the points) and full_output_cov (over the outputs "
                             "at each point) cannot both be asked for")
        mean, var = self._latent(call, full_cov)
        return mix_outputs(mean, self.mixing_matrix, var, None, full_cov, full_output_cov)

    def predict_f(self, Xnew: Any, full_cov: bool = False, full_output_cov: bool = False
                  ) -> tuple[Any, Any]:
        """Mean and variance of the latent functions (the outputs of the LMC with `mixing`):
        [N*] for one, [N*, C] for several; `full_cov` gives covariances over the points
        ([N*, N*], or [C, N*, N*]), `full_output_cov` over the functions at each point
        [N*, C, C]. Numpy in, numpy out; a tensor in, differentiable tensors out."""
        with self._predicting(Xnew) as call:
            mean, var = self._in_units_of_y(*self._functions(call, full_cov, full_output_cov))
            if mean.shape[1] == 1 and not full_output_cov:
                mean, var = mean[:, 0], (var[0] if full_cov else var[:, 0])
            return call.out(mean, var)

    def _in_units_of_y(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """Moments of the functions [N*, C] (and variances or covariances of any layout) from
        the internal units to those of y (the identity unless y is standardised)."""
        s = self.y_scale.to(mean.dtype)
        return mean * s + self.y_shift.to(mean.dtype), var * (s * s)

    def _likelihood_moments(self, call: Call) -> tuple[Tensor, Tensor]:
        mean, var = self._functions(call)
        if self.likelihood.num_latent == 1 and self.num_outputs == 1:
            mean, var = mean[:, 0], var[:, 0]
        return mean, var

    def predict_y(self, Xnew: Any, full_cov: bool = False, full_output_cov: bool = False
                  ) -> tuple[Any, Any]:
        """Mean and variance of y* under the likelihood, shaped as `predict_f`'s; with a
        Gaussian likelihood also the covariance of y* over the points (`full_cov`) or over
        the outputs at each point (`full_output_cov`): f*'s plus the noise variance."""
        if (full_cov or full_output_cov) and not isinstance(self.likelihood, Gaussian):
            raise ValueError("full_cov and full_output_cov of y* need a Gaussian likelihood; this "
                             f"SVGP's is {type(self.likelihood).__name__} (predict_f gives the "
                             "covariances of f*)")
        with self._predicting(Xnew) as call:
            if not (full_cov or full_output_cov):
                return call.out(*self._in_units_of_y(*self.likelihood.predict_mean_and_var(
                    *self._likelihood_moments(call))))
            mean, cov = self._functions(call, full_cov, full_output_cov)
            noise = self.likelihood.value("variance").to(cov.dtype).expand(mean.shape[1])
            if full_cov:  # [C, N*, N*]
                cov = cov + noise[:, None, None] * torch.eye(cov.shape[-1], dtype=cov.dtype,
                                                             device=cov.device)
            else:  # [N*, C, C]
                cov = cov + torch.diag_embed(noise)
            mean, cov = self._in_units_of_y(mean, cov)
            if mean.shape[1] == 1 and not full_output_cov:
                mean, cov = mean[:, 0], cov[0]
            return call.out(mean, cov)

    def predict(self, Xnew: Any, full_cov: bool = False, include_noise: bool = False,
                full_output_cov: bool = False) -> Any:
        """Under a classification likelihood (Bernoulli, MultiClass, Ordinal): the predicted labels
        [N*] (as `SGPC.predict`). Otherwise as `SGPR.predict`: `predict_f` (latent f*) by
        default, `predict_y` (y* under the likelihood) with `include_noise=True`."""
        if self.classifies:
            if full_cov or include_noise or full_output_cov:
                raise ValueError("predict gives labels under a classification likelihood and "
                                 "takes no full_cov, include_noise or full_output_cov (use "
                                 "predict_f / predict_y for moments)")
            return predicted_labels(self.predict_proba(Xnew), self._config.get("classes"))
        if include_noise:
            return self.predict_y(Xnew, full_cov, full_output_cov)
        return self.predict_f(Xnew, full_cov, full_output_cov)

    @property
    def classifies(self) -> bool:
        """True under a classification likelihood (Bernoulli, MultiClass, Ordinal)."""
        return classifies(self.likelihood)

    def predict_proba(self, Xnew: Any) -> Any:
        """Class probabilities: P(y* = 1) [N*] for Bernoulli, [N*, C] for several classes."""
        if not self.classifies:
            raise TypeError(f"predict_proba needs a classification likelihood (Bernoulli, "
                            f"MultiClass, Ordinal); this SVGP's is "
                            f"{type(self.likelihood).__name__}: "
                            "use predict_y")
        return self.predict_y(Xnew)[0]

    def _observed_distribution(self, Xnew: Any, full_cov: bool) -> Distribution:
        if self.classifies:
            if full_cov:
                raise ValueError("the labels' predictive has no covariance over the points")
            p = self.predict_proba(Xnew)
            return label_distribution(tensor_of(p))
        if not isinstance(self.likelihood, Gaussian):
            raise ValueError(
                f"the predictive distribution of y* under {type(self.likelihood).__name__} is "
                "not available as a torch distribution: use predict_y for its moments, "
                "predict_log_density for its density")
        return super()._observed_distribution(Xnew, full_cov)

    def predict_log_density(self, Xnew: Any, ynew: Any) -> Any:
        """log p(y* | data) at each test point [N*] (e.g. for the test NLPD), in the units of
        y; with P outputs one per output [N*, P] (the marginal of each; NaN where y* is
        missing)."""
        with self._predicting(Xnew) as call:
            mean, var = self._likelihood_moments(call)
            y = self._internal_targets(ynew.detach().to(self.dtype) if isinstance(ynew, Tensor)
                                       else ynew, "ynew", rows=mean.shape[0])
            log_density = self.likelihood.predict_log_density(mean, var, y)
            if isinstance(self.likelihood, Gaussian):  # the density of y, not of (y − b)/s
                log_density = log_density - torch.log(self.y_scale).to(log_density.dtype)
            return call.out(log_density)[0]
