"""The collapsed pseudo-point family for Gaussian likelihoods: DTC, FITC, VFE and Power EP.

One function evaluates every member (Bui, Yan & Turner 2017; MATH.md §2):

  F_α = −(N/2) log 2π − ½ log|Qff + Λ| − ½ yᵀ(Qff + Λ)⁻¹y − (1−α)/(2α) Σ_n log(1 + α d_n/σ²)

with λ_n = α d_n + σ², d_n = [Kff − Qff]_nn. α = 1 is FITC (Snelson & Ghahramani 2006),
α → 0 is VFE (Titsias 2009; its own closed form with the trace term −Σ d_n/(2σ²)), and DTC
(Seeger et al. 2003) has Λ = σ²I and no trace term. Everything is assembled from sums of
per-point statistics gathered chunk by chunk (`streaming.reduce_chunks`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from .. import covariances as cov
from ..kernels.base import Kernel
from ..linalg import (
    LOG_2PI,
    jittered_cholesky,
    log_det_from_cholesky,
    solve_lower,
    solve_lower_t,
    whiten_symmetric,
)
from .streaming import auto_chunk_size, reduce_chunks

APPROXIMATIONS = ("vfe", "fitc", "dtc", "pep")


@dataclass(frozen=True)
class Family:
    """A member of the collapsed family: `mode` is 'vfe', 'dtc' or 'pep' (power `alpha`)."""

    name: str
    mode: str
    alpha: float | None


def family(approximation: str, alpha: float | None = None) -> Family:
    """Validate an approximation name and power; 'fitc' is 'pep' with α = 1."""
    if not isinstance(approximation, str) or approximation.lower() not in APPROXIMATIONS:
        raise ValueError(
            f"approximation must be one of {', '.join(APPROXIMATIONS)}; got {approximation!r}"
        )
    name = approximation.lower()
    if name == "pep":
        if alpha is None:
            raise ValueError("alpha is required for approximation='pep': a power in (0, 1]")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise TypeError(f"alpha must be a number in (0, 1]; got {type(alpha).__name__}")
        if not (0.0 < float(alpha) <= 1.0) or math.isnan(alpha):
            raise ValueError(f"alpha must lie in (0, 1] (α → 0 is 'vfe'); got {alpha}")
        return Family("pep", "pep", float(alpha))
    if alpha is not None and not (name == "fitc" and float(alpha) == 1.0):
        raise ValueError(f"alpha applies only to approximation='pep'; got alpha={alpha} with {name!r}")
    if name == "fitc":
        return Family("fitc", "pep", 1.0)
    return Family(name, name, None)


class Statistics(NamedTuple):
    """Per-point sums of MATH.md §2 with a_n = L⁻¹k_n, β_n = 1/λ_n (additive over chunks)."""

    A: Tensor  # [M, M]  Σ β_n a_n a_nᵀ
    c: Tensor  # [M]     Σ β_n y_n a_n
    s_y: Tensor  # []    Σ β_n y_n²
    s_loglam: Tensor  # Σ log λ_n
    s_d: Tensor  # []    Σ d_n
    s_pen: Tensor  # []  Σ log(1 + α d_n/σ²)
    n: int


class Solved(NamedTuple):
    """B = I + A = L_B L_Bᵀ, e = L_B⁻¹c and the two Gaussian terms they give."""

    L_B: Tensor  # [M, M]
    e: Tensor  # [M]
    log_det: Tensor  # log|Qff + Λ|
    quad: Tensor  # yᵀ(Qff + Λ)⁻¹y


def _chunk_size(chunk_size: int | None, L: Tensor) -> int:
    return chunk_size if chunk_size is not None else auto_chunk_size(L.shape[0], L.element_size())


def projected_sums(
    kernel: Kernel, feature: object, X: Tensor, y: Tensor, chunk_size: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """P = Kuf Kfu [M, M], r = Kuf y [M], Σ y², Σ kdiag: all VFE, DTC and the bound need."""

    def chunk(Xb: Tensor, yb: Tensor) -> tuple[Tensor, ...]:
        Kuf = cov.Kuf(feature, kernel, Xb)
        return Kuf @ Kuf.mT, Kuf @ yb, yb @ yb, kernel.K_diag(Xb).sum()

    return reduce_chunks(chunk, X, y, chunk_size)  # type: ignore[return-value]


def pep_sums(
    kernel: Kernel, feature: object, X: Tensor, y: Tensor, L: Tensor, noise: Tensor,
    alpha: float, chunk_size: int,
) -> tuple[Tensor, ...]:
    """(A, c, s_y, s_loglam, s_d, s_pen) with λ_n = α d_n + σ², by chunks of the data."""

    def chunk(Xb: Tensor, yb: Tensor, L: Tensor, noise: Tensor) -> tuple[Tensor, ...]:
        a = solve_lower(L, cov.Kuf(feature, kernel, Xb))  # [M, B]
        d = (kernel.K_diag(Xb) - (a * a).sum(0)).clamp_min(0.0)
        lam = alpha * d + noise
        beta = 1.0 / lam
        return (
            (a * beta) @ a.mT,
            a @ (beta * yb),
            (beta * yb * yb).sum(),
            torch.log(lam).sum(),
            d.sum(),
            torch.log1p(alpha * d / noise).sum(),
        )

    return reduce_chunks(chunk, X, y, chunk_size, L, noise)


def statistics(
    kernel: Kernel, feature: object, X: Tensor, y: Tensor, L: Tensor, noise: Tensor,
    fam: Family, chunk_size: int | None = None,
) -> Statistics:
    """The sums of MATH.md §2 for family member `fam`; L = chol(Kuu)."""
    size = _chunk_size(chunk_size, L)
    n = X.shape[0]
    if fam.mode == "pep":
        return Statistics(*pep_sums(kernel, feature, X, y, L, noise, fam.alpha, size), n=n)
    # VFE and DTC: all weights are 1/σ², so only Kuf Kfu and Kuf y are needed.
    P, r, yy, kd = projected_sums(kernel, feature, X, y, size)
    Q = whiten_symmetric(L, P)  # L⁻¹ Kuf Kfu L⁻ᵀ
    zero = torch.zeros((), dtype=Q.dtype, device=Q.device)
    return Statistics(
        A=Q / noise,
        c=solve_lower(L, r) / noise,
        s_y=yy / noise,
        s_loglam=n * torch.log(noise),
        s_d=kd - torch.diagonal(Q).sum(),
        s_pen=zero,
        n=n,
    )


def solve(stats: Statistics) -> Solved:
    """log|Qff + Λ| = Σ log λ_n + log|I + A| and yᵀ(Qff + Λ)⁻¹y = s_y − ‖L_B⁻¹c‖²."""
    M = stats.A.shape[0]
    B = torch.eye(M, dtype=stats.A.dtype, device=stats.A.device) + stats.A
    L_B, _ = jittered_cholesky(B, 0.0, name="I + A")
    e = solve_lower(L_B, stats.c)
    return Solved(L_B, e, stats.s_loglam + log_det_from_cholesky(L_B), stats.s_y - e @ e)


def family_objective(stats: Statistics, solved: Solved, noise: Tensor, fam: Family) -> Tensor:
    """F_α of MATH.md §2 from the statistics: the Gaussian term minus the member's penalty."""
    F = -0.5 * (stats.n * LOG_2PI + solved.log_det + solved.quad)
    if fam.mode == "vfe":
        return F - 0.5 * stats.s_d / noise  # Titsias' trace term
    if fam.mode == "pep" and fam.alpha < 1.0:
        return F - 0.5 * (1.0 - fam.alpha) / fam.alpha * stats.s_pen
    return F


def collapsed_objective(
    kernel: Kernel, feature: object, X: Tensor, y: Tensor, noise: Tensor, fam: Family,
    jitter: float, chunk_size: int | None = None,
) -> Tensor:
    """F_α for data X [N, D], y [N] with inducing variables `feature`. Shape: []."""
    L, _ = jittered_cholesky(cov.Kuu(feature, kernel), jitter, name="Kuu")
    stats = statistics(kernel, feature, X, y, L, noise, fam, chunk_size)
    return family_objective(stats, solve(stats), noise, fam)


class PosteriorFactors(NamedTuple):
    """What a sparse posterior caches: L = chol(Kuu), L_B = chol(I + A), w = L⁻ᵀL_B⁻ᵀe."""

    L: Tensor
    L_B: Tensor
    w: Tensor
    jitter: float


def posterior_factors(
    kernel: Kernel, feature: object, X: Tensor, y: Tensor, noise: Tensor, fam: Family,
    jitter: float, chunk_size: int | None = None,
) -> PosteriorFactors:
    """Factors of the optimal q(u) for every member (MATH.md §2, 'Posterior over u')."""
    L, used = jittered_cholesky(cov.Kuu(feature, kernel), jitter, name="Kuu")
    stats = statistics(kernel, feature, X, y, L, noise, fam, chunk_size)
    s = solve(stats)
    w = solve_lower_t(L, solve_lower_t(s.L_B, s.e))
    return PosteriorFactors(L, s.L_B, w, used)


def titsias_upper_bound(
    kernel: Kernel, feature: object, X: Tensor, y: Tensor, noise: Tensor, jitter: float,
    chunk_size: int | None = None,
) -> Tensor:
    """Upper bound on log p(y) (Titsias 2014; MATH.md §3), t = Σ_n d_n ≥ λ_max(Kff − Qff):

    U = −(N/2) log 2π − ½ log|Qff + σ²I| − ½ yᵀ(Qff + (t + σ²)I)⁻¹y.
    """
    L, _ = jittered_cholesky(cov.Kuu(feature, kernel), jitter, name="Kuu")
    vfe = statistics(kernel, feature, X, y, L, noise, Family("vfe", "vfe", None), chunk_size)
    t = vfe.s_d.clamp_min(0.0)
    # Same projections, weights 1/(t + σ²) for the quadratic term.
    shrink = noise / (t + noise)
    widened = vfe._replace(A=vfe.A * shrink, c=vfe.c * shrink, s_y=vfe.s_y * shrink)
    return -0.5 * (vfe.n * LOG_2PI + solve(vfe).log_det + solve(widened).quad)
