"""Change-point kernels: a dense formula, the piecewise kernel as the steep limit, positive
semi-definiteness, gradients, the data-based start, configs, and a sparse fit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.kernels import kernel_from_config

from ..conformance.helpers import gradcheck_through
from .fitting import fits_and_round_trips

rng = np.random.default_rng(9)
X = rng.uniform(-2.0, 2.0, (8, 2))
X2 = rng.uniform(-2.0, 2.0, (5, 2))
K_ = sg.kernels


def t(a):
    return torch.as_tensor(a, dtype=torch.float64)


def parts():
    return [K_.SquaredExponential(lengthscale=0.7, variance=1.2), K_.Linear(variance=0.5),
            K_.Matern32(lengthscale=[0.9, 1.4], variance=0.8)]


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def cp_dense(A, B, kernels, locations, steepness, dim):
    """Σ_i a_i(t) k_i a_i(t'), a_i the product of the switch-on at sorted location i − 1 and
    the switch-off at location i, written out with numpy."""
    order = np.argsort(locations)
    loc, s = np.asarray(locations)[order], np.broadcast_to(steepness, len(locations))[order]

    def activation(T, i):
        a = np.ones_like(T)
        if i > 0:
            a = a * sigmoid(s[i - 1] * (T - loc[i - 1]))
        if i < len(loc):
            a = a * (1.0 - sigmoid(s[i] * (T - loc[i])))
        return a

    out = np.zeros((len(A), len(B)))
    for i, k in enumerate(kernels):
        Ki = k.K(t(A), t(B)).detach().numpy()
        out += activation(A[:, dim], i)[:, None] * Ki * activation(B[:, dim], i)[None, :]
    return out


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("steepness", [2.5, [4.0, 0.7]], ids=["shared", "each"])
def test_matches_the_dense_formula(steepness, dim):
    locations = [0.6, -0.5]  # given unsorted: read sorted, each with its own steepness
    k = K_.ChangePoints(parts(), locations=locations, steepness=steepness, dim=dim)
    np.testing.assert_allclose(k.K(t(X), t(X2)).detach().numpy(),
                               cp_dense(X, X2, parts(), locations, steepness, dim), rtol=1e-11,
                               atol=1e-13)
    K = k.K(t(X)).detach().numpy()
    np.testing.assert_allclose(K, cp_dense(X, X, parts(), locations, steepness, dim), rtol=1e-11,
                               atol=1e-13)
    np.testing.assert_allclose(np.diag(K), k.K_diag(t(X)).detach().numpy(), rtol=1e-13)


def test_a_steep_switch_is_the_piecewise_kernel():
    # s = 1e4: each input belongs to one region; k = k_i within region i, 0 across regions
    locations = [-0.5, 0.7]
    k = K_.ChangePoints(parts(), locations=locations, steepness=1e4)
    A = np.c_[np.linspace(-2.0, 2.0, 21) + 0.013, rng.normal(size=21)]  # none near a location
    region = np.searchsorted(locations, A[:, 0])
    expected = np.zeros((21, 21))
    for i, part in enumerate(parts()):
        Ki = part.K(t(A)).detach().numpy()
        mask = (region == i)[:, None] & (region == i)[None, :]
        expected[mask] = Ki[mask]
    np.testing.assert_allclose(k.K(t(A)).detach().numpy(), expected, rtol=1e-12, atol=1e-12)


def test_is_positive_semidefinite():
    k = K_.ChangePoints(parts(), locations=[0.3, -0.4], steepness=[3.0, 8.0])
    A = np.r_[rng.uniform(-2.0, 2.0, (40, 2)), X[:3]]
    K = k.K(t(np.r_[A, A[:2]])).detach()
    assert float((K - K.T).abs().max()) <= 1e-14 * float(K.diagonal().max())
    assert float(torch.linalg.eigvalsh(K).min()) >= -1e-10 * float(K.diagonal().max())


def test_gradients_match_finite_differences():
    k = K_.ChangePoints(parts(), locations=[0.3, -0.4], steepness=[1.5, 2.5])
    names = [name for name, _ in k.named_parameters()]
    assert names[:2] == ["locations", "raw_steepness"]
    A, B = t(X[:5]).requires_grad_(), t(X2[:3]).requires_grad_()
    assert gradcheck_through([k], k.K, [A, B], atol=1e-7, rtol=1e-6)
    assert gradcheck_through([k], k.K, [A], atol=1e-7, rtol=1e-6)
    assert gradcheck_through([k], k.K_diag, [A], atol=1e-7, rtol=1e-6)


def test_unset_values_start_from_the_data():
    data = t(np.c_[rng.normal(size=40), np.linspace(0.0, 8.0, 40)])
    k = K_.ChangePoints([K_.SquaredExponential(), K_.Matern52(), K_.Constant()], dim=1)
    k.initialise_from_data(data, 3.0)
    np.testing.assert_allclose(k.value("locations").detach().numpy(), [8.0 / 3, 16.0 / 3],
                               rtol=1e-12)
    assert k.steepness == pytest.approx(10.0 / 8.0)
    assert all(part.variance == pytest.approx(3.0) for part in k.kernels)
    assert k.kernels[0].lengthscale != 1.0  # from the data


def test_config_round_trip_and_refusals():
    inner = K_.ChangePoints([K_.SquaredExponential(lengthscale=0.5), K_.Linear(variance=0.3)],
                            locations=[0.0], steepness=3.0)
    k = K_.ChangePoints([inner, K_.Constant(variance=0.5)], locations=[1.0], steepness=2.0, dim=1)
    assert len(k.kernels) == 2  # a change-point kernel inside another is not flattened
    with torch.no_grad():
        k.locations.add_(0.25)
    cfg = k.config()
    assert cfg["args"]["locations"] == [1.25] and cfg["args"]["dim"] == 1
    back = kernel_from_config(cfg)
    back.load_state_dict(k.state_dict())
    assert back.config() == cfg and repr(back) == repr(k)
    torch.testing.assert_close(back.K(t(X), t(X2)), k.K(t(X), t(X2)), rtol=0, atol=0)
    with pytest.raises(ValueError, match="at least 2 kernels"):
        K_.ChangePoints([K_.Constant()])
    with pytest.raises(ValueError, match="locations must be 1 finite numbers"):
        K_.ChangePoints([K_.Constant(), K_.Linear()], locations=[0.0, 1.0])
    with pytest.raises(ValueError, match="steepness must be a scalar or 2 values"):
        K_.ChangePoints(parts(), steepness=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="dim must be a non-negative column index"):
        K_.ChangePoints(parts(), dim=-1)
    with pytest.raises(ValueError, match="along input column 2, but X has 2 columns"):
        K_.ChangePoints(parts(), dim=2).K(t(X))
    with pytest.raises(TypeError, match="ChangePoints takes kernels"):
        K_.ChangePoints([K_.Constant(), "rbf"])


def test_sgpr_fit_and_save(tmp_path):
    # smooth, then a level shift to a noisy constant after t = 5
    r = np.random.default_rng(4)
    A = np.sort(r.uniform(0.0, 10.0, 80))[:, None]
    y = np.where(A[:, 0] < 5.0, np.sin(1.5 * A[:, 0]), 2.0) + 0.05 * r.standard_normal(80)
    kernel = K_.ChangePoints([K_.SquaredExponential(), K_.Constant()], locations=[4.0],
                             steepness=2.0)
    fits_and_round_trips(kernel, A, y, tmp_path, 25, 1000)  # the model's kernel: fitted
    assert float(kernel.value("locations").detach()) == pytest.approx(5.0, abs=0.1)
