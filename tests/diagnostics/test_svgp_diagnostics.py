"""SVGP.diagnostics() and SVGP.upper_bound(): the ELBO at q(u) against the bounds that sandwich
log p(y) (a Gaussian likelihood; other likelihoods and several outputs are refused)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import sparsegp as sg

from ..conftest import make_problem


def _models(seed=0, mean=None, **kw):
    """An SVGP and an SGPR (VFE) with the same kernel, inducing inputs, noise and prior mean,
    on y as given (the dense reference's units)."""
    X, y = make_problem(seed, N=40, D=2)
    kw.setdefault("standardize_y", False)
    Z = X[:: 5]
    k = lambda: sg.kernels.SquaredExponential(lengthscale=0.8, variance=1.3)  # noqa: E731
    sv = sg.SVGP(X, y, kernel=k(), likelihood=sg.likelihoods.Gaussian(variance=0.1),
                 inducing_points=Z, mean=mean() if mean else None, **kw)
    sr = sg.SGPR(X, y, kernel=k(), inducing_points=Z, noise_variance=0.1,
                 mean=mean() if mean else None, **kw)
    return X, y, sv, sr


def _dense_exact(X, y, noise, mean_values=0.0):
    """log N(y; m, K + σ²I) evaluated densely with numpy (SE kernel, lengthscale 0.8, var 1.3)."""
    d2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    C = 1.3 * np.exp(-0.5 * d2 / 0.8**2) + noise * np.eye(len(X))
    r = y - mean_values
    sign, logdet = np.linalg.slogdet(C)
    return -0.5 * (r @ np.linalg.solve(C, r) + logdet + len(X) * np.log(2 * np.pi))


@pytest.mark.parametrize("mean", [None, lambda: sg.means.Linear(weights=[0.4, -0.3], bias=0.5)])
def test_bounds_sandwich_the_dense_evidence_and_equal_sgpr(mean):
    X, y, sv, sr = _models(mean=mean)
    sv.natural_gradient_step(1.0)  # the optimal q(u): the ELBO equals the collapsed bound
    rep, ref = sv.diagnostics(), sr.diagnostics()
    offset = 0.0 if mean is None else X @ np.array([0.4, -0.3]) + 0.5
    exact = _dense_exact(X, y, 0.1, offset)
    assert rep.exact == pytest.approx(exact, rel=1e-10)
    assert rep.lower_bound <= exact <= rep.upper_bound
    assert rep.lower_bound == pytest.approx(ref.lower_bound, rel=1e-12)
    assert rep.upper_bound == pytest.approx(ref.upper_bound, rel=1e-12)
    assert sv.upper_bound() == pytest.approx(sr.upper_bound(), rel=1e-12)
    assert rep.objective == pytest.approx(sv.log_marginal_likelihood(), rel=1e-12)
    assert rep.objective == pytest.approx(rep.lower_bound, rel=1e-9)
    assert rep.approximation == "ELBO" and rep.model == "SVGP (ELBO, M = 8)"
    assert not any("q(u)" in w for w in rep.warnings)


def test_a_q_u_far_from_its_optimum_is_reported_and_the_elbo_stays_below_the_bound():
    X, y, sv, _ = _models(seed=1)
    with torch.no_grad():  # a q(u) far from the data's
        sv.q_mu.fill_(3.0)
    rep = sv.diagnostics()
    assert rep.objective < rep.lower_bound - 0.1 * len(X)
    assert rep.objective == pytest.approx(sv.log_marginal_likelihood(), rel=1e-12)
    assert any("q(u) is far from its optimum" in w for w in rep.warnings)
    assert "objective (ELBO)" in str(rep)
    # a looser threshold accepts it; the optimal q(u) removes the warning
    assert not any("q(u)" in w for w in sv.diagnostics(gap_per_point=1e6).warnings)
    sv.natural_gradient_step(1.0)
    assert not any("q(u)" in w for w in sv.diagnostics().warnings)


def test_standardized_inputs_are_diagnosed_in_the_users_units():
    X, y, sv, sr = _models(seed=2, standardize_X=True)
    sv.natural_gradient_step(1.0)
    assert sv.diagnostics().lower_bound == pytest.approx(sr.diagnostics().lower_bound, rel=1e-12)


def test_other_likelihoods_and_several_outputs_get_the_report_without_bounds():
    X, y = make_problem(3, N=30, D=1)
    clf = sg.SVGP(X, (y > 0).astype(float), likelihood=sg.likelihoods.Bernoulli(),
                  inducing_points=5)
    assert isinstance(clf.diagnostics(), sg.diagnostics.LatentDiagnostics)  # no sandwich
    with pytest.raises(ValueError, match="Gaussian likelihood; this SVGP's is Bernoulli"):
        clf.upper_bound()
    multi = sg.SVGP(X, np.stack([y, -y], 1), inducing_points=5)
    assert isinstance(multi.diagnostics(), sg.diagnostics.LatentDiagnostics)
    with pytest.raises(ValueError, match="one output; this SVGP has 2"):
        multi.upper_bound()
    with pytest.raises(TypeError, match="GPR, SGPR, SVGP"):
        sg.diagnostics.diagnose(object())


def test_a_full_batch_fit_is_checked_as_sgpr_fit_is():
    X, y = sg.datasets.snelson()
    def model():  # three clumped inducing points: far too few
        return sg.SVGP(X, y, kernel=sg.kernels.SquaredExponential(), inducing_points=X[:3])

    with pytest.warns(sg.ApproximationWarning, match="SVGP .*not certified"):
        model().fit(maxiter=30)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sg.ApproximationWarning)
        model().fit(maxiter=30, diagnose=False)
        model().fit(batch_size=50, epochs=1, progress=False)  # a minibatch fit: not checked


def test_a_mean_field_q_u_is_named_and_its_gap_explained():
    X, y = sg.datasets.snelson()
    Z = X[::20]
    sv = sg.SVGP(X, y, kernel=sg.kernels.SquaredExponential() + sg.kernels.Matern32(),
                 inducing_points=sg.features.Stacked([sg.features.InducingPoints(Z),
                                                      sg.features.InducingPoints(Z + 0.1)]),
                 mean_field=True)
    rep = sv.diagnostics()
    assert rep.approximation == "ELBO, mean-field q(u)"
    assert rep.objective <= rep.lower_bound
    assert any("a mean-field q(u) cannot reach it" in w for w in rep.warnings)
