"""BoTorch models: a fitted sparsegp regression model drives Bayesian optimisation with
BoTorch's acquisition functions and optimisers (`as_botorch(model)`).

An optional extra (`pip install ".[botorch]"` in a clone of sparsegp, or
`pip install "botorch>=0.18"`): `import sparsegp` never imports BoTorch, this module does.
`SparseGPModel` wraps a single-output sparsegp model with a Gaussian likelihood (GPR, SGPR,
SVGP) as a `botorch.models.model.Model`:

* `posterior(X)` for X [batch, q, d] (or [q, d]) is a `GPyTorchPosterior` whose mean and
  covariance over each q-batch are the model's joint predictive of f* (`predict_f(...,
  full_cov=True)`), or of y* with `observation_noise=True` (`predict_y`: the noise variance
  added), its covariance a dense linear operator (factorised when sampled, with jitter where
  it is singular in floating point, as over a large candidate set); its `rsample` is
  reparameterised, so Monte-Carlo acquisition values are differentiable with respect to X.
  The posterior is read from the model's cached one: the
  results carry gradients to X, not to the hyperparameters (refit the model, then wrap or
  keep using it, between BO steps).
* `condition_on_observations(X, Y)` (GPR, SGPR) delegates to sparsegp's
  `condition_on_observations` at fixed hyperparameters; Y [F, k, 1] are F fantasies, and a
  batch of X [b, k, d] gives one conditioned model per batch element. `fantasize` samples Y
  from the posterior at X and conditions on them: what `qKnowledgeGradient` needs.

`set_botorch_priors(model)` gives an unfitted model the lengthscale prior of BoTorch's
`SingleTaskGP` (log-normal, scaled with the input dimension) and starts the lengthscales at
its mode, so that `fit()` finds the same MAP lengthscales SingleTaskGP's fit does rather than
the marginal-likelihood maximum, which on a few tens of points in several dimensions is often
a poor one.

The wrapped model's batch shape is [] for a fitted model, and [F, *b] for fantasies over a
batch b of inputs (BoTorch's layout): a posterior over X [..., F, *b, q, d] (broadcast) takes
the f-th fantasy's prediction for X[..., f, ...].
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import torch
from torch import Tensor, nn

try:
    from botorch.acquisition.objective import PosteriorTransform
    from botorch.models.model import Model
    from botorch.posteriors.gpytorch import GPyTorchPosterior
    from botorch.posteriors.posterior import Posterior
    from botorch.sampling.base import MCSampler
    from gpytorch import linear_operator
    from gpytorch.distributions import MultivariateNormal
except ImportError as err:
    raise ImportError('sparsegp.botorch needs BoTorch; install it with '
                      'pip install "botorch>=0.18" (in a clone of sparsegp: '
                      'pip install ".[botorch]")') from err

__all__ = ["SparseGPModel", "as_botorch", "set_botorch_priors"]

#: At most this many test points go into one joint prediction (the q-batches of a chunk of
#: the batch, times the fantasies): the predictive covariance is computed over all of them.
POINTS_PER_CALL = 256

if TYPE_CHECKING:
    from .models import Model as SparseModel
    from .validation import ArrayLike

#: A sparsegp model given to `set_botorch_priors`, which returns it.
M = TypeVar("M", bound="SparseModel")


@runtime_checkable
class _Predictive(Protocol):
    """A wrapped sparsegp model as the wrapper uses it (what `_check_model` checks): joint
    predictions at tensor inputs [P, d], as tensors (mean [P], covariance [P, P])."""

    def predict_f(self, Xnew: Tensor, full_cov: bool = False) -> tuple[Tensor, Tensor]: ...

    def predict_y(self, Xnew: Tensor, full_cov: bool = False) -> tuple[Tensor, Tensor]: ...

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]: ...


@runtime_checkable
class _Conditions(Protocol):
    """A sparsegp model that conditions on new observations (GPR, SGPR)."""

    def condition_on_observations(self, X: Tensor, y: Tensor, noise: ArrayLike | None = None
                                  ) -> SparseModel: ...


def as_botorch(model: SparseModel) -> SparseGPModel:
    """A fitted single-output sparsegp regression model (GPR, SGPR, SVGP with a Gaussian
    likelihood) as a BoTorch `Model` (`SparseGPModel`).

    Example:

        >>> import torch, sparsegp as sg
        >>> from sparsegp.botorch import as_botorch
        >>> X = torch.linspace(0, 1, 6, dtype=torch.float64)[:, None]
        >>> model = as_botorch(sg.GPR(X, torch.sin(6 * X[:, 0]), noise_variance=1e-3))
        >>> posterior = model.posterior(torch.rand(4, 2, 1, dtype=torch.float64))
        >>> tuple(posterior.mean.shape), model.num_outputs
        ((4, 2, 1), 1)
    """
    return SparseGPModel(model)


def set_botorch_priors(model: M) -> M:
    """Give `model` (GPR, SGPR, SVGP: a stationary kernel with lengthscales, inputs in the
    unit cube) BoTorch's `SingleTaskGP` lengthscale prior and start its lengthscales at the
    prior's mode; returns the model, to be fitted (MAP: `fit()` adds the log prior).

    The prior is log-normal with log-mean √2 + ½ log d and log-standard deviation √3 on each
    lengthscale, d the input dimension (BoTorch's `get_covar_module_with_dim_scaled_prior`):
    lengthscales grow with d as the distances between points in the unit cube do. Its mode,
    exp(√2 + ½ log d − 3), is 0.29 for d = 2, 0.50 for d = 6 and 0.65 for d = 10. The prior
    is for inputs scaled to the unit cube (BoTorch's normalised inputs): a model with
    standardised inputs (`standardize_X=True`) or data outside [0, 1]^d is refused. The
    noise variance is left as it is: for a noiseless objective hold it small
    (`model.noise_variance = 1e-6 * float(y.var())`, `model.freeze("noise_variance")`).

    Example:

        >>> import torch, sparsegp as sg
        >>> from sparsegp.botorch import set_botorch_priors
        >>> X = torch.rand(12, 6, dtype=torch.float64)
        >>> model = set_botorch_priors(sg.GPR(X, X.sum(1)))
        >>> [name for name, _ in model.named_priors()], model.kernel.lengthscale.round(3)[0]
        (['kernel.lengthscale'], np.float64(0.502))
    """
    name = type(model).__name__
    if not (isinstance(model, nn.Module) and hasattr(model, "set_prior")
            and hasattr(model, "x_scale") and getattr(model, "kernel", None) is not None):
        raise TypeError(f"set_botorch_priors takes a sparsegp model with data and a kernel "
                        f"(GPR, SGPR, SVGP); got {name}")
    kernel = model.kernel
    if "lengthscale" not in kernel.parameter_names():
        raise TypeError(f"set_botorch_priors needs a kernel with lengthscales (a stationary "
                        f"kernel such as SquaredExponential or Matern52); this {name}'s "
                        f"kernel is {type(kernel).__name__}")
    if bool((model.x_scale != 1).any()) or bool((model.x_shift != 0).any()):
        raise ValueError("set_botorch_priors: BoTorch's lengthscale prior is for inputs in the "
                         "unit cube; this model standardises its inputs (build it with "
                         "standardize_X=False and X scaled to [0, 1]^d)")
    X = getattr(model, "X", None)
    if X is not None and X.numel() and (float(X.min()) < 0.0 or float(X.max()) > 1.0):
        raise ValueError(f"set_botorch_priors: BoTorch's lengthscale prior is for inputs in "
                         f"the unit cube; this model's X spans [{float(X.min()):.3g}, "
                         f"{float(X.max()):.3g}] (scale X to [0, 1]^d first)")
    d = int(model.input_dim)
    current = kernel.value("lengthscale")
    loc = torch.tensor(math.sqrt(2.0) + 0.5 * math.log(d), dtype=current.dtype)
    scale = torch.tensor(math.sqrt(3.0), dtype=current.dtype)
    prior = torch.distributions.LogNormal(loc, scale)
    mode = math.exp(float(loc) - float(scale) ** 2)
    kernel.lengthscale = torch.full(current.shape, mode, dtype=current.dtype)
    model.set_prior("kernel.lengthscale", prior)
    return model


class SparseGPModel(Model):
    """A BoTorch `Model` of a fitted sparsegp regression model (see the module docstring).

    Example:

        >>> import torch, sparsegp as sg
        >>> from botorch.acquisition import qLogExpectedImprovement
        >>> from sparsegp.botorch import SparseGPModel
        >>> X = torch.rand(8, 2, dtype=torch.float64)
        >>> y = (X ** 2).sum(1)
        >>> gp = sg.GPR(X, y, noise_variance=1e-3)
        >>> acq = qLogExpectedImprovement(SparseGPModel(gp), best_f=y.max())
        >>> acq(torch.rand(5, 3, 2, dtype=torch.float64)).shape
        torch.Size([5])
    """

    def __init__(self, model: SparseModel) -> None:
        super().__init__()
        _check_model(model)
        self._set_members([model], torch.Size(), _fantasies(model))

    def _set_members(self, models: list[SparseModel], input_batch: torch.Size,
                     fantasies: int | None) -> None:
        #: one sparsegp model per element of the input batch (row-major)
        self.members = nn.ModuleList(models)
        self._input_batch = torch.Size(input_batch)
        self._num_fantasies = fantasies

    @classmethod
    def _of(cls, models: list[SparseModel], input_batch: torch.Size,
            fantasies: int | None) -> SparseGPModel:
        new = cls.__new__(cls)
        Model.__init__(new)
        new._set_members(models, input_batch, fantasies)
        return new

    def _sparse(self) -> list[_Predictive]:
        """The sparsegp models, one per element of the input batch."""
        return [m for m in self.members if isinstance(m, _Predictive)]  # all (`_check_model`)

    # -- the Model protocol ------------------------------------------------------------------
    @property
    def num_outputs(self) -> int:
        return 1

    @property
    def batch_shape(self) -> torch.Size:
        """[] for a fitted model; [F, *b] for F fantasies over an input batch b."""
        head = torch.Size() if self._num_fantasies is None else torch.Size([self._num_fantasies])
        return head + self._input_batch

    @property
    def model(self) -> Any:
        """The wrapped sparsegp model (of a wrapper without an input batch)."""
        if len(self.members) != 1:
            raise AttributeError(f"this wrapper holds {len(self.members)} sparsegp models, one "
                                 f"per element of the input batch {list(self._input_batch)}")
        return self.members[0]

    def posterior(self, X: Tensor, output_indices: list[int] | None = None,
                  observation_noise: bool | Tensor = False,
                  posterior_transform: PosteriorTransform | None = None,
                  **kwargs: object) -> Posterior:
        """The joint predictive over each q-batch of X [..., q, d], a `GPyTorchPosterior` of
        batch shape [..., *batch_shape]: of f*, of y* with `observation_noise=True`, or of f*
        plus a given noise variance (a tensor broadcasting to [..., q, 1])."""
        if output_indices is not None and list(output_indices) != [0]:
            raise ValueError(f"this model has one output; output_indices must be None or [0], "
                             f"got {output_indices!r}")
        if kwargs:
            raise TypeError(f"posterior() got unexpected arguments {sorted(kwargs)}")
        X = self._check_inputs(X)
        observed = isinstance(observation_noise, bool) and observation_noise
        mean, cov = self._moments(X, observed)
        if isinstance(observation_noise, Tensor):
            noise = observation_noise.to(cov)
            if noise.dim() < 1 or noise.shape[-1] != 1:
                raise ValueError("observation_noise as a tensor must end in the output "
                                 f"dimension (…, q, 1); got shape {tuple(noise.shape)}")
            cov = cov + torch.diag_embed(noise[..., 0].expand(mean.shape))
        # a linear operator, not a tensor: MultivariateNormal factorises a tensor at once and
        # fails where the joint covariance is singular in floating point (many points, e.g.
        # a Thompson-sampling candidate set); an operator is factorised when sampled, with
        # jitter added as needed (as SingleTaskGP's posteriors are)
        posterior: Posterior = GPyTorchPosterior(MultivariateNormal(
            mean, linear_operator.operators.DenseLinearOperator(cov)))
        if posterior_transform is not None:
            posterior = posterior_transform(posterior)
        return posterior

    def condition_on_observations(self, X: Tensor, Y: Tensor, *, noise: ArrayLike | None = None,
                                  **kwargs: object) -> SparseGPModel:
        """A new wrapper of the model conditioned on (X, Y) at fixed hyperparameters
        (sparsegp's `condition_on_observations`); this one is unchanged.

        X [*b, k, d], Y [*b, k, 1] (one set of targets per batch element) or [F, *b, k, 1]
        (F fantasies). A wrapper of F fantasies (no input batch) takes X [k, d] and Y
        [F, k, 1] or [k, 1]. `noise` (known noise variances of the new points, [..., k, 1] or
        a number) is passed on for models fitted with a noise variance per point."""
        if kwargs:
            raise TypeError(f"condition_on_observations() got unexpected arguments "
                            f"{sorted(kwargs)}")
        for member in self._sparse():
            _conditions(member)
        if X.dim() < 2 or Y.dim() < 2 or Y.shape[-1] != 1 or Y.shape[-2] != X.shape[-2]:
            raise ValueError(f"X must be [..., k, d] and Y [..., k, 1] with the same k; got X "
                             f"{tuple(X.shape)} and Y {tuple(Y.shape)}")
        if self.batch_shape != torch.Size():
            return self._condition_fantasies(X, Y, noise)
        input_batch = X.shape[:-2]
        extra = Y.dim() - 2 - len(input_batch)
        if extra not in (0, 1) or Y.shape[extra:-2] != input_batch:
            raise ValueError(f"Y must be [*b, k, 1] or [F, *b, k, 1] for X [*b, k, d]; got X "
                             f"{tuple(X.shape)} and Y {tuple(Y.shape)}")
        n = math.prod(input_batch)
        Xs = X.reshape(n, *X.shape[-2:])
        Ys = Y[..., 0].reshape(*Y.shape[:extra], n, Y.shape[-2])
        noises = _per_batch(noise, Y.shape[:-1], extra, n)
        first = _conditions(self._sparse()[0])
        models = [first.condition_on_observations(Xs[j], Ys[..., j, :], noises[j])
                  for j in range(n)]
        return SparseGPModel._of(models, input_batch, Y.shape[0] if extra else None)

    def _condition_fantasies(self, X: Tensor, Y: Tensor, noise: ArrayLike | None
                             ) -> SparseGPModel:
        if self._input_batch != torch.Size() or X.dim() != 2 or Y.dim() not in (2, 3):
            raise ValueError("conditioning a wrapper of fantasies again takes the wrapper of one "
                             "sparsegp model (no input batch), X [k, d] and Y [F, k, 1] or "
                             f"[k, 1]; this wrapper has batch shape {list(self.batch_shape)}, "
                             f"X {tuple(X.shape)}, Y {tuple(Y.shape)}")
        if isinstance(noise, Tensor):
            noise = noise.reshape(-1, X.shape[0])[0]
        new = _conditions(self._sparse()[0]).condition_on_observations(X, Y[..., 0], noise)
        return SparseGPModel._of([new], torch.Size(), self._num_fantasies)

    def fantasize(self, X: Tensor, sampler: MCSampler, observation_noise: Tensor | None = None,
                  **kwargs: Any) -> SparseGPModel:
        """A model of fantasies: Y sampled by `sampler` from the posterior of y* at X
        [*b, q, d], then conditioned on (`condition_on_observations`; batch shape [S, *b] for
        S samples). The noise is the model's σ², or `observation_noise` (a tensor [*b, q, 1]
        or [*b, 1, 1]: the known noise variance of the new points, for models fitted with a
        noise variance per point). Y keeps its graph to X, so one-step look-ahead values
        (`qKnowledgeGradient`) are differentiable with respect to X (through the fantasy
        data too)."""
        kwargs.pop("propagate_grads", None)
        if observation_noise is None:
            Y = sampler(self.posterior(X, observation_noise=True))  # [S, *b, q, 1]
            return self.condition_on_observations(X, Y, **kwargs)
        if not isinstance(observation_noise, Tensor):
            raise TypeError("fantasize: observation_noise must be None (the model's σ²) or a "
                            f"tensor of noise variances; got {type(observation_noise).__name__}")
        Y = sampler(self.posterior(X, observation_noise=observation_noise))
        return self.condition_on_observations(X, Y, noise=observation_noise, **kwargs)

    # -- the moments ---------------------------------------------------------------------------
    def _check_inputs(self, X: Tensor) -> Tensor:
        if not isinstance(X, Tensor) or not X.is_floating_point() or X.dim() < 2:
            raise ValueError("X must be a floating-point tensor [..., q, d]; got "
                             f"{type(X).__name__} {tuple(getattr(X, 'shape', ()))}")
        d = getattr(self.members[0], "input_dim", None)
        if isinstance(d, int) and X.shape[-1] != d:
            raise ValueError(f"X must have {d} features (its last dimension); got "
                             f"{X.shape[-1]}")
        if not bool(torch.isfinite(X.detach()).all()):
            raise ValueError("X holds NaN or infinite values")
        return X

    def _moments(self, X: Tensor, observed: bool) -> tuple[Tensor, Tensor]:
        """Mean [..., *batch_shape, q] and covariance [..., *batch_shape, q, q] at X."""
        q, d = X.shape[-2:]
        try:
            full = torch.broadcast_shapes(X.shape[:-2], self.batch_shape)
        except RuntimeError as err:
            raise ValueError(f"X's batch shape {list(X.shape[:-2])} does not broadcast with the "
                             f"model's {list(self.batch_shape)}") from err
        # whether X is the same under every fantasy (broadcast along their dimension, as
        # BoTorch's acquisition functions give it): then one prediction serves them all
        at = len(full) - len(self.batch_shape)  # the fantasies' dimension in `full`
        given = (1,) * (len(full) - X.dim() + 2) + tuple(X.shape[:-2])
        shared = self._num_fantasies is not None and given[at] == 1
        X = X.expand(*full, q, d)
        lead = full[:at]
        n = len(self.members)
        F = 1 if self._num_fantasies is None else self._num_fantasies
        Xs = X.reshape(-1, F, n, q, d)  # rows, fantasies, input batch
        means, covs = [], []
        for j, member in enumerate(self._sparse()):
            with _inputs_only(member):
                if shared:
                    mean, cov = _shared_moments(member, Xs[:, 0, j], observed)
                else:
                    mean, cov = _member_moments(member, Xs[:, :, j], observed,
                                                self._num_fantasies is not None)
            means.append(mean)
            covs.append(cov)
        mean = torch.stack(means, 2).reshape(*lead, *self.batch_shape, q)
        cov = torch.stack(covs, 2).reshape(*lead, *self.batch_shape, q, q)
        return mean, cov


def _member_moments(model: _Predictive, X: Tensor, observed: bool, fantasies: bool
                    ) -> tuple[Tensor, Tensor]:
    """Mean [R, F, q] and covariance [R, F, q, q] of one sparsegp model at X [R, F, q, d]: row
    r's f-th q-batch under fantasy f (F = 1 without fantasies), from joint predictions over
    chunks of rows."""
    R, F, q, d = X.shape
    predict = model.predict_y if observed else model.predict_f
    rows = max(1, POINTS_PER_CALL // (F * q))
    means, covs = [], []
    for start in range(0, R, rows):
        chunk = X[start:start + rows]
        c = chunk.shape[0]
        mean, cov = predict(chunk.reshape(c * F * q, d), full_cov=True)
        if not fantasies:
            mean, cov = mean[:, None], cov[None]  # [P, 1], [1, P, P]
        i = torch.arange(c, device=mean.device)[:, None]
        f = torch.arange(F, device=mean.device)[None, :]
        means.append(mean.reshape(c, F, q, F)[i, f, :, f])  # [c, F, q]
        covs.append(cov.reshape(F, c, F, q, c, F, q)[f, i, f, :, i, f, :])  # [c, F, q, q]
    return torch.cat(means), torch.cat(covs)


def _shared_moments(model: _Predictive, X: Tensor, observed: bool) -> tuple[Tensor, Tensor]:
    """Mean [R, F, q] and covariance [R, F, q, q] of a model of F fantasies at X [R, q, d],
    the same inputs under every fantasy: joint predictions over chunks of rows give every
    fantasy at once (its means [P, F], its covariances [F, P, P] over P ≤ `POINTS_PER_CALL`
    points), of which each row's q-block is kept. Memory O(F·P²) per call and R·q/P calls,
    where taking each fantasy's inputs apart would predict at F times as many points."""
    R, q, d = X.shape
    predict = model.predict_y if observed else model.predict_f
    rows = max(1, POINTS_PER_CALL // q)
    means, covs = [], []
    for start in range(0, R, rows):
        chunk = X[start:start + rows]
        c = chunk.shape[0]
        mean, cov = predict(chunk.reshape(c * q, d), full_cov=True)  # [P, F], [F, P, P]
        F = mean.shape[-1]
        i = torch.arange(c, device=mean.device)
        means.append(mean.reshape(c, q, F).transpose(1, 2))  # [c, F, q]
        covs.append(cov.reshape(F, c, q, c, q)[:, i, :, i, :])  # [c, F, q, q]
    return torch.cat(means), torch.cat(covs)


@contextmanager
def _inputs_only(model: _Predictive) -> Iterator[None]:
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


def _check_model(model: SparseModel) -> None:
    name = type(model).__name__
    if not (isinstance(model, nn.Module) and hasattr(model, "predict_f")
            and hasattr(model, "predict_y")):
        raise TypeError(f"as_botorch takes a fitted sparsegp regression model (GPR, SGPR, SVGP "
                        f"with a Gaussian likelihood); got {name}")
    if getattr(model, "num_outputs", 1) != 1:
        raise ValueError(f"as_botorch takes a model of one output; this {name} has "
                         f"{model.num_outputs}")
    likelihood = getattr(model, "likelihood", None)
    if likelihood is not None and type(likelihood).__name__ != "Gaussian":
        raise ValueError(f"as_botorch takes a model with a Gaussian likelihood; this {name} has "
                         f"{type(likelihood).__name__}")


def _conditions(member: _Predictive) -> _Conditions:
    """The member, which must condition on observations (a GPR or SGPR)."""
    if not isinstance(member, _Conditions):
        raise TypeError("condition_on_observations takes a GPR or SGPR; this wrapper "
                        f"holds a {type(member).__name__}")
    return member


def _fantasies(model: SparseModel) -> int | None:
    return getattr(model, "num_fantasies", None)


def _per_batch(noise: ArrayLike | None, targets: torch.Size, extra: int, n: int
               ) -> list[ArrayLike | None]:
    """The known noise of the new points for each of the n batch elements ([k] or None)."""
    if noise is None or not isinstance(noise, Tensor):
        return [noise] * n
    t = noise[..., 0] if noise.dim() >= 2 and noise.shape[-1] == 1 else noise
    t = t.expand(targets)
    t = t[0] if extra else t  # the fantasies share the noise
    return list(t.reshape(n, targets[-1]))
