"""Dot-product and constant kernels."""

from __future__ import annotations

import torch
from torch import Tensor

from ..parameters import UserValue
from ..runtime.config import POSITIVE_FLOOR
from ..validation import ArrayLike
from .base import Kernel, as_inputs, check_input_pair


class VarianceOnly(Kernel):
    variance_dims = 1  # the variance may be one per input (ARD); 0: a scalar
    per_input: tuple[str, ...] = ("variance",)

    def __init__(self, variance: ArrayLike | None = None) -> None:
        super().__init__()
        self._declare("variance", variance, 1.0, POSITIVE_FLOOR, max_dim=self.variance_dims)

    variance = UserValue("σ², the variance of the weights.")


class Linear(VarianceOnly):
    """k(x, x') = Σ_d σ²_d x_d x'_d; ARD when the variance has shape (D,).

    Shapes: variance [] or [D]; X [N, D], X2 [N2, D] -> K [N, N2], K_diag [N]. The GP is then
    Bayesian linear regression through the origin (add `Constant` for an intercept).

    Example:

        >>> import torch, sparsegp as sg
        >>> k = sg.kernels.Linear(variance=[1.0, 0.5])
        >>> X = torch.tensor([[1.0, 2.0], [3.0, 0.0]], dtype=torch.float64)
        >>> [round(v, 6) for v in k.K_diag(X).tolist()]
        [3.0, 9.0]
        >>> round(k.K(X)[0, 1].item(), 6)
        3.0
    """

    def _scaled(self, X: Tensor) -> Tensor:
        v = self.value("variance")
        if v.dim() == 1 and v.shape[0] != as_inputs(X).shape[1]:
            raise ValueError(f"X has {X.shape[1]} columns but the variance has shape {tuple(v.shape)}")
        return as_inputs(X) * torch.sqrt(v)

    def K(self, X: Tensor, X2: Tensor | None = None) -> Tensor:
        check_input_pair(X, X2)
        Xs = self._scaled(X)
        return Xs @ (Xs if X2 is None else self._scaled(X2)).mT

    def K_diag(self, X: Tensor) -> Tensor:
        Xs = self._scaled(X)
        return (Xs * Xs).sum(-1)

    def initialise_from_data(self, X: Tensor, signal_variance: float) -> None:
        if "variance" in self._unset:
            mean_sq = float((X * X).sum(-1).mean())
            self._assign("variance", signal_variance / mean_sq if mean_sq > 0 else signal_variance)


class Constant(VarianceOnly):
    """k(x, x') = σ² (a constant offset of the latent function).

    Shapes: variance []; X [N, D], X2 [N2, D] -> K [N, N2] (every entry σ²), K_diag [N].

    Example:

        >>> import torch, sparsegp as sg
        >>> c = sg.kernels.Constant(variance=0.25)
        >>> X = torch.zeros(4, 3, dtype=torch.float64)
        >>> tuple(c.K(X, X[:2]).shape), round(c.K(X)[1, 2].item(), 6)
        ((4, 2), 0.25)
        >>> k = sg.kernels.SquaredExponential() + c  # a GP with an unknown offset
    """

    variance_dims = 0
    per_input = ()

    def K(self, X: Tensor, X2: Tensor | None = None) -> Tensor:
        check_input_pair(X, X2)
        return self.value("variance").expand(X.shape[0], X.shape[0] if X2 is None else X2.shape[0])

    def K_diag(self, X: Tensor) -> Tensor:
        return self.value("variance").expand(as_inputs(X).shape[0])
