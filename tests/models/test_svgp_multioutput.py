"""SVGP with several outputs: independent outputs, missing outputs and the linear model of
coregionalisation (LMC), each against single-output models or a Monte Carlo evaluation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.models.core.predictions import latent, predicting

N, M, P = 50, 6, 3


def data(seed=0, missing=False):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3.0, 3.0, (N, 1))
    Y = np.c_[np.sin(X[:, 0]), np.cos(X[:, 0]), 0.4 * X[:, 0]] + 0.1 * rng.standard_normal((N, P))
    if missing:
        Y[3:15, 1] = np.nan
        Y[10:22, 2] = np.nan
        Y[40:44, 0] = np.nan
    return X, Y


def kernel():
    return sg.kernels.SquaredExponential(lengthscale=0.8, variance=1.1)


Z = np.linspace(-2.5, 2.5, M)[:, None]
NOISE = np.array([0.05, 0.1, 0.2])


def random_q(C, seed=1):
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(M, C, generator=g, dtype=torch.float64)
    root = torch.randn(C, M, M, generator=g, dtype=torch.float64).tril() * 0.3
    root = root + torch.diag_embed(torch.rand(C, M, generator=g, dtype=torch.float64) + 0.5)
    return mu, root


def set_q(model, mu, root):
    with torch.no_grad():
        model.q_mu.copy_(mu)
        model.q_sqrt.copy_(root)


def single_models(X, Y, mu, root):
    """One single-output SVGP per column, on the rows where that column is observed."""
    models = []
    for p in range(P):
        rows = ~np.isnan(Y[:, p])
        m = sg.SVGP(X[rows], Y[rows, p], kernel=kernel(), inducing_points=Z,
                    likelihood=sg.likelihoods.Gaussian(NOISE[p]), standardize_y=False)
        set_q(m, mu[:, p:p + 1], root[p:p + 1])
        models.append(m)
    return models


@pytest.mark.parametrize("missing", [False, True])
def test_independent_outputs_equal_single_output_models_on_their_observed_rows(missing):
    X, Y = data(missing=missing)
    mu, root = random_q(P)
    # y as given in every model: the sum over outputs holds in one unit of y
    multi = sg.SVGP(X, Y, kernel=kernel(), inducing_points=Z,
                    likelihood=sg.likelihoods.Gaussian(NOISE), standardize_y=False)
    assert multi.num_latent == P and multi.num_outputs == P
    set_q(multi, mu, root)
    singles = single_models(X, Y, mu, root)
    assert multi.log_marginal_likelihood() == pytest.approx(
        sum(m.log_marginal_likelihood() for m in singles), rel=1e-12)
    # gradients in the shared kernel: the sum of the single models'
    multi.training_loss().backward()
    for m in singles:
        m.training_loss().backward()
    for name, param in multi.kernel.named_parameters():
        total = sum(dict(m.kernel.named_parameters())[name].grad for m in singles)
        torch.testing.assert_close(param.grad, total, rtol=1e-10, atol=1e-12)
    Xs = np.linspace(-3, 3, 7)[:, None]
    mean, var = multi.predict_f(Xs)
    y_mean, y_var = multi.predict_y(Xs)
    for p, m in enumerate(singles):
        np.testing.assert_allclose(mean[:, p], m.predict_f(Xs)[0], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(var[:, p], m.predict_f(Xs)[1], rtol=1e-12)
        np.testing.assert_allclose(y_var[:, p], m.predict_y(Xs)[1], rtol=1e-12)
        lp = multi.predict_log_density(X[:5], Y[:5])[:, p]
        np.testing.assert_allclose(lp[~np.isnan(Y[:5, p])],
                                   m.predict_log_density(X[:5][~np.isnan(Y[:5, p])],
                                                         Y[:5, p][~np.isnan(Y[:5, p])]),
                                   rtol=1e-12)
        assert np.isnan(lp[np.isnan(Y[:5, p])]).all()


def test_lmc_with_the_identity_equals_independent_outputs():
    X, Y = data(missing=True)
    mu, root = random_q(P)
    lik = lambda: sg.likelihoods.Gaussian(NOISE)  # noqa: E731
    ind = sg.SVGP(X, Y, kernel=kernel(), inducing_points=Z, likelihood=lik())
    lmc = sg.SVGP(X, Y, kernel=kernel(), inducing_points=Z, likelihood=lik(), mixing=np.eye(P))
    set_q(ind, mu, root)
    set_q(lmc, mu, root)
    assert lmc.log_marginal_likelihood() == pytest.approx(ind.log_marginal_likelihood(), rel=1e-13)
    Xs = np.linspace(-3, 3, 5)[:, None]
    for full in ({}, {"full_cov": True}, {"full_output_cov": True}):
        for a, b in zip(lmc.predict_f(Xs, **full), ind.predict_f(Xs, **full)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    # the identity's gradient in W: ∂/∂W_pl of the data term, zero off the diagonal only by
    # accident — check it against finite differences of the ELBO instead
    lmc.training_loss().backward()
    W0 = lmc.mixing_matrix.detach().clone()
    eps = 1e-6
    for i, j in [(0, 0), (1, 2), (2, 1)]:
        with torch.no_grad():
            lmc.mixing_matrix.copy_(W0)
            lmc.mixing_matrix[i, j] += eps
        up = float(lmc.training_loss())
        with torch.no_grad():
            lmc.mixing_matrix[i, j] -= 2 * eps
        down = float(lmc.training_loss())
        assert float(lmc.mixing_matrix.grad[i, j]) == pytest.approx((up - down) / (2 * eps),
                                                                    rel=1e-6, abs=1e-6)


def test_lmc_elbo_against_monte_carlo_over_the_latent_functions():
    X, Y = data(3, missing=True)
    L = 2
    W = np.array([[1.0, 0.3], [-0.5, 0.8], [0.2, -1.1]])
    mu, root = random_q(L, seed=4)
    m = sg.SVGP(X, Y, kernel=kernel(), inducing_points=Z,
                likelihood=sg.likelihoods.Gaussian(NOISE), mixing=W,
                standardize_y=False)  # the Monte Carlo estimate's raw Y
    assert m.num_latent == L
    set_q(m, mu, root)
    # E_q(g_n) log N(y_n | W g_n, σ²) by sampling the latent marginals, + the KL from the model
    from sparsegp.objectives.svgp import kl_divergence
    with torch.no_grad():
        kl = float(kl_divergence(m.q_mu, m.q_sqrt, m._cholesky_kuu(), m.whiten))
    with torch.no_grad(), predicting(m, X) as call:
        gm, gv = latent(call.posterior, call.X, False)  # the latent marginals (independent)
    rng = np.random.default_rng(5)
    S = 20000
    g = gm.numpy()[None] + np.sqrt(gv.numpy())[None] * rng.standard_normal((S, N, L))
    f = g @ W.T  # [S, N, P]
    obs = ~np.isnan(Y)
    logp = -0.5 * np.log(2 * math.pi * NOISE) - 0.5 * (np.nan_to_num(Y) - f) ** 2 / NOISE
    per_sample = (logp * obs).sum((1, 2))
    estimate, se = per_sample.mean() - kl, per_sample.std() / math.sqrt(S)
    assert abs(m.log_marginal_likelihood() - estimate) < 5 * se
    # the covariance of the outputs at a point: W diag(v_g) Wᵀ, against the samples' covariance
    _, cov = m.predict_f(X[:2], full_output_cov=True)
    np.testing.assert_allclose(cov[0], np.cov(f[:, 0].T), rtol=0.05, atol=0.01)
    np.testing.assert_allclose(np.diagonal(cov, axis1=1, axis2=2), m.predict_f(X[:2])[1],
                               rtol=1e-12)


def test_full_batch_fit_with_missing_outputs_lands_on_the_collapsed_optimum():
    X, Y = data(6, missing=True)
    m = sg.SVGP(X, Y, kernel=kernel(), inducing_points=Z, likelihood=sg.likelihoods.Gaussian(0.1),
                standardize_y=False)
    m.fit(maxiter=60)
    # the same hyperparameters in SGPR (one shared noise; the same units: y as given): its
    # bound is max over q(u)
    reg = sg.SGPR(X, Y, kernel=kernel(), inducing_points=m.inducing_points,
                  noise_variance=m.likelihood.variance, standardize_y=False)
    reg.kernel.load_state_dict(m.kernel.state_dict())
    assert m.log_marginal_likelihood() == pytest.approx(reg.log_marginal_likelihood(), rel=1e-9)
    for a, b in zip(m.predict_f(X[:6]), reg.predict_f(X[:6])):
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-9)


def test_minibatch_estimates_with_missing_outputs_average_to_the_full_elbo_and_fit_runs():
    X, Y = data(7, missing=True)
    m = sg.SVGP(X, Y, kernel=kernel(), inducing_points=Z,
                likelihood=sg.likelihoods.Gaussian(NOISE), mixing=np.ones((P, 2)) * 0.5)
    set_q(m, *random_q(2))
    perm = torch.randperm(N, generator=torch.Generator().manual_seed(0)).reshape(5, 10)
    with torch.no_grad():
        estimates = [float(m.elbo(*m.internal_batch(X[idx], Y[idx]))) for idx in perm]
        full = float(m.elbo())
    assert sum(estimates) / 5 == pytest.approx(full, rel=1e-12)
    before = m.log_marginal_likelihood()
    m.fit(batch_size=10, epochs=30, progress=False)
    assert m.log_marginal_likelihood() > before


def test_save_and_load_keep_the_mixing_matrix(tmp_path):
    X, Y = data(8, missing=True)
    W = np.array([[1.0, 0.2], [0.1, 0.9], [0.5, 0.5]])
    m = sg.SVGP(X, Y, kernel=kernel(), inducing_points=Z, mixing=W)
    set_q(m, *random_q(2))
    m.save(tmp_path / "lmc.pt")
    back = sg.load(tmp_path / "lmc.pt")
    np.testing.assert_array_equal(back.mixing, W)
    Xs = np.linspace(-2, 2, 4)[:, None]
    for a, b in zip(back.predict_f(Xs, full_output_cov=True), m.predict_f(Xs, full_output_cov=True)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kwargs, message", [
    ({"mixing": np.ones((2, 2))}, "one row per output"),
    ({"mixing": np.ones(3)}, "finite matrix"),
    ({"likelihood": sg.likelihoods.Bernoulli()}, "Gaussian likelihood"),
    ({"mean": sg.means.Constant()}, "prior mean takes one output"),
    ({"likelihood": sg.likelihoods.Gaussian(np.ones(2))}, "one per output"),
    ({"num_latent": 2}, "num_latent must be 3"),
])
def test_bad_multi_output_arguments_are_refused_by_name(kwargs, message):
    X, Y = data()
    with pytest.raises(ValueError, match=message):
        sg.SVGP(X, Y, inducing_points=Z, **kwargs)


def test_bad_multi_output_targets_are_refused():
    X, Y = data()
    Y[:, 1] = np.nan
    with pytest.raises(ValueError, match="no observed value"):
        sg.SVGP(X, Y, inducing_points=Z)
    Y[:, 1] = np.inf
    with pytest.raises(ValueError, match="inf"):
        sg.SVGP(X, Y, inducing_points=Z)
    X, Y = data()
    m = sg.SVGP(X, Y, inducing_points=Z)
    with pytest.raises(ValueError, match="one column per output"):
        m.internal_batch(X[:4], Y[:4, :2])


@pytest.mark.parametrize("num_latent, message", [
    (1.5, "num_latent must be a positive integer; got 1.5"),  # was taken as 1
    ("2", "num_latent must be a positive integer"),  # was taken as 2
    (2, "num_latent must be 1 for one output and Gaussian"),  # the second went unused
])
def test_num_latent_for_one_output_is_checked(num_latent, message):
    X, Y = data()
    with pytest.raises(ValueError, match=message):
        sg.SVGP(X, Y[:, 0], inducing_points=Z, num_latent=num_latent)
    assert sg.SVGP(X, Y[:, 0], inducing_points=Z, num_latent=1).num_latent == 1
