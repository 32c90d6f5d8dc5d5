"""The spectral mixture kernel: a dense formula, the squared exponential as its one-component
zero-frequency case, its spectral density (Bochner), positive semi-definiteness, gradients,
the data-based start, and a sparse fit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import integrate

import sparsegp as sg
from sparsegp.kernels import kernel_from_config

from .fitting import fits_and_round_trips

rng = np.random.default_rng(5)
X = rng.normal(size=(7, 2))
X2 = rng.normal(size=(5, 2))
WEIGHTS = np.array([0.9, 0.4, 0.2])
MEANS = np.array([[0.2, 0.6], [1.1, 0.3], [0.05, 1.7]])
SCALES = np.array([[0.3, 0.2], [0.15, 0.5], [0.8, 0.1]])


def t(a):
    return torch.as_tensor(a, dtype=torch.float64)


def sm_dense(A, B, w, mu, s):
    """Σ_q w_q Π_d exp(−2π² τ_d² s_qd²) cos(2π τ_d μ_qd), pair by pair."""
    out = np.zeros((len(A), len(B)))
    for i, a in enumerate(A):
        for j, b in enumerate(B):
            tau = a - b
            out[i, j] = sum(w[q] * np.prod(np.exp(-2 * np.pi ** 2 * tau ** 2 * s[q] ** 2)
                                           * np.cos(2 * np.pi * tau * mu[q]))
                            for q in range(len(w)))
    return out


def test_matches_the_dense_formula():
    k = sg.kernels.SpectralMixture(weights=WEIGHTS, means=MEANS, scales=SCALES)
    assert k.num_mixtures == 3
    np.testing.assert_allclose(k.K(t(X), t(X2)).detach().numpy(),
                               sm_dense(X, X2, WEIGHTS, MEANS, SCALES), rtol=1e-11, atol=1e-13)
    K = k.K(t(X)).detach().numpy()
    np.testing.assert_allclose(K, sm_dense(X, X, WEIGHTS, MEANS, SCALES), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(np.diag(K), k.K_diag(t(X)).detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(np.diag(K), WEIGHTS.sum(), rtol=1e-14)


def test_one_value_per_component_serves_every_column():
    shared = sg.kernels.SpectralMixture(weights=WEIGHTS, means=MEANS[:, 0], scales=SCALES[:, 0])
    assert shared.means.shape == (3, 1)
    full = np.repeat(MEANS[:, :1], 2, 1), np.repeat(SCALES[:, :1], 2, 1)
    np.testing.assert_allclose(shared.K(t(X), t(X2)).detach().numpy(),
                               sm_dense(X, X2, WEIGHTS, *full), rtol=1e-11, atol=1e-13)


def test_one_component_at_zero_frequency_is_the_squared_exponential():
    # w exp(−2π² τ² s²) = SE with ℓ = 1/(2π s); means ~0 (the floor is 0: 1e-12 is allowed)
    s = np.array([0.3, 0.7])
    sm = sg.kernels.SpectralMixture(weights=[1.6], means=[[1e-12, 1e-12]], scales=[s])
    se = sg.kernels.SquaredExponential(lengthscale=1.0 / (2 * np.pi * s), variance=1.6)
    np.testing.assert_allclose(sm.K(t(X), t(X2)).detach().numpy(),
                               se.K(t(X), t(X2)).detach().numpy(), rtol=1e-12, atol=1e-14)
    # several components at zero frequency: a sum of squared exponentials
    sm2 = sg.kernels.SpectralMixture(weights=[1.0, 0.5], means=[1e-12, 1e-12], scales=[0.2, 0.9])
    se2 = (sg.kernels.SquaredExponential(lengthscale=1 / (2 * np.pi * 0.2), variance=1.0)
           + sg.kernels.SquaredExponential(lengthscale=1 / (2 * np.pi * 0.9), variance=0.5))
    np.testing.assert_allclose(sm2.K(t(X)).detach().numpy(), se2.K(t(X)).detach().numpy(),
                               rtol=1e-12, atol=1e-14)


def test_is_the_fourier_transform_of_a_mixture_of_gaussians():
    # 1-D: k(τ) = ∫ S(f) cos(2π f τ) df with S = Σ_q w_q [N(f; μ_q, s_q²) + N(f; −μ_q, s_q²)]/2
    w, mu, s = [0.7, 0.3], [0.4, 1.3], [0.1, 0.25]
    k = sg.kernels.SpectralMixture(weights=w, means=mu, scales=s)

    def density(f):
        return sum(wq * 0.5 * (np.exp(-0.5 * ((f - m) / sq) ** 2) + np.exp(-0.5 * ((f + m) / sq) ** 2))
                   / (sq * np.sqrt(2 * np.pi)) for wq, m, sq in zip(w, mu, s))

    for tau in (0.0, 0.3, 1.1, 2.7):
        value, _ = integrate.quad(lambda f, tau=tau: density(f) * np.cos(2 * np.pi * f * tau), -6, 6,
                                  limit=400, epsabs=1e-13)
        K = k.K(t([[tau]]), t([[0.0]])).item()
        assert K == pytest.approx(value, abs=1e-10)


def test_is_positive_semidefinite():
    g = np.random.default_rng(1)
    for _ in range(5):
        Q = int(g.integers(1, 5))
        k = sg.kernels.SpectralMixture(weights=g.uniform(0.1, 2.0, Q),
                                       means=g.uniform(0.0, 3.0, (Q, 3)),
                                       scales=g.uniform(0.05, 1.0, (Q, 3)))
        A = g.normal(size=(40, 3))
        K = k.K(t(np.r_[A, A[:3]])).detach()
        assert float((K - K.T).abs().max()) <= 1e-14 * float(K.diagonal().max())
        assert float(torch.linalg.eigvalsh(K).min()) >= -1e-10 * float(K.diagonal().max())


def test_gradients_match_finite_differences():
    k = sg.kernels.SpectralMixture(weights=WEIGHTS, means=MEANS, scales=SCALES)
    names = [name for name, _ in k.named_parameters()]
    raw = [p.detach().clone().requires_grad_() for _, p in k.named_parameters()]
    A, B = t(X[:5]).requires_grad_(), t(X2[:3]).requires_grad_()

    def evaluate(*values):
        params, (a, b) = dict(zip(names, values[:-2])), values[-2:]
        saved = {n: k._parameters[n] for n in params}
        try:
            k._parameters.update(params)
            return k.K(a, b), k.K(a), k.K_diag(a)
        finally:
            k._parameters.update(saved)

    assert torch.autograd.gradcheck(evaluate, (*raw, A, B), atol=1e-7, rtol=1e-6)


def test_unset_values_start_from_the_spread_of_the_data():
    # per column: range R and median gap g of the sorted distinct values; μ_q = (q + ½)/Q /(2g),
    # s = 1/R, w = σ²/Q — no random draw
    data = np.c_[np.linspace(0.0, 10.0, 41), np.r_[np.linspace(-1.0, 1.0, 40), 1.0]]
    k = sg.kernels.SpectralMixture(num_mixtures=4)
    k.initialise_from_data(t(data), 2.0)
    np.testing.assert_allclose(k.weights, [0.5] * 4, rtol=1e-12)
    gaps = np.array([0.25, 2.0 / 39])
    np.testing.assert_allclose(k.means, ((np.arange(4) + 0.5) / 4)[:, None] * (0.5 / gaps),
                               rtol=1e-9)
    np.testing.assert_allclose(k.scales, np.tile([1.0 / 10.0, 1.0 / 2.0], (4, 1)), rtol=1e-12)
    # given values stay
    kept = sg.kernels.SpectralMixture(weights=[1.0, 2.0], scales=[0.3, 0.4])
    kept.initialise_from_data(t(data), 5.0)
    np.testing.assert_allclose(kept.weights, [1.0, 2.0], rtol=1e-12)
    np.testing.assert_allclose(kept.scales, [[0.3], [0.4]], rtol=1e-12)
    assert kept.means.shape == (2, 2)


def test_config_round_trip_and_refusals():
    k = sg.kernels.SpectralMixture(weights=WEIGHTS, means=MEANS, scales=SCALES)
    cfg = k.config()
    assert cfg["type"] == "SpectralMixture" and cfg["args"]["num_mixtures"] == 3
    back = kernel_from_config(cfg)
    back.load_state_dict(k.state_dict())
    torch.testing.assert_close(back.K(t(X), t(X2)), k.K(t(X), t(X2)), rtol=0, atol=0)
    with pytest.raises(ValueError, match="number of components"):
        sg.kernels.SpectralMixture()
    with pytest.raises(ValueError, match="number of components"):
        sg.kernels.SpectralMixture(num_mixtures=2, weights=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="num_mixtures must be an integer"):
        sg.kernels.SpectralMixture(num_mixtures=0)
    with pytest.raises(ValueError, match="one value per component"):
        sg.kernels.SpectralMixture(num_mixtures=2, means=0.5)
    with pytest.raises(ValueError, match="means must be finite and greater than its floor 0"):
        sg.kernels.SpectralMixture(means=[0.0, 1.0])
    with pytest.raises(ValueError, match=r"X has 2 columns but the means have shape \(3, 3\)"):
        sg.kernels.SpectralMixture(means=np.ones((3, 3))).K(t(X))


def test_sgpr_fit_and_save(tmp_path):
    r = np.random.default_rng(2)
    A = np.sort(r.uniform(0.0, 10.0, 80))[:, None]
    y = np.sin(2 * np.pi * 0.8 * A[:, 0]) * np.exp(-0.05 * A[:, 0]) + 0.05 * r.standard_normal(80)
    fits_and_round_trips(sg.kernels.SpectralMixture(num_mixtures=3), A, y, tmp_path, 30, 300)


def _two_sinusoids(n=150, seed=0):
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0.0, 20.0, n))[:, None]
    y = (np.sin(2 * np.pi * 0.5 * x[:, 0]) + 0.6 * np.sin(2 * np.pi * 1.3 * x[:, 0])
         + 0.1 * rng.normal(size=n))
    return x, y


def test_from_data_puts_the_means_on_the_periodogram_peaks():
    x, y = _two_sinusoids()
    k = sg.kernels.SpectralMixture.from_data(x, y, 2)
    assert k.means.shape == (2, 1) and k.scales.shape == (2, 1)
    # to the periodogram's resolution 1/R (R ≈ 20, the inputs' range); measured 0.4985, 1.2988
    resolution = 1.0 / float(np.ptp(x))
    np.testing.assert_allclose(k.means[:, 0], [0.5, 1.3], atol=resolution)
    # peak heights ∝ amplitude²: 1 against 0.36; measured weight ratio 2.75
    assert 2.0 < k.weights[0] / k.weights[1] < 3.5
    assert 0.0 < k.scales.max() < 2 * resolution  # envelopes about as long as the data
    # a model's start rescales the weights to its signal variance, keeping their shares
    shares = k.weights / k.weights.sum()
    k.initialise_from_data(torch.as_tensor(x), 2.0)
    np.testing.assert_allclose(k.weights, 2.0 * shares, rtol=1e-12)


def test_from_data_reads_each_column_alone_and_fills_missing_peaks():
    rng = np.random.default_rng(1)
    X = rng.uniform(0.0, 30.0, (300, 2))
    y = np.sin(2 * np.pi * 0.4 * X[:, 0]) + np.sin(2 * np.pi * 1.1 * X[:, 1])
    k = sg.kernels.SpectralMixture.from_data(X, y, 3)
    assert k.means.shape == (3, 2)
    # each column's strongest peak is its own frequency (resolution 1/30)
    assert abs(k.means[0, 0] - 0.4) < 1 / 30 and abs(k.means[0, 1] - 1.1) < 1 / 30
    # a constant column has no spectrum: frequency ~0, scale 1
    flat = sg.kernels.SpectralMixture.from_data(np.c_[X[:, :1], np.ones(300)], y, 2)
    np.testing.assert_allclose(flat.scales[:, 1], 1.0)
    assert np.all(flat.means[:, 1] < 1e-5)


def test_from_data_refuses_bad_input():
    x, y = _two_sinusoids(20)
    with pytest.raises(ValueError, match="num_mixtures"):
        sg.kernels.SpectralMixture.from_data(x, y, 0)
    with pytest.raises(ValueError, match=r"y \[N\]"):
        sg.kernels.SpectralMixture.from_data(x, y[:-1], 2)
    bad = y.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="finite"):
        sg.kernels.SpectralMixture.from_data(x, bad, 2)
    with pytest.raises(ValueError, match="oversample"):
        sg.kernels.SpectralMixture.from_data(x, y, 2, oversample=0)


def test_a_regression_models_default_start_is_the_spectrum_and_beats_the_spread_start():
    # the same model and optimiser from the two starts: measured log marginal likelihood 25.6
    # from the spectrum (means 0.4999, 1.2993) against −186.7 from the spread of the inputs
    # (means 2.74, 2.98: stuck in a local optimum that calls the signal noise)
    x, y = _two_sinusoids()
    spread = sg.kernels.SpectralMixture(num_mixtures=2)
    spread.initialise_from_data(t(x), float(np.var(y)))  # given values: the model keeps them
    default = sg.kernels.SpectralMixture(num_mixtures=2)
    found, models = {}, {}
    for name, kernel in (("spectrum", default), ("spread", spread)):
        models[name] = model = sg.GPR(x, y, kernel=kernel)
        if name == "spectrum":  # started on the peaks, to the periodogram's resolution 1/R
            np.testing.assert_allclose(np.sort(model.kernel.means[:, 0]), [0.5, 1.3],
                                       atol=1.0 / float(np.ptp(x)))
        model.fit()
        found[name] = model.log_marginal_likelihood()
    assert found["spectrum"] > found["spread"] + 100.0
    assert found["spectrum"] > 20.0


def test_the_default_start_in_a_sum_and_on_large_data():
    """Inside a sum the spectral part starts from the targets too; on more rows than
    `SPECTRUM_ROWS` the periodogram reads a seeded subset of that many (its cost is
    quadratic in the rows)."""
    from sparsegp.kernels import spectral_mixture

    x, y = _two_sinusoids()
    model = sg.GPR(x, y, kernel=sg.kernels.SpectralMixture(2) + sg.kernels.SquaredExponential())
    np.testing.assert_allclose(np.sort(model.kernel.kernels[0].means[:, 0]), [0.5, 1.3],
                               atol=1.0 / float(np.ptp(x)))
    rows = []
    original = spectral_mixture._spectrum_start

    def counted(X, y, Q, oversample):
        rows.append(X.shape[0])
        return original(X, y, Q, oversample)

    rng = np.random.default_rng(3)
    X = rng.uniform(0.0, 20.0, (3 * spectral_mixture.SPECTRUM_ROWS, 1))
    Y = np.sin(2 * np.pi * 0.5 * X[:, 0])
    spectral_mixture._spectrum_start = counted
    try:
        big = sg.SGPR(X, Y, kernel=sg.kernels.SpectralMixture(1), inducing_points=20)
    finally:
        spectral_mixture._spectrum_start = original
    assert rows == [spectral_mixture.SPECTRUM_ROWS]
    assert abs(float(big.kernel.means[0, 0]) - 0.5) < 0.05


def test_the_periodogram_is_the_lomb_scargle_formula():
    """scipy's Lomb–Scargle against the formula written out (a dense evaluation)."""
    from sparsegp.kernels.spectral_mixture import _periodogram

    x, y = _two_sinusoids(60)
    y = y - y.mean()
    freqs = np.array([0.1, 0.5, 0.77, 1.3, 2.0])
    want = []
    for nu in freqs:
        w = 2 * np.pi * nu
        tau = np.arctan2(np.sin(2 * w * x[:, 0]).sum(), np.cos(2 * w * x[:, 0]).sum()) / (2 * w)
        c, s_ = np.cos(w * (x[:, 0] - tau)), np.sin(w * (x[:, 0] - tau))
        want.append(0.5 * ((c @ y) ** 2 / (c @ c) + (s_ @ y) ** 2 / (s_ @ s_)))
    np.testing.assert_allclose(_periodogram(x[:, 0], y, freqs), want, rtol=1e-10)


def test_a_model_with_a_spectral_mixture_prints():
    x, y = _two_sinusoids(40)
    model = sg.SGPR(x, y, kernel=sg.kernels.SpectralMixture(2), inducing_points=10)
    text = str(model)
    assert "kernel.means" in text and "kernel.scales" in text
    k = sg.kernels.SpectralMixture(weights=[1.0, 0.5], means=[[0.5, 1.0], [2.0, 3.0]],
                                   scales=[[0.1, 0.2], [0.3, 0.4]])
    assert repr(k) == ("SpectralMixture(weights=[1, 0.5], means=[[0.5, 1], [2, 3]], "
                       "scales=[[0.1, 0.2], [0.3, 0.4]])")
