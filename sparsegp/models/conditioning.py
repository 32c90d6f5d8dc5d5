"""`condition_on_observations`: a new model conditioned on extra observations at fixed
hyperparameters, without refitting (as GPyTorch's `get_fantasy_model` and BoTorch's
`Model.condition_on_observations`), for the exact GP (`GPR`) and the collapsed family of
`SGPR` (VFE, DTC, FITC, point-wise Power EP).

The new model is a copy of the original (which is left unchanged) whose posterior is
updated rather than rebuilt (`objectives.conditioning`): the exact GP's Cholesky factor is
extended by one block row, O(N²k); SGPR's statistics A = Σ β a aᵀ, c = Σ β r a gain the k
new terms, O(k·M²), and I + A is factorised again (O(M³), independent of N). That
posterior is the new model's cached one, so its first prediction builds nothing.

Units: the new observations are taken in the units of the original data and converted into
the model's internal ones (its y_shift, y_scale, x_shift, x_scale); nothing is
standardised again, so the new model's parameters are exactly the original's.

One set of targets y [k] gives a model holding all N + k points as its data: it predicts,
evaluates its objective, saves and can be conditioned again like any model; its parameters
are copies of the original's, frozen (`requires_grad` False), so that tensor predictions read
the updated posterior instead of rebuilding it (unfreeze them to train: the posterior is
then rebuilt from the N + k points).

F fantasies y [F, k] at the same inputs give one model whose predictions carry the
fantasies as their last dimension — mean and variance [N*, F], covariances [F, N*, N*],
`predictive(..., full_cov=True)` a `MultivariateNormal` of batch shape [F], samples
[S, N*, F] — read from one posterior holding the F sets of targets (they share the
factorisation). It holds no single data set, so it cannot evaluate an objective or be fitted
(the error says the data are missing); it can be conditioned again, on y [F, k'] (one new set
per fantasy) or y [k'] (the same for every fantasy).

Differentiable: where X or y is a tensor with a graph (as BoTorch's knowledge gradient
gives), the new model's tensor predictions are differentiable with respect to them (the
posterior is built with the graph, once; take one backward pass through it per conditioned
model, or `retain_graph=True`).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn

from ..distributed import is_distributed
from ..kernels.base import Kernel
from ..objectives.conditioning import (
    BlockFactor,
    condition_collapsed,
    condition_exact,
    new_point_terms,
)
from ..posteriors import ExactPosterior, Posterior, SparsePosterior, frozen, frozen_copy, tracking
from ..runtime.chunking import ChunkBuffers, auto_chunk_size
from ..runtime.config import PARAMETER_DTYPE
from ..validation import as_tensor, check_finite
from .state import state_key


class Conditioning:
    """Models that can be conditioned on extra observations without refitting (GPR, SGPR)."""

    def condition_on_observations(self, X: Any, y: Any, noise: Any = None) -> Any:
        """A new model conditioned on the observations y at X, at the current hyperparameters,
        without refitting; this model is unchanged.

        X [k, D] and y [k] in the units of the training data (numpy, lists or tensors; the
        model's standardisation is applied to them, not recomputed). y [F, k] holds F
        fantasies at the same X: the new model's predictions then carry them as their last
        dimension (mean and variance [N*, F], covariances [F, N*, N*]). `noise`: the known
        noise variance of the new points (a number or [k], units of y), for models fitted with
        a noise variance per point; models with one σ² give it to the new points.

        Cost: the exact GP extends its Cholesky factor by k rows, O(N²k), sharing the
        original's factor (a refit is O((N + k)³)); SGPR (VFE, DTC, FITC, point-wise Power
        EP) adds the new points' terms to its M×M statistics, O(k·M²), and factorises them
        again, O(M³). The new model's posterior is cached: its first prediction builds
        nothing. Its parameters are copies of this model's, frozen (`requires_grad_(True)`
        to train it on all N + k points). Tensor X or y with a graph give predictions
        differentiable with respect to them (built once: one backward pass per conditioned
        model, or `retain_graph=True`). A model of F fantasies (`num_fantasies`) predicts
        and can be conditioned again, but holds no single data set to fit or evaluate an
        objective on. See `sparsegp.models.conditioning`.

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

    @property
    def num_fantasies(self) -> int | None:
        """F for a model conditioned on F fantasies (y [F, k]), else None."""
        return fantasies_of(self)


def fantasies_of(model: Any) -> int | None:
    """F for a model conditioned on F fantasies, else None."""
    return getattr(model, "_fantasies", None)


def condition_on_observations(model: Any, X: Any, y: Any, noise: Any = None) -> Any:
    """`Conditioning.condition_on_observations` of any GPR or SGPR `model`."""
    batch = fantasies_of(model)
    _check_model(model, batch)
    post = model.posterior()
    kind = _kind(model, post)
    X_new = model._internal_inputs(X, "X")
    k = X_new.shape[0]
    targets = _targets(y, k, batch, model)
    F = batch if targets.dim() == 1 else targets.shape[1]
    noise_new = _new_noise(model, noise, k)
    new = _copy(model)
    graph = torch.is_grad_enabled() and (post.tracks or any(
        isinstance(t, Tensor) and t.requires_grad for t in (X_new, targets, noise_new)))
    with tracking() if graph else torch.no_grad():
        mean = new.prior_mean()
        r_new = targets if mean is None else targets - _column(mean(X_new), targets)
        noise_all = _noise_rows(post.noise_variance, noise_new)
        new_post: Posterior
        if kind == "exact":
            new_post = _exact(new, post, X_new, r_new, noise_new, noise_all, F)
        else:
            new_post = _collapsed(new, post, X_new, r_new, noise_new, noise_all, F)
    _adopt_data(new, model, X_new, targets, noise_new, F)
    new._cache = (new_post, state_key(new))
    return new


# -- checks ------------------------------------------------------------------------------
def _check_model(model: Any, batch: int | None) -> None:
    name = type(model).__name__
    if not hasattr(model, "noise_rows"):
        raise TypeError(f"condition_on_observations takes a GPR or SGPR; got {name}")
    if model.X is None and batch is None:
        model._require_data()
    if batch is not None and (model._cache is None or model._cache[1] != state_key(model)):
        raise RuntimeError(f"this {name} of {batch} fantasies changed since it was conditioned "
                           "(a parameter or buffer was set): it holds no single data set to "
                           "rebuild its posterior from; condition the original model again")
    if model.shards_data and is_distributed():
        raise ValueError(f"condition_on_observations: this {name} holds one shard of data "
                         "sharded over torch.distributed ranks; condition a model of all the "
                         "data on one process")
    if model.num_outputs > 1:
        raise ValueError(f"condition_on_observations takes a model of one output; this {name} "
                         f"has {model.num_outputs}")
    if getattr(model, "block_codes", None) is not None:
        raise ValueError("condition_on_observations: block Power EP (blocks=...) would need "
                         "the new points' block labels; condition the point-wise family "
                         "(vfe, dtc, fitc, pep without blocks)")
    if model.noise_groups is not None:
        raise ValueError("condition_on_observations: a model with noise_groups would need the "
                         "new points' groups; it conditions models with one noise variance or "
                         "a known noise variance per point")


def _kind(model: Any, post: Any) -> str:
    if isinstance(post, ExactPosterior):
        return "exact"
    if type(post) in (SparsePosterior, FantasySparsePosterior) and hasattr(model, "_family"):
        return "collapsed"
    raise ValueError(f"condition_on_observations: this {type(model).__name__}'s posterior "
                     f"({type(post).__name__}) has no update for new observations (it takes "
                     "the exact GP and the collapsed family of one latent function)")


def _targets(y: Any, k: int, batch: int | None, model: Any) -> Tensor:
    """y in the model's internal units: [k], or [k, F] for F fantasies (y [F, k]); a tensor
    keeps its graph."""
    t = as_tensor(y.detach() if isinstance(y, Tensor) else y, "y")
    check_finite(t, "y")
    if t.dim() not in (1, 2) or t.shape[-1] != k:
        raise ValueError(f"y must be [k] or [F, k] (F fantasies) with k = {k}, the rows of X; "
                         f"got shape {tuple(t.shape)}")
    if batch is not None and t.dim() == 2 and t.shape[0] != batch:
        raise ValueError(f"this model holds {batch} fantasies: y must be [{batch}, {k}] (one "
                         f"set per fantasy) or [{k}] (the same for all); got {tuple(t.shape)}")
    if t.dim() == 2 and t.shape[0] == 0:
        raise ValueError("y [F, k] needs at least one fantasy (F ≥ 1)")
    if isinstance(y, Tensor):
        value = y.to(device=model.device, dtype=PARAMETER_DTYPE)
    else:
        value = t.to(device=model.device, dtype=PARAMETER_DTYPE)
    value = (value - model.y_shift) / model.y_scale
    return value.mT if value.dim() == 2 else value


def _new_noise(model: Any, noise: Any, k: int) -> Tensor | None:
    """σ²_n of the new points [k] in internal units for a model with a known noise per point
    (required there), None for a model with one σ² (where `noise` must not be given)."""
    per_point = model.noise_codes is not None
    if not per_point:
        if noise is not None:
            raise ValueError("noise: this model has one noise variance σ² for every point, which "
                             "the new observations take; noise= gives the known noise of the "
                             "new points to models fitted with a noise variance per point")
        return None
    if noise is None:
        raise ValueError(f"this model's noise variance is known per point: give the noise "
                         f"variance of the {k} new points (noise=, a number or [{k}], units "
                         "of y)")
    t = as_tensor(noise.detach() if isinstance(noise, Tensor) else noise, "noise")
    if t.dim() > 1 or t.numel() not in (1, k) or not bool(
            (torch.isfinite(t) & (t > 0)).all()):
        raise ValueError(f"noise must be a positive number or {k} of them (units of y); got "
                         f"shape {tuple(t.shape)}")
    value = noise if isinstance(noise, Tensor) else t
    value = value.to(device=model.device, dtype=PARAMETER_DTYPE).reshape(-1).expand(k)
    return value / model.y_scale ** 2


def _noise_rows(noise: Tensor, noise_new: Tensor | None) -> Tensor:
    """The posterior's noise on all N + k points: σ² [], or σ²_n [N + k]."""
    return noise if noise_new is None else torch.cat([noise, noise_new.to(noise.dtype)])


def _column(m: Tensor, targets: Tensor) -> Tensor:
    """The prior mean at the new points [k], as a column [k, 1] against targets [k, F]."""
    return m[:, None] if targets.dim() == 2 else m


# -- the new model -------------------------------------------------------------------------
def _copy(model: Any) -> Any:
    """A deep copy of `model` without its data and cached posterior (set afterwards), its
    parameters frozen (`requires_grad` False)."""
    memo: dict[int, Any] = {id(model._cache): None}
    for name in ("X", "y"):
        t = getattr(model, name)
        if t is not None:
            memo[id(t)] = None
    new = copy.deepcopy(model, memo)
    new.requires_grad_(False)
    return new


def _adopt_data(new: Any, model: Any, X_new: Tensor, targets: Tensor,
                noise_new: Tensor | None, F: int | None) -> None:
    """The new model's data: all N + k points (one set of targets), or none (fantasies)."""
    k = X_new.shape[0]
    new._num_data = model.num_data + k
    new._config["num_data"] = new._num_data  # what a saved copy is rebuilt with
    if "streaming" in new._config:  # a streamed model has seen k more points
        seen = new._config["streaming"]["seen"]
        new._config["streaming"] = {**new._config["streaming"], "seen": seen + k}
    if noise_new is not None:
        old = new.value("noise_variance").detach()
        new.set_value("noise_variance", torch.cat([old, noise_new.detach().to(old.dtype)]),
                      reshape=True)
        new.requires_grad_(False)
        new.noise_codes = torch.arange(old.shape[0] + k, device=old.device)
        new._config["noise"] = {"points": old.shape[0] + k}
    if F is not None:
        new.X, new.y = None, None
        new._fantasies = F
        return
    new.X = torch.cat([model.X, X_new.detach().to(model.X.dtype)])
    new.y = torch.cat([model.y, targets.detach().to(model.y.dtype)])


def _exact(new: Any, post: ExactPosterior, X_new: Tensor, r_new: Tensor,
           noise_new: Tensor | None, noise_all: Tensor, F: int | None) -> ExactPosterior:
    """The exact GP's posterior on all N + k points by extending its factor (kept in blocks:
    the original's L is shared, not copied)."""
    noise = post.noise_variance if noise_new is None else noise_new
    if isinstance(post, ConditionedExactPosterior):
        factor, added = post.factor, post.added
    else:
        factor, added = BlockFactor.of(post.L), 0.0
        if post.jitter > 0:  # the old factor's absolute jitter, given to the new points too
            added = post.jitter * (post.kernel.K_diag(post.X) + post.noise_variance).mean()
    ext, a = condition_exact(new.kernel, post.X, factor, post.a, X_new, r_new, noise, added)
    X_all = torch.cat([post.X, X_new.to(post.X.dtype)])
    return ConditionedExactPosterior(new.kernel, X_all, ext, a, noise_all, post.jitter, added,
                                     new.prior_mean(), F is not None)


def _collapsed(new: Any, post: SparsePosterior, X_new: Tensor, r_new: Tensor,
               noise_new: Tensor | None, noise_all: Tensor, F: int | None) -> SparsePosterior:
    """The collapsed family's posterior with the new points' terms added to its statistics."""
    noise = post.noise_variance if noise_new is None else noise_new
    a, beta = new_point_terms(new.kernel, new.feature, post.L, X_new, noise, new._family)
    L_B = post.q.root
    e = L_B.mT @ post.q.mean  # q.mean = L_B⁻ᵀe
    q = condition_collapsed(L_B, e[:, 0] if e.shape[1] == 1 else e, a, beta, r_new)
    cls = SparsePosterior if F is None else FantasySparsePosterior
    return cls(new.kernel, new.feature, post.L, q, noise_all, post.jitter, new.prior_mean())


class ConditionedExactPosterior(ExactPosterior):
    """The exact GP's posterior after conditioning. Its factor is kept in blocks
    (`objectives.conditioning.BlockFactor`: the original posterior's L, shared, and the rows
    conditioning added), so conditioning copies no N×N matrix; `L` (the whole factor, read by
    saving and by pathwise samples) is assembled on first access. With `fantasies` the
    targets are F sets (a [N, F]): one mean per fantasy [B, F], the shared variances repeated
    [B, F] (covariances [F, B, B]), as the predictions of several outputs are laid out."""

    def __init__(self, kernel: Kernel, X: Tensor, factor: BlockFactor, a: Tensor,
                 noise_variance: Tensor, jitter: float, added: float | Tensor,
                 mean: nn.Module | None, fantasies: bool) -> None:
        self._adopt_mean(mean)
        self.kernel = frozen_copy(kernel)
        self.X = frozen(X)
        self.factor = BlockFactor(*(frozen(t) for t in factor))
        self.a = frozen(a)
        self.weights = self.factor.solve_t(self.a)  # (K + σ²I)⁻¹ y
        self.noise_variance = frozen(noise_variance)
        self.jitter = jitter
        self.added = frozen(added) if isinstance(added, Tensor) else added
        self.fantasies = fantasies

    def __getattr__(self, name: str) -> Any:
        if name == "L":  # the whole factor, once (O(N²) memory)
            L = self.factor.dense()
            self.__dict__["L"] = L
            return L
        raise AttributeError(name)

    def _rows_per_chunk(self) -> int:
        return auto_chunk_size(self.X.shape[0], self.factor.L0.element_size(),
                               device=self.factor.L0.device)

    def _block(self, Xs: Tensor, full_cov: bool, buffers: ChunkBuffers | None = None
               ) -> tuple[Tensor, Tensor]:
        Kfs = self.kernel.K(self.X, Xs)  # [N, B]
        mean = Kfs.mT @ self.weights
        V = self.factor.solve(Kfs)
        if full_cov:
            var = self.kernel.K(Xs) - V.mT @ V
        else:
            var = (self.kernel.K_diag(Xs) - (V * V).sum(0)).clamp_min(0.0)
        if not self.fantasies:
            return mean, var
        F = self.a.shape[1]
        return mean, (var.expand(F, -1, -1) if full_cov else var[:, None].expand(-1, F))


class FantasySparsePosterior(SparsePosterior):
    """The collapsed family's posterior with F sets of targets sharing q(v)'s covariance
    (q.mean [M, F]): predictions [B, F] (covariances [F, B, B]) for every F, one included."""

    def _block(self, Xs: Tensor, full_cov: bool, buffers: ChunkBuffers | None = None
               ) -> tuple[Tensor, Tensor]:
        mean, var = super()._block(Xs, full_cov, buffers)
        if mean.dim() == 1:  # one fantasy: SparsePosterior drops the column
            return mean[:, None], (var[None] if full_cov else var[:, None])
        return mean, var
