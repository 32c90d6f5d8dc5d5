"""The bounds and diagnostics of streamed models (`objectives.online.bounds`,
`diagnostics.streamed`): the streamed VFE bound ≤ the evidence of the new batch given the
summary ≤ the upper bound, against a dense evaluation written here from the kernel matrices;
the evidence itself against the exact GP where the summary loses nothing; the bounds meeting
when the inducing inputs hold the new inputs and the old inducing inputs; the report's pieces;
a streamed SVGP's old posterior as pseudo-observations, and the refusals that remain."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar
from torch.distributions import MultivariateNormal

import sparsegp as sg
from sparsegp.diagnostics import LatentDiagnostics, inducing_gain
from sparsegp.diagnostics.placement import inducing_placement
from sparsegp.models.sgpr.streaming import update
from sparsegp.objectives.online.bounds import streaming_bounds, summary_of_posterior
from sparsegp.objectives.online.regression import streaming_objective

pytestmark = pytest.mark.filterwarnings("ignore::sparsegp.ApproximationWarning",
                                        "ignore::sparsegp.linalg.JitterWarning")

APPROXIMATIONS = [("vfe", None), ("pep", 0.5), ("fitc", None)]


def data(n=40, seed=0, low=0.0, high=6.0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(low, high, (n, 1)), 0)
    return X, np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 0] + 0.1 * rng.standard_normal(n)


def old_model(X, y, Z, approximation="vfe", alpha=None, lengthscale=1.1, noise=0.05):
    m = sg.SGPR(X, y, inducing_points=Z, approximation=approximation, alpha=alpha, jitter=0.0,
                standardize_y=False)
    with torch.no_grad():
        m.kernel.set_value("lengthscale", lengthscale)
        m.kernel.set_value("variance", 0.9)
        m.set_value("noise_variance", noise)
    return m


def dense_evidence(new, old_kernel):
    """log N([y; h]; 0, K̂ + blockdiag(σ²I, I)) − log p_old(h), from the kernel matrices:
    K̂ = P K([X; Z_a]) Pᵀ with P = blockdiag(I, Tᵀ), and p_old(h) = N(0, I + TᵀK'_aa T) from
    the old kernel (no jitter)."""
    s = new.old_summary()
    X, y = new.X, new.y
    N, r = X.shape[0], s.T.shape[1]
    with torch.no_grad():
        noise = (new.likelihood.value("variance") if isinstance(new, sg.SVGP)
                 else new.noise_rows())
        K = new.kernel.K(torch.cat([X, s.Z]))
        P = torch.block_diag(torch.eye(N, dtype=K.dtype), s.T.mT)
        cov = P @ K @ P.mT + torch.diag(torch.cat([noise.expand(N),
                                                   torch.ones(r, dtype=K.dtype)]))
        joint = MultivariateNormal(torch.zeros(N + r, dtype=K.dtype), cov)
        p_old = MultivariateNormal(torch.zeros(r, dtype=K.dtype),
                                   torch.eye(r, dtype=K.dtype) + s.T.mT @ old_kernel.K(s.Z) @ s.T)
        return float(joint.log_prob(torch.cat([y, s.h])) - p_old.log_prob(s.h))


@pytest.mark.parametrize("approximation,alpha", APPROXIMATIONS)
@pytest.mark.parametrize("moved", [False, True])
def test_the_streamed_bounds_sandwich_the_dense_evidence(approximation, alpha, moved):
    X, y = data(40)
    old = old_model(X[:20], y[:20], np.linspace(0.0, 3.5, 5)[:, None], approximation, alpha)
    new = update(old, X[20:], y[20:], inducing_points=np.linspace(2.0, 6.0, 4)[:, None],
                 fit=False)
    if moved:  # new hyperparameters: K_aa is no longer the old prior's
        with torch.no_grad():
            new.kernel.set_value("lengthscale", 0.8)
            new.kernel.set_value("variance", 1.3)
            new.set_value("noise_variance", 0.08)
    exact = dense_evidence(new, old.kernel)
    with torch.no_grad():
        lower, upper = (float(v) for v in streaming_bounds(new.streaming_problem()))
    objective = new.log_marginal_likelihood()
    assert lower < exact < upper
    assert upper - lower > 1.0  # four inducing inputs: the bounds are apart
    assert objective <= upper  # every member is below U at the same inducing inputs
    assert new.upper_bound() == pytest.approx(upper, rel=1e-12)
    if approximation == "vfe":
        assert objective == pytest.approx(lower, rel=1e-12)
    rep = new.diagnostics()
    assert rep.exact == pytest.approx(exact, rel=1e-9)
    assert rep.lower_bound == pytest.approx(lower, rel=1e-12)
    assert rep.upper_bound == pytest.approx(upper, rel=1e-12)
    assert rep.objective == pytest.approx(objective, rel=1e-12)
    assert rep.lower_bound <= rep.exact <= rep.tight_upper_bound <= rep.upper_bound


def test_with_an_exact_summary_the_evidence_is_the_gp_predictive_density():
    # old inducing inputs = old inputs, no jitter: q_old(a)/p_old(a) ∝ p(y_old | a), so the
    # evidence given the summary is log p(y_new | y_old) = log p(y) − log p(y_old)
    X, y = data(30)
    Xo, yo = X[::2], y[::2]
    old = old_model(Xo, yo, Xo, lengthscale=0.7)
    new = update(old, X[1::2], y[1::2], inducing_points=3, fit=False)
    rep = new.diagnostics()
    with torch.no_grad():
        Xa = torch.cat([new.X, old.X])
        ya = torch.cat([new.y, old.y])

        def log_evidence(X_, y_):
            K = old.kernel.K(X_) + 0.05 * torch.eye(X_.shape[0], dtype=X_.dtype)
            return float(MultivariateNormal(torch.zeros_like(y_), K).log_prob(y_))

        predictive = log_evidence(Xa, ya) - log_evidence(old.X, old.y)
    assert rep.exact == pytest.approx(predictive, rel=1e-7)
    assert rep.lower_bound < predictive < rep.upper_bound


@pytest.mark.parametrize("approximation,alpha", APPROXIMATIONS)
def test_the_bounds_meet_with_the_new_inputs_and_the_old_inducing_inputs(approximation, alpha):
    X, y = data(18)
    Z_old = np.linspace(0.0, 3.0, 4)[:, None] + 0.05
    old = old_model(X[:9], y[:9], Z_old, approximation, alpha, lengthscale=0.6)
    new = update(old, X[9:], y[9:], inducing_points=np.concatenate([X[9:], Z_old]),
                 fit=False)
    exact = dense_evidence(new, old.kernel)
    with torch.no_grad():
        lower, upper = (float(v) for v in streaming_bounds(new.streaming_problem()))
    assert lower == pytest.approx(exact, abs=1e-7)
    assert upper == pytest.approx(exact, abs=1e-7)
    # FITC and PEP keep nothing of K̂ − Q̂ here either: their objective is the evidence too
    assert new.log_marginal_likelihood() == pytest.approx(exact, abs=1e-7)


def test_the_tighter_bound_adds_the_old_inducing_inputs():
    X, y = data(24)
    Z_old = np.linspace(0.0, 3.0, 4)[:, None] + 0.05
    old = old_model(X[:12], y[:12], Z_old, lengthscale=0.6)
    new = update(old, X[12:], y[12:], inducing_points=2, fit=False)
    rep = new.diagnostics(extra_inducing=12)  # every new input
    exact = dense_evidence(new, old.kernel)
    assert rep.tight_num_inducing == 2 + 4 + 12
    assert rep.upper_bound - exact > 1.0
    assert rep.tight_upper_bound == pytest.approx(exact, abs=1e-6)
    assert rep.certified_gap == pytest.approx(exact - rep.lower_bound, abs=1e-6)


def test_a_fitc_objective_above_the_evidence_is_reported():
    X, y = data(60, seed=1)
    old = old_model(X[:30], y[:30], np.linspace(0.0, 3.0, 4)[:, None], "fitc")
    new = update(old, X[30:], y[30:], inducing_points=3, fit=False)
    with torch.no_grad():
        new.set_value("noise_variance", 1e-4)  # FITC's favourite: a collapsed noise
    rep = new.diagnostics()
    assert rep.objective > rep.exact + 1.0  # FITC over-estimates the streamed evidence
    assert rep.exceeds_upper_bound
    assert any("exceeds" in w for w in rep.warnings)
    assert rep.supported_noise is not None and rep.supported_noise > 10 * 1e-4


def test_the_noise_check_conditions_on_the_summary():
    X, y = data(40, seed=2)
    old = old_model(X[:20], y[:20], np.linspace(0.0, 3.5, 5)[:, None])
    new = update(old, X[20:], y[20:], inducing_points=4, fit=False)
    rep = new.diagnostics()

    def minus_evidence(log_noise):
        with torch.no_grad():
            new.set_value("noise_variance", math.exp(log_noise))
        return -dense_evidence(new, old.kernel)

    best = math.exp(minimize_scalar(minus_evidence, bounds=(-12.0, 2.0), method="bounded",
                                    options={"xatol": 1e-6}).x)
    assert rep.supported_noise == pytest.approx(best, rel=0.05)  # the grid's 4 % step


def test_the_placement_checks_count_the_old_inducing_inputs_as_data():
    X, y = data(40)
    Z_old = np.linspace(0.0, 2.5, 4)[:, None]
    old = old_model(X[:20], y[:20], Z_old, "fitc", lengthscale=0.5)
    inputs = np.array([[0.2], [4.0], [5.0], [5.8]])  # one sits on the old data only
    new = update(old, X[X[:, 0] > 3.5], y[X[:, 0] > 3.5], inducing_points=inputs, fit=False)
    rep = new.diagnostics()
    alone = inducing_placement(new.feature, new.kernel, new.X, 0.05, 3.0)
    assert alone.far == [0]  # judged by the new batch alone, it would be "far from the data"
    assert rep.far_inducing == []


def test_the_report_says_what_it_does_not_compute():
    X, y = data(40)
    old = old_model(X[:20], y[:20], np.linspace(0.0, 3.5, 5)[:, None])
    new = update(old, X[20:], y[20:], inducing_points=4, fit=False)
    rep = new.diagnostics(exact_max_data=10)
    assert rep.exact is None and rep.quadratic_upper_bound is None
    assert rep.supported_noise is not None  # on 10 random rows, given the summary
    text = str(rep)
    assert "quadratic-form upper bound: not computed" in text
    assert "exact evidence: not computed (N + r = 25 > exact_max_data = 10)" in text
    assert "given the summary of the data before it (5 pseudo-observations)" in text
    assert sg.diagnostics.diagnose(new).upper_bound == new.diagnostics().upper_bound
    with pytest.raises(TypeError, match="gains of a StreamingSGPR are not computed"):
        inducing_gain(new, X[:3])


def gaussian_svgp(X, y, Z, lengthscale=1.1):
    m = sg.SVGP(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=lengthscale, variance=0.9),
                likelihood=sg.likelihoods.Gaussian(0.05), inducing_points=Z, jitter=0.0,
                standardize_y=False)
    m.natural_gradient_step(1.0)
    return m


def test_an_svgp_old_posterior_is_the_summary_of_pseudo_observations():
    X, y = data(30)
    old = gaussian_svgp(X[:15], y[:15], np.linspace(0.0, 3.0, 5)[:, None])
    new = old.update(X[15:], y[15:], inducing_points=4, fit=False)
    post, s = new.old_posterior(), new.old_summary()
    assert s.T.shape == (5, 5)
    # log q_old(w) − log p_old(w) = log N(h; Tᵀa, I) − log p_old(h) for any a = L'w
    qo = MultivariateNormal(post.mean[:, 0], scale_tril=post.root[0])
    po = MultivariateNormal(torch.zeros(5, dtype=s.T.dtype), torch.eye(5, dtype=s.T.dtype))
    w = torch.randn(7, 5, generator=torch.Generator().manual_seed(0), dtype=s.T.dtype)
    lhs = qo.log_prob(w) - po.log_prob(w)
    a = w @ post.L.mT
    rhs = (-0.5 * ((s.h - a @ s.T) ** 2).sum(1) + s.offset)
    torch.testing.assert_close(lhs, rhs, rtol=1e-9, atol=1e-9)


def test_a_gaussian_streamed_svgp_is_sandwiched():
    X, y = data(30)
    old = gaussian_svgp(X[:15], y[:15], np.linspace(0.0, 3.0, 5)[:, None])
    new = old.update(X[15:], y[15:], inducing_points=4, fit=False)
    new.natural_gradient_step(1.0)  # the optimal q(b): the ELBO reaches the collapsed bound
    rep = new.diagnostics()
    assert rep.approximation == "streamed ELBO"
    assert rep.objective == pytest.approx(new.log_marginal_likelihood(), rel=1e-12)
    assert rep.objective == pytest.approx(rep.lower_bound, rel=1e-9)
    assert rep.lower_bound < rep.exact < rep.upper_bound
    assert new.upper_bound() == pytest.approx(rep.upper_bound, rel=1e-12)
    assert rep.exact == pytest.approx(dense_evidence(new, old.kernel), rel=1e-9)


def test_an_old_posterior_broader_than_the_prior_has_no_upper_bound():
    X, y = data(30)
    old = gaussian_svgp(X[:15], y[:15], np.linspace(0.0, 3.0, 5)[:, None])
    with torch.no_grad():
        old.q_sqrt.copy_(1.5 * torch.eye(5, dtype=old.q_sqrt.dtype))  # whitened: wider than N(0, I)
    new = old.update(X[15:], y[15:], inducing_points=4, fit=False)
    with pytest.raises(ValueError, match="broader than the old prior"):
        new.upper_bound()
    with pytest.raises(ValueError, match="broader than the old prior"):
        summary_of_posterior(new.old_posterior())
    rep = new.diagnostics()
    assert isinstance(rep, LatentDiagnostics)
    assert "broader than the old prior" in rep.no_upper_bound
    assert rep.objective == pytest.approx(new.log_marginal_likelihood(), rel=1e-12)
    assert rep.num_data == 15


def test_a_non_gaussian_streamed_svgp_reports_its_bound_only():
    X, y = data(30)
    yb = (y > np.median(y)).astype(float)
    old = sg.SVGP(X[:15], yb[:15], likelihood=sg.likelihoods.Bernoulli(),
                  inducing_points=np.linspace(0.0, 3.0, 4)[:, None])
    new = old.update(X[15:], yb[15:], inducing_points=np.array([[0.5], [4.0], [5.0]]),
                     fit=False)
    rep = new.diagnostics()
    assert isinstance(rep, LatentDiagnostics)
    assert rep.num_data == 15 and rep.no_upper_bound == "for a Bernoulli likelihood"
    assert rep.objective == pytest.approx(new.log_marginal_likelihood(), rel=1e-12)
    assert rep.far_inducing == []  # 0.5 sits among the old inducing inputs
    with pytest.raises(ValueError, match="need a Gaussian likelihood"):
        new.upper_bound()


def test_the_streamed_objective_is_what_the_bounds_bracket():
    # the streamed FITC objective of `objectives.online` at the model's inducing inputs
    X, y = data(40)
    old = old_model(X[:20], y[:20], np.linspace(0.0, 3.5, 5)[:, None], "fitc")
    new = update(old, X[20:], y[20:], inducing_points=4, fit=False)
    with torch.no_grad():
        F = float(streaming_objective(new.streaming_problem()))
    assert new.diagnostics().objective == pytest.approx(F, rel=1e-12)
