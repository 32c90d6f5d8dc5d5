"""Streaming sparse GP classification by Power EP (Bui, Nguyen & Turner 2017): the
`StreamingSGPC` that `SGPC.update` makes from a fitted SGPC and a new batch of data, without
the old data.

The old data enter as the summary of the old posterior q_old(a) that `StreamingSGPR` keeps
(`objectives.online.Summary`: r pseudo-observations h = Tᵀa + ε, ε ~ N(0, I)). That factor
is Gaussian, so Power EP (power α) projects it without error onto one block site on the new
inducing variables b (the block of docs/math.md §10, noise I + αQ_h), whatever the cavity:
its statistics join the new batch's sites in q(b) (`pep_classification.with_block`), and
only the new batch's sites are swept. The energy is SGPC's (docs/math.md §5) plus the
block's terms (§10.3); hyperparameters and inducing inputs b are fitted to it as SGPC's
are. Cost O(N_new·M² + M³) per update. The new model keeps the old model's units (x_shift,
x_scale) and label convention.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from ...diagnostics.latent import LatentDiagnostics, diagnose_latent
from ...diagnostics.report import FAR_LENGTHSCALES, MERGE_FRACTION
from ...features.base import InducingLike
from ...objectives.collapsed.members import Statistics, family
from ...objectives.online.regression import Summary, summary_statistics
from ...validation import ArrayLike
from ..core import streaming
from ..core.model import Parts
from ..core.spec import ModelSpec, StreamSpec
from .model import SGPC, SGPCSpec


@dataclass(frozen=True, kw_only=True)
class StreamingSGPCSpec(SGPCSpec):
    """A `StreamingSGPC`'s spec: an SGPC's and its history of updates."""

    streaming: StreamSpec


class StreamingSGPC(SGPC, streams=SGPC):
    """An SGPC fitted to a new batch of data and a summary of the data before it (made by
    `SGPC.update`; Bui, Nguyen & Turner 2017, with Power EP). q(u) holds the new batch's
    sites and one Gaussian block site for the old data; `log_marginal_likelihood()` is the
    Power-EP energy of the new batch given the summary (an approximation to
    log p(y_new | y_old)). `X` and `y` are the new batch only (internal units), `num_data`
    its rows and `num_data_seen` every row the chain of updates has seen. The summary is
    saved with the model (`save`), so a loaded model predicts, refits (with
    include_data=True) and updates as before. `diagnostics()` report the energy and the
    inducing inputs against the new batch and the old inducing inputs.

    Example:

        >>> import numpy as np, sparsegp as sg
        >>> rng = np.random.default_rng(0)
        >>> X = rng.uniform(-3, 3, (200, 1)); y = (np.sin(2 * X[:, 0]) > 0).astype(int)
        >>> m = sg.SGPC(X[:100], y[:100], inducing_points=8)
        >>> _ = m.update_sites()
        >>> new = m.update(X[100:], y[100:], fit=False)  # never sees X[:100] again
        >>> type(new).__name__, new.num_data, new.num_data_seen, new.num_updates
        ('StreamingSGPC', 100, 200, 1)
        >>> new.predict_proba(X[:3]).shape
        (3,)
    """

    spec: StreamingSGPCSpec
    spec_type: ClassVar[type[ModelSpec]] = StreamingSGPCSpec

    summary_Z: Tensor  # buffers: the summary of the data before this batch
    summary_T: Tensor
    summary_h: Tensor
    summary_offset: Tensor
    num_data_seen = streaming.FromStream("seen", streaming.NUM_DATA_SEEN_DOC)
    num_updates = streaming.FromStream("updates", streaming.NUM_UPDATES_DOC)

    def _declare(self, spec: ModelSpec, parts: Parts) -> None:
        super()._declare(spec, parts)
        assert isinstance(spec, StreamingSGPCSpec)
        for name, value in streaming.summary_buffers(spec.streaming, spec.input_dim).items():
            self.register_buffer(name, value)

    def _load_from_state_dict(self, state_dict: Mapping[str, Any], prefix: str, *args: Any,
                              **kwargs: Any) -> None:
        streaming.take_summary_shapes(self, state_dict, prefix)  # a summary of other sizes
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @classmethod
    def from_update(cls, model: SGPC, X_new: ArrayLike, y_new: ArrayLike,
                    inducing_points: InducingLike = None, fit: bool = True,
                    **fit_options: Any) -> SGPC:
        """`model.update(X_new, y_new, ...)` (see `SGPC.update`)."""
        return update(model, X_new, y_new, inducing_points, fit, **fit_options)

    def old_summary(self) -> Summary:
        """The summary of the data before this batch (internal units)."""
        return streaming.held_summary(self)

    def _stream_start(self) -> None:
        """An update without a fit sweeps the new batch's sites to convergence at the old
        hyperparameters."""
        self.update_sites()

    def _gaussian_block(self) -> Callable[[Tensor], Statistics]:
        """L = chol(K_bb) ↦ the old data's block statistics (power α, noise I + αQ_h)."""
        fam = family("pep", self.alpha)
        return lambda L: summary_statistics(self.kernel, self.feature, L, self.old_summary(),
                                            fam)

    def diagnostics(self, *, merge_fraction: float = MERGE_FRACTION,
                    far_lengthscales: float = FAR_LENGTHSCALES) -> LatentDiagnostics:
        """The Power-EP energy of the new batch given the summary, and where the inducing
        variables sit, judged against the new inputs and the old inducing inputs (where the
        old data are represented); as for an SGPC, there is no upper bound (`kwargs`: the
        thresholds of `sparsegp.diagnostics.diagnose_latent`)."""
        view = self._latent_view()
        assert self.X is not None
        return diagnose_latent(view._replace(
            objective_name="Power-EP energy of the new batch given the summary, an "
                           "approximation to log p(y_new | y_old)",
            X=torch.cat([self.X, self.summary_Z.to(self.X)], 0), num_data=self.X.shape[0],
            no_upper_bound="for Power EP"), merge_fraction=merge_fraction,
            far_lengthscales=far_lengthscales)

    def minibatch_energy(self, idx: Tensor | None, statistics_idx: Tensor | None = None,
                         totals: Callable[[Tensor], tuple[Tensor, Tensor]] | None = None
                         ) -> Tensor:
        """SGPC's energy (or its minibatch estimate) with the old data's block, plus the
        summary's constant −log p_old(h) − (r/2) log 2π (docs/math.md §10)."""
        F = super().minibatch_energy(idx, statistics_idx, totals)
        return F + self.summary_offset.to(F)


def update(model: SGPC, X_new: ArrayLike, y_new: ArrayLike,
           inducing_points: InducingLike = None, fit: bool = True, **fit_options: Any
           ) -> SGPC:
    """`model.update(X_new, y_new, inducing_points, fit, **fit_options)`: the streamed model
    that has seen the data of `model` (through its posterior) and the new batch (see
    `SGPC.update`)."""
    if not isinstance(model, SGPC):
        raise TypeError(f"update takes an SGPC; got {type(model).__name__}")
    return model.update(X_new, y_new, inducing_points, fit, **fit_options)
