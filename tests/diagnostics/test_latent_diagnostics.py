"""Diagnostics of sparse models with a non-Gaussian likelihood (SGPC, SVGP): the objective for
what it is, and merged or far inducing variables found where they were put."""

from __future__ import annotations

import numpy as np
import pytest

import sparsegp as sg


def _problem():
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (120, 2))
    labels = (np.sin(X[:, 0]) + 0.3 * rng.standard_normal(120) > 0).astype(int)
    # rows 8 and 9 sit 1e-4 from rows 0 and 1 (merged); row 10 is 30 lengthscales away
    Z = np.r_[X[:8], X[:2] + 1e-4, [[30.0, 30.0]]]
    return X, labels, Z


def _se():
    return sg.kernels.SquaredExponential(lengthscale=1.0, variance=1.0)


def _expected_merged(Z, ell=1.0, fraction=0.05):
    d = np.linalg.norm(Z[:, None] - Z[None], axis=-1) / ell
    return sorted((i, j) for i in range(len(Z)) for j in range(i + 1, len(Z)) if d[i, j] < fraction)


@pytest.mark.parametrize("make", [
    lambda X, b, Z: sg.SGPC(X, b, kernel=_se(), inducing_points=Z, alpha=1.0),
    lambda X, b, Z: sg.SVGP(X, b.astype(float), kernel=_se(),
                            likelihood=sg.likelihoods.Bernoulli(), inducing_points=Z),
    lambda X, b, Z: sg.SVGP(X, b, kernel=_se(), likelihood=sg.likelihoods.MultiClass(2),
                            inducing_points=Z),
])
def test_merged_and_far_inducing_variables_are_found_where_they_were_put(make):
    X, b, Z = _problem()
    model = make(X, b, Z)
    rep = model.diagnostics()
    assert isinstance(rep, sg.diagnostics.LatentDiagnostics)
    assert sorted(rep.merged_pairs) == _expected_merged(Z) == [(0, 8), (1, 9)]
    assert rep.effective_num_inducing == 9 and rep.num_inducing == 11
    assert rep.far_inducing == [10]
    assert any("effectively M = 9 of 11" in w for w in rep.warnings)
    assert any("rows [10]" in w for w in rep.warnings)
    expected = (model.log_marginal_likelihood() if isinstance(model, sg.SGPC)
                else model.elbo().item())
    assert rep.objective == pytest.approx(expected, rel=1e-12)
    assert "no sandwich" in str(rep) and rep.num_data == 120
    # well-placed inducing inputs: nothing to say
    assert make(X, b, X[:10]).diagnostics().ok


def test_one_feature_per_output_is_checked_output_by_output():
    X, b, Z = _problem()
    Y = np.c_[np.sin(X[:, 0]), np.cos(X[:, 1])]  # two Gaussian outputs: no single sandwich
    model = sg.SVGP(X, Y, kernel=sg.kernels.Separate([_se(), _se()]),
                    inducing_points=[Z, X[:11]])
    rep = model.diagnostics()
    assert rep.num_inducing == 22 and rep.far_inducing == [10]
    assert sorted(rep.merged_pairs) == [(0, 8), (1, 9)]  # the second output's are fine
    assert all(w.startswith("output 0: ") for w in rep.warnings) and len(rep.warnings) == 2


def test_kernels_without_a_lengthscale_are_checked_by_correlation():
    X, b, Z = _problem()
    kernel = sg.kernels.Periodic(lengthscale=1.0, period=50.0)
    rep = sg.SGPC(X, b, kernel=kernel, inducing_points=Z).diagnostics()
    assert (0, 8) in rep.merged_pairs and (1, 9) in rep.merged_pairs
    assert "by correlation" in " ".join(rep.warnings)


def test_a_gaussian_svgp_keeps_the_sandwich_and_thresholds_are_checked():
    X, b, Z = _problem()
    y = np.sin(X[:, 0])
    assert isinstance(sg.SVGP(X, y, inducing_points=X[:10]).diagnostics(), sg.Diagnostics)
    model = sg.SGPC(X, b, inducing_points=Z)
    with pytest.raises(TypeError, match="gap_per_point"):
        model.diagnostics(gap_per_point=0.1)  # no bounds here: not silently ignored
    with pytest.raises(ValueError, match="merge_fraction"):
        model.diagnostics(merge_fraction=-1.0)
    assert model.diagnostics(merge_fraction=1e-6).merged_pairs == []
