"""The L-BFGS-B fits' stall rule (`training.stall.StallRule`, `fitting.stall_rule`)."""

import math

import pytest

import sparsegp as sg
from sparsegp.models.core.fitting import STALL_GAIN, STALL_REST, stall_rule
from sparsegp.training.stall import StallRule


def geometric(first: float, ratio: float, iterations: int) -> list[float]:
    """An objective whose gain in iteration k is first·ratioᵏ."""
    history = [0.0]
    for k in range(iterations):
        history.append(history[-1] + first * ratio ** k)
    return history


@pytest.mark.parametrize("ratio", [0.5, 0.9, 0.97])
def test_the_extrapolated_rest_is_exact_for_geometric_gains(ratio):
    # gains a·rᵏ: windows of W gains shrink by q = r^W and what is left after iteration n is
    # a·rⁿ/(1 − r) — the rule's last·q/(1 − q), to rounding
    w, n = 5, 40
    h = geometric(1.0, ratio, n)
    rest = ratio ** n / (1 - ratio)
    below = StallRule(gain_nats=1e9, remaining_nats=rest * (1 + 1e-9), window=w, min_window=w)
    above = StallRule(gain_nats=1e9, remaining_nats=rest * (1 - 1e-9), window=w, min_window=w)
    assert below.check(h) is not None and above.check(h) is None
    assert f"about {rest:.3g}" in below.check(h)


def test_gains_that_do_not_shrink_never_stop_it_and_a_window_without_gain_does():
    rule = StallRule(gain_nats=1.0, remaining_nats=1e9, window=4, min_window=4)
    steady = [0.1 * k for k in range(200)]  # 0.4 per window, below gain_nats, not shrinking
    assert all(rule.check(steady[:k]) is None for k in range(1, 201))
    rising = [0.001 * k * k for k in range(30)]  # gains grow
    assert rule.check(rising) is None
    flat = [5.0] * 9  # nothing gained in the last window
    assert rule.check(flat) is not None and "gained 0 nats" in rule.check(flat)
    big = geometric(10.0, 0.5, 12)[:-1] + [1e3]  # the last window gained more than gain_nats
    assert rule.check(big) is None


def test_it_needs_two_windows_and_the_last_gain_below_gain_nats():
    rule = StallRule(gain_nats=0.5, remaining_nats=10.0, window=3, min_window=3)
    h = geometric(1.0, 0.5, 6)  # 7 values: the start and six iterations
    assert rule.check(h[:-1]) is None  # six values: no two whole windows before the last
    assert rule.check(h) is not None  # last window gained 0.109 < 0.5, shrinking by 8
    assert StallRule(gain_nats=0.1, remaining_nats=10.0, window=3, min_window=3).check(h) is None


def test_early_windows_split_the_iterations_so_far_and_their_gain_threshold_is_pro_rata():
    # a warm start with little left to gain: windows of 5 after 10 iterations
    rule = StallRule(gain_nats=1.0, remaining_nats=0.5, window=25, min_window=5)
    h = geometric(0.05, 0.9, 40)
    assert all(rule.check(h[:k]) is None for k in range(1, 11))
    assert "the last 5 iterations" in rule.check(h[:11])
    assert "the last 25 iterations" in rule.check(geometric(0.05, 0.9, 80)[:61])
    # the gain threshold of a window of 5 is a fifth of the 25-iteration one: 0.2 nats
    lenient = StallRule(gain_nats=1.0, remaining_nats=100.0, window=25, min_window=5)
    below = geometric(0.045, 0.9, 10)  # the last 5 of 10 gain 0.109, shrinking
    above = geometric(0.1, 0.95, 10)  # the last 5 of 10 gain 0.350, shrinking
    assert lenient.check(below) is not None and lenient.check(above) is None


def test_min_window_at_most_window():
    with pytest.raises(ValueError, match="min_window"):
        StallRule(gain_nats=1.0, remaining_nats=1.0, window=4, min_window=5)


@pytest.mark.parametrize("n", [10, 999, 20_000])
def test_the_default_thresholds_are_per_point(n):
    rule = stall_rule(n, sg.FitOptions())
    assert (rule.window, rule.min_window) == (25, 5)
    assert rule.gain_nats == pytest.approx(STALL_GAIN * n / 1000)
    assert rule.remaining_nats == pytest.approx(STALL_REST * n / 1000)
    assert stall_rule(n, sg.FitOptions(tol=1e-6)) is None


@pytest.mark.parametrize("bad", [{"gain_nats": 0.0}, {"remaining_nats": math.nan},
                                 {"gain_nats": -1.0}, {"window": 0}, {"window": 2.5}])
def test_a_rule_that_would_stop_at_once_or_never_is_refused(bad):
    given = {"gain_nats": 1.0, "remaining_nats": 1.0, "window": 5, **bad}
    with pytest.raises(ValueError, match=next(iter(bad))):
        StallRule(**given)


def test_fit_lbfgsb_takes_a_rule_not_a_number():
    from sparsegp.training import fit_lbfgsb

    X, y = sg.datasets.snelson()
    with pytest.raises(TypeError, match="stall must be a training.stall.StallRule"):
        fit_lbfgsb(sg.SGPR(X, y, inducing_points=5), maxiter=3, stall=0.1)
