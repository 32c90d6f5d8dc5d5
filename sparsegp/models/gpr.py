"""Exact GP regression, O(N³): the reference every approximation is measured against."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..kernels.base import Kernel
from ..objectives.exact import exact_factors, exact_objective
from ..posteriors import ExactPosterior
from ..runtime.allocator import check_request
from .conditioning import Conditioning
from .options import RegressionOptions
from .regression import Bounded, GPModel

#: The N×N matrices the exact objective and its gradient hold at least, at their peak (the
#: factor, and the gradient's ½(ααᵀ − C⁻¹): objectives/exact.py).
EXACT_MATRICES = 2


def check_exact_memory(n: int, itemsize: int = 8, device: Any = None,
                       what: str | None = None,
                       advice: str = "use a sparse model (SGPR, or SVGP for minibatches)") -> None:
    """Refuse, before anything is allocated, an exact GP on `n` rows whose N×N matrices need
    more than the device's memory: a `MemoryRequestError` (a MemoryError) saying how much."""
    check_request(EXACT_MATRICES * n * n * itemsize,
                  what or f"GPR on {n} rows ({EXACT_MATRICES} {n}×{n} matrices)", advice,
                  device)


class GPR(Conditioning, Bounded, GPModel[RegressionOptions]):
    """Exact GP regression (Rasmussen & Williams 2006, ch. 2).

    Shapes: X [N, D], y [N]. `kernel=None` is a squared exponential with ARD lengthscales;
    unset hyperparameters start from the data (lengthscales from the input spread, signal
    variance var(y), noise var(y)/10). `jitter` (relative to the mean diagonal of K + σ²I)
    is 0 by default: the noise keeps the matrix positive definite.
    By default y is standardised inside (`standardize_y=True`): predictions, `noise_variance`
    and the objectives are in the units of y, the kernel's variance is relative to var(y);
    `standardize_y=False` models y as given. X is taken as given (`standardize_X=True`
    standardises its columns, and the lengthscales are then in their standard deviations).
    Shapes: `predict(Xnew [N*, D])` -> mean `[N*]`, var `[N*]` (numpy; `full_cov=True`: the
    covariance `[N*, N*]`).

    Example:

        >>> import sparsegp as sg
        >>> X, y = sg.datasets.snelson()
        >>> m = sg.GPR(X[::4], y[::4])
        >>> result = m.fit(maxiter=5)
        >>> mean, var = m.predict_y(sg.datasets.snelson_test_inputs())
        >>> mean.shape, var.shape, bool((var > 0).all())
        ((301,), (301,), True)
        >>> m.predict(X[:3], full_cov=True)[1].shape
        (3, 3)
    """

    probes_predictions = True  # the settling rule (`fitting.settle_rule`)

    saves_data_by_default = True

    def __init__(
        self, X: Any, y: Any, kernel: Kernel | None = None, noise_variance: Any = None, *,
        noise_groups: Any = None, mean: Any = None, jitter: float = 0.0,
        standardize_X: bool = False, standardize_y: bool = True, dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(X, y, RegressionOptions(
            kernel=kernel, noise_variance=noise_variance, noise_groups=noise_groups, mean=mean,
            jitter=jitter, standardize_X=standardize_X, standardize_y=standardize_y,
            dtype=dtype))
        # refused here rather than by the allocator's raw error at the first evaluation
        check_exact_memory(self.num_data, self.X.element_size(), self.device)

    def _residual(self) -> Tensor:
        return self.y - self.mean(self.X)

    def _objective(self) -> Tensor:
        return exact_objective(self.kernel, self.X, self._residual(), self.noise_rows(),
                               self.jitter)

    def _build_posterior(self) -> ExactPosterior:
        f = exact_factors(self.kernel.K(self.X), self._residual(), self.noise_rows(),
                          self.jitter)
        return ExactPosterior(self.kernel, self.X, f.L, f.a, self.noise_rows(), f.jitter,
                              self.prior_mean())

    def _restore_posterior(self, saved: dict[str, Any]) -> ExactPosterior:
        return ExactPosterior(self.kernel, saved["X"], saved["L"], saved["a"],
                              saved["noise_variance"], saved["jitter"], self.prior_mean())
