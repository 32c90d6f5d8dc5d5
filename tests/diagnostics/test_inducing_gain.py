"""Adding one inducing input (docs/math.md §3): rank-one ΔF against recomputation, and its theory."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import sparsegp as sg
from sparsegp.diagnostics.inducing_gain import inducing_gain, objective_terms

from ..conftest import make_problem

gain_module = importlib.import_module("sparsegp.diagnostics.inducing_gain")

APPROXIMATIONS = [("vfe", None), ("dtc", None), ("fitc", None), ("pep", 0.5)]


def _model(approx="vfe", alpha=None, seed=0, N=40, M=5, **kwargs):
    X, y = make_problem(seed, N=N)
    rng = np.random.default_rng(seed + 100)
    Z = X[rng.choice(N, M, replace=False)] + 0.1 * rng.standard_normal((M, X.shape[1]))
    kernel = sg.kernels.SquaredExponential(lengthscale=1.3, variance=1.7)
    kwargs.setdefault("standardize_y", False)  # y as given unless told: the fixed kernel's units
    return sg.SGPR(X, y, kernel=kernel, inducing_points=Z, approximation=approx, alpha=alpha,
                   noise_variance=0.1, **kwargs)


def _recomputed(model, candidate):
    """log p under the same model with the candidate appended to Z: an independent model."""
    Z = np.vstack([model.inducing_points, candidate[None, :]])
    X = (model.X * model.x_scale + model.x_shift).numpy()
    y = (model.y * model.y_scale + model.y_shift).numpy()
    kernel = sg.kernels.SquaredExponential(lengthscale=model.kernel.lengthscale,
                                           variance=model.kernel.variance)
    other = sg.SGPR(X, y, kernel=kernel, inducing_points=Z, approximation=model.approximation,
                    alpha=model.alpha if model.approximation == "pep" else None,
                    noise_variance=model.noise_variance, jitter=model.jitter,
                    standardize_X=bool((model.x_scale != 1).any()),
                    standardize_y=bool(model.y_scale != 1))
    # same internal hyperparameters (standardisation rescales what the constructor receives)
    other.load_state_dict({k: v for k, v in model.state_dict().items() if k != "feature.Z"},
                          strict=False)
    return other.log_marginal_likelihood()


def test_terms_sum_to_the_objective():
    for approx, alpha in APPROXIMATIONS:
        m = _model(approx, alpha)
        assert objective_terms(m).total == pytest.approx(m.log_marginal_likelihood(), rel=1e-12)


@pytest.mark.parametrize("approx", ["vfe", "dtc"])
@pytest.mark.parametrize("standardize", [False, True])
def test_rank_one_matches_recomputing_with_one_more_input(approx, standardize):
    m = _model(approx, seed=3, standardize_X=standardize, standardize_y=standardize)
    rng = np.random.default_rng(7)
    C = rng.uniform(-3.5, 3.5, size=(9, 2))
    g = inducing_gain(m, C)
    assert g.method == "rank-one"
    base = objective_terms(m)
    Zint = m.feature.Z.detach()
    for i in range(C.shape[0]):
        t = objective_terms(m, torch.cat([Zint, m._internal_inputs(C[i:i + 1])]))
        np.testing.assert_allclose([g.data_fit[i], g.complexity[i], g.trace[i]],
                                   [t.data_fit - base.data_fit, t.complexity - base.complexity,
                                    t.trace - base.trace], rtol=1e-7, atol=1e-8)
        full = _recomputed(m, C[i]) - m.log_marginal_likelihood()
        assert g.total[i] == pytest.approx(full, rel=1e-7, abs=1e-8)
    if approx == "dtc":
        assert np.all(g.trace == 0.0)
    assert np.max(np.abs(g.total)) > 1e-2  # the comparison is not between zeros


@pytest.mark.parametrize("approx,alpha", [("fitc", None), ("pep", 0.5)])
def test_brute_force_members_match_recomputation(approx, alpha):
    m = _model(approx, alpha, seed=4)
    C = np.array([[0.3, -1.0], [2.5, 2.5]])
    g = inducing_gain(m, C)
    assert g.method == "brute-force"
    for i in range(2):
        assert g.total[i] == pytest.approx(_recomputed(m, C[i]) - m.log_marginal_likelihood(),
                                           rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("approx,alpha", APPROXIMATIONS)
def test_adding_an_existing_inducing_input_changes_nothing(approx, alpha):
    m = _model(approx, alpha, seed=5, jitter=1e-10)
    g = inducing_gain(m, m.inducing_points)
    # exactly zero without jitter; the 1e-10 relative jitter on Kuu moves it by ~1e-8
    for terms in (g.data_fit, g.complexity, g.trace, g.total):
        assert np.max(np.abs(terms)) < 1e-6
    # ... while a new location does change it
    assert abs(inducing_gain(m, np.array([[1.0, 1.0]])).total[0]) > 1e-3


def test_chunked_evaluation_equals_one_block(monkeypatch):
    m = _model("vfe", seed=6, N=50, M=6)
    C = np.random.default_rng(0).uniform(-3, 3, size=(30, 2))
    whole = inducing_gain(m, C)
    monkeypatch.setattr(gain_module, "_BLOCK_ELEMENTS", 64)  # data chunks of ~2 rows
    chunked = inducing_gain(m, C)
    np.testing.assert_allclose(chunked.total, whole.total, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(chunked.data_fit, whole.data_fit, rtol=1e-10, atol=1e-12)


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(seed=st.integers(0, 10_000), N=st.integers(3, 40), D=st.integers(1, 3),
       M=st.integers(1, 6), lengthscale=st.floats(0.2, 4.0), noise=st.floats(1e-3, 2.0),
       spread=st.floats(0.1, 4.0))
def test_adding_any_input_never_makes_vfe_worse(seed, N, D, M, lengthscale, noise, spread):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(N, D))
    y = np.sin(2 * X).sum(1) + 0.3 * rng.standard_normal(N)
    Z = rng.uniform(-2, 2, size=(M, D))
    m = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=lengthscale),
                inducing_points=Z, noise_variance=noise)
    C = rng.uniform(-spread, spread, size=(12, D))
    g = inducing_gain(m, C)
    scale = 1e-9 * (1.0 + abs(m.log_marginal_likelihood()))
    assert np.all(g.total >= -scale)
    assert np.all(g.data_fit >= -scale) and np.all(g.trace >= -scale)
    assert np.all(g.complexity <= scale)
    # and the improvement is what recomputing with M + 1 inputs gives
    i = int(np.argmax(g.total))
    Zi = torch.cat([m.feature.Z.detach(), m._internal_inputs(C[i:i + 1])])
    assert objective_terms(m, Zi).total - m.log_marginal_likelihood() == pytest.approx(
        g.total[i], rel=1e-6, abs=1e-7)


def test_data_sharded_over_ranks_are_refused(monkeypatch):
    X, y = sg.datasets.snelson()
    m = sg.SGPR(X, y, inducing_points=X[::20], noise_variance=0.1)
    monkeypatch.setattr(m, "spec", m.spec.but(sharded=True))  # as built under torchrun
    with pytest.raises(RuntimeError, match="does not support data sharded"):
        sg.diagnostics.inducing_gain(m, X[:2])  # it gave each rank its own shard's gain
