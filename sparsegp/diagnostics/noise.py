"""Do the data support the noise variance? The exact log evidence as a function of σ² alone.

With the kernel held at its fitted values, log p(y | σ²) of an exact GP is, from one
eigendecomposition K = V diag(λ) Vᵀ and z = Vᵀy,

    log p(y | σ²) = −½ [n log 2π + Σ_i log(λ_i + σ²) + Σ_i z_i² / (λ_i + σ²)],

O(n) per σ² after the O(n³) factorisation, so its maximiser over σ² (the noise the data
support at this kernel) is found on a fine grid. A fitted noise far below that maximiser, with
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

from ..distributed import gathered_rows, pooled_rows
from ..linalg import LOG_2PI
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
    at `supported` minus that at `noise` (nats, ≥ 0 up to the grid's resolution)."""

    noise: float
    supported: float
    gain: float
    rows: int

    @property
    def at_floor(self) -> bool:
        """The fitted noise is at the least noise the models represent (`NOISE_FLOOR`)."""
        return self.noise <= NOISE_FLOOR * 1.01

    def unsupported(self, fraction: float) -> bool:
        """The noise is below `fraction` of the supported one and the evidence prefers the
        supported one by more than `MATERIAL_GAIN` nats."""
        return self.noise < fraction * self.supported and self.gain > MATERIAL_GAIN


def log_evidence_of_noise(lam: Tensor, z: Tensor, noise: Tensor) -> Tensor:
    """log p(y | σ²) for every σ² in `noise` [G] (shape [G]) from the eigenvalues λ [n] of K
    and the rotated targets z = Vᵀy [n]."""
    s = lam[None, :] + noise[:, None]
    return -0.5 * (lam.shape[0] * LOG_2PI + torch.log(s).sum(1) + (z * z / s).sum(1))


def noise_support(K: Tensor, y: Tensor, noise: float) -> NoiseSupport:
    """The noise that maximises the exact evidence of (K, y) over σ², against `noise` (all
    float64, internal units). The grid spans from the floor (or `noise`, if lower) to ten
    times the larger of var(y) and `noise`."""
    K, y = K.double(), y.double()
    n = y.shape[0]
    lam, V = torch.linalg.eigh(0.5 * (K + K.mT))
    lam = lam.clamp_min(0.0)  # rounding leaves tiny negative eigenvalues
    z = V.mT @ y
    spread = float(y.var()) if n > 1 else 1.0
    low = min(noise, NOISE_FLOOR)
    high = 10.0 * max(spread, noise, NOISE_FLOOR)
    grid = torch.logspace(math.log10(low), math.log10(high), GRID_POINTS, dtype=lam.dtype,
                          device=lam.device)
    values = log_evidence_of_noise(lam, z, grid)
    best = int(torch.argmax(values))
    at_noise = float(log_evidence_of_noise(lam, z, lam.new_tensor([noise]))[0])
    return NoiseSupport(noise, float(grid[best]), float(values[best]) - at_noise, n)


def supported_noise(view: RegressionView, noise: Tensor, max_rows: int,
                    sharded: bool) -> NoiseSupport:
    """`noise_support` of a model's data at its fitted kernel: all the rows when there are at
    most `max_rows` (those of every rank, with `sharded` data), else `max_rows` of them drawn
    at random (seeded; alike on every rank)."""
    X, y = view.X, view.y
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
    rows = (f"all {support.rows} data points" if support.rows == num_data
            else f"{support.rows} random data points of the {num_data}")
    hint = ("FITC and Power EP with α near 1 are known to drive the noise towards zero "
            "(Bauer et al. 2016); prefer approximation='vfe'" if power_ep else
            "this objective does not end there when the noise is trained to convergence: was "
            "it frozen or given, or did the fit stop early?")
    return (f"the noise variance {fitted:.3g} {state}: the data support {supported:.3g} at "
            f"the fitted kernel (the exact log evidence of {rows} is {support.gain:.3g} nats "
            f"higher there); {hint}")
