"""The data's units: X is stored as (X − x_shift)/x_scale and real-valued targets as
(y − y_shift)/y_scale, and everything a user reads is converted back (`Units`).

With `standardize_X` the shift and scale of each input column are its mean and standard
deviation (else 0 and 1); with `standardize_y` (the default of every regression model) those
of y are its mean (of each output column) and its standard deviation (one, pooled over the
columns: the outputs share the units of y), else 0 and 1. Models of labels or counts, and
the random-input models' latent inputs, use 0 and 1 where they have no units of their own.
The objectives work in the internal units; predictions are returned in the user's (mean·s +
shift, variances·s²), and so are log densities (log p(y) = log p(y_internal) − log s per
observed target).

The values live in the model's buffers (`x_shift`, `x_scale`, `y_shift`, `y_scale`, saved
with it); `Units` is the view a model hands to whatever converts.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from ...runtime.config import PARAMETER_DTYPE
from .data import Placement, nonzero


class Units(NamedTuple):
    """The units of a model's inputs ([D] each) and targets (`y_shift` [] or [P], `y_scale`
    []); see the module docstring. Conversions keep the graph (and the caller's dtype)."""

    x_shift: Tensor
    x_scale: Tensor
    y_shift: Tensor
    y_scale: Tensor

    def inputs(self, X: Tensor) -> Tensor:
        """X [N, D] in the user's units -> internal."""
        return (X - self.x_shift) / self.x_scale

    def user_inputs(self, Z: Tensor) -> Tensor:
        """Inputs (or input locations) [M, D] internal -> the user's units."""
        return Z * self.x_scale + self.x_shift

    def targets(self, y: Tensor) -> Tensor:
        """y [N] or [N, P] in the user's units -> internal."""
        return (y - self.y_shift) / self.y_scale

    def outputs(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """Moments of outputs internal -> the user's units: the mean [N*, P] (or [N*]) shifted
        and scaled, the variances or covariances (any layout) scaled by s²."""
        s = self.y_scale.to(mean.dtype)
        return mean * s + self.y_shift.to(mean.dtype), var * (s * s)

    def variance(self, v: Tensor) -> Tensor:
        """A variance of the internal targets in the units of y²."""
        return v * self.y_scale.to(v.dtype) ** 2

    def log_density(self, log_p: Tensor) -> Tensor:
        """Log densities of internal targets -> of the user's (− log s each)."""
        return log_p - torch.log(self.y_scale).to(log_p.dtype)

    def offset(self, observed: int) -> float:
        """What turns a log likelihood of `observed` internal targets into one of the user's:
        −observed·log s."""
        return -observed * math.log(float(self.y_scale))


def identity_units(input_dim: int, num_outputs: int | None = None) -> dict[str, Tensor]:
    """The buffers of units that change nothing: shifts 0, scales 1 ([D]; y_shift [] or
    [P])."""
    return {"x_shift": torch.zeros(input_dim, dtype=PARAMETER_DTYPE),
            "x_scale": torch.ones(input_dim, dtype=PARAMETER_DTYPE),
            "y_shift": torch.zeros(() if num_outputs is None else (num_outputs,),
                                   dtype=PARAMETER_DTYPE),
            "y_scale": torch.ones((), dtype=PARAMETER_DTYPE)}


def target_units(y: Tensor, standardize: bool, placement: Placement) -> dict[str, Tensor]:
    """The values of `y_shift` and `y_scale` for targets y [N] or [N, P] (NaN: a missing
    output): the mean (of each column) and the standard deviation (pooled over the columns)
    with `standardize`, else 0 and 1; the moments of all shards."""
    mean, std = output_moments(y, placement) if y.dim() == 2 else placement.moments(y)
    if not standardize:
        return {"y_shift": torch.zeros_like(mean), "y_scale": torch.ones_like(std)}
    return {"y_shift": mean, "y_scale": nonzero(std)}


def output_moments(y: Tensor, placement: Placement) -> tuple[Tensor, Tensor]:
    """Several outputs y [N, P] (NaN: missing): the mean of each column's observed values [P]
    and one pooled standard deviation [] (the outputs share one noise variance, so one unit
    of y), Σ (y − ȳ_p)² / (n − P) over the n observed values. Sharded data (where the caller
    has refused missing outputs) give those of all ranks' rows."""
    if placement.sharded:
        mean, std = placement.moments(y)  # every column observed: the pooled variance is
        return mean, torch.sqrt((std * std).mean())  # the mean of the columns' variances
    observed = ~torch.isnan(y)
    count = observed.sum(0)
    col_mean = torch.where(observed, y, 0.0).sum(0) / count
    dev = torch.where(observed, y - col_mean, 0.0)
    pooled = (dev * dev).sum() / (count.sum() - y.shape[1]).clamp_min(1)
    return col_mean, torch.sqrt(pooled)
