"""select_inducing: greedy growth of M by the rank-one VFE gain until the bounds meet."""

from __future__ import annotations

import numpy as np
import pytest

import sparsegp as sg
from sparsegp.workflows import select_inducing

from ..conftest import make_problem


def _phases(curve):
    """Runs of consecutive greedy additions (between refits)."""
    runs, current = [], []
    for M, lower, refitted in zip(curve.num_inducing, curve.lower, curve.refitted):
        if refitted:
            if current:
                runs.append(current)
            current = []
        else:
            current.append((M, lower))
    return runs + ([current] if current else [])


def test_grows_until_the_bounds_meet_on_snelson():
    X, y = sg.datasets.snelson()
    model, curve = select_inducing(X, y, sg.kernels.SquaredExponential(), tol=0.01)
    assert isinstance(model, sg.SGPR) and model.approximation == "vfe"
    assert len(curve) >= 3 and curve.refitted[-1]
    assert model.num_inducing == curve.num_inducing[-1] < X.shape[0] // 4
    lower, upper = curve.lower[-1], curve.upper[-1]
    assert lower == pytest.approx(model.log_marginal_likelihood())
    assert upper == pytest.approx(model.upper_bound())
    assert upper - lower < 0.01 * X.shape[0]  # tol nats per data point
    assert np.all(curve.gap >= -1e-9)
    # greedy additions at fixed hyperparameters only ever raise the VFE bound
    for run in _phases(curve):
        Ms = [M for M, _ in run]
        assert Ms == list(range(Ms[0], Ms[0] + len(Ms)))
        assert all(b >= a - 1e-9 for (_, a), (_, b) in zip(run, run[1:]))
    exact = sg.GPR(X, y, kernel=sg.kernels.SquaredExponential())
    exact.fit(progress=False)
    assert lower == pytest.approx(exact.log_marginal_likelihood(), abs=0.05)
    # every added inducing input is a training input (the default candidates)
    Z = model.inducing_points[1:]
    assert np.all(np.min(np.abs(Z[:, None, 0] - X[None, :, 0]), 1) < 1e-12)


def test_stops_at_max_inducing_with_a_final_refit_and_uses_given_candidates():
    X, y = make_problem(3, N=60, D=2)
    grid = np.stack(np.meshgrid(np.linspace(-3, 3, 7), np.linspace(-3, 3, 7)), -1).reshape(-1, 2)
    with pytest.warns(sg.ApproximationWarning, match=r"stopped at M = 6 \(max_inducing reached\)"):
        model, curve = select_inducing(X, y, tol=1e-9, max_inducing=6, candidates=grid,
                                       initial_inducing=2, maxiter=200)
    assert model.num_inducing == 6 and curve.num_inducing[-1] == 6 and curve.refitted[-1]
    assert curve.num_inducing[:5] == [2, 3, 4, 5, 6]
    added = model.inducing_points[2:]
    assert np.all(np.min(np.linalg.norm(added[:, None, :] - grid[None], axis=-1), 1) < 1e-12)
    assert len({tuple(z) for z in added}) == 4  # no candidate is added twice


def test_rejects_bad_arguments():
    X, y = make_problem(0, N=20)
    with pytest.raises(ValueError, match="tol"):
        select_inducing(X, y, tol=0.0)
    with pytest.raises(TypeError, match="VFE"):
        select_inducing(X, y, approximation="fitc")
    with pytest.raises(ValueError, match="candidates has 3 columns but the model expects 2"):
        select_inducing(X, y, candidates=np.zeros((5, 3)))
    with pytest.raises(ValueError, match=r"candidates is empty"):
        select_inducing(X, y, candidates=np.zeros((0, 2)))
    with pytest.raises(TypeError, match="candidates must hold real numbers"):
        select_inducing(X, y, candidates=[["a", "b"], ["c", "d"]])
    with pytest.raises(ValueError, match="candidates contains NaN"):
        select_inducing(X, y, candidates=[[np.nan, 0.0]])
    with pytest.raises(ValueError, match="candidates_per_step must be a positive integer"):
        select_inducing(X, y, candidates_per_step=0)


def test_copies_of_a_candidate_are_added_once_and_an_uncertified_stop_warns():
    X, y = sg.datasets.snelson()
    X, y = X[::4], y[::4]
    with pytest.warns(sg.ApproximationWarning, match="candidates used up.*not certified"):
        model, curve = select_inducing(X, y, candidates=np.zeros((10, 1)), maxiter=5)
    assert model.num_inducing == 2 and 0.0 in model.inducing_points  # one copy, not ten
    assert curve.upper[-1] - curve.lower[-1] > 0.05 * (1 + abs(curve.lower[-1]))


def test_the_stopping_rule_does_not_depend_on_the_units_of_y():
    X, y = sg.datasets.snelson()
    X, y = X[::2], y[::2]
    # the rule used |lower|, which shifts by N log(scale): M = 16, 11, 11, 6 for these scales,
    # a 52.6-nat gap accepted at 1e6
    results = [select_inducing(X, y * s, standardize_y=True, maxiter=100) for s in (1, 1e-3, 1e6)]
    sizes = {model.num_inducing for model, _ in results}
    assert len(sizes) == 1
    gaps = [curve.upper[-1] - curve.lower[-1] for _, curve in results]
    assert max(gaps) < 0.01 * X.shape[0]
    np.testing.assert_allclose(gaps, gaps[0], rtol=1e-3)
