"""SVGP's targets: whether y is standardised, and the checks of several outputs (NaN marks
a missing one) with the latent functions they imply."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..config import PARAMETER_DTYPE
from ..likelihoods import Gaussian
from ..likelihoods.base import Likelihood
from ..means import Zero, as_mean
from ..validation import as_output_targets
from .coregional import mixing_matrix


def standardizes_y(likelihood: Likelihood, standardize_y: bool | None) -> bool:
    """Whether an SVGP with `likelihood` standardises y: `standardize_y`, whose default (None)
    is True for the Gaussian likelihood. Other likelihoods take y as given and refuse True."""
    if standardize_y is not None and not isinstance(standardize_y, bool):
        raise TypeError(f"standardize_y must be True, False or None; got {standardize_y!r}")
    if not isinstance(likelihood, Gaussian):
        if standardize_y:
            raise ValueError(f"standardize_y=True applies to the Gaussian likelihood; "
                             f"{type(likelihood).__name__} takes y as it is (labels, counts, or "
                             "a noise model of its own units): leave standardize_y unset, or "
                             "rescale y yourself")
        return False
    return True if standardize_y is None else standardize_y


def checked_outputs(t: Tensor, n: int, P: int, name: str) -> Tensor:
    """Targets [n, P] of P outputs with NaN marking a missing one (±inf refused)."""
    if t.dim() != 2 or tuple(t.shape) != (n, P):
        raise ValueError(f"{name} must have shape [{n}, {P}] (one column per output); got "
                         f"{tuple(t.shape)}")
    if bool(torch.isinf(t).any()):
        raise ValueError(f"{name} contains ±inf (NaN marks a missing output)")
    return t.to(PARAMETER_DTYPE)


def output_targets(t: Tensor, n: int, likelihood: Likelihood, W: Tensor | None,
                    num_latent: int | None, mean: Any
                    ) -> tuple[Tensor, dict[str, Tensor], dict[str, Any]]:
    """Targets of P outputs (Gaussian likelihood; NaN: missing) and the config they imply:
    P latent functions, or the L of the mixing matrix W [P, L]."""
    if not isinstance(likelihood, Gaussian):
        raise ValueError("several output columns (or a mixing matrix) need the Gaussian "
                         f"likelihood; got {type(likelihood).__name__}")
    if not isinstance(as_mean(mean), Zero):
        raise ValueError("a prior mean takes one output: with several output columns or a "
                         "mixing matrix leave mean=None (centre each column of y instead)")
    y = as_output_targets(t, n, "y")
    P = 1 if y.dim() == 1 else y.shape[1]
    y = checked_outputs(y.reshape(n, P), n, P, "y")
    noise = likelihood.value("variance")
    if noise.dim() > 1 or (noise.dim() == 1 and noise.shape[0] != P):
        raise ValueError(f"the Gaussian likelihood's variance must be one number or one per "
                         f"output ({P}); got shape {tuple(noise.shape)}")
    C = P if W is None else mixing_matrix(W, P).shape[1]
    if num_latent is not None and int(num_latent) != C:
        raise ValueError(f"num_latent must be {C} here (" + ("the columns of mixing" if W is not None
                         else "one latent function per output") + f"); got {num_latent}")
    config: dict[str, Any] = {"num_outputs": P, "num_latent": C,
                              "mixing": None if W is None else list(W.shape)}
    return y, {}, config
