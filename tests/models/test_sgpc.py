"""SGPC: Power-EP sparse classification — fixed points, energies, accuracy, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.diagnostics.convergence import ConvergenceWarning
from sparsegp.objectives import pep_classification as pep

from ..conftest import make_problem


def kernel():
    return sg.kernels.SquaredExponential(lengthscale=[0.9, 1.4], variance=1.2)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.1])
def test_gaussian_likelihood_converges_to_the_collapsed_power_ep_solution(alpha):
    X, y = make_problem(0, N=60)
    Z = X[:8] + 0.1
    clf = sg.SGPC(X, y, kernel=kernel(), inducing_points=Z, alpha=alpha,
                  likelihood=sg.likelihoods.Gaussian(0.1))
    info = clf.update_sites(max_sweeps=500, tol=1e-14)
    assert info["skipped_updates"] == 0 and info["sweeps"] < 500
    reg = sg.SGPR(X, y, kernel=kernel(), inducing_points=Z, approximation="pep", alpha=alpha,
                  noise_variance=0.1, standardize_y=False)  # as SGPC: y as given
    d = clf.site_marginals().d
    torch.testing.assert_close(clf.tau, 1.0 / (alpha * d + 0.1), rtol=1e-12, atol=0)  # docs/math.md §5
    torch.testing.assert_close(clf.nu / clf.tau, clf.y, rtol=1e-12, atol=1e-12)
    assert clf.log_marginal_likelihood() == pytest.approx(reg.log_marginal_likelihood(), rel=1e-13)
    for a, b in zip(clf.predict_f(X[:7]), reg.predict_f(X[:7])):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)
    # the energy's gradient at the fixed point equals the collapsed objective's
    g_clf = torch.autograd.grad(clf.training_loss(), [clf.feature.Z, *clf.kernel.parameters()])
    g_reg = torch.autograd.grad(reg.training_loss(), [reg.feature.Z, *reg.kernel.parameters()])
    for a, b in zip(g_clf, g_reg):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_stable_site_expectation_equals_the_textbook_form():
    rng = np.random.default_rng(0)
    mu_c, s_c = torch.as_tensor(rng.normal(size=50)), torch.as_tensor(rng.uniform(0.1, 3, 50))
    tau, g = torch.as_tensor(rng.uniform(0.01, 5, 50)), torch.as_tensor(rng.normal(size=50))
    for alpha in (1.0, 0.3, 1e-3):
        got = pep.log_site_expectation(mu_c, s_c, tau, g * tau, alpha)
        w = s_c + 1.0 / (alpha * tau)  # docs/math.md §5
        ref = (0.5 * torch.log(1.0 / (alpha * tau)) - 0.5 * torch.log(w)
               - (mu_c - g) ** 2 / (2 * w) + 0.5 * alpha * tau * g * g)
        torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-12)
    zero = torch.zeros(50, dtype=torch.float64)
    assert torch.all(pep.log_site_expectation(mu_c, s_c, zero, zero, 0.5) == 0)  # no site yet


def banana(N, seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (N, 2))
    p = 1 / (1 + np.exp(-4 * np.sin(X[:, 0]) * np.cos(X[:, 1])))
    return X, (rng.uniform(size=N) < p).astype(float)


def test_accuracy_is_well_below_chance_and_close_to_a_dense_ep_classifier():
    X, y = banana(300, 0)
    Xt, yt = banana(2000, 1)
    sparse = sg.SGPC(X, y, inducing_points=25, alpha=0.5)
    res = sparse.fit()
    err = np.mean(sparse.predict(Xt) != yt)
    dense = sg.SGPC(X, y, kernel=sg.kernels.SquaredExponential(
        lengthscale=sparse.kernel.lengthscale, variance=sparse.kernel.variance),
        inducing_points=X, alpha=1.0)  # Z = X, α = 1: full EP at the same hyperparameters
    dense.update_sites()
    err_dense = np.mean(dense.predict(Xt) != yt)
    assert res.success and err < 0.3 and abs(err - err_dense) < 0.03
    p = sparse.predict_proba(Xt)
    assert p.shape == (2000,) and np.all((p > 0) & (p < 1))
    # calibrated-ish: the mean predicted probability of the positive class matches the data
    assert abs(p.mean() - yt.mean()) < 0.05


def test_minus_one_plus_one_labels_and_the_stochastic_schedule():
    X, y = banana(300, 2)
    clf = sg.SGPC(X, 2 * y - 1, inducing_points=20, alpha=0.5)
    start = clf.log_marginal_likelihood()
    res = clf.fit(schedule="stochastic", epochs=10, batch_size=100, lr=0.05)
    assert res.info["steps"] == 30 and clf.log_marginal_likelihood() > start
    assert set(np.unique(clf.predict(X))) <= {-1, 1}
    assert np.mean(clf.predict(X) == 2 * y - 1) > 0.7


def test_bool_labels_predict_as_bools_and_give_the_same_fit_as_zero_one_labels(tmp_path):
    X, y = banana(120, 3)
    as_bool, as_int = (sg.SGPC(X, labels, inducing_points=10) for labels in (y > 0.5, y))
    for clf in (as_bool, as_int):
        clf.fit(maxiter=2, inner_maxiter=5)
    np.testing.assert_array_equal(as_bool.predict_proba(X), as_int.predict_proba(X))
    predicted = as_bool.predict(X)
    assert predicted.dtype == np.bool_ and as_bool.classes == [False, True]
    np.testing.assert_array_equal(predicted, as_int.predict(X) == 1)
    as_bool.save(tmp_path / "c")
    assert sg.load(tmp_path / "c").predict(X[:5]).dtype == np.bool_


class _Broken(sg.likelihoods.Bernoulli):
    """Tilted moments with a positive second derivative for every third point."""

    def tilted_moments(self, mean, var, y, alpha):
        logZ, d1, d2 = super().tilted_moments(mean, var, y, alpha)
        bad = torch.arange(mean.shape[0]) % 3 == 0
        return logZ, d1, torch.where(bad, d2.abs() + 1.0, d2)


def test_updates_that_would_make_a_site_precision_negative_are_skipped_and_counted():
    X, y = banana(60, 3)
    clf = sg.SGPC(X, y, inducing_points=10, likelihood=_Broken())
    info = clf.update_sites(max_sweeps=5)
    assert info["skipped_updates"] == 20 * info["sweeps"]
    assert torch.all(clf.tau[::3] == 0) and torch.all(clf.tau >= 0)
    assert torch.all(clf.tau[1::3] > 0)


def test_bad_input_is_a_clear_error():
    X, y = banana(40, 4)
    with pytest.raises(ValueError, match="labels must be binary"):
        sg.SGPC(X, np.arange(40.0) % 3, inducing_points=5)
    with pytest.raises(ValueError, match="y contains NaN"):
        sg.SGPC(X, np.where(np.arange(40) == 3, np.nan, y), inducing_points=5)
    with pytest.raises(ValueError, match="y must be a vector of 40 labels"):
        sg.SGPC(X, y[:30], inducing_points=5)
    for alpha in (0.0, 1.5):
        with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\]"):
            sg.SGPC(X, y, inducing_points=5, alpha=alpha)
    with pytest.raises(ValueError, match="link"):
        sg.SGPC(X, y, inducing_points=5, link="cauchit")
    with pytest.raises(ValueError, match="damping"):
        sg.SGPC(X, y, inducing_points=5, damping=0.0)
    with pytest.raises(ValueError, match="schedule"):
        sg.SGPC(X, y, inducing_points=5).fit(schedule="online")
    assert math.isfinite(sg.SGPC(X, y, inducing_points=5).log_marginal_likelihood())


def test_the_full_schedule_stops_once_a_round_gains_less_than_the_stall_threshold():
    """Default: a round changing the energy by less than 0.1·max(1, N/1000) nats ends the
    fit (converged); with tol= given, only the relative rule and the round limit do."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(300, 3))
    y = (np.sin(6 * X[:, 0]) + X[:, 1] + 0.3 * rng.standard_normal(300) > 0.5).astype(float)
    result = sg.SGPC(X, y, inducing_points=10).fit(progress=False)
    assert result.success and "changed the energy by less than 0.1 nats" in result.message
    assert abs(result.history[-1] - result.history[-2]) < 0.1
    assert all(abs(b - a) >= 0.1 for a, b in zip(result.history[:-2], result.history[1:-1]))
    with pytest.warns(ConvergenceWarning, match="round limit"):
        limited = sg.SGPC(X, y, inducing_points=10).fit(progress=False, tol=1e-12,
                                                        maxiter=result.iterations + 2)
    assert limited.iterations == result.iterations + 2 and not limited.success
