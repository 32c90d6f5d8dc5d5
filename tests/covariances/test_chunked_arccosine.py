"""The hand-derived chunked Kuf of inducing points under the arc-cosine kernel: registered
for the pair, its chunk values equal to Kuf (the kernel's clamping of the cosines and, for
order 0, its snapping to 1 included) and its gradients (summed over chunks, with and without
the K_diag term) equal to the generic autograd ones, for orders 0, 1 and 2 with one or
per-column weight variances; an SGPR objective through it equals the generic one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp import covariances
from sparsegp.covariances.arccosine import ArcCosineCrossCovariance

from .chunked_checks import (
    CHUNKS,
    check_a_wrong_gradient_is_caught,
    check_against_generic,
    check_float32,
    check_sgpr_matches_generic,
)


def _setup(order, ard, seed=0):
    rng = np.random.default_rng(seed)
    X = torch.as_tensor(rng.normal(size=(31, 3)))
    Z = rng.normal(size=(6, 3))
    # on data points: cosines of 1 exactly (Z[0]), just above (clamped) and just below
    # (order 0: snapped to 1)
    Z[0], Z[1], Z[3] = X[3].numpy(), X[1].numpy(), X[12].numpy()
    Z[2] = 2.0 * X[25].numpy()  # parallel to a data point (but for the bias)
    w = [0.5, 1.3, 0.8] if ard else 0.7
    kernel = sg.kernels.ArcCosine(order=order, variance=1.4, weight_variances=w,
                                  bias_variance=0.3)
    return sg.InducingPoints(Z), kernel, X


@pytest.mark.parametrize("order", [0, 1, 2])
@pytest.mark.parametrize("ard", [False, True])
@pytest.mark.parametrize("gkdiag", [True, False])
def test_chunk_values_and_gradients_match_the_generic(order, ard, gkdiag):
    feature, kernel, X = _setup(order, ard)
    check_against_generic(feature, kernel, X, ArcCosineCrossCovariance, gkdiag)


def test_order_zero_snaps_cosines_as_the_kernel_does():
    feature, kernel, X = _setup(0, False)
    fast = covariances.cross_covariance(feature, kernel)
    raw = torch.cat([fast._cosines(X[sl])[0] for sl in CHUNKS], 1)
    assert raw[3, 12] < 1.0 and raw[1, 1] > 1.0
    K = torch.cat([fast.value(X[sl]) for sl in CHUNKS], 1)
    assert K[3, 12] == K[1, 1] == kernel.variance  # θ = 0 exactly, not √(2ε)/π below
    torch.testing.assert_close(K, kernel.K(feature.Z, X).detach(), rtol=0, atol=1e-15)


def test_a_float32_objective():
    feature, kernel, X = _setup(1, True)
    check_float32(feature, kernel, X, ArcCosineCrossCovariance)


@pytest.mark.parametrize("which", [0, 1, 2, 3])
def test_a_wrong_gradient_is_caught(which):
    feature, kernel, X = _setup(1, True)

    check_a_wrong_gradient_is_caught(feature, kernel, X, ArcCosineCrossCovariance, which)


def test_active_dims_keep_the_generic_class():
    feature, _, X = _setup(1, False)
    kernel = sg.kernels.ArcCosine(order=1, active_dims=[1])
    assert type(covariances.cross_covariance(feature, kernel)) is covariances.CrossCovariance


def test_weight_variances_of_another_width_are_refused():
    feature, _, _ = _setup(1, False)
    kernel = sg.kernels.ArcCosine(order=1, weight_variances=[1.0, 2.0])
    with pytest.raises(ValueError, match="3 columns but the weight variances have shape"):
        covariances.cross_covariance(feature, kernel)


@pytest.mark.parametrize("order", [0, 2])
def test_sgpr_objective_and_gradient_equal_the_generic(order, monkeypatch):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(150, 2))
    y = np.maximum(X[:, 0], 0.0) - X[:, 1] + 0.1 * rng.normal(size=150)
    check_sgpr_matches_generic(X, y, lambda: sg.kernels.ArcCosine(order=order, ard=True),
                               X[:12] + 0.05, monkeypatch)
