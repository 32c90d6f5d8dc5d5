"""The hand-derived chunked Kuf of inducing points under the polynomial kernel: registered
for the pair, its chunk values equal to Kuf and its gradients (summed over chunks, with and
without the K_diag term) equal to the generic autograd ones, for degrees 1–3 with and
without the offset; an SGPR objective through it equals the generic one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp import covariances
from sparsegp.covariances.polynomial import PolynomialCrossCovariance

from .chunked_checks import (
    check_a_wrong_gradient_is_caught,
    check_against_generic,
    check_float32,
    check_sgpr_matches_generic,
)


def _setup(degree, offset, seed=0):
    rng = np.random.default_rng(seed)
    X = torch.as_tensor(rng.normal(size=(31, 3)) / 1.5)
    feature = sg.InducingPoints(rng.normal(size=(5, 3)))
    return feature, sg.kernels.Polynomial(degree=degree, variance=0.8, offset=offset), X


@pytest.mark.parametrize("degree", [1, 2, 3])
@pytest.mark.parametrize("offset", [0.0, 0.6])
@pytest.mark.parametrize("gkdiag", [True, False])
def test_chunk_values_and_gradients_match_the_generic(degree, offset, gkdiag):
    feature, kernel, X = _setup(degree, offset)
    assert kernel.has_offset == (offset != 0.0)
    check_against_generic(feature, kernel, X, PolynomialCrossCovariance, gkdiag)


def test_a_float32_objective():
    feature, kernel, X = _setup(3, 0.6)
    check_float32(feature, kernel, X, PolynomialCrossCovariance)


@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_wrong_gradient_is_caught(which):
    feature, kernel, X = _setup(3, 0.6)

    check_a_wrong_gradient_is_caught(feature, kernel, X, PolynomialCrossCovariance, which, entry=0)


def test_active_dims_keep_the_generic_class():
    feature, _, X = _setup(2, 0.6)
    kernel = sg.kernels.Polynomial(degree=2, offset=0.6, active_dims=[0, 2])
    assert type(covariances.cross_covariance(feature, kernel)) is covariances.CrossCovariance


@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_sgpr_objective_and_gradient_equal_the_generic(offset, monkeypatch):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(150, 2)) / 2
    y = X[:, 0] ** 2 - X[:, 1] + 0.1 * rng.normal(size=150)
    check_sgpr_matches_generic(X, y, lambda: sg.kernels.Polynomial(degree=2, offset=offset),
                               X[:12] + 0.05, monkeypatch)
