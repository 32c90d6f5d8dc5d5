"""sg.BayesianGPLVM: ARD finds the latent dimensionality, transform, save/load, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.models.gplvm import _MinibatchBound


def _data(seed=0, N=60, D=6, kind="tanh"):
    """Y [N, D] from a 2-D latent X through a random linear map (and a tanh), plus noise."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, 2))
    H = X @ rng.standard_normal((2, D))
    return (H if kind == "linear" else np.tanh(0.7 * H)) + 0.05 * rng.standard_normal((N, D))


@pytest.mark.parametrize("kind", ["tanh", "linear"])
def test_ard_switches_off_the_latent_dimensions_the_data_do_not_use(kind):
    # data from a 2-D latent space, a 4-D model: the relevance of a latent dimension
    # (its spread over the lengthscale², or times the linear kernel's variance) must drop by
    # orders of magnitude after the second (measured: ≤ 3e-3 of the second, seeds 0–3)
    Y = _data(kind=kind)
    kernel = sg.kernels.Linear(variance=np.ones(4)) if kind == "linear" else None
    m = sg.BayesianGPLVM(Y, latent_dim=4, inducing_points=10, kernel=kernel)
    start = m.log_marginal_likelihood()
    m.fit(maxiter=400)
    assert m.log_marginal_likelihood() > start
    spread = m.latent_mean.var(0) + m.latent_variance.mean(0)
    rel = (spread * m.kernel.variance if kind == "linear"
           else spread / m.kernel.lengthscale**2)
    rel = np.sort(rel)[::-1]
    assert rel[2] < 0.02 * rel[1]
    assert m.noise_variance < 0.01  # the true noise variance is 0.0025


@pytest.fixture(scope="module")
def fitted():
    m = sg.BayesianGPLVM(_data(), latent_dim=2, inducing_points=10)
    m.fit(maxiter=200)
    return m


def test_transform_of_training_rows_recovers_their_latent_points(fitted):
    Y = _data()
    mean, var = fitted.transform(Y[:5])
    spread = fitted.latent_mean.std(0)
    assert np.all(np.abs(mean - fitted.latent_mean[:5]) < 0.1 * spread)
    assert mean.shape == var.shape == (5, 2) and np.all(var > 0)
    # and a new row between two training rows lands between their latent points
    mid = 0.5 * (Y[0] + Y[1])
    mean_mid, _ = fitted.transform(mid[None])
    lo = np.minimum(fitted.latent_mean[0], fitted.latent_mean[1]) - 0.2 * spread
    hi = np.maximum(fitted.latent_mean[0], fitted.latent_mean[1]) + 0.2 * spread
    assert np.all((lo < mean_mid[0]) & (mean_mid[0] < hi))


def test_predictions_reconstruct_the_training_outputs(fitted):
    Y = _data()
    mean, var = fitted.predict(fitted.latent_mean)
    assert mean.shape == var.shape == Y.shape
    # residuals of the order of the noise (0.05), far below the outputs' spread (~0.6)
    assert np.sqrt(np.mean((mean - Y) ** 2)) < 0.1
    _, var_y = fitted.predict(fitted.latent_mean, include_noise=True)
    np.testing.assert_allclose(var_y - var, fitted.noise_variance, rtol=1e-12)


def test_a_change_of_state_rebuilds_the_posterior(fitted, tmp_path):
    m = sg.load(_saved(fitted, tmp_path))
    before = m.predict(m.latent_mean[:3])[0]
    m.noise_variance = 10 * m.noise_variance
    assert not np.allclose(m.predict(m.latent_mean[:3])[0], before)


def _saved(model, tmp_path, **kwargs):
    path = tmp_path / "gplvm.pt"
    model.save(path, **kwargs)
    return path


def test_save_and_load_round_trip(fitted, tmp_path):
    m = sg.load(_saved(fitted, tmp_path))
    Xs = np.random.default_rng(1).standard_normal((7, 2))
    for a, b in zip(m.predict(Xs), fitted.predict(Xs)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(m.latent_mean, fitted.latent_mean)
    assert m.log_marginal_likelihood() == fitted.log_marginal_likelihood()
    bare = sg.load(_saved(fitted, tmp_path, include_data=False))
    np.testing.assert_array_equal(bare.predict(Xs)[0], fitted.predict(Xs)[0])
    with pytest.raises(RuntimeError, match="without Y"):
        bare.fit()


def test_kernels_without_closed_forms_use_quadrature():
    Y = _data(N=30)
    m = sg.BayesianGPLVM(Y, latent_dim=2, inducing_points=6,
                         kernel=sg.kernels.Matern52(lengthscale=np.ones(2)), quadrature_points=8)
    start = m.log_marginal_likelihood()
    result = m.fit(maxiter=30)
    assert np.isfinite(result.objective) and m.log_marginal_likelihood() > start


def test_pca_initialisation_and_given_starting_values():
    Y = _data()
    m = sg.BayesianGPLVM(Y, latent_dim=3)
    mu = m.latent_mean
    np.testing.assert_allclose(mu.std(0, ddof=1), 1.0, rtol=1e-10)  # unit-variance PCA scores
    Yc = Y - Y.mean(0)
    # the scores span the top principal subspace of Y
    _, _, Vt = np.linalg.svd(Yc, full_matrices=False)
    proj = Yc @ Vt[:3].T
    coef, *_ = np.linalg.lstsq(proj, mu, rcond=None)
    np.testing.assert_allclose(proj @ coef, mu, atol=1e-10)
    given = np.random.default_rng(0).standard_normal((60, 3))
    m2 = sg.BayesianGPLVM(Y, latent_dim=3, X_mean=given, X_variance=np.full((60, 3), 0.3))
    np.testing.assert_allclose(m2.latent_mean, given)
    np.testing.assert_allclose(m2.latent_variance, 0.3)
    assert m2.num_inducing == 30 and m2.inducing_points.shape == (30, 3)


@pytest.mark.parametrize("kwargs, message", [
    ({"latent_dim": 0}, "latent_dim must be a positive integer"),
    ({"inducing_points": 100}, r"number of starting latent points \(rows of Y\) N=60"),
    ({"inducing_points": np.zeros((5, 3))}, "must have 2 columns"),
    ({"X_mean": np.zeros((60, 3))}, r"X_mean must have shape \(60, 2\)"),
    ({"X_variance": -np.ones((60, 2))}, "X_variance must be finite and greater"),
    ({"kernel": "rbf"}, "kernel must be a sparsegp kernel"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        sg.BayesianGPLVM(_data(), **{"latent_dim": 2, **kwargs})


def test_bad_outputs_are_named(fitted):
    Y = _data()
    Y[3, 2] = np.nan
    with pytest.raises(ValueError, match="Y contains NaN"):
        sg.BayesianGPLVM(Y)
    with pytest.raises(ValueError, match="N ≥ 2"):
        sg.BayesianGPLVM(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="Ynew must have 6 columns"):
        fitted.transform(np.zeros((2, 5)))
    with pytest.raises(ValueError, match=r"one row of Y is Ynew\[None, :\], shape \(1, 6\)"):
        fitted.transform(_data()[0])  # one row as a 1-D array
    with pytest.raises(ValueError, match="Xlatent has 3 columns but the model expects 2"):
        fitted.predict(np.zeros((2, 3)))


def test_minibatch_estimates_average_to_the_full_bound_and_training_improves_it():
    m = sg.BayesianGPLVM(_data(N=60), latent_dim=2, inducing_points=8)
    steps = _MinibatchBound(m)
    rows = torch.randperm(60, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = float(steps.elbo(steps.X, m.y))
        batches = [float(steps.elbo(r, m.y[r])) for r in rows.view(4, 15)]
    # disjoint equal batches: their unbiased estimates average to the full-data value, which
    # at the collapsed optimum q(u) is the collapsed bound itself
    assert np.mean(batches) == pytest.approx(full, rel=1e-12)
    assert full == pytest.approx(m.log_marginal_likelihood(), rel=1e-10)
    start = m.log_marginal_likelihood()
    result = m.fit(batch_size=20, epochs=30, lr=0.02, progress=False)
    assert result.success and np.isfinite(result.objective)
    assert m.log_marginal_likelihood() > start
