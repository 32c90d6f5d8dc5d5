"""Tensors in, tensors out: every model's predictions in the caller's types, differentiable
with respect to the inputs and the parameters (checked against finite differences), the
predictive distributions, posterior samples and log predictive densities."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch.distributions import Bernoulli, MultivariateNormal, Normal

import sparsegp as sg

RNG = np.random.default_rng(3)
X = RNG.uniform(-3, 3, (30, 2))
Y = np.sin(X[:, 0]) + 0.5 * np.cos(X[:, 1]) + 0.1 * RNG.standard_normal(30)
LABELS = (Y > 0).astype(float)
XS = np.array([[0.3, -0.2], [1.1, 0.4], [-2.0, 1.5], [0.35, -0.25]])


def _fitted(model, **fit):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(**fit)
    return model


def _models():
    Z = X[::5]
    yield "GPR", lambda: sg.GPR(X, Y)
    yield "SGPR-VFE", lambda: sg.SGPR(X, Y, inducing_points=Z)
    yield "SGPR-FITC", lambda: sg.SGPR(X, Y, inducing_points=Z, approximation="fitc")
    yield "SGPR-PEP", lambda: sg.SGPR(X, Y, inducing_points=Z, approximation="pep", alpha=0.5)
    yield "SGPR-mean", lambda: sg.SGPR(X, Y + 3.0, inducing_points=Z, mean="constant",
                                       standardize_X=True)
    yield "SVGP", lambda: _fitted(sg.SVGP(X, Y, inducing_points=Z), maxiter=5)
    yield "SVGP-Bernoulli", lambda: _fitted(sg.SVGP(X, LABELS, inducing_points=Z,
                                                    likelihood=sg.likelihoods.Bernoulli()),
                                            epochs=3, batch_size=10)
    yield "SGPC", lambda: _fitted(sg.SGPC(X, LABELS, inducing_points=Z), maxiter=2)
    yield "RFF", lambda: sg.RFF(X, Y, num_features=20)
    yield "SSGP", lambda: sg.SSGP(X, Y, num_features=20)
    yield "KISSGP", lambda: sg.KISSGP(X, Y, grid_size=20)
    yield "GPLVM", lambda: sg.BayesianGPLVM(np.c_[Y, np.cos(Y), X], latent_dim=2,
                                            inducing_points=6)
    yield "GPSSM", lambda: sg.GPSSM(Y[:, None], state_dim=1, inducing_points=5,
                                    emission=[[1.0]])


MODELS = dict(_models())


def _inputs(name: str) -> np.ndarray:
    return XS[:, :1] if name == "GPSSM" else XS


def _build(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MODELS[name]()


@pytest.mark.parametrize("name", MODELS)
def test_numpy_in_numpy_out_and_tensor_in_the_same_values_as_tensors(name):
    model = _build(name)
    Xs = _inputs(name)
    mean, var = model.predict_f(Xs)
    assert isinstance(mean, np.ndarray) and isinstance(var, np.ndarray)
    tmean, tvar = model.predict_f(torch.as_tensor(Xs))
    assert isinstance(tmean, torch.Tensor) and tmean.dtype == torch.float64
    np.testing.assert_allclose(tmean.detach().numpy(), mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tvar.detach().numpy(), var, rtol=1e-10, atol=1e-12)
    # the input's dtype is the output's
    fmean, _ = model.predict_f(torch.as_tensor(Xs, dtype=torch.float32))
    assert fmean.dtype == torch.float32
    np.testing.assert_allclose(fmean.detach().numpy(), mean, rtol=1e-5, atol=1e-6)


def _scalar(model, Xs):
    mean, var = model.predict_f(Xs)
    return (mean * torch.linspace(1.0, 2.0, mean.numel(), dtype=mean.dtype).reshape(
        mean.shape)).sum() + (var.sqrt()).sum()


@pytest.mark.parametrize("name", MODELS)
def test_gradients_with_respect_to_the_inputs_match_finite_differences(name):
    model = _build(name)
    Xs = torch.as_tensor(_inputs(name)[:3]).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: _scalar(model, x), (Xs,), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", [n for n in MODELS if n != "KISSGP"])
def test_gradients_with_respect_to_every_parameter_match_finite_differences(name):
    model = _build(name)
    Xs = torch.as_tensor(_inputs(name)[:3])
    model.zero_grad()
    _scalar(model, Xs).backward()
    checked = 0
    for pname, p in model.named_parameters():
        if not p.requires_grad:
            continue
        grad = torch.zeros_like(p) if p.grad is None else p.grad.clone()
        flat = p.detach().reshape(-1)
        for i in range(min(flat.numel(), 2)):  # the first two entries of every parameter
            values = []
            for step in (1e-6, -1e-6):
                with torch.no_grad():
                    p.view(-1)[i] += step
                    values.append(float(_scalar(model, Xs)))
                    p.view(-1)[i] -= step
            fd = (values[0] - values[1]) / 2e-6
            assert abs(float(grad.reshape(-1)[i]) - fd) <= 1e-5 * (1 + abs(fd)), (pname, i)
            checked += 1
    assert checked > 0


def test_kissgp_differentiates_the_inputs_only_and_says_so_by_leaving_no_gradient():
    model = _build("KISSGP")
    Xs = torch.as_tensor(XS).requires_grad_(True)
    _scalar(model, Xs).backward()
    assert Xs.grad is not None and all(p.grad is None for p in model.parameters())


def test_no_grad_and_frozen_models_use_the_cached_posterior(monkeypatch):
    model = _build("SGPR-VFE")
    calls = []
    build = type(model)._build_posterior
    monkeypatch.setattr(type(model), "_build_posterior",
                        lambda self: calls.append(1) or build(self))
    Xs = torch.as_tensor(XS, dtype=torch.float64)
    model.predict_f(XS)
    model.predict_f(XS)
    with torch.no_grad():
        model.predict_f(Xs)
    assert len(calls) == 1  # numpy and no_grad tensors read the cache
    model.predict_f(Xs)  # grad mode, parameters that require grad: built with the graph
    assert len(calls) == 2
    model.requires_grad_(False)
    x = Xs.clone().requires_grad_(True)
    mean, _ = model.predict_f(x)
    mean.sum().backward()
    assert len(calls) == 2 and x.grad is not None


def test_predictions_in_the_users_units_with_standardisation_and_gradients():
    model = sg.SGPR(X * 1e3, Y * 50 + 7, inducing_points=X[::5] * 1e3, standardize_X=True,
                    standardize_y=True)
    mean, var = model.predict_y(XS * 1e3)
    x = torch.as_tensor(XS * 1e3).requires_grad_(True)
    tmean, tvar = model.predict_y(x)
    np.testing.assert_allclose(tmean.detach().numpy(), mean, rtol=1e-10)
    np.testing.assert_allclose(tvar.detach().numpy(), var, rtol=1e-10)
    assert torch.autograd.gradcheck(lambda z: model.predict_y(z)[0].sum(), (x[:2],), eps=1e-3,
                                    atol=1e-5)


# -- predictive distributions -------------------------------------------------------------
@pytest.mark.parametrize("name", ["GPR", "SGPR-VFE", "SVGP", "RFF", "GPLVM"])
def test_predictive_distributions_carry_the_predicted_moments(name):
    model = _build(name)
    Xs = _inputs(name)
    mean, var = model.predict_f(Xs)
    d = model.predictive(Xs)
    assert isinstance(d, Normal)
    np.testing.assert_allclose(d.mean.numpy(), mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(d.variance.numpy(), var, rtol=1e-10, atol=1e-14)
    _, cov = model.predict_f(Xs, full_cov=True)
    joint = model.predictive(Xs, full_cov=True)
    assert isinstance(joint, MultivariateNormal)
    cov = cov if cov.ndim == 3 else cov[None]
    joint_cov = joint.covariance_matrix.numpy()
    joint_cov = joint_cov if joint_cov.ndim == 3 else joint_cov[None]
    scale = np.abs(cov).max()
    np.testing.assert_allclose(joint_cov, cov, atol=1e-8 * scale)
    ymean, yvar = model.predict_y(Xs)
    observed = model.predictive(Xs, observed=True)
    np.testing.assert_allclose(observed.variance.numpy(), yvar, rtol=1e-10)
    np.testing.assert_allclose(observed.mean.numpy(), ymean, rtol=1e-12, atol=1e-14)


def test_the_log_probability_of_the_observed_predictive_is_predict_log_density():
    model = _build("SGPR-FITC")
    y = np.array([0.1, -0.3, 0.7, 0.0])
    lp = model.predictive(XS, observed=True).log_prob(torch.as_tensor(y)).numpy()
    np.testing.assert_allclose(model.predict_log_density(XS, y), lp, rtol=1e-12)
    mean, var = model.predict_y(XS)
    dense = -0.5 * np.log(2 * np.pi * var) - 0.5 * (y - mean) ** 2 / var
    np.testing.assert_allclose(lp, dense, rtol=1e-12)


def test_tensor_predictive_is_differentiable_with_rsample():
    model = _build("SGPR-VFE")
    x = torch.as_tensor(XS).requires_grad_(True)
    d = model.predictive(x, full_cov=True)
    d.rsample((4,), ).sum().backward()
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())


@pytest.mark.parametrize("name", ["SGPC", "SVGP-Bernoulli"])
def test_classifiers_give_label_distributions_and_log_densities(name):
    model = _build(name)
    p = model.predict_proba(XS)
    d = model.predictive(XS, observed=True)
    assert isinstance(d, Bernoulli)
    np.testing.assert_allclose(d.probs.numpy(), p, rtol=1e-12)
    labels = np.array([1.0, 0.0, 1.0, 1.0])
    expected = np.where(labels == 1, np.log(p), np.log1p(-p))
    np.testing.assert_allclose(model.predict_log_density(XS, labels), expected, rtol=1e-9)
    np.testing.assert_array_equal(model.predict(XS), (p > 0.5).astype(int))


def test_predict_means_labels_for_every_classifier_in_the_training_labels_convention():
    signed = np.where(LABELS > 0, 1.0, -1.0)
    for model in (sg.SGPC(X, signed, inducing_points=X[::5]),
                  sg.SVGP(X, signed, inducing_points=X[::5],
                          likelihood=sg.likelihoods.Bernoulli())):
        labels = model.predict(XS)
        assert set(np.unique(labels)) <= {-1, 1}
        p = model.predict_proba(XS)
        np.testing.assert_array_equal(labels, np.where(p > 0.5, 1, -1))
    multi = sg.SVGP(X, (Y > 0).astype(int) + (Y > 0.5), inducing_points=X[::5],
                    likelihood=sg.likelihoods.MultiClass(3))
    np.testing.assert_array_equal(multi.predict(XS), multi.predict_proba(XS).argmax(1))
    with pytest.raises(ValueError, match="labels"):
        multi.predict(XS, include_noise=True)


# -- samples ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["GPR", "SGPR-FITC", "SVGP", "SSGP", "GPLVM"])
def test_sample_moments_match_the_predicted_ones_within_monte_carlo_error(name):
    model = _build(name)
    Xs = _inputs(name)
    S = 20000
    samples = model.predict_f_samples(Xs, S, seed=1)
    mean, cov = model.predict_f(Xs, full_cov=True)
    if samples.ndim == 2:
        samples, mean, cov = samples[..., None], mean[:, None], cov[None]
    for p in range(samples.shape[2]):
        sd = np.sqrt(np.diag(cov[p]))
        z = (samples[:, :, p].mean(0) - mean[:, p]) / (sd / np.sqrt(S))
        assert np.all(np.abs(z) < 5), z
        emp = np.cov(samples[:, :, p].T)
        # the sampling error of a covariance entry is about (sd_i sd_j)·√(2/S)
        assert np.all(np.abs(emp - cov[p]) < 6 * np.outer(sd, sd) * np.sqrt(2 / S) + 1e-9)
    # marginal samples have the marginal variances
    marginal = model.predict_f_samples(Xs, S, full_cov=False, seed=2)
    _, var = model.predict_f(Xs)
    var = var if var.ndim == 2 else var[:, None]
    marginal = marginal if marginal.ndim == 3 else marginal[..., None]
    assert np.all(np.abs(marginal.var(0) / var - 1) < 6 * np.sqrt(2 / S))


def test_samples_are_reproducible_with_a_seed_and_differentiable_for_tensors():
    model = _build("SGPR-VFE")
    a = model.predict_f_samples(XS, 3, seed=7)
    b = model.predict_f_samples(XS, 3, seed=torch.Generator().manual_seed(7))
    np.testing.assert_array_equal(a, b)
    assert a.shape == (3, 4)
    x = torch.as_tensor(XS).requires_grad_(True)
    s = model.predict_f_samples(x, 2, seed=7)
    np.testing.assert_allclose(s.detach().numpy(), a[:2], rtol=1e-12)
    s.sum().backward()
    assert x.grad is not None and any(p.grad is not None for p in model.parameters())
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="num_samples"):
            model.predict_f_samples(XS, bad)


def test_multi_output_samples_and_distributions_have_an_output_axis():
    Yp = np.c_[Y, np.cos(X[:, 1])]
    model = sg.SGPR(X, Yp, inducing_points=X[::5])
    s = model.predict_f_samples(XS, 5, seed=0)
    assert s.shape == (5, 4, 2)
    d = model.predictive(XS)
    assert d.batch_shape == (4, 2)
    joint = model.predictive(XS, full_cov=True)
    assert joint.batch_shape == (2,) and joint.event_shape == (4,)


def test_predict_log_density_on_every_regression_model_is_the_gaussian_of_predict_y():
    y = np.array([0.1, -0.3, 0.7, 0.0])
    for name in ("GPR", "SGPR-VFE", "SVGP", "RFF", "SSGP", "KISSGP"):
        model = _build(name)
        mean, var = model.predict_y(XS)
        dense = -0.5 * np.log(2 * np.pi * var) - 0.5 * (y - mean) ** 2 / var
        np.testing.assert_allclose(model.predict_log_density(XS, y), dense, rtol=1e-9,
                                   err_msg=name)
    with pytest.raises(ValueError, match="ynew"):
        _build("GPR").predict_log_density(XS, y[:3])
    lvm = _build("GPLVM")
    out = np.c_[Y, np.cos(Y), X][:4]
    mean, var = lvm.predict_y(XS)
    dense = -0.5 * np.log(2 * np.pi * var) - 0.5 * (out - mean) ** 2 / var
    np.testing.assert_allclose(lvm.predict_log_density(XS, out), dense, rtol=1e-9)


# -- pathwise samples -----------------------------------------------------------------------
def _pathwise_case(name):
    rng = np.random.default_rng(0)
    X1 = rng.uniform(-3, 3, (40, 1))
    y1 = np.sin(2 * X1[:, 0]) + 0.1 * rng.standard_normal(40)
    model = {"GPR": lambda: sg.GPR(X1, y1 + 5.0),
             "SGPR": lambda: _fitted(sg.SGPR(X1, y1, inducing_points=X1[::4], mean="constant"),
                                     maxiter=50),
             "SVGP": lambda: _fitted(sg.SVGP(X1, y1, inducing_points=X1[::4]), maxiter=30),
             "SGPC": lambda: _fitted(sg.SGPC(X1, (y1 > 0).astype(float),
                                             inducing_points=X1[::4]), maxiter=2)}[name]()
    return model


# Squared exponential: its Gaussian spectral density estimates the covariance of close points
# well. (Matérn kernels' heavy-tailed densities need far more features near the data, where
# the posterior variance is small: documented in `models/pathwise.py`.)
@pytest.mark.parametrize("name", ["GPR", "SGPR", "SVGP", "SGPC"])
def test_pathwise_samples_match_exact_joint_samples(name):
    from scipy import stats
    model = _pathwise_case(name)
    Xs = np.array([[-1.0], [0.0], [0.05], [2.5], [5.0]])  # in the data, between, beyond
    S = 4000
    paths = model.pathwise_samples(S, num_features=4000, seed=0)
    a = paths(Xs)
    assert a.shape == (S, 5)
    np.testing.assert_array_equal(paths(Xs), a)  # the same functions at every call
    np.testing.assert_allclose(paths(Xs[2:3])[:, 0], a[:, 2], rtol=1e-9, atol=1e-12)  # one point
    b = model.predict_f_samples(Xs, S, seed=1)
    mean, cov = model.predict_f(Xs, full_cov=True)
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(a.mean(0) - mean) < 5 * sd / np.sqrt(S) + 0.02 * sd)
    # variances: Monte Carlo error √(2/S) ≈ 2 %, plus the random features' ≈ 1/√R
    assert np.all(np.abs(a.var(0) / sd**2 - 1) < 0.1)
    corr = np.corrcoef(a.T)[1, 2]  # two close points stay correlated as the posterior says
    assert abs(corr - cov[1, 2] / (sd[1] * sd[2])) < 0.03
    # the two-sample statistic: each marginal, and a projection across the points
    project = np.array([1.0, -2.0, 1.5, 0.5, -1.0])
    for u, v in [(a[:, i], b[:, i]) for i in range(5)] + [(a @ project, b @ project)]:
        assert stats.ks_2samp(u, v).pvalue > 1e-4


def test_pathwise_without_the_update_would_fail_the_two_sample_statistic():
    # the check above can fail: the prior alone (no Matheron update) is far from the posterior
    from scipy import stats
    model = _pathwise_case("SGPR")
    paths = model.pathwise_samples(2000, num_features=2000, seed=0)
    paths._v = paths._v * 0.0
    Xs = np.array([[0.0]])
    prior_only = paths(Xs)[:, 0]
    exact = model.predict_f_samples(Xs, 2000, seed=1)[:, 0]
    assert stats.ks_2samp(prior_only, exact).pvalue < 1e-6


def test_pathwise_samples_are_differentiable_and_refuse_what_they_cannot_do():
    model = _pathwise_case("SGPR")
    paths = model.pathwise_samples(3, seed=2)
    x = torch.tensor([[0.3], [1.0]], dtype=torch.float64, requires_grad=True)
    f = paths(x)
    assert isinstance(f, torch.Tensor) and f.shape == (3, 2)
    f.sum().backward()
    h = 1e-6
    fd = (paths(np.array([[0.3 + h], [1.0]])) - paths(np.array([[0.3 - h], [1.0]])))[:, 0] / (2 * h)
    np.testing.assert_allclose(x.grad[0, 0].item(), fd.sum(), rtol=1e-5)
    np.testing.assert_array_equal(model.pathwise_samples(3, seed=2)(np.array([[0.3]])),
                                  paths(np.array([[0.3]])))
    matern = sg.SGPR(X, Y, inducing_points=X[::5], kernel=sg.kernels.Matern32())
    mean = matern.pathwise_samples(4000, seed=0)(XS).mean(0)  # the mean is the update's
    _, var = matern.predict_f(XS)
    assert np.all(np.abs(mean - matern.predict_f(XS)[0]) < 6 * np.sqrt(var / 4000) + 0.05)
    with pytest.raises(TypeError, match="spectral density"):
        sg.SGPR(X, Y, inducing_points=X[::5],
                kernel=sg.kernels.Periodic()).pathwise_samples(2)
    with pytest.raises(ValueError, match="one latent function"):
        sg.SGPR(X, np.c_[Y, Y], inducing_points=X[::5]).pathwise_samples(2)
    with pytest.raises(ValueError, match="num_features"):
        model.pathwise_samples(2, num_features=0)


def test_sgpc_under_a_likelihood_that_does_not_classify_predicts_moments_not_labels():
    model = sg.SGPC(X, Y, inducing_points=X[::5], likelihood=sg.likelihoods.Gaussian(0.1))
    mean, var = model.predict(XS)  # as every model's predict under a regression likelihood
    np.testing.assert_array_equal(mean, model.predict_f(XS)[0])
    with pytest.raises(TypeError, match="predict_proba needs a classification likelihood"):
        model.predict_proba(XS)
    d = model.predictive(XS, observed=True)
    ymean, yvar = model.predict_y(XS)
    np.testing.assert_allclose(d.variance.numpy(), yvar, rtol=1e-12)
    with pytest.raises(ValueError, match="predict_y"):
        sg.SGPC(X, np.round(np.exp(Y)), inducing_points=X[::5],
                likelihood=sg.likelihoods.Poisson()).predictive(XS, observed=True)


@pytest.mark.parametrize("build", [
    lambda: sg.SVGP(X, Y, inducing_points=X[::5], likelihood=sg.likelihoods.Gaussian(0.1)),
    lambda: sg.SGPC(X, LABELS, inducing_points=X[::5]),
])
def test_parameter_gradients_are_finite_where_q_is_the_prior(build):
    # q(v) = the prior (S = I): the folded operators' eigendecomposition of I − S is
    # degenerate there, so a posterior that keeps the graph must not differentiate through it
    model = build()
    Xs = torch.as_tensor(XS[:3])
    model.zero_grad()
    _scalar(model, Xs).backward()
    for name, p in model.named_parameters():
        if p.grad is not None:
            assert bool(torch.isfinite(p.grad).all()), name
    p = model.kernel.raw_variance
    with torch.no_grad():
        p += 1e-6
        up = float(_scalar(model, Xs))
        p -= 2e-6
        down = float(_scalar(model, Xs))
        p += 1e-6
    assert float(p.grad) == pytest.approx((up - down) / 2e-6, rel=1e-5, abs=1e-8)
