"""The checks after a fit cost no more than the fit: the quadratic-form upper bound (N² kernel
evaluations) is computed after `fit()` only where N ≤ evaluations·M, and where the bounds at
hand then cannot decide, `fit()` warns only about a gap that more inducing variables prove;
`diagnostics()` computes what `fit()` left out."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import sparsegp as sg
from sparsegp.diagnostics import bounds, diagnose, quadratic_rows_after_fit
from sparsegp.diagnostics.report import QUADRATIC_MAX_DATA

pytestmark = pytest.mark.numerics  # rounding-sensitive: rerun in CI under another code path


def low_noise(N, seed=0):
    """Structure at scale ~1 on [-3, 3], noise variance 1e-4: Titsias's upper bound is loose
    by hundreds of nats, the quadratic-form one is tight."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (N, 1))
    return X, np.sin(2 * X[:, 0]) + 0.5 * np.cos(5 * X[:, 0]) + 0.01 * rng.standard_normal(N)


@pytest.fixture(scope="module")
def certified_only_by_the_quadratic_bound():
    X, y = low_noise(2000)
    model = sg.SGPR(X, y, inducing_points=60)
    model.fit(progress=False, diagnose=False)
    return model


def test_the_budget_is_the_fits_own_kernel_evaluations():
    assert quadratic_rows_after_fit(24, 100) == 2400
    assert quadratic_rows_after_fit(1084, 100) == QUADRATIC_MAX_DATA
    assert quadratic_rows_after_fit(7, 0) == 0  # no inducing variables: never


def test_left_out_the_quadratic_bound_a_correct_fit_gets_a_note_not_a_warning(
        certified_only_by_the_quadratic_bound):
    m = certified_only_by_the_quadratic_bound
    full = diagnose(m)
    assert full.quadratic_upper_bound is not None and full.warnings == []
    assert full.certified_gap < 0.01 * full.num_data
    cheap = diagnose(m, quadratic_max_data=1999)
    assert cheap.quadratic_upper_bound is None
    assert cheap.certified_gap > 0.1 * cheap.num_data  # Titsias's bounds leave it open
    assert cheap.warnings == []  # it said "not certified" while log p(y) is within 0.01·N
    assert any("quadratic_max_data=2000" in note for note in cheap.notes)
    # the proved part of the gap: the VFE bound with more inducing variables, below log p(y)
    assert full.lower_bound <= cheap.tight_lower_bound <= full.best_upper_bound


def test_a_short_fit_skips_the_quadratic_bound_and_diagnostics_computes_it(
        certified_only_by_the_quadratic_bound, monkeypatch):
    m = certified_only_by_the_quadratic_bound
    calls = []
    real = bounds.quadratic_upper_bound
    monkeypatch.setattr("sparsegp.diagnostics.report.quadratic_upper_bound",
                        lambda p: calls.append(1) or real(p))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = m.fit(maxiter=1, progress=False)  # a few evaluations: a budget below N
    assert result.evaluations * m.num_inducing < m.num_data
    assert calls == []
    assert [w for w in caught if issubclass(w.category, sg.ApproximationWarning)] == []
    assert m.diagnostics().warnings == [] and calls == [1]


def test_a_gap_that_more_inducing_variables_prove_warns_without_the_quadratic_bound():
    # three inducing points for a function with dozens of wiggles: 300 points raise the VFE
    # bound by far more than 0.1 nats per data point, a gap no upper bound needs to show
    rng = np.random.default_rng(1)
    X = rng.uniform(-3, 3, (3000, 1))
    y = np.sin(8 * X[:, 0]) + 0.1 * rng.standard_normal(3000)
    k = sg.kernels.SquaredExponential(lengthscale=0.15, variance=0.5)
    m = sg.SGPR(X, y, kernel=k, inducing_points=3, noise_variance=0.01)
    rep = diagnose(m, quadratic_max_data=0)
    assert rep.quadratic_upper_bound is None
    assert rep.tight_lower_bound - rep.lower_bound > 0.1 * rep.num_data
    [gap] = [w for w in rep.warnings if "not certified" in w]
    assert f"M = {rep.tight_num_inducing} inducing variables raise the lower bound" in gap
