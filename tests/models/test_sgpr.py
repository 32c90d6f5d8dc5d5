"""SGPR as a model: complexity, caching of the posterior, training paths, units."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.models.core.fitting import stall_rule
from sparsegp.training import fit_lbfgsb

from ..conftest import make_problem


def test_training_and_prediction_only_ever_factorise_m_by_m_matrices(monkeypatch):
    N, M = 300, 9
    X, y = make_problem(0, N=N)
    shapes = []

    def recording(real):
        def factorise(A, *args, **kwargs):
            shapes.append(tuple(A.shape))
            return real(A, *args, **kwargs)
        return factorise

    def forbidden(*args, **kwargs):
        raise AssertionError("dense solve/inverse/eigendecomposition called")

    monkeypatch.setattr(torch.linalg, "cholesky_ex", recording(torch.linalg.cholesky_ex))
    monkeypatch.setattr(torch.linalg, "eigh", recording(torch.linalg.eigh))
    for name in ("cholesky", "inv", "solve", "eigvalsh", "svd", "lstsq", "det", "slogdet"):
        monkeypatch.setattr(torch.linalg, name, forbidden)
    monkeypatch.setattr(torch, "cholesky", forbidden, raising=False)
    monkeypatch.setattr(torch, "logdet", forbidden)
    for approx, alpha in (("vfe", None), ("fitc", None), ("dtc", None), ("pep", 0.5)):
        m = sg.SGPR(X, y, inducing_points=M, approximation=approx, alpha=alpha, chunk_size=64)
        m.training_loss().backward()
        # the optimisation itself; the check fit() runs afterwards (diagnose=True) is a separate,
        # documented cost: the upper bound with extra inducing inputs, the exact evidence if N ≤ 1000
        m.fit(maxiter=3, diagnose=False)
        m.predict(X[:50])
        m.predict(X[:5], full_cov=True)
        m.upper_bound()
        m.log_marginal_likelihood()
    assert shapes, "the Cholesky was never called: the mock is not in the code path"
    assert {shape[-2:] for shape in shapes} == {(M, M)}  # batches of M×M for C latent functions


def test_posterior_is_built_once_and_rebuilt_after_any_parameter_change():
    X, y = make_problem(1)
    m = sg.SGPR(X, y, inducing_points=6)
    p1 = m.posterior()
    assert m.posterior() is p1
    m.predict(X)
    assert m.posterior() is p1
    m.kernel.lengthscale = 0.7
    p2 = m.posterior()
    assert p2 is not p1
    m.noise_variance = 0.3
    assert m.posterior() is not p2


def test_training_with_a_torch_optimiser_on_training_loss():
    X, y = make_problem(2, N=80)
    m = sg.SGPR(X, y, inducing_points=10, approximation="pep", alpha=0.5)
    start = m.log_marginal_likelihood()
    mean0, _ = m.predict(X[:5])
    opt = torch.optim.Adam(m.parameters(), lr=0.05)
    for _ in range(60):
        opt.zero_grad()
        loss = m.training_loss()
        loss.backward()
        opt.step()
    assert m.log_marginal_likelihood() > start + 1.0
    mean1, _ = m.predict(X[:5])
    assert not np.allclose(mean0, mean1)  # predictions follow the trained parameters
    # The result equals a fresh model built with the trained values: nothing stale is cached.
    fresh = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(
        lengthscale=m.kernel.lengthscale, variance=m.kernel.variance),
        inducing_points=m.inducing_points, approximation="pep", alpha=0.5,
        noise_variance=m.noise_variance)
    np.testing.assert_allclose(fresh.predict(X[:5])[0], mean1, rtol=1e-9)


def test_fit_improves_the_objective_monotonically_and_reports_history():
    X, y = make_problem(3, N=100)
    m = sg.SGPR(X, y, inducing_points=8)
    start = m.log_marginal_likelihood()
    seen = []
    res = m.fit(maxiter=200, callback=lambda i, f: seen.append((i, f)))
    assert res.history[0] == pytest.approx(start)
    assert all(b >= a - 1e-9 for a, b in zip(res.history, res.history[1:]))
    assert res.iterations == len(res.history) - 1 == len(seen)
    assert res.objective == pytest.approx(m.log_marginal_likelihood(), rel=1e-12)
    assert res.success and ("CONVERGENCE" in res.message or "converged: the last" in res.message
                            or "converged: the predictions settled" in res.message)


def test_the_default_fit_stops_when_its_gains_stall_and_tol_runs_to_the_optimum():
    # the stall rule (`fitting.stall_rule`) ends the fit as converged at the first iteration
    # where it holds; `tol` hands the decision back to L-BFGS-B (which goes on for little more)
    X, y = make_problem(3, N=400)
    m = sg.SGPR(X, y, inducing_points=15)
    res = fit_lbfgsb(m, stall=stall_rule(400, sg.FitOptions()))  # the stall rule alone
    h, rule = res.history, stall_rule(400, sg.FitOptions())
    assert res.success and res.info.get("stalled")
    assert res.message.startswith("converged: the last ") and " iterations gained " in res.message
    assert res.message.endswith("(pass tol= to run L-BFGS-B to its own tolerance)")
    assert rule.check(h) is not None
    assert all(rule.check(h[:k]) is None for k in range(1, len(h)))
    full = sg.SGPR(X, y, inducing_points=15).fit(tol=1e-12)
    assert "stalled" not in full.info and full.iterations > res.iterations
    assert 0.0 <= full.objective - res.objective < 1.0  # max(1, N/1000) nats: immaterial

def test_fit_stops_cleanly_when_the_objective_becomes_non_finite():
    X, y = make_problem(4)
    m = sg.GPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=5.0))
    # A "prior" that is NaN below a lengthscale of 3 while the data want 2.3.
    m.set_prior("kernel.lengthscale",
                lambda l: torch.where(l < 3.0, torch.full_like(l, float("nan")), torch.zeros_like(l)))
    with pytest.warns(RuntimeWarning, match="became nan.*last accepted"):
        res = m.fit()
    assert not res.success and "kernel.lengthscale" in res.message
    assert np.isfinite(m.training_loss().item()) and m.kernel.lengthscale >= 3.0
    assert res.objective == pytest.approx(-m.training_loss().item())


def test_standardised_targets_are_predicted_in_original_units():
    X, y = make_problem(5, N=60)
    y_big = 1000.0 + 50.0 * y
    kw = dict(inducing_points=X[:10], noise_variance=0.05)
    m = sg.SGPR(X, y, kernel=sg.kernels.Matern32(lengthscale=1.0, variance=1.0), **kw)
    s = sg.SGPR(X, y_big, kernel=sg.kernels.Matern32(lengthscale=1.0, variance=1.0),
                standardize_y=True, inducing_points=X[:10], noise_variance=0.05 * 50**2 / y.std() ** 2)
    # Same model up to units when the noise is matched in standardised units.
    ys = (y_big - y_big.mean()) / y_big.std(ddof=1)
    ref = sg.SGPR(X, ys, kernel=sg.kernels.Matern32(lengthscale=1.0, variance=1.0),
                  inducing_points=X[:10], noise_variance=s.value("noise_variance").item())
    mean_ref, var_ref = ref.predict(X[:7])
    mean_s, var_s = s.predict(X[:7])
    sd = y_big.std(ddof=1)
    np.testing.assert_allclose(mean_s, y_big.mean() + sd * mean_ref, rtol=1e-10)
    np.testing.assert_allclose(var_s, sd**2 * var_ref, rtol=1e-10)
    # Objective in the units of y: log p(y) = log p(y_std) − N log sd.
    assert s.log_marginal_likelihood() == pytest.approx(
        ref.log_marginal_likelihood() - 60 * np.log(sd), rel=1e-12)
    assert s.noise_variance == pytest.approx(ref.noise_variance * sd**2, rel=1e-12)
    assert m.log_marginal_likelihood() < 0  # unrelated model still works


def test_standardised_inputs_keep_inducing_points_in_original_units():
    X, y = make_problem(6, N=50)
    X = X * np.array([100.0, 0.01]) + 7.0
    Z = X[:6].copy()
    m = sg.SGPR(X, y, inducing_points=Z, standardize_X=True)
    np.testing.assert_allclose(m.inducing_points, Z, rtol=1e-12)
    m.fit(maxiter=30)
    assert np.all(np.isfinite(m.predict(X)[0]))
    Z2 = m.inducing_points + 1.0
    m.inducing_points = Z2
    np.testing.assert_allclose(m.inducing_points, Z2, rtol=1e-12)


def test_integer_m_uses_kmeans_plus_plus_not_the_first_rows():
    X, y = make_problem(7, N=200)
    m1 = sg.SGPR(X, y, inducing_points=15)
    m2 = sg.SGPR(X, y, inducing_points=15)
    np.testing.assert_array_equal(m1.inducing_points, m2.inducing_points)  # seeded
    assert not np.allclose(m1.inducing_points, X[:15])
    m3 = sg.SGPR(X, y, inducing_points=15, seed=1)
    assert not np.allclose(m1.inducing_points, m3.inducing_points)
    r = sg.SGPR(X, y, inducing_points=15, inducing_init="random")
    assert all(any(np.array_equal(z, x) for x in X) for z in r.inducing_points)
    assert sg.SGPR(X[:30], y[:30]).num_inducing == 30


def test_jitter_is_relative_and_recorded():
    X, y = make_problem(8, N=30, D=1)
    Z = np.linspace(0.0, 1.0, 20)[:, None]  # with ℓ = 50 Kuu is numerically singular
    m = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=50.0), inducing_points=Z,
                jitter=0.0)
    with pytest.warns(sg.JitterWarning, match="needed jitter"):
        post = m.posterior()
    assert post.jitter > 0
    K = m.kernel.K(m.feature.Z).detach()
    expected = K + post.jitter * K.diagonal().mean() * torch.eye(20, dtype=torch.float64)
    torch.testing.assert_close(post.L @ post.L.mT, expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sg.SGPR(X, y, inducing_points=X[:5], jitter=1e-6).posterior()


def test_add_inducing_points_appends_in_user_units_and_keeps_a_frozen_z_frozen():
    X, y = make_problem(2, N=40)
    m = sg.SGPR(X, y, inducing_points=4, standardize_X=True)
    m.freeze("inducing_points")
    before = m.log_marginal_likelihood()
    m.add_inducing_points(X[:2])
    assert m.num_inducing == 6
    np.testing.assert_allclose(m.inducing_points[4:], X[:2], rtol=1e-12, atol=1e-12)
    assert not m.feature.Z.requires_grad
    assert m.log_marginal_likelihood() >= before - 1e-9  # VFE: more inducing inputs never hurt


def test_summary_says_when_its_values_are_in_standardised_units():
    X, y = sg.datasets.snelson()
    note = "values in the model's internal units: X and y standardised"
    assert note in sg.SGPR(X, y, inducing_points=3, standardize_X=True,
                           standardize_y=True).summary()
    assert "internal units: y standardised" in sg.SGPR(X, y, inducing_points=3,
                                                       standardize_y=True).summary()
    assert "internal units: y standardised" in sg.SGPR(X, y, inducing_points=3).summary()
    assert "internal units" not in sg.SGPR(X, y, inducing_points=3,
                                           standardize_y=False).summary()
