"""diagnose(): sandwich bounds on log p(y) and the checks of Bauer et al. (2016)."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.diagnostics import Diagnostics, diagnose

from ..conftest import make_problem


def _exact_at(model):
    """log p(y) of an exact GP with the model's hyperparameters (an independent evaluation)."""
    X = (model.X * model.x_scale + model.x_shift).numpy()
    y = (model.y * model.y_scale + model.y_shift).numpy()
    k = sg.kernels.SquaredExponential(lengthscale=model.kernel.lengthscale,
                                      variance=model.kernel.variance)
    return sg.GPR(X, y, kernel=k, noise_variance=model.noise_variance).log_marginal_likelihood()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("approx,alpha", [("vfe", None), ("fitc", None), ("pep", 0.3)])
def test_upper_bound_above_exact_above_vfe(seed, approx, alpha):
    rng = np.random.default_rng(seed)
    X, y = make_problem(seed, N=int(rng.integers(20, 60)), D=int(rng.integers(1, 4)))
    M = int(rng.integers(2, 10))
    k = sg.kernels.SquaredExponential(lengthscale=float(rng.uniform(0.3, 3)),
                                      variance=float(rng.uniform(0.5, 2)))
    m = sg.SGPR(X, y, kernel=k, inducing_points=M, approximation=approx, alpha=alpha,
                noise_variance=float(rng.uniform(0.01, 0.5)), seed=seed)
    rep = diagnose(m)
    exact = _exact_at(m)
    assert rep.exact == pytest.approx(exact, rel=1e-10)
    assert rep.lower_bound <= exact + 1e-8
    assert exact <= rep.upper_bound + 1e-8
    assert exact <= rep.tight_upper_bound + 1e-8
    assert rep.tight_upper_bound <= rep.upper_bound + 1e-8
    assert rep.gap == pytest.approx(rep.upper_bound - rep.lower_bound)
    assert rep.objective == pytest.approx(m.log_marginal_likelihood())
    if approx == "vfe":
        assert rep.lower_bound == rep.objective


def test_gap_closes_as_M_grows_to_N_with_Z_equal_X():
    X, y = make_problem(1, N=30, D=2)
    order = np.random.default_rng(0).permutation(30)
    gaps, lowers = [], []
    k = sg.kernels.SquaredExponential(lengthscale=1.0, variance=1.0)
    for M in (3, 8, 15, 22, 30):
        m = sg.SGPR(X, y, kernel=k, inducing_points=X[order[:M]], noise_variance=0.05,
                    jitter=1e-12)
        rep = diagnose(m)
        gaps.append(rep.gap)
        lowers.append(rep.lower_bound)
    exact = _exact_at(m)
    assert all(a > b for a, b in zip(gaps, gaps[1:])), gaps  # nested Z: the gap shrinks
    assert all(a <= b + 1e-9 for a, b in zip(lowers, lowers[1:]))
    assert gaps[0] > 1.0
    assert gaps[-1] < 1e-6 * (1 + abs(exact))  # Z = X: lower = exact = upper
    assert lowers[-1] == pytest.approx(exact, abs=1e-6)


def test_gpr_bounds_equal_the_exact_evidence_and_noise_is_checked():
    X, y = make_problem(2, N=30)
    e = sg.GPR(X, y, kernel=sg.kernels.SquaredExponential(), noise_variance=0.05)
    rep = diagnose(e)
    lml = e.log_marginal_likelihood()
    assert rep.objective == rep.lower_bound == rep.upper_bound == rep.exact == lml
    assert rep.gap == 0.0 and rep.effective_num_inducing is None and rep.warnings == []
    e.noise_variance = 1e-5 * np.var(y, ddof=1)
    rep = diagnose(e)
    assert rep.noise_ratio == pytest.approx(1e-5, rel=1e-3)
    assert len(rep.warnings) == 1 and "collapsed" in rep.warnings[0]


def test_flags_collapsed_noise():
    X, y = sg.datasets.snelson()
    m = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=0.6), inducing_points=15,
                approximation="fitc", noise_variance=2e-5)
    rep = diagnose(m)
    assert rep.noise_ratio == pytest.approx(2e-5 / np.var(y, ddof=1), rel=1e-6)
    assert any("collapsed" in w and "FITC" in w for w in rep.warnings)
    m.noise_variance = 0.08  # a healthy noise level: that warning goes away
    assert not any("collapsed" in w for w in diagnose(m).warnings)


def test_flags_merged_inducing_inputs():
    X, y = sg.datasets.snelson()
    Z = np.linspace(0.2, 5.8, 12)[:, None]
    Z[3] = Z[2] + 1e-3  # 0.0017 lengthscales apart
    Z[8] = Z[7] - 2e-3
    Z[9] = Z[7] + 1e-3  # a group of three
    m = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=0.6), inducing_points=Z,
                noise_variance=0.08)
    rep = diagnose(m)
    assert rep.effective_num_inducing == 9
    assert sorted(rep.merged_pairs) == [(2, 3), (7, 8), (7, 9), (8, 9)]
    assert any("effectively M = 9 of 12" in w for w in rep.warnings)
    assert "effectively 9" in str(rep)
    assert diagnose(m, merge_fraction=2e-3).effective_num_inducing == 10  # 2–3 and 7–9: 1.7e-3 ℓ


def test_flags_inducing_inputs_far_from_data():
    X, y = sg.datasets.snelson()
    Z = np.vstack([np.linspace(0.2, 5.8, 10)[:, None], [[12.0]]])  # 6 from the data, ℓ = 0.6
    m = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=0.6), inducing_points=Z,
                noise_variance=0.08)
    rep = diagnose(m)
    assert rep.far_inducing == [10]
    # VFE loses nothing by an idle inducing variable: reported, not warned about, while the
    # approximation is close to the exact GP (log p(y) 4.1 nats above the bound here)
    assert rep.exact - rep.lower_bound < 0.1 * rep.num_data and rep.warnings == []
    fitc = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=0.6),
                   inducing_points=Z, noise_variance=0.08, approximation="fitc")
    assert any("farther than 3 lengthscales" in w for w in diagnose(fitc).warnings)
    assert diagnose(m, far_lengthscales=20.0).far_inducing == []


def test_flags_fitc_over_estimating_the_evidence():
    X, y = sg.datasets.snelson()
    X, y = X[::2], y[::2]
    m = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(), inducing_points=8,
                approximation="fitc")
    with pytest.warns(sg.ApproximationWarning, match="provably over-estimates.*See model.diagnostics"):
        m.fit(maxiter=500, progress=False)
    rep = m.diagnostics(exact_max_data=0)  # the proof needs no exact evidence
    assert rep.exact is None
    assert rep.exceeds_upper_bound
    assert rep.objective > rep.tight_upper_bound + 1.0
    assert rep.objective <= rep.upper_bound  # never above the bound at its own inducing inputs
    assert any("provably over-estimates" in w for w in rep.warnings)


def test_quiet_on_a_healthy_vfe_fit():
    X, y = sg.datasets.snelson()
    m = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(), inducing_points=15)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sg.ApproximationWarning)  # fit() finds nothing either
        m.fit(progress=False)
    rep = m.diagnostics()
    assert isinstance(rep, Diagnostics)
    assert rep.warnings == [] and rep.ok
    assert rep.effective_num_inducing == 15 and rep.far_inducing == []
    assert rep.lower_bound <= rep.exact <= rep.tight_upper_bound <= rep.upper_bound
    assert rep.exact - rep.lower_bound < 0.1  # VFE with 15 inputs is nearly exact here
    text = str(rep)
    assert "no warnings" in text and f"{rep.objective:.4f}" in text


def test_rejects_bad_thresholds():
    X, y = make_problem(0, N=10)
    m = sg.SGPR(X, y, inducing_points=3)
    with pytest.raises(ValueError, match="merge_fraction"):
        diagnose(m, merge_fraction=0.0)
    with pytest.raises(ValueError, match="overestimate_nats"):
        diagnose(m, overestimate_nats=-1.0)


def test_fit_warns_only_when_asked_to_diagnose():
    X, y = sg.datasets.snelson()
    m = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=0.6), inducing_points=8,
                approximation="fitc", noise_variance=2e-5)
    m.freeze("noise_variance")  # a collapsed noise the fit cannot repair
    with pytest.warns(sg.ApproximationWarning, match="collapsed"):
        m.fit(maxiter=5, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sg.ApproximationWarning)
        m.fit(maxiter=5, progress=False, diagnose=False)


def test_periodic_kernels_merge_by_correlation_not_by_lengthscale():
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 3.0, size=(60, 1))
    y = np.sin(2 * np.pi * X[:, 0]) + 0.1 * rng.standard_normal(60)
    # 0.2 and 0.23: 0.03 lengthscales apart, but correlated only 0.98 (the period is 1);
    # 0.5 and 1.501: a period apart, correlated 0.99998, the same feature
    Z = np.array([[0.2], [0.23], [0.5], [1.501], [2.7]])
    k = sg.kernels.Periodic(lengthscale=1.0, period=1.0)
    m = sg.SGPR(X, y, kernel=k, inducing_points=Z, noise_variance=0.01)
    rep = diagnose(m)
    assert rep.merged_pairs == [(2, 3)] and rep.effective_num_inducing == 4
    assert any("lengthscale-equivalents (by correlation)" in w for w in rep.warnings)


def test_a_float32_model_is_diagnosed_in_float64():
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (200, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=200)
    model = sg.SGPR(torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32),
                    inducing_points=40, noise_variance=0.01)
    model.fit(maxiter=100)
    # in float32 the bounds crossed: the tight upper bound fell below the lower bound and the
    # exact evidence (a negative certified gap)
    rep = model.diagnostics()
    assert rep.lower_bound <= rep.exact <= rep.tight_upper_bound
    reference = copy.deepcopy(model).to(torch.float64).diagnostics()
    assert rep.lower_bound == pytest.approx(reference.lower_bound, rel=1e-12)
    assert rep.tight_upper_bound == pytest.approx(reference.tight_upper_bound, rel=1e-12)


@pytest.mark.parametrize("options, message", [
    ({"extra_inducing": "a"}, "extra_inducing must be a positive integer"),
    ({"exact_max_data": None}, "exact_max_data must be an integer"),
    ({"gap_per_point": 0}, "gap_per_point must be a positive number"),
])
def test_diagnostics_options_are_checked(options, message):
    X, y = sg.datasets.snelson()
    with pytest.raises(ValueError, match=message):
        sg.SGPR(X[::4], y[::4], inducing_points=5).diagnostics(**options)


def test_a_constant_target_reads_as_such_not_as_infinite_ratio():
    X = np.linspace(0, 1, 30)[:, None]
    text = str(sg.SGPR(X, np.ones(30), inducing_points=3).diagnostics())
    assert "(y is constant)" in text and "inf ×" not in text  # was "(inf × var(y))"


def test_one_block_of_all_data_at_alpha_one_is_the_exact_gp_and_gets_no_inducing_warnings():
    # three poor inducing points: the VFE gap is wide, yet PITC of one block is the exact GP
    X, y = sg.datasets.snelson()
    k = sg.kernels.SquaredExponential(lengthscale=0.6, variance=0.8)
    m = sg.SGPR(X, y, kernel=k, inducing_points=X[:3], approximation="fitc",
                blocks=np.zeros(len(X), dtype=int), noise_variance=0.08)
    rep = diagnose(m)
    assert rep.objective == pytest.approx(_exact_at(m), rel=1e-9)
    assert rep.certified_gap > 0.1 * len(X)  # the check would have tripped
    assert rep.warnings == []
    two = sg.SGPR(X, y, kernel=k, inducing_points=X[:3], approximation="fitc",
                  blocks=np.arange(len(X)) % 2, noise_variance=0.08)
    assert any("not certified" in w for w in diagnose(two).warnings)
