"""The L-BFGS-B fits' stall rule (`training.stall.StallRule`, `fitting.stall_rule`)."""

import math

import pytest

import sparsegp as sg
from sparsegp.models.fitting import STALL_GAIN, STALL_REST, stall_rule
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
    below = StallRule(gain_nats=math.inf, remaining_nats=rest * (1 + 1e-9), window=w)
    above = StallRule(gain_nats=math.inf, remaining_nats=rest * (1 - 1e-9), window=w)
    assert below.check(h) is not None and above.check(h) is None
    assert f"about {rest:.3g}" in below.check(h)


def test_gains_that_do_not_shrink_never_stop_it_and_a_window_without_gain_does():
    rule = StallRule(gain_nats=1.0, remaining_nats=1e9, window=4)
    steady = [0.1 * k for k in range(200)]  # 0.4 per window, below gain_nats, not shrinking
    assert all(rule.check(steady[:k]) is None for k in range(1, 201))
    rising = [0.001 * k * k for k in range(30)]  # gains grow
    assert rule.check(rising) is None
    flat = [5.0] * 9  # nothing gained in the last window
    assert rule.check(flat) is not None and "gained 0 nats" in rule.check(flat)
    big = geometric(10.0, 0.5, 12)[:-1] + [1e3]  # the last window gained more than gain_nats
    assert rule.check(big) is None


def test_it_needs_two_windows_and_the_last_gain_below_gain_nats():
    rule = StallRule(gain_nats=0.5, remaining_nats=10.0, window=3)
    h = geometric(1.0, 0.5, 6)  # 7 values: the start and six iterations
    assert rule.check(h[:-1]) is None  # six values: no two whole windows before the last
    assert rule.check(h) is not None  # last window gained 0.109 < 0.5, shrinking by 8
    assert StallRule(gain_nats=0.1, remaining_nats=10.0, window=3).check(h) is None


@pytest.mark.parametrize("n", [10, 999, 20_000])
def test_the_default_thresholds_are_per_point(n):
    rule = stall_rule(n, sg.FitOptions())
    assert rule.window == 25
    assert rule.gain_nats == pytest.approx(STALL_GAIN * n / 1000)
    assert rule.remaining_nats == pytest.approx(STALL_REST * n / 1000)
    assert stall_rule(n, sg.FitOptions(tol=1e-6)) is None
