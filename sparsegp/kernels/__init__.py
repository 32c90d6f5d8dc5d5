"""Covariance functions: `K(X, X2)` [N, N2], `K_diag(X)` [N]; combine with `+` and `*`."""

from .base import Kernel, Product, Sum, kernel_from_config
from .convolutional import Convolutional
from .linear import Constant, Linear
from .periodic import Periodic
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
    "Matern32", "Matern52", "Linear", "Constant", "Periodic", "Convolutional", "kernel_from_config",
]
