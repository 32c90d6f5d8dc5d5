"""The stall rule of the L-BFGS-B fits: stop, converged, once the recent gains are small and
the gains still to come, extrapolated from how fast they shrink, are immaterial.

scipy's own tolerance (ftol 2.2e-9·|f|) keeps a fit on many points iterating long after its
predictions have settled; a fixed gain per window stops it either too late on data whose gains
fall off fast or too early on data whose gains shrink slowly for hundreds of iterations (the
inducing inputs still moving). The rule looks at two consecutive windows of `window`
iterations — early in a fit two windows that split the iterations so far, from `min_window`
each (a warm-started fit that has little left to gain stops after 2·`min_window`): with
gains g₀ (the earlier window) and g₁ (the last one), g₁ < `gain_nats` (pro rata in a shorter
window) and g₁ < g₀, a geometric decay at ratio q = g₁/g₀ leaves g₁·q/(1 − q) = g₁²/(g₀ − g₁)
nats to come, and the fit stops once that is less than `remaining_nats`. Gains that do not shrink
never stop it (a fit gaining a little, steadily, runs to its iteration limit and says so); a
window without any gain does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..validation import positive_float, positive_int


@dataclass(frozen=True)
class StallRule:
    """Stop once the last `window` iterations gained less than `gain_nats` and the gains to
    come, extrapolated geometrically from the last two windows, add less than
    `remaining_nats` (windows from `min_window` iterations early in a fit; see the module's
    docstring). `check(history)` says why it stops, or None.

        >>> rule = StallRule(gain_nats=1.0, remaining_nats=0.5, window=2, min_window=2)
        >>> rule.check([0.0, 0.5, 1.0, 1.45, 1.9]) is None  # 0.9 after 1.0: about 8 to come
        True
        >>> rule.check([0.0, 4.0, 8.0, 8.2, 8.25]) is None  # 0.25 after 8: about 0.008 to come
        False
    """

    gain_nats: float
    remaining_nats: float
    window: int = 25
    min_window: int = 5

    def __post_init__(self) -> None:  # a zero window stops at once, a NaN threshold never
        object.__setattr__(self, "gain_nats", positive_float(self.gain_nats, "gain_nats"))
        object.__setattr__(self, "remaining_nats",
                           positive_float(self.remaining_nats, "remaining_nats"))
        object.__setattr__(self, "window", positive_int(self.window, "window"))
        object.__setattr__(self, "min_window", positive_int(self.min_window, "min_window"))
        if self.min_window > self.window:
            raise ValueError(f"min_window ({self.min_window}) must be at most window "
                             f"({self.window})")

    def check(self, history: Sequence[float]) -> str | None:
        """Why the fit whose objective after each iteration is `history` (the start first)
        has stalled, or None while it has not."""
        w = min(self.window, (len(history) - 1) // 2)
        if w < self.min_window:
            return None
        gain = self.gain_nats * w / self.window  # pro rata in a shorter window
        last = history[-1] - history[-1 - w]
        before = history[-1 - w] - history[-1 - 2 * w]
        if not last < gain or (last > 0 and not last < before):
            return None  # gains that big, or not shrinking; none at all is a stall
        ratio = max(last, 0.0) / before if before > 0 else 0.0
        rest = max(last, 0.0) ** 2 / (before - last) if last > 0 else 0.0  # last·q/(1 − q)
        if not rest < self.remaining_nats:
            return None
        return (f"the last {w} iterations gained {last:.3g} nats (< {gain:.3g}) and at "
                f"their rate of decay (×{ratio:.2g} per {w}) the rest would add about "
                f"{rest:.3g} (< {self.remaining_nats:.3g})")
