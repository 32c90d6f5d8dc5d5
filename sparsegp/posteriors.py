"""Frozen posterior values: the factorisations are computed once, prediction only reads them.

A posterior holds detached copies of the kernel and inducing variables it was built with, so
changing or training the model afterwards never alters it (and never leaves it stale: the
model builds a new one). Prediction is O(M²) per test point for the sparse posterior, in
chunks of test points; no N*×N* matrix exists unless `full_cov=True`.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import Tensor, nn

from . import covariances as cov
from .cross_covariance import cross_covariance
from .kernels.base import Kernel
from .linalg import solve_lower, solve_lower_t
from .objectives.streaming import auto_chunk_size, chunk_slices


def frozen_copy(module: nn.Module) -> nn.Module:
    """A deep copy with every parameter detached from training."""
    twin = copy.deepcopy(module)
    twin.requires_grad_(False)
    return twin


class Posterior(ABC):
    """q(f*) at new inputs. Subclasses give the mean and variance for one block of inputs."""

    kernel: Kernel
    noise_variance: Tensor

    @abstractmethod
    def _block(self, Xs: Tensor, full_cov: bool) -> tuple[Tensor, Tensor]:
        """Mean and variance (or covariance) of f* at one block of inputs Xs."""

    @abstractmethod
    def _rows_per_chunk(self) -> int:
        """Test points per block of `predict_f`, from the memory budget."""

    def predict_f(
        self, Xnew: Tensor, full_cov: bool = False, chunk_size: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """Mean [N*] and variance [N*] (or covariance [N*, N*]) of the latent f*."""
        if full_cov:
            return self._block(Xnew, True)
        size = chunk_size or self._rows_per_chunk()
        mean = var = None
        for s in chunk_slices(Xnew.shape[0], size):
            m, v = self._block(Xnew[s], False)
            if mean is None:
                # Outputs allocated once, then filled: many small chunk results kept alive
                # between the large temporaries fragment the heap (measured: RSS grew by one
                # B×M block per chunk).
                mean = m.new_empty((Xnew.shape[0], *m.shape[1:]))
                var = v.new_empty((Xnew.shape[0], *v.shape[1:]))
            mean[s], var[s] = m, v
        if mean is None:
            empty = Xnew.new_zeros(0)
            return empty, empty
        return mean, var

    def predict_y(
        self, Xnew: Tensor, full_cov: bool = False, chunk_size: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """Predictive mean and variance (or covariance) of noisy observations y*."""
        mean, var = self.predict_f(Xnew, full_cov, chunk_size)
        if full_cov:
            eye = torch.eye(var.shape[0], dtype=var.dtype, device=var.device)
            return mean, var + self.noise_variance * eye
        return mean, var + self.noise_variance

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """The tensors that define this posterior (for saving)."""


class SparsePosterior(Posterior):
    """q(f*) = ∫ p(f* | u) q(u) du for the collapsed family (MATH.md §2):

    mean = k*ᵀ w, var = k** − ‖L⁻¹k*‖² + ‖L_B⁻¹L⁻¹k*‖² = k** − ‖C k*‖², w = L⁻ᵀL_B⁻ᵀe
    (see `objectives.collapsed.PosteriorFactors`).
    """

    def __init__(
        self, kernel: Kernel, feature: nn.Module, L: Tensor, L_B: Tensor, w: Tensor,
        C: Tensor, noise_variance: Tensor, jitter: float = 0.0,
    ) -> None:
        self.kernel = frozen_copy(kernel)
        self.feature = frozen_copy(feature)
        self.L, self.L_B, self.w, self.C = L.detach(), L_B.detach(), w.detach(), C.detach()
        self._kuf = cross_covariance(self.feature, self.kernel)  # fast chunk evaluation
        self.noise_variance = noise_variance.detach()
        self.jitter = jitter

    def _rows_per_chunk(self) -> int:
        return auto_chunk_size(self.L.shape[0], self.L.element_size())

    def _block(self, Xs: Tensor, full_cov: bool) -> tuple[Tensor, Tensor]:
        # the streamed evaluation is faster but not differentiable in Xs (e.g. for optimising
        # an acquisition function through the posterior)
        if Xs.requires_grad:
            Kus = cov.Kuf(self.feature, self.kernel, Xs)  # [M, B]
        else:
            Kus = self._kuf.value(Xs)
        mean = Kus.mT @ self.w
        V = self.C @ Kus
        if full_cov:
            return mean, self.kernel.K(Xs) - V.mT @ V
        return mean, (self.kernel.K_diag(Xs) - (V * V).sum(0)).clamp_min(0.0)

    def state(self) -> dict[str, Any]:
        return {"L": self.L, "L_B": self.L_B, "w": self.w, "C": self.C,
                "noise_variance": self.noise_variance, "jitter": self.jitter}

    @classmethod
    def from_state(cls, kernel: Kernel, feature: nn.Module, saved: dict[str, Any]
                   ) -> SparsePosterior:
        """The posterior whose `state()` was `saved`."""
        return cls(kernel, feature, saved["L"], saved["L_B"], saved["w"], saved["C"],
                   saved["noise_variance"], saved["jitter"])

    @property
    def q_mu(self) -> Tensor:
        """Mean of q(u) = Kuu w. Shape [M]."""
        return self.L @ (self.L.mT @ self.w)

    @property
    def q_cov(self) -> Tensor:
        """cov q(u) = Kuu (Kuu + Kuf Λ⁻¹ Kfu)⁻¹ Kuu = L B⁻¹ Lᵀ. Shape [M, M]."""
        T = solve_lower(self.L_B, self.L.mT)  # L_B⁻¹ Lᵀ
        return T.mT @ T


class VariationalPosterior(Posterior):
    """q(f*) for an explicit q(u) (SVGP; Hensman et al. 2013), C latent functions sharing Kuu:

    whitened (u = Lv, q(v) = N(m, S)): mean = aᵀm, var = k** − ‖a‖² + ‖L_Sᵀa‖², a = L⁻¹k*;
    not whitened (q(u) = N(m, S)): the same with m, L_S replaced by L⁻¹m, L⁻¹L_S.
    Shapes: q_mu [M, C], q_sqrt [C, M, M] (lower triangular); outputs [N*, C].
    """

    def __init__(self, kernel: Kernel, feature: nn.Module, L: Tensor, q_mu: Tensor,
                 q_sqrt: Tensor, whiten: bool, jitter: float = 0.0) -> None:
        self.kernel = frozen_copy(kernel)
        self.feature = frozen_copy(feature)
        self.L = L.detach()
        q_mu, q_sqrt = q_mu.detach(), q_sqrt.detach().tril()
        if not whiten:  # express q(u) in whitened coordinates once
            q_mu = solve_lower(self.L, q_mu)
            q_sqrt = torch.linalg.solve_triangular(self.L, q_sqrt, upper=False)
        self.q_mu, self.q_sqrt = q_mu, q_sqrt  # whitened
        self.noise_variance = torch.zeros((), dtype=L.dtype, device=L.device)
        self.jitter = jitter

    def _rows_per_chunk(self) -> int:
        return auto_chunk_size(self.L.shape[0] * (1 + self.q_mu.shape[1]), self.L.element_size())

    def _block(self, Xs: Tensor, full_cov: bool) -> tuple[Tensor, Tensor]:
        A = solve_lower(self.L, cov.Kuf(self.feature, self.kernel, Xs))  # [M, B]
        mean = A.mT @ self.q_mu  # [B, C]
        SA = self.q_sqrt.mT @ A  # [C, M, B]
        if full_cov:
            base = self.kernel.K(Xs) - A.mT @ A
            return mean, base + SA.mT @ SA  # [C, B, B]
        var = self.kernel.K_diag(Xs) - (A * A).sum(0)
        return mean, (var[:, None] + (SA * SA).sum(1).mT).clamp_min(0.0)

    def state(self) -> dict[str, Any]:
        return {"L": self.L, "q_mu": self.q_mu, "q_sqrt": self.q_sqrt, "jitter": self.jitter}


class ExactPosterior(Posterior):
    """p(f* | y) of the exact GP (Rasmussen & Williams 2006, eqs. 2.25–2.26):

    mean = K*f (K + σ²I)⁻¹ y, cov = K** − K*f (K + σ²I)⁻¹ Kf*.
    """

    def __init__(
        self, kernel: Kernel, X: Tensor, L: Tensor, a: Tensor, noise_variance: Tensor,
        jitter: float = 0.0,
    ) -> None:
        self.kernel = frozen_copy(kernel)
        self.X, self.L = X.detach(), L.detach()
        self.a = a.detach()  # L⁻¹y
        self.weights = solve_lower_t(self.L, self.a)  # (K + σ²I)⁻¹ y
        self.noise_variance = noise_variance.detach()
        self.jitter = jitter

    def _rows_per_chunk(self) -> int:
        return auto_chunk_size(self.X.shape[0], self.L.element_size())

    def _block(self, Xs: Tensor, full_cov: bool) -> tuple[Tensor, Tensor]:
        Kfs = self.kernel.K(self.X, Xs)  # [N, B]
        mean = Kfs.mT @ self.weights
        V = solve_lower(self.L, Kfs)
        if full_cov:
            return mean, self.kernel.K(Xs) - V.mT @ V
        return mean, (self.kernel.K_diag(Xs) - (V * V).sum(0)).clamp_min(0.0)

    def state(self) -> dict[str, Any]:
        return {"X": self.X, "L": self.L, "a": self.a,
                "noise_variance": self.noise_variance, "jitter": self.jitter}
