"""Robust regression: p(y | f) = Student-t(y | location f, scale σ, ν degrees of freedom)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from .. import quadrature
from ..parameters import UserValue
from ..runtime.config import POSITIVE_FLOOR
from ..validation import ArrayLike
from .base import Likelihood

#: Floor of the degrees of freedom ν: any ν > 0 is a proper density (ν ≤ 1: no mean,
#: ν ≤ 2: no variance), so the floor only keeps ν away from 0, where log p loses its scale.
DF_FLOOR = 1e-2

#: Step of the trapezoid rule in s = log t for E[log(1 + r²/(νσ²))] (`variational_expectations`);
#: measured against adaptive quadrature (scipy.integrate.quad) over ν ∈ [0.1, 1e4],
#: σ ∈ [0.05, 3], v ∈ [1e-4, 10] and residuals up to 100: relative error ≤ 1e-14 (a step of
#: 0.5 gives up to 1e-8).
TRAPEZOID_STEP = 0.25


class StudentT(Likelihood):
    """p(y | f) = Γ((ν+1)/2) / (Γ(ν/2) √(πν) σ) · (1 + (y − f)²/(νσ²))^(−(ν+1)/2): the
    Student-t with location f, `scale` σ and `df` ν degrees of freedom, for regression with
    outliers (a residual of k scales costs O(log k), not O(k²) as under a Gaussian).

    Both are learned positive parameters: σ floored at `POSITIVE_FLOOR` (in the units of y,
    which SVGP does not standardise under this likelihood) and ν at `DF_FLOOR` (1e-2): every
    ν > 0 is allowed, ν → ∞ is the Gaussian N(y | f, σ²). Shapes: f, mean, var [..., N],
    y [N] -> [..., N].

    `variational_expectations` is exact to rounding (relative error ≤ 1e-14 measured): with
    c = νσ², r = y − f ~ N(d, v), Frullani's integral log(1 + r²/c) = ∫₀^∞ e^(−t)(1 − e^(−t r²/c))
    dt/t and E[e^(−t r²/c)] = (1 + 2tv/c)^(−½) exp(−t d²/(c + 2tv)) leave a smooth integral
    over t, summed by the trapezoid rule in log t (`TRAPEZOID_STEP`). The predictive density
    and Power EP's tilted moments (`SGPC`) integrate over the Gamma scale mixture instead
    (`tilted_moments`), also by the trapezoid rule in log λ: relative error ≤ 1e-11 measured
    against adaptive quadrature for ν ∈ [0.1, 1e5], σ ∈ [0.05, 1], v ∈ [1e-3, 10], residuals up
    to 50, where Gauss–Hermite quadrature of `log_prob` with 32 points errs by up to 3e-3 once
    σ is below √v (`quadrature_points` is unused). Under `SGPC` the Student-t is not
    log-concave: a site update whose precision would turn negative (an outlying point) is
    skipped and counted in `fit().info["skipped_updates"]`.

    Predictions of y*: the mean is the latent mean m (the location of y*, its mean when
    ν > 1) and the variance v + σ²ν/(ν − 2) for ν > 2; for ν ≤ 2, where y* has no finite
    variance, the variance is `inf` (the mean stays m).

    Example:

        >>> import numpy as np, torch, sparsegp as sg
        >>> lik = sg.likelihoods.StudentT(df=4.0, scale=0.5)
        >>> round(lik.df, 6), round(lik.scale, 6)
        (4.0, 0.5)
        >>> mean, var = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
        >>> [round(x, 6) for x in lik.predict_mean_and_var(mean, var)[1].tolist()]  # v + σ²ν/(ν−2)
        [1.5, 1.5]
        >>> X = np.linspace(0, 1, 30)[:, None]
        >>> y = np.sin(6 * X[:, 0]); y[::10] += 5.0  # three outliers
        >>> m = sg.SVGP(X, y, likelihood=lik, inducing_points=5)
        >>> m.predict_y(X[:4])[0].shape
        (4,)
    """

    # ∂² log p/∂f² is bounded but changes sign (positive beyond |y − f| > σ√ν: log p is not
    # concave), so SVGP's minibatch training keeps checking its natural-gradient steps
    bounded_curvature = False

    def __init__(self, df: ArrayLike = 3.0, scale: ArrayLike = 1.0,
                 quadrature_points: int = quadrature.DEFAULT_POINTS) -> None:
        super().__init__(quadrature_points)
        self._add_positive("df", df, DF_FLOOR, max_dim=0)
        self._add_positive("scale", scale, POSITIVE_FLOOR, max_dim=0)

    df = UserValue("The degrees of freedom ν.")

    scale = UserValue("The scale σ (the standard deviation of the Gaussian that ν → ∞ gives).")

    def latent_start(self, y: Tensor) -> Tensor:
        """f starts at y."""
        return y

    def _log_normaliser(self, nu: Tensor, scale: Tensor) -> Tensor:
        """log Γ((ν+1)/2) − log Γ(ν/2) − ½ log πν − log σ; for ν ≥ 1000, where the difference
        of log Γs loses digits (1e-12 at ν = 1e4), its asymptotic series in x = ν/2,
        log Γ(x + ½) − log Γ(x) = ½ log x − 1/(8x) + 1/(192x³) + O(x⁻⁵)."""
        x = 0.5 * nu
        large = x >= 500.0
        xs = torch.where(large, torch.full_like(x, 500.0), x)  # the exact branch, kept finite
        exact = torch.lgamma(xs + 0.5) - torch.lgamma(xs) - 0.5 * torch.log(xs)
        series = -1.0 / (8.0 * x) + 1.0 / (192.0 * x**3)
        return torch.where(large, series, exact) - 0.5 * math.log(2.0 * math.pi) - torch.log(scale)

    def log_prob(self, f: Tensor, y: Tensor) -> Tensor:
        """log Γ((ν+1)/2) − log Γ(ν/2) − ½ log πν − log σ − (ν+1)/2 · log(1 + (y − f)²/(νσ²))."""
        nu, scale = self.value("df"), self.value("scale")
        r = (y - f) / scale
        return self._log_normaliser(nu, scale) - 0.5 * (nu + 1.0) * torch.log1p(r * r / nu)

    def conditional_mean(self, f: Tensor) -> Tensor:
        """The location f (E[y | f] for ν > 1)."""
        return f

    def conditional_variance(self, f: Tensor) -> Tensor:
        """Var[y | f] = σ²ν/(ν − 2) for ν > 2, inf otherwise."""
        return self._noise_variance().expand(f.shape)

    def _noise_variance(self) -> Tensor:
        nu, scale = self.value("df"), self.value("scale")
        finite = nu > 2.0
        ratio = nu / torch.where(finite, nu - 2.0, torch.ones_like(nu))
        return torch.where(finite, scale * scale * ratio, torch.full_like(nu, math.inf))

    def variational_expectations(self, mean: Tensor, var: Tensor, y: Tensor) -> Tensor:
        """E_{N(f | m, v)}[log p(y | f)], the expectation of log(1 + r²/(νσ²)) by Frullani's
        integral (class docstring). Shapes: [N] -> [N]."""
        nu, scale = self.value("df"), self.value("scale")
        c = nu * scale * scale
        d2 = (y - mean) ** 2
        with torch.no_grad():  # where the integrand's lower tail ends; the integral ignores it
            K = float(((d2 + var) / c).max()) if d2.numel() else 0.0
            lower = -36.0 - math.log1p(K if math.isfinite(K) else 1e300)
        s = torch.arange(lower, 4.0 + TRAPEZOID_STEP, TRAPEZOID_STEP, dtype=mean.dtype,
                         device=mean.device)
        t = torch.exp(s)  # [S]
        c_, d2_, v_ = c[..., None], d2[..., None], var[..., None]
        log_g = -0.5 * torch.log1p(2.0 * t * v_ / c_) - t * d2_ / (c_ + 2.0 * t * v_)
        integral = TRAPEZOID_STEP * (torch.exp(-t) * -torch.expm1(log_g)).sum(-1)
        return self._log_normaliser(nu, scale) - 0.5 * (nu + 1.0) * integral

    def predict_log_density(self, mean: Tensor, var: Tensor, y: Tensor) -> Tensor:
        """log ∫ p(y | f) N(f | m, v) df, by the Gamma scale mixture (`tilted_moments` at α = 1).
        Shapes: [N] -> [N]."""
        return self._mixture(mean, var, y, 1.0, moments=False)[0]

    def tilted_moments(self, mean: Tensor, var: Tensor, y: Tensor, alpha: float
                       ) -> tuple[Tensor, Tensor, Tensor]:
        """log Z̃ = log E_{N(f; μ, v)}[p(y | f)^α] and its first two derivatives in μ (docs/math.md
        §5, step 2), by the Gamma scale mixture: with c = νσ², β = α(ν + 1)/2 and d = y − μ,
        (1 + r²/c)^(−β) = E_{λ ~ Gamma(β, 1)}[e^(−λr²/c)], and under each λ the tilted f is
        Gaussian: E_{N(f; μ, v)}[e^(−λr²/c)] = (1 + 2λv/c)^(−½) exp(−λd²/(c + 2λv)), with
        ∂/∂μ of its log q_λ = 2λd/(c + 2λv) and ∂²/∂μ² = −2λ/(c + 2λv). So
        Z̃ = C^α E_λ[G_λ] (C the density's normalising constant), ∂ log Z̃ = Ẽ[q_λ] and
        ∂² log Z̃ = Ṽar[q_λ] − Ẽ[2λ/(c + 2λv)] under the λ-weights ∝ Gamma(λ; β, 1) G_λ; the
        integral over λ is the trapezoid rule in log λ on a grid that covers the weights to
        e^(−40) (`_mixture_grid`). Shapes: [N] -> three [N]."""
        return self._mixture(mean, var, y, alpha, moments=True)

    def _mixture(self, mean: Tensor, var: Tensor, y: Tensor, alpha: float, moments: bool
                 ) -> tuple[Tensor, Tensor, Tensor]:
        nu, scale = self.value("df"), self.value("scale")
        c = nu * scale * scale
        beta = 0.5 * alpha * (nu + 1.0)
        d = (y - mean).expand(torch.broadcast_shapes(mean.shape, y.shape, var.shape))
        s, h = _mixture_grid(float(beta.detach()), float(c.detach()), d.detach(),
                             var.detach().expand(d.shape))
        lam = torch.exp(s)  # [S]
        denom = c + 2.0 * lam * var[..., None]  # [..., S]
        log_G = -0.5 * torch.log(denom / c) - lam * d[..., None] ** 2 / denom
        log_w = beta * s - lam - torch.lgamma(beta) + log_G + math.log(h)
        log_Z = torch.logsumexp(log_w, dim=-1) + alpha * self._log_normaliser(nu, scale)
        if not moments:
            return log_Z, log_Z, log_Z
        w = torch.softmax(log_w, dim=-1)
        q = 2.0 * lam * d[..., None] / denom
        d1 = (w * q).sum(-1)
        d2 = (w * (q - d1[..., None]) ** 2).sum(-1) - (w * 2.0 * lam / denom).sum(-1)
        return log_Z, d1, d2

    def predict_mean_and_var(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """(m, v + σ²ν/(ν − 2)); the variance is inf for ν ≤ 2. Shapes: [N] -> two [N]."""
        return mean, var + self._noise_variance()


def _bisect(fn: Callable[[Tensor], Tensor], low: Tensor, high: Tensor, rising: bool,
            steps: int = 80) -> Tensor:
    """Elementwise, the end of [low, high] nearest the root of fn (≤ 0 on the side kept):
    the largest s with fn(s) ≤ 0 if fn rises, the smallest if it falls."""
    for _ in range(steps):
        mid = 0.5 * (low + high)
        below = fn(mid) <= 0.0
        if rising:
            low, high = torch.where(below, mid, low), torch.where(below, high, mid)
        else:
            low, high = torch.where(below, low, mid), torch.where(below, mid, high)
    return low if rising else high


def _mixture_grid(beta: float, c: float, d: Tensor, var: Tensor) -> tuple[Tensor, float]:
    """Nodes s = log λ [S] and the step of the trapezoid rule for the integrals over λ of
    `StudentT.tilted_moments`, whose log integrand is ψ(s) = βs − e^s + log G(e^s), G ≤ 1
    decreasing. The step is ¼ of the width of the Gamma factor's peak in s (1/√β, at most 1);
    the ends are where a bound on each tail's mass falls e^(−40) below that of the grid's
    largest term: below log β the integrand is at most e^φ(s), φ = βs − e^s increasing and
    concave, so the tail is at most e^φ(s)/φ'(s); above log β at most e^φ(s) G(β), likewise."""
    with torch.no_grad():
        width = min(1.0, 1.0 / math.sqrt(beta))
        step = 0.25 * width
        top = math.log(beta)

        def psi(s: Tensor) -> Tensor:
            lam = torch.exp(s)
            denom = c + 2.0 * lam * var
            return beta * s - lam - 0.5 * torch.log(denom / c) - lam * d * d / denom

        # a lower bound of max ψ: ψ at the Gamma's peak, where G turns down, and on a coarse grid
        turn = torch.log(c / (d * d + var + 1e-300)).clamp(max=top)
        coarse = torch.arange(top - 60.0, top + 1e-9, 1.0, dtype=d.dtype, device=d.device)
        candidates = torch.cat([psi(top + width * torch.linspace(-3, 3, 13, dtype=d.dtype,
                                                                  device=d.device)[:, None]
                                    + 0.0 * d),
                                psi(turn)[None], psi(coarse[:, None] + 0.0 * d)])
        target = candidates.max(0).values + math.log(0.1 * step) - 40.0
        log_G_top = psi(torch.full_like(d, top)) - (beta * top - beta)
        far = 60.0 / min(beta, 1.0) + 60.0
        low = _bisect(lambda s: beta * s - torch.exp(s)
                      - torch.log((beta - torch.exp(s)).clamp_min(1e-300)) - target,
                      torch.full_like(d, top - far), torch.full_like(d, top), rising=True)
        high = _bisect(lambda s: beta * s - torch.exp(s) + log_G_top
                       - torch.log((torch.exp(s) - beta).clamp_min(1e-300)) - target,
                       torch.full_like(d, top), torch.full_like(d, top + math.log1p(far + beta) + 5.0),
                       rising=False)
        lo = float(low.min()) if low.numel() else top - 1.0
        hi = float(high.max()) if high.numel() else top + 1.0
        s = torch.arange(lo, hi + step, step, dtype=d.dtype, device=d.device)
    return s, step
