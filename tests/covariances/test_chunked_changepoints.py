"""The chunked Kuf of inducing points under a change-point kernel, assembled from its
kernels' own chunked Kuf: registered for the pair, its chunk values equal to Kuf and its
gradients (summed over chunks, with and without the K_diag term) equal to the generic
autograd ones, with regions whose kernels have hand-derived chunked Kuf and one without;
an SGPR objective through it equals the generic one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp import covariances
from sparsegp.covariances.changepoints import ChangePointsCrossCovariance

from .chunked_checks import (
    check_a_wrong_gradient_is_caught,
    check_against_generic,
    check_float32,
    check_sgpr_matches_generic,
)


def _kernels(which):
    k = sg.kernels
    if which == "fast":
        return [k.SquaredExponential(lengthscale=0.7, variance=1.3),
                k.Polynomial(degree=2, offset=0.5, variance=0.4),
                k.RationalQuadratic(lengthscale=[0.5, 1.5], alpha=2.0)]
    # no hand-derived chunked Kuf for these (a kernel on some columns included); a constant
    # kernel's Kuf is a broadcast view
    return [k.Matern32(lengthscale=0.8), k.SquaredExponential(active_dims=[0]),
            k.Constant(variance=0.6)]


def _setup(which, seed=0):
    rng = np.random.default_rng(seed)
    X = torch.as_tensor(rng.uniform(-2.0, 2.0, (31, 2)))
    Z = rng.uniform(-2.0, 2.0, (6, 2))
    kernels = _kernels(which)
    locations = [-0.5, 0.7][:len(kernels) - 1]
    kernel = sg.kernels.ChangePoints(kernels, locations=locations, steepness=3.0, dim=1)
    return sg.InducingPoints(Z), kernel, X


def test_a_float32_objective():
    feature, kernel, X = _setup("fast")
    check_float32(feature, kernel, X, ChangePointsCrossCovariance)


@pytest.mark.parametrize("which", ["fast", "generic"])
@pytest.mark.parametrize("gkdiag", [True, False])
def test_chunk_values_and_gradients_match_the_generic(which, gkdiag):
    feature, kernel, X = _setup(which)
    check_against_generic(feature, kernel, X, ChangePointsCrossCovariance, gkdiag)


@pytest.mark.parametrize("fixed", [("Z",), ("locations", "raw_steepness"),
                                   ("Z", "locations", "raw_steepness")])
def test_fixed_inducing_inputs_and_switches(fixed):
    feature, kernel, X = _setup("fast")
    feature.Z.requires_grad_("Z" not in fixed)
    for name, p in kernel.named_parameters(recurse=False):
        p.requires_grad_(name not in fixed)
    check_against_generic(feature, kernel, X, ChangePointsCrossCovariance)


def test_the_regions_use_their_own_chunked_kuf():
    feature, kernel, _ = _setup("fast")
    parts = covariances.cross_covariance(feature, kernel).parts
    assert [type(p).__name__ for p in parts] == [
        "SquaredExponentialCrossCovariance", "PolynomialCrossCovariance",
        "RationalQuadraticCrossCovariance"]
    feature, kernel, _ = _setup("generic")
    parts = covariances.cross_covariance(feature, kernel).parts
    assert all(type(p) is covariances.CrossCovariance for p in parts)


def test_active_dims_keep_the_generic_class():
    feature, _, _ = _setup("fast")
    kernel = sg.kernels.ChangePoints(_kernels("fast"), locations=[-0.5, 0.7], active_dims=[1])
    assert type(covariances.cross_covariance(feature, kernel)) is covariances.CrossCovariance


@pytest.mark.parametrize("which", [0, 1, 2, 3])
def test_a_wrong_gradient_is_caught(which):
    feature, kernel, X = _setup("fast")

    check_a_wrong_gradient_is_caught(feature, kernel, X, ChangePointsCrossCovariance, which)


def test_sgpr_objective_and_gradient_equal_the_generic(monkeypatch):
    rng = np.random.default_rng(3)
    X = np.sort(rng.uniform(0.0, 6.0, (150, 1)), 0)
    y = np.where(X[:, 0] < 3.0, np.sin(3.0 * X[:, 0]), 0.5 * X[:, 0]) + 0.1 * rng.normal(size=150)
    make = lambda: sg.kernels.ChangePoints(  # noqa: E731
        [sg.kernels.SquaredExponential(), sg.kernels.Polynomial(degree=1)], locations=[3.0])
    check_sgpr_matches_generic(X, y, make, X[::12] + 0.01, monkeypatch)
