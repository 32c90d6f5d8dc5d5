"""Predictions in the caller's types, predictive distributions and posterior samples.

The rule (one code path for both): a prediction given a **torch tensor** returns torch tensors
in the tensor's dtype (a floating one; the model's dtype otherwise), in the units of y, and
differentiable with respect to the inputs and — while grad mode is on and the model has
parameters that require grad — every parameter. The posterior is then built with the graph
to the parameters (`posteriors.tracking`) at every call; with `torch.no_grad()` or
`model.requires_grad_(False)` the cached posterior serves, and gradients still reach the
inputs (as they do, alone, for KISS-GP, whose posterior is built by in-place Lanczos steps).
Anything else (numpy arrays, lists, DataFrames) is predicted under `torch.no_grad()` from the
cached posterior and returned as numpy arrays in the model's dtype.

`Predicting` gives every model, on top of its `predict_f` / `predict_y`:
`predictive` (a `torch.distributions` object) and `predict_f_samples` (joint samples).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.distributions import Bernoulli, Categorical, Distribution, MultivariateNormal, Normal

from ..linalg import jittered_cholesky
from ..posteriors import Posterior, tracking
from ..runtime.config import PARAMETER_DTYPE
from ..validation import as_inputs
from .pathwise import DEFAULT_FEATURES, PathwiseSamples

#: Relative jitter added to a joint predictive covariance before its Cholesky factor is taken
#: (sampling, `MultivariateNormal`): posterior covariances at nearby or repeated test points
#: are singular in exact arithmetic.
SAMPLE_JITTER = 1e-10


def prediction_inputs(Xnew: Any, name: str, num_features: int, dtype: torch.dtype,
                      device: torch.device) -> Tensor:
    """Inputs [N*, D] as float64 on the model's device: numpy-like values through the
    usual checks; a tensor checked the same way but returned with its graph (rounded to the
    model's dtype first, as numpy inputs are)."""
    if not isinstance(Xnew, Tensor):
        return as_inputs(Xnew, name, num_features=num_features, dtype=dtype,
                         device=device).to(PARAMETER_DTYPE)
    as_inputs(Xnew.detach(), name, num_features=num_features, device=device)  # checks only
    X = Xnew if Xnew.is_floating_point() else Xnew.to(PARAMETER_DTYPE)
    return X.to(dtype).to(PARAMETER_DTYPE)


class Call:
    """One prediction call: the inputs in the model's internal units, the posterior to read,
    and how results go back (`out`)."""

    def __init__(self, model: Any, Xnew: Any) -> None:
        self.tensor = isinstance(Xnew, Tensor)
        self.dtype = (Xnew.dtype if self.tensor and Xnew.is_floating_point() else model.dtype)
        self.model_dtype = model.dtype
        #: the posterior keeps the graph to the parameters
        self.tracks = self.tensor and torch.is_grad_enabled() and any(
            p.requires_grad for p in model.parameters())
        self.X: Tensor
        self.posterior: Posterior

    def out(self, *tensors: Tensor) -> tuple[Any, ...]:
        """Tensors in the caller's type: tensors (graph kept) or numpy arrays."""
        if self.tensor:
            return tuple(t.to(self.dtype) for t in tensors)
        return tuple(t.detach().to(self.model_dtype).cpu().numpy() for t in tensors)


class Predicting:
    """The prediction protocol every model shares. A model gives `_internal_inputs`,
    `_build_posterior`, `posterior()` and `predict_f` (and `predict_y` where y has a
    predictive distribution); this gives the distributions and the samples."""

    posterior_needs_data = True
    #: False: the posterior cannot be built with the graph to the parameters (KISS-GP's
    #: Lanczos run updates in place), so tensor predictions differentiate the inputs only
    tracks_parameters = True

    @contextmanager
    def _predicting(self, Xnew: Any, name: str = "Xnew") -> Iterator[Call]:
        """The call's inputs, its posterior and its output rule (see the module docstring)."""
        model: Any = self
        call = Call(model, Xnew)
        with nullcontext() if call.tensor else torch.no_grad():
            call.X = model._internal_inputs(Xnew, name)
            call.posterior = model._prediction_posterior(call.tracks)
            yield call

    def _prediction_posterior(self, tracks: bool) -> Posterior:
        """The posterior with the graph to the parameters (`tracks`; built anew) or the cached
        one. A model loaded without its data has only its saved posterior."""
        model: Any = self
        if tracks and self.tracks_parameters and (model.y is not None
                                                  or not self.posterior_needs_data):
            with tracking():
                return model._build_posterior()
        return model.posterior()

    # -- distributions and samples ----------------------------------------------------------
    def predictive(self, Xnew: Any, full_cov: bool = False, observed: bool = False
                   ) -> Distribution:
        """The predictive distribution at Xnew as a `torch.distributions` object.

        Of the latent f* by default; of the observations y* with `observed=True` (Gaussian
        likelihoods: `Normal` / `MultivariateNormal` with the noise added; Bernoulli:
        `Bernoulli`; several classes: `Categorical`). For f* (and Gaussian y*) a `Normal` of
        the marginals (batch shape [N*], or [N*, P] for P outputs) by default, and with
        `full_cov` a `MultivariateNormal` over the points (event shape [N*]; batch shape [P]
        for several outputs). Tensors, differentiable as `predict_f`'s (with `rsample`);
        numpy inputs give detached tensors in the model's dtype."""
        model: Any = self
        if observed:
            return self._observed_distribution(Xnew, full_cov)
        mean, var = (tensor_of(t) for t in model.predict_f(Xnew, full_cov=full_cov))
        return gaussian(mean, var, full_cov, model.jitter_for_sampling())

    def _observed_distribution(self, Xnew: Any, full_cov: bool) -> Distribution:
        """The predictive of y*: Gaussian here (regression models); classifiers override."""
        model: Any = self
        mean, var = (tensor_of(t) for t in model.predict_y(Xnew, full_cov=full_cov))
        return gaussian(mean, var, full_cov, model.jitter_for_sampling())

    def jitter_for_sampling(self) -> float:
        """The relative jitter on joint covariances (`SAMPLE_JITTER`)."""
        return SAMPLE_JITTER

    def predict_f_samples(self, Xnew: Any, num_samples: int = 1, full_cov: bool = True,
                          seed: int | torch.Generator | None = None) -> Any:
        """Samples of f* from the posterior, [S, N*] (or [S, N*, P] for P outputs): joint over
        the points of Xnew with `full_cov` (default), independent marginals without.

        Reparameterised (mean + L ε), so a tensor Xnew gives samples differentiable as
        `predict_f`; numpy in, numpy out. `seed` (an int or a `torch.Generator`) makes them
        reproducible."""
        if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or (
                num_samples < 1):
            raise ValueError(f"num_samples must be a positive integer; got {num_samples!r}")
        model: Any = self
        mean, var = (tensor_of(t) for t in model.predict_f(Xnew, full_cov=full_cov))
        generator = _generator(seed, mean.device)
        S = int(num_samples)
        if not full_cov:
            eps = torch.randn((S, *mean.shape), generator=generator, dtype=mean.dtype,
                              device=mean.device)
            samples = mean + var.clamp_min(0.0).sqrt() * eps
        else:
            L = joint_factor(var, self.jitter_for_sampling())  # [N*, N*] or [P, N*, N*]
            means = mean if mean.dim() == 1 else mean.mT  # [N*] or [P, N*]
            eps = torch.randn((S, *means.shape), generator=generator, dtype=mean.dtype,
                              device=mean.device)
            samples = means + (L @ eps.unsqueeze(-1)).squeeze(-1)
            if mean.dim() == 2:
                samples = samples.mT  # [S, N*, P]
        return samples if isinstance(Xnew, Tensor) else samples.detach().cpu().numpy()


    def pathwise_samples(self, num_samples: int = 1, num_features: int = DEFAULT_FEATURES,
                         seed: int | torch.Generator | None = None) -> PathwiseSamples:
        """S posterior samples as functions (Wilson et al. 2020): `paths = model.
        pathwise_samples(S)`, then `paths(Xnew)` -> [S, N*] at any inputs, any number of
        times, the same functions each time, at O(R + M) per point (R = `num_features`
        random Fourier feature pairs of the prior; M inducing points, or N data points for the
        exact GP). For stationary kernels with a known spectral density and posteriors over
        inducing points of one latent function, or the exact GP; see
        `sparsegp.models.pathwise`."""
        for name, value in (("num_samples", num_samples), ("num_features", num_features)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer; got {value!r}")
        model: Any = self
        fantasies = getattr(model, "num_fantasies", None)
        if fantasies is not None:
            raise ValueError(f"pathwise samples take one posterior; this model holds {fantasies} "
                             "fantasies (condition on one set of targets per model, or use "
                             "predict_f_samples, whose samples carry the fantasies)")
        generator = _generator(0 if seed is None else seed, torch.device("cpu"))
        if generator is None or generator.device.type != "cpu":
            raise ValueError("pathwise_samples takes an int seed or a CPU torch.Generator")
        with torch.no_grad():
            return PathwiseSamples(model, model.posterior(), int(num_samples),
                                   int(num_features), generator)


def tensor_of(t: Any) -> Tensor:
    """A prediction as a tensor (numpy results as tensors sharing their memory)."""
    return t if isinstance(t, Tensor) else torch.from_numpy(np.ascontiguousarray(t))


def gaussian_log_density(mean: Any, var: Any, ynew: Any) -> Any:
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


def _generator(seed: int | torch.Generator | None, device: torch.device
               ) -> torch.Generator | None:
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


def gaussian(mean: Tensor, var: Tensor, full_cov: bool, jitter: float) -> Distribution:
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
