"""`condition_on_observations`: a new model conditioned on extra observations at fixed
hyperparameters, without refitting (as GPyTorch's `get_fantasy_model` and BoTorch's
`Model.condition_on_observations`), for the exact GP (`GPR`) and the collapsed family of
`SGPR` (VFE, DTC, FITC, point-wise Power EP).

The new model is built by the one constructor (`Model._construct`) from the original's spec
(N + k rows, the fantasies), copies of its parts and its parameters (all frozen), and a
posterior updated rather than rebuilt (`objectives.online.conditioning`): the exact GP's Cholesky
factor is extended by one block row, O(N²k); SGPR's statistics A = Σ β a aᵀ, c = Σ β r a gain
the k new terms, O(k·M²), and I + A is factorised again (O(M³), independent of N). That
posterior is the new model's cached one, so its first prediction builds nothing. The
original is left unchanged.

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
factorisation); its spec records F, so that it saves, loads and predicts as it did. It holds
no single data set, so it cannot evaluate an objective or be fitted (the error says the data
are missing); it can be conditioned again, on y [F, k'] (one new set per fantasy) or y [k']
(the same for every fantasy).

Differentiable: where X or y is a tensor with a graph (as BoTorch's knowledge gradient
gives), the new model's tensor predictions are differentiable with respect to them (the
posterior is built with the graph, once; take one backward pass through it per conditioned
model, or `retain_graph=True`).
"""

from __future__ import annotations

import copy
from typing import TypeVar, cast

import torch
from torch import Tensor

from ...means import Zero
from ...objectives.collapsed.members import Family
from ...objectives.online.conditioning import (
    BlockFactor,
    condition_collapsed,
    condition_exact,
    new_point_terms,
)
from ...parameters import inverse_softplus_floor
from ...posteriors import (
    ConditionedExactPosterior,
    ExactPosterior,
    FantasySparsePosterior,
    Posterior,
    SparsePosterior,
    tracking,
)
from ...runtime.config import NOISE_FLOOR, PARAMETER_DTYPE
from ...validation import ArrayLike, as_tensor, check_finite
from .data import Data
from .inducing import extended_feature
from .model import Parts
from .regression import Regression
from .spec import StreamSpec

R = TypeVar("R", bound="Regression")


def condition_on_observations(model: R, X: ArrayLike, y: ArrayLike,
                              noise: ArrayLike | None = None) -> R:
    """The GPR or SGPR `model` conditioned on y at X (see the module docstring): the exact
    GP, or the collapsed family's member the model fits (its `_conditioning_member`)."""
    conditions = getattr(model, "_conditioning_member", None)
    if conditions is None:
        raise TypeError(f"condition_on_observations takes a GPR or SGPR; got "
                        f"{type(model).__name__}")
    member: Family | None = conditions()
    batch = model.spec.fantasies
    _check_model(model, batch, member)
    post = model.posterior()
    X_new = model._internal_inputs(X, "X")
    k = X_new.shape[0]
    targets = _targets(y, k, batch, model)
    F = batch if targets.dim() == 1 else targets.shape[1]
    noise_new = _new_noise(model, noise, k)
    parts = cast(Parts, {name: copy.deepcopy(part) for name in ("kernel", "mean", "feature")
                         if (part := getattr(model, name, None)) is not None})
    if member is None and "feature" in parts:  # an SGPR in its exact limit: it stays exact
        parts["feature"] = extended_feature(parts["feature"], X_new.detach(), model.device)
    graph = torch.is_grad_enabled() and (post.tracks or any(
        isinstance(t, Tensor) and t.requires_grad for t in (X_new, targets, noise_new)))
    with tracking() if graph else torch.no_grad():
        mean = parts["mean"]
        r_new = targets - _column(mean(X_new), targets)
        noise_all = _noise_rows(post.noise_variance, noise_new)
        new_post: Posterior
        if member is None:
            assert isinstance(post, ExactPosterior)
            new_post = _exact(parts, post, X_new, r_new, noise_new, noise_all, F)
        else:
            assert isinstance(post, SparsePosterior)
            new_post = _collapsed(parts, post, X_new, r_new, noise_new, noise_all, F, member)
    return _new_model(model, parts, new_post, X_new, targets, noise_new, F)


# -- checks ------------------------------------------------------------------------------
def _check_model(model: Regression, batch: int | None, member: Family | None) -> None:
    name = type(model).__name__
    if model.X is None and batch is None:
        model._require_data()
    if batch is not None and not model._holds_its_posterior():
        raise RuntimeError(f"this {name} of {batch} fantasies changed since it was conditioned "
                           "(a parameter or buffer was set): it holds no single data set to "
                           "rebuild its posterior from; condition the original model again")
    if model.placement.sharded:
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
    post = model.posterior()
    expected = ExactPosterior if member is None else SparsePosterior
    if not isinstance(post, expected) or (member is not None and type(post) not in (
            SparsePosterior, FantasySparsePosterior)):
        raise ValueError(f"condition_on_observations: this {name}'s posterior "
                         f"({type(post).__name__}) has no update for new observations (it "
                         "takes the exact GP and the collapsed family of one latent function)")


def _targets(y: ArrayLike, k: int, batch: int | None, model: Regression) -> Tensor:
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
    source = y if isinstance(y, Tensor) else t
    value = model.units.targets(source.to(device=model.device, dtype=PARAMETER_DTYPE))
    return value.mT if value.dim() == 2 else value


def _new_noise(model: Regression, noise: ArrayLike | None, k: int) -> Tensor | None:
    """σ²_n of the new points [k] in internal units for a model with a known noise per point
    (required there), None for a model with one σ² (where `noise` must not be given)."""
    if model.spec.noise.points is None:
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


# -- the new posterior and model ----------------------------------------------------------
def _exact(parts: Parts, post: ExactPosterior, X_new: Tensor,
           r_new: Tensor, noise_new: Tensor | None, noise_all: Tensor, F: int | None
           ) -> ConditionedExactPosterior:
    """The exact GP's posterior on all N + k points by extending its factor (kept in blocks:
    the original's L is shared, not copied)."""
    noise = post.noise_variance if noise_new is None else noise_new
    if isinstance(post, ConditionedExactPosterior):
        factor, added = post.factor, post.added
    else:
        factor, added = BlockFactor.of(post.L), 0.0
        if post.jitter > 0:  # the old factor's absolute jitter, given to the new points too
            added = post.jitter * (post.kernel.K_diag(post.X) + post.noise_variance).mean()
    kernel = parts["kernel"]
    ext, a = condition_exact(kernel, post.X, factor, post.a, X_new, r_new, noise, added)
    X_all = torch.cat([post.X, X_new.to(post.X.dtype)])
    mean = parts["mean"]
    return ConditionedExactPosterior(kernel, X_all, ext, a, noise_all, post.jitter, added,
                                     None if _is_zero(mean) else mean, F is not None)


def _collapsed(parts: Parts, post: SparsePosterior, X_new: Tensor,
               r_new: Tensor, noise_new: Tensor | None, noise_all: Tensor, F: int | None,
               member: Family) -> SparsePosterior:
    """The collapsed family's posterior with the new points' terms added to its statistics."""
    noise = post.noise_variance if noise_new is None else noise_new
    kernel, feature, mean = parts["kernel"], parts["feature"], parts["mean"]
    a, beta = new_point_terms(kernel, feature, post.L, X_new, noise, member)
    L_B = post.q.root
    e = L_B.mT @ post.q.mean  # q.mean = L_B⁻ᵀe
    q = condition_collapsed(L_B, e[:, 0] if e.shape[1] == 1 else e, a, beta, r_new)
    cls = SparsePosterior if F is None else FantasySparsePosterior
    return cls(kernel, feature, post.L, q, noise_all, post.jitter,
               None if _is_zero(mean) else mean)


def _is_zero(mean: torch.nn.Module) -> bool:
    return isinstance(mean, Zero)


def _new_model(model: R, parts: Parts, post: Posterior, X_new: Tensor,
               targets: Tensor, noise_new: Tensor | None, F: int | None) -> R:
    """The conditioned model, built by the one constructor: N + k rows (and the data, for
    one set of targets), the noise of the new points, F fantasies, every parameter frozen,
    the posterior its cached one."""
    k = X_new.shape[0]
    spec = model.spec.but(num_data=model.num_data + k, fantasies=F)
    stream = getattr(spec, "streaming", None)
    if isinstance(stream, StreamSpec):  # a streamed model has seen k more points
        spec = spec.but(streaming=StreamSpec(stream.seen + k, stream.updates,
                                             stream.old_inducing, stream.rank))
    # the model's own values (its parts come as copies, whose parameters the posterior's
    # graph may hold: they are not written again)
    state = {k: v for k, v in model.state_dict().items() if k.split(".")[0] not in parts}
    extras: dict[str, Tensor] = {}
    if noise_new is not None:  # known noise per point: the new points' values appended
        old = model.value("noise_variance").detach()
        values = torch.cat([old, noise_new.detach().to(old.dtype)])
        spec = spec.but(noise=spec.noise.__class__(points=values.shape[0]))
        state["raw_noise_variance"] = inverse_softplus_floor(values, NOISE_FLOOR)
        extras["noise_codes"] = torch.arange(values.shape[0], device=values.device)
    data = None
    if F is None:
        assert model.X is not None and model.y is not None
        data = Data(torch.cat([model.X, X_new.detach().to(model.X.dtype)]),
                    torch.cat([model.y, targets.detach().to(model.y.dtype)]), extras)
    return type(model)._assemble(  # type: ignore[return-value]
        spec, parts, data=data, state=state,
        frozen=[name for name, _ in model.named_parameters()],
        priors={name: prior for name, prior in model.named_priors() if "." not in name},
        posterior=post, metadata=copy.deepcopy(model.metadata))
