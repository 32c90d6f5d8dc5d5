"""SVGP: natural gradients reach the collapsed optimum; unbiased minibatches; classification."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.objectives.svgp import kl_divergence

from ..conftest import make_problem


def kernel():
    return sg.kernels.SquaredExponential(lengthscale=[0.9, 1.4], variance=1.2)


@pytest.mark.parametrize("whiten", [True, False])
def test_one_natural_gradient_step_reaches_the_collapsed_vfe_optimum(whiten):
    X, y = make_problem(0, N=120)
    Z = X[:12] + 0.1
    # y as given in both (the same fixed kernel, the same units)
    sv = sg.SVGP(X, y, kernel=kernel(), likelihood=sg.likelihoods.Gaussian(0.1),
                 inducing_points=Z, whiten=whiten, standardize_y=False)
    reg = sg.SGPR(X, y, kernel=kernel(), inducing_points=Z, noise_variance=0.1,
                  standardize_y=False)
    assert sv.log_marginal_likelihood() < reg.log_marginal_likelihood() - 10
    assert sv.natural_gradient_step(1.0) == 1.0
    assert sv.log_marginal_likelihood() == pytest.approx(reg.log_marginal_likelihood(), rel=1e-11)
    for a, b in zip(sv.predict_f(X[:9]), reg.predict_f(X[:9])):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)
    for a, b in zip(sv.predict_y(X[:9]), reg.predict_y(X[:9])):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)
    # at the optimum a second step changes nothing, and the ELBO gradient in q vanishes
    q_mu = sv.q_mu.detach().clone()
    sv.natural_gradient_step(1.0)
    torch.testing.assert_close(sv.q_mu.detach(), q_mu, rtol=1e-8, atol=1e-9)
    g = torch.autograd.grad(sv.elbo(), [sv.q_mu])[0]
    assert float(g.abs().max()) < 1e-6


def test_minibatch_estimates_average_to_the_full_elbo():
    X, y = make_problem(1, N=120)
    sv = sg.SVGP(X, y, kernel=kernel(), inducing_points=10)
    with torch.no_grad():
        sv.q_mu.normal_()
        sv.q_sqrt.mul_(0.5)
    perm = torch.randperm(120, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        estimates = [float(sv.elbo(sv.X[idx], sv.y[idx])) for idx in perm.reshape(6, 20)]
        full = float(sv.elbo())
    assert sum(estimates) / 6 == pytest.approx(full, rel=1e-12)
    assert max(abs(e - full) for e in estimates) > 1e-3  # each one alone is noisy


@pytest.mark.parametrize("whiten", [True, False])
def test_kl_divergence_matches_torch_distributions(whiten):
    rng = np.random.default_rng(2)
    M, C = 6, 2
    A = torch.as_tensor(rng.normal(size=(M, M)))
    L = torch.linalg.cholesky(A @ A.mT + M * torch.eye(M, dtype=torch.float64))
    q_mu = torch.as_tensor(rng.normal(size=(M, C)))
    q_sqrt = torch.as_tensor(np.tril(rng.normal(size=(C, M, M))))
    prior_cov = torch.eye(M, dtype=torch.float64) if whiten else L @ L.mT
    prior = torch.distributions.MultivariateNormal(torch.zeros(M, dtype=torch.float64), prior_cov)
    ref = sum(torch.distributions.kl_divergence(torch.distributions.MultivariateNormal(
        q_mu[:, c], scale_tril=q_sqrt[c].tril() * torch.sign(q_sqrt[c].diagonal())), prior)
        for c in range(C))
    assert float(kl_divergence(q_mu, q_sqrt, L, whiten)) == pytest.approx(float(ref), rel=1e-10)


def test_gaussian_full_batch_fit_finds_the_sgpr_optimum():
    X, y = make_problem(2, N=150)
    sv = sg.SVGP(X, y, inducing_points=X[:10], standardize_y=False)  # the same units in both
    reg = sg.SGPR(X, y, inducing_points=X[:10], standardize_y=False)
    res_sv, res_reg = sv.fit(tol=1e-8), reg.fit(tol=1e-8)  # both to L-BFGS-B's optimum
    assert res_sv.success
    assert res_sv.objective == pytest.approx(res_reg.objective, rel=1e-5)
    assert sv.likelihood.variance == pytest.approx(reg.noise_variance, rel=1e-3)
    log_dens = sv.predict_log_density(X[:5], y[:5])
    mean, var = sv.predict_y(X[:5])
    ref = -0.5 * np.log(2 * np.pi * var) - 0.5 * (y[:5] - mean) ** 2 / var
    np.testing.assert_allclose(log_dens, ref, rtol=1e-12)
    np.testing.assert_allclose(mean, reg.predict_y(X[:5])[0], rtol=1e-2, atol=1e-3)


def test_a_gaussian_svgp_starts_where_sgpr_starts():
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 6, (300, 2))
    y = 3.0 * np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.02 * rng.normal(size=300)
    # y as given in both (test_default_standardisation: the default starts, standardised)
    sv = sg.SVGP(X, y, inducing_points=25, standardize_y=False)
    reg = sg.SGPR(X, y, inducing_points=25, standardize_y=False)
    assert sv.likelihood.variance == pytest.approx(np.var(y, ddof=1) / 10, rel=1e-12)
    assert sv.likelihood.variance == pytest.approx(reg.noise_variance, rel=1e-12)
    for (name, a), (_, b) in zip(sv.kernel.named_parameters(), reg.kernel.named_parameters()):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=0, msg=name)
    np.testing.assert_array_equal(sv.inducing_points, reg.inducing_points)
    # the same objective at the same start: with q(u) at its optimum the ELBO is SGPR's bound
    sv.natural_gradient_step(1.0)
    assert sv.log_marginal_likelihood() == pytest.approx(reg.log_marginal_likelihood(), rel=1e-9)
    given = sg.SVGP(X, y, likelihood=sg.likelihoods.Gaussian(variance=0.3), inducing_points=5,
                    standardize_y=False)
    assert given.likelihood.variance == pytest.approx(0.3)  # a given variance is kept
    assert sg.likelihoods.Gaussian().variance == 1.0  # alone, without targets


def banana(N, seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (N, 2))
    p = 1 / (1 + np.exp(-4 * np.sin(X[:, 0]) * np.cos(X[:, 1])))
    return X, (rng.uniform(size=N) < p).astype(float)


def test_bernoulli_minibatch_training_classifies():
    X, y = banana(400, 0)
    Xt, yt = banana(2000, 1)
    sv = sg.SVGP(X, y, likelihood=sg.likelihoods.Bernoulli(), inducing_points=20)
    start = sv.log_marginal_likelihood()
    res = sv.fit(batch_size=100, epochs=40, lr=0.03)
    assert res.success and res.iterations == res.evaluations == 160  # 40 epochs of 4 steps
    assert res.info["epochs"] == 40
    assert sv.log_marginal_likelihood() > start + 50
    p = sv.predict_proba(Xt)
    assert np.mean((p > 0.5) != yt) < 0.3
    # training from a DataLoader in user units gives the same kind of result
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
        torch.as_tensor(X), torch.as_tensor(y)), batch_size=100, shuffle=True,
        generator=torch.Generator().manual_seed(0))
    sv2 = sg.SVGP(X, y, likelihood=sg.likelihoods.Bernoulli(), inducing_points=20)
    sv2.fit(data=loader, epochs=5)
    assert sv2.log_marginal_likelihood() > start


def test_bad_input_is_a_clear_error():
    X, y = banana(50, 2)
    with pytest.raises(ValueError, match="labels must be binary"):
        sg.SVGP(X, np.arange(50.0), likelihood=sg.likelihoods.Bernoulli(), inducing_points=5)
    with pytest.raises(TypeError, match="likelihood must be a sparsegp likelihood"):
        sg.SVGP(X, y, likelihood="bernoulli", inducing_points=5)
    with pytest.raises(ValueError, match="y must have one entry per row"):
        sg.SVGP(X, y[:10], inducing_points=5)
    with pytest.raises(ValueError, match="batch_size"):
        sg.SVGP(X, y, likelihood=sg.likelihoods.Bernoulli(), inducing_points=5).fit(batch_size=0)


def test_predict_and_the_covariances_of_y_match_sgpr_at_the_optimal_q_u():
    X, y = make_problem(4, N=60)
    Z = X[:7] + 0.05
    # y as given in both (the same fixed kernel, the same units)
    sv = sg.SVGP(X, y, kernel=kernel(), likelihood=sg.likelihoods.Gaussian(0.2), inducing_points=Z,
                 standardize_y=False)
    reg = sg.SGPR(X, y, kernel=kernel(), inducing_points=Z, noise_variance=0.2,
                  standardize_y=False)
    sv.natural_gradient_step(1.0)
    for full_cov in (False, True):
        for include_noise in (False, True):
            a = sv.predict(X[:6], full_cov=full_cov, include_noise=include_noise)
            b = reg.predict(X[:6], full_cov=full_cov, include_noise=include_noise)
            for u, v in zip(a, b):
                assert u.shape == v.shape
                np.testing.assert_allclose(u, v, rtol=1e-9, atol=1e-11)
    # several outputs, one noise each: y*'s covariance is f*'s plus that noise
    Y = np.c_[y, -2 * y]
    multi = sg.SVGP(X, Y, kernel=kernel(), inducing_points=Z, mixing=[[1.0, 0.3], [0.2, 1.0]],
                    likelihood=sg.likelihoods.Gaussian(variance=[0.1, 0.4]), standardize_y=False)
    mean_f, cov_f = multi.predict_f(X[:5], full_output_cov=True)
    mean_y, cov_y = multi.predict_y(X[:5], full_output_cov=True)
    np.testing.assert_array_equal(mean_y, mean_f)
    np.testing.assert_allclose(cov_y - cov_f, np.broadcast_to(np.diag([0.1, 0.4]), (5, 2, 2)),
                               atol=1e-12)
    assert abs(cov_y[:, 0, 1]).max() > 1e-3  # the mixing couples the outputs
    _, var_y = multi.predict_y(X[:5])
    np.testing.assert_allclose(np.diagonal(cov_y, axis1=1, axis2=2), var_y, rtol=1e-12)
    _, cov_points = multi.predict_y(X[:5], full_cov=True)
    assert cov_points.shape == (2, 5, 5)
    np.testing.assert_allclose(np.diagonal(cov_points, axis1=1, axis2=2).T, var_y, rtol=1e-12)


def test_covariances_of_y_need_a_gaussian_likelihood():
    X, y = make_problem(5, N=30)
    clf = sg.SVGP(X, (y > 0).astype(float), likelihood=sg.likelihoods.Bernoulli(),
                  inducing_points=4)
    with pytest.raises(ValueError, match="need a Gaussian likelihood; this SVGP's is Bernoulli"):
        clf.predict_y(X[:3], full_cov=True)
    # under a classification likelihood predict gives labels (as SGPC's), predict_y the moments
    np.testing.assert_array_equal(clf.predict(X[:3]), (clf.predict_proba(X[:3]) > 0.5).astype(int))
    with pytest.raises(ValueError, match="predict gives labels"):
        clf.predict(X[:3], include_noise=True)


def test_a_minibatch_fit_counts_its_steps_as_iterations_and_says_its_epochs():
    # 3 epochs of 200 points in batches of 50: 12 optimiser steps (the result used to say
    # "finished after 3 iterations")
    X, y = sg.datasets.snelson()
    res = sg.SVGP(X, y, inducing_points=5).fit(batch_size=50, epochs=3, progress=False)
    assert (res.iterations, res.evaluations) == (12, 12)
    assert res.info["epochs"] == len(res.history) == 3 and res.info["steps"] == 12
    assert str(res).startswith("finished after 12 iterations (12 evaluations, ")
    assert str(res).endswith("; 3 epochs of 4 steps")
