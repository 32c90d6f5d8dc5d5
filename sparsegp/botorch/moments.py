"""The joint predictive moments a wrapped sparsegp model gives BoTorch: over each q-batch
of test points, per fantasy and per output, from joint predictions over chunks of at most
`POINTS_PER_CALL` points (the predictive covariance is computed over all of a chunk's)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor, nn

#: At most this many test points go into one joint prediction (the q-batches of a chunk of
#: the batch, times the fantasies): the predictive covariance is computed over all of them.
POINTS_PER_CALL = 256


@runtime_checkable
class Predictive(Protocol):
    """A wrapped sparsegp model as the wrapper uses it (what `check_model` checks): joint
    predictions at tensor inputs [P, d], as tensors (mean [P], or [P, F] for F fantasies or
    P outputs; covariance [P, P], or [F, P, P])."""

    def predict_f(self, Xnew: Tensor, full_cov: bool = False) -> tuple[Tensor, Tensor]: ...

    def predict_y(self, Xnew: Tensor, full_cov: bool = False) -> tuple[Tensor, Tensor]: ...

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]: ...


def member_moments(model: Predictive, X: Tensor, observed: bool) -> tuple[Tensor, Tensor]:
    """Mean [R, F, q] and covariance [R, F, q, q] of a model of F fantasies at X
    [R, F, q, d]: row r's f-th q-batch under fantasy f, from joint predictions over chunks of
    rows."""
    R, F, q, d = X.shape
    predict = model.predict_y if observed else model.predict_f
    rows = max(1, POINTS_PER_CALL // (F * q))
    means, covs = [], []
    for start in range(0, R, rows):
        chunk = X[start:start + rows]
        c = chunk.shape[0]
        mean, cov = predict(chunk.reshape(c * F * q, d), full_cov=True)  # [P, F], [F, P, P]
        i = torch.arange(c, device=mean.device)[:, None]
        f = torch.arange(F, device=mean.device)[None, :]
        means.append(mean.reshape(c, F, q, F)[i, f, :, f])  # [c, F, q]
        covs.append(cov.reshape(F, c, F, q, c, F, q)[f, i, f, :, i, f, :])  # [c, F, q, q]
    return torch.cat(means), torch.cat(covs)


def shared_moments(model: Predictive, X: Tensor, observed: bool) -> tuple[Tensor, Tensor]:
    """Mean [R, F, q] and covariance [R, F, q, q] of a model of F fantasies (or F outputs)
    at X [R, q, d], the same inputs under every fantasy: joint predictions over chunks of
    rows give every fantasy at once (its means [P, F], its covariances [F, P, P] over
    P ≤ `POINTS_PER_CALL` points), of which each row's q-block is kept. Memory O(F·P²) per
    call and R·q/P calls, where taking each fantasy's inputs apart would predict at F times
    as many points."""
    R, q, d = X.shape
    predict = model.predict_y if observed else model.predict_f
    rows = max(1, POINTS_PER_CALL // q)
    means, covs = [], []
    for start in range(0, R, rows):
        chunk = X[start:start + rows]
        c = chunk.shape[0]
        mean, cov = predict(chunk.reshape(c * q, d), full_cov=True)  # [P, F], [F, P, P]
        if mean.dim() == 1:  # one output, no fantasies: F = 1
            mean, cov = mean[:, None], cov[None]
        F = mean.shape[-1]
        i = torch.arange(c, device=mean.device)
        means.append(mean.reshape(c, q, F).transpose(1, 2))  # [c, F, q]
        covs.append(cov.reshape(F, c, q, c, q)[:, i, :, i, :])  # [c, F, q, q]
    return torch.cat(means), torch.cat(covs)


@contextmanager
def inputs_only(model: Predictive) -> Iterator[None]:
    """Predictions differentiable with respect to the inputs only: the model's parameters are
    frozen for the call (its cached posterior serves) and restored afterwards."""
    live = [p for p in model.parameters() if p.requires_grad]
    for p in live:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in live:
            p.requires_grad_(True)
