"""The spectral mixture kernel (Wilson & Adams 2013)."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..parameters import UserValue
from ..runtime.config import POSITIVE_FLOOR
from ..validation import ArrayLike
from .base import Kernel, as_inputs, check_input_pair
from .stationary import scaled_squared_distance

#: Floor of the mean frequencies: 0 (a component at frequency ~0 is a squared exponential).
MEAN_FLOOR = 0.0
#: A regression model's start reads the periodogram of at most this many rows, on a grid
#: oversampled this many times (its cost: O(rows² · oversampling) per input column).
SPECTRUM_ROWS = 1000
SPECTRUM_OVERSAMPLE = 5


class SpectralMixture(Kernel):
    """k(τ) = Σ_q w_q Π_d exp(−2π² τ_d² s_qd²) cos(2π τ_d μ_qd), τ = x − x' (Wilson & Adams
    2013, eq. 12): a spectral density that is a mixture of Q Gaussians (each mirrored about 0
    in every input dimension), of weights w_q, mean frequencies μ_qd and frequency scales
    (standard deviations) s_qd, all positive; per input column (ARD) or one value per
    component for every column. On one input column it is GPyTorch's `SpectralMixtureKernel`
    (the same weights, means and scales); on several, GPyTorch takes the product over columns
    of one-column mixtures, while this is the paper's mixture of products over columns.
    Component q alone with μ_q → 0 is the squared exponential of variance w_q and lengthscale
    ℓ = 1/(2π s_q); k(0) = Σ_q w_q.

    Shapes: weights [Q], means and scales [Q, D] or [Q, 1] (one value for every column; a 1-D
    array of Q values is read as [Q, 1]); X [N, D], X2 [N2, D] -> K [N, N2], K_diag [N]. Give
    `num_mixtures` Q, or arrays whose first dimension is Q. Unset values start from the data:
    in a regression model (GPR, SGPR) from the targets' spectrum, as `from_data` starts them
    (`initialise_from_targets`); elsewhere GPyTorch-style, from the spread of the inputs, but
    with no random draw: per column d, with
    range R_d (max − min) and the median gap g_d between its sorted distinct values, the
    means μ_qd = (q + ½)/Q · 1/(2 g_d) spread evenly below the Nyquist frequency of that gap,
    the scales s_qd = 1/R_d (envelopes as long as the data), the weights the signal variance
    over Q each. K is positive semi-definite: every component's spectral density is a
    non-negative sum of Gaussians (Bochner). Evaluation costs Q·D elementwise passes over
    [N, N2] and no larger temporaries.

    `SpectralMixture.from_data(X, y, Q)` starts the means, scales and weights from the
    peaks of the data's periodogram instead (as Wilson & Adams 2013 start theirs); see there.

    Example:

        >>> import torch, sparsegp as sg
        >>> k = sg.kernels.SpectralMixture(weights=[1.0, 0.5], means=[0.5, 2.0],
        ...                                scales=[0.1, 0.2])
        >>> X = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
        >>> k.num_mixtures, round(k.K_diag(X)[0].item(), 6)  # k(0) = Σ w_q
        (2, 1.5)
        >>> tuple(k.K(X).shape), k.config()["args"]["num_mixtures"]
        ((2, 2), 2)
    """

    def __init__(self, num_mixtures: int | None = None, weights: ArrayLike | None = None,
                 means: ArrayLike | None = None, scales: ArrayLike | None = None) -> None:
        super().__init__()
        Q = _mixture_count(num_mixtures, weights, means, scales)
        self.num_mixtures: int = Q
        centres = (torch.arange(Q, dtype=torch.float64) + 0.5) / Q
        self._declare("weights", _components(weights, Q, 1), torch.full((Q,), 1.0 / Q),
                      POSITIVE_FLOOR)
        self._declare("means", _components(means, Q, 2), centres[:, None], MEAN_FLOOR, max_dim=2)
        self._declare("scales", _components(scales, Q, 2), torch.ones(Q, 1), POSITIVE_FLOOR,
                      max_dim=2)

    @classmethod
    def from_data(cls, X: ArrayLike, y: ArrayLike, num_mixtures: int, oversample: int = 10
                  ) -> SpectralMixture:
        """A kernel of Q = `num_mixtures` components started from the empirical spectrum of
        (X, y): per input column d, the Lomb–Scargle periodogram of y − mean(y) against x_d
        (irregular or regular inputs alike; on a regular grid it is the classical periodogram)
        on the frequencies k/(R_d · `oversample`), k = 1, 2, … up to the Nyquist frequency of
        the median gap g_d, 1/(2 g_d) (R_d the column's range). Component q takes the q-th
        highest peak of each column's periodogram: its mean frequency μ_qd is the peak's
        (refined by the parabola through the three grid values around it), its scale s_qd the
        peak's half width at half height as a Gaussian's standard deviation (HWHM/√(2 log 2),
        at least one grid step) and its weight the share of the peak heights, averaged over
        the columns, of the variance of y. With several columns each column is read alone
        (a component's frequencies in different columns come from the peaks of the same rank,
        not from a joint spectrum), so the start suits inputs whose columns vary separately
        best. Where a column has fewer than Q peaks the rest start as `initialise_from_data`
        would (and a column with one distinct value at frequency 0+, scale 1).

        The weights stay "unset": a model's start rescales them, keeping their shares, to the
        signal variance in its own units (standardised y, say). Shapes: X [N, D] (or [N]),
        y [N] -> a kernel with means and scales [Q, D], weights [Q].

        Example:

            >>> import numpy as np, sparsegp as sg
            >>> x = np.linspace(0.0, 20.0, 200)
            >>> y = np.sin(2 * np.pi * 0.5 * x) + 0.5 * np.sin(2 * np.pi * 1.5 * x)
            >>> k = sg.kernels.SpectralMixture.from_data(x, y, 2)
            >>> np.round(k.means[:, 0], 2).tolist()
            [0.5, 1.5]
        """
        Q = _mixture_count(num_mixtures)
        if (isinstance(oversample, bool) or not isinstance(oversample, numbers.Integral)
                or oversample < 1):
            raise ValueError(f"oversample must be an integer ≥ 1; got {oversample!r}")
        Xa = np.asarray(X, dtype=np.float64)
        Xa = Xa[:, None] if Xa.ndim == 1 else Xa
        ya = np.asarray(y, dtype=np.float64).reshape(-1)
        if Xa.ndim != 2 or Xa.shape[0] != ya.shape[0] or Xa.shape[0] < 2:
            raise ValueError(f"X must be [N, D] (or [N]) and y [N] with N ≥ 2; got X of shape "
                             f"{np.shape(X)} and y of shape {np.shape(y)}")
        if not (np.isfinite(Xa).all() and np.isfinite(ya).all()):
            raise ValueError("X and y must be finite (no NaN or inf)")
        means, scales, shares = _spectrum_start(Xa, ya, Q, oversample)
        variance = float(ya.var()) if ya.var() > 0 else 1.0
        kernel = cls(weights=variance * shares, means=means, scales=scales)
        kernel._unset.add("weights")
        return kernel

    weights = UserValue()

    means = UserValue()

    scales = UserValue()

    def _per_column(self, name: str, D: int) -> Tensor:
        v = self.value(name)
        if v.shape[1] not in (1, D):
            raise ValueError(f"X has {D} columns but the {name} have shape {tuple(v.shape)} "
                             f"(give [Q, {D}] or [Q, 1])")
        return v.expand(self.num_mixtures, D)

    def K(self, X: Tensor, X2: Tensor | None = None) -> Tensor:
        check_input_pair(X, X2)
        D = X.shape[1]
        w, mu = self.value("weights"), self._per_column("means", D)
        ell = 1.0 / (2.0 * math.pi * self._per_column("scales", D))  # the envelopes' lengthscales
        Y = X if X2 is None else X2
        total = None
        for q in range(self.num_mixtures):
            term = w[q] * torch.exp(-0.5 * scaled_squared_distance(X, X2, ell[q]))
            for d in range(D):
                tau = X[:, d, None] - Y[None, :, d]
                term = term * torch.cos((2.0 * math.pi) * mu[q, d] * tau)
            total = term if total is None else total + term
        assert total is not None
        return total

    def K_diag(self, X: Tensor) -> Tensor:
        X = as_inputs(X)
        self._per_column("means", X.shape[1])
        self._per_column("scales", X.shape[1])
        return self.value("weights").sum().expand(X.shape[0])

    def initialise_from_targets(self, X: Tensor, y: Tensor, signal_variance: float) -> None:
        """In a regression model, unset means and scales start from the targets' spectrum as
        `from_data` starts them (the periodogram of at most `SPECTRUM_ROWS` rows, a seeded
        subset of larger data, oversampled `SPECTRUM_OVERSAMPLE` times), the unset weights
        at its peaks' shares of the signal variance; the rest as `initialise_from_data`."""
        if {"means", "scales"} <= self._unset:
            Xa = X.detach().double().cpu().numpy()
            ya = y.detach().double().cpu().numpy().reshape(-1)
            if ya.shape[0] > SPECTRUM_ROWS:
                rows = np.random.default_rng(0).choice(ya.shape[0], SPECTRUM_ROWS, replace=False)
                Xa, ya = Xa[rows], ya[rows]
            if ya.shape[0] >= 2:
                means, scales, shares = _spectrum_start(Xa, ya, self.num_mixtures,
                                                        SPECTRUM_OVERSAMPLE)
                self._assign("means", torch.as_tensor(means, dtype=X.dtype), reshape=True)
                self._assign("scales", torch.as_tensor(scales, dtype=X.dtype), reshape=True)
                if "weights" in self._unset:
                    self._assign("weights", torch.as_tensor(signal_variance * shares,
                                                            dtype=X.dtype))
        self.initialise_from_data(X, signal_variance)

    def initialise_from_data(self, X: Tensor, signal_variance: float) -> None:
        Q = self.num_mixtures
        if "weights" in self._unset:  # keep the shares (equal, or `from_data`'s)
            shares = self.value("weights").detach()
            self._assign("weights", (signal_variance * shares / shares.sum()).to(X.dtype))
        spread, gap = _spread_and_gap(X)
        if "means" in self._unset:
            centres = (torch.arange(Q, dtype=X.dtype) + 0.5) / Q
            self._assign("means", centres[:, None] * (0.5 / gap)[None, :], reshape=True)
        if "scales" in self._unset:
            self._assign("scales", (1.0 / spread)[None, :].expand(Q, -1).clone(), reshape=True)

    def config(self) -> dict[str, Any]:
        cfg = super().config()
        cfg["args"]["num_mixtures"] = self.num_mixtures
        return cfg


def _mixture_count(num_mixtures: object, *arrays: ArrayLike | None) -> int:
    """Q from `num_mixtures` or the arrays' first dimension (all must agree)."""
    counts = {int(np.shape(a)[0]) for a in arrays if a is not None and np.ndim(a) >= 1}
    if num_mixtures is not None:
        if (isinstance(num_mixtures, bool) or not isinstance(num_mixtures, numbers.Integral)
                or num_mixtures < 1):
            raise ValueError(f"num_mixtures must be an integer ≥ 1; got {num_mixtures!r}")
        counts.add(int(num_mixtures))
    if len(counts) != 1:
        raise ValueError("give the number of components: num_mixtures, or weights, means or "
                         "scales with one row per component (and all of them agreeing); got "
                         + (f"{sorted(counts)}" if counts else "none"))
    return counts.pop()


def _components(value: ArrayLike | None, Q: int, dims: int) -> np.ndarray | None:
    """A user value as [Q] (weights) or [Q, D] (means, scales: 1-D arrays as [Q, 1]); None
    stays None (unset). Scalars are refused: every component has its own value."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or np.ndim(value) == 0:
        raise ValueError(f"give one value per component (Q = {Q}); got {value!r}")
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 1 and dims == 2:
        arr = arr[:, None]
    if arr.ndim != dims:
        raise ValueError(f"expected {'[Q]' if dims == 1 else '[Q, D] or [Q]'} values; got shape "
                         f"{arr.shape}")
    return arr


def _spread_and_gap(X: Tensor) -> tuple[Tensor, Tensor]:
    """Per column: the range (max − min) and the median gap between sorted distinct values
    (1 where a column has fewer than two distinct values)."""
    spread, gap = [], []
    for d in range(X.shape[1]):
        values = torch.unique(X[:, d].detach())  # sorted
        if values.numel() < 2:
            spread.append(1.0)
            gap.append(1.0)
            continue
        spread.append(float(values[-1] - values[0]))
        gap.append(float(torch.diff(values).median()))
    return (torch.tensor(spread, dtype=X.dtype), torch.tensor(gap, dtype=X.dtype))


def _spectrum_start(X: np.ndarray, y: np.ndarray, Q: int, oversample: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Means and scales [Q, D] and weight shares [Q] (summing to 1) from the periodogram
    peaks of each column of X [N, D] against y [N] (see `SpectralMixture.from_data`)."""
    y = y - y.mean()
    D = X.shape[1]
    means, scales, heights = np.empty((Q, D)), np.empty((Q, D)), np.zeros((Q, D))
    for d in range(D):
        means[:, d], scales[:, d], heights[:, d] = _column_peaks(X[:, d], y, Q, oversample)
    shares = heights.mean(1)
    return means, scales, shares / shares.sum()


def _periodogram(x: np.ndarray, y: np.ndarray, freqs: np.ndarray) -> np.ndarray:
    """The Lomb–Scargle periodogram of centred y at the frequencies (cycles per unit of x),
    scipy's: P(ν) = ½[(Σ y cos ω(x − t))²/Σ cos² ω(x − t) + (Σ y sin ω(x − t))²/Σ sin²
    ω(x − t)], ω = 2πν, tan 2ωt = Σ sin 2ωx/Σ cos 2ωx."""
    from scipy.signal import lombscargle  # imported here: scipy.signal is slow to import

    return np.asarray(lombscargle(x, y, 2.0 * math.pi * freqs))


def _column_peaks(x: np.ndarray, y: np.ndarray, Q: int, oversample: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Means, scales and peak heights [Q] of one column's Q highest periodogram peaks (see
    `SpectralMixture.from_data`); missing peaks get `initialise_from_data`'s values and the
    smallest height found (or 1)."""
    values = np.unique(x)
    if values.shape[0] < 2:
        return np.full(Q, 1e-6), np.ones(Q), np.ones(Q)
    spread = float(values[-1] - values[0])
    gap = float(np.median(np.diff(values)))
    nyquist = 0.5 / gap
    step = 1.0 / (spread * oversample)
    freqs = np.arange(1, max(3, int(nyquist / step)) + 1) * step
    power = _periodogram(x, y, freqs)
    inner = np.flatnonzero((power[1:-1] > power[:-2]) & (power[1:-1] >= power[2:])) + 1
    peaks = inner[np.argsort(-power[inner], kind="stable")][:Q]
    means = (np.arange(Q) + 0.5) / Q * nyquist
    scales = np.full(Q, 1.0 / spread)
    heights = np.full(Q, float(power[peaks].min()) if peaks.size else 1.0)
    for q, i in enumerate(peaks):
        left, mid, right = power[i - 1], power[i], power[i + 1]
        bend = left - 2.0 * mid + right
        offset = 0.5 * (left - right) / bend if bend < 0 else 0.0
        means[q] = freqs[i] + step * float(np.clip(offset, -0.5, 0.5))
        lo = i
        while lo > 0 and power[lo] > 0.5 * mid:
            lo -= 1
        hi = i
        while hi < power.shape[0] - 1 and power[hi] > 0.5 * mid:
            hi += 1
        scales[q] = max(step, 0.5 * (hi - lo) * step / math.sqrt(2.0 * math.log(2.0)))
        heights[q] = mid
    return means, scales, heights
