"""Random Fourier features and the sparse spectrum GP against a dense numpy evaluation of
Bayesian linear regression on the same features (docs/math.md §6):

  φ(x) = √(σ²/R)[cos(ωᵀx), sin(ωᵀx)],  log p(y) = log N(y; 0, ΦΦᵀ + σ_n²I),
  q(w) = N(S Φᵀy/σ_n², S),  S = (ΦᵀΦ/σ_n² + I)⁻¹,  f* ~ N(φ*ᵀm, φ*ᵀSφ*);

and the spectral draws against the kernels they approximate (ΦΦᵀ → K as R grows).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.kernels.spectral import feature_map, spectral_samples

pytestmark = pytest.mark.usefixtures("quiet_model_warnings")
LOG2PI = np.log(2.0 * np.pi)


def data(n=80, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, 2))
    return X, np.sin(2 * X[:, 0]) * X[:, 1] + 0.1 * rng.standard_normal(n)


def dense(m, X, y, Xs):
    """Evidence and latent predictive of BLR on the model's own features, in numpy."""
    omega = m.frequencies
    s2f, s2n = float(m.kernel.variance), float(m.noise_variance)
    R = omega.shape[0]

    def phi(A):
        P = A @ omega.T
        return np.sqrt(s2f / R) * np.hstack([np.cos(P), np.sin(P)])

    Phi = phi(X)
    C = Phi @ Phi.T + s2n * np.eye(len(y))
    evidence = (-0.5 * len(y) * LOG2PI - 0.5 * np.linalg.slogdet(C)[1]
                - 0.5 * y @ np.linalg.solve(C, y))
    S = np.linalg.inv(Phi.T @ Phi / s2n + np.eye(2 * R))
    mw = S @ Phi.T @ y / s2n
    Ps = phi(Xs)
    return evidence, Ps @ mw, np.einsum("nk,kl,nl->n", Ps, S, Ps)


@pytest.mark.parametrize("cls", [sg.RFF, sg.SSGP])
@pytest.mark.parametrize("kernel", [sg.kernels.SquaredExponential, sg.kernels.Matern32])
def test_evidence_and_predictions_equal_dense_bayesian_linear_regression(cls, kernel):
    X, y = data()
    m = cls(X, y, kernel=kernel(lengthscale=0.8, variance=1.3), num_features=15,
            noise_variance=0.05, chunk_size=23, standardize_y=False)  # the reference's raw y
    Xs = np.random.default_rng(2).uniform(-2, 2, (7, 2))
    evidence, mean, var = dense(m, X, y, Xs)
    assert m.log_marginal_likelihood() == pytest.approx(evidence, rel=1e-11)
    pm, pv = m.predict(Xs)
    np.testing.assert_allclose(pm, mean, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(pv, var, rtol=1e-9, atol=1e-12)
    _, pvy = m.predict(Xs, include_noise=True)
    np.testing.assert_allclose(pvy - pv, 0.05, rtol=1e-9)
    _, cov = m.predict(Xs, full_cov=True)
    np.testing.assert_allclose(np.diag(cov), var, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kernel", [sg.kernels.SquaredExponential, sg.kernels.Matern12,
                                    sg.kernels.Matern32, sg.kernels.Matern52])
def test_spectral_draws_approximate_their_kernel(kernel):
    # φ(x)ᵀφ(x') is an average of R bounded terms with mean k(x, x'): error O(σ²/√R)
    k = kernel(lengthscale=torch.tensor([0.7, 1.6], dtype=torch.float64), variance=2.0)
    X = torch.as_tensor(data(n=30)[0])
    eps = spectral_samples(k, 40000, 2, torch.Generator().manual_seed(0))
    Phi = feature_map(X, eps / k.value("lengthscale"), k.value("variance")).detach()
    K = k.K(X).detach()
    assert float((Phi.mT @ Phi - K).abs().max()) < 0.05 * 2.0
    np.testing.assert_allclose((Phi * Phi).sum(0).numpy(), 2.0, rtol=1e-12)  # ‖φ‖² = σ²


@pytest.mark.parametrize("cls", [sg.RFF, sg.SSGP])
def test_gradients_equal_finite_differences_and_do_not_depend_on_chunks(cls):
    X, y = data()
    grads = []
    for chunk in (None, 9):
        m = cls(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=0.8), num_features=10,
                noise_variance=0.05, chunk_size=chunk, mean="constant")
        m.zero_grad()
        m.training_loss().backward()
        grads.append({n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None})
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-10, atol=1e-12)
    for name, p in m.named_parameters():
        if p.grad is None:
            continue
        base = p.detach().clone()
        flat = base.reshape(-1)
        for i in range(min(3, flat.numel())):
            h = 1e-6
            losses = []
            for sign in (1, -1):
                step = torch.zeros_like(flat)
                step[i] = sign * h
                with torch.no_grad():
                    p.copy_((flat + step).reshape(base.shape))
                    losses.append(float(m.training_loss()))
            with torch.no_grad():
                p.copy_(base)
            fd = (losses[0] - losses[1]) / (2 * h)
            assert float(grads[0][name].reshape(-1)[i]) == pytest.approx(fd, rel=1e-5, abs=1e-6)


def test_ssgp_trains_its_frequencies_and_rff_keeps_its_draws():
    X, y = data(n=120)
    rff = sg.RFF(X, y, num_features=10, seed=3)
    eps = rff.basis.epsilon.clone()
    rff.fit(maxiter=30)
    torch.testing.assert_close(rff.basis.epsilon, eps)  # fixed draws, rescaled by ℓ
    ssgp = sg.SSGP(X, y, num_features=10, seed=3)
    start = ssgp.frequencies.copy()
    before = ssgp.log_marginal_likelihood()
    ssgp.fit(maxiter=30)
    assert ssgp.log_marginal_likelihood() > before
    assert np.abs(ssgp.frequencies - start).max() > 1e-3


def test_diagnostics_say_it_is_not_a_bound_and_warn_when_features_outnumber_data(tmp_path):
    X, y = data(n=40)
    m = sg.SSGP(X, y, num_features=30)
    rep = m.diagnostics()
    assert "not a bound" in rep.warnings[0] and any("interpolate" in w for w in rep.warnings)
    rff = sg.RFF(X, y, num_features=5, noise_variance=0.05)
    rep = rff.diagnostics()
    assert rep.exact is not None and "exact GP" in str(rep)
    with pytest.raises(TypeError, match="takes no options; got gap_per_point"):
        rff.diagnostics(gap_per_point=0.1)  # not ignored in silence
    path = tmp_path / "rff.pt"
    rff.save(path)
    back = sg.load(path)
    np.testing.assert_allclose(back.predict(X[:5])[0], rff.predict(X[:5])[0], rtol=1e-13)
    np.testing.assert_allclose(back.frequencies, rff.frequencies)


def test_a_constant_mean_is_the_zero_mean_model_on_shifted_targets():
    X, y = data()
    # y as given: the constant 4.0 is in the units of y
    a = sg.RFF(X, y + 4.0, num_features=10, noise_variance=0.05, mean=sg.means.Constant(4.0),
               standardize_y=False)
    b = sg.RFF(X, y, num_features=10, noise_variance=0.05, standardize_y=False)
    assert a.log_marginal_likelihood() == pytest.approx(b.log_marginal_likelihood(), rel=1e-12)
    np.testing.assert_allclose(a.predict(X[:4])[0], b.predict(X[:4])[0] + 4.0, rtol=1e-12)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(kernel=sg.kernels.Periodic()), TypeError, "spectral density"),
    (dict(num_features=0), ValueError, "num_features"),
    (dict(num_features=2.5), ValueError, "num_features"),
])
def test_bad_arguments_are_named(kwargs, error, match):
    X, y = data()
    with pytest.raises(error, match=match):
        sg.RFF(X, y, **kwargs)


@pytest.mark.parametrize("approximation", ["rff", "ssgp"])
def test_command_line_fit_and_predict(tmp_path, capsys, approximation):
    from sparsegp.cli import main

    X, y = data(n=60)
    path = tmp_path / "d.csv"
    np.savetxt(path, np.c_[X, y], delimiter=",", header="a,b,y", comments="")
    out = tmp_path / "m.pt"
    assert main(["fit", str(path), "--target", "y", "--approximation", approximation, "-M", "8",
                 "--maxiter", "20", "--out", str(out)]) == 0
    assert "not a bound" in capsys.readouterr().out
    model = sg.load(out)
    assert type(model).__name__ == approximation.upper() and model.num_features == 8
    assert main(["predict", str(out), str(path), "--out", str(tmp_path / "p.csv")]) == 0
    pred = np.loadtxt(tmp_path / "p.csv", delimiter=",", skiprows=1)
    np.testing.assert_allclose(pred[:, 0], model.predict(X)[0], rtol=1e-10)


def test_ssgp_frequencies_are_named_like_every_parameter(tmp_path):
    X, y = data(n=40)
    model = sg.SSGP(X, y, num_features=6)
    assert "basis.frequencies" in model.summary()  # summary() and repr raised a KeyError
    model.freeze("basis.frequencies")
    frequencies = model.basis.frequencies.detach().clone()
    model.fit(maxiter=5)
    assert torch.equal(model.basis.frequencies.detach(), frequencies)
    model.save(tmp_path / "m.pt", include_data=True)
    assert not sg.load(tmp_path / "m.pt").basis.frequencies.requires_grad  # stays frozen
