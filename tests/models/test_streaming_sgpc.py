"""Streaming SGPC by Power EP (`SGPC.update`, `models.streaming_sgpc`): with a Gaussian
likelihood, kept inducing inputs and hyperparameters, the batch posterior of all the data in
either order (and the exact GP with every input inducing, α = 1); with Bernoulli and Poisson
likelihoods Power EP on the new batch with the old posterior as the prior, against a dense
computation written here, and close to the batch SGPC (measured); the energy's gradient;
fitting a stream; persistence; errors."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy.special import log_ndtr, ndtr

import sparsegp as sg
from sparsegp.models.core.registry import MODELS
from sparsegp.models.sgpc.streaming import StreamingSGPC, update
from sparsegp.models.sgpr.streaming import update as sgpr_update

pytestmark = pytest.mark.filterwarnings("ignore::sparsegp.ApproximationWarning")

ELL, VAR = 0.9, 1.2


def se(A, B):
    d = (A[:, None, 0] - B[None, :, 0]) / ELL
    return VAR * np.exp(-0.5 * d * d)


def kernel():
    return sg.kernels.SquaredExponential(lengthscale=ELL, variance=VAR)


def data(n=60, seed=1, kind="probit"):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3.0, 3.0, (n, 1))
    f = 1.5 * np.sin(1.7 * X[:, 0])
    if kind == "probit":
        return X, (rng.uniform(size=n) < ndtr(f)).astype(float)
    if kind == "poisson":
        return X, rng.poisson(np.exp(f)).astype(float)
    return X, f + 0.3 * rng.standard_normal(n)


def likelihood(kind):
    return {"probit": sg.likelihoods.Bernoulli, "poisson": sg.likelihoods.Poisson,
            "gaussian": lambda: sg.likelihoods.Gaussian(variance=0.1)}[kind]()


def sgpc(X, y, Z, kind, alpha, damping=0.5):
    """An SGPC at fixed hyperparameters and inducing inputs, no jitter, sites converged."""
    m = sg.SGPC(X, y, kernel=kernel(), inducing_points=Z, alpha=alpha,
                likelihood=likelihood(kind), jitter=0.0, damping=damping)
    m.update_sites(max_sweeps=3000, tol=1e-13)
    return m


def streamed(old, X, y):
    new = update(old, X, y, inducing_points=old.inducing_points, fit=False)
    new.update_sites(max_sweeps=3000, tol=1e-13)
    return new


# -- a dense reference: Power EP on the new batch with the old posterior as the prior -------
def dense_q_old(model, X, Z):
    """q_old(u) = N(m, S) of an SGPC's sites: S⁻¹ = Kuu⁻¹ + W diag(τ) Wᵀ, m = S W ν."""
    W = np.linalg.solve(se(Z, Z), se(Z, X))
    tau, nu = model.tau.numpy(), model.nu.numpy()
    S = np.linalg.inv(np.linalg.inv(se(Z, Z)) + (W * tau) @ W.T)
    return S @ (W @ nu), S


def tilted_quadrature(kind, alpha, nodes=200):
    """d log Z̃/dμ and d² log Z̃/dμ² of Z̃ = E_{N(μ, v)} p(y | f)^α by Gauss–Hermite."""
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / w.sum()

    def tilted(mu, v, y):
        f = mu[:, None] + np.sqrt(v)[:, None] * x[None]
        if kind == "probit":
            logp = log_ndtr((2.0 * y[:, None] - 1.0) * f)
        else:
            logp = y[:, None] * f - np.exp(f) - np.array([math.lgamma(t + 1) for t in y])[:, None]
        lw = alpha * logp + np.log(w)[None]
        p = np.exp(lw - lw.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        dev = f - mu[:, None]
        m1 = (p * dev).sum(1)
        m2 = (p * dev * dev).sum(1) - m1 * m1
        return m1 / v, (m2 - v) / v**2
    return tilted


def tilted_probit_ep(mu, v, y):
    """Closed-form probit EP (α = 1) derivatives: Rasmussen & Williams (2006), §3.6."""
    s = 2.0 * y - 1.0
    z = s * mu / np.sqrt(1.0 + v)
    r = np.exp(-0.5 * z * z - log_ndtr(z)) / math.sqrt(2.0 * math.pi)
    return s * r / np.sqrt(1.0 + v), -r * (z + r) / (1.0 + v)


def dense_power_ep(m0, S0, Z, X, y, tilted, alpha, damping=0.5, tol=1e-14):
    """Damped Power EP in u with prior N(m0, S0) and sites on h_n = w_nᵀu; every matrix
    formed and inverted. Returns the posterior N(m, S) of u."""
    W = np.linalg.solve(se(Z, Z), se(Z, X))
    d = VAR - (se(Z, X) * W).sum(0)
    P0 = np.linalg.inv(S0)
    tau, nu = np.zeros(len(y)), np.zeros(len(y))
    for _ in range(5000):
        S = np.linalg.inv(P0 + (W * tau) @ W.T)
        m = S @ (P0 @ m0 + W @ nu)
        mu, s = W.T @ m, (W * (S @ W)).sum(0)
        s_c = 1.0 / (1.0 / s - alpha * tau)
        mu_c = s_c * (mu / s - alpha * nu)
        d1, d2 = tilted(mu_c, s_c + d, y)
        v_hat = -1.0 / d2 - s_c
        new_tau = (1 - damping) * tau + damping / (alpha * v_hat)
        new_nu = (1 - damping) * nu + damping * (mu_c - d1 / d2) / (alpha * v_hat)
        change = np.abs(new_tau - tau).max() + np.abs(new_nu - nu).max()
        tau, nu = new_tau, new_nu
        if change < tol:
            break
    S = np.linalg.inv(P0 + (W * tau) @ W.T)
    return S @ (P0 @ m0 + W @ nu), S


def dense_predict(m, S, Z, Xs):
    A = np.linalg.solve(se(Z, Z), se(Z, Xs))
    return A.T @ m, VAR - (se(Z, Xs) * A).sum(0) + (A * (S @ A)).sum(0)


Z8 = np.linspace(-3.0, 3.0, 8)[:, None]
XS = np.linspace(-3.5, 3.5, 13)[:, None]


# -- (1) Gaussian likelihood: the batch posterior, the exact GP ------------------------------
@pytest.mark.parametrize("alpha", [1.0, 0.5])
@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_gaussian_two_batches_equal_the_batch_posterior(alpha, order):
    X, y = data(40, seed=0, kind="gaussian")
    first, second = (slice(0, 20), slice(20, 40))[:: 1 if order == "forward" else -1]
    batch = sgpc(X, y, Z8, "gaussian", alpha, damping=1.0)
    old = sgpc(X[first], y[first], Z8, "gaussian", alpha, damping=1.0)
    new = streamed(old, X[second], y[second])
    for got, want in zip(new.predict_f(XS), batch.predict_f(XS)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)
    # the energies add up to the batch energy (Power EP's F_α of docs/math.md §2)
    assert old.log_marginal_likelihood() + new.log_marginal_likelihood() == pytest.approx(
        batch.log_marginal_likelihood(), rel=1e-10)
    # and the streamed energy is the streamed collapsed objective of an SGPR
    reg = sg.SGPR(X[first], y[first], kernel=kernel(), inducing_points=Z8, approximation="pep",
                  alpha=alpha, noise_variance=0.1, jitter=0.0, standardize_y=False)
    ref = sgpr_update(reg, X[second], y[second], inducing_points=Z8, fit=False)
    assert new.log_marginal_likelihood() == pytest.approx(ref.log_marginal_likelihood(),
                                                          rel=1e-10)


def test_gaussian_updates_at_the_default_jitter_equal_the_batch_posterior():
    # the jitter enters the prior of the inducing variables on both sides of the summary:
    # 10 updates of 4 rows at the default jitter stay the batch posterior (measured: 1e-12;
    # with K_aa unjittered in the summary's block the error grew with each update)
    X, y = data(44, seed=2, kind="gaussian")
    lik = dict(kernel=kernel(), inducing_points=Z8, alpha=0.5, damping=1.0)
    batch = sg.SGPC(X, y, likelihood=likelihood("gaussian"), **lik)
    assert batch.jitter > 0
    batch.update_sites(max_sweeps=3000, tol=1e-13)
    m = sg.SGPC(X[:4], y[:4], likelihood=likelihood("gaussian"), **lik)
    m.update_sites(max_sweeps=3000, tol=1e-13)
    for k in range(1, 11):
        m = streamed(m, X[4 * k:4 * k + 4], y[4 * k:4 * k + 4])
    for got, want in zip(m.predict_f(XS), batch.predict_f(XS)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)


def test_gaussian_every_input_inducing_with_alpha_one_is_the_exact_gp():
    X = np.linspace(-3.0, 3.0, 16)[:, None] + 0.05 * np.sin(np.arange(16))[:, None]
    y = np.sin(1.7 * X[:, 0]) + 0.3 * np.cos(5.0 * X[:, 0])
    old = sgpc(X[::2], y[::2], X, "gaussian", 1.0, damping=1.0)
    new = streamed(old, X[1::2], y[1::2])
    exact = sg.GPR(X, y, kernel=kernel(), noise_variance=0.1, standardize_y=False)
    for got, want in zip(new.predict_f(XS), exact.predict_f(XS)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)
    assert old.log_marginal_likelihood() + new.log_marginal_likelihood() == pytest.approx(
        exact.log_marginal_likelihood(), rel=1e-9)


# -- (2) Bernoulli and Poisson: Power EP with q_old as the prior; the batch SGPC -------------
@pytest.mark.parametrize("alpha", [1.0, 0.5])
@pytest.mark.parametrize("kind, tol_mean, tol_var", [("probit", 0.06, 0.15),
                                                    ("poisson", 0.15, 0.25)])
def test_non_gaussian_update_is_power_ep_with_the_old_posterior_as_prior(kind, tol_mean, tol_var,
                                                                         alpha):
    X, y = data(60, seed=1, kind=kind)
    old = sgpc(X[:30], y[:30], Z8, kind, alpha)
    new = streamed(old, X[30:], y[30:])
    m0, S0 = dense_q_old(old, X[:30], Z8)
    tilted = (tilted_probit_ep if kind == "probit" and alpha == 1.0
              else tilted_quadrature(kind, alpha))
    m, S = dense_power_ep(m0, S0, Z8, X[30:], y[30:], tilted, alpha)
    mean, var = new.predict_f(XS)
    ref_mean, ref_var = dense_predict(m, S, Z8, XS)
    np.testing.assert_allclose(mean, ref_mean, rtol=0, atol=1e-8)
    np.testing.assert_allclose(var, ref_var, rtol=0, atol=1e-8)
    # the batch SGPC also revisits the old sites with the new data's posterior: measured
    # max |Δmean|/max sd 0.037 (probit), 0.10–0.11 (Poisson); max |Δvar|/var 0.11, 0.19
    batch = sgpc(X, y, Z8, kind, alpha)
    b_mean, b_var = batch.predict_f(XS)
    assert np.abs(mean - b_mean).max() / np.sqrt(b_var.max()) < tol_mean
    assert np.abs(var / b_var - 1.0).max() < tol_var
    # and far closer to it than the old posterior alone
    o_mean, _ = old.predict_f(XS)
    assert np.abs(mean - b_mean).max() < 0.5 * np.abs(o_mean - b_mean).max()


# -- (3) the energy's gradient --------------------------------------------------------------
@pytest.mark.parametrize("kind, alpha", [("probit", 0.5), ("poisson", 1.0)])
def test_the_energy_gradient_matches_finite_differences(kind, alpha):
    X, y = data(40, seed=2, kind=kind)
    old = sgpc(X[:20], y[:20], Z8, kind, alpha)
    old.kernel.set_value("lengthscale", 0.7)  # the new hyperparameters differ from the old
    new = update(old, X[20:], y[20:], inducing_points=5, fit=False)  # b ≠ a
    params = [p for p in new.parameters() if p.requires_grad]
    assert any(p.shape == (5, 1) for p in params)  # the inducing inputs b among them
    loss = new.training_loss()
    grads = torch.autograd.grad(loss, params)
    h = 1e-6
    for p, g in zip(params, grads):
        for i in range(p.numel()):
            with torch.no_grad():
                flat = p.view(-1)
                flat[i] += h
                up = float(new.training_loss())
                flat[i] -= 2 * h
                down = float(new.training_loss())
                flat[i] += h
            assert float(g.view(-1)[i]) == pytest.approx((up - down) / (2 * h), rel=1e-5,
                                                         abs=1e-6)


def test_minibatch_estimates_average_to_the_energy_and_its_gradient():
    # the old data's block enters every estimate exactly; over all pairs of batches of a
    # partition the estimates of the stochastic schedule are the energy and its gradient
    X, y = data(80, seed=6)
    old = sgpc(X[:40], y[:40], Z8, "probit", 0.5)
    new = update(old, X[40:], y[40:], inducing_points=5, fit=False)
    params = [p for p in new.parameters() if p.requires_grad]
    F = new.minibatch_energy(None)
    grads = torch.autograd.grad(F, params)
    parts = torch.arange(40).reshape(4, 10)
    estimates = [new.minibatch_energy(a, b) for a in parts for b in parts]
    mean = torch.stack(estimates).mean()
    assert float(mean.detach()) == pytest.approx(float(F.detach()), rel=1e-12)
    for g, e in zip(grads, torch.autograd.grad(mean, params)):
        torch.testing.assert_close(e, g, rtol=1e-10, atol=1e-12)
    result = new.fit(schedule="stochastic", batch_size=10, epochs=2)
    assert math.isfinite(result.objective)


# -- (4) a stream fitted batch by batch -----------------------------------------------------
def test_a_fitted_stream_is_close_to_the_batch_fit_and_beats_the_last_batch_alone():
    rng = np.random.default_rng(3)
    X = np.sort(rng.uniform(-4.0, 4.0, 300))[:, None]  # batches sweep the input range
    y = (rng.uniform(size=300) < ndtr(3.0 * np.sin(1.2 * X[:, 0]))).astype(int)
    Xt = rng.uniform(-4.0, 4.0, (500, 1))
    yt = (rng.uniform(size=500) < ndtr(3.0 * np.sin(1.2 * Xt[:, 0]))).astype(int)
    opts = {"maxiter": 10, "inner_maxiter": 30}

    def fitted(Xa, ya):
        m = sg.SGPC(Xa, ya, kernel=sg.kernels.SquaredExponential(), inducing_points=12)
        m.fit(**opts)
        return m

    def scores(m):
        p = m.predict_proba(Xt)
        return float(np.mean((p > 0.5) == yt)), float(-np.mean(m.predict_log_density(Xt, yt)))

    m = fitted(X[:100], y[:100])
    for s in (slice(100, 200), slice(200, 300)):
        start = m.update(X[s], y[s], fit=False)
        m = m.update(X[s], y[s], **opts)
        assert m.log_marginal_likelihood() > start.log_marginal_likelihood()
    assert type(m) is StreamingSGPC and m.num_data_seen == 300 and m.num_updates == 2
    acc, nlpd = scores(m)
    acc_batch, nlpd_batch = scores(fitted(X, y))
    acc_last, nlpd_last = scores(fitted(X[200:], y[200:]))
    # measured (accuracy / NLPD): streamed 0.902 / 0.2587, batch 0.902 / 0.2575, the last
    # batch alone 0.636 / 0.547
    assert abs(acc - acc_batch) < 0.02 and nlpd < nlpd_batch + 0.02
    assert acc > acc_last + 0.2 and nlpd < nlpd_last - 0.2


# -- (5) persistence, the chain, errors -----------------------------------------------------
def test_save_load_and_a_chain_of_updates(tmp_path):
    X, y = data(90, seed=4)
    old = sg.SGPC(X[:30], y[:30], kernel=kernel(), inducing_points=6, alpha=0.5,
                  standardize_X=True)
    old.update_sites()
    new = old.update(X[30:60], y[30:60], fit=False)  # SGPC.update, through the registry
    assert type(new) is StreamingSGPC and new.num_data_seen == 60 and new.num_updates == 1
    new.save(tmp_path / "s.pt")
    new.save(tmp_path / "d.pt", include_data=True)
    back, full = sg.load(tmp_path / "s.pt"), sg.load(tmp_path / "d.pt")
    assert type(back) is StreamingSGPC and back.num_data_seen == 60 and back.num_updates == 1
    for got, want in zip(back.predict_f(XS), new.predict_f(XS)):
        np.testing.assert_array_equal(got, want)
    assert full.log_marginal_likelihood() == new.log_marginal_likelihood()
    # the loaded model (no data) is updated exactly as the original
    a, b = update(back, X[60:], y[60:], fit=False), update(new, X[60:], y[60:], fit=False)
    assert a.num_data_seen == b.num_data_seen == 90 and a.num_updates == b.num_updates == 2
    for got, want in zip(a.predict_f(XS), b.predict_f(XS)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert a.log_marginal_likelihood() == pytest.approx(b.log_marginal_likelihood(), rel=1e-12)
    # and the data-carrying copy refits
    with pytest.warns(sg.ConvergenceWarning, match="round limit"):
        assert full.fit(maxiter=1, inner_maxiter=3).iterations >= 1


def test_labels_follow_the_old_convention_and_a_batch_may_hold_one_class():
    X, y = data(60, seed=5)
    pm = 2 * y - 1  # ±1 labels
    old = sg.SGPC(X[:30], pm[:30], kernel=kernel(), inducing_points=6)
    old.update_sites()
    ones = np.ones(10)
    new = update(old, X[30:40], ones, fit=False)  # one class only
    assert new.classes == [-1, 1] and set(new.predict(XS).tolist()) <= {-1, 1}
    same = update(old, X[30:40], torch.ones(10, 1, dtype=torch.float64), fit=False)
    np.testing.assert_array_equal(same.predict_f(XS)[0], new.predict_f(XS)[0])
    with pytest.raises(ValueError, match="outside this model's classes"):
        update(old, X[30:], y[30:], fit=False)  # 0/1 labels for a ±1 model


def test_bad_input_gives_clear_errors(tmp_path):
    X, y = data(40)
    old = sg.SGPC(X[:20], y[:20], kernel=kernel(), inducing_points=4)
    with pytest.raises(TypeError, match="need fit=True"):
        update(old, X[20:], y[20:], fit=False, maxiter=3)
    with pytest.raises(ValueError, match="X_new has 2 columns but the model expects 1"):
        update(old, np.c_[X[20:], X[20:]], y[20:])
    with pytest.raises(ValueError, match="one per row of X_new"):
        update(old, X[20:], y[21:])
    with pytest.raises(ValueError, match="y_new must be a vector of 20"):
        update(old, X[20:], np.c_[y[20:], y[20:]])
    bad = y[20:].copy()
    bad[0] = np.nan
    with pytest.raises(ValueError, match="y_new contains NaN"):
        update(old, X[20:], bad)
    bad[0] = 2.0
    with pytest.raises(ValueError, match="outside this model's classes"):
        update(old, X[20:], bad)
    counts = sg.SGPC(X[:20], np.arange(20.0) % 4, kernel=kernel(), inducing_points=4,
                     likelihood=sg.likelihoods.Poisson())
    for wrong in (-1.0, 1.5):
        bad = np.arange(20.0) % 4
        bad[3] = wrong
        with pytest.raises(ValueError, match="Poisson"):
            update(counts, X[20:], bad)
    with pytest.raises(TypeError, match="update takes an SGPC"):
        update(sg.SGPR(X[:20], y[:20], inducing_points=4), X[20:], y[20:])
    with pytest.raises(ValueError, match="zero prior mean"):
        update(sg.SGPC(X[:20], y[:20], inducing_points=4, mean=sg.means.Constant(0.3)),
               X[20:], y[20:])
    # a model loaded without its data whose parameters changed has no posterior to summarise
    old.save(tmp_path / "m.pt")
    loaded = sg.load(tmp_path / "m.pt")
    loaded.kernel.set_value("lengthscale", 2.0)
    with pytest.raises(ValueError, match="update needs the model's posterior"):
        update(loaded, X[20:], y[20:])
    assert MODELS.get("StreamingSGPC") is StreamingSGPC


def test_diagnostics_judge_the_inducing_inputs_against_the_new_batch_and_the_old_summary():
    """The report of a streamed SGPC: its energy, N = the new batch, and an inducing input
    that sits on the old data only (far from every new input) is not called far."""
    from sparsegp.diagnostics.latent import LatentDiagnostics
    from sparsegp.diagnostics.placement import inducing_placement

    X = np.linspace(0.0, 6.0, 40)[:, None]
    labels = (np.sin(2.0 * X[:, 0]) > 0).astype(float)
    old = sg.SGPC(X[:20], labels[:20], inducing_points=np.linspace(0.0, 2.8, 4)[:, None],
                  kernel=sg.kernels.SquaredExponential(lengthscale=0.5))
    old.update_sites(max_sweeps=50)
    new = update(old, X[X[:, 0] > 3.5], labels[X[:, 0] > 3.5], fit=False,
                 inducing_points=np.array([[0.2], [4.0], [5.0], [5.8]]))
    rep = new.diagnostics()
    assert isinstance(rep, LatentDiagnostics)
    assert rep.objective == pytest.approx(new.log_marginal_likelihood(), rel=1e-12)
    assert rep.num_data == int((X[:, 0] > 3.5).sum()) and rep.no_upper_bound == "for Power EP"
    alone = inducing_placement(new.feature, new.kernel, new.X, 0.05, 3.0)
    assert alone.far == [0]  # by the new batch alone, 0.2 would be "far from the data"
    assert rep.far_inducing == []


def test_a_streamed_state_loads_into_a_fresh_model_whose_summary_has_another_rank():
    """The summary's rank depends on the data (an unfitted base's summary has rank 0): the
    state of a fitted stream loads into a fresh one built the same way, and predicts as it."""
    g = torch.Generator().manual_seed(0)
    X = torch.rand(60, 2, generator=g, dtype=torch.float64)
    labels = (X.sum(1) > 1).to(torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = sg.SGPC(X[:30], labels[:30], inducing_points=6)
        base.fit(maxiter=2, progress=False)
        fitted = base.update(X[30:], labels[30:], maxiter=2)
        fresh = sg.SGPC(X[:30], labels[:30], inducing_points=6).update(X[30:], labels[30:],
                                                                        fit=False)
    assert fresh.summary_T.shape != fitted.summary_T.shape
    fresh.load_state_dict(fitted.state_dict())
    assert fresh.spec.streaming.rank == fitted.spec.streaming.rank
    torch.testing.assert_close(fresh.predict_f(X)[0], fitted.predict_f(X)[0], rtol=0, atol=0)
