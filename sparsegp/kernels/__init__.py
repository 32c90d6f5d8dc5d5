"""Covariance functions: `K(X, X2)` [N, N2], `K_diag(X)` [N]; combine with `+` and `*`.

Shapes: X [N, D], X2 [N2, D] (torch tensors) -> K(X, X2) [N, N2], K_diag(X) [N]. Unset
hyperparameters (None) are given data-based starting values by the model that owns the kernel.
`Active(kernel, dims)` restricts a kernel to some input columns (sums of them: additive
models); `ChangePoints` switches between kernels along one column; `ArcCosine` is the
infinitely wide one-layer network; `SpectralMixture` a mixture of Gaussian spectral densities.

Example:

    >>> import torch, sparsegp as sg
    >>> k = sg.kernels.SquaredExponential(lengthscale=0.5) + sg.kernels.Linear(variance=0.1)
    >>> X = torch.linspace(0, 1, 5, dtype=torch.float64)[:, None]
    >>> tuple(k.K(X).shape), tuple(k.K(X, X[:2]).shape), tuple(k.K_diag(X).shape)
    ((5, 5), (5, 2), (5,))
"""

from .active import Active
from .arccosine import ArcCosine
from .base import Kernel, Product, Sum, kernel_from_config
from .changepoints import ChangePoints
from .convolutional import Convolutional
from .linear import Constant, Linear
from .periodic import Periodic
from .polynomial import Polynomial
from .rational_quadratic import RationalQuadratic
from .separate import Separate
from .spectral_mixture import SpectralMixture
from .stationary import (
    Matern12,
    Matern32,
    Matern52,
    RadialKernel,
    SquaredExponential,
    Stationary,
)

RBF = SquaredExponential

__all__ = [
    "Kernel", "Sum", "Product", "Stationary", "RadialKernel", "SquaredExponential", "RBF", "Matern12",
    "Matern32", "Matern52", "RationalQuadratic", "Linear", "Constant", "Polynomial", "Periodic",
    "Convolutional", "Separate", "ArcCosine", "SpectralMixture", "ChangePoints", "Active",
    "kernel_from_config",
]
