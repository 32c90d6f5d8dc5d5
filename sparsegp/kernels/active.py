"""A kernel on some of the input columns: the parts of additive models on tabular data."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from torch import Tensor, nn

from .base import Columns, Kernel, as_inputs, check_input_pair, kernel_from_config


class Active(Kernel):
    """k(x, x') = k_inner(x[dims], x'[dims]): `kernel` sees only the input columns `dims`
    (GPflow's `active_dims=`, GPyTorch's `active_dims`, as a wrapper). Sums and products of
    such kernels on different columns are additive and ANOVA-style models:
    `Active(SquaredExponential(), [0]) + Active(Matern32(), [1, 2])`.

    The inputs X [N, D] (and X2, and the inducing points Z [M, D] of `InducingPoints`, which
    keep every column) are sliced to [N, len(dims)] before the inner kernel; an ARD
    lengthscale of the inner kernel has one value per column of `dims`, in that order, and
    unset values start from the data of those columns. Any D > max(dims) is accepted.
    Inter-domain features (Multiscale, Fourier, ...) have their covariances written for one
    kernel class each and do not cover a kernel on a subset of the columns: a model refuses
    the pair with a TypeError that names it. Shapes: X [N, D], X2 [N2, D] -> K [N, N2],
    K_diag [N].

    Example:

        >>> import torch, sparsegp as sg
        >>> k = (sg.kernels.Active(sg.kernels.SquaredExponential(lengthscale=1.0), [0])
        ...      + sg.kernels.Active(sg.kernels.Linear(variance=0.5), [2]))
        >>> X = torch.tensor([[0.0, 9.0, 1.0], [1.0, -9.0, 2.0]], dtype=torch.float64)
        >>> [round(v, 6) for v in k.K_diag(X).tolist()]  # 1 + 0.5 x₂² (column 1 unused)
        [1.5, 3.0]
        >>> k.kernels[1].dims, k.config()["kernels"][0]["dims"]
        ([2], [0])
    """

    def __init__(self, kernel: Kernel, dims: Columns) -> None:
        super().__init__()
        if not isinstance(kernel, Kernel):
            raise TypeError(f"Active takes a kernel; got {type(kernel).__name__}")
        self.dims: list[int] = _checked_dims(dims)
        if kernel.input_dim is not None and kernel.input_dim != len(self.dims):
            raise ValueError(f"{type(kernel).__name__} requires inputs of {kernel.input_dim} "
                             f"columns but Active gives it {len(self.dims)} ({self.dims})")
        self.kernel = kernel
        self.evaluation_cost = kernel.evaluation_cost

    def _slice(self, X: Tensor) -> Tensor:
        if X.shape[-1] <= max(self.dims):
            raise ValueError(f"the kernel acts on input columns {self.dims}, but the inputs have "
                             f"{X.shape[-1]} columns")
        return X[..., self.dims]

    def K(self, X: Tensor, X2: Tensor | None = None) -> Tensor:
        check_input_pair(X, X2)
        return self.kernel.K(self._slice(X), None if X2 is None else self._slice(X2))

    def K_blocks(self, X: Tensor) -> Tensor:
        return self.kernel.K_blocks(self._slice(X))

    def K_diag(self, X: Tensor) -> Tensor:
        return self.kernel.K_diag(self._slice(as_inputs(X)))

    def initialise_from_data(self, X: Tensor, signal_variance: float) -> None:
        self.kernel.initialise_from_data(self._slice(X), signal_variance)

    def config(self) -> dict[str, Any]:
        return {"type": "Active", "dims": list(self.dims), "kernel": self.kernel.config()}

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Active:
        return cls(kernel_from_config(cfg["kernel"]), cfg["dims"])

    def __repr__(self) -> str:
        return f"Active({self.kernel!r}, dims={self.dims})"


def _checked_dims(dims: Columns) -> list[int]:
    """Distinct non-negative column indices, in the order given."""
    if isinstance(dims, (numbers.Integral, np.integer)) and not isinstance(dims, bool):
        dims = [dims]
    given = dims if isinstance(dims, (list, tuple, range, np.ndarray)) else None
    ok = given is not None and len(given) > 0 and all(
        isinstance(d, (numbers.Integral, np.integer)) and not isinstance(d, bool) for d in given)
    out = [int(d) for d in given] if ok and given is not None else []
    if not ok or min(out) < 0:
        raise ValueError(f"dims must be a non-empty list of non-negative column indices; got "
                         f"{dims!r}")
    if len(set(out)) != len(out):
        raise ValueError(f"dims must not repeat a column; got {out}")
    return out


def columns_seen(module: nn.Module, columns: list[int]) -> dict[int, list[int]]:
    """The input columns each part of `module` (a kernel) sees, by the part's id: `columns`,
    but under an `Active`, whose parts see its `dims` of the columns it is given."""
    seen = {id(module): columns}
    inner = [columns[d] for d in module.dims] if isinstance(module, Active) else columns
    for child in module.children():
        seen.update(columns_seen(child, inner))
    return seen
