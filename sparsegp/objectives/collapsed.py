"""The collapsed pseudo-point family for Gaussian likelihoods: DTC, FITC, VFE and Power EP.

One function evaluates every member (Bui, Yan & Turner 2017; MATH.md §2):

  F_α = −(N/2) log 2π − ½ log|Qff + Λ| − ½ yᵀ(Qff + Λ)⁻¹y − (1−α)/(2α) Σ_n log(1 + α d_n/σ²)

with λ_n = α d_n + σ², d_n = [Kff − Qff]_nn. α = 1 is FITC (Snelson & Ghahramani 2006),
α → 0 is VFE (Titsias 2009; its own closed form with the trace term −Σ d_n/(2σ²)), and DTC
(Seeger et al. 2003) has Λ = σ²I and no trace term. Everything is assembled from sums of
per-point statistics streamed over chunks of the data (`statistics.py`, `streaming.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from .. import covariances as cov
from ..cross_covariance import cross_covariance
from ..distributed import global_sum
from ..kernels.base import Kernel
from ..linalg import (
    LOG_2PI,
    jittered_cholesky,
    log_det_from_cholesky,
    solve_lower,
    solve_lower_t,
)
from .statistics import PowerEPStream, WhitenedStream
from .streaming import auto_chunk_size, streamed_sum

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


VFE = family("vfe")


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


def _chunk_size(chunk_size: int | None, M: int, dtype: torch.dtype) -> int:
    if chunk_size is not None:
        return chunk_size
    return auto_chunk_size(M, torch.finfo(dtype).bits // 8)


def statistics(
    kernel: Kernel, feature: object, X: Tensor, y: Tensor, L: Tensor, noise: Tensor,
    fam: Family, chunk_size: int | None = None, compute_dtype: torch.dtype | None = None,
) -> Statistics:
    """The sums of MATH.md §2 for family member `fam` (L = chol(Kuu)), streamed over chunks
    of the data and, when the data are sharded, over processes (see `streaming`)."""
    kuf = cross_covariance(feature, kernel, compute_dtype)
    size = _chunk_size(chunk_size, L.shape[0], kuf.dtype)
    n = int(global_sum(X.shape[0], X))
    if fam.mode == "pep":
        stream = PowerEPStream(kuf, L, noise, fam.alpha, L.dtype)
        return Statistics(*streamed_sum(stream, X, y, size), n=n)
    # VFE and DTC: all weights are 1/σ², so the sums of the whitened a_n = L⁻¹k_n suffice.
    Q, r, yy, kd = streamed_sum(WhitenedStream(kuf, L, L.dtype), X, y, size)
    zero = torch.zeros((), dtype=Q.dtype, device=Q.device)
    return Statistics(
        A=Q / noise,
        c=r / noise,
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


def family_terms(stats: Statistics, solved: Solved, noise: Tensor, fam: Family
                 ) -> tuple[Tensor, Tensor, Tensor]:
    """F_α of MATH.md §2 in three terms (Bauer et al. 2016): data fit −½ yᵀΣ⁻¹y, complexity
    −½ (N log 2π + log|Σ|), and the member's penalty (VFE's trace term, PEP's, 0 otherwise)."""
    data_fit = -0.5 * solved.quad
    complexity = -0.5 * (stats.n * LOG_2PI + solved.log_det)
    if fam.mode == "vfe":
        penalty = -0.5 * stats.s_d / noise  # Titsias' trace term
    elif fam.mode == "pep" and fam.alpha < 1.0:
        penalty = -0.5 * (1.0 - fam.alpha) / fam.alpha * stats.s_pen
    else:
        penalty = torch.zeros_like(data_fit)
    return data_fit, complexity, penalty


def family_objective(stats: Statistics, solved: Solved, noise: Tensor, fam: Family) -> Tensor:
    """F_α of MATH.md §2 from the statistics: the sum of `family_terms`."""
    data_fit, complexity, penalty = family_terms(stats, solved, noise, fam)
    return data_fit + complexity + penalty


def factor_and_statistics(
    kernel: Kernel, feature: object, X: Tensor, y: Tensor, noise: Tensor, fam: Family,
    jitter: float, chunk_size: int | None, compute_dtype: torch.dtype | None,
) -> tuple[Tensor, float, Statistics]:
    """The jittered Cholesky L of Kuu, the relative jitter it used, and the statistics."""
    L, used = jittered_cholesky(cov.Kuu(feature, kernel), jitter, name="Kuu")
    return L, used, statistics(kernel, feature, X, y, L, noise, fam, chunk_size, compute_dtype)


def collapsed_objective(
    kernel: Kernel, feature: object, X: Tensor, y: Tensor, noise: Tensor, fam: Family,
    jitter: float, chunk_size: int | None = None, compute_dtype: torch.dtype | None = None,
) -> Tensor:
    """F_α for data X [N, D], y [N] with inducing variables `feature`. Shape: [].

    `chunk_size` rows are processed at a time (default from a memory budget);
    `compute_dtype` (e.g. float32 on a GPU) is the dtype of the N·M² work, the M×M
    factorisations staying in the dtype of the parameters.
    """
    _, _, stats = factor_and_statistics(kernel, feature, X, y, noise, fam, jitter, chunk_size,
                                         compute_dtype)
    return family_objective(stats, solve(stats), noise, fam)


class PosteriorFactors(NamedTuple):
    """What a sparse posterior caches (MATH.md §2, 'Posterior over u').

    L = chol(Kuu), L_B = chol(B), B = I + A; w = L⁻ᵀL_B⁻ᵀe gives the mean k*ᵀw, and
    C = diag(√(μ/(1+μ))) Uᵀ L⁻¹ with A = U diag(μ) Uᵀ gives the variance
    k** − ‖L⁻¹k*‖² + ‖L_B⁻¹L⁻¹k*‖² = k** − ‖C k*‖² with one matrix product per test point.
    """

    L: Tensor
    L_B: Tensor
    w: Tensor
    C: Tensor
    jitter: float


def posterior_factors(
    kernel: Kernel, feature: object, X: Tensor, y: Tensor, noise: Tensor, fam: Family,
    jitter: float, chunk_size: int | None = None, compute_dtype: torch.dtype | None = None,
) -> PosteriorFactors:
    """Factors of the optimal q(u) of every member and of its predictive distribution."""
    L, used, stats = factor_and_statistics(kernel, feature, X, y, noise, fam, jitter,
                                            chunk_size, compute_dtype)
    return factors_from_statistics(L, stats, used)


def factors_from_statistics(L: Tensor, stats: Statistics, jitter: float) -> PosteriorFactors:
    """The posterior factors from L = chol(Kuu) and any statistics A = Σ β a aᵀ, c = Σ β y a
    (also the Power-EP classification posterior, with pseudo-noise 1/τ and targets ν/τ)."""
    s = solve(stats)
    w = solve_lower_t(L, solve_lower_t(s.L_B, s.e))
    mu, U = torch.linalg.eigh(stats.A)
    shrink = torch.sqrt((mu / (1.0 + mu)).clamp_min(0.0))  # I − B⁻¹ = U diag(μ/(1+μ)) Uᵀ
    C = solve_lower_t(L, U * shrink).mT
    return PosteriorFactors(L, s.L_B, w, C, jitter)


def titsias_upper_bound(
    kernel: Kernel, feature: object, X: Tensor, y: Tensor, noise: Tensor, jitter: float,
    chunk_size: int | None = None, compute_dtype: torch.dtype | None = None,
) -> Tensor:
    """Upper bound on log p(y) (Titsias 2014; MATH.md §3), t = Σ_n d_n ≥ λ_max(Kff − Qff):

    U = −(N/2) log 2π − ½ log|Qff + σ²I| − ½ yᵀ(Qff + (t + σ²)I)⁻¹y.
    """
    _, _, vfe = factor_and_statistics(kernel, feature, X, y, noise, VFE, jitter, chunk_size,
                                       compute_dtype)
    return upper_bound_from_statistics(vfe, noise)


def upper_bound_from_statistics(vfe: Statistics, noise: Tensor) -> Tensor:
    """The Titsias (2014) bound of `titsias_upper_bound` from the VFE statistics."""
    t = vfe.s_d.clamp_min(0.0)
    # Same projections, weights 1/(t + σ²) for the quadratic term.
    shrink = noise / (t + noise)
    widened = vfe._replace(A=vfe.A * shrink, c=vfe.c * shrink, s_y=vfe.s_y * shrink)
    return -0.5 * (vfe.n * LOG_2PI + solve(vfe).log_det + solve(widened).quad)
