"""Do the data support the noise variance? The exact log evidence as a function of σ² alone.

With the kernel held at its fitted values, log p(y | σ²) of an exact GP is O(n) per σ² after
one O(n³) eigendecomposition (docs/math.md §3, "Does the data support the noise?"), so its
maximiser over σ² (the noise the data support at this kernel) is found on a fine grid; a
sparse model on more rows than that takes is judged by the log density of held-out rows
under its own predictor (`held_out_support`). A fitted noise far below that maximiser, with
much lower evidence, is one the data do not support: the collapse of FITC's noise (Bauer, van
der Wilk & Rasmussen 2016), or a noise that was frozen or given too small. A correct low-noise
fit (the noise recovered, however small) is at that maximiser: an exact GP's fitted σ² is it.

Shapes: `noise_support(K [n, n], y [n], noise)` -> a `NoiseSupport` of floats;
`supported_noise(view, noise [], max_rows, sharded)` the same of a model's data.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from .. import covariances as cov
from ..distributed import gathered_rows, pooled_rows
from ..kernels.separate import Separate
from ..linalg import LOG_2PI, solve_lower
from ..objectives.collapsed.members import VFE, residual, statistics
from ..runtime.config import NOISE_FLOOR
from .view import RegressionView

#: Points of the grid of σ² on which the evidence is maximised (log-spaced): a step of
#: about 4 % over eight decades.
GRID_POINTS = 500

#: Evidence gain (nats) above which the data are said not to support the noise: a
#: likelihood ratio of e³ ≈ 20 in favour of the supported noise.
MATERIAL_GAIN = 3.0


class NoiseSupport(NamedTuple):
    """The fitted `noise` σ² and the `supported` one that maximises the exact evidence of
    `rows` data points at the fitted kernel (internal units), and `gain` = the log evidence
    at `supported` minus that at `noise` (nats, ≥ 0 up to the grid's resolution). With
    `held_out` rows (a sparse model on more rows than the exact evidence takes) the score is
    instead the log density of those rows predicted from the other `rows` − `held_out`
    (`held_out_support`), and `gain_se` the standard error of `gain` over the held-out rows."""

    noise: float
    supported: float
    gain: float
    rows: int
    held_out: int = 0
    gain_se: float = 0.0

    @property
    def at_floor(self) -> bool:
        """The fitted noise is at the least noise the models represent (`NOISE_FLOOR`), to
        within a factor of 2: the noise is the floor plus a softplus, which an optimiser
        driving it down approaches without reaching, and where it stops depends on rounding."""
        return self.noise <= NOISE_FLOOR * 2.0

    def unsupported(self, fraction: float) -> bool:
        """The noise is below `fraction` of the supported one and the evidence (or the
        held-out density) prefers the supported one by more than `MATERIAL_GAIN` nats and,
        held out, by more than the gain's standard error over the held-out rows (their
        log densities at a too-small noise are heavy-tailed: a few rows far off carry most
        of the gain, which makes a t-like test of two standard errors miss clear cases)."""
        return (self.noise < fraction * self.supported and self.gain > MATERIAL_GAIN
                and self.gain > self.gain_se)


def log_evidence_of_noise(lam: Tensor, z: Tensor, noise: Tensor) -> Tensor:
    """log p(y | σ²) for every σ² in `noise` [G] (shape [G]) from the eigenvalues λ [n] of K
    and the rotated targets z = Vᵀy [n]."""
    s = lam[None, :] + noise[:, None]
    return -0.5 * (lam.shape[0] * LOG_2PI + torch.log(s).sum(1) + (z * z / s).sum(1))


def noise_grid(y: Tensor, noise: float) -> Tensor:
    """`GRID_POINTS` noise variances, log-spaced from the floor (or `noise`, if lower) to ten
    times the larger of var(y) and `noise`. Shape: [GRID_POINTS]."""
    spread = float(y.var()) if y.shape[0] > 1 else 1.0
    low = min(noise, NOISE_FLOOR)
    high = 10.0 * max(spread, noise, NOISE_FLOOR)
    return torch.logspace(math.log10(low), math.log10(high), GRID_POINTS, dtype=y.dtype,
                          device=y.device)


def noise_support(K: Tensor, y: Tensor, noise: float) -> NoiseSupport:
    """The noise that maximises the exact evidence of (K, y) over σ² (`noise_grid`), against
    `noise` (all float64, internal units)."""
    K, y = K.double(), y.double()
    n = y.shape[0]
    lam, V = torch.linalg.eigh(0.5 * (K + K.mT))
    lam = lam.clamp_min(0.0)  # rounding leaves tiny negative eigenvalues
    z = V.mT @ y
    grid = noise_grid(y, noise)
    values = log_evidence_of_noise(lam, z, grid)
    best = int(torch.argmax(values))
    at_noise = float(log_evidence_of_noise(lam, z, lam.new_tensor([noise]))[0])
    return NoiseSupport(noise, float(grid[best]), float(values[best]) - at_noise, n)


def supported_noise(view: RegressionView, noise: Tensor, max_rows: int,
                    sharded: bool) -> NoiseSupport:
    """`noise_support` of a model's data at its fitted kernel: all the rows when there are at
    most `max_rows` (those of every rank, with `sharded` data). Beyond that a sparse model's
    noise is judged on held-out rows (`held_out_support`), and a GPR's (or sharded data's)
    by the exact evidence of `max_rows` rows drawn at random (seeded; alike on every rank)."""
    X, y = view.X, view.y
    if view.num_data > max_rows and not sharded and held_out_applies(view):
        return held_out_support(view, noise, min(max_rows, view.num_data // 5))
    if view.num_data <= max_rows:
        if sharded:
            X, y, _ = gathered_rows(X, y, noise, "the rows of the noise check")
    elif sharded:
        X, y = pooled_rows([X, y], max_rows, 0, "the rows of the noise check")
    else:
        g = torch.Generator().manual_seed(0)
        idx = torch.randperm(X.shape[0], generator=g)[:max_rows].to(X.device)
        X, y = X[idx], y[idx]
    return noise_support(view.kernel.K(X), y, float(noise))


def noise_warning(support: NoiseSupport, to_user: float, num_data: int, power_ep: bool) -> str:
    """The warning of an unsupported noise (`to_user` converts internal σ² to the units of y;
    `power_ep`: the objective is FITC or Power EP, whose noise is known to collapse)."""
    fitted, supported = support.noise * to_user, support.supported * to_user
    state = ("is at its floor, the least noise the model represents" if support.at_floor
             else "has collapsed towards zero" if support.supported >= 10 * support.noise
             else "is under-estimated")
    if support.held_out:
        score = (f"the log density of {support.held_out} random held-out data points, "
                 f"predicted from the other {support.rows - support.held_out} at the fitted "
                 "kernel and inducing inputs")
    else:
        score = "the exact log evidence of " + (
            f"all {support.rows} data points" if support.rows == num_data
            else f"{support.rows} random data points of the {num_data}")
    hint = ("FITC and Power EP with α near 1 are known to drive the noise towards zero "
            "(Bauer et al. 2016); prefer approximation='vfe'" if power_ep else
            "this objective does not end there when the noise is trained to convergence: was "
            "it frozen or given, or did the fit stop early?")
    return (f"the noise variance {fitted:.3g} {state}: the data support {supported:.3g} at "
            f"the fitted kernel ({score} is {support.gain:.3g} nats higher there); {hint}")


def held_out_applies(view: RegressionView) -> bool:
    """A sparse single-output model with one noise variance, whose noise `held_out_support`
    can judge."""
    p = view.problem
    return (p is not None and view.summary is None and p.noise.dim() == 0
            and view.y.dim() == 1 and not isinstance(p.kernel, Separate))


def held_out_support(view: RegressionView, noise: Tensor, held_out: int) -> NoiseSupport:
    """The noise that best predicts `held_out` random rows (seeded) from the others: the
    collapsed posterior of q(u) (docs/math.md §2, VFE's, whatever the model's member) at the
    fitted kernel and inducing variables, built from the other rows for every σ² of
    `noise_grid`, scores the held-out rows by their predictive log density.

    Like is compared with like: the same kernel, inducing variables and predictor as the
    model's, on data the predictor has not seen, so a σ² it prefers predicts new data better
    (the exact evidence of a subset at a kernel fitted to all rows favours a larger noise
    than the whole data set does). The predictive per σ² is docs/math.md §3's ("Does the
    data support the noise?"): one pass over the data, then O(M) per row and σ²."""
    p = view.problem
    assert p is not None  # held_out_applies
    n = view.X.shape[0]
    g = torch.Generator().manual_seed(0)
    order = torch.randperm(n, generator=g).to(view.X.device)
    test, train = order[:held_out], order[held_out:]
    y = residual(p.X, p.y, p.mean, False).detach().double()
    L, _ = cov.Kuu_cholesky(p.feature, p.kernel, p.jitter)
    fit = p._replace(X=p.X[train], y=y[train], mean=None, fam=VFE, blocks=None,
                     compute_dtype=None, noise=noise.new_ones(()))
    stats = statistics(fit, L)  # with σ² = 1: A = Σ a aᵀ, c = Σ y a
    q, U = torch.linalg.eigh(0.5 * (stats.A + stats.A.mT))
    q = q.clamp_min(0.0)
    a = U.mT @ solve_lower(L, cov.Kuf(p.feature, p.kernel, p.X[test]).double())  # ã [M, h]
    r = U.mT @ stats.c  # r̃ [M]
    kdiag = p.kernel.K_diag(p.X[test]).double()
    yt = y[test]
    grid = noise_grid(y, float(noise))

    def scores(s2: Tensor) -> Tensor:  # log densities [G, h]
        w = 1.0 / (s2[:, None] + q[None, :])  # [G, M]
        mean = (w * r[None, :]) @ a  # [G, h]
        var = (kdiag - (w * q[None, :]) @ (a * a)).clamp_min(0.0) + s2[:, None]
        return -0.5 * (LOG_2PI + torch.log(var) + (yt[None, :] - mean) ** 2 / var)

    values = scores(grid).sum(1)
    best = int(torch.argmax(values))
    diff = scores(torch.stack([grid[best], grid.new_tensor(float(noise))]))
    delta = diff[0] - diff[1]
    se = float(delta.std()) * math.sqrt(held_out) if held_out > 1 else 0.0
    return NoiseSupport(float(noise), float(grid[best]), float(delta.sum()), n, held_out, se)
