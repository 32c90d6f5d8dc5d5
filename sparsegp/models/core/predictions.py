"""Predictions, written once for every model: posterior → output mixing → units →
likelihood, in the caller's types; predictive distributions and joint samples.

The path. The model's posterior (a frozen value, `posteriors`) gives the moments of its latent
functions at the new inputs (internal units); the linear model of coregionalisation, where a
model has one outside its posterior, mixes them into outputs (`functions`); the units of y
take them to the user's (`Units.outputs`): that is `predict_f`. `predict_y` adds the
observations: Gaussian noise (`noise.Noise`, any layout of the moments) or a likelihood's
predictive moments; `predict_log_density` scores observed targets under the same, in the
internal units, then per unit of y. Every model gives the same five things
(`Predictive`): its posterior, its mixing, its units, the observations at new points and
the check of observed targets.

The types (one code path for both): a prediction given a **torch tensor** returns torch
tensors in the tensor's dtype (a floating one; the model's dtype otherwise), in the units of
y, differentiable with respect to the inputs and — while grad mode is on and the model has
parameters that require grad — every parameter. The posterior is then built with the graph
to the parameters (`posteriors.tracking`) at every call; with `torch.no_grad()` or
`model.requires_grad_(False)` the cached posterior serves, and gradients still reach the
inputs (as they do, alone, for KISS-GP, whose posterior is built by in-place Lanczos steps).
Anything else (numpy arrays, lists, DataFrames) is predicted under `torch.no_grad()` from the
cached posterior and returned as numpy arrays in the model's dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Protocol, TypeAlias

import numpy as np
import torch
from torch import Tensor, nn
from torch.distributions import Bernoulli, Categorical, Distribution, MultivariateNormal, Normal

from ...conditionals import mix_outputs
from ...likelihoods.base import Likelihood
from ...linalg import jittered_cholesky
from ...posteriors import CoregionalPosterior, Posterior, tracking
from ...runtime.allocator import check_request
from ...runtime.config import PARAMETER_DTYPE
from ...validation import ArrayLike, as_inputs
from .noise import Noise
from .units import Units

#: Relative jitter added to a joint predictive covariance before its Cholesky factor is taken
#: (sampling, `MultivariateNormal`): posterior covariances at nearby or repeated test points
#: are singular in exact arithmetic.
SAMPLE_JITTER = 1e-10

#: N*×N* matrices a joint prediction holds at once (K**, the product it subtracts).
JOINT_MATRICES = 2

#: What a prediction returns: numpy arrays for numpy-like inputs, tensors for a tensor.
Result: TypeAlias = np.ndarray | Tensor

#: What y* is observed through: Gaussian noise, or a likelihood.
Observations: TypeAlias = Noise | Likelihood


class Predictive(Protocol):
    """What the prediction path needs of a model (every `Model` gives it)."""

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def units(self) -> Units: ...

    @property
    def input_dim(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]: ...

    def _internal_inputs(self, Xnew: ArrayLike, name: str = "Xnew") -> Tensor: ...

    def _prediction_posterior(self, tracks: bool) -> Posterior: ...

    def _output_mixing(self) -> Tensor | None: ...

    def _observations(self, rows: int, noise_variance: ArrayLike | None,
                      noise_groups: ArrayLike | None) -> Observations: ...

    def _new_targets(self, ynew: ArrayLike, rows: int) -> Tensor: ...

    def _keeps_columns(self) -> bool: ...


def prediction_inputs(Xnew: ArrayLike, name: str, num_features: int, dtype: torch.dtype,
                      device: torch.device) -> Tensor:
    """Inputs [N*, D] as float64 on the model's device: numpy-like values through the
    usual checks; a tensor checked the same way but returned with its graph (rounded to the
    model's dtype first, as numpy inputs are)."""
    if not isinstance(Xnew, Tensor):
        return as_inputs(Xnew, name, num_features=num_features, dtype=dtype,
                         device=device).to(PARAMETER_DTYPE)
    # checks only (inside a torch.func transform the shape alone: `as_tensor`, `check_finite`)
    as_inputs(Xnew.detach(), name, num_features=num_features, device=device)
    X = Xnew if Xnew.is_floating_point() else Xnew.to(PARAMETER_DTYPE)
    return X.to(dtype).to(PARAMETER_DTYPE)


class Call:
    """One prediction call: the inputs in the model's internal units, the posterior to read,
    and how results go back (`out`)."""

    def __init__(self, model: Predictive, Xnew: ArrayLike) -> None:
        self.tensor = isinstance(Xnew, Tensor)
        self.dtype = (Xnew.dtype if isinstance(Xnew, Tensor) and Xnew.is_floating_point()
                      else model.dtype)
        self.model_dtype = model.dtype
        #: the posterior keeps the graph to the parameters
        self.tracks = self.tensor and torch.is_grad_enabled() and any(
            p.requires_grad for p in model.parameters())
        self.X: Tensor
        self.posterior: Posterior

    def out(self, *tensors: Tensor) -> tuple[Result, ...]:
        """Tensors in the caller's type: tensors (graph kept) or numpy arrays."""
        if self.tensor:
            return tuple(t.to(self.dtype) for t in tensors)
        return tuple(t.detach().to(self.model_dtype).cpu().numpy() for t in tensors)


@contextmanager
def predicting(model: Predictive, Xnew: ArrayLike, name: str = "Xnew") -> Iterator[Call]:
    """The call's inputs, its posterior and its output rule (see the module docstring)."""
    call = Call(model, Xnew)
    with nullcontext() if call.tensor else torch.no_grad():
        call.X = model._internal_inputs(Xnew, name)
        call.posterior = model._prediction_posterior(call.tracks)
        yield call


def built_posterior(build: Callable[[], Posterior]) -> Posterior:
    """`build()` (a model's posterior builder) with the graph to the parameters kept."""
    with tracking():
        return build()


# -- the path ------------------------------------------------------------------------------
def latent(post: Posterior, X: Tensor, full_cov: bool) -> tuple[Tensor, Tensor]:
    """Mean [N*, C] and variances [N*, C] (covariances [C, N*, N*]) of the posterior's latent
    functions, internal units (one latent function as one column)."""
    mean, var = post.predict_f(X, full_cov)
    if mean.dim() == 1:
        mean, var = mean[:, None], (var[None] if full_cov else var[:, None])
    return mean, var


def functions(model: Predictive, call: Call, full_cov: bool = False,
              full_output_cov: bool = False) -> tuple[Tensor, Tensor]:
    """Mean [N*, C] of the functions the observations see (the latent functions, or the P
    outputs W g of the linear model of coregionalisation) and their variances [N*, C],
    covariances over the points [C, N*, N*] (`full_cov`) or over the outputs at each point
    [N*, C, C] (`full_output_cov`), internal units."""
    if full_cov and full_output_cov:
        raise ValueError("full_cov (over the points) and full_output_cov (over the outputs "
                         "at each point) cannot both be asked for")
    post = call.posterior
    if full_cov:  # refused before the allocator's raw error, after the work before it
        n = call.X.shape[0]
        check_request(JOINT_MATRICES * n * n * call.X.element_size(),
                      f"a joint predictive covariance over {n} points ({JOINT_MATRICES} "
                      f"{n}×{n} matrices)", "predict with full_cov=False (marginal variances),"
                      " or jointly over fewer points at a time", call.X.device)
    if full_output_cov and isinstance(post, CoregionalPosterior):  # it couples its outputs
        return post.predict_output_cov(call.X)
    mean, var = latent(post, call.X, full_cov)
    return mix_outputs(mean, model._output_mixing(), var, None, full_cov, full_output_cov)


def shaped(model: Predictive, mean: Tensor, var: Tensor, full_cov: bool,
           full_output_cov: bool) -> tuple[Tensor, Tensor]:
    """One column as a vector [N*] (covariance [N*, N*]) unless the model keeps its columns
    (several outputs, fantasies, the random-input models' outputs) or the outputs'
    covariance was asked for."""
    if mean.shape[1] != 1 or full_output_cov or model._keeps_columns():
        return mean, var
    return mean[:, 0], (var[0] if full_cov else var[:, 0])


def predict_f(model: Predictive, Xnew: ArrayLike, full_cov: bool = False,
              full_output_cov: bool = False) -> tuple[Result, ...]:
    """Mean and variance (or covariance) of the latent functions (outputs), units of y."""
    with predicting(model, Xnew) as call:
        mean, var = functions(model, call, full_cov, full_output_cov)
        mean, var = model.units.outputs(mean, var)
        return call.out(*shaped(model, mean, var, full_cov, full_output_cov))


def observed_moments(model: Predictive, call: Call, full_cov: bool, full_output_cov: bool,
                     noise_variance: ArrayLike | None, noise_groups: ArrayLike | None
                     ) -> tuple[Tensor, Tensor]:
    """Mean and variance (or covariance) of y* in the units of y, shaped."""
    mean, var = functions(model, call, full_cov, full_output_cov)
    obs = model._observations(call.X.shape[0], noise_variance, noise_groups)
    if isinstance(obs, Noise):
        var = obs.add(var, full_cov, full_output_cov)
    else:
        if full_cov or full_output_cov:
            raise ValueError("full_cov and full_output_cov of y* need a Gaussian likelihood; "
                             f"this {type(model).__name__}'s is {type(obs).__name__} (predict_f "
                             "gives the covariances of f*)")
        if obs.num_latent == 1 and mean.shape[1] == 1:
            mean, var = obs.predict_mean_and_var(mean[:, 0], var[:, 0])
        else:
            mean, var = obs.predict_mean_and_var(mean, var)
        if mean.dim() == 1:
            mean, var = mean[:, None], var[:, None]
    mean, var = model.units.outputs(mean, var)
    return shaped(model, mean, var, full_cov, full_output_cov)


def predict_y(model: Predictive, Xnew: ArrayLike, full_cov: bool = False,
              full_output_cov: bool = False, noise_variance: ArrayLike | None = None,
              noise_groups: ArrayLike | None = None) -> tuple[Result, ...]:
    """Mean and variance (or covariance) of y*, units of y."""
    with predicting(model, Xnew) as call:
        return call.out(*observed_moments(model, call, full_cov, full_output_cov,
                                          noise_variance, noise_groups))


def predict_log_density(model: Predictive, Xnew: ArrayLike, ynew: ArrayLike,
                        noise_variance: ArrayLike | None = None,
                        noise_groups: ArrayLike | None = None) -> Result:
    """log p(y* | data) of every observed target (NaN where one is missing), units of y."""
    with predicting(model, Xnew) as call:
        mean, var = functions(model, call)
        n = call.X.shape[0]
        y = model._new_targets(ynew.detach().to(model.dtype) if isinstance(ynew, Tensor)
                               else ynew, n)
        obs = model._observations(n, noise_variance, noise_groups)
        if mean.shape[1] == 1 and y.dim() == 1:
            mean, var = mean[:, 0], var[:, 0]
        if isinstance(obs, Noise):
            log_p = obs.log_density(mean, var, y.to(mean.dtype))
        else:
            log_p = obs.predict_log_density(mean, var, y.to(mean.dtype))
        if log_p.dim() == 2 and log_p.shape[1] == 1 and not model._keeps_columns():
            log_p = log_p[:, 0]
        return call.out(model.units.log_density(log_p))[0]


# -- distributions and samples --------------------------------------------------------------
def tensor_of(t: Result) -> Tensor:
    """A prediction as a tensor (numpy results as tensors sharing their memory)."""
    return t if isinstance(t, Tensor) else torch.from_numpy(np.ascontiguousarray(t))


def gaussian_log_density(mean: Result, var: Result, ynew: ArrayLike) -> Result:
    """log N(ynew | mean, var) per entry, the caller's type (as `mean`'s): the log predictive
    density of Gaussian predictions at observed targets. ynew must have the predictions' shape
    (a column [N*, 1] is taken as [N*]); NaN (a missing output) gives NaN."""
    m, v = tensor_of(mean), tensor_of(var)
    y = ynew.to(m.dtype) if isinstance(ynew, Tensor) else torch.as_tensor(
        np.asarray(ynew, dtype=np.float64), dtype=m.dtype)
    if y.dim() == 2 and y.shape[1] == 1 and m.dim() == 1:
        y = y[:, 0]
    if tuple(y.shape) != tuple(m.shape):
        raise ValueError(f"ynew must have shape {list(m.shape)} (one target per prediction); "
                         f"got {list(y.shape)}")
    out = Normal(m, v.sqrt()).log_prob(y.to(m.device))
    return out if isinstance(mean, Tensor) else out.numpy()


def generator_of(seed: int | torch.Generator | None, device: torch.device
                 ) -> torch.Generator | None:
    """A generator from a seed (an int, a generator as it is, or None)."""
    if seed is None or isinstance(seed, torch.Generator):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an int or a torch.Generator; got {seed!r}")
    g = torch.Generator(device=device)
    g.manual_seed(int(seed))
    return g


def joint_factor(cov: Tensor, jitter: float) -> Tensor:
    """Lower Cholesky factors of covariances [N, N] or [P, N, N], with `jitter` relative to
    the mean diagonal (escalated, with a warning, where the matrix is further from positive
    definite)."""
    if cov.dim() == 2:
        return jittered_cholesky(cov, jitter, name="the predictive covariance")[0]
    return torch.stack([joint_factor(c, jitter) for c in cov])


def gaussian(mean: Tensor, var: Tensor, full_cov: bool, jitter: float = SAMPLE_JITTER
             ) -> Distribution:
    """`Normal` of the marginals, or a `MultivariateNormal` over the points (outputs as a
    batch dimension) of a prediction's moments."""
    if not full_cov:
        return Normal(mean, var.clamp_min(0.0).sqrt())
    means = mean if mean.dim() == 1 else mean.mT
    return MultivariateNormal(means, scale_tril=joint_factor(var, jitter))


def label_distribution(probabilities: Tensor) -> Distribution:
    """`Bernoulli` of P(y* = 1) [N*], or `Categorical` of class probabilities [N*, C]."""
    if probabilities.dim() == 1:
        return Bernoulli(probs=probabilities)
    return Categorical(probs=probabilities)


def samples(mean: Tensor, var: Tensor, num_samples: int, full_cov: bool,
            generator: torch.Generator | None) -> Tensor:
    """Reparameterised samples of predictions' moments: [S, N*] (or [S, N*, P]), joint over
    the points with `full_cov` (mean + L ε), independent marginals without."""
    S = int(num_samples)
    if not full_cov:
        eps = torch.randn((S, *mean.shape), generator=generator, dtype=mean.dtype,
                          device=mean.device)
        return mean + var.clamp_min(0.0).sqrt() * eps
    L = joint_factor(var, SAMPLE_JITTER)  # [N*, N*] or [P, N*, N*]
    means = mean if mean.dim() == 1 else mean.mT  # [N*] or [P, N*]
    eps = torch.randn((S, *means.shape), generator=generator, dtype=mean.dtype,
                      device=mean.device)
    drawn = means + (L @ eps.unsqueeze(-1)).squeeze(-1)
    return drawn.mT if mean.dim() == 2 else drawn  # [S, N*, P]


def check_count(value: object, name: str) -> int:
    """A positive integer count (of samples, of features), or a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer; got {value!r}")
    return int(value)
