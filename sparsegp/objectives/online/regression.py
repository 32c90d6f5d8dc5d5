"""Streaming sparse GP regression: the collapsed Power-EP bound of a new batch of data and a
summary of the old ones (Bui, Nguyen & Turner 2017; docs/math.md §2 for the notation).

The old data enter only through the old approximate posterior q_old(a) = N(m_a, S_a) over the
old inducing variables a = f(Z_a) and their old prior p_old(a) = N(0, K'_aa). Their ratio is
Gaussian in a, and is written here as r ≤ M_a pseudo-observations with unit noise:

  q_old(a) / p_old(a) = N(h; Tᵀa, I) / p_old(h),    p_old(h) = N(h; 0, I + TᵀK'_aa T)

(`Summary`: with K'_aa = L'L'ᵀ, the whitened q_old(v) = N(B⁻¹c, B⁻¹), B = I + A, A = U diag(λ) Uᵀ,
T = L'⁻ᵀU diag(√λ) and h = diag(1/√λ) Uᵀc over the eigenvalues λ that are not rounding
noise). The new model has inducing inputs b and new hyperparameters; given b, the pseudo-
observations have the same kind of residual as a block of data in block Power EP,
Q_h = Tᵀ(K_aa − K_ab K_bb⁻¹ K_ba)T, so the streaming objective is the collapsed family's
F_α of the new data (per point, noise σ²) plus one block of r pseudo-points (noise I):

  F_α = log N(ŷ; 0, Q̂ + Λ̂) − (1−α)/(2α) [Σ_n log(1 + α d_n/σ²) + log|I + α Q_h|] − log p_old(h)

with ŷ = [y; h], Q̂ the Nyström covariance of [f(X); Tᵀa] through b, Λ̂ = blockdiag(diag(σ² + α d_n),
I + α Q_h). α → 0 is the variational streaming bound (penalty ½ Σ d_n/σ² + ½ tr Q_h),
α = 1 the EP one. Its value approximates log p(y_new | y_old); q(b) is the collapsed
posterior of the summed statistics, and with b = a and the same hyperparameters it is the
batch posterior of all the data seen. Cost O(N M_b² + M³); the rows of the new data are
summed in chunks (`collapsed.sums`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ... import covariances as cov
from ...conditionals import WhitenedGaussian
from ...features.base import InducingFeature
from ...features.inducing_points import InducingPoints
from ...kernels.base import Kernel
from ...linalg import (
    add_to_diagonal,
    jittered_cholesky,
    log_det_from_cholesky,
    solve_lower,
    solve_lower_t,
)
from ..collapsed.members import (
    CollapsedProblem,
    Family,
    Statistics,
    family_objective,
    q_from_statistics,
    solve,
    statistics,
)


class Summary(NamedTuple):
    """The old data as r pseudo-observations h = Tᵀf(Z) + ε, ε ~ N(0, I) (internal units).

    Shapes: Z [M_a, D] the old inducing inputs, T [M_a, r], h [r]; `offset` [] is
    −log p_old(h) − (r/2) log 2π = ½ log|I + TᵀK'_aa T| + ½ hᵀ(I + TᵀK'_aa T)⁻¹h."""

    Z: Tensor
    T: Tensor
    h: Tensor
    offset: Tensor


class StreamingProblem(NamedTuple):
    """The streaming objective as a value: the new batch's collapsed problem (its kernel,
    inducing feature b, data, noise, family member 'vfe' or 'pep', jitter, chunking) and the
    summary of the old data."""

    problem: CollapsedProblem
    summary: Summary


def summarise(Z: Tensor, L: Tensor, L_B: Tensor, mean: Tensor) -> Summary:
    """The `Summary` of a collapsed posterior over f(Z): L = chol(K'_ZZ) (the old prior, with
    its jitter), q(v) = N(mean, (L_B L_Bᵀ)⁻¹) for v = L⁻¹f(Z). Directions whose precision
    A = L_B L_Bᵀ − I is below rounding (M·ε·max(1, ‖A‖), relative to the prior's I) carry
    nothing and are dropped. Shapes: Z [M, D], L and L_B [M, M], mean [M] or [M, 1]."""
    with torch.no_grad():
        B = L_B @ L_B.mT
        eye = torch.eye(B.shape[0], dtype=B.dtype, device=B.device)
        A = 0.5 * (B + B.mT) - eye
        c = L_B @ (L_B.mT @ mean.reshape(-1))
        lam, U = torch.linalg.eigh(A)
        tol = A.shape[0] * torch.finfo(A.dtype).eps * max(1.0, float(lam.abs().max()))
        keep = lam > tol
        lam, U = lam[keep], U[:, keep]
        root = lam.sqrt()
        h = (U.mT @ c) / root
        T = solve_lower_t(L, U * root)
        offset = 0.5 * (torch.log1p(lam).sum() + (h * h / (1.0 + lam)).sum())
    return Summary(Z.detach().clone(), T, h, offset)


def _check_single_output(p: CollapsedProblem) -> None:
    if p.y.dim() != 1:
        raise ValueError("streaming updates take one output, y [N]")
    if p.blocks is not None or p.noise.dim() != 0 or p.mean is not None:
        raise ValueError("streaming updates take one noise variance, no blocks and a zero "
                         "prior mean")
    if p.fam.mode not in ("vfe", "pep"):
        raise ValueError(f"streaming updates take approximation 'vfe' or 'pep' (α in (0, 1], "
                         f"'fitc' for α = 1); got {p.fam.name!r}")


def factorised_jitter(kernel: Kernel, feature: InducingFeature, L: Tensor) -> Tensor | None:
    """ε of L Lᵀ = K_bb + εI for inducing points b: the mean of diag(L Lᵀ) − diag(K_bb) (the
    relative jitter times the mean diagonal, `linalg.jittered_cholesky`; differentiable, as
    that is); None for other features, or where it is within rounding of zero (no jitter)."""
    if not isinstance(feature, InducingPoints):
        return None
    diag = kernel.K_diag(feature.Z).to(L.dtype)
    eps = ((L * L).sum(-1) - diag).mean()
    tiny = 10.0 * L.shape[-1] * torch.finfo(L.dtype).eps * float(diag.detach().abs().mean())
    return eps if float(eps.detach()) > tiny else None


def summary_statistics(kernel: Kernel, feature: InducingFeature, L: Tensor, summary: Summary,
                       fam: Family) -> Statistics:
    """The statistics of docs/math.md §2 of the r pseudo-points, one block of noise I seen
    through b (L = chol(K'_bb), K'_bb = K_bb + εI with the jitter ε it was factorised with):
    with H = L⁻¹K'_ba T [M_b, r], Q_h = TᵀK'_aa T − HᵀH and C = I + αQ_h = L_C L_Cᵀ (I for
    VFE), V = L_C⁻¹Hᵀ and g = L_C⁻¹h give A = VᵀV, c = Vᵀg, s_y = gᵀg, s_logλ = log|C|,
    penalty (1−α)/α log|C| (VFE: tr Q_h). n = 0: the pseudo-points' (r/2) log 2π cancels
    against p_old(h) (`Summary.offset`).

    The jitter is part of the prior of the inducing variables, u = f(Z) + √ε·η (what a batch
    model factorises), on both sides of the summary: K'_aa = K_aa + εI, and K'_ba adds ε
    where an input of b is an input of a (the same inducing variable, as when an update
    keeps its inducing inputs). With b = a, Q_h = 0 and H = LᵀT: the summary is the old
    posterior exactly, and a stream of updates is the batch posterior at any jitter. Where
    an input of b moves off an input of a they become two variables, and the objective
    steps by the jitter's share (measured: 1e-3 nats at the default jitter, 8 inducing
    inputs; the unjittered form was off by that at b = a, and each update added to it)."""
    Za, T = summary.Z.to(L), summary.T.to(L)
    if T.shape[1] == 0:  # the old data carried no information
        zero = L.new_zeros(())
        return Statistics(A=torch.zeros_like(L), c=L.new_zeros(L.shape[0]), s_y=zero,
                          s_loglam=zero, s_d=zero, s_pen=zero, n=0)
    K_ba = cov.Kuf(feature, kernel, Za).to(L.dtype)
    K_aa = kernel.K(Za).to(L.dtype)
    eps = factorised_jitter(kernel, feature, L)
    if eps is not None:
        Zb = feature.locations()
        assert Zb is not None  # inducing points
        same = (Zb.detach().to(Za)[:, None, :] == Za[None, :, :]).all(-1)
        K_ba = K_ba + eps * same.to(L.dtype)
        K_aa = add_to_diagonal(K_aa, eps)
    H = solve_lower(L, K_ba @ T)  # [M_b, r]
    KT = K_aa @ T
    Qh = T.mT @ KT - H.mT @ H
    Qh = 0.5 * (Qh + Qh.mT)
    h = summary.h.to(L)
    if fam.mode == "vfe":
        trace = torch.diagonal(Qh).sum()
        return Statistics(A=H @ H.mT, c=H @ h, s_y=h @ h, s_loglam=torch.zeros_like(trace),
                          s_d=trace, s_pen=trace, n=0)
    alpha = fam.alpha
    assert alpha is not None  # Power EP's members have their power
    eye = torch.eye(Qh.shape[0], dtype=Qh.dtype, device=Qh.device)
    L_C, _ = jittered_cholesky(eye + alpha * Qh, 0.0, name="I + α Q_h")
    V = solve_lower(L_C, H.mT)
    g = solve_lower(L_C, h[:, None])[:, 0]
    log_det = log_det_from_cholesky(L_C)
    return Statistics(A=V.mT @ V, c=V.mT @ g, s_y=g @ g, s_loglam=log_det,
                      s_d=torch.diagonal(Qh).sum(), s_pen=(1.0 - alpha) / alpha * log_det, n=0)


def combined_statistics(sp: StreamingProblem, L: Tensor) -> Statistics:
    """The new data's statistics (chunked over rows) plus the summary's."""
    p = sp.problem
    _check_single_output(p)
    new = statistics(p, L)
    old = summary_statistics(p.kernel, p.feature, L, sp.summary, p.fam)
    return Statistics(A=new.A + old.A, c=new.c + old.c, s_y=new.s_y + old.s_y,
                      s_loglam=new.s_loglam + old.s_loglam, s_d=new.s_d + old.s_d,
                      s_pen=new.s_pen + old.s_pen, n=new.n)


def streaming_objective(sp: StreamingProblem) -> Tensor:
    """F_α of the module docstring (internal units), differentiable in the kernel, the
    inducing inputs b and the noise. Shape: []."""
    L, _ = cov.Kuu_cholesky(sp.problem.feature, sp.problem.kernel, sp.problem.jitter)
    stats = combined_statistics(sp, L)
    return family_objective(stats, solve(stats)) + sp.summary.offset.to(L)


def streaming_posterior_q(sp: StreamingProblem) -> tuple[Tensor, WhitenedGaussian, float]:
    """q(b) of the streaming objective: L = chol(K_bb), whitened q(v) = N(L_B⁻ᵀe, B⁻¹) of the
    combined statistics, and the relative jitter used."""
    L, used = cov.Kuu_cholesky(sp.problem.feature, sp.problem.kernel, sp.problem.jitter)
    return L, q_from_statistics(combined_statistics(sp, L)), used
