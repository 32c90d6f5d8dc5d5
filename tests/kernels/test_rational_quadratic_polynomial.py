"""The rational quadratic and polynomial kernels: dense formulas, their limits and special
cases, positive semi-definiteness, gradients, and both in the exact and the sparse GP."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate

import sparsegp as sg
from sparsegp.kernels import kernel_from_config

rng = np.random.default_rng(4)
X = rng.normal(size=(7, 3))
X2 = rng.normal(size=(5, 3))
ELL = np.array([0.5, 1.3, 2.0])


def t(a):
    return torch.as_tensor(a, dtype=torch.float64)


def rq_dense(A, B, ell, variance, alpha):
    r2 = (((A[:, None, :] - B[None, :, :]) / ell) ** 2).sum(-1)
    return variance * (1.0 + r2 / (2.0 * alpha)) ** (-alpha)


def poly_dense(A, B, degree, variance, offset):
    return variance * (A @ B.T + offset) ** degree


# -- rational quadratic -------------------------------------------------------------------------
@pytest.mark.parametrize("ell", [0.8, ELL], ids=["scalar", "ard"])
@pytest.mark.parametrize("alpha", [0.3, 2.0, 40.0])
def test_rational_quadratic_matches_the_dense_formula(ell, alpha):
    k = sg.kernels.RationalQuadratic(lengthscale=ell, variance=1.7, alpha=alpha)
    assert k.ard == (np.ndim(ell) == 1)
    np.testing.assert_allclose(k.K(t(X), t(X2)).detach().numpy(),
                               rq_dense(X, X2, ell, 1.7, alpha), rtol=1e-12, atol=1e-13)
    K = k.K(t(X)).detach().numpy()
    np.testing.assert_allclose(K, rq_dense(X, X, ell, 1.7, alpha), rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(np.diag(K), k.K_diag(t(X)).detach().numpy())


def test_rational_quadratic_ard_flag_gives_one_lengthscale_per_input():
    k = sg.kernels.RationalQuadratic(ard=True)
    k.initialise_from_data(t(X), 1.0)
    assert k.ard and k.lengthscale.shape == (3,)
    assert (k.alpha, k.variance) == pytest.approx((1.0, 1.0))


@pytest.mark.parametrize("ell", [0.8, ELL], ids=["scalar", "ard"])
def test_rational_quadratic_tends_to_the_squared_exponential(ell):
    rq = sg.kernels.RationalQuadratic(lengthscale=ell, variance=1.3, alpha=1e8)
    se = sg.kernels.SquaredExponential(lengthscale=ell, variance=1.3)
    np.testing.assert_allclose(rq.K(t(X), t(X2)).detach().numpy(),
                               se.K(t(X), t(X2)).detach().numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(rq.K(t(X)).detach().numpy(), se.K(t(X)).detach().numpy(),
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 3.7])
def test_rational_quadratic_is_a_scale_mixture_of_squared_exponentials(alpha):
    # τ = 1/ℓ'² ~ Gamma(shape α, rate αℓ²): E[σ² exp(−τ d²/2)] = σ² (1 + d²/(2αℓ²))^(−α)
    ell, variance = 0.9, 1.4
    k = sg.kernels.RationalQuadratic(lengthscale=ell, variance=variance, alpha=alpha)
    rate = alpha * ell**2
    log_norm = alpha * math.log(rate) - math.lgamma(alpha)
    A, B = X[:4], X2[:4]
    K = k.K(t(A), t(B)).detach().numpy()
    for i in range(4):
        for j in range(4):
            d2 = float(((A[i] - B[j]) ** 2).sum())
            c = rate + 0.5 * d2
            # over s = log τ, density × exp(−τ d²/2) × dτ/ds: smooth (the density of τ itself is
            # unbounded at 0 for α < 1); outside the bounds it is below 1e-15 of the total
            value, _ = integrate.quad(lambda s, c=c: math.exp(log_norm + alpha * s - math.exp(s) * c),
                                      -40.0 / alpha, math.log(100.0 / c), epsabs=1e-14,
                                      epsrel=1e-13, limit=200)
            assert K[i, j] == pytest.approx(variance * value, rel=1e-8, abs=1e-10)


def test_rational_quadratic_config_round_trip_and_refusals():
    k = sg.kernels.RationalQuadratic(lengthscale=[0.7, 1.1, 1.9], variance=0.8, alpha=2.3)
    cfg = k.config()
    assert cfg["type"] == "RationalQuadratic" and cfg["args"]["alpha"] == pytest.approx(2.3)
    back = kernel_from_config(cfg)
    back.load_state_dict(k.state_dict())
    torch.testing.assert_close(back.K(t(X), t(X2)), k.K(t(X), t(X2)), rtol=0, atol=0)
    k.alpha = 0.4
    assert k.alpha == pytest.approx(0.4)
    with pytest.raises(ValueError, match="alpha"):
        sg.kernels.RationalQuadratic(alpha=0.0)
    with pytest.raises(ValueError, match="alpha"):
        sg.kernels.RationalQuadratic(alpha=[1.0, 2.0])


# -- polynomial ---------------------------------------------------------------------------------
@pytest.mark.parametrize("degree,offset", [(1, 0.5), (2, 1.0), (3, 0.2), (4, 0.0)])
def test_polynomial_matches_the_dense_formula(degree, offset):
    k = sg.kernels.Polynomial(degree=degree, variance=0.6, offset=offset)
    np.testing.assert_allclose(k.K(t(X), t(X2)).detach().numpy(),
                               poly_dense(X, X2, degree, 0.6, offset), rtol=1e-12, atol=1e-13)
    K = k.K(t(X)).detach().numpy()
    np.testing.assert_allclose(K, poly_dense(X, X, degree, 0.6, offset), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(k.K_diag(t(X)).detach().numpy(), np.diag(K), rtol=1e-14)


def test_polynomial_of_degree_one_without_offset_is_the_linear_kernel():
    k = sg.kernels.Polynomial(degree=1, variance=0.7, offset=0)
    lin = sg.kernels.Linear(variance=0.7)
    torch.testing.assert_close(k.K(t(X), t(X2)), lin.K(t(X), t(X2)), rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(k.K_diag(t(X)), lin.K_diag(t(X)), rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(k.K(t(X)).detach().numpy(), 0.7 * X @ X.T, rtol=1e-13)
    assert not k.has_offset and k.offset == 0.0 and k.parameter_names() == ["variance"]
    back = kernel_from_config(k.config())
    assert not back.has_offset and back.config() == k.config()


@pytest.mark.parametrize("degree,offset", [(1, 0.3), (2, 1.0), (3, 0.5), (2, 0.0), (5, 2.0)])
def test_polynomial_is_positive_semidefinite(degree, offset):
    k = sg.kernels.Polynomial(degree=degree, variance=1.3, offset=offset)
    for seed in range(3):
        A = np.random.default_rng(seed).normal(size=(30, 3))
        A = np.vstack([A, A[:2]])  # repeated inputs
        eig = np.linalg.eigvalsh(k.K(t(A)).detach().numpy())
        assert eig.min() >= -1e-10 * eig.max()


def test_polynomial_parameters_config_and_refusals():
    k = sg.kernels.Polynomial(degree=3, variance=0.4, offset=1.5)
    assert k.parameter_names() == ["variance", "offset"]
    k.offset, k.variance = 0.9, 2.0
    assert (k.offset, k.variance) == pytest.approx((0.9, 2.0))
    cfg = k.config()
    assert cfg == {"type": "Polynomial", "args": {"variance": pytest.approx(2.0),
                                                  "offset": pytest.approx(0.9), "degree": 3}}
    back = kernel_from_config(cfg)
    back.load_state_dict(k.state_dict())
    torch.testing.assert_close(back.K(t(X), t(X2)), k.K(t(X), t(X2)), rtol=0, atol=0)
    assert repr(k).startswith("Polynomial(degree=3, variance=2")
    for bad in (0, -1, 2.5, True, "2"):
        with pytest.raises(ValueError, match="degree"):
            sg.kernels.Polynomial(degree=bad)
    with pytest.raises(ValueError, match="offset"):
        sg.kernels.Polynomial(offset=-1.0)
    with pytest.raises(ValueError, match="offset=0"):
        sg.kernels.Polynomial(offset=0.0).offset = 1.0


def test_polynomial_unset_variance_starts_from_the_data():
    k = sg.kernels.Polynomial(degree=2, offset=1.0)
    k.initialise_from_data(t(X), 2.0)
    assert float(k.K_diag(t(X)).detach().mean()) == pytest.approx(2.0, rel=1e-12)


# -- gradients ----------------------------------------------------------------------------------
KERNELS = {
    "rq": lambda: sg.kernels.RationalQuadratic(lengthscale=0.9, variance=1.2, alpha=0.8),
    "rq-ard": lambda: sg.kernels.RationalQuadratic(lengthscale=ELL, variance=0.7, alpha=3.0),
    "poly": lambda: sg.kernels.Polynomial(degree=3, variance=0.5, offset=0.7),
    "poly-homogeneous": lambda: sg.kernels.Polynomial(degree=2, variance=1.1, offset=0),
}


@pytest.mark.parametrize("make", list(KERNELS.values()), ids=list(KERNELS))
def test_gradients_with_respect_to_every_parameter(make):
    k = make()
    names = [name for name, _ in k.named_parameters()]
    raw = [p.detach().clone().requires_grad_() for _, p in k.named_parameters()]
    A, B = t(X[:5]), t(X2[:3])

    def evaluate(*values):
        values = dict(zip(names, values))
        return _with(k, values, lambda: (k.K(A, B), k.K(A), k.K_diag(A)))

    assert torch.autograd.gradcheck(evaluate, tuple(raw), atol=1e-7, rtol=1e-6)


def _with(module, values, fn):
    # fn() with the module's parameters replaced by `values` (by name)
    saved = {name: module._parameters[name] for name in values}
    try:
        module._parameters.update(values)
        return fn()
    finally:
        module._parameters.update(saved)


# -- in the exact and the sparse GP -------------------------------------------------------------
def _data(n=30, seed=0):
    r = np.random.default_rng(seed)
    A = r.uniform(-1.5, 1.5, (n, 2))
    y = np.sin(2.0 * A[:, 0]) + 0.5 * A[:, 1] ** 2 + 0.05 * r.standard_normal(n)
    return A, y


def _polynomial_data(n=30, seed=1):
    r = np.random.default_rng(seed)
    A = r.uniform(-1.0, 1.0, (n, 2))
    y = 0.5 + A[:, 0] - 2.0 * A[:, 0] * A[:, 1] + 0.8 * A[:, 1] ** 2 + 0.02 * r.standard_normal(n)
    return A, y


MODEL_KERNELS = {
    "rq": (lambda: sg.kernels.RationalQuadratic(lengthscale=[0.7, 1.2], variance=1.1, alpha=1.5),
           _data),
    "poly": (lambda: sg.kernels.Polynomial(degree=2, variance=0.8, offset=1.0), _polynomial_data),
}


def _cubic_data():
    # a cubic in 3 inputs spans 20 monomials: Kuu at 12 points is non-singular
    A, _ = _polynomial_data(12)
    A = np.c_[A, np.random.default_rng(2).uniform(-1.0, 1.0, 12)]
    return A, np.sin(A).sum(1)


#: Z = X needs Kuu = K(X, X) of full rank: the polynomial kernel has finite rank
EXACT_KERNELS = {
    "rq": MODEL_KERNELS["rq"],
    "poly": (lambda: sg.kernels.Polynomial(degree=3, variance=0.8, offset=1.0), _cubic_data),
}


@pytest.mark.parametrize("key", list(EXACT_KERNELS))
def test_sgpr_with_inducing_points_at_the_data_is_the_exact_gp(key):
    make, data = EXACT_KERNELS[key]
    A, y = data()
    exact = sg.GPR(A, y, kernel=make(), noise_variance=0.05, standardize_y=False)
    sparse = sg.SGPR(A, y, kernel=make(), inducing_points=A.copy(), noise_variance=0.05,
                     jitter=0.0, standardize_y=False)
    assert sparse.log_marginal_likelihood() == pytest.approx(exact.log_marginal_likelihood(),
                                                             rel=1e-10, abs=1e-8)
    Anew = A[:4] + 0.1
    for a, b in zip(sparse.predict(Anew), exact.predict(Anew)):
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("model", ["GPR", "SGPR"])
@pytest.mark.parametrize("key", list(MODEL_KERNELS))
def test_fits_a_small_problem(key, model, tmp_path):
    make, data = MODEL_KERNELS[key]
    A, y = data()
    kernel = make()
    before = {name: value.detach().clone() for name, value, _, _ in kernel.named_values()}
    options = {"inducing_points": 10} if model == "SGPR" else {}
    m = getattr(sg, model)(A, y, kernel=kernel, noise_variance=0.1, **options)
    start = m.log_marginal_likelihood()
    result = m.fit(maxiter=200)
    assert result.success, result.message
    assert m.log_marginal_likelihood() > start + 1.0
    after = dict((name, value.detach()) for name, value, _, _ in kernel.named_values())
    assert all(not torch.equal(before[name], after[name]) for name in before)  # all learned
    mean, _ = m.predict(A)
    assert np.sqrt(np.mean((mean - y) ** 2)) < 0.2 * np.std(y)
    m.save(tmp_path / "model.pt", include_data=True)
    loaded = sg.load(tmp_path / "model.pt")
    assert type(loaded.kernel) is type(kernel)
    assert loaded.log_marginal_likelihood() == pytest.approx(m.log_marginal_likelihood(),
                                                             rel=1e-12)
    for a, b in zip(loaded.predict(A[:5]), m.predict(A[:5])):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
