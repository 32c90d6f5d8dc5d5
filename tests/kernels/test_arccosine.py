"""The arc-cosine kernel: a dense formula, the closed form of order 0, a Monte-Carlo estimate of
the infinitely wide network, positive semi-definiteness, gradients, and a sparse fit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.kernels import kernel_from_config

from ..conformance.helpers import gradcheck_through
from .fitting import fits_and_round_trips

rng = np.random.default_rng(7)
X = rng.normal(size=(7, 3))
X2 = rng.normal(size=(5, 3))
W = np.array([0.6, 1.4, 0.9])


def t(a):
    return torch.as_tensor(a, dtype=torch.float64)


def arccos_dense(A, B, order, variance, weights, bias):
    """(σ²/π) J_n(θ) (‖a‖ ‖b‖)^n pair by pair, with ‖a‖² = Σ w a² + b."""
    out = np.empty((len(A), len(B)))
    for i, a in enumerate(A):
        for j, c in enumerate(B):
            na = math.sqrt(np.sum(weights * a * a) + bias)
            nb = math.sqrt(np.sum(weights * c * c) + bias)
            cos = min(1.0, max(-1.0, (np.sum(weights * a * c) + bias) / (na * nb)))
            theta = math.acos(cos)
            J = {0: math.pi - theta,
                 1: math.sin(theta) + (math.pi - theta) * math.cos(theta),
                 2: 3 * math.sin(theta) * math.cos(theta)
                 + (math.pi - theta) * (1 + 2 * math.cos(theta) ** 2)}[order]
            out[i, j] = variance / math.pi * J * (na * nb) ** order
    return out


@pytest.mark.parametrize("weights", [0.8, W], ids=["scalar", "ard"])
@pytest.mark.parametrize("order", [0, 1, 2])
def test_matches_the_dense_formula(order, weights):
    k = sg.kernels.ArcCosine(order=order, variance=1.7, weight_variances=weights,
                             bias_variance=0.3)
    assert k.ard == (np.ndim(weights) == 1)
    np.testing.assert_allclose(k.K(t(X), t(X2)).detach().numpy(),
                               arccos_dense(X, X2, order, 1.7, weights, 0.3), rtol=1e-12, atol=1e-13)
    K = k.K(t(X)).detach().numpy()
    np.testing.assert_allclose(K, arccos_dense(X, X, order, 1.7, weights, 0.3), rtol=1e-7,
                               atol=1e-13)
    np.testing.assert_allclose(np.diag(K), k.K_diag(t(X)).detach().numpy(), rtol=1e-14)


def test_order_zero_is_one_minus_the_angle_over_pi():
    # the step-function network: k = σ² (1 − θ/π), with θ the angle between x̃ = [√w x, √b]
    k = sg.kernels.ArcCosine(order=0, variance=2.5, weight_variances=W, bias_variance=0.2)
    A = np.c_[np.sqrt(W) * X, np.full(len(X), math.sqrt(0.2))]
    B = np.c_[np.sqrt(W) * X2, np.full(len(X2), math.sqrt(0.2))]
    cos = (A @ B.T) / np.outer(np.linalg.norm(A, axis=1), np.linalg.norm(B, axis=1))
    np.testing.assert_allclose(k.K(t(X), t(X2)).detach().numpy(),
                               2.5 * (1.0 - np.arccos(cos) / np.pi), rtol=1e-12)
    np.testing.assert_allclose(k.K_diag(t(X)).detach().numpy(), 2.5, rtol=1e-14)


@pytest.mark.parametrize("order", [0, 1, 2])
def test_is_the_covariance_of_an_infinitely_wide_network(order):
    # 2σ² E_w[Θ(wᵀx̃) Θ(wᵀx̃') (wᵀx̃)^n (wᵀx̃')^n], w ~ N(0, I), by Monte Carlo with its error bar
    variance, bias = 0.8, 0.5
    k = sg.kernels.ArcCosine(order=order, variance=variance, weight_variances=W,
                             bias_variance=bias)
    A = np.c_[np.sqrt(W) * X[:4], np.full(4, math.sqrt(bias))]
    B = np.c_[np.sqrt(W) * X2[:3], np.full(3, math.sqrt(bias))]
    w = np.random.default_rng(0).standard_normal((400_000, 4))
    ha, hb = w @ A.T, w @ B.T  # [S, 4], [S, 3]
    fa = (ha > 0) * ha ** order
    fb = (hb > 0) * hb ** order
    samples = 2.0 * variance * fa[:, :, None] * fb[:, None, :]
    estimate = samples.mean(0)
    error = samples.std(0) / math.sqrt(len(w))
    K = k.K(t(X[:4]), t(X2[:3])).detach().numpy()
    assert np.all(np.abs(K - estimate) < 5.0 * error + 1e-12), np.abs(K - estimate) / error


@pytest.mark.parametrize("order", [0, 1, 2])
def test_is_positive_semidefinite_with_repeated_and_parallel_inputs(order):
    k = sg.kernels.ArcCosine(order=order, variance=1.0, weight_variances=W, bias_variance=1e-4)
    A = np.r_[X, X[:2], 3.0 * X[:2], -X[:1]]  # repeated, parallel and opposite inputs
    K = k.K(t(A)).detach()
    assert float((K - K.T).abs().max()) <= 1e-14 * float(K.diagonal().max())
    assert float(torch.linalg.eigvalsh(K).min()) >= -1e-10 * float(K.diagonal().max())


@pytest.mark.parametrize("order", [0, 1, 2])
def test_gradients_match_finite_differences(order):
    k = sg.kernels.ArcCosine(order=order, variance=1.3, weight_variances=W, bias_variance=0.4)
    A, B = t(X[:5]).requires_grad_(), t(X2[:3]).requires_grad_()
    assert gradcheck_through([k], k.K, [A, B], atol=1e-7, rtol=1e-6)
    assert gradcheck_through([k], k.K, [A], atol=1e-7, rtol=1e-6)
    assert gradcheck_through([k], k.K_diag, [A], atol=1e-7, rtol=1e-6)


def test_the_slope_of_orders_one_and_two_is_finite_for_parallel_inputs():
    # J_1' = J_0 and J_2' = 4 J_1 at cos θ = 1 (where the chain rule through arccos is 0·∞)
    for order in (1, 2):
        k = sg.kernels.ArcCosine(order=order, variance=1.0, weight_variances=1.0,
                                 bias_variance=1e-5)
        A = t([[1.0, 2.0], [2.0, 4.0]]).requires_grad_()
        k.K(A).sum().backward()
        assert bool(torch.isfinite(A.grad).all())
        assert all(bool(torch.isfinite(p.grad).all()) for p in k.parameters())


def test_unset_values_start_from_the_data_and_config_round_trips():
    k = sg.kernels.ArcCosine(order=2, ard=True)
    data = t(rng.normal(size=(50, 3)) * [1.0, 3.0, 0.5])
    k.initialise_from_data(data, 2.0)
    np.testing.assert_allclose(k.weight_variances, 1.0 / (3 * (data ** 2).mean(0).numpy()),
                               rtol=1e-12)
    assert float(k.K_diag(data).detach().mean()) == pytest.approx(2.0, rel=1e-10)
    assert k.bias_variance == pytest.approx(1.0)
    cfg = k.config()
    assert cfg["args"]["order"] == 2 and cfg["args"]["ard"]
    back = kernel_from_config(cfg)
    back.load_state_dict(k.state_dict())
    torch.testing.assert_close(back.K(data[:6]), k.K(data[:6]), rtol=0, atol=0)
    assert repr(back) == repr(k) and repr(k).startswith("ArcCosine(order=2, ")


def test_refusals():
    for order in (3, -1, 1.0, True, "1"):
        with pytest.raises(ValueError, match="order must be 0, 1 or 2"):
            sg.kernels.ArcCosine(order=order)
    with pytest.raises(ValueError, match="weight variances have shape"):
        sg.kernels.ArcCosine(weight_variances=[1.0, 2.0]).K(t(X))
    with pytest.raises(ValueError, match="bias_variance must be finite and greater"):
        sg.kernels.ArcCosine(bias_variance=0.0)


def test_sgpr_fit_and_save(tmp_path):
    r = np.random.default_rng(3)
    A = r.uniform(-2.0, 2.0, (60, 2))
    y = np.maximum(A[:, 0] + 0.5 * A[:, 1], 0.0) + 0.05 * r.standard_normal(60)  # a ReLU
    loaded = fits_and_round_trips(sg.kernels.ArcCosine(order=1), A, y, tmp_path, 15, 200)
    assert loaded.kernel.order == 1


@pytest.mark.parametrize("order", [0, 1, 2])
def test_second_derivatives_are_right(order):
    # the hand-written backward is itself differentiable: a Hessian through K is the true one
    k = sg.kernels.ArcCosine(order=order, variance=1.3, weight_variances=W, bias_variance=0.4)
    A = t(X[:4]).requires_grad_()
    assert torch.autograd.gradgradcheck(lambda a: k.K(a, t(X2[:2])), (A,), atol=1e-7, rtol=1e-6)
