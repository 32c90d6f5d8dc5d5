"""The rational quadratic kernel: a scale mixture of squared exponentials."""

from __future__ import annotations

import torch
from torch import Tensor

from ..parameters import UserValue
from ..runtime.config import POSITIVE_FLOOR
from ..validation import ArrayLike
from .stationary import RadialKernel


class RationalQuadratic(RadialKernel):
    """σ² (1 + r²/(2α))^(−α), r² = Σ_d (x_d − x'_d)²/ℓ_d².

    The squared exponential's scale mixture over lengthscales: a Gamma(α, rate α ℓ²)
    distribution of the inverse squared lengthscale τ = 1/ℓ'² gives E[exp(−τ d²/2)] =
    (1 + d²/(2αℓ²))^(−α). Small α mixes many scales (heavy tails in distance); as α → ∞ it
    tends to the squared exponential with lengthscale ℓ. The shape α is one positive scalar.
    Shapes: lengthscale [] or [D] (ARD), variance [], alpha []; X [N, D], X2 [N2, D] ->
    K [N, N2], K_diag [N]. Unset lengthscale and variance start from the data (as for the
    squared exponential); α is given (default 1). Its profile gives no hand-written
    derivative: gradients (α's among them) are taken by autograd.

    Example:

        >>> import torch, sparsegp as sg
        >>> k = sg.kernels.RationalQuadratic(lengthscale=1.0, variance=2.0, alpha=0.5)
        >>> X = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
        >>> round(k.K(X)[0, 1].item(), 6)  # 2 (1 + 1)^(−1/2)
        1.414214
        >>> round(k.alpha, 6), k.config()["args"]["alpha"] == k.alpha
        (0.5, True)
    """

    def __init__(self, lengthscale: ArrayLike | None = None, variance: ArrayLike | None = None,
                 alpha: ArrayLike = 1.0, *,
                 ard: bool = False) -> None:
        super().__init__(lengthscale, variance, ard=ard)
        self._declare("alpha", alpha, 1.0, POSITIVE_FLOOR, max_dim=0)

    alpha = UserValue()

    def profile(self, r2: Tensor) -> Tensor:
        # exp(−α log1p(r²/(2α))): accurate for large α, where (1 + r²/(2α))^(−α) would lose
        # the small increment to rounding
        alpha = self.value("alpha")
        return torch.exp(-alpha * torch.log1p(r2 / (2.0 * alpha)))
