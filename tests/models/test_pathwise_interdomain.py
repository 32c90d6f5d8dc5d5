"""Pathwise samples over inter-domain inducing features: the prior's inducing variables are
the features' functionals of the same random-feature prior (`models/pathwise_features.py`)."""

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp import covariances as cov
from sparsegp.kernels.spectral import feature_map, spectral_samples
from sparsegp.models.core.pathwise_features import inducing_feature_map

RNG = np.random.default_rng(3)
X2 = RNG.uniform(-2, 2, (7, 2))
FEATURES = {
    "points": lambda: sg.features.InducingPoints(RNG.uniform(-2, 2, (5, 2))),
    "deltas": lambda: sg.features.SumOfDeltas(RNG.uniform(-2, 2, (5, 3, 2)),
                                              RNG.standard_normal((5, 3))),
    "multiscale": lambda: sg.features.Multiscale(RNG.uniform(-2, 2, (5, 2)),
                                                 RNG.uniform(0.2, 0.8, (5, 2))),
    "fourier-tf": lambda: sg.features.Fourier(RNG.standard_normal((5, 2)),
                                              RNG.uniform(0.3, 1.0, (5, 2)),
                                              centres=RNG.uniform(-2, 2, (5, 2)),
                                              phases=RNG.uniform(-1, 1, 5)),
    "fourier-f": lambda: sg.features.Fourier(RNG.standard_normal((5, 2)), 0.7,
                                             phases=RNG.uniform(-1, 1, 5)),
}


@pytest.mark.parametrize("name", list(FEATURES))
def test_the_features_functionals_of_random_features_estimate_kuf_and_kuu(name):
    # Ψᵀφ(X) and ΨᵀΨ are the random-feature estimates of Kuf and Kuu: error ~ 1/√R
    feature = FEATURES[name]().to(torch.float64)
    kernel = sg.kernels.SquaredExponential(lengthscale=[0.9, 1.3], variance=1.7)
    X = torch.as_tensor(X2)
    kuf, kuu = cov.Kuf(feature, kernel, X), cov.Kuu(feature, kernel)
    errors = []
    for R in (500, 50_000):
        g = torch.Generator().manual_seed(0)
        omega = spectral_samples(kernel, R, 2, g) / kernel.value("lengthscale")
        psi = inducing_feature_map(feature, omega, kernel.value("variance"))
        phi = feature_map(X, omega, kernel.value("variance"))
        scale = float(kuu.detach().abs().max())
        errors.append(max(float((psi.mT @ phi - kuf).detach().abs().max()),
                          float((psi.mT @ psi - kuu).detach().abs().max())) / scale)
    assert errors[1] < 0.02  # R = 50000: about 1/√R
    assert errors[1] < errors[0] / 3  # and shrinking as R grows


def test_a_feature_without_functionals_is_refused_clearly():
    omega = torch.ones(3, 9, dtype=torch.float64)
    patches = sg.features.InducingPatches(np.zeros((2, 9)))
    with pytest.raises(TypeError, match="predict_f_samples"):
        inducing_feature_map(patches, omega, torch.tensor(1.0, dtype=torch.float64))


def _model(feature):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (60, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(60)
    model = sg.SGPR(X, y, inducing_points=feature,
                    kernel=sg.kernels.SquaredExponential(lengthscale=0.8, variance=1.0),
                    noise_variance=0.1)
    return model


INTERDOMAIN = {
    "deltas": lambda: sg.features.SumOfDeltas(
        np.linspace(-3, 3, 8)[:, None, None] + np.array([-0.1, 0.1])[None, :, None],
        np.full((8, 2), 0.5)),
    "multiscale": lambda: sg.features.Multiscale(np.linspace(-3, 3, 10)[:, None], 0.3),
    "fourier-tf": lambda: sg.features.Fourier(np.zeros((10, 1)), 0.3,
                                              centres=np.linspace(-3, 3, 10)[:, None]),
}


@pytest.mark.parametrize("name", list(INTERDOMAIN))
def test_interdomain_pathwise_samples_match_the_posterior(name):
    from scipy import stats
    model = _model(INTERDOMAIN[name]())
    Xs = np.array([[-1.0], [0.0], [0.05], [2.5], [4.0]])
    S = 4000
    a = model.pathwise_samples(S, num_features=4000, seed=0)(Xs)
    b = model.predict_f_samples(Xs, S, seed=1)
    mean, cov_ = model.predict_f(Xs, full_cov=True)
    sd = np.sqrt(np.diag(cov_))
    assert np.all(np.abs(a.mean(0) - mean) < 5 * sd / np.sqrt(S) + 0.02 * sd)
    assert np.all(np.abs(a.var(0) / sd**2 - 1) < 0.1)
    corr = np.corrcoef(a.T)[1, 2]
    assert abs(corr - cov_[1, 2] / (sd[1] * sd[2])) < 0.03
    project = np.array([1.0, -2.0, 1.5, 0.5, -1.0])
    for u, v in [(a[:, i], b[:, i]) for i in range(5)] + [(a @ project, b @ project)]:
        assert stats.ks_2samp(u, v).pvalue > 1e-4


def test_a_wrong_prior_at_the_inducing_variables_fails_the_comparison():
    # the check above can fail: pairing the prior function with independent inducing
    # variables (not its own functionals) gives the wrong posterior variance
    model = _model(INTERDOMAIN["multiscale"]())
    paths = model.pathwise_samples(4000, num_features=4000, seed=0)
    g = torch.Generator().manual_seed(5)
    w = torch.randn(paths._w.shape, generator=g, dtype=torch.float64)
    paths._w, good = w, paths._w
    wrong = sg.models.core.pathwise._update(model.posterior(), lambda X: paths._prior(X) * 0 +
                                       (feature_map(X, paths._omega, paths._variance).mT @ good),
                                       paths._prior_inducing, 4000,
                                       torch.Generator().manual_seed(1))
    paths._w = good
    paths._cross, paths._v = wrong
    Xs = np.array([[0.0], [0.7]])
    _, var = model.predict_f(Xs)
    assert np.any(np.abs(paths(Xs).var(0) / var - 1) > 0.3)
