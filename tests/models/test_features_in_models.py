"""Inducing features are first-class: every registered feature works in every sparse model,
in save/load, in the diagnostics and in the greedy selection; sums of single deltas are
inducing points to machine precision everywhere; bad features are clear errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp import covariances
from sparsegp.covariances.deltas import DeltasCrossCovariance
from sparsegp.diagnostics import inducing_gain, objective_terms

from ..conftest import make_problem

FEATURES = {
    "points": lambda X, M: sg.features.InducingPoints.from_data(X, M),
    "multiscale": lambda X, M: sg.features.Multiscale.from_data(X, M),
    "deltas": lambda X, M: sg.features.SumOfDeltas.from_data(X, M, num_deltas=3),
    "tfif": lambda X, M: sg.features.Fourier.from_data(X, M),
    "fif": lambda X, M: sg.features.Fourier.from_data(X, M, time_frequency=False),
}


def se():
    return sg.kernels.SquaredExponential(lengthscale=[1.1, 0.9], variance=1.3)


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


@pytest.mark.parametrize("name", FEATURES)
def test_every_feature_fits_predicts_round_trips_and_is_diagnosed_in_sgpr(name, tmp_path):
    X, y = make_problem(0, N=80)
    feature = FEATURES[name](X, 6)
    m = sg.SGPR(X, y, kernel=se(), inducing_points=feature, noise_variance=0.1,
                standardize_X=True, standardize_y=True)
    start = m.log_marginal_likelihood()
    res = quiet(m.fit, maxiter=40, progress=False)
    assert res.objective > start and np.isfinite(res.objective)
    assert type(m.feature) is type(feature) and m.num_inducing == 6
    Xs = np.random.default_rng(1).uniform(-3, 3, (15, 2))
    mean, var = m.predict(Xs)
    assert np.all(np.isfinite(mean)) and np.all(var >= 0)
    m.save(tmp_path / "m.pt")
    back = sg.load(tmp_path / "m.pt")
    assert type(back.feature) is type(feature)
    for a, b in zip(m.predict(Xs, full_cov=True), back.predict(Xs, full_cov=True)):
        np.testing.assert_array_equal(a, b)
    rep = m.diagnostics()
    assert rep.lower_bound <= rep.exact + 1e-8 <= rep.upper_bound + 2e-8
    assert rep.effective_num_inducing is not None and 1 <= rep.effective_num_inducing <= 6
    terms = objective_terms(m)
    assert terms.total == pytest.approx(m.log_marginal_likelihood(), rel=1e-10)


@pytest.mark.parametrize("name", FEATURES)
def test_every_feature_works_in_sgpc_and_svgp(name):
    X, y = make_problem(1, N=60)
    labels = (y > np.median(y)).astype(float)
    feature = FEATURES[name](X, 5)
    clf = sg.SGPC(X, labels, kernel=se(), inducing_points=feature)
    quiet(clf.fit, maxiter=2, progress=False)
    p = clf.predict_proba(X[:7])
    assert np.all((p > 0) & (p < 1))
    sv = sg.SVGP(X, labels, kernel=se(), likelihood=sg.likelihoods.Bernoulli(),
                 inducing_points=FEATURES[name](X, 5))
    res = quiet(sv.fit, batch_size=30, epochs=3, progress=False)
    assert np.isfinite(res.objective) and np.all(np.isfinite(sv.predict_proba(X[:7])))


def _pair_of_models(cls, X, y, **kw):
    Z = X[:7] + 0.05
    as_points = cls(X, y, kernel=se(), inducing_points=Z, **kw)
    as_deltas = cls(X, y, kernel=se(), inducing_points=sg.features.SumOfDeltas(Z[:, None, :],
                                                                               np.ones((7, 1))), **kw)
    return as_points, as_deltas


@pytest.mark.parametrize("approx,alpha", [("vfe", None), ("fitc", None), ("dtc", None), ("pep", 0.5)])
def test_one_delta_of_unit_weight_is_an_inducing_point_in_sgpr(approx, alpha):
    X, y = make_problem(2, N=70)
    a, b = _pair_of_models(sg.SGPR, X, y, approximation=approx, alpha=alpha, noise_variance=0.1)
    la, lb = a.training_loss(), b.training_loss()
    assert float(lb) == pytest.approx(float(la), rel=1e-14)
    ga = torch.autograd.grad(la, [a.feature.Z, *a.kernel.parameters(), a.raw_noise_variance])
    gb = torch.autograd.grad(lb, [b.feature.Z, *b.kernel.parameters(), b.raw_noise_variance])
    torch.testing.assert_close(gb[0][:, 0, :], ga[0], rtol=1e-12, atol=1e-12)
    for u, v in zip(ga[1:], gb[1:]):
        torch.testing.assert_close(v, u, rtol=1e-12, atol=1e-12)
    for u, v in zip(a.predict(X[:9], full_cov=True), b.predict(X[:9], full_cov=True)):
        np.testing.assert_allclose(v, u, rtol=1e-12, atol=1e-13)
    assert b.upper_bound() == pytest.approx(a.upper_bound(), rel=1e-13)


def test_one_delta_of_unit_weight_is_an_inducing_point_in_sgpc_and_svgp():
    X, y = make_problem(3, N=60)
    labels = (y > np.median(y)).astype(float)
    a, b = _pair_of_models(sg.SGPC, X, labels)
    for model in (a, b):
        model.update_sites(max_sweeps=50)
    torch.testing.assert_close(b.tau, a.tau, rtol=1e-12, atol=1e-12)
    assert b.log_marginal_likelihood() == pytest.approx(a.log_marginal_likelihood(), rel=1e-12)
    np.testing.assert_allclose(b.predict_proba(X[:9]), a.predict_proba(X[:9]), rtol=1e-11)
    a, b = _pair_of_models(sg.SVGP, X, labels, likelihood=sg.likelihoods.Bernoulli())
    for model in (a, b):
        model.natural_gradient_step(1.0)
    assert b.log_marginal_likelihood() == pytest.approx(a.log_marginal_likelihood(), rel=1e-12)
    np.testing.assert_allclose(b.predict_proba(X[:9]), a.predict_proba(X[:9]), rtol=1e-11)


def test_sums_of_deltas_stream_one_kernel_evaluation_per_chunk_with_exact_gradients(monkeypatch):
    X, y = make_problem(4, N=90, D=2)
    M, C = 6, 4
    feature = sg.features.SumOfDeltas.from_data(X, M, num_deltas=C)
    with torch.no_grad():
        feature.weights.normal_()
    m = sg.SGPR(X, y, kernel=se(), inducing_points=feature, noise_variance=0.2, chunk_size=25)
    assert isinstance(covariances.cross_covariance(m.feature, m.kernel), DeltasCrossCovariance)
    widths = []
    real = covariances.inducing_points.SquaredExponentialCrossCovariance.value

    def spy(self, Xb, out=None):
        result = real(self, Xb, out)
        widths.append(tuple(result.shape))
        return result

    monkeypatch.setattr(covariances.inducing_points.SquaredExponentialCrossCovariance, "value", spy)
    loss = m.training_loss()
    grads = torch.autograd.grad(loss, list(m.parameters()))
    # forward: 4 chunks, backward: 4 chunks recomputed once each — every evaluation M·C × B
    assert widths == [(M * C, 25), (M * C, 25), (M * C, 25), (M * C, 15)] * 2
    monkeypatch.undo()
    # against autograd on the dense objective through the generic Kuf of the pair
    dense = sg.SGPR(X, y, kernel=se(), inducing_points=sg.features.SumOfDeltas(
        feature.Z.detach(), feature.weights.detach()), noise_variance=0.2)
    monkeypatch.setattr(covariances.registry, "lookup_chunked", lambda f, k: None)
    monkeypatch.setattr(covariances.chunked, "lookup_chunked", lambda f, k: None)
    assert type(covariances.cross_covariance(dense.feature, dense.kernel)) is covariances.CrossCovariance
    dloss = dense.training_loss()
    assert float(dloss) == pytest.approx(float(loss), rel=1e-12)
    for g, h in zip(grads, torch.autograd.grad(dloss, list(dense.parameters()))):
        torch.testing.assert_close(g, h, rtol=1e-10, atol=1e-10)


DELTAS_PEAK = """
import resource, torch, sparsegp as sg
N, M, C = 100_000, 50, 20
g = torch.Generator().manual_seed(0)
X = torch.randn(N, 8, dtype=torch.float64, generator=g)
y = torch.randn(N, dtype=torch.float64, generator=g)
feature = sg.features.SumOfDeltas(X[: M * C].reshape(M, C, 8).clone(), torch.ones(M, C) / C)
m = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=[2.0] * 8),
            inducing_points=feature)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for _ in range(2):
    torch.autograd.grad(m.training_loss(), list(m.parameters()))
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


def test_sums_of_deltas_value_and_gradient_memory_stays_far_below_n_by_m_c():
    # an N×M·C float64 matrix is 800 MB here; the default chunks budget for M·C columns
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", DELTAS_PEAK], capture_output=True, text=True,
                         check=True)
    growth = int(out.stdout.strip().splitlines()[-1])
    assert growth < 128 * 2**20, f"peak memory grew by {growth / 2**20:.0f} MB"


def test_multiscale_windows_shrinking_to_zero_become_inducing_points():
    X, y = make_problem(5, N=60)
    Z = X[:6] + 0.1
    points = sg.SGPR(X, y, kernel=se(), inducing_points=Z, noise_variance=0.1)
    gaps = []
    for width in (1e-2, 1e-3, 1e-4):
        ms = sg.SGPR(X, y, kernel=se(), noise_variance=0.1,
                     inducing_points=sg.features.Multiscale(Z, width))
        gaps.append(abs(ms.log_marginal_likelihood() - points.log_marginal_likelihood()))
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-5
    assert gaps[1] / gaps[2] == pytest.approx(100.0, rel=0.2)  # O(δ²)


@pytest.mark.parametrize("name", ["points", "multiscale", "deltas", "tfif"])
def test_growing_any_feature_by_points_matches_the_rank_one_gain(name):
    X, y = make_problem(6, N=60)
    # no jitter: a relative jitter would differ between Kuu and the grown Kuu whenever the
    # feature's variances differ from k(z, z) (windows damp them)
    m = sg.SGPR(X, y, kernel=se(), inducing_points=FEATURES[name](X, 5), noise_variance=0.1,
                jitter=0.0)
    C = np.array([[0.5, -0.5], [2.0, 1.0], [-2.5, 0.3]])
    gain = inducing_gain(m, C)
    before = m.log_marginal_likelihood()
    m.add_inducing_points(C[gain.best][None, :])
    assert m.num_inducing == 6 and type(m.feature) is type(FEATURES[name](X, 5))
    # the extended feature's new variable is f(z) (up to 1e-6-wide windows): the gain is exact
    assert m.log_marginal_likelihood() - before == pytest.approx(gain.total[gain.best],
                                                                  rel=1e-6, abs=1e-7)


def test_fitc_gains_recompute_with_the_extended_feature():
    X, y = make_problem(7, N=50)
    feature = sg.features.Multiscale.from_data(X, 4)
    m = sg.SGPR(X, y, kernel=se(), inducing_points=feature, approximation="fitc",
                noise_variance=0.1)
    gain = inducing_gain(m, np.array([[1.0, 1.0]]))
    assert gain.method == "brute-force"
    m.add_inducing_points(np.array([[1.0, 1.0]]))
    assert gain.total[0] == pytest.approx(m.log_marginal_likelihood()
                                          - objective_terms(m, feature).total, rel=1e-9)


def test_frequency_features_cannot_grow_and_have_no_locations():
    X, y = make_problem(8, N=40)
    m = sg.SGPR(X, y, kernel=se(), inducing_points=FEATURES["fif"](X, 4))
    with pytest.raises(TypeError, match="cannot be extended"):
        m.add_inducing_points(X[:1])
    with pytest.raises(TypeError, match="no input locations"):
        m.inducing_points  # noqa: B018
    rep = quiet(m.diagnostics)  # correlations stand in for distances
    # the tighter bound uses data inputs alone (all 40 here): the exact evidence but for jitter
    assert rep.effective_num_inducing == 4 and rep.tight_num_inducing == 40
    assert rep.exact <= rep.tight_upper_bound <= rep.exact + 1e-2


def test_select_inducing_grows_a_multiscale_start():
    X, y = sg.datasets.snelson()
    start = sg.features.Multiscale.from_data(X, 3)
    model, curve = sg.select_inducing(X, y, kernel=sg.kernels.SquaredExponential(),
                                      initial_inducing=start, tol=0.05, max_inducing=25)
    assert isinstance(model.feature, sg.features.Multiscale) and model.num_inducing > 3
    assert all(b >= a - 1e-6 for a, b, r in zip(curve.lower, curve.lower[1:], curve.refitted[1:])
               if not r)  # greedy growth never lowers the bound


def test_standardised_inputs_take_features_in_the_units_of_x():
    X, y = make_problem(9, N=60)
    scale, shift = np.array([3.0, 0.5]), np.array([10.0, -2.0])
    Xu = X * scale + shift  # the same data in other units
    feats = {
        "multiscale": lambda Z: sg.features.Multiscale(Z, 0.3 * scale),
        "deltas": lambda Z: sg.features.SumOfDeltas(np.stack([Z, Z + 0.2 * scale], 1),
                                                    np.array([[1.0, 0.5]] * 5)),
        "tfif": lambda Z: sg.features.Fourier(np.ones((5, 2)) / scale, 0.3 * scale, Z,
                                              np.linspace(0, 1, 5)),
        "fif": lambda Z: sg.features.Fourier(np.ones((5, 2)) / scale, 0.3 * scale, None,
                                             np.linspace(0, 1, 5)),
    }
    Z = Xu[:5] + 0.1
    for name, make in feats.items():
        plain = sg.SGPR(Xu, y, kernel=sg.kernels.SquaredExponential(lengthscale=1.2 * scale),
                        inducing_points=make(Z), noise_variance=0.1)
        ell = 1.2 * scale / Xu.std(0, ddof=1)  # the same lengthscales in standardised units
        std = sg.SGPR(Xu, y, kernel=sg.kernels.SquaredExponential(lengthscale=ell),
                      inducing_points=make(Z), noise_variance=0.1, standardize_X=True)
        # the same GP and the same inducing variables: the same objective (frequency features
        # keep their windows at the origin of the units they were given in)
        assert std.log_marginal_likelihood() == pytest.approx(plain.log_marginal_likelihood(),
                                                              rel=1e-10), name


def test_bad_features_are_clear_errors():
    X, y = make_problem(10, N=30)
    with pytest.raises(ValueError, match=r"weights must have shape \[M, C\] = \[4, 2\]"):
        sg.features.SumOfDeltas(np.zeros((4, 2, 2)), np.ones((4, 3)))
    with pytest.raises(ValueError, match="scales must be finite and greater than"):
        sg.features.Multiscale(X[:4], -0.5)
    with pytest.raises(ValueError, match="widths must be finite and greater than"):
        sg.features.Fourier(np.zeros((4, 2)), np.array([0.5, -1.0]))
    with pytest.raises(ValueError, match=r"scales must be a scalar, \[D\]"):
        sg.features.Multiscale(X[:4], np.ones((4, 3)))
    with pytest.raises(TypeError, match=r"feature Multiscale with the kernel Matern32.*registered pairs"):
        sg.SGPR(X, y, kernel=sg.kernels.Matern32(), inducing_points=sg.features.Multiscale(X[:4], 0.5))
    with pytest.raises(TypeError, match="Multiscale with the kernel Matern32"):  # inside a sum
        sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential() + sg.kernels.Matern32(),
                inducing_points=sg.features.Multiscale(X[:4], 0.5))
    with pytest.raises(ValueError, match="inputs of dimension 3 but X has 2 columns"):
        sg.SGPR(X, y, inducing_points=sg.features.InducingPoints(np.zeros((4, 3))))


@pytest.mark.parametrize("whiten", [True, False])
def test_growing_svgp_extends_q_by_the_prior_conditional_so_the_elbo_is_unchanged(whiten):
    # q(u_new | u_old) = p(u_new | u_old) adds nothing to the KL and leaves q(f) as it was
    X, y = make_problem(11, N=60)
    labels = (y > np.median(y)).astype(float)
    sv = sg.SVGP(X, labels, kernel=se(), likelihood=sg.likelihoods.Bernoulli(),
                 inducing_points=FEATURES["multiscale"](X, 5), whiten=whiten, jitter=0.0)
    quiet(sv.fit, batch_size=30, epochs=2, progress=False)
    before = sv.log_marginal_likelihood()
    mean, var = sv.predict_f(X[:6])
    sv.add_inducing_points(X[10:13] + 0.3)
    assert sv.num_inducing == 8 and sv.q_mu.shape == (8, 1) and sv.q_sqrt.shape == (1, 8, 8)
    assert sv.log_marginal_likelihood() == pytest.approx(before, rel=1e-9)
    for a, b in zip(sv.predict_f(X[:6]), (mean, var)):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)


def test_sums_of_deltas_kuu_in_blocks_equals_one_block_with_the_same_gradient(monkeypatch):
    from sparsegp.covariances import deltas as delta_covariances

    X, _ = make_problem(12, N=40, D=2)
    feature = sg.features.SumOfDeltas.from_data(X, 6, num_deltas=3)
    with torch.no_grad():  # seeded: the same weights whatever ran before
        feature.weights.normal_(generator=torch.Generator().manual_seed(0))
    kernel = sg.kernels.Matern52(lengthscale=[0.7, 1.3]) + sg.kernels.SquaredExponential()
    whole = covariances.Kuu(feature, kernel)
    g_whole = torch.autograd.grad((whole * whole).sum(), [feature.Z, feature.weights,
                                                          *kernel.parameters()])
    monkeypatch.setattr(delta_covariances, "CHUNK_MEMORY_BYTES", 1)  # one row per block
    calls, real = [], delta_covariances._block
    monkeypatch.setattr(delta_covariances, "_block",
                        lambda f, k, i, rows: calls.append(rows) or real(f, k, i, rows))
    blocked = covariances.Kuu(feature, kernel)
    torch.testing.assert_close(blocked, whole, rtol=1e-14, atol=1e-14)
    g_blocked = torch.autograd.grad((blocked * blocked).sum(), [feature.Z, feature.weights,
                                                                *kernel.parameters()])
    assert calls == [1] * 12  # six rows forward, each recomputed once backward
    with torch.no_grad():
        torch.testing.assert_close(covariances.Kuu(feature, kernel), whole, rtol=1e-14, atol=1e-14)
    for a, b in zip(g_blocked, g_whole):  # sums in another order: rounding of ~1e-13
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
