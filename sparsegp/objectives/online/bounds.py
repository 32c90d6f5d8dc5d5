"""Bounds on the evidence a streamed model approximates (docs/math.md §10): the streamed VFE
lower bound, a Titsias-style upper bound, and the exact value on small problems.

With the summary's r pseudo-observations h of unit noise (`online.Summary`), the new batch y
and the summary are one augmented data set ŷ = [y; h] of the latent values [f(X); Tᵀa]
(a = f(Z_a), the new hyperparameters) with block noise Λ̂ = blockdiag(σ²I, I). The quantity the
streamed objectives approximate is

  E = log N(ŷ; 0, K̂ + Λ̂) − log p_old(h),

K̂ the prior covariance of [f(X); Tᵀa]. Through the inducing variables b, Q̂ is its Nyström
approximation and K̂ − Q̂ ⪰ 0 the covariance of [f(X); Tᵀa] given b, of trace
t = Σ_n d_n + tr Q_h ≥ λ_max(K̂ − Q̂). The streamed VFE objective is the collapsed bound of the
augmented data, E ≥ F_VFE, and since K̂ ⪰ Q̂ and K̂ + Λ̂ ≼ Q̂ + Λ̂ + tI,

  E ≤ U = −((N + r)/2) log 2π − ½ log|Q̂ + Λ̂| − ½ ŷᵀ(Q̂ + Λ̂ + tI)⁻¹ŷ − log p_old(h),

whose quadratic term weighs the data by 1/(σ² + t) and the pseudo-observations by 1/(1 + t):
the VFE statistics of both, rescaled, so U costs what F_VFE does, O(N M² + M³). Every Power-EP
member's streamed F_α is ≤ U at the same b as well (its Λ̂_α lies between Λ̂ and Λ̂ + tI and its
penalties are ≤ 0), so only an upper bound at other inducing inputs (more of them) can show
that F_α over-estimates E. With b ⊇ X ∪ Z_a, Q̂ = K̂ and t = 0: F_VFE = E = U.

`exact_streaming_evidence` evaluates E densely, O((N + r)³); `summary_conditional` gives the new
batch's covariance and targets given the pseudo-observations (for the noise check: E as a
function of σ² is log N(y − μ; 0, K_c + σ²I) plus a term free of σ²). `summary_of_posterior`
writes an SVGP's old posterior as such a summary when it is one: q_old narrower than p_old in
every direction.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ... import covariances as cov
from ...linalg import LOG_2PI, jittered_cholesky, solve_lower
from ..collapsed.members import VFE, CollapsedProblem, Statistics, family_objective, solve, statistics
from .regression import StreamingProblem, Summary, summarise, summary_statistics
from .svgp import OldPosterior


def _checked(sp: StreamingProblem) -> CollapsedProblem:
    """The new batch's problem as VFE, or a clear error for what the summary cannot pair with."""
    p = sp.problem
    if p.y.dim() != 1 or p.blocks is not None or p.noise.dim() != 0 or p.mean is not None:
        raise ValueError("the bounds of a streamed model take one output y [N], one noise "
                         "variance, no blocks and a zero prior mean")
    return p._replace(fam=VFE, blocks=None)


def streaming_vfe_statistics(sp: StreamingProblem) -> tuple[Tensor, Statistics, Statistics]:
    """L = chol(K_bb) (with the problem's jitter) and the VFE statistics of the new batch and of
    the summary's pseudo-observations (docs/math.md §2, §10), each on its own."""
    p = _checked(sp)
    L, _ = cov.Kuu_cholesky(p.feature, p.kernel, p.jitter)
    return L, statistics(p, L), summary_statistics(p.kernel, p.feature, L, sp.summary, VFE)


def _summed(new: Statistics, old: Statistics) -> Statistics:
    return Statistics(A=new.A + old.A, c=new.c + old.c, s_y=new.s_y + old.s_y,
                      s_loglam=new.s_loglam + old.s_loglam, s_d=new.s_d + old.s_d,
                      s_pen=new.s_pen + old.s_pen, n=new.n)


def streaming_bounds(sp: StreamingProblem, t: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(F_VFE, U) of the module docstring (internal units) from one pass over the new batch;
    `t` bounds λ_max(K̂ − Q̂) (default its trace, Σ d_n + tr Q_h). Shapes: [] and []."""
    L, new, old = streaming_vfe_statistics(sp)
    vfe = _summed(new, old)
    offset = sp.summary.offset.to(L)
    lower = family_objective(vfe, solve(vfe)) + offset
    t = vfe.s_d.clamp_min(0.0) if t is None else t
    noise = sp.problem.noise.to(L)
    data, pseudo = noise / (noise + t), 1.0 / (1.0 + t)  # σ²/(σ² + t), 1/(1 + t)
    widened = Statistics(A=new.A * data + old.A * pseudo, c=new.c * data + old.c * pseudo,
                         s_y=new.s_y * data + old.s_y * pseudo, s_loglam=vfe.s_loglam,
                         s_d=vfe.s_d, s_pen=vfe.s_pen, n=vfe.n)
    upper = -0.5 * (vfe.n * LOG_2PI + solve(vfe).log_det + solve(widened).quad) + offset
    return lower, upper


def streaming_upper_bound(sp: StreamingProblem) -> Tensor:
    """U of the module docstring (internal units): an upper bound on the evidence E that the
    streamed objectives approximate, at the problem's hyperparameters. Shape: []."""
    return streaming_bounds(sp)[1]


def _augmented(sp: StreamingProblem) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """K_yy [N, N], K_yh [N, r], K_hh [r, r] (new kernel, no jitter) and h [r]."""
    p = _checked(sp)
    X, Za = p.X, sp.summary.Z.to(p.X)
    T, h = sp.summary.T.to(p.X), sp.summary.h.to(p.X)
    K_yh = p.kernel.K(X, Za) @ T
    K_hh = T.mT @ p.kernel.K(Za) @ T
    return p.kernel.K(X), K_yh, 0.5 * (K_hh + K_hh.mT), h


def exact_streaming_evidence(sp: StreamingProblem) -> Tensor:
    """E = log N([y; h]; 0, K̂ + blockdiag(σ²I, I)) − log p_old(h) (internal units), densely:
    O((N + r)³). Shape: []."""
    p = _checked(sp)
    K_yy, K_yh, K_hh, h = _augmented(sp)
    N, r = K_yy.shape[0], K_hh.shape[0]
    K = torch.cat([torch.cat([K_yy, K_yh], 1), torch.cat([K_yh.mT, K_hh], 1)], 0)
    noise = torch.cat([p.noise.to(K).expand(N), K.new_ones(r)])
    L, _ = jittered_cholesky(K + torch.diag(noise), 0.0, name="K̂ + Λ̂")
    z = solve_lower(L, torch.cat([p.y.to(K), h])[:, None])[:, 0]
    log_det = 2.0 * torch.log(torch.diagonal(L)).sum()
    # −log p_old(h) = offset + (r/2) log 2π: the pseudo-observations' own log 2π cancels
    return -0.5 * (N * LOG_2PI + log_det + z @ z) + sp.summary.offset.to(K)


def summary_conditional(sp: StreamingProblem, rows: Tensor | None = None
                        ) -> tuple[Tensor, Tensor]:
    """The new batch's prior covariance and targets given the pseudo-observations:
    K_c = K_yy − K_yh (K_hh + I)⁻¹K_hy [n, n] and y − K_yh (K_hh + I)⁻¹h [n], for the rows
    `rows` (indices into X; default all). E as a function of σ² is log N(y − μ; 0, K_c + σ²I)
    plus log N(h; 0, K_hh + I) − log p_old(h), which does not depend on σ²."""
    sub = sp if rows is None else sp._replace(problem=sp.problem._replace(
        X=sp.problem.X[rows], y=sp.problem.y[rows]))
    K_yy, K_yh, K_hh, h = _augmented(sub)
    eye = torch.eye(K_hh.shape[0], dtype=K_hh.dtype, device=K_hh.device)
    L, _ = jittered_cholesky(K_hh + eye, 0.0, name="K_hh + I")
    W = solve_lower(L, K_yh.mT)  # L⁻¹K_hy [r, n]
    Kc = K_yy - W.mT @ W
    return 0.5 * (Kc + Kc.mT), sub.problem.y - W.mT @ solve_lower(L, h[:, None])[:, 0]


def summary_of_posterior(old: OldPosterior) -> Summary:
    """The `online.Summary` of an SVGP's old posterior of one latent function (whitened
    q_old(w) = N(m_o, R_o R_oᵀ), p_old(w) = N(0, I)) when q_old/p_old is a likelihood of
    pseudo-observations: its precision minus the prior's, A = (R_o R_oᵀ)⁻¹ − I, is positive
    semi-definite (up to rounding, M·ε·max(1, ‖A‖)). Otherwise q_old is broader than p_old in
    some direction, the old data's factor is no likelihood (it grows along that direction),
    and a ValueError says so."""
    if old.mean.shape[1] != 1:
        raise ValueError(f"the summary takes one latent function; the old posterior has "
                         f"{old.mean.shape[1]}")
    with torch.no_grad():
        R = old.root[0]
        eye = torch.eye(R.shape[0], dtype=R.dtype, device=R.device)
        R_inv = torch.linalg.solve_triangular(R, eye, upper=False)
        A = R_inv.mT @ R_inv - eye
        lam = torch.linalg.eigvalsh(0.5 * (A + A.mT))
        tol = A.shape[0] * torch.finfo(A.dtype).eps * max(1.0, float(lam.abs().max()))
        if float(lam.min()) < -tol:
            raise ValueError(
                "the old posterior q_old is broader than the old prior p_old in some direction "
                f"(its precision minus the prior's has eigenvalue {float(lam.min()):.3g} < 0): "
                "the old data's factor q_old/p_old is then no likelihood of pseudo-"
                "observations, and the streamed evidence has no upper bound of this form "
                "(train the old model's q(u) further, e.g. natural_gradient_step(1.0) with a "
                "Gaussian likelihood)")
    return summarise(old.Z, old.L, R_inv.mT, old.mean[:, 0])
