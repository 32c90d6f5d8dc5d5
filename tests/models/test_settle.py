"""The L-BFGS-B fits' settling rule (`training.settle.SettleRule`, `fitting.settle_rule`)."""

import math

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.models.core.fitting import SETTLE_REST, settle_rule, stall_rule
from sparsegp.training import fit_lbfgsb
from sparsegp.training.settle import SettleRule, distance

PROBES = torch.linspace(0.0, 1.0, 64, dtype=torch.float64)


def follow(rule, mean_at, iterations):
    """The iteration at which `rule` stops predictions whose mean at iteration t is
    mean_at(t) (variance 1 throughout), checked as `fit_lbfgsb` does; None if it never does."""
    state = {"t": 0}

    def probe():
        return mean_at(state["t"]), torch.ones_like(PROBES)

    tracker = rule.tracker(probe)
    for t in range(iterations + 1):
        state["t"] = t
        if tracker.update(t) is not None:
            return t
    return None


def test_the_distance_is_the_mean_of_the_mean_and_log_variance_moves():
    m0, v0 = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    m1, v1 = torch.full((4,), 0.3, dtype=torch.float64), torch.full((4,), 4.0, dtype=torch.float64)
    expected = math.sqrt(0.3**2 / 4.0 + 0.5 * math.log(4.0) ** 2)
    assert distance((m0, v0), (m1, v1)) == pytest.approx(expected, rel=1e-12)
    assert distance((m0, v0), (m0, v0)) == 0.0


def test_predictions_that_settled_stop_it_while_the_objective_still_creeps_up():
    # the predictions converge geometrically (a move of 0.9ᵗ); the objective gains 0.5 nats
    # per iteration throughout, which the objective's rule never calls a stall (N = 10⁴:
    # 2.5 nats per 25 iterations allowed, 12.5 gained)
    rule = settle_rule(sg.FitOptions(), default=True)
    stop = follow(rule, lambda t: torch.sin(3 * PROBES) * (1 - 0.9**t), 300)
    objective = [0.5 * t for t in range(301)]
    stall = stall_rule(10_000, sg.FitOptions())
    assert all(stall.check(objective[:k]) is None for k in range(1, 302))
    # geometric moves: the extrapolated rest is the exact move left, scale·0.9ᵗ (scale: the
    # RMS of sin(3x) over the probes), and the fit stops at the first check where it is
    # below the threshold
    scale = float(torch.sin(3 * PROBES).pow(2).mean().sqrt())
    assert stop is not None and stop % 5 == 0
    assert scale * 0.9**stop < SETTLE_REST <= scale * 0.9 ** (stop - 5)


def test_predictions_that_still_move_never_stop_it():
    rule = settle_rule(sg.FitOptions(), default=True)
    # a steady drift, and moves that shrink as slowly as 1/√t: the extrapolated rest grows
    assert follow(rule, lambda t: 0.01 * t * PROBES, 2000) is None
    assert follow(rule, lambda t: 0.2 * math.sqrt(t) * PROBES, 2000) is None


def test_a_sharp_drop_then_a_slow_tail_never_stops_it():
    # a move of 2 in the first 5 iterations, then about 0.04 per 5, a little faster as it
    # goes: every window that starts at iteration 0 sees d₁ ≪ d₀ (at 20: 0.08 after 2.04, a
    # rest of 0.0033), but the check before it (at 15: 0.04 after 0.04) saw no shrinking
    def mean_at(t):
        tail = max(t - 5, 0)
        return PROBES * (2.0 * min(t, 5) / 5 + 0.008 * tail + 1e-6 * tail**2) / float(
            PROBES.pow(2).mean().sqrt())

    rule = SettleRule(rest=0.015)
    assert follow(rule, mean_at, 500) is None
    predictions = {t: (mean_at(t), torch.ones_like(PROBES)) for t in (0, 10, 20)}
    w, d1, d0 = rule.measure(predictions, 20)
    assert (w, d1, d0) == (10, pytest.approx(0.08, rel=0.01), pytest.approx(2.04, rel=0.01))
    assert rule.check((w, d1, d0), shrank=True) is not None  # alone, it would pass
    assert rule.check((w, d1, d0), shrank=False) is None


def test_moves_that_shrink_and_grow_again_do_not_stop_it():
    # the mean hops by 0.3 every 10 iterations and stays put in between: windows alternate
    # between shrinking and growing moves
    def mean_at(t):
        return PROBES * 0.3 * (t // 10) / float(PROBES.pow(2).mean().sqrt())

    assert follow(SettleRule(rest=0.015), mean_at, 500) is None


@pytest.mark.parametrize("bad", [{"rest": 0.0}, {"every": 0}, {"window": 12},
                                 {"min_window": 30}, {"confirm": 1.5}])
def test_a_rule_that_would_stop_at_once_or_never_is_refused(bad):
    with pytest.raises(ValueError):
        SettleRule(**bad)


def test_tol_turns_the_settling_rule_off():
    assert settle_rule(sg.FitOptions(tol=1e-8), default=True) is None
    assert settle_rule(sg.FitOptions(), default=True).rest == SETTLE_REST
    assert settle_rule(sg.FitOptions()).rest == SETTLE_REST  # on by default


def friedman1(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 10))
    f = (10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3]
         + 5 * X[:, 4])
    return X, f + rng.standard_normal(n)


def test_an_sgpr_fit_on_friedman1_stops_within_twice_the_iterations_to_good_scores():
    # friedman1 (N = 3,000, default M = 100): test RMSE within 1% and NLPD within log 1.01
    # of the converged fit's at iteration 14; the predictions settle at iteration 20. The
    # objective's rule alone stops it at 259 (18×).
    X, y = friedman1(5000, seed=0)
    X, y, Xs, ys = X[:3000], y[:3000], X[3000:], y[3000:]

    def scores(m):
        mean = m.predict_y(Xs)[0]
        return (float(np.sqrt(np.mean((mean - ys) ** 2))),
                -float(np.mean(m.predict_log_density(Xs, ys))))

    m = sg.SGPR(X, y)
    states = []
    res = fit_lbfgsb(m, callback=lambda i, f: states.append(
        {k: v.detach().clone() for k, v in m.state_dict().items()}),
        stall=stall_rule(3000, sg.FitOptions()),
        settle=settle_rule(sg.FitOptions(), default=True), probe=m._prediction_probe())
    assert res.success and res.info.get("settled") and "the predictions settled" in res.message
    ref = sg.SGPR(X, y)
    ref.fit(tol=1e-12, maxiter=1000)
    best = scores(ref)

    def good(state):
        m.load_state_dict(state)
        rmse, nlpd = scores(m)
        return rmse <= 1.01 * best[0] and nlpd <= best[1] + math.log1p(0.01)

    first = next(i + 1 for i, s in enumerate(states) if good(s))
    assert good(states[-1])
    assert res.iterations <= 2 * first, (res.iterations, first)
    assert (first, res.iterations) == (14, 20)


@pytest.mark.parametrize("model", ["GPR", "SGPR"])
def test_the_probe_gives_the_predictions_of_y_and_leaves_the_posterior_cache_alone(model):
    X, y = friedman1(300, seed=1)
    m = sg.GPR(X, y) if model == "GPR" else sg.SGPR(X, y, inducing_points=20)
    m.predict(X[:3])  # a cached posterior
    cached = m._cache
    probe = m._prediction_probe()
    with torch.no_grad():
        m.kernel.lengthscale = 2 * m.kernel.lengthscale
    mean, var = probe()
    assert m._cache is cached and not mean.requires_grad
    rows = np.round(np.linspace(0, 299, 256)).astype(int)
    mu, v = m.predict_y(X[rows])  # the current parameters, in the units of y
    s = float(m.y_scale)
    assert np.allclose(mean.numpy() * s + float(m.y_shift), mu, rtol=1e-10, atol=1e-10)
    assert np.allclose(var.numpy() * s * s, v, rtol=1e-10)
    assert sg.SGPC(X, y > np.median(y))._prediction_probe() is None
