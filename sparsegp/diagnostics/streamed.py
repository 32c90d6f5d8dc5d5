"""The numbers `diagnose` reports for a streamed model (`StreamingSGPR`, a Gaussian
`StreamingSVGP`): a new batch of data and the summary of the data before it.

What the streamed objectives approximate is the evidence of the augmented data, the new batch
and the summary's r pseudo-observations (`objectives.online.bounds`): E = log p(y_new | the
summary) at the current hyperparameters. Defined for it and computed here: the streamed VFE
lower bound and the upper bound at the model's inducing inputs, a tighter upper bound with the
old inducing inputs Z_a and random new inputs added (which makes the summary's residual
vanish), E itself when N + r ≤ `exact_max_data`, the noise the new batch supports given the
pseudo-observations, and the inputs the inducing variables are judged against (the new batch
and Z_a, where the old data are represented). Not computed, and listed in `notes`: the
quadratic-form bound (written for one batch of data with one noise variance).
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ..distributed import is_distributed
from ..features.inducing_points import InducingPoints
from ..linalg import JitterWarning
from ..objectives.online.bounds import exact_streaming_evidence, streaming_bounds, summary_conditional
from ..objectives.online.regression import StreamingProblem, streaming_objective
from .noise import NoiseSupport, noise_support
from .view import RegressionView


class StreamedNumbers(NamedTuple):
    """What `streamed_numbers` computed (units of y except `support`, internal like the
    batch report's): the model's objective, the streamed VFE bound, the upper bound at the
    model's inducing inputs and at the enlarged set `tight_feature` (and the streamed VFE
    bound there, `tight_lower`: by how much more inducing inputs raise it), E (None when not
    computed), the noise support (None when not computed), the inputs [N + M_a, D] that
    stand for the data in the placement checks, and `notes` on what was not computed."""

    objective: float
    lower: float
    upper: float
    tight: float
    tight_feature: Any
    tight_lower: float
    exact: float | None
    support: NoiseSupport | None
    inputs: Tensor
    notes: list[str]


def streamed_numbers(view: RegressionView, extra: int | None, exact_max_data: int
                     ) -> StreamedNumbers:
    """The bounds, E and the noise support of a streamed model's view (`view.summary` set)."""
    p, summary = view.problem, view.summary
    if p is None or summary is None:
        raise ValueError("streamed diagnostics need the new batch's problem and the summary")
    if view.sharded and is_distributed():
        raise RuntimeError("the diagnostics of a streamed model run in one process: "
                           "torch.distributed is initialised")
    sp = StreamingProblem(p, summary)
    offset, N, r = view.offset, view.num_data, int(summary.T.shape[1])
    lower_t, upper_t = streaming_bounds(sp)
    lower, upper = float(lower_t) + offset, float(upper_t) + offset
    if view.objective is not None:  # the model's own (a streamed SVGP's ELBO)
        objective = view.objective + offset
    else:
        objective = lower if p.fam.mode == "vfe" else float(streaming_objective(sp)) + offset
    tight_lower, tight, feature = _tight(sp, view.X, extra)
    tight, tight_lower = tight + offset, tight_lower + offset
    notes = [f"the evidence is that of the new batch (N = {N}) given the summary of the data "
             f"before it ({r} pseudo-observations): log p(y_new | summary) at these "
             "hyperparameters, not the evidence of all the data seen",
             "quadratic-form upper bound: not computed (it is written for one batch of data "
             "with one noise variance, not for the summary's pseudo-observations)"]
    exact = None
    if N + r <= exact_max_data:
        exact = float(exact_streaming_evidence(sp)) + offset
    else:
        notes.append(f"exact evidence: not computed (N + r = {N + r} > exact_max_data = "
                     f"{exact_max_data})")
    support = None
    if exact_max_data > 0:
        rows = None
        if N > exact_max_data:
            g = torch.Generator().manual_seed(0)
            rows = torch.randperm(N, generator=g)[:exact_max_data].to(view.X.device)
        Kc, yc = summary_conditional(sp, rows)
        support = noise_support(Kc, yc, float(p.noise))
        notes.append("noise check: the evidence of the new batch given the pseudo-"
                     "observations, as a function of σ²")
    inputs = torch.cat([view.X, summary.Z.to(view.X)], 0)
    return StreamedNumbers(objective, lower, upper, tight, feature, tight_lower, exact, support,
                           inputs, notes)


def _tight(sp: StreamingProblem, X: Tensor, extra: int | None) -> tuple[float, float, Any]:
    """The streamed VFE bound and the upper bound (internal units) with the model's inducing
    inputs plus the old inducing inputs not among them and `extra` random new inputs
    (default min(N, max(2M, 200))), and that feature."""
    p, Za = sp.problem, sp.summary.Z.to(X)
    N, M = X.shape[0], p.feature.num_inducing
    extra = min(N, max(2 * M, 200)) if extra is None else min(N, int(extra))
    g = torch.Generator().manual_seed(0)
    idx = torch.randperm(N, generator=g)[:extra].to(X.device)
    if isinstance(p.feature, InducingPoints):  # what `update` makes
        Zb = p.feature.Z.detach().to(Za)
        new = ~(Za[:, None, :] == Zb[None, :, :]).all(-1).any(1)  # not already in b
        feature: Any = p.feature.extended(torch.cat([Za[new], X[idx]], 0))
    else:  # a feature that is not points: points alone, as many as it has and more
        idx = torch.randperm(N, generator=g)[:min(N, M + extra)].to(X.device)
        feature = InducingPoints(torch.cat([Za, X[idx]], 0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JitterWarning)  # jitter only loosens the bound
        lower, upper = streaming_bounds(sp._replace(problem=p._replace(feature=feature)))
    return float(lower), float(upper), feature
