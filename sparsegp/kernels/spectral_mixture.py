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
from .base import Kernel, as_inputs, check_input_pair
from .stationary import scaled_squared_distance

#: Floor of the mean frequencies: 0 (a component at frequency ~0 is a squared exponential).
MEAN_FLOOR = 0.0


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
    `num_mixtures` Q, or arrays whose first dimension is Q. Unset values start from the data
    GPyTorch-style, from the spread of the inputs, but with no random draw: per column d, with
    range R_d (max − min) and the median gap g_d between its sorted distinct values, the
    means μ_qd = (q + ½)/Q · 1/(2 g_d) spread evenly below the Nyquist frequency of that gap,
    the scales s_qd = 1/R_d (envelopes as long as the data), the weights the signal variance
    over Q each. K is positive semi-definite: every component's spectral density is a
    non-negative sum of Gaussians (Bochner). Evaluation costs Q·D elementwise passes over
    [N, N2] and no larger temporaries.

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

    def __init__(self, num_mixtures: int | None = None, weights: Any = None, means: Any = None,
                 scales: Any = None) -> None:
        super().__init__()
        Q = _mixture_count(num_mixtures, weights, means, scales)
        self.num_mixtures: int = Q
        centres = (torch.arange(Q, dtype=torch.float64) + 0.5) / Q
        self._declare("weights", _components(weights, Q, 1), torch.full((Q,), 1.0 / Q),
                      POSITIVE_FLOOR)
        self._declare("means", _components(means, Q, 2), centres[:, None], MEAN_FLOOR, max_dim=2)
        self._declare("scales", _components(scales, Q, 2), torch.ones(Q, 1), POSITIVE_FLOOR,
                      max_dim=2)

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

    def initialise_from_data(self, X: Tensor, signal_variance: float) -> None:
        Q = self.num_mixtures
        if "weights" in self._unset:
            self._assign("weights", torch.full((Q,), signal_variance / Q, dtype=X.dtype))
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


def _mixture_count(num_mixtures: Any, *arrays: Any) -> int:
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


def _components(value: Any, Q: int, dims: int) -> Any:
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
