"""Constructor recipes for every registered class, in one place: registering a class is what
gets it tested.

Each registry (`Kernel.registry`, `InducingFeature.registry`, `Likelihood.registry`,
`Mean.registry`, `models.classes.MODELS`) lists its classes by name; `registered(kind)` keeps
the concrete ones that sparsegp itself defines (not abstract bases, not classes that tests or
doctests define on the fly). Every one of them needs at least one recipe below, under its class
name: `test_every_registered_<kind>_has_a_recipe` fails otherwise, and the generic checks in
`test_<kind>s.py` are parametrised over the recipes. A recipe is small: how to build an
instance (tiny, float64, every parameter given explicitly) and what the class declares about
itself (a documented refusal, a known tolerance). A check that finds a bug in code this suite
may not change is marked there with `bugs={check: reason}`, which turns that one check into
`xfail(strict=True)`: visible, and failing once the bug is fixed.

To test a new class: register it (subclass the base), then add its recipe to the table of its
kind below.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

import sparsegp as sg
from sparsegp.features import InducingFeature
from sparsegp.kernels import Kernel
from sparsegp.likelihoods import Likelihood
from sparsegp.means import Mean
from sparsegp.models.core.registry import MODELS
from sparsegp.models.sgpr.streaming import update as streaming_update

from .helpers import normal, perturb, uniform

F, K, L, means = sg.features, sg.kernels, sg.likelihoods, sg.means

REGISTRIES = {"kernel": Kernel.registry, "feature": InducingFeature.registry,
              "likelihood": Likelihood.registry, "mean": Mean.registry, "model": MODELS}


# -- which classes are registered -------------------------------------------------------------
@cache
def import_every_module() -> None:
    """Import every module of sparsegp (classes register themselves when defined, wherever
    they are defined); `__main__` would run the command line."""
    for info in pkgutil.walk_packages(sg.__path__, "sparsegp."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)


def defined_by_sparsegp(cls: type) -> bool:
    """A class of the package's source: reachable as `module.qualname`. A class that a test or
    a doctest defines (doctests run in a copy of the module's namespace) is not."""
    module = sys.modules.get(cls.__module__)
    if module is None or not cls.__module__.startswith("sparsegp."):
        return False
    obj: Any = module
    for part in cls.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is cls


def registered(kind: str) -> dict[str, type]:
    """The concrete registered classes of one kind that sparsegp defines, by name."""
    import_every_module()
    registry = REGISTRIES[kind]
    classes = {name: registry.get(name) for name in registry.names()}
    return {name: cls for name, cls in classes.items()
            if defined_by_sparsegp(cls) and not inspect.isabstract(cls)}


# -- recipes ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One way of building an instance of a registered class."""

    id: str
    make: Callable[[], Any]
    #: check name -> reason: that check is a known bug, xfail(strict=True) until fixed
    bugs: dict[str, str] = field(default_factory=dict, kw_only=True)


@dataclass(frozen=True)
class KernelCase(Case):
    input_dim: int = 2
    #: X [N, D] for the kernel (normal by default; images for convolutional kernels)
    inputs: Callable[[int, int], Tensor] | None = None
    #: False: the kernel has no covariance of its own and says so (kernels.Separate)
    covariance: bool = True

    def X(self, n: int, seed: int) -> Tensor:
        return self.inputs(n, seed) if self.inputs else normal(n, self.input_dim, seed=seed)


@dataclass(frozen=True)
class FeatureCase(Case):
    """`make()` -> (feature, a kernel it pairs with); `complete(X)` -> (feature of this class,
    kernel) whose inducing variables determine f(X) exactly (inducing points at X, every patch
    of the images, ...), so that SGPR (VFE) equals the exact GP; None where the class has no
    such configuration (the reason in `no_complete`)."""

    inputs: Callable[[int, int], Tensor] | None = None
    complete: Callable[[Tensor], tuple[InducingFeature, Kernel]] | None = None
    no_complete: str = ""
    #: `extended(Z)` adds inducing points f(Z) (else it refuses with a TypeError)
    extends: bool = True
    #: `transformed(shift, scale)` rewrites the feature for standardised inputs (else TypeError)
    transforms: bool = True

    def X(self, n: int, seed: int, dim: int) -> Tensor:
        return self.inputs(n, seed) if self.inputs else normal(n, dim, seed=seed)


@dataclass(frozen=True)
class LikelihoodCase(Case):
    #: targets y [N] the likelihood accepts
    targets: Callable[[int], Tensor] = lambda n: normal(n, seed=11)
    #: agreement of the Gaussian expectations with brute-force integration (beyond the
    #: reference's own error bars)
    atol: float = 1e-8
    #: Power EP's tilted moments are defined (else `tilted_moments` refuses with a TypeError)
    tilted: bool = True


@dataclass(frozen=True)
class MeanCase(Case):
    input_dim: int = 2


@dataclass(frozen=True)
class ModelCase(Case):
    #: the model's predictions (a tuple of arrays) at a few new inputs
    predict: Callable[[Any], tuple] = lambda m: m.predict(_X_NEW)
    #: "exact": the gradient of training_loss is that of its value; "unbiased": an unbiased
    #: stochastic estimate (fresh probe vectors per `training_loss(step)`), checked in the mean
    gradient: str = "exact"
    #: new inputs X* [N*, D] of the prediction checks (test_predictions.py), of the model's
    #: input width (None: the 5 two-dimensional points `_X_NEW`)
    new_inputs: np.ndarray | None = None
    #: observations y* at `new_inputs` that the model's likelihood accepts (its labels, its
    #: outputs' shape), for `predict_log_density`: every recipe needs them
    new_targets: np.ndarray | None = None
    #: what `predictive(X*, observed=True)` is: "gaussian" (Normal / MultivariateNormal of
    #: `predict_y`'s moments), "labels" (Bernoulli / Categorical of `predict_proba`; the models
    #: whose `classifies` is true) or "moments" (`predict_y` gives moments only: the
    #: distribution refuses with NotImplementedError)
    observed: str = "gaussian"
    #: moves what the parameters do not hold away from its initial value (SGPC's EP sites,
    #: zero as built: q(v) the prior), so that the prediction checks run at a generic state
    #: (they perturb the parameters themselves); None: the parameters are the whole state
    settle: Callable[[Any], Any] | None = None
    #: "" a model as its constructor or `update` builds it; "conditioned": a model of
    #: `condition_on_observations` (its parameters frozen: nothing to train, no gradients to
    #: the parameters); "fantasies": conditioned on F sets of targets (also no single data set:
    #: no objective, saved without data only, and a posterior nothing can rebuild, so the
    #: checks leave its parameters as they are: the recipe perturbs the model it conditions)
    conditioned: str = ""

    def Xnew(self) -> np.ndarray:
        return _X_NEW if self.new_inputs is None else self.new_inputs

    def ynew(self) -> np.ndarray:
        assert self.new_targets is not None, (
            f"the recipe {self.id!r} gives no new_targets (observations at its new_inputs for "
            "predict_log_density): add them in tests/conformance/recipes.py MODELS_")
        return self.new_targets


# -- data --------------------------------------------------------------------------------------
def images(n: int, seed: int, pixels: int) -> Tensor:
    return uniform(n, pixels, seed=seed)


_RNG = np.random.default_rng(0)
_X = _RNG.uniform(-2.0, 2.0, (20, 2))
_Y = np.sin(_X).sum(1) + 0.1 * _RNG.standard_normal(20)
_X_NEW = _X[:5] + 0.17
_LATENT = np.c_[np.tanh(_X @ _RNG.standard_normal((2, 3))), _Y] + 0.05 * _RNG.standard_normal((20, 4))
#: targets at _X_NEW for the log predictive densities (not drawn from _RNG: the data above stay)
_Y_NEW = np.sin(_X_NEW).sum(1)
_LABELS_NEW = (_Y_NEW > 0).astype(float)


# -- kernels ----------------------------------------------------------------------------------
def _convolutional(base: Kernel, **options: Any) -> K.Convolutional:
    return K.Convolutional(base, image_shape=(3, 3), patch_shape=(2, 2), **options)


KERNELS: dict[str, list[KernelCase]] = {
    "SquaredExponential": [
        KernelCase("scalar", lambda: K.SquaredExponential(lengthscale=0.9, variance=1.3)),
        KernelCase("ard", lambda: K.SquaredExponential(lengthscale=[0.7, 1.4, 1.1], variance=0.8),
                   input_dim=3),
    ],
    "Matern12": [KernelCase("ard", lambda: K.Matern12(lengthscale=[0.8, 1.3], variance=1.2))],
    "Matern32": [KernelCase("scalar", lambda: K.Matern32(lengthscale=0.9, variance=0.7))],
    "Matern52": [KernelCase("ard", lambda: K.Matern52(lengthscale=[1.2, 0.6], variance=1.1))],
    "RationalQuadratic": [
        KernelCase("scalar", lambda: K.RationalQuadratic(lengthscale=0.9, variance=1.1, alpha=0.7)),
        KernelCase("ard", lambda: K.RationalQuadratic(lengthscale=[0.8, 1.3], variance=0.9,
                                                      alpha=2.5)),
    ],
    "Polynomial": [
        KernelCase("cubic", lambda: K.Polynomial(degree=3, variance=0.6, offset=0.8)),
        KernelCase("homogeneous", lambda: K.Polynomial(degree=2, variance=1.2, offset=0.0),
                   input_dim=3),
    ],
    "Periodic": [
        KernelCase("ard", lambda: K.Periodic(lengthscale=[0.8, 1.2], variance=1.4,
                                             period=[1.3, 2.2])),
        KernelCase("scalar", lambda: K.Periodic(lengthscale=0.7, variance=0.9, period=1.1),
                   input_dim=1),
    ],
    "Linear": [
        KernelCase("ard", lambda: K.Linear(variance=[0.5, 1.5])),
        KernelCase("scalar", lambda: K.Linear(variance=0.8), input_dim=3),
    ],
    "Constant": [KernelCase("", lambda: K.Constant(variance=0.7))],
    "Sum": [KernelCase("", lambda: K.Matern32(lengthscale=0.8, variance=1.0)
                       + K.Linear(variance=0.3) + K.Constant(variance=0.2))],
    "Product": [KernelCase("", lambda: K.SquaredExponential(lengthscale=0.8, variance=1.2)
                           * K.Periodic(lengthscale=1.0, variance=1.0, period=1.7))],
    "Convolutional": [
        KernelCase("invariant", lambda: _convolutional(K.SquaredExponential(lengthscale=0.9,
                                                                            variance=1.2)),
                   input_dim=9, inputs=lambda n, s: images(n, s, 9)),
        KernelCase("weighted-ard-matern",
                   lambda: _convolutional(K.Matern52(lengthscale=[0.8, 1.1, 0.9, 1.3], variance=0.9),
                                          weighted=True, weights=[1.0, 0.5, -0.3, 0.8]),
                   input_dim=9, inputs=lambda n, s: images(n, s, 9)),
        KernelCase("weighted-ard-se",  # the hand-written gradient of K_diag
                   lambda: _convolutional(K.SquaredExponential(lengthscale=[0.8, 1.1, 0.9, 1.3],
                                                               variance=0.9),
                                          weighted=True, weights=[1.0, 0.5, -0.3, 0.8]),
                   input_dim=9, inputs=lambda n, s: images(n, s, 9)),
        KernelCase("multichannel", lambda: _convolutional(
            K.SquaredExponential(lengthscale=0.8, variance=1.1), channels=2, multichannel=True,
            weighted=True, weights=np.linspace(0.5, 1.5, 8)),
            input_dim=18, inputs=lambda n, s: images(n, s, 18)),
        KernelCase("colour", lambda: _convolutional(K.Matern32(lengthscale=0.8, variance=1.1),
                                                    channels=2),
                   input_dim=18, inputs=lambda n, s: images(n, s, 18)),
    ],
    "ArcCosine": [
        KernelCase("order0", lambda: K.ArcCosine(order=0, variance=1.2, weight_variances=[0.8, 1.3],
                                                 bias_variance=0.4)),
        KernelCase("order1", lambda: K.ArcCosine(order=1, variance=0.9, weight_variances=0.7,
                                                 bias_variance=1.1), input_dim=3),
        KernelCase("order2", lambda: K.ArcCosine(order=2, variance=0.6, weight_variances=[1.1, 0.5],
                                                 bias_variance=0.3)),
    ],
    "SpectralMixture": [
        KernelCase("ard", lambda: K.SpectralMixture(weights=[0.8, 0.5],
                                                    means=[[0.3, 0.1], [0.7, 0.4]],
                                                    scales=[[0.4, 0.2], [0.3, 0.5]])),
        KernelCase("shared", lambda: K.SpectralMixture(weights=[1.1, 0.4, 0.3],
                                                       means=[0.2, 0.5, 0.9],
                                                       scales=[0.3, 0.2, 0.6]), input_dim=1),
    ],
    "ChangePoints": [
        KernelCase("three", lambda: K.ChangePoints(
            [K.Matern32(lengthscale=0.9, variance=1.1), K.Linear(variance=0.6),
             K.SquaredExponential(lengthscale=[0.7, 1.2], variance=0.8)],
            locations=[0.4, -0.3], steepness=[2.0, 3.5])),
        KernelCase("column1", lambda: K.ChangePoints(
            [K.SquaredExponential(lengthscale=0.8, variance=1.0), K.Periodic(
                lengthscale=0.9, variance=0.7, period=1.3)], locations=[0.1], steepness=1.5,
            dim=1), input_dim=3),
    ],
    "Active": [
        KernelCase("ard-reordered", lambda: K.Active(K.Matern52(lengthscale=[0.9, 1.3], variance=0.7),
                                                     [2, 1]), input_dim=3),
        KernelCase("of-a-sum", lambda: K.Active(K.SquaredExponential(lengthscale=0.8, variance=1.1)
                                                + K.Linear(variance=0.4), [0, 2]), input_dim=4),
        KernelCase("one-column", lambda: K.Active(K.Periodic(lengthscale=0.9, variance=1.0,
                                                             period=1.4), 1)),
    ],
    "Separate": [KernelCase("", lambda: K.Separate([K.SquaredExponential(lengthscale=0.9, variance=1.0),
                                                    K.Matern32(lengthscale=1.2, variance=0.5)]),
                            covariance=False)],
}


# -- inducing features ------------------------------------------------------------------------
def _se() -> K.SquaredExponential:
    return K.SquaredExponential(lengthscale=[0.8, 1.3], variance=1.2)


def _patches_of(kernel: K.Convolutional, X: Tensor) -> Tensor:
    return kernel.patches(X).reshape(-1, kernel.patch_dim)


def _conv_se() -> K.Convolutional:
    return _convolutional(K.SquaredExponential(lengthscale=0.9, variance=1.1), weighted=True,
                          weights=[1.0, 0.5, -0.3, 0.8])


def _conv_multichannel() -> K.Convolutional:
    return _convolutional(K.Matern32(lengthscale=0.9, variance=1.1), channels=2, multichannel=True)


def _two_kernels() -> K.Sum:
    return (K.Matern32(lengthscale=0.9, variance=0.6)
            + K.SquaredExponential(lengthscale=[1.1, 0.7], variance=0.8))


def _separate_kernels() -> K.Separate:
    return K.Separate([K.SquaredExponential(lengthscale=[0.8, 1.3], variance=1.2),
                       K.Matern52(lengthscale=1.1, variance=0.7)])


FEATURES: dict[str, list[FeatureCase]] = {
    "InducingPoints": [
        FeatureCase("se", lambda: (F.InducingPoints(normal(4, 2, seed=5)), _se()),
                    complete=lambda X: (F.InducingPoints(X), _se())),
        FeatureCase("periodic", lambda: (F.InducingPoints(normal(4, 2, seed=5)),
                                         K.Periodic(lengthscale=0.8, variance=1.0, period=1.5)),
                    complete=lambda X: (F.InducingPoints(X), K.Periodic(lengthscale=0.8, variance=1.0,
                                                                       period=1.5))),
    ],
    "Multiscale": [
        FeatureCase("se", lambda: (F.Multiscale(normal(4, 2, seed=5), uniform(4, 2, seed=6, low=0.2,
                                                                              high=1.0)), _se()),
                    complete=lambda X: (F.Multiscale(X, 1e-7), _se())),
    ],
    "Fourier": [
        FeatureCase("frequency", lambda: (F.Fourier(normal(4, 2, seed=6), 0.7, None,
                                                    uniform(4, seed=7, high=6.0)), _se()),
                    no_complete="frequency features all have their window at one centre",
                    extends=False),
        FeatureCase("time-frequency", lambda: (F.Fourier(normal(4, 2, seed=6),
                                                         uniform(4, 2, seed=8, low=0.3, high=1.0),
                                                         normal(4, 2, seed=9),
                                                         uniform(4, seed=7, high=6.0)), _se()),
                    complete=lambda X: (F.Fourier(torch.zeros_like(X), 1e-7, X,
                                                  torch.zeros(X.shape[0], dtype=X.dtype)), _se())),
    ],
    "SumOfDeltas": [
        FeatureCase("se", lambda: (F.SumOfDeltas(normal(4, 3, 2, seed=5), normal(4, 3, seed=8)), _se()),
                    complete=lambda X: (F.SumOfDeltas(X[:, None, :], torch.ones(X.shape[0], 1)), _se())),
        FeatureCase("matern32", lambda: (F.SumOfDeltas(normal(4, 3, 2, seed=5), normal(4, 3, seed=8)),
                                         K.Matern32(lengthscale=[0.8, 1.3], variance=0.9)),
                    complete=lambda X: (F.SumOfDeltas(X[:, None, :], torch.ones(X.shape[0], 1)),
                                        K.Matern32(lengthscale=[0.8, 1.3], variance=0.9))),
    ],
    "InducingPatches": [
        FeatureCase("", lambda: (F.InducingPatches(uniform(5, 4, seed=5)), _conv_se()),
                    inputs=lambda n, s: images(n, s, 9),
                    complete=lambda X: (F.InducingPatches(_patches_of(_conv_se(), X)), _conv_se()),
                    extends=False, transforms=False),
    ],
    "MultiChannelPatches": [
        FeatureCase("", lambda: (F.MultiChannelPatches(uniform(3, 4, seed=5), 2), _conv_multichannel()),
                    inputs=lambda n, s: images(n, s, 18),
                    complete=lambda X: (F.MultiChannelPatches(_patches_of(_conv_multichannel(), X), 2),
                                        _conv_multichannel()),
                    extends=False, transforms=False),
    ],
    "Stacked": [
        FeatureCase("", lambda: (F.Stacked([F.InducingPoints(normal(3, 2, seed=5)),
                                            F.Multiscale(normal(3, 2, seed=6), 0.4)]), _two_kernels()),
                    complete=lambda X: (F.Stacked([F.InducingPoints(X), F.InducingPoints(X)]),
                                        _two_kernels()),
                    extends=False),
    ],
    "Separate": [
        FeatureCase("", lambda: (F.Separate([F.InducingPoints(normal(4, 2, seed=5)),
                                             F.InducingPoints(normal(4, 2, seed=6))]),
                                 _separate_kernels()),
                    complete=lambda X: (F.Separate([F.InducingPoints(X), F.InducingPoints(X)]),
                                        _separate_kernels()),
                    extends=False),
    ],
}


# -- likelihoods ------------------------------------------------------------------------------
def _labels(n: int, classes: int) -> Tensor:
    return torch.arange(n, dtype=torch.float64) % classes


LIKELIHOODS: dict[str, list[LikelihoodCase]] = {
    "Gaussian": [LikelihoodCase("", lambda: L.Gaussian(variance=0.3))],
    "Bernoulli": [
        LikelihoodCase("probit", lambda: L.Bernoulli(), targets=lambda n: _labels(n, 2)),
        LikelihoodCase("logit", lambda: L.Bernoulli(link="logit"), targets=lambda n: _labels(n, 2)),
    ],
    "Poisson": [LikelihoodCase("", lambda: L.Poisson(),
                               targets=lambda n: torch.tensor([0.0, 1.0, 3.0, 7.0, 20.0])[:n])],
    "StudentT": [LikelihoodCase("", lambda: L.StudentT(df=2.5, scale=0.4),  # one outlier
                                targets=lambda n: torch.tensor([0.3, -1.2, 6.0, 0.0, 2.5])[:n])],
    "NegativeBinomial": [LikelihoodCase("", lambda: L.NegativeBinomial(dispersion=1.5),
                                        targets=lambda n: torch.tensor([0.0, 2.0, 5.0, 1.0, 30.0])[:n])],
    "Gamma": [LikelihoodCase("", lambda: L.Gamma(shape=2.5),
                             targets=lambda n: torch.tensor([0.3, 1.0, 2.5, 0.05, 12.0])[:n])],
    "Beta": [
        LikelihoodCase("logit", lambda: L.Beta(precision=6.0),
                       targets=lambda n: torch.tensor([0.3, 0.9, 0.5, 0.02, 0.7])[:n]),
        LikelihoodCase("probit", lambda: L.Beta(precision=2.5, link="probit"),
                       targets=lambda n: torch.tensor([0.3, 0.9, 0.5, 0.02, 0.7])[:n]),
    ],
    "Ordinal": [
        LikelihoodCase("probit", lambda: L.Ordinal(4, cutpoints=[-1.0, 0.2, 1.5], scale=0.7),
                       targets=lambda n: _labels(n, 4)),
        LikelihoodCase("logit", lambda: L.Ordinal(3, link="logit"), targets=lambda n: _labels(n, 3)),
    ],
    "HeteroscedasticGaussian": [LikelihoodCase("", lambda: L.HeteroscedasticGaussian(),
                                               tilted=False)],
    "MultiClass": [
        # the softmax expectations are themselves quasi-Monte Carlo estimates (the class
        # docstring: errors of order 1e-4 with 1024 points); 4096 here
        LikelihoodCase("softmax", lambda: L.MultiClass(3, num_samples=4096),
                       targets=lambda n: _labels(n, 3), atol=2e-3, tilted=False),
        LikelihoodCase("robustmax", lambda: L.MultiClass(3, link="robustmax", epsilon=0.01),
                       targets=lambda n: _labels(n, 3), atol=1e-6, tilted=False),
    ],
}


# -- means ------------------------------------------------------------------------------------
def _on_one_latent() -> Mean:
    from sparsegp.models.svgp import OnOneLatent
    return OnOneLatent(means.Linear(weights=[0.5, -1.2], bias=0.3), 1, 3)


MEANS: dict[str, list[MeanCase]] = {
    "Zero": [MeanCase("", lambda: means.Zero())],
    "Constant": [MeanCase("", lambda: means.Constant(1.3))],
    "Linear": [MeanCase("", lambda: means.Linear(weights=[0.5, -1.2, 0.7], bias=0.3), input_dim=3)],
    "Sum": [MeanCase("", lambda: means.Constant(0.4) + means.Linear(weights=[0.5, -1.2], bias=0.3))],
    "OnOneLatent": [MeanCase("", _on_one_latent)],
}


# -- models -----------------------------------------------------------------------------------
def _matern() -> Kernel:
    return K.Matern52(lengthscale=[1.0, 1.5], variance=1.1)


def _conditioned(model: Any, fantasies: int | None = None) -> Any:
    """`model` (its parameters moved off the recipe's values) conditioned on three new points:
    one set of targets, or `fantasies` sets of them."""
    perturb(model, seed=5, scale=0.05)
    y = (_Y_NEW[:3] if fantasies is None
         else _Y_NEW[:3] + 0.3 * _RNG_FANTASIES.standard_normal((fantasies, 3)))
    return model.condition_on_observations(_X_NEW[:3] - 0.4, y)


_RNG_FANTASIES = np.random.default_rng(1)
#: the targets of a model of 4 fantasies at `_X_NEW`: one column per fantasy
_Y_NEW_FANTASIES = np.repeat(_Y_NEW[:, None], 4, axis=1) + 0.1 * np.arange(4)


def _swept(model: Any) -> Any:
    """An SGPC with its sites swept (a posterior that holds its data, to stream from)."""
    model.update_sites(max_sweeps=20)
    return model


MODELS_: dict[str, list[ModelCase]] = {
    "GPR": [ModelCase("", lambda: sg.GPR(_X, _Y, kernel=_matern(), noise_variance=0.1,
                                         mean=means.Constant(0.2)),
                      new_inputs=_X_NEW, new_targets=_Y_NEW),
            ModelCase("conditioned", lambda: _conditioned(sg.GPR(
                _X, _Y, kernel=_matern(), noise_variance=0.1, mean=means.Constant(0.2))),
                      new_inputs=_X_NEW, new_targets=_Y_NEW, conditioned="conditioned"),
            ModelCase("fantasies", lambda: _conditioned(sg.GPR(
                _X, _Y, kernel=_matern(), noise_variance=0.1, standardize_X=True), fantasies=4),
                      new_inputs=_X_NEW, new_targets=_Y_NEW_FANTASIES, conditioned="fantasies")],
    "SGPR": [
        ModelCase("vfe", lambda: sg.SGPR(_X, _Y, kernel=_matern(), inducing_points=5,
                                         noise_variance=0.1),
                  new_inputs=_X_NEW, new_targets=_Y_NEW),
        ModelCase("pep-linear-mean", lambda: sg.SGPR(_X, _Y, kernel=_matern(), inducing_points=5,
                                                     approximation="pep", alpha=0.5,
                                                     noise_variance=0.1, mean="linear",
                                                     standardize_X=True),
                  new_inputs=_X_NEW, new_targets=_Y_NEW),
        ModelCase("conditioned-fitc", lambda: _conditioned(sg.SGPR(
            _X, _Y, kernel=_matern(), inducing_points=5, approximation="fitc",
            noise_variance=0.1, standardize_X=True)),
                  new_inputs=_X_NEW, new_targets=_Y_NEW, conditioned="conditioned"),
        ModelCase("fantasies", lambda: _conditioned(sg.SGPR(
            _X, _Y, kernel=_matern(), inducing_points=5, noise_variance=0.1,
            mean=means.Constant(0.2)), fantasies=4),
                  new_inputs=_X_NEW, new_targets=_Y_NEW_FANTASIES, conditioned="fantasies"),
    ],
    "StreamingSGPR": [
        ModelCase("vfe", lambda: streaming_update(
            sg.SGPR(_X[:12], _Y[:12], kernel=_matern(), inducing_points=5, noise_variance=0.1),
            _X[12:], _Y[12:], fit=False), new_inputs=_X_NEW, new_targets=_Y_NEW),
        ModelCase("pep", lambda: streaming_update(
            sg.SGPR(_X[:12], _Y[:12], kernel=_matern(), inducing_points=5, noise_variance=0.1,
                    approximation="pep", alpha=0.5, standardize_X=True),
            _X[12:], _Y[12:], inducing_points=6, fit=False), new_inputs=_X_NEW,
            new_targets=_Y_NEW),
    ],
    "StreamingSVGP": [
        ModelCase("gaussian", lambda: sg.SVGP(
            _X[:12], _Y[:12], kernel=_matern(), inducing_points=5,
            likelihood=L.Gaussian(variance=0.1)).update(_X[12:], _Y[12:], fit=False),
                  new_inputs=_X_NEW, new_targets=_Y_NEW),
        ModelCase("bernoulli", lambda: sg.SVGP(
            _X[:12], (_Y[:12] > 0).astype(float), kernel=_matern(), likelihood=L.Bernoulli(),
            inducing_points=5).update(_X[12:], (_Y[12:] > 0).astype(float), fit=False),
                  predict=lambda m: m.predict_y(_X_NEW),
                  new_inputs=_X_NEW, new_targets=_LABELS_NEW, observed="labels"),
    ],
    "StreamingSGPC": [
        ModelCase("probit", lambda: _swept(sg.SGPC(
            _X[:12], (_Y[:12] > 0).astype(float), kernel=_matern(), inducing_points=5,
            alpha=0.5)).update(_X[12:], (_Y[12:] > 0).astype(float), fit=False),
                  predict=lambda m: (m.predict_proba(_X_NEW), *m.predict_f(_X_NEW)),
                  new_inputs=_X_NEW, new_targets=_LABELS_NEW, observed="labels"),
        ModelCase("logit-new-inducing", lambda: _swept(sg.SGPC(
            _X[:12], (_Y[:12] > 0).astype(float), kernel=_matern(), inducing_points=5,
            link="logit", alpha=1.0, standardize_X=True)).update(
                _X[12:], (_Y[12:] > 0).astype(float), inducing_points=6, fit=False),
                  predict=lambda m: (m.predict_proba(_X_NEW), *m.predict_f(_X_NEW)),
                  new_inputs=_X_NEW, new_targets=_LABELS_NEW, observed="labels"),
    ],
    "SVGP": [
        ModelCase("gaussian", lambda: sg.SVGP(_X, _Y, kernel=_matern(), inducing_points=5,
                                              likelihood=L.Gaussian(variance=0.1)),
                  new_inputs=_X_NEW, new_targets=_Y_NEW),
        ModelCase("bernoulli", lambda: sg.SVGP(_X, (_Y > 0).astype(float), kernel=_matern(),
                                               likelihood=L.Bernoulli(), inducing_points=5,
                                               whiten=False),
                  predict=lambda m: m.predict_y(_X_NEW),
                  new_inputs=_X_NEW, new_targets=_LABELS_NEW, observed="labels"),
        ModelCase("heteroscedastic-mean", lambda: sg.SVGP(
            _X, _Y, kernel=_matern(), likelihood=L.HeteroscedasticGaussian(), inducing_points=5,
            mean=means.Constant(0.3)),
                  new_inputs=_X_NEW, new_targets=_Y_NEW, observed="moments"),
        ModelCase("robustmax", lambda: sg.SVGP(_X, (np.arange(20) % 3).astype(float), kernel=_matern(),
                                               likelihood=L.MultiClass(3, link="robustmax"),
                                               inducing_points=4),
                  predict=lambda m: (m.predict_proba(_X_NEW),),
                  new_inputs=_X_NEW, new_targets=np.arange(5) % 3.0, observed="labels"),
    ],
    "SGPC": [ModelCase("", lambda: sg.SGPC(_X, (_Y > 0).astype(float), kernel=_matern(),
                                           inducing_points=5),
                       predict=lambda m: (m.predict_proba(_X_NEW), *m.predict_f(_X_NEW)),
                       new_inputs=_X_NEW, new_targets=_LABELS_NEW, observed="labels",
                       settle=lambda m: m.update_sites(max_sweeps=3))],
    # with a full-rank preconditioner the evidence is exact; its gradient uses the stochastic
    # trace estimates by design (Gardner et al. 2018)
    "KISSGP": [ModelCase("", lambda: sg.KISSGP(_X[:, :1], _Y, kernel=K.SquaredExponential(
                             lengthscale=0.8, variance=1.0), grid_size=12, preconditioner_rank=20,
                             noise_variance=0.1, num_probes=4),
                         predict=lambda m: m.predict(_X_NEW[:, :1]), gradient="unbiased",
                         new_inputs=_X_NEW[:, :1], new_targets=_Y_NEW)],
    "RFF": [ModelCase("", lambda: sg.RFF(_X, _Y, kernel=_matern(), num_features=5,
                                         noise_variance=0.1),
                      new_inputs=_X_NEW, new_targets=_Y_NEW)],
    "SSGP": [ModelCase("", lambda: sg.SSGP(_X, _Y, kernel=K.SquaredExponential(
        lengthscale=[1.0, 1.5], variance=1.1), num_features=5, noise_variance=0.1),
                       new_inputs=_X_NEW, new_targets=_Y_NEW)],
    # the random-input models predict their mapping: the GP-LVM's 4 outputs at latent points,
    # the GPSSM's transition to the next (1-D) state
    "BayesianGPLVM": [ModelCase("", lambda: sg.BayesianGPLVM(_LATENT, latent_dim=2, inducing_points=5),
                                predict=lambda m: m.predict(_X_NEW),
                                new_inputs=_X_NEW, new_targets=_LATENT[:5])],
    "GPSSM": [ModelCase("", lambda: sg.GPSSM(_LATENT[:, :2], state_dim=1, inducing_points=4),
                        predict=lambda m: m.transition(_X_NEW[:, :1]),
                        new_inputs=_X_NEW[:, :1], new_targets=_Y_NEW[:, None])],
}

RECIPES: dict[str, dict[str, list]] = {"kernel": KERNELS, "feature": FEATURES,
                                       "likelihood": LIKELIHOODS, "mean": MEANS, "model": MODELS_}


# -- parametrisation --------------------------------------------------------------------------
def built(kind: str, name: str, case: Any, obj: Any) -> Any:
    """`obj`, made by `case`, checked to be the registered class `name` of `kind`."""
    assert type(obj) is registered(kind)[name], \
        f"the recipe {case.id!r} builds a {type(obj).__name__}"
    return obj


def missing_recipes(classes: dict[str, type], recipes: dict[str, list]) -> list[str]:
    """Registered classes without a recipe."""
    return sorted(name for name in classes if not recipes.get(name))


def cases(kind: str, check: str, where: Callable[[Any], bool] = lambda case: True) -> list:
    """pytest params (class name, case) for every recipe of every registered class of `kind`
    (those `where` keeps), a recipe's known bug in `check` marked xfail(strict=True)."""
    params = []
    for name in registered(kind):
        for case in RECIPES[kind].get(name, []):
            if not where(case):
                continue
            marks = ([pytest.mark.xfail(strict=True, reason=case.bugs[check])]
                     if check in case.bugs else [])
            params.append(pytest.param(name, case, id="-".join(filter(None, [name, case.id])),
                                       marks=marks))
    return params
