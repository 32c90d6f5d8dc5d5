"""What `fit()` says of a result (`diagnostics.convergence.limit_message`), on results made
by hand: every way a fit can end."""

from __future__ import annotations

import pytest

from sparsegp.diagnostics.convergence import limit_message
from sparsegp.training import FitResult


def result(message, success=False, history=(1.0, 2.0, 3.0), **kw):
    return FitResult(success, message, len(history) - 1, 10, history[-1], list(history), **kw)


@pytest.mark.parametrize("res", [
    result("CONVERGENCE: RELATIVE REDUCTION OF F <= FACTR*EPSMCH", success=True),
    result("STOP: TOTAL NO. OF ITERATIONS REACHED LIMIT", interrupted=True),
    result("stopped at iteration 2: the objective became nan. The model holds ..."),
    result("ABNORMAL_TERMINATION_IN_LNSRCH"),  # a line search's end, at a flat optimum
    result("energy converged", success=True),
    result("3 epochs of 4 steps", success=True, history=(1.0, 1.0, 1.0, 1.0),
           fixed_budget=True),
    result("1 epochs of 4 steps", success=True, history=(-500.0,), fixed_budget=True),
], ids=["converged", "interrupted", "non-finite", "line search", "energy", "flat budget",
        "one epoch"])
def test_nothing_to_say(res):
    assert limit_message(res, "M", 100, "epochs=", "epochs") is None


def test_the_iteration_and_evaluation_limits_name_maxiter():
    h = [float(i) for i in range(21)]
    text = limit_message(result("STOP: TOTAL NO. OF ITERATIONS REACHED LIMIT", history=h,
                                info={"limit": "iterations"}), "SGPR", 100, "maxiter=", "steps")
    assert text.startswith("SGPR.fit stopped at its iteration limit (maxiter=20)")
    assert "rose by 2 nats over its last 2 iterations" in text and "fit(maxiter=40)" in text
    text = limit_message(result("STOP: TOTAL NO. OF F,G EVALUATIONS EXCEEDS LIMIT", history=h,
                                info={"limit": "evaluations"}), "SGPR", 100, "maxiter=", "steps")
    assert "limit of objective evaluations (10," in text and "larger maxiter=" in text


@pytest.mark.parametrize("words", ["STOP: TOTAL NO. OF ITERATIONS REACHED LIMIT",
                                   "Maximum number of iterations has been exceeded.", ""])
def test_the_iteration_limit_is_read_from_scipys_status_not_its_words(words, monkeypatch):
    # scipy's wording of L-BFGS-B's messages differs between versions: the fit must warn on
    # its status (1: a budget ran out), whatever the message says
    import warnings

    import numpy as np
    import scipy.optimize

    import sparsegp as sg
    from sparsegp.diagnostics import ConvergenceWarning

    minimize = scipy.optimize.minimize

    def reworded(*args, **kwargs):
        res = minimize(*args, **kwargs)
        res.message = words if res.status == 1 else res.message
        return res

    monkeypatch.setattr(scipy.optimize, "minimize", reworded)
    X, y = sg.datasets.snelson()
    model = sg.SGPR(X, y, inducing_points=8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = model.fit(maxiter=3, progress=False)
    assert result.info["limit"] == "iterations"
    said = [str(w.message) for w in caught if w.category is ConvergenceWarning]
    assert any("stopped at its iteration limit (maxiter=3)" in s for s in said), said
    assert np.isfinite(result.objective)


def test_the_round_limit_names_the_rounds():
    text = limit_message(result("stopped after 20 rounds", history=(-10.0, -9.5)), "SGPC",
                         100, "maxiter=", "steps")
    assert "round limit (maxiter=20 rounds" in text and "changed by 0.5 in its last round" in text


def test_a_budget_warns_when_as_much_again_would_gain_more_than_a_twentieth_per_point():
    rising = [float(i) for i in range(8)]  # 1 nat per epoch: 8 more epochs gain 8 nats
    res = result("8 epochs", success=True, history=rising, fixed_budget=True)
    assert limit_message(res, "SVGP", 200, "epochs=", "epochs") is None  # 0.04 per point
    text = limit_message(res, "SVGP", 100, "epochs=", "epochs")  # 0.08 per point
    assert "budget of 7 epochs while the objective still rose by 1 nats per epoch" in text
    assert "gain 8 nats, 0.08 per data point" in text and "larger epochs=" in text


def test_a_fit_settled_at_its_iteration_limit_is_not_warned_about():
    # 100 iterations, the objective rising by 7.6e-05 nats over the last 10: as many iterations
    # again would gain about 8e-04 nats, far below what could change the fit (max(1, N/1000))
    h = [-200.0 + 50 * (1 - 0.5 ** i) for i in range(90)]
    h += [h[-1] + 7.6e-6 * (i + 1) for i in range(11)]
    res = result("STOP: TOTAL NO. OF ITERATIONS REACHED LIMIT", history=h,
                 info={"limit": "iterations"})
    assert res.iterations == 100
    assert limit_message(res, "SGPR", 200, "maxiter=", "steps") is None
    # one that still gains 0.2 nats an iteration at the end is told to run longer
    h = [float(i) * 0.2 for i in range(101)]
    text = limit_message(result("STOP", history=h, info={"limit": "iterations"}), "SGPR", 200,
                         "maxiter=", "steps")
    assert text is not None and "fit(maxiter=200)" in text
    # the material change grows with N: 0.5 nats per 10 iterations settles N = 100,000 (100 nats)
    h = [float(i) * 0.05 for i in range(101)]
    res = result("STOP", history=h, info={"limit": "iterations"})
    assert limit_message(res, "SGPR", 200, "maxiter=", "steps") is not None
    assert limit_message(res, "SGPR", 100_000, "maxiter=", "steps") is None


def test_snelson_at_twenty_iterations_has_settled_and_gives_no_convergence_warning():
    # L-BFGS-B stops at maxiter=20 while the objective moves by ~4e-4 nats an iteration
    import warnings

    import sparsegp as sg
    from sparsegp.diagnostics import ConvergenceWarning

    X, y = sg.datasets.snelson()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # tol= leaves the stopping rules out (the predictions settle at iteration 20 too)
        res = sg.SGPR(X, y, inducing_points=10).fit(maxiter=20, tol=1e-12, progress=False)
    assert not res.success and res.info["limit"] == "iterations"
    assert [str(w.message) for w in caught if w.category is ConvergenceWarning] == []
