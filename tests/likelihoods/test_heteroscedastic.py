"""The heteroscedastic Gaussian likelihood: closed forms against 2-D quadrature and Monte
Carlo, and an SVGP that recovers input-dependent noise."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate

import sparsegp as sg
from sparsegp.likelihoods import HeteroscedasticGaussian, likelihood_from_config

MEAN = torch.tensor([[0.3, -1.0], [-1.2, 0.4], [2.0, -2.5]], dtype=torch.float64)
VAR = torch.tensor([[0.5, 0.3], [0.1, 0.9], [1.5, 0.05]], dtype=torch.float64)
Y = torch.tensor([0.1, -0.4, 3.1], dtype=torch.float64)


def tensor_gauss_hermite(fn, mean, var, n=60):
    """E over independent N(m_f, v_f) × N(m_g, v_g) of fn(f, g), by a tensor GH grid (numpy)."""
    x, w = np.polynomial.hermite.hermgauss(n)
    z, w = x * math.sqrt(2.0), w / math.sqrt(math.pi)
    out = []
    for (mf, mg), (vf, vg) in zip(mean.tolist(), var.tolist()):
        f = mf + math.sqrt(vf) * z[:, None]
        g = mg + math.sqrt(vg) * z[None, :]
        out.append((w[:, None] * w[None, :] * fn(f, g)).sum())
    return np.array(out)


def log_normal(y, mean, var):
    return -0.5 * np.log(2 * math.pi * var) - 0.5 * (y - mean) ** 2 / var


def test_variational_expectation_equals_two_dimensional_quadrature():
    lik = HeteroscedasticGaussian()
    closed = lik.variational_expectations(MEAN, VAR, Y).numpy()
    ref = [tensor_gauss_hermite(lambda f, g, y=y: log_normal(y, f, np.exp(g)), MEAN[i:i + 1],
                                VAR[i:i + 1])[0] for i, y in enumerate(Y.tolist())]
    np.testing.assert_allclose(closed, ref, rtol=1e-10)


def test_predictive_density_and_moments_against_quadrature_and_monte_carlo():
    lik = HeteroscedasticGaussian(quadrature_points=40)
    logp = lik.predict_log_density(MEAN, VAR, Y).numpy()
    ref = []  # adaptive 2-D integration over (f, g): the integrand is sharp in f at small e^g
    for (mf, mg), (vf, vg), y in zip(MEAN.tolist(), VAR.tolist(), Y.tolist()):
        def joint(f, g, y=y, mf=mf, mg=mg, vf=vf, vg=vg):
            return np.exp(log_normal(y, f, np.exp(g)) + log_normal(f, mf, vf)
                          + log_normal(g, mg, vg))
        val, _ = integrate.dblquad(joint, mg - 12 * math.sqrt(vg), mg + 12 * math.sqrt(vg),
                                   mf - 15 * math.sqrt(vf), mf + 15 * math.sqrt(vf),
                                   epsabs=1e-14, epsrel=1e-12)
        ref.append(math.log(val))
    np.testing.assert_allclose(logp, ref, rtol=1e-9)
    mean, var = lik.predict_mean_and_var(MEAN, VAR)
    rng = np.random.default_rng(0)
    S = 400_000
    f = MEAN[:, 0].numpy() + np.sqrt(VAR[:, 0].numpy()) * rng.standard_normal((S, 3))
    g = MEAN[:, 1].numpy() + np.sqrt(VAR[:, 1].numpy()) * rng.standard_normal((S, 3))
    y = f + np.exp(0.5 * g) * rng.standard_normal((S, 3))
    se_mean = y.std(0) / math.sqrt(S)
    assert (np.abs(mean.numpy() - y.mean(0)) < 5 * se_mean).all()
    np.testing.assert_allclose(var.numpy(), y.var(0), rtol=0.02)


@pytest.mark.parametrize("mf, vf, mg, vg, y", [
    (0.0, 0.1, -2.0, 9.0, 10.0),    # y far out: the integrand peaks in q(g)'s tail
    (0.0, 1e-4, -6.0, 16.0, 20.0),  # more so, with a sharp likelihood
    (0.0, 0.1, 3.0, 25.0, 100.0),
    (0.0, 0.01, -4.0, 6.0, 3.0),
    (0.0, 1e-4, -6.0, 16.0, 0.0),   # y at the mean: the integrand peaks at small e^g
])
def test_predictive_density_in_the_tails_against_dense_integration(mf, vf, mg, vg, y):
    """32 nodes placed by q(g) were 0.002–0.16 nats off here; centred on the integrand's peak
    they agree with a 400 001-point trapezoid over ±40 standard deviations of q(g) to 1e-5."""
    g = np.linspace(mg - 40 * math.sqrt(vg), mg + 40 * math.sqrt(vg), 400_001)
    log_h = log_normal(g, mg, vg) + log_normal(y, mf, vf + np.exp(g))
    top = log_h.max()
    ref = top + math.log(integrate.trapezoid(np.exp(log_h - top), g))
    got = HeteroscedasticGaussian().predict_log_density(
        torch.tensor([[mf, mg]], dtype=torch.float64), torch.tensor([[vf, vg]], dtype=torch.float64),
        torch.tensor([y], dtype=torch.float64))
    assert float(got[0]) == pytest.approx(ref, abs=1e-5)


def test_gradients_pass_gradcheck_and_power_ep_is_refused():
    lik = HeteroscedasticGaussian()
    m, v = MEAN.clone().requires_grad_(), VAR.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: lik.variational_expectations(a, b, Y), (m, v))
    assert torch.autograd.gradcheck(lambda a, b: lik.predict_log_density(a, b, Y), (m, v))
    with pytest.raises(TypeError, match="single-latent"):
        lik.tilted_moments(MEAN[:, 0], VAR[:, 0], Y, 0.5)
    rebuilt = likelihood_from_config(HeteroscedasticGaussian(quadrature_points=12).config())
    assert isinstance(rebuilt, HeteroscedasticGaussian) and rebuilt.quadrature_points == 12


def heteroscedastic_data(seed, N):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 1.0, (N, 1))
    sd = 0.03 + 0.6 * X[:, 0] ** 2
    return X, np.sin(6 * X[:, 0]) + sd * rng.standard_normal(N), sd


def test_svgp_learns_the_noise_as_a_function_of_the_inputs(tmp_path):
    X, y, _ = heteroscedastic_data(0, 200)
    Xt, yt, sd_t = heteroscedastic_data(1, 400)
    het = sg.SVGP(X, y, likelihood=HeteroscedasticGaussian(), inducing_points=12)
    het.fit(batch_size=200, epochs=250, lr=0.03, progress=False)
    hom = sg.SVGP(X, y, inducing_points=12)
    hom.fit()
    # the noise it predicts follows the truth where the homoscedastic model cannot
    _, var = het.predict_y(np.array([[0.1], [0.9]]))
    _, var_f = het.predict_f(np.array([[0.1], [0.9]]))
    noise_sd = np.sqrt(var - var_f[:, 0])
    truth = 0.03 + 0.6 * np.array([0.1, 0.9]) ** 2
    assert noise_sd[1] / noise_sd[0] > 5  # the truth's ratio is 15
    np.testing.assert_allclose(noise_sd, truth, rtol=0.5)
    nlpd_het = -het.predict_log_density(Xt, yt).mean()
    nlpd_hom = -hom.predict_log_density(Xt, yt).mean()
    assert nlpd_het < nlpd_hom - 0.2
    het.save(tmp_path / "het.pt")
    back = sg.load(tmp_path / "het.pt")
    for a, b in zip(back.predict_y(Xt[:5]), het.predict_y(Xt[:5])):
        np.testing.assert_array_equal(a, b)


def test_a_prior_mean_shifts_f_only_and_starts_at_the_mean_of_y(tmp_path):
    # identity: a constant c on f equals the zero-mean model of y − c (the log noise g unshifted)
    X, y, _ = heteroscedastic_data(2, 60)
    Z = X[::6]

    def model(targets, **kw):
        return sg.SVGP(X, targets, likelihood=HeteroscedasticGaussian(), inducing_points=Z,
                       kernel=sg.kernels.SquaredExponential(lengthscale=0.3, variance=1.0), **kw)

    shifted = model(y + 100.0, mean=sg.means.Constant(100.0))
    plain = model(y)
    with torch.no_grad():
        for m in (shifted, plain):
            m.q_mu.copy_(torch.linspace(-1, 1, m.q_mu.numel()).reshape(m.q_mu.shape))
    assert shifted.log_marginal_likelihood() == pytest.approx(plain.log_marginal_likelihood(),
                                                              rel=1e-12)
    (mean_s, var_s), (mean_p, var_p) = shifted.predict_f(X[:4]), plain.predict_f(X[:4])
    np.testing.assert_allclose(mean_s - mean_p, np.tile([100.0, 0.0], (4, 1)), atol=1e-10)
    np.testing.assert_allclose(var_s, var_p, rtol=1e-12)  # e^g was e^(g + 100) before
    np.testing.assert_allclose(shifted.predict_y(X[:4])[1], plain.predict_y(X[:4])[1], rtol=1e-12)
    # mean="constant" starts at the mean of y (it started at 0), and save/load keeps it on f
    assert model(y + 100.0, mean="constant").mean.constant.item() == pytest.approx(np.mean(y) + 100)
    shifted.save(tmp_path / "m.pt")
    for a, b in zip(sg.load(tmp_path / "m.pt").predict_y(X[:4]), shifted.predict_y(X[:4])):
        np.testing.assert_array_equal(a, b)
