"""The settling rule of the L-BFGS-B fits: stop, converged, once the model's predictions have
stopped moving, whatever the objective still gains.

The objective's stall rule (`stall.StallRule`) cannot tell a fit whose objective creeps up
while its predictions have settled (friedman1: within 1% of its converged test scores at
iteration 10, still gaining 35 nats per 1,000 points per 10 iterations) from one whose
predictions still improve at that rate (kin40k). This rule looks at the predictions instead:
a probe (supplied by the model) gives the predictive mean μ and variance σ² of y at fixed
inputs, every `every` iterations. The distance between the predictions at iterations s < t is

    D(s, t)² = mean over the probes of (μₜ − μₛ)²/σₜ² + ½ (log σₜ² − log σₛ²)²,

twice the mean Kullback–Leibler divergence between the two predictive densities, to second
order. At iteration t, with a window of w = min(`window`, the largest multiple of `every`
up to t/2) iterations, d₁ = D(t − w, t) and d₀ = D(t − 2w, t − w); moves that shrink
geometrically at the ratio q = d₁/d₀ add up to d₁·q/(1 − q) = d₁²/(d₀ − d₁) more, and the
check passes once d₁ < d₀ held at this check and at the one before (`every` iterations
earlier: moves that shrink and grow again, as on a fit hopping between plateaus, do not
pass), that rest is below `rest` and the window is at least `min_window` iterations. The fit
stops once `confirm` consecutive checks have passed (more than one for a stricter rule).
Predictions that do not settle never stop the fit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ..validation import positive_float, positive_int

#: A probe: the predictive mean and variance of y at fixed inputs, at the current parameters
#: (tensors of one shape; computed without gradients).
Probe = Callable[[], tuple[Tensor, Tensor]]


def distance(before: tuple[Tensor, Tensor], after: tuple[Tensor, Tensor]) -> float:
    """D between two probes' predictions (see the module docstring)."""
    (m0, v0), (m1, v1) = before, after
    lv0, lv1 = torch.log(v0), torch.log(v1)
    d2 = (m1 - m0) ** 2 / v1 + 0.5 * (lv1 - lv0) ** 2
    return math.sqrt(max(float(d2.mean()), 0.0))


@dataclass(frozen=True)
class SettleRule:
    """Stop once the predictions' moves, extrapolated geometrically from the last two windows,
    add less than `rest` (in units of D), at `confirm` consecutive checks every `every`
    iterations (see the module's docstring). `tracker(probe)` follows one fit.

        >>> rule = SettleRule(rest=0.02, confirm=2)
        >>> rule.every, rule.window, rule.min_window
        (5, 25, 10)
    """

    rest: float = 0.015
    every: int = 5
    window: int = 25
    min_window: int = 10
    confirm: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "rest", positive_float(self.rest, "rest"))
        for name in ("every", "window", "min_window", "confirm"):
            object.__setattr__(self, name, positive_int(getattr(self, name), name))
        if self.window % self.every or self.min_window % self.every:
            raise ValueError(f"window ({self.window}) and min_window ({self.min_window}) must "
                             f"be multiples of every ({self.every})")
        if self.min_window > self.window:
            raise ValueError(f"min_window ({self.min_window}) must be at most window "
                             f"({self.window})")

    def measure(self, predictions: dict[int, tuple[Tensor, Tensor]], t: int
                ) -> tuple[int, float, float] | None:
        """(w, d₁, d₀) at iteration t from the probes' predictions by iteration (those at t,
        t − w and t − 2w are needed), or None before two windows of `every` iterations."""
        w = min(self.window, (t // 2) // self.every * self.every)
        if w < self.every or any(s not in predictions for s in (t, t - w, t - 2 * w)):
            return None
        return (w, distance(predictions[t - w], predictions[t]),
                distance(predictions[t - 2 * w], predictions[t - w]))

    def check(self, measured: tuple[int, float, float], shrank: bool) -> str | None:
        """Whether one check passes, given this check's (w, d₁, d₀) and whether the moves
        shrank (d₁ < d₀) at the check before: why, or None."""
        w, d1, d0 = measured
        if w < self.min_window or not shrank or not d1 < d0:
            return None
        rest = d1 * d1 / (d0 - d1)
        if not rest < self.rest:
            return None
        return (f"the predictions settled: they moved by D = {d1:.3g} over the last {w} "
                f"iterations, {d0:.3g} over the {w} before, and at that rate of decay would "
                f"move about {rest:.3g} more (< {self.rest:.3g})")

    def tracker(self, probe: Probe) -> SettleTracker:
        return SettleTracker(self, probe)


class SettleTracker:
    """One fit's probes: `update(iteration)` after every iteration says why the fit has
    settled, or None."""

    def __init__(self, rule: SettleRule, probe: Probe) -> None:
        self.rule, self.probe = rule, probe
        self.predictions: dict[int, tuple[Tensor, Tensor]] = {}
        self.passed = 0  # consecutive checks passed
        self.shrank = False  # whether the moves shrank at the check before (d₁ < d₀)

    def update(self, iteration: int) -> str | None:
        rule = self.rule
        if iteration % rule.every:
            return None
        with torch.no_grad():
            mean, var = self.probe()
        self.predictions[iteration] = (mean.detach().double().reshape(-1),
                                       var.detach().double().reshape(-1).clamp_min(1e-300))
        for s in [s for s in self.predictions if s < iteration - 2 * rule.window]:
            del self.predictions[s]
        measured = rule.measure(self.predictions, iteration)
        if measured is None:
            self.shrank, self.passed = False, 0
            return None
        why = rule.check(measured, self.shrank)
        self.shrank = measured[1] < measured[2]
        self.passed = self.passed + 1 if why is not None else 0
        if self.passed < rule.confirm:
            return None
        return f"{why}, at {rule.confirm} checks in a row" if rule.confirm > 1 else why
