"""The mixing matrix of the linear model of coregionalisation (LMC), shared by SGPR and SVGP:
P outputs f = W g of L latent functions g; W [P, L] is a trainable parameter."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike
from torch import Tensor, nn

from ...runtime.config import PARAMETER_DTYPE


def mixing_matrix(mixing: ArrayLike, num_outputs: int | None = None) -> Tensor:
    """W [P, L] from an array (finite); `num_outputs` P when the targets fix it."""
    try:
        W = torch.as_tensor(np.asarray(mixing, dtype=np.float64), dtype=PARAMETER_DTYPE)
    except (TypeError, ValueError):
        raise TypeError(f"mixing must be an array [P, L] of numbers; got {type(mixing).__name__}"
                        ) from None
    if W.dim() != 2 or 0 in W.shape or not bool(torch.isfinite(W).all()):
        raise ValueError(f"mixing must be a finite matrix [P outputs, L latent functions]; got "
                         f"shape {tuple(W.shape)}")
    if num_outputs is not None and W.shape[0] != num_outputs:
        raise ValueError(f"mixing must have one row per output column of y ({num_outputs}); got "
                         f"shape {tuple(W.shape)}")
    return W


def mixing_parameter(shape: tuple[int, int] | None) -> nn.Parameter | None:
    """The parameter W of the spec's shape [P, L] (None: independent outputs), for
    `model.mixing_matrix`."""
    return None if shape is None else nn.Parameter(torch.zeros(*shape, dtype=PARAMETER_DTYPE))


def start_mixing(W: nn.Parameter | None, mixing: ArrayLike | None) -> None:
    """Give W the values the user gave (`mixing`)."""
    if mixing is not None and W is not None:
        with torch.no_grad():
            W.copy_(mixing_matrix(mixing))


class MixingView:
    """`model.mixing` (a descriptor of the models with a linear model of coregionalisation):
    the mixing matrix W [P, L] as a numpy array, or None for independent outputs."""

    def __get__(self, model: Any, owner: type | None = None) -> Any:
        if model is None:
            return self
        W = model.mixing_matrix
        return None if W is None else W.detach().cpu().numpy().copy()
