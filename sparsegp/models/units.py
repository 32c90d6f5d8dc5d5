"""The units of real-valued targets, shared by the Gaussian-likelihood models: `GPModel`
(GPR, SGPR, KISS-GP, RFF, SSGP) and SVGP with a Gaussian likelihood.

y is stored as (y − y_shift)/y_scale: with `standardize_y` (the default of every regression
model) the mean of y (of each output column) and its standard deviation (one, pooled over the
columns: the outputs share the units of y), else 0 and 1. The objectives work on the stored
(internal) targets; what users read is in the units of y: predictions (mean·s + shift,
variance·s²), the noise variance (σ²·s²) and log-likelihoods (log p(y) = log p(y_std) − N·log s,
N the observed targets).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..distributed import is_distributed
from ..means import Zero, as_mean
from ..runtime.config import PARAMETER_DTYPE
from .base import nonzero

if TYPE_CHECKING:  # the mixin's methods use the model's attributes
    from .base import Model as _MixinBase
else:
    _MixinBase = object


class TargetUnits(_MixinBase):
    """The buffers `y_shift` ([] for y [N], [P] for y [N, P]) and `y_scale` ([]), their
    values from the data, and the conversions to the units of y. For `Model` subclasses:
    list it before `Model` among the bases."""

    y_shift: Tensor  # buffers: y is stored as (y − y_shift)/y_scale
    y_scale: Tensor

    def _target_units(self, y: Tensor, standardize_y: bool, noise: dict[str, Any] | None = None,
                      mean: Any = None) -> dict[str, Tensor]:
        """The values of `y_shift` and `y_scale` for targets y [N] or [N, P] (NaN: a missing
        output): the mean (of each column) and the standard deviation (pooled over the
        columns) with `standardize_y`, else 0 and 1. With data sharded over torch.distributed
        ranks, the moments are those of all shards. `noise` (the noise's config entry) and
        `mean` (the prior mean) are checked against several outputs."""
        if y.dim() == 2:
            y_mean, y_std = self._output_moments(y, noise or {}, mean)
        else:
            y_mean, y_std = self._moments(y)
        if not standardize_y:
            return {"y_shift": torch.zeros_like(y_mean), "y_scale": torch.ones_like(y_std)}
        return {"y_shift": y_mean, "y_scale": nonzero(y_std)}

    @staticmethod
    def _in_target_units(y: Tensor, units: dict[str, Tensor]) -> Tensor:
        """y in the internal units that `units` (of `_target_units`) define."""
        return (y - units["y_shift"]) / units["y_scale"]

    def _output_moments(self, y: Tensor, noise: dict[str, Any], mean: Any
                        ) -> tuple[Tensor, Tensor]:
        """Several outputs: the mean of each column's observed values [P] and one pooled
        standard deviation [] (the outputs share one noise variance, so one unit of y)."""
        if noise:
            raise ValueError("several output columns share one noise variance: noise_groups "
                             "and a noise_variance per point take one output")
        if not isinstance(as_mean(mean), Zero):
            raise ValueError("a prior mean takes one output; with several output columns use "
                             "standardize_y=True to remove each column's offset")
        if self.shards_data and is_distributed() and bool(torch.isnan(y).any()):
            raise ValueError("missing outputs (NaN in y) are not supported with data sharded "
                             "over torch.distributed ranks")
        observed = ~torch.isnan(y)
        count = observed.sum(0)
        col_mean = torch.where(observed, y, 0.0).sum(0) / count
        dev = torch.where(observed, y - col_mean, 0.0)
        pooled = (dev * dev).sum() / (count.sum() - y.shape[1]).clamp_min(1)
        return col_mean, torch.sqrt(pooled)

    def _declare_target_units(self, num_outputs: int | None) -> None:
        """The buffers (in `_build`): a shift per output column, one scale."""
        self.register_buffer("y_shift", torch.zeros(() if num_outputs is None else (num_outputs,),
                                                    dtype=PARAMETER_DTYPE))
        self.register_buffer("y_scale", torch.ones((), dtype=PARAMETER_DTYPE))

    @property
    def num_outputs(self) -> int:
        """P: the output columns of y (1 for y [N])."""
        return int(self._config.get("num_outputs") or 1)

    def num_targets(self) -> int:
        """The observed target values: N, or N·P less the missing ones for several outputs."""
        if self.num_outputs == 1:
            return self.num_data
        if self.y is None:
            raise RuntimeError("the number of observed targets needs the training data")
        return int((~torch.isnan(self.y)).sum())

    def _objective_offset(self) -> float:
        # log p(y) = log p(y_std) − N log s_y: objectives in the units of y.
        return -self.num_targets() * math.log(float(self.y_scale))

    def _variance_in_target_units(self, v: Any) -> Any:
        """A variance of the internal targets (a number or an array) in the units of y²."""
        return v * float(self.y_scale) ** 2
