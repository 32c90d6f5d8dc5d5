"""Power EP with non-Gaussian likelihoods: sites, updates and energy (docs/math.md §5).

The sites depend on u only through h_n = w_nᵀu, w_n = Kuu⁻¹k_n, and are Gaussian in natural
form t_n(h) = exp(ν_n h − ½ τ_n h²). Their posterior is the regression posterior of the
collapsed family with pseudo-noise 1/τ_n and pseudo-targets ν_n/τ_n: A = Σ τ_n a_n a_nᵀ,
c = Σ ν_n a_n with a_n = L⁻¹k_n, and everything else (factorisation, prediction) is the
shared code of `collapsed/members.py` (Bui, Yan & Turner 2017, §3.8).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from .. import conditionals
from .. import covariances as cov
from ..conditionals import WhitenedGaussian
from ..kernels.base import Kernel
from ..likelihoods.base import Likelihood
from ..runtime.chunking import chunk_slices
from .collapsed.members import Statistics, solve


class Marginals(NamedTuple):
    """Posterior marginals of h_n: mean μ_n, variance s_n; d_n = [Kff − Qff]_nn; and the
    prior mean m_n of f_n = m_n + h_n (the sites live on h; the likelihood sees f). [N] each."""

    mean: Tensor
    var: Tensor
    d: Tensor
    offset: Tensor


def _whitened(kernel: Kernel, feature: object, Xb: Tensor, L: Tensor) -> tuple[Tensor, Tensor]:
    """a = L⁻¹k_n [M, B] and d_n = [Kff − Qff]_nn [B]."""
    a = conditionals.whiten(L, cov.Kuf(feature, kernel, Xb))
    return a, conditionals.nystrom_residual(a, kernel.K_diag(Xb))


def site_statistics(kernel: Kernel, feature: object, X: Tensor, L: Tensor, tau: Tensor,
                    nu: Tensor, chunk_size: int) -> Statistics:
    """A = Σ τ_n a_n a_nᵀ and c = Σ ν_n a_n."""
    M = L.shape[0]
    A, c = L.new_zeros(M, M), L.new_zeros(M)
    for sl in chunk_slices(X.shape[0], chunk_size):
        a, _ = _whitened(kernel, feature, X[sl], L)
        A = A + (a * tau[sl]) @ a.mT
        c = c + a @ nu[sl]
    return sums(A, c, X.shape[0])


def sums(A: Tensor, c: Tensor, n: int) -> Statistics:
    """The statistics of n sites with sums A = Σ τ_n a_n a_nᵀ and c = Σ ν_n a_n."""
    zero = A.new_zeros(())
    return Statistics(A, c, zero, zero, zero, zero, n)


def marginals(kernel: Kernel, feature: object, X: Tensor, L: Tensor, q: WhitenedGaussian,
              chunk_size: int, prior_mean: Callable[[Tensor], Tensor] | None = None
              ) -> Marginals:
    """μ_n = a_nᵀm, s_n = a_nᵀSa_n under the sites' whitened q(v) = N(m, S = B⁻¹)."""
    parts = []
    for sl in chunk_slices(X.shape[0], chunk_size):
        a, d = _whitened(kernel, feature, X[sl], L)
        mean, var = conditionals.projected(a, q)
        offset = (torch.zeros_like(d) if prior_mean is None
                  else prior_mean(X[sl]).to(d.dtype))
        parts.append((mean[:, 0], var[:, 0], d, offset))
    return Marginals(*(torch.cat(p) for p in zip(*parts)))


def cavity(m: Marginals, tau: Tensor, nu: Tensor, alpha: float) -> tuple[Tensor, Tensor, Tensor]:
    """Remove α of each site: 1/s_c = 1/s − ατ, μ_c = s_c(μ/s − αν). Also a validity mask."""
    prec = 1.0 / m.var - alpha * tau
    ok = prec > 0
    s_c = 1.0 / torch.where(ok, prec, torch.ones_like(prec))
    return s_c * (m.mean / m.var - alpha * nu), s_c, ok


def log_site_expectation(mu_c: Tensor, s_c: Tensor, tau: Tensor, nu: Tensor, alpha: float) -> Tensor:
    """log E_{h ~ N(μ_c, s_c)} exp(α(ν h − ½ τ h²)), stable as τ → 0.

    With a = ατ, b = αν: −½ log(1 + a s_c) + (s_c b² + 2bμ_c − aμ_c²)/(2(1 + a s_c)), which
    equals docs/math.md §5's form ½ log(1/(ατ)) − ½ log(s_c + 1/(ατ)) − (μ_c − g)²/(2(s_c + 1/(ατ)))
    + ½ατg² (g = ν/τ) wherever τ > 0.
    """
    a, b = alpha * tau, alpha * nu
    q = 1.0 + a * s_c
    return -0.5 * torch.log(q) + (s_c * b * b + 2.0 * b * mu_c - a * mu_c * mu_c) / (2.0 * q)


def energy(kernel: Kernel, feature: object, X: Tensor, y: Tensor, likelihood: Likelihood,
           tau: Tensor, nu: Tensor, alpha: float, jitter: float, chunk_size: int,
           batch: tuple[Tensor, Tensor] | None = None,
           prior_mean: Callable[[Tensor], Tensor] | None = None,
           totals: Callable[[Tensor], tuple[Tensor, Tensor]] | None = None,
           block: Callable[[Tensor], Statistics] | None = None) -> Tensor:
    """The Power-EP energy (approximate log evidence) with the sites held fixed:

    F = ½ log|V| − ½ log|Kuu| + ½ mᵀV⁻¹m + (1/α) Σ_n [log Z̃_n − log E_{N(μ_c, s_c)} t_n^α]
      = −½ log|B| + ½ eᵀe + (1/α) Σ_n […]   (whitened, B = I + A, e = L_B⁻¹c).

    With `batch` = (rows b, rows b′) of the N sites it is an unbiased estimate of F and of its
    gradient (the stochastic schedule, Bui et al. 2017 §3.9). q(u) is all the sites'
    posterior: A and c have the value of the full sums, and their gradient is estimated from
    b′, A = A_all + (N/|b′|)(A_b′ − A_b′) with only A_b′ carrying a gradient; the local terms
    are b's, scaled by N/|b|. Drawn independently, b and b′ keep the gradient unbiased (the
    local terms' gradient through q(u) multiplies the sums' gradient: with b′ = b the product
    of two estimates from one batch is biased). Averaged over all pairs of batches of a
    partition of the sites into equal batches, the estimates and their gradients are F and
    ∇F exactly. `totals(L)` may supply that value of (A, c) instead of a pass over all the
    sites (the stochastic schedule's running sums). With a `prior_mean` m the likelihood
    sees f_n = m(x_n) + h_n: the tilted moments are taken at the cavity mean shifted by
    m(x_n).

    `block(L)`: the statistics of a Gaussian data block already at its Power-EP fixed point
    (a streamed model's old data, docs/math.md §10.3): its A and c join the sites' in q(u)
    (exactly, never estimated from a batch) and its own terms −½(s_y + s_logλ + s_pen) join
    the energy (`with_block`).
    """
    L, _ = cov.Kuu_cholesky(feature, kernel, jitter)
    scale = 1.0
    if batch is None:
        stats = site_statistics(kernel, feature, X, L, tau, nu, chunk_size)
    else:
        if totals is None:
            with torch.no_grad():  # the full sums' value: O(N M²) work, O(chunk·M + M²) memory
                stats = site_statistics(kernel, feature, X, L, tau, nu, chunk_size)
        else:
            stats = sums(*totals(L), X.shape[0])
        local_rows, sum_rows = batch
        part = site_statistics(kernel, feature, X[sum_rows], L, tau[sum_rows], nu[sum_rows],
                               chunk_size)
        s_sum = X.shape[0] / sum_rows.shape[0]
        stats = stats._replace(A=stats.A + s_sum * (part.A - part.A.detach()),
                               c=stats.c + s_sum * (part.c - part.c.detach()))
        scale = X.shape[0] / local_rows.shape[0]
        X, y, tau, nu = X[local_rows], y[local_rows], tau[local_rows], nu[local_rows]
    own = None
    if block is not None:
        stats, own = with_block(stats, block(L))
    s = solve(stats)
    m = marginals(kernel, feature, X, L, conditionals.from_precision(s.L_B, s.e), chunk_size,
                  prior_mean)
    mu_c, s_c, _ = cavity(m, tau, nu, alpha)
    log_Z, _, _ = likelihood.tilted_moments(mu_c + m.offset, s_c + m.d, y, alpha)
    local = (log_Z - log_site_expectation(mu_c, s_c, tau, nu, alpha)).sum() / alpha
    F = -0.5 * s.log_det + 0.5 * (s.e @ s.e) + scale * local
    return F if own is None else F + own


def with_block(sites: Statistics, block: Statistics) -> tuple[Statistics, Tensor]:
    """The sites' statistics with a Gaussian block's A and c added, and the block's own
    energy terms −½(s_y + s_logλ + s_pen): a block of pseudo-observations h ~ N(Hᵀv, C)
    seen with power α has the site exp(cᵀv − ½vᵀAv), A = HC⁻¹Hᵀ, c = HC⁻¹h, whatever the
    cavity, and contributes −½ hᵀC⁻¹h − (1/(2α)) log|C| = −½(s_y + s_logλ + s_pen) to the
    energy beyond its share of −½ log|B| + ½ eᵀe (docs/math.md §10.3)."""
    stats = sites._replace(A=sites.A + block.A, c=sites.c + block.c)
    return stats, -0.5 * (block.s_y + block.s_loglam + block.s_pen)


class SiteUpdate(NamedTuple):
    tau: Tensor
    nu: Tensor
    skipped: int  # sites left unchanged: invalid cavity or a non-positive new precision
    change: float  # max |Δτ|/(1 + |τ|) + max |Δν|/(1 + |ν|) over updated sites


def update_sites(m: Marginals, tau: Tensor, nu: Tensor, y: Tensor, likelihood: Likelihood,
                 alpha: float, damping: float) -> SiteUpdate:
    """One damped parallel Power-EP update of the given sites (docs/math.md §5, steps 1–3)."""
    mu_c, s_c, ok = cavity(m, tau, nu, alpha)
    # derivatives of log Z with respect to the (shifted) cavity mean: the same for h and f
    _, d1, d2 = likelihood.tilted_moments(mu_c + m.offset, s_c + m.d, y, alpha)
    v_hat = -1.0 / d2 - s_c
    g_hat = mu_c - d1 / d2
    ok = ok & (d2 < 0) & (v_hat > 0) & torch.isfinite(v_hat) & torch.isfinite(g_hat)
    safe_v = torch.where(ok, v_hat, torch.ones_like(v_hat))
    tau_star, nu_star = 1.0 / (alpha * safe_v), g_hat / (alpha * safe_v)
    new_tau = torch.where(ok, (1.0 - damping) * tau + damping * tau_star, tau)
    new_nu = torch.where(ok, (1.0 - damping) * nu + damping * nu_star, nu)
    change = float(((new_tau - tau).abs() / (1.0 + tau.abs())).max()
                   + ((new_nu - nu).abs() / (1.0 + nu.abs())).max()) if tau.numel() else 0.0
    return SiteUpdate(new_tau, new_nu, int((~ok).sum()), change)
