"""Exact GP regression, O(N³): the reference every approximation is measured against."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from ..diagnostics import Diagnostics, diagnose
from ..diagnostics.report import (
    EXACT_MAX_DATA,
    FAR_LENGTHSCALES,
    GAP_PER_POINT,
    MERGE_FRACTION,
    NOISE_FRACTION,
    QUADRATIC_MAX_DATA,
)
from ..kernels.base import Kernel
from ..means import MeanLike
from ..posteriors import ExactPosterior, restore_exact
from ..runtime.allocator import check_request
from ..validation import ArrayLike
from .core.conditioning import condition_on_observations
from .core.options import RegressionOptions
from .core.regression import Regression

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


class GPR(Regression[RegressionOptions]):
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

    probes_predictions: ClassVar[bool] = True  # the settling rule (`fitting.settle_rule`)
    saves_data_by_default: ClassVar[bool] = True

    def __init__(
        self, X: ArrayLike, y: ArrayLike, kernel: Kernel | None = None,
        noise_variance: ArrayLike | None = None, *, noise_groups: ArrayLike | None = None,
        mean: MeanLike = None, jitter: float = 0.0, standardize_X: bool = False,
        standardize_y: bool = True, dtype: torch.dtype | None = None,
    ) -> None:
        self._build_from_data(X, y, RegressionOptions(
            kernel=kernel, noise_variance=noise_variance, noise_groups=noise_groups, mean=mean,
            jitter=jitter, standardize_X=standardize_X, standardize_y=standardize_y,
            dtype=dtype))
        # refused here rather than by the allocator's raw error at the first evaluation
        assert self.X is not None
        check_exact_memory(self.num_data, self.X.element_size(), self.device)

    def _objective(self) -> Tensor:
        return self._exact_objective(self.jitter)

    def _build_posterior(self) -> ExactPosterior:
        return self._exact_posterior(self.jitter)

    def _restore_posterior(self, saved: dict[str, Any]) -> ExactPosterior:
        return restore_exact(self.kernel, saved, self.prior_mean())

    # -- conditioning ---------------------------------------------------------------------
    def condition_on_observations(self, X: ArrayLike, y: ArrayLike,
                                  noise: ArrayLike | None = None) -> GPR:
        """A new model conditioned on the observations y at X, at the current hyperparameters,
        without refitting; this model is unchanged.

        X [k, D] and y [k] in the units of the training data (numpy, lists or tensors; the
        model's standardisation is applied to them, not recomputed). y [F, k] holds F
        fantasies at the same X: the new model's predictions then carry them as their last
        dimension (mean and variance [N*, F], covariances [F, N*, N*]). `noise`: the known
        noise variance of the new points (a number or [k], units of y), for models fitted with
        a noise variance per point; models with one σ² give it to the new points.

        Cost: the Cholesky factor is extended by k rows, O(N²k), sharing the original's
        factor (a refit is O((N + k)³)). The new model's posterior is cached: its first
        prediction builds nothing. Its parameters are copies of this model's, frozen
        (`requires_grad_(True)` to train it on all N + k points). Tensor X or y with a graph
        give predictions differentiable with respect to them (built once: one backward pass
        per conditioned model, or `retain_graph=True`). A model of F fantasies
        (`num_fantasies`) predicts, saves, loads and can be conditioned again, but holds no
        single data set to fit or evaluate an objective on. See
        `sparsegp.models.core.conditioning`.

        Example:

            >>> import numpy as np, sparsegp as sg
            >>> X, y = sg.datasets.snelson()
            >>> m = sg.GPR(X[:50], y[:50], noise_variance=0.1)
            >>> m2 = m.condition_on_observations(X[50:55], y[50:55])
            >>> m2.num_data, m.num_data
            (55, 50)
            >>> fantasies = m.condition_on_observations(X[50:52], np.zeros((8, 2)))
            >>> fantasies.predict(X[:3])[0].shape
            (3, 8)
        """
        return condition_on_observations(self, X, y, noise)

    def _conditioning_member(self) -> None:
        """What conditioning updates: the exact GP (no member of the collapsed family)."""
        return None

    @property
    def num_fantasies(self) -> int | None:
        """F for a model conditioned on F fantasies (y [F, k]), else None."""
        return self.spec.fantasies

    # -- diagnostics ----------------------------------------------------------------------
    def diagnostics(self, *, merge_fraction: float = MERGE_FRACTION,
                    far_lengthscales: float = FAR_LENGTHSCALES,
                    noise_fraction: float = NOISE_FRACTION,
                    gap_per_point: float = GAP_PER_POINT, exact_max_data: int = EXACT_MAX_DATA,
                    extra_inducing: int | None = None, overestimate_nats: float | None = None,
                    quadratic_max_data: int = QUADRATIC_MAX_DATA) -> Diagnostics:
        """The exact evidence and the noise check (the bounds are the evidence itself); see
        `sparsegp.diagnostics.diagnose` for the checks and their thresholds."""
        return diagnose(self, merge_fraction=merge_fraction, far_lengthscales=far_lengthscales,
                        noise_fraction=noise_fraction, gap_per_point=gap_per_point,
                        exact_max_data=exact_max_data, extra_inducing=extra_inducing,
                        overestimate_nats=overestimate_nats,
                        quadratic_max_data=quadratic_max_data)
