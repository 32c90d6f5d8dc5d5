"""The mixing matrix of the linear model of coregionalisation (LMC), shared by SGPR and SVGP:
P outputs f = W g of L latent functions g; W [P, L] is a trainable parameter."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..runtime.config import PARAMETER_DTYPE


def mixing_matrix(mixing: Any, num_outputs: int | None = None) -> Tensor:
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


class CoregionalMixin:
    """`mixing_matrix` (an nn.Parameter [P, L], or None for independent outputs) and its view."""

    mixing_matrix: nn.Parameter | None

    def _declare_mixing(self, shape: list[int] | None) -> None:
        """The parameter W of the config's shape [P, L] (None: independent outputs)."""
        self.mixing_matrix = (None if shape is None
                              else nn.Parameter(torch.zeros(*shape, dtype=PARAMETER_DTYPE)))

    def _initialise_mixing(self, mixing: Any) -> None:
        if mixing is not None and self.mixing_matrix is not None:
            with torch.no_grad():
                self.mixing_matrix.copy_(mixing_matrix(mixing))

    @property
    def mixing(self) -> np.ndarray | None:
        """The LMC's mixing matrix W [P, L] (numpy), or None for independent outputs."""
        W = self.mixing_matrix
        return None if W is None else W.detach().cpu().numpy().copy()
