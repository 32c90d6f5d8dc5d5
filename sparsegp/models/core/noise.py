"""Gaussian observation noise, the likelihood of the regression models: its structure (one
σ², one per group of points, or one known value per point), the values a user gives, and the
noise of new points as predictions see it (`Noise`).

A regression model (GPR, SGPR, KISS-GP, RFF/SSGP) keeps its noise variance as its parameter
`noise_variance` (scalar, [G] groups or [N] points) and, where it differs per point, the code
of every point in the buffer `noise_codes` [N]; SVGP's Gaussian likelihood and the random-
input models' noise give a `Noise` of one value or one per output. Predictions of y add the
`Noise` of the new points to the latent moments, whatever their layout (`Noise.add`), and
score observed targets with its density (`Noise.log_density`).
"""

from __future__ import annotations

import numbers
from typing import NamedTuple, cast

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from ...likelihoods.gaussian import gaussian_log_density
from ...objectives.collapsed.blocks import label_codes
from ...parameters import at_least_above
from ...runtime.config import NOISE_FLOOR, PARAMETER_DTYPE
from ...validation import ArrayLike
from .spec import NoiseSpec


class Noise(NamedTuple):
    """N(y | f, σ²) at the points predicted (internal units): `variance` one value [],
    one per output column [P] (`per_point` False), or one per point [N*] (`per_point`)."""

    variance: Tensor
    per_point: bool = False

    def _columns(self, like: Tensor) -> Tensor:
        """σ² against moments [N*, C] (per point: a column [N*, 1])."""
        v = self.variance.to(like.dtype)
        return v[:, None] if self.per_point and v.dim() == 1 and like.dim() == 2 else v

    def add(self, var: Tensor, full_cov: bool = False, full_output_cov: bool = False) -> Tensor:
        """The covariance of y* from that of f*: variances [N*] or [N*, C], covariances over
        the points [N*, N*] or [C, N*, N*] (`full_cov`), or over the outputs at each point
        [N*, C, C] (`full_output_cov`)."""
        v = self.variance.to(var.dtype)
        if full_output_cov:  # [N*, C, C]
            C = var.shape[-1]
            per = v[:, None].expand(-1, C) if self.per_point else v.expand(C)
            return var + torch.diag_embed(per)
        if full_cov:
            n = var.shape[-1]
            eye = torch.eye(n, dtype=var.dtype, device=var.device)
            if self.per_point:  # one value per point: the same for every output
                return var + torch.diag_embed(v.expand(n))
            if var.dim() == 3:  # [C, N*, N*]: one value per output, or one for all
                return var + v.expand(var.shape[0])[:, None, None] * eye
            return var + v * eye
        return var + self._columns(var)

    def predict_mean_and_var(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """The moments of y* from those of f* (variances)."""
        return mean, self.add(var)

    def log_density(self, mean: Tensor, var: Tensor, y: Tensor) -> Tensor:
        """log N(y | m, v + σ²) of every entry (NaN where y is NaN: a missing output)."""
        return gaussian_log_density(y, mean, self.add(var))


def noise_structure(noise_variance: ArrayLike | None, noise_groups: ArrayLike | None, n: int
                    ) -> tuple[NoiseSpec, Tensor | None]:
    """The noise's spec and the code of every point: one σ² (no codes); one σ² per group of
    `noise_groups`; one known value per point (`noise_variance` an array of n values)."""
    if noise_groups is not None:
        labels, codes = label_codes(noise_groups, n, "noise_groups")
        return NoiseSpec(groups=tuple(labels.tolist())), torch.as_tensor(codes, dtype=torch.long)
    try:
        shape = (tuple(noise_variance.shape) if isinstance(noise_variance, Tensor)
                 else np.shape(cast(npt.ArrayLike, noise_variance)))
    except (TypeError, ValueError):
        shape = ()
    if len(shape) == 0:
        return NoiseSpec(), None
    if shape != (n,):
        raise ValueError(f"noise_variance must be a number or one value per data point "
                         f"({n},); got shape {shape}")
    return NoiseSpec(points=n), torch.arange(n)


def internal_noise(value: object, shape: tuple[int, ...], y_scale: float) -> Tensor:
    """A noise variance given in the units of y as the parameter holds it: in the internal
    units (÷ y_scale²), checked (finite, positive, of the parameter's shape, at least the
    floor; a value at the floor, as a fit that ends there reads, is taken as just above)."""
    try:
        v = torch.as_tensor(np.asarray(value, dtype=np.float64), dtype=PARAMETER_DTYPE)
    except (TypeError, ValueError, RuntimeError):
        v = None
    what = "a finite number" if not shape else f"a number or {shape[0]} numbers"
    if (v is None or v.dim() > 1 or (v.dim() == 1 and tuple(v.shape) != shape)
            or not bool(torch.isfinite(v).all()) or bool((v <= 0).any())):
        raise ValueError(f"noise_variance must be {what} > 0; got {short(value)}")
    scale2 = y_scale ** 2
    internal = v / scale2
    if bool((internal < NOISE_FLOOR * (1 - 1e-9)).any()):
        raise ValueError(f"noise_variance must be at least {NOISE_FLOOR * scale2:.4g} in the "
                         f"units of y (the least noise the model represents: {NOISE_FLOOR:g} "
                         f"in its internal units); got {short(value)}")
    return at_least_above(internal, NOISE_FLOOR)


def new_points_noise(n: int, noise: Tensor, groups: tuple[object, ...] | None,
                     per_point: bool, y_scale: float, noise_variance: ArrayLike | None,
                     noise_groups: ArrayLike | None) -> Noise:
    """The noise of n new points (internal units): the model's σ² (`noise`: [] one, [G] one
    per group of `groups`, [N] one per training point), or the given `noise_variance` (a
    number or n, units of y) or `noise_groups` (n labels of the fitted groups)."""
    if noise_variance is not None and noise_groups is not None:
        raise ValueError("give noise_variance or noise_groups for the new points, not both")
    if noise_groups is not None:
        if groups is None:
            raise ValueError("noise_groups: this model has no noise groups")
        index = {g: i for i, g in enumerate(groups)}
        labels = np.asarray(noise_groups).reshape(-1).tolist()
        unknown = [g for g in labels if g not in index]
        if len(labels) != n or unknown:
            raise ValueError(f"noise_groups must be {n} labels of the fitted groups "
                             f"{list(groups)}; got {len(labels)} labels"
                             + (f", unknown {unknown[:3]}" if unknown else ""))
        codes = torch.as_tensor([index[g] for g in labels], device=noise.device)
        return Noise(noise[codes], per_point=True)
    if noise_variance is not None:
        v = torch.as_tensor(np.asarray(noise_variance, dtype=np.float64),
                            dtype=PARAMETER_DTYPE, device=noise.device)
        if v.dim() > 1 or (v.dim() == 1 and v.shape[0] != n) or not bool(
                (torch.isfinite(v) & (v > 0)).all()):
            raise ValueError(f"noise_variance of the new points must be a positive number or "
                             f"{n} of them; got {short(noise_variance)}")
        return Noise(v / y_scale ** 2, per_point=v.dim() == 1)
    if per_point or noise.dim() > 0:
        raise ValueError("this model's noise differs per point: predicting noisy y* needs "
                         "the noise of the new points (noise_variance=..., or noise_groups="
                         "... for a model fitted with noise_groups)")
    return Noise(noise)


def short(value: object) -> str:
    """A value's repr, cut to 60 characters (for messages)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_number(value: object) -> bool:
    """A real number that is not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
