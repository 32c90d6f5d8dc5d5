"""Streaming sparse GP regression (Bui, Nguyen & Turner 2017): the `StreamingSGPR` that
`SGPR.update` makes from a fitted SGPR and a new batch of data, without the old data.

The old data are carried by a summary of the old model's posterior q_old(a) over its
inducing inputs a and its prior p_old(a) (`objectives.online.Summary`: r pseudo-observations,
M_a² numbers); the new model learns its hyperparameters and inducing inputs b from the new
batch and the summary alone (`objectives.online.streaming_objective`), in O(N_new·M² + M³).
It predicts, fits, saves and loads as an SGPR does, and can be updated again. It keeps the
old model's units (its x_shift, x_scale, y_shift, y_scale), whatever the new batch's
moments: the summary is in those internal units.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch
from torch import Tensor

from ...diagnostics import RegressionView
from ...features.base import InducingLike
from ...objectives.online.bounds import streaming_upper_bound
from ...objectives.online.regression import (
    StreamingProblem,
    Summary,
    streaming_objective,
    streaming_posterior_q,
)
from ...posteriors import Posterior, SparsePosterior
from ...validation import ArrayLike
from ..core import streaming
from ..core.model import Parts
from ..core.spec import ModelSpec, StreamSpec
from .model import SGPR, SGPRSpec


@dataclass(frozen=True, kw_only=True)
class StreamingSGPRSpec(SGPRSpec):
    """A `StreamingSGPR`'s spec: an SGPR's and its history of updates."""

    streaming: StreamSpec


class StreamingSGPR(SGPR, streams=SGPR):
    """An SGPR fitted to a new batch of data and a summary of the data before it (made by
    `SGPR.update`; Bui, Nguyen & Turner 2017). `log_marginal_likelihood()` is the streaming
    objective (for "vfe" a lower bound on the approximate log p(y_new | y_old): the new
    batch's evidence given what the summary keeps of the old data), `X` and `y` are the new
    batch only (internal units), `num_data` its rows and `num_data_seen` every row the chain
    of updates has seen. The summary of the old data (`old_summary()`: pseudo-observations
    h = Tᵀa + ε at the old inducing inputs) is in buffers saved with the model, so a loaded
    model predicts, refits (with include_data=True) and updates as before. `fit` runs
    L-BFGS-B without the checks after fitting (restarting from starting values taken from
    one batch would ignore the summary); `upper_bound()` bounds the evidence the objective
    approximates from above, and `diagnostics()` reports on the new batch and the summary
    together.

    Example:

        >>> import numpy as np, sparsegp as sg
        >>> X, y = sg.datasets.snelson()
        >>> left, right = np.argsort(X[:, 0])[:100], np.argsort(X[:, 0])[100:]
        >>> m = sg.SGPR(X[left], y[left], inducing_points=10)
        >>> result = m.fit(maxiter=50)
        >>> new = m.update(X[right], y[right], maxiter=50)  # never sees X[left] again
        >>> type(new).__name__, new.num_data, new.num_data_seen, new.num_inducing
        ('StreamingSGPR', 100, 200, 10)
        >>> mean, var = new.predict_y(X[:3])
        >>> mean.shape
        (3,)
    """

    spec: StreamingSGPRSpec
    spec_type: ClassVar[type[ModelSpec]] = StreamingSGPRSpec
    #: data-based starting values would come from the new batch alone and ignore the summary
    restarts_if_stuck: ClassVar[bool] = False

    summary_Z: Tensor  # buffers: the summary of the data before this batch
    summary_T: Tensor
    summary_h: Tensor
    summary_offset: Tensor
    num_data_seen = streaming.FromStream("seen", streaming.NUM_DATA_SEEN_DOC)
    num_updates = streaming.FromStream("updates", streaming.NUM_UPDATES_DOC)

    def _declare(self, spec: ModelSpec, parts: Parts) -> None:
        super()._declare(spec, parts)
        assert isinstance(spec, StreamingSGPRSpec)
        for name, value in streaming.summary_buffers(spec.streaming, spec.input_dim).items():
            self.register_buffer(name, value)

    def _load_from_state_dict(self, state_dict: Mapping[str, Any], prefix: str, *args: Any,
                              **kwargs: Any) -> None:
        streaming.take_summary_shapes(self, state_dict, prefix)  # a summary of other sizes
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @classmethod
    def from_update(cls, model: SGPR, X_new: ArrayLike, y_new: ArrayLike,
                    inducing_points: InducingLike = None, fit: bool = True, **fit_options: Any
                    ) -> SGPR:
        """`model.update(X_new, y_new, ...)` (see `SGPR.update`)."""
        return update(model, X_new, y_new, inducing_points, fit, **fit_options)

    def old_summary(self) -> Summary:
        """The summary of the data before this batch (internal units)."""
        return streaming.held_summary(self)

    def streaming_problem(self) -> StreamingProblem:
        """The model's objective as a pure value: the new batch's collapsed problem and the
        summary of the old data."""
        return StreamingProblem(self.collapsed_problem(), self.old_summary())

    def _objective(self) -> Tensor:
        return streaming_objective(self.streaming_problem())

    def _build_posterior(self) -> Posterior:
        L, q, used = streaming_posterior_q(self.streaming_problem())
        return SparsePosterior(self.kernel, self.feature, L, q, self.noise_rows(), used)

    def _covers_data(self, fixed: bool = True) -> bool:
        """Never the exact GP of its batch alone: the summary holds the data before it."""
        return False

    def _stream_start(self) -> None:
        """An update without a fit starts at the old hyperparameters: nothing to do."""

    def upper_bound(self) -> float:
        """An upper bound on the evidence the streamed objective approximates, log N([y; h];
        0, K̂ + Λ̂) − log p_old(h) at the current parameters: the new batch's density given
        the summary of the old data (`objectives.online.bounds`; any approximation's
        objective is below it at these inducing inputs)."""
        with torch.no_grad():
            U = streaming_upper_bound(self.streaming_problem())
        return float(U) + self._objective_offset()

    def diagnostic_view(self) -> RegressionView:
        """What the diagnostics read of this model: the new batch's collapsed problem and the
        summary of the data before it (see `RegressionView`)."""
        return replace(super().diagnostic_view(), summary=self.old_summary())


def update(model: SGPR, X_new: ArrayLike, y_new: ArrayLike,
           inducing_points: InducingLike = None, fit: bool = True, **fit_options: Any
           ) -> SGPR:
    """`model.update(X_new, y_new, inducing_points, fit, **fit_options)`: the streamed model
    that has seen the data of `model` (through its posterior) and the new batch (see
    `SGPR.update`)."""
    if not isinstance(model, SGPR):
        raise TypeError(f"update takes a fitted SGPR; got {type(model).__name__}")
    return model.update(X_new, y_new, inducing_points, fit, **fit_options)
