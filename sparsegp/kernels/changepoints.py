"""Change-point kernels: one kernel per region of one input column, switched by sigmoids."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor, nn

from ..parameters import UserValue, as_user_array
from ..runtime.config import POSITIVE_FLOOR
from ..validation import ArrayLike
from .base import Kernel, as_inputs, check_input_pair, kernel_from_config


class ChangePoints(Kernel):
    """k(x, x') = Σ_i a_i(t) k_i(x, x') a_i(t'), t = x[dim], switching from kernel i − 1 to
    kernel i around the location l_i with steepness s_i (as GPflow's `ChangePoints`): with the
    locations sorted, a_i(t) = σ(s_{i−1}(t − l_{i−1})) σ(−s_i(t − l_i)) (no first factor for
    the first kernel, no second for the last), σ the logistic sigmoid. Far from every
    location, k is the one kernel of that region (and 0 between points of different regions):
    s → ∞ gives the piecewise kernel; it is positive semi-definite as a sum of kernels scaled
    by a_i(t) a_i(t').

    Shapes: `kernels` a list of P ≥ 2 kernels on the inputs [N, D] (every column; D = 1 for
    a time series), locations [P − 1] (learned, unconstrained, read sorted, each keeping its
    own steepness), steepness [] or [P − 1] (learned, positive); X [N, D], X2 [N2, D] ->
    K [N, N2], K_diag [N]. `dim` is the input column that the change points lie along.
    Unset locations start at that column's quantiles i/P (regions of equal counts), an unset
    steepness at 10/(the column's range); each kernel starts from the data with the full
    signal variance. `locations` is the learned tensor itself; set it with
    `set_value("locations", values)`.

    Example:

        >>> import torch, sparsegp as sg
        >>> k = sg.kernels.ChangePoints(
        ...     [sg.kernels.SquaredExponential(lengthscale=1.0, variance=1.0),
        ...      sg.kernels.Constant(variance=3.0)], locations=[0.0], steepness=50.0)
        >>> X = torch.tensor([[-2.0], [2.0], [3.0]], dtype=torch.float64)
        >>> [round(v, 6) for v in k.K_diag(X).tolist()]  # the first kernel left of 0, then 3
        [1.0, 3.0, 3.0]
        >>> round(k.K(X)[0, 1].item(), 6), k.config()["args"]["dim"]  # across the change: 0
        (0.0, 0)
    """

    #: The kernels of the regions: an `nn.ModuleList`, typed as the kernels it holds.
    kernels: Sequence[Kernel]

    def __init__(self, kernels: Sequence[Kernel], locations: ArrayLike | None = None,
                 steepness: ArrayLike | None = None,
                 *, dim: int = 0) -> None:
        super().__init__()
        if isinstance(kernels, Kernel) or not isinstance(kernels, (list, tuple)) or len(kernels) < 2:
            raise ValueError(f"ChangePoints takes a list of at least 2 kernels; got {kernels!r}")
        for k in kernels:
            if not isinstance(k, Kernel):
                raise TypeError(f"ChangePoints takes kernels; got {type(k).__name__}")
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 0:
            raise ValueError(f"dim must be a non-negative column index; got {dim!r}")
        self.kernels = cast("Sequence[Kernel]", nn.ModuleList(kernels))
        dims = {k.input_dim for k in kernels if k.input_dim is not None}
        if len(dims) > 1:
            raise ValueError(f"the kernels require inputs of different dimensions {sorted(dims)}")
        self.input_dim = dims.pop() if dims else None
        self.evaluation_cost = sum(k.evaluation_cost for k in kernels)
        self.dim: int = int(dim)
        P = len(kernels)
        if locations is None:
            self._unset.add("locations")
            locations = np.arange(1, P) / P
        loc = torch.as_tensor(np.asarray(locations, dtype=np.float64))
        if loc.shape != (P - 1,) or not bool(torch.isfinite(loc).all()):
            raise ValueError(f"locations must be {P - 1} finite numbers (one fewer than the "
                             f"kernels); got {locations!r}")
        self._add_free("locations", loc)
        self._declare("steepness", steepness, 1.0, POSITIVE_FLOOR)
        s = self.value("steepness")
        if s.dim() == 1 and s.shape[0] != P - 1:
            raise ValueError(f"steepness must be a scalar or {P - 1} values (one per location); "
                             f"got shape {tuple(s.shape)}")

    steepness = UserValue()

    def _column(self, X: Tensor) -> Tensor:
        if X.shape[1] <= self.dim:
            raise ValueError(f"the change points lie along input column {self.dim}, but X has "
                             f"{X.shape[1]} columns")
        return X[:, self.dim]

    def _activations(self, X: Tensor) -> Tensor:
        """a_i(t) of every input and kernel. Shapes: X [N, D] -> [P, N]."""
        t = self._column(X)
        loc, order = torch.sort(self.value("locations"))
        s = self.value("steepness").expand(loc.shape[0])[order]
        z = s[:, None] * (t[None, :] - loc[:, None])  # [P − 1, N]
        ones = torch.ones_like(z[:1])
        starts = torch.cat([ones, torch.sigmoid(z)])  # switched on after location i − 1
        stops = torch.cat([torch.sigmoid(-z), ones])  # switched off after location i
        return starts * stops

    def K(self, X: Tensor, X2: Tensor | None = None) -> Tensor:
        check_input_pair(X, X2)
        a = self._activations(X)
        a2 = a if X2 is None else self._activations(X2)
        return cast(Tensor, sum(a[i][:, None] * k.K(X, X2) * a2[i][None, :]
                                for i, k in enumerate(self.kernels)))

    def K_diag(self, X: Tensor) -> Tensor:
        a = self._activations(as_inputs(X))
        return cast(Tensor, sum(a[i] ** 2 * k.K_diag(X) for i, k in enumerate(self.kernels)))

    def initialise_from_data(self, X: Tensor, signal_variance: float) -> None:
        t = self._column(X).detach()
        P = len(self.kernels)
        low, high = (float(t.min()), float(t.max())) if t.numel() else (0.0, 1.0)
        span = high - low if high > low else 1.0
        if "locations" in self._unset:
            q = torch.arange(1, P, dtype=t.dtype) / P
            self._assign("locations", torch.quantile(t, q) if t.numel() else low + span * q)
        if "steepness" in self._unset:
            self._assign("steepness", 10.0 / span)
        for k in self.kernels:
            k.initialise_from_data(X, signal_variance)

    def config(self) -> dict[str, Any]:
        cfg = super().config()
        cfg["args"]["locations"] = as_user_array(self.value("locations")).tolist()
        cfg["args"]["dim"] = self.dim
        cfg["kernels"] = [k.config() for k in self.kernels]
        return cfg

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> ChangePoints:
        return cls([kernel_from_config(c) for c in cfg["kernels"]], **cfg.get("args", {}))

    def __repr__(self) -> str:
        parts = ", ".join(repr(k) for k in self.kernels)
        loc = ", ".join(f"{v:.4g}" for v in as_user_array(self.value("locations")))
        return f"ChangePoints([{parts}], locations=[{loc}], steepness={self.steepness})"
