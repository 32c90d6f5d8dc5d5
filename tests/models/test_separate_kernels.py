"""Independent outputs with a kernel and inducing variables each (`kernels.Separate`): SGPR
and SVGP against single-output models with those kernels, on the rows each output observes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg

SETTINGS = [(0.15, 1.0), (0.8, 0.5), (0.4, 2.0)]  # (lengthscale, variance) per output
NOISE = 0.02


def data(seed=0, N=50):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 1.0, (N, 1))
    Y = np.c_[np.sin(12 * X[:, 0]), X[:, 0] ** 2, np.cos(5 * X[:, 0])]
    Y += 0.1 * rng.standard_normal(Y.shape)
    Y[:9, 1] = np.nan
    Y[5:14, 2] = np.nan
    return X, Y


def kernels():
    return [sg.kernels.SquaredExponential(lengthscale=ls, variance=v) for ls, v in SETTINGS]


def inducing():
    return [np.linspace(0.05, 0.95, 7)[:, None], np.linspace(0.1, 0.9, 4)[:, None],
            np.linspace(0.0, 1.0, 5)[:, None]]


@pytest.mark.parametrize("approximation", ["vfe", "fitc"])
def test_sgpr_with_separate_kernels_is_the_sum_of_single_output_models(approximation):
    X, Y = data()
    # y as given: the sum over outputs holds in one unit of y (standardised, the outputs
    # share a pooled scale that the single-output models do not)
    m = sg.SGPR(X, Y, kernel=sg.kernels.Separate(kernels()), inducing_points=inducing(),
                noise_variance=NOISE, approximation=approximation, standardize_y=False)
    assert m.feature.blocks == [7, 4, 5]
    singles = []
    for p, (k, Z) in enumerate(zip(kernels(), inducing())):
        rows = ~np.isnan(Y[:, p])
        singles.append(sg.SGPR(X[rows], Y[rows, p], kernel=k, inducing_points=Z,
                               noise_variance=NOISE, approximation=approximation,
                               standardize_y=False))
    assert m.log_marginal_likelihood() == pytest.approx(
        sum(s.log_marginal_likelihood() for s in singles), rel=1e-12)
    assert m.upper_bound() == pytest.approx(sum(s.upper_bound() for s in singles), rel=1e-12)
    m.training_loss().backward()
    for s in singles:
        s.training_loss().backward()
    torch.testing.assert_close(dict(m.named_parameters())[_noise_name(m)].grad,
                               sum(dict(s.named_parameters())[_noise_name(s)].grad for s in singles))
    for p, s in enumerate(singles):
        for name, param in s.kernel.named_parameters():
            torch.testing.assert_close(dict(m.kernel.kernels[p].named_parameters())[name].grad,
                                       param.grad, rtol=1e-10, atol=1e-12)
    Xs = np.linspace(0, 1, 6)[:, None]
    mean, var = m.predict(Xs, include_noise=True)
    _, cov = m.predict(Xs, full_cov=True)
    for p, s in enumerate(singles):
        np.testing.assert_allclose(mean[:, p], s.predict(Xs)[0], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(var[:, p], s.predict(Xs, include_noise=True)[1], rtol=1e-12)
        np.testing.assert_allclose(cov[p], s.predict(Xs, full_cov=True)[1], rtol=1e-10, atol=1e-13)


def _noise_name(model):
    return next(n for n, _ in model.named_parameters() if n.endswith("noise_variance"))


def test_svgp_with_separate_kernels_equals_single_output_svgps_and_reaches_the_sgpr_optimum():
    X, Y = data(1)
    Z = np.linspace(0.05, 0.95, 6)[:, None]
    lik = sg.likelihoods.Gaussian(NOISE)
    # y as given in every model: the identities hold in one unit of y
    sv = sg.SVGP(X, Y, kernel=sg.kernels.Separate(kernels()), inducing_points=Z, likelihood=lik,
                 standardize_y=False)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        sv.q_mu.copy_(torch.randn(6, 3, generator=g, dtype=torch.float64))
        sv.q_sqrt.mul_(0.5)
    total = 0.0
    for p, k in enumerate(kernels()):
        rows = ~np.isnan(Y[:, p])
        single = sg.SVGP(X[rows], Y[rows, p], kernel=k, inducing_points=Z,
                         likelihood=sg.likelihoods.Gaussian(NOISE), standardize_y=False)
        with torch.no_grad():
            single.q_mu.copy_(sv.q_mu[:, p:p + 1])
            single.q_sqrt.copy_(sv.q_sqrt[p:p + 1])
        total += single.log_marginal_likelihood()
        np.testing.assert_allclose(sv.predict_f(X[:4])[1][:, p], single.predict_f(X[:4])[1],
                                   rtol=1e-12)
    assert sv.log_marginal_likelihood() == pytest.approx(total, rel=1e-12)
    # one natural-gradient step of size 1 puts q(u) at the collapsed optimum of SGPR
    sv.natural_gradient_step(1.0)
    reg = sg.SGPR(X, Y, kernel=sg.kernels.Separate(kernels()), inducing_points=Z,
                  noise_variance=NOISE, standardize_y=False)
    assert sv.log_marginal_likelihood() == pytest.approx(reg.log_marginal_likelihood(), rel=1e-10)
    for a, b in zip(sv.predict_f(X[:5]), reg.predict(X[:5])):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)


def test_identical_separate_kernels_equal_one_shared_kernel_for_a_heteroscedastic_likelihood():
    X, Y = data(2)
    y = Y[:, 0]
    k = sg.kernels.SquaredExponential(lengthscale=0.3, variance=1.0)
    Z = np.linspace(0.05, 0.95, 5)[:, None]
    lik = sg.likelihoods.HeteroscedasticGaussian
    shared = sg.SVGP(X, y, kernel=k, inducing_points=Z, likelihood=lik())
    separate = sg.SVGP(X, y, kernel=sg.kernels.Separate([k, k]), inducing_points=Z,
                       likelihood=lik())
    g = torch.Generator().manual_seed(1)
    mu = torch.randn(5, 2, generator=g, dtype=torch.float64)
    for model in (shared, separate):
        with torch.no_grad():
            model.q_mu.copy_(mu)
            model.q_sqrt.mul_(0.7)
    assert separate.log_marginal_likelihood() == pytest.approx(shared.log_marginal_likelihood(),
                                                               rel=1e-12)
    for a, b in zip(separate.predict_y(X[:4]), shared.predict_y(X[:4])):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_separate_models_save_and_load(tmp_path):
    X, Y = data(3)
    reg = sg.SGPR(X, Y, kernel=sg.kernels.Separate(kernels()), inducing_points=inducing(),
                  noise_variance=NOISE)
    sv = sg.SVGP(X, Y, kernel=sg.kernels.Separate(kernels()), inducing_points=5)
    Xs = np.linspace(0, 1, 4)[:, None]
    for i, model in enumerate((reg, sv)):
        model.save(tmp_path / f"m{i}.pt")
        back = sg.load(tmp_path / f"m{i}.pt")
        assert isinstance(back.kernel, sg.kernels.Separate)
        for a, b in zip(back.predict_f(Xs), model.predict_f(Xs)):
            np.testing.assert_array_equal(a, b)


def test_what_separate_kernels_cannot_take_is_refused():
    X, Y = data(4)
    with pytest.raises(ValueError, match="one column per kernel"):
        sg.SGPR(X, Y[:, :2], kernel=sg.kernels.Separate(kernels()), inducing_points=4)
    with pytest.raises(ValueError, match="no mixing"):
        sg.SGPR(X, Y, kernel=sg.kernels.Separate(kernels()), inducing_points=4,
                mixing=np.eye(3))
    with pytest.raises(ValueError, match="3 kernels for 2 latent"):
        sg.SVGP(X, Y, kernel=sg.kernels.Separate(kernels()), inducing_points=4,
                mixing=np.ones((3, 2)))
    with pytest.raises(ValueError, match="same number of inducing"):
        sg.SVGP(X, Y, kernel=sg.kernels.Separate(kernels()), inducing_points=inducing())
    with pytest.raises(ValueError, match="whiten=True"):
        sg.SVGP(X, Y, kernel=sg.kernels.Separate(kernels()), inducing_points=4, whiten=False)
    with pytest.raises(TypeError, match="no covariance of its own"):
        sg.kernels.Separate(kernels()).K(torch.zeros(2, 1, dtype=torch.float64))
