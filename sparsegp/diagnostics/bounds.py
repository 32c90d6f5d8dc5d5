"""An upper bound on log p(y) that stays tight at small noise, where Titsias's is loose.

The Titsias (2014) bound replaces Kff by Qff + tI in the quadratic term, t = Σ_n d_n ≥
λ_max(Kff − Qff): loose whenever t ≫ σ², as for nearly noise-free data (a correct fit of
σ² = 1e-4 on 2000 points was "uncertified" by 690 nats while log p(y) was 3 nats above the
VFE bound). For any N×k matrix V, with A = Kff + σ²I and b = Vᵀy,

    yᵀA⁻¹y ≥ bᵀ(VᵀAV)⁻¹b

(the quadratic form's maximum over the span of V), and Kff ⪰ Qff gives log|A| ≥
log|Qff + σ²I|, so

    log p(y) ≤ −(N/2) log 2π − ½ log|Qff + σ²I| − ½ bᵀ(VᵀAV)⁻¹b

(after Artemev, Burt & van der Wilk 2021). V holds v₁ = (Qff + σ²I)⁻¹y, which makes the
bound tight when Qff ≈ Kff, and v₂ = (Qff + (t + σ²)I)⁻¹y, with which it is never looser than
Titsias's (v₂ alone gives his quadratic term, since Qff + (t + σ²)I ⪰ A). Both come from the
VFE statistics; VᵀKffV costs N² kernel evaluations, streamed in chunks of rows (memory
O(chunk · N)): used for N ≤ `QUADRATIC_MAX_DATA`.

Shapes: `quadratic_upper_bound(problem)` of X [N, D], y [N], one σ² -> a scalar tensor.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import covariances as cov
from ..linalg import LOG_2PI, solve_lower, solve_lower_t
from ..objectives.collapsed.members import VFE, CollapsedProblem, solve, statistics
from ..runtime.chunking import chunk_slices

#: The most data points the quadratic-form bound is evaluated for (N² kernel evaluations).
QUADRATIC_MAX_DATA = 20_000

#: Elements of one chunk of K(X_chunk, X) (32 MB in float64).
CHUNK_ELEMENTS = 2**22


def quadratic_upper_bound(p: CollapsedProblem) -> Tensor:
    """The bound above for the problem's data, kernel and inducing feature (internal units;
    one output, one noise variance, data on this process; the problem's mean, if any, is
    taken off y as by the objectives)."""
    if p.y.dim() != 1 or p.noise.dim() != 0:
        raise ValueError("the quadratic-form bound takes one output and one noise variance")
    vp = p._replace(fam=VFE, blocks=None)
    L, _ = cov.Kuu_cholesky(vp.feature, vp.kernel, vp.jitter)
    stats = statistics(vp, L)
    solved = solve(stats)
    noise = vp.noise
    wide = noise + stats.s_d.clamp_min(0.0)  # t + σ²
    shrink = noise / wide  # the statistics with weights 1/(t + σ²)
    widened = solve(stats._replace(A=stats.A * shrink, c=stats.c * shrink))
    # (Qff + s I)⁻¹y = (y − Φ B_s⁻¹c_s) / s for s = σ² and s = t + σ², Φ = Kfu L⁻ᵀ
    W = torch.stack([solve_lower_t(solved.L_B, solved.e), solve_lower_t(widened.L_B, widened.e)],
                    1)
    scale = torch.stack([noise, wide])
    X = vp.X
    y = vp.y if vp.mean is None else vp.y - vp.mean(X)
    N = X.shape[0]
    rows = max(1, CHUNK_ELEMENTS // max(N, vp.feature.num_inducing))
    V = torch.empty(N, 2, dtype=y.dtype, device=y.device)
    for s in chunk_slices(N, rows):
        phi = solve_lower(L, cov.Kuf(vp.feature, vp.kernel, X[s]))  # L⁻¹Kuf [M, rows]
        V[s] = (y[s, None] - phi.mT @ W) / scale
    V = V / V.norm(dim=0).clamp_min(1e-300)  # the bound does not depend on their scale
    G = noise * (V.mT @ V)
    for s in chunk_slices(N, rows):
        G = G + V[s].mT @ (vp.kernel.K(X[s], X) @ V)
    b = V.mT @ y
    # bᵀG⁻¹b over the span of V (v₁ ∥ v₂ leaves G singular: the pseudo-inverse's value is
    # then that of the span, still a lower bound on yᵀA⁻¹y)
    quad = b @ torch.linalg.lstsq(0.5 * (G + G.mT), b[:, None], rcond=1e-12).solution[:, 0]
    return -0.5 * (N * LOG_2PI + solved.log_det + quad)
