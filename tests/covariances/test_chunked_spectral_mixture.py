"""The hand-derived chunked Kuf of inducing points under the spectral mixture kernel:
registered for the pair, its chunk values equal to Kuf and its gradients (summed over
chunks, with and without the K_diag term) equal to the generic autograd ones, for one and
three components on one and three input columns, with per-column and shared means and
scales; an SGPR objective through it equals the generic one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp import covariances
from sparsegp.covariances.spectral_mixture import SpectralMixtureCrossCovariance

from .chunked_checks import (
    check_a_wrong_gradient_is_caught,
    check_against_generic,
    check_float32,
    check_sgpr_matches_generic,
)


def _setup(Q, D, per_column=True, seed=0):
    rng = np.random.default_rng(seed)
    X = torch.as_tensor(rng.normal(size=(31, D)) + 3.0)  # off-centre inputs
    Z = rng.normal(size=(5, D)) + 3.0
    Z[0] = X[4].numpy()  # on a data point: τ = 0
    width = D if per_column else 1
    kernel = sg.kernels.SpectralMixture(weights=rng.uniform(0.5, 1.5, Q),
                                        means=rng.uniform(0.1, 0.9, (Q, width)),
                                        scales=rng.uniform(0.1, 0.5, (Q, width)))
    return sg.InducingPoints(Z), kernel, X


@pytest.mark.parametrize("Q", [1, 3])
@pytest.mark.parametrize("D", [1, 3])
@pytest.mark.parametrize("gkdiag", [True, False])
def test_chunk_values_and_gradients_match_the_generic(Q, D, gkdiag):
    feature, kernel, X = _setup(Q, D)
    check_against_generic(feature, kernel, X, SpectralMixtureCrossCovariance, gkdiag)


def test_values_shared_by_the_columns():
    feature, kernel, X = _setup(2, 3, per_column=False)
    check_against_generic(feature, kernel, X, SpectralMixtureCrossCovariance)


def test_a_float32_objective():
    feature, kernel, X = _setup(3, 3)
    check_float32(feature, kernel, X, SpectralMixtureCrossCovariance)


@pytest.mark.parametrize("which", [0, 1, 2, 3])
def test_a_wrong_gradient_is_caught(which):
    feature, kernel, X = _setup(3, 3)

    check_a_wrong_gradient_is_caught(feature, kernel, X, SpectralMixtureCrossCovariance, which)


def test_active_dims_keep_the_generic_class():
    feature, _, _ = _setup(1, 3)
    kernel = sg.kernels.SpectralMixture(num_mixtures=2, active_dims=[0, 2])
    assert type(covariances.cross_covariance(feature, kernel)) is covariances.CrossCovariance


def test_means_of_another_width_are_refused():
    feature, _, _ = _setup(1, 3)
    kernel = sg.kernels.SpectralMixture(weights=[1.0], means=[[0.1, 0.2]], scales=[0.3])
    with pytest.raises(ValueError, match="3 columns but the means have shape"):
        covariances.cross_covariance(feature, kernel)


def test_sgpr_objective_and_gradient_equal_the_generic(monkeypatch):
    rng = np.random.default_rng(3)
    X = rng.uniform(0.0, 6.0, (150, 2))
    y = np.sin(2.0 * X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.normal(size=150)
    check_sgpr_matches_generic(X, y, lambda: sg.kernels.SpectralMixture(num_mixtures=2),
                               X[:12] + 0.05, monkeypatch)
