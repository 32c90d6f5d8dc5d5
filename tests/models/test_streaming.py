"""Streaming sparse GP regression (`models.streaming.update`, `objectives.online`): exact
against the batch VFE / Power-EP posterior and bound where the summary loses nothing, exact
against the GP with every input an inducing input, against a dense evaluation of the bound in
the form of Bui, Nguyen & Turner (2017) otherwise; gradients, units, persistence, errors."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.kernels import SquaredExponential
from sparsegp.models.sgpr.streaming import StreamingSGPR, update

pytestmark = pytest.mark.filterwarnings("ignore::sparsegp.ApproximationWarning")

APPROXIMATIONS = [("vfe", None), ("pep", 0.5), ("fitc", None)]


def data(n=75, seed=0, offset=0.0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 6.0, (n, 1))
    y = np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 0] + offset + 0.1 * rng.standard_normal(n)
    return X, y


def first_model(X, y, Z, approximation="vfe", alpha=None, **options):
    m = sg.SGPR(X, y, inducing_points=Z, approximation=approximation, alpha=alpha, jitter=0.0,
                **options)
    with torch.no_grad():
        m.kernel.set_value("lengthscale", 1.1)
        m.kernel.set_value("variance", 0.9)
        m.set_value("noise_variance", 0.05)
    return m


def batch_like(model, X, y):
    """An SGPR on (X, y) with `model`'s parameters and units (buffers and inducing inputs)."""
    ref = sg.SGPR(X, y, inducing_points=model.inducing_points, approximation=model.approximation,
                  alpha=model.alpha, jitter=0.0)
    ref.load_state_dict(model.state_dict(), strict=False)
    ref.X = (torch.as_tensor(X) - model.x_shift) / model.x_scale
    ref.y = (torch.as_tensor(y) - model.y_shift) / model.y_scale
    return ref


@pytest.mark.parametrize("approximation,alpha", APPROXIMATIONS)
@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 1, 0, 2)])
def test_streamed_posterior_with_b_equal_a_is_the_batch_posterior(approximation, alpha, order):
    X, y = data(80)
    X[:, 0] *= 3.0  # standardize_X then matters
    y = y + 40.0  # so does standardize_y
    batches = [np.arange(80)[k::4] for k in order]
    Z = np.linspace(0.0, 18.0, 7)[:, None]
    first = batches[0]
    m = first_model(X[first], y[first], Z, approximation, alpha, standardize_X=True)
    total = m.log_marginal_likelihood()
    seen = list(first)
    Xs = torch.linspace(-1.0, 19.0, 23, dtype=torch.float64)[:, None]
    for rows in batches[1:]:
        m = update(m, X[rows], y[rows], inducing_points=m.inducing_points, fit=False)
        seen += list(rows)
        ref = batch_like(m, X[seen], y[seen])
        post, rpost = m.posterior(), ref.posterior()
        torch.testing.assert_close(post.q_mu, rpost.q_mu, rtol=1e-8, atol=1e-8)
        torch.testing.assert_close(post.q_cov, rpost.q_cov, rtol=1e-8, atol=1e-8)
        for got, want in zip(m.predict_y(Xs), ref.predict_y(Xs)):
            torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-8)
        # the bounds telescope: F(first) + Σ streaming F = F(all seen)
        total += m.log_marginal_likelihood()
        assert total == pytest.approx(ref.log_marginal_likelihood(), rel=1e-9, abs=1e-8)
    assert isinstance(m, StreamingSGPR) and m.num_data_seen == 80 and m.num_updates == 3


@pytest.mark.parametrize("approximation,alpha", [("vfe", None), ("pep", 0.5)])
def test_a_long_stream_at_the_default_jitter_stays_the_batch_posterior(approximation, alpha):
    # 100 updates of 4 rows keeping the 15 inducing inputs, at the default jitter (the prior
    # of the inducing variables is K + εI on both sides of the summary). Measured: the mean
    # within 5e-12 posterior sd of the batch posterior and the evidence telescoping to 2e-11
    # nats; with K_aa unjittered on one side the mean drifted linearly, to 0.008 sd and
    # 0.1 nats after 100 updates. The bounds: rounding, growing with the updates (~1e-13 each).
    X, y = data(440, seed=5)
    Z = np.linspace(0.0, 6.0, 15)[:, None]
    m = sg.SGPR(X[:40], y[:40], inducing_points=Z, approximation=approximation, alpha=alpha)
    assert m.jitter > 0
    with torch.no_grad():
        m.kernel.set_value("lengthscale", 1.1)
        m.kernel.set_value("variance", 0.9)
        m.set_value("noise_variance", 0.05)
    total = m.log_marginal_likelihood()
    Xs = torch.linspace(0.0, 6.0, 50, dtype=torch.float64)[:, None]
    for k in range(100):
        rows = slice(40 + 4 * k, 44 + 4 * k)
        m = update(m, X[rows], y[rows], inducing_points=m.inducing_points, fit=False)
        total += m.log_marginal_likelihood()
    ref = sg.SGPR(X, y, inducing_points=m.inducing_points, approximation=approximation,
                  alpha=alpha)
    assert ref.jitter == m.jitter
    ref.load_state_dict(m.state_dict(), strict=False)
    ref.X = (torch.as_tensor(X) - m.x_shift) / m.x_scale
    ref.y = (torch.as_tensor(y) - m.y_shift) / m.y_scale
    with torch.no_grad():
        (mean, var), (ref_mean, ref_var) = m.predict_f(Xs), ref.predict_f(Xs)
    assert float(((mean - ref_mean).abs() / ref_var.sqrt()).max()) < 1e-9
    assert float((var / ref_var - 1.0).abs().max()) < 1e-9
    assert total == pytest.approx(ref.log_marginal_likelihood(), rel=0, abs=1e-8)


def test_the_new_model_keeps_the_old_units():
    X, y = data(60)
    m1 = first_model(X[:30], y[:30] * 50.0, np.linspace(0, 6, 6)[:, None], standardize_X=True)
    m2 = update(m1, X[30:] + 10.0, y[30:] * 50.0 + 1e3, fit=False)
    for name in ("x_shift", "x_scale", "y_shift", "y_scale"):
        assert torch.equal(getattr(m2, name), getattr(m1, name)), name
    torch.testing.assert_close(m2.X, (torch.as_tensor(X[30:]) + 10.0 - m1.x_shift) / m1.x_scale)
    assert m2.noise_variance == pytest.approx(m1.noise_variance, rel=1e-12)


@pytest.mark.parametrize("approximation", ["fitc", "vfe"])
def test_every_input_inducing_gives_the_exact_gp(approximation):
    # well-separated inputs (24 on a grid, visited in a scrambled order): Kff needs no jitter
    X = np.linspace(0.0, 6.0, 24)[np.random.default_rng(3).permutation(24)][:, None]
    y = np.sin(1.5 * X[:, 0]) + 0.1 * np.random.default_rng(4).standard_normal(24)
    batches = [slice(0, 8), slice(8, 16), slice(16, 24)]
    kernel = dict(lengthscale=0.3, variance=1.3)
    m = sg.SGPR(X[:8], y[:8], kernel=SquaredExponential(**kernel), inducing_points=X[:8],
                approximation=approximation, noise_variance=0.1, jitter=0.0, standardize_y=False)
    gp_old = sg.GPR(X[:8], y[:8], kernel=SquaredExponential(**kernel), noise_variance=0.1,
                    standardize_y=False)
    Xs = np.linspace(-0.5, 6.5, 15)[:, None]
    for s in batches[1:]:
        m = update(m, X[s], y[s], inducing_points=X[:s.stop], fit=False)
        gp = sg.GPR(X[:s.stop], y[:s.stop], kernel=SquaredExponential(**kernel),
                    noise_variance=0.1, standardize_y=False)
        for got, want in zip(m.predict_f(Xs, full_cov=True), gp.predict_f(Xs, full_cov=True)):
            np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-8)
        # log p(y_new | y_old), exactly
        want = gp.log_marginal_likelihood() - gp_old.log_marginal_likelihood()
        assert m.log_marginal_likelihood() == pytest.approx(want, rel=1e-8, abs=1e-8)
        gp_old = gp


def dense_streaming_bound(old, new):
    """F_α of Bui, Nguyen & Turner (2017) in their variables (internal units): ŷ = [y; D_a S_a⁻¹m_a],
    D_a = (S_a⁻¹ − K'_aa⁻¹)⁻¹, Σ̂ = blockdiag(σ²I + α diag(Kff − Qff), D_a + αQ_a), and the
    normaliser of q_old(a)/p_old(a). Also the dense q(b) = N(mean, cov)."""
    post = old.posterior()
    m_a, S_a = post.q_mu[:, 0], post.q_cov[0]
    Kp = post.L @ post.L.T  # the old prior's K'_aa
    Za = old.feature.Z.detach()
    Si = torch.linalg.inv(S_a)
    D_a = torch.linalg.inv(Si - torch.linalg.inv(Kp))
    k, Zb = new.kernel, new.feature.Z.detach()
    X, y = new.X, new.y
    s2 = new.value("noise_variance").detach()
    alpha = 1e-300 if new.approximation == "vfe" else float(new.alpha)
    with torch.no_grad():
        Kbb, Kbf, Kba = k.K(Zb), k.K(Zb, X), k.K(Zb, Za)
        Kbb_inv = torch.linalg.inv(Kbb)
        d = k.K_diag(X) - (Kbf * (Kbb_inv @ Kbf)).sum(0)
        Q_a = k.K(Za) - Kba.T @ Kbb_inv @ Kba
        Kfb_hat = torch.cat([Kbf.T, Kba.T], 0)
        y_hat = torch.cat([y, D_a @ Si @ m_a])
        N, Ma = X.shape[0], Za.shape[0]
        Sigma = torch.zeros(N + Ma, N + Ma, dtype=torch.float64)
        Sigma[:N, :N] = torch.diag(s2 + alpha * d)
        Sigma[N:, N:] = D_a + alpha * Q_a
        C = Kfb_hat @ Kbb_inv @ Kfb_hat.T + Sigma
        log_n = torch.distributions.MultivariateNormal(
            torch.zeros(N + Ma, dtype=torch.float64), covariance_matrix=C).log_prob(y_hat)
        DiQ = torch.linalg.solve(D_a, Q_a)
        if new.approximation == "vfe":
            penalty = 0.5 * d.sum() / s2 + 0.5 * torch.trace(DiQ)
        else:
            eye = torch.eye(Ma, dtype=torch.float64)
            penalty = (1 - alpha) / (2 * alpha) * (torch.log1p(alpha * d / s2).sum()
                                                   + torch.logdet(eye + alpha * DiQ))
        log_z = (-0.5 * (torch.logdet(S_a) - torch.logdet(Kp) - torch.logdet(D_a))
                 + 0.5 * m_a @ (Si @ D_a @ Si - Si) @ m_a + 0.5 * Ma * math.log(2 * math.pi))
        P = Kbb_inv @ Kfb_hat.T @ torch.linalg.inv(Sigma)  # the optimal q(b)
        cov = Kbb @ torch.linalg.inv(Kbb + Kfb_hat.T @ torch.linalg.solve(Sigma, Kfb_hat)) @ Kbb
        mean = cov @ P @ y_hat
    return float(log_n - penalty + log_z), mean, cov


@pytest.mark.parametrize("approximation,alpha", APPROXIMATIONS)
def test_the_bound_and_posterior_match_a_dense_evaluation(approximation, alpha):
    X, y = data(70, seed=5)
    old = first_model(X[:40], y[:40], np.linspace(0.3, 5.7, 6)[:, None], approximation, alpha)
    new = update(old, X[40:], y[40:], inducing_points=np.linspace(0.0, 6.0, 8)[:, None], fit=False)
    with torch.no_grad():  # other hyperparameters than the old model's, and b ≠ a
        new.kernel.set_value("lengthscale", 1.4)
        new.kernel.set_value("variance", 1.2)
        new.set_value("noise_variance", 0.08)
    want, mean, cov = dense_streaming_bound(old, new)
    with torch.no_grad():
        got = float(new._objective())
    assert got == pytest.approx(want, rel=1e-9)
    post = new.posterior()
    torch.testing.assert_close(post.q_mu[:, 0], mean, rtol=1e-8, atol=1e-9)
    torch.testing.assert_close(post.q_cov[0], cov, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("approximation,alpha", [("vfe", None), ("pep", 0.3)])
def test_the_gradient_matches_finite_differences(approximation, alpha):
    X, y = data(60, seed=7)
    old = first_model(X[:30], y[:30], np.linspace(0.3, 5.7, 5)[:, None], approximation, alpha)
    new = update(old, X[30:], y[30:], inducing_points=6, fit=False)
    params = [(n, p) for n, p in new.named_parameters() if p.requires_grad]
    assert {n for n, _ in params} >= {"feature.Z", "raw_noise_variance"}
    grads = torch.autograd.grad(new.training_loss(), [p for _, p in params])
    for (name, p), g in zip(params, grads):
        for i in sorted({0, p.numel() - 1}):
            with torch.no_grad():
                flat, old_value = p.view(-1), float(p.view(-1)[i])
                flat[i] = old_value + 1e-6
                up = float(new.training_loss())
                flat[i] = old_value - 1e-6
                down = float(new.training_loss())
                flat[i] = old_value
            assert float(g.reshape(-1)[i]) == pytest.approx((up - down) / 2e-6, rel=1e-5,
                                                            abs=1e-6), name


def test_small_alpha_tends_to_the_variational_bound():
    X, y = data(60, seed=8)
    vfe = first_model(X[:30], y[:30], np.linspace(0.3, 5.7, 5)[:, None])
    pep = first_model(X[:30], y[:30], np.linspace(0.3, 5.7, 5)[:, None], "pep", 1e-7)
    Z = np.linspace(0.0, 6.0, 7)[:, None]
    a = update(vfe, X[30:], y[30:], inducing_points=Z, fit=False)
    b = update(pep, X[30:], y[30:], inducing_points=Z, fit=False)
    with torch.no_grad():
        for m in (a, b):
            m.kernel.set_value("lengthscale", 1.3)
    assert b.log_marginal_likelihood() == pytest.approx(a.log_marginal_likelihood(), rel=1e-5)
    torch.testing.assert_close(b.posterior().q_mu, a.posterior().q_mu, rtol=1e-5, atol=1e-6)


def test_chunked_rows_give_the_same_objective():
    X, y = data(60, seed=2)
    old = first_model(X[:30], y[:30], np.linspace(0.3, 5.7, 5)[:, None], "pep", 0.5)
    new = update(old, X[30:], y[30:], fit=False)
    whole = new.training_loss()
    new.chunk_size = 7
    torch.testing.assert_close(new.training_loss(), whole, rtol=1e-12, atol=1e-12)


def test_fitting_improves_the_bound_and_the_chain_goes_on():
    X, y = data(90, seed=4)
    m = sg.SGPR(X[:30], y[:30], inducing_points=8)
    m.fit(maxiter=50)
    for s in (slice(30, 60), slice(60, 90)):
        start = update(m, X[s], y[s], fit=False)
        m = update(m, X[s], y[s], maxiter=300)
        assert m.log_marginal_likelihood() > start.log_marginal_likelihood()
        assert m.num_inducing == 8
    Xt, yt = data(200, seed=99)
    rmse = float(np.sqrt(np.mean((m.predict_y(Xt)[0] - yt) ** 2)))
    assert rmse < 0.2  # the noise is 0.1


def test_inducing_points_default_int_and_array():
    X, y = data(60, seed=1)
    old = first_model(X[:30], y[:30], np.linspace(0.3, 5.7, 5)[:, None])
    assert update(old, X[30:], y[30:], fit=False).num_inducing == 5
    assert update(old, X[30:], y[30:], inducing_points=9, fit=False).num_inducing == 9
    Z = np.linspace(0.0, 6.0, 4)[:, None]
    np.testing.assert_allclose(update(old, X[30:], y[30:], inducing_points=Z,
                                      fit=False).inducing_points, Z)


def test_save_and_load_keep_the_summary_and_update_alike(tmp_path):
    X, y = data(90, seed=6)
    old = first_model(X[:30], y[:30], np.linspace(0.3, 5.7, 6)[:, None], "pep", 0.5,
                      standardize_X=True)
    new = update(old, X[30:60], y[30:60], fit=False)
    new.save(tmp_path / "s.pt")
    new.save(tmp_path / "d.pt", include_data=True)
    back, full = sg.load(tmp_path / "s.pt"), sg.load(tmp_path / "d.pt")
    assert type(back) is StreamingSGPR and back.num_data_seen == 60
    Xs = np.linspace(0, 6, 9)[:, None]
    for got, want in zip(back.predict_y(Xs), new.predict_y(Xs)):
        np.testing.assert_array_equal(got, want)
    assert full.log_marginal_likelihood() == new.log_marginal_likelihood()
    # the loaded model (no data) is updated exactly as the original
    a = update(back, X[60:], y[60:], fit=False)
    b = update(new, X[60:], y[60:], fit=False)
    for got, want in zip(a.predict_y(Xs), b.predict_y(Xs)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert a.log_marginal_likelihood() == pytest.approx(b.log_marginal_likelihood(), rel=1e-12)


def test_the_registry_path_of_sgpr_update_and_float32_models():
    # SGPR.update reaches `update` through the model registry (no import of this module)
    from sparsegp.models.core.registry import MODELS

    X, y = data(40)
    old = sg.SGPR(X[:20], y[:20], inducing_points=5, dtype=torch.float32)
    new = MODELS.get("StreamingSGPR").from_update(old, X[20:], y[20:], maxiter=500)
    assert type(new) is StreamingSGPR and new.dtype == torch.float32
    mean, var = new.predict_y(X)
    assert mean.dtype == np.float32 and np.isfinite(mean).all() and (var > 0).all()


def test_an_uninformative_summary_leaves_the_new_batch_alone():
    X, y = data(40)
    old = first_model(X[:20], y[:20], np.linspace(0.3, 5.7, 5)[:, None])
    new = update(old, X[20:], y[20:], inducing_points=old.inducing_points, fit=False)
    with torch.no_grad():  # a summary with no pseudo-observations: the batch's own SGPR
        new.summary_T = new.summary_T[:, :0]
        new.summary_h = new.summary_h[:0]
        new.summary_offset = torch.zeros(())
    ref = batch_like(new, X[20:], y[20:])
    assert new.log_marginal_likelihood() == pytest.approx(ref.log_marginal_likelihood(),
                                                          rel=1e-12)
    torch.testing.assert_close(new.posterior().q_mu, ref.posterior().q_mu)


def test_bad_input_gives_clear_errors(tmp_path):
    X, y = data(40)
    old = first_model(X[:20], y[:20], 4)
    with pytest.raises(ValueError, match="X_new has 2 columns but the model expects 1"):
        update(old, np.c_[X[20:], X[20:]], y[20:])
    bad = X[20:].copy()
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="X_new contains NaN"):
        update(old, bad, y[20:])
    bad = y[20:].copy()
    bad[0] = np.nan
    with pytest.raises(ValueError, match="y_new contains NaN"):
        update(old, X[20:], bad)
    with pytest.raises(ValueError, match="rows"):
        update(old, X[20:], y[21:])
    with pytest.raises(TypeError, match="need fit=True"):
        update(old, X[20:], y[20:], fit=False, maxiter=3)
    with pytest.raises(TypeError, match="takes a fitted SGPR"):
        update(sg.GPR(X[:20], y[:20]), X[20:], y[20:])
    with pytest.raises(ValueError, match="'vfe', 'fitc' or 'pep'"):
        update(sg.SGPR(X[:20], y[:20], inducing_points=4, approximation="dtc"), X[20:], y[20:])
    with pytest.raises(ValueError, match="one output"):
        update(sg.SGPR(X[:20], np.c_[y[:20], y[:20]], inducing_points=4), X[20:], y[20:])
    # a model loaded without its data whose parameters changed has no posterior to summarise
    old.save(tmp_path / "m.pt")
    loaded = sg.load(tmp_path / "m.pt")
    loaded.kernel.set_value("lengthscale", 2.0)
    with pytest.raises(ValueError, match="update needs the model's posterior"):
        update(loaded, X[20:], y[20:])


def test_no_nan_from_a_batch_of_one_point():
    X, y = data(21)
    old = first_model(X[:20], y[:20], 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        new = update(old, X[20:], y[20:], fit=False)
    assert math.isfinite(new.log_marginal_likelihood())
    assert bool(torch.isfinite(torch.as_tensor(new.predict_y(X)[1])).all())


def test_conditioning_a_streamed_model_counts_the_new_points_as_seen():
    X, y = sg.datasets.snelson()
    first = sg.SGPR(X[:80], y[:80], inducing_points=8)
    streamed = first.update(X[80:150], y[80:150], fit=False)
    conditioned = streamed.condition_on_observations(X[150:155], y[150:155])
    assert conditioned.num_data_seen == streamed.num_data_seen + 5 == 155
    assert streamed.num_data_seen == 150  # the original unchanged
