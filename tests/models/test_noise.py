"""A noise variance per data point (known) or per group of points (trained), in GPR and in
every member of the collapsed family, against dense evaluations written from docs/math.md §2–3 with
Λ = diag(α d_n + σ²_n) (PEP), S = diag σ²_n (VFE, DTC):

  F_α   = log N(y; 0, Qff + Λ) − (1−α)/(2α) Σ_n log(1 + α d_n/σ²_n)
  F_VFE = log N(y; 0, Qff + S) − ½ Σ_n d_n/σ²_n,   F_DTC = log N(y; 0, Qff + S)
  U     = −(N/2) log 2π − ½ log|Qff + S| − ½ yᵀ(Qff + S + tI)⁻¹y,  t = Σ_n d_n.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg

LOG2PI = np.log(2.0 * np.pi)
ELL, VAR = 0.7, 1.2


pytestmark = pytest.mark.usefixtures("quiet_model_warnings")


def data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 4.0, (n, 1))
    s2 = np.where(X[:, 0] > 2.0, 0.2, 0.01) * rng.uniform(0.5, 1.5, n)
    y = np.sin(2.0 * X[:, 0]) + np.sqrt(s2) * rng.standard_normal(n)
    return X, y, s2, rng.uniform(0.0, 4.0, (7, 1))


def se():
    k = sg.kernels.SquaredExponential()
    k.lengthscale, k.variance = ELL, VAR
    return k


def k_np(A, B):
    return VAR * np.exp(-0.5 * (A[:, None, 0] - B[None, :, 0]) ** 2 / ELL**2)


def gauss(y, C):
    return -0.5 * len(y) * LOG2PI - 0.5 * np.linalg.slogdet(C)[1] - 0.5 * y @ np.linalg.solve(C, y)


def dense(X, y, Z, s2, approximation, alpha):
    Kuf = k_np(Z, X)
    Qff = Kuf.T @ np.linalg.solve(k_np(Z, Z), Kuf)
    d = VAR - np.diag(Qff)
    if approximation == "vfe":
        return gauss(y, Qff + np.diag(s2)) - 0.5 * np.sum(d / s2)
    if approximation == "dtc":
        return gauss(y, Qff + np.diag(s2))
    a = 1.0 if approximation == "fitc" else alpha
    return gauss(y, Qff + np.diag(a * d + s2)) - (1 - a) / (2 * a) * np.sum(np.log1p(a * d / s2))


MEMBERS = [("vfe", None), ("dtc", None), ("fitc", None), ("pep", 0.5), ("pep", 0.1)]


@pytest.mark.parametrize("approximation,alpha", MEMBERS)
def test_known_per_point_noise_equals_a_dense_evaluation(approximation, alpha):
    X, y, s2, Z = data()
    m = sg.SGPR(X, y, kernel=se(), inducing_points=Z, approximation=approximation, alpha=alpha,
                noise_variance=s2, jitter=0.0, chunk_size=17, standardize_y=False)  # raw y
    assert m.log_marginal_likelihood() == pytest.approx(
        dense(X, y, Z, s2, approximation, alpha), rel=1e-10)
    assert m.heteroscedastic and m.noise_variance.shape == (60,)


def test_exact_gp_with_per_point_noise_and_the_upper_bound_sandwich():
    X, y, s2, Z = data()
    # y as given: the dense references work on the raw targets
    exact = sg.GPR(X, y, kernel=se(), noise_variance=s2, standardize_y=False)
    ref = gauss(y, k_np(X, X) + np.diag(s2))
    assert exact.log_marginal_likelihood() == pytest.approx(ref, rel=1e-12)
    m = sg.SGPR(X, y, kernel=se(), inducing_points=Z, noise_variance=s2, jitter=0.0,
                standardize_y=False)
    Kuf = k_np(Z, X)
    Qff = Kuf.T @ np.linalg.solve(k_np(Z, Z), Kuf)
    t = np.sum(VAR - np.diag(Qff))
    S = np.diag(s2)
    upper = (-0.5 * len(y) * LOG2PI - 0.5 * np.linalg.slogdet(Qff + S)[1]
             - 0.5 * y @ np.linalg.solve(Qff + S + t * np.eye(len(y)), y))
    assert m.upper_bound() == pytest.approx(upper, rel=1e-10)
    assert m.log_marginal_likelihood() <= ref <= m.upper_bound()


@pytest.mark.parametrize("approximation,alpha", MEMBERS)
def test_equal_per_point_noise_is_the_scalar_model_value_and_gradient(approximation, alpha):
    X, y, _, Z = data()
    one = sg.SGPR(X, y, kernel=se(), inducing_points=Z, approximation=approximation,
                  alpha=alpha, noise_variance=0.05)
    groups = sg.SGPR(X, y, kernel=se(), inducing_points=Z, approximation=approximation,
                     alpha=alpha, noise_variance=0.05, noise_groups=np.zeros(60, dtype=int))
    assert groups.log_marginal_likelihood() == pytest.approx(one.log_marginal_likelihood(),
                                                             rel=1e-12)
    for m in (one, groups):
        m.zero_grad()
        m.training_loss().backward()
    for (name, p), (_, q) in zip(one.named_parameters(), groups.named_parameters()):
        np.testing.assert_allclose(q.grad.numpy().reshape(p.grad.shape), p.grad.numpy(),
                                   rtol=1e-9, atol=1e-11, err_msg=name)


@pytest.mark.parametrize("approximation,alpha", MEMBERS + [("exact", None)])
def test_group_noise_gradient_equals_finite_differences(approximation, alpha):
    X, y, _, Z = data()
    groups = (X[:, 0] > 2.0).astype(int)
    if approximation == "exact":
        m = sg.GPR(X, y, kernel=se(), noise_variance=[0.02, 0.1], noise_groups=groups)
    else:
        m = sg.SGPR(X, y, kernel=se(), inducing_points=Z, approximation=approximation,
                    alpha=alpha, noise_variance=[0.02, 0.1], noise_groups=groups, chunk_size=11)
    m.zero_grad()
    m.training_loss().backward()
    raw = m.raw_noise_variance
    grad = raw.grad.detach().clone()
    base = raw.detach().clone()
    for i in range(2):
        h = 1e-6
        losses = []
        for sign in (1, -1):
            with torch.no_grad():
                raw.copy_(base)
                raw[i] += sign * h
                losses.append(float(m.training_loss()))
        with torch.no_grad():
            raw.copy_(base)
        assert float(grad[i]) == pytest.approx((losses[0] - losses[1]) / (2 * h), rel=1e-6)


def test_blocks_with_per_point_noise_equal_a_dense_evaluation():
    X, y, s2, Z = data()
    labels = np.random.default_rng(5).integers(0, 6, 60)
    m = sg.SGPR(X, y, kernel=se(), inducing_points=Z, approximation="pep", alpha=0.5,
                blocks=labels, noise_variance=s2, jitter=0.0, standardize_y=False)  # raw y
    Kff, Kuf = k_np(X, X), k_np(Z, X)
    Qff = Kuf.T @ np.linalg.solve(k_np(Z, Z), Kuf)
    Lam, pen = np.zeros((60, 60)), 0.0
    for b in range(6):
        i = np.flatnonzero(labels == b)
        D = (Kff - Qff)[np.ix_(i, i)]
        Lam[np.ix_(i, i)] = 0.5 * D + np.diag(s2[i])
        S = np.diag(1 / np.sqrt(s2[i]))
        pen += 0.5 * np.linalg.slogdet(np.eye(len(i)) + 0.5 * S @ D @ S)[1]
    assert m.log_marginal_likelihood() == pytest.approx(gauss(y, Qff + Lam) - pen, rel=1e-10)


def test_fitting_group_noise_finds_the_quiet_and_the_noisy_half():
    X, y, _, _ = data(n=200, seed=3)
    m = sg.SGPR(X, y, inducing_points=15, noise_groups=np.where(X[:, 0] > 2.0, "loud", "quiet"))
    m.fit(maxiter=300)
    quiet, loud = (m.noise_variance[m.noise_groups.index(g)] for g in ("quiet", "loud"))
    assert loud > 5.0 * quiet  # the generating noise: 0.2 against 0.01 (×0.5–1.5)


def test_known_noise_is_fixed_and_predictions_need_the_new_points_noise(tmp_path):
    X, y, s2, Z = data()
    m = sg.SGPR(X, y, inducing_points=Z, noise_variance=s2)
    m.fit(maxiter=20)
    np.testing.assert_allclose(m.noise_variance, s2, rtol=1e-12)  # frozen: known
    mean_f, var_f = m.predict(X[:4])
    with pytest.raises(ValueError, match="noise of the new points"):
        m.predict(X[:4], include_noise=True)
    mean, var = m.predict(X[:4], include_noise=True, noise_variance=[0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(var, var_f + [0.1, 0.2, 0.3, 0.4], rtol=1e-12)
    np.testing.assert_allclose(mean, mean_f)
    path = tmp_path / "m.pt"
    m.save(path, include_data=True)
    back = sg.load(path)
    assert back.log_marginal_likelihood() == pytest.approx(m.log_marginal_likelihood(), rel=1e-12)


def test_group_noise_predictions_and_persistence(tmp_path):
    X, y, _, Z = data()
    groups = np.where(X[:, 0] > 2.0, "b", "a")
    m = sg.GPR(X, y, kernel=se(), noise_variance=[0.01, 0.2], noise_groups=groups)
    _, var_f = m.predict(X[:3])
    _, var = m.predict(X[:3], include_noise=True, noise_groups=["a", "b", "a"])
    np.testing.assert_allclose(var - var_f, [0.01, 0.2, 0.01], rtol=1e-10)
    with pytest.raises(ValueError, match="unknown"):
        m.predict(X[:1], include_noise=True, noise_groups=["c"])
    path = tmp_path / "g.pt"
    m.save(path)
    back = sg.load(path)
    assert back.noise_groups == ["a", "b"]
    np.testing.assert_allclose(back.noise_variance, m.noise_variance)
    np.testing.assert_allclose(back.predict(X[:3])[0], m.predict(X[:3])[0], rtol=1e-12)


@pytest.mark.parametrize("kwargs,match", [
    (dict(noise_variance=np.full(5, 0.1)), "one value per data point"),
    (dict(noise_variance=np.r_[-1.0, np.full(59, 0.1)]), "noise_variance must be"),
    (dict(noise_groups=np.zeros(7)), "one label per data point"),
    (dict(noise_groups=np.zeros(60), noise_variance=[0.1, 0.2, 0.3]), "noise_variance must be"),
])
def test_bad_noise_arguments_are_named(kwargs, match):
    X, y, _, Z = data()
    with pytest.raises(ValueError, match=match):
        sg.SGPR(X, y, inducing_points=Z, **kwargs)


def test_the_noise_floor_is_checked_in_the_units_of_y():
    rng = np.random.default_rng(7)
    X = rng.uniform(0, 5, (50, 1))
    y = 1e-3 * np.sin(X[:, 0]) + 1e-4 * rng.normal(size=50)  # var(y) ≈ 5e-7
    # the floor 1e-6 holds for the standardised y: 5e-8 is above it there (it was refused)
    m = sg.SGPR(X, y, inducing_points=5, standardize_y=True, noise_variance=5e-8)
    assert m.noise_variance == pytest.approx(5e-8, rel=1e-12)
    floor = 1e-6 * float(np.std(y, ddof=1)) ** 2
    with pytest.raises(ValueError, match=f"at least {floor:.4g} in the units of y .*; got [^:]*$"):
        sg.SGPR(X, y, inducing_points=5, standardize_y=True, noise_variance=floor / 2)
    # a value at the floor, as a fit that ends there reads it, can be set back
    at_floor = sg.SGPR(X, y * 1e3, inducing_points=5, noise_variance=1e-6)
    at_floor.noise_variance = at_floor.noise_variance
    assert at_floor.noise_variance == pytest.approx(1e-6, rel=1e-12)
