"""SGPR's linear model of coregionalisation (collapsed bound) against dense evaluations of the
same model on vec(Y), its exact limit Z = X, and independent outputs at W = I."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import sparsegp as sg

LENGTHSCALE, VARIANCE, NOISE = 0.8, 1.1, 0.05
JITTER = 1e-6  # the library's relative jitter on Kuu, reproduced by the dense reference
W = np.array([[1.0, 0.3], [-0.5, 0.8], [0.2, -1.1]])


def data(seed=0, N=30, missing=True):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3.0, 3.0, (N, 1))
    g = np.c_[np.sin(X[:, 0]), 0.5 * X[:, 0]]
    Y = g @ W.T + math.sqrt(NOISE) * rng.standard_normal((N, 3))
    if missing:
        Y[:7, 1] = np.nan
        Y[4:12, 2] = np.nan
        Y[15, :2] = np.nan
    return X, Y


def kernel():
    return sg.kernels.SquaredExponential(lengthscale=LENGTHSCALE, variance=VARIANCE)


def se(A, B):
    return VARIANCE * np.exp(-((A[:, None, :] - B[None]) ** 2).sum(-1) / (2 * LENGTHSCALE**2))


def model(X, Y, Z, mixing=W, approximation="vfe", jitter=JITTER):
    # y as given: the dense references work on the raw targets
    return sg.SGPR(X, Y, kernel=kernel(), inducing_points=Z, noise_variance=NOISE,
                   mixing=mixing, approximation=approximation, jitter=jitter,
                   standardize_y=False)


def dense_vec(X, Y, Z):
    """vec(Y)'s observed entries (output-major), the prior covariance of f there, and its
    Nyström part, with the jitter the library puts on Kuu."""
    Kuu = se(Z, Z)
    Kuu += JITTER * np.mean(np.diag(Kuu)) * np.eye(len(Z))
    Kuf = se(Z, X)
    Q = Kuf.T @ np.linalg.solve(Kuu, Kuf)
    obs = ~np.isnan(Y.T.reshape(-1))
    WW = W @ W.T
    return (Y.T.reshape(-1)[obs], np.kron(WW, se(X, X))[np.ix_(obs, obs)],
            np.kron(WW, Q)[np.ix_(obs, obs)])


def log_normal(y, S):
    return -0.5 * (len(y) * math.log(2 * math.pi) + np.linalg.slogdet(S)[1]
                   + y @ np.linalg.solve(S, y))


@pytest.mark.parametrize("approximation", ["vfe", "dtc"])
def test_objective_equals_the_dense_bound_on_vec_y_with_missing_entries(approximation):
    X, Y = data()
    Z = np.linspace(-2.5, 2.5, 6)[:, None]
    y, K, Q = dense_vec(X, Y, Z)
    expected = log_normal(y, Q + NOISE * np.eye(len(y)))
    if approximation == "vfe":
        expected -= np.trace(K - Q) / (2 * NOISE)
    m = model(X, Y, Z, approximation=approximation)
    assert m.log_marginal_likelihood() == pytest.approx(expected, rel=1e-9)
    exact = log_normal(y, K + NOISE * np.eye(len(y)))
    if approximation == "vfe":
        assert m.log_marginal_likelihood() < exact < m.upper_bound()


def test_inducing_inputs_at_the_data_give_the_exact_lmc_and_its_posterior():
    X, Y = data(1, N=20)
    m = model(X, Y, X, jitter=1e-12)  # (no jitter would make it exact; Kuu stays factorable)
    y, K, _ = dense_vec(X, Y, X)
    S = K + NOISE * np.eye(len(y))
    assert m.log_marginal_likelihood() == pytest.approx(log_normal(y, S), rel=1e-7)
    # the exact posterior of the outputs at new points: cov(f*(p), y) = (WWᵀ)_p,· ⊗ k(x*, X)
    Xs = np.array([[-1.3], [0.4], [2.2]])
    obs = ~np.isnan(Y.T.reshape(-1))
    cross = np.kron(W @ W.T, se(Xs, X))[:, obs]  # [3·3 (output-major), observed]
    prior = np.kron(W @ W.T, se(Xs, Xs))
    mean = cross @ np.linalg.solve(S, y)
    cov = prior - cross @ np.linalg.solve(S, cross.T)
    got_mean, got_var = m.predict(Xs)
    np.testing.assert_allclose(got_mean, mean.reshape(3, 3).T, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(got_var, np.diag(cov).reshape(3, 3).T, rtol=1e-6, atol=1e-9)
    _, out_cov = m.predict(Xs, full_output_cov=True)
    for i in range(3):  # the [P, P] block of point i
        idx = np.arange(3) * 3 + i
        np.testing.assert_allclose(out_cov[i], cov[np.ix_(idx, idx)], rtol=1e-6, atol=1e-9)
    _, point_cov = m.predict(Xs, full_cov=True)
    for p in range(3):
        idx = p * 3 + np.arange(3)
        np.testing.assert_allclose(point_cov[p], cov[np.ix_(idx, idx)], rtol=1e-6, atol=1e-9)


def test_the_identity_mixing_equals_independent_outputs():
    X, Y = data(2)
    Z = np.linspace(-2.5, 2.5, 5)[:, None]
    ind = model(X, Y, Z, mixing=None)
    lmc = model(X, Y, Z, mixing=np.eye(3))
    assert lmc.log_marginal_likelihood() == pytest.approx(ind.log_marginal_likelihood(), rel=1e-12)
    ind.training_loss().backward()
    lmc.training_loss().backward()
    for (name, a), (_, b) in zip(ind.kernel.named_parameters(), lmc.kernel.named_parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-12, msg=name)
    Xs = np.linspace(-3, 3, 6)[:, None]
    for kw in ({}, {"full_cov": True}, {"include_noise": True}, {"full_output_cov": True}):
        for a, b in zip(ind.predict(Xs, **kw), lmc.predict(Xs, **kw)):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    # both bounds are upper bounds; the joint one is the looser (t over all outputs at once)
    assert lmc.upper_bound() >= ind.upper_bound() - 1e-9


def test_mixing_gradient_against_finite_differences_and_fit_improves():
    X, Y = data(3)
    m = model(X, Y, np.linspace(-2.5, 2.5, 5)[:, None], mixing=W * 0.7)
    m.training_loss().backward()
    grad = m.mixing_matrix.grad.clone()
    W0 = m.mixing_matrix.detach().clone()
    for i, j in [(0, 0), (1, 1), (2, 0)]:
        values = []
        for step in (1e-6, -1e-6):
            with torch.no_grad():
                m.mixing_matrix.copy_(W0)
                m.mixing_matrix[i, j] += step
                values.append(float(m.training_loss()))
        assert float(grad[i, j]) == pytest.approx((values[0] - values[1]) / 2e-6, rel=1e-5)
    with torch.no_grad():
        m.mixing_matrix.copy_(W0)
    before = m.log_marginal_likelihood()
    m.fit(maxiter=100)
    assert m.log_marginal_likelihood() > before + 1.0


def test_save_and_load_keep_the_coregional_posterior(tmp_path):
    X, Y = data(4)
    m = model(X, Y, np.linspace(-2.5, 2.5, 5)[:, None])
    m.save(tmp_path / "lmc.pt")
    back = sg.load(tmp_path / "lmc.pt")
    np.testing.assert_array_equal(back.mixing, m.mixing)
    Xs = np.linspace(-2, 2, 4)[:, None]
    for kw in ({}, {"full_output_cov": True, "include_noise": True}):
        for a, b in zip(back.predict(Xs, **kw), m.predict(Xs, **kw)):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kwargs, message", [
    ({"approximation": "fitc"}, "collapsed bound"),
    ({"approximation": "pep", "alpha": 0.5}, "collapsed bound"),
    ({"mixing": np.ones((2, 2))}, "one row per output"),
    ({"mixing": [[np.nan, 1.0]] * 3}, "finite matrix"),
])
def test_what_the_lmc_cannot_take_is_refused_by_name(kwargs, message):
    X, Y = data(5)
    arguments = {"mixing": W, **kwargs}
    with pytest.raises(ValueError, match=message):
        sg.SGPR(X, Y, inducing_points=5, **arguments)
    with pytest.raises(ValueError, match="several outputs"):
        sg.SGPR(X, np.nan_to_num(Y[:, 0]), inducing_points=5, mixing=W[:1])
    with pytest.raises(ValueError, match="cannot both"):
        sg.SGPR(X, Y, inducing_points=5, mixing=W).predict(X[:2], full_cov=True,
                                                          full_output_cov=True)
