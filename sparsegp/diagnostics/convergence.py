"""Did a fit stop at its limit? `ConvergenceWarning`, and what `fit()` says of a result.

A fit ends in one of three ways: its optimiser converged (nothing to say), it stopped at a
limit — L-BFGS-B at `maxiter` iterations (or at its budget of objective evaluations), the EP
schedule at `maxiter` rounds — before converging, or it ran a budget the user chose — `epochs`
of minibatches, a number of Adam steps — which has no convergence test. A limit reached is
worth a warning unless the objective had settled there (below). A budget is not a failure
unless the objective still climbs at its end: its rate over the last quarter of the budget
(the mean of the last quarter of the recorded objectives minus that of the quarter before,
per epoch or step; means over a quarter average out the noise of minibatch estimates) would
gain, over as many epochs again, more than `STILL_RISING_PER_POINT` nats per data point.
Likewise an L-BFGS-B fit at its limit whose objective has settled — at the rate of its last
tenth of iterations, as many iterations again would gain less than `material_nats(N)` — has
converged in practice and is not warned about (more iterations could not change what a user
sees).

Shapes: `limit_message(result, ...)` of a `FitResult` -> a sentence, or None.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..training.result import FitResult

#: A budget ended "while the objective still rises" when, at the rate of its last quarter,
#: as many epochs (or steps) again would gain more than this many nats per data point.
STILL_RISING_PER_POINT = 0.05


def material_nats(num_data: int) -> float:
    """The least difference of log evidence (nats) worth a warning or a change of fit on N
    points: max(1, N/1000) — a smaller one cannot move the hyperparameters or predictions
    that a user would notice (an over-estimate of the evidence, a restart's gain)."""
    return max(1.0, num_data / 1000)


class ConvergenceWarning(UserWarning):
    """`fit()` stopped at its iteration or round limit before converging (its objective still
    rising, not settled: see `settled`), ran out of its epoch
    budget while the objective still rose, or ended far worse than the data-based starting
    values (and restarted from them); the message names the limit and the option that
    raises it.

    Shapes: none (a `UserWarning` subclass). Filter it like any warning: "ignore" to silence
    it, "error" to stop at it; `fit(diagnose=False)` skips it with the other checks after
    fitting (where the model takes `diagnose`).

    Example:

        >>> import warnings, sparsegp as sg
        >>> from sparsegp.diagnostics import ConvergenceWarning
        >>> issubclass(ConvergenceWarning, UserWarning)
        True
        >>> X, y = sg.datasets.snelson()
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     result = sg.SGPR(X, y, inducing_points=10).fit(maxiter=3, progress=False)
        >>> [str(w.message).split(":")[0] for w in caught if w.category is ConvergenceWarning]
        ['SGPR.fit stopped at its iteration limit (maxiter=3) before L-BFGS-B converged']
    """


def _rise(history: list[float], window: int) -> float:
    """Mean of the last `window` values minus the mean of the `window` before them."""
    last = history[-window:]
    before = history[-2 * window:-window]
    return sum(last) / len(last) - sum(before) / len(before)


def settled(rise: float, window: int, iterations: int, num_data: int) -> bool:
    """Whether a fit that stopped at its iteration limit has settled: the objective rose by
    `rise` nats over its last `window` iterations, and at that rate as many iterations again
    as it ran (`iterations`) would gain less than `material_nats(num_data)` (a fall or no
    change is settled too). A fit whose objective rose by 7.6e-05 nats over its last 10 of
    100 iterations would gain about 8e-04 nats more: it has converged in practice."""
    return rise / max(window, 1) * max(iterations, window) < material_nats(num_data)


def limit_message(result: FitResult, name: str, num_data: int, budget_option: str,
                  budget_unit: str) -> str | None:
    """What `fit()` warns about `result` (a `FitResult`), or None. `name` names the model,
    `num_data` its data points (for the per-point rate of a budget), `budget_option` and
    `budget_unit` the option that sets a budget's length and what it counts ("epochs=",
    "epochs"; "maxiter=", "Adam steps")."""
    if result.interrupted:
        return None
    history = list(result.history)
    if result.fixed_budget:
        if not result.success or len(history) < 2:
            return None
        window = max(1, len(history) // 4)
        rate = _rise(history, window) / window
        gain = rate * len(history)  # as many epochs (steps) again, at the final rate
        if gain <= STILL_RISING_PER_POINT * max(num_data, 1):
            return None
        done = result.info.get(budget_unit, result.iterations)  # epochs: info["epochs"]
        return (f"{name}.fit ran its budget of {done} {budget_unit} while the "
                f"objective still rose by {rate:.3g} nats per {budget_unit.rstrip('s')} over "
                f"the last {window} (at that rate, as many again would gain {gain:.3g} nats, "
                f"{gain / max(num_data, 1):.3g} per data point); pass a larger "
                f"{budget_option} (or a larger lr=) to train further")
    if result.success:
        return None
    message = str(result.message)
    rounds = re.match(r"stopped after (\d+) rounds", message)
    if rounds is not None:
        change = (f"; the energy changed by {abs(history[-1] - history[-2]):.3g} in its last "
                  "round" if len(history) >= 2 else "")
        return (f"{name}.fit stopped at its round limit (maxiter={rounds.group(1)} rounds of "
                f"site sweeps and hyperparameter steps) before the energy converged{change}; "
                "pass a larger maxiter= (rounds) or a looser tol=")
    limit = result.info.get("limit")  # set by the L-BFGS-B loop from scipy's status
    if limit is None:
        return None  # a numerical stop (already warned about) or a line search's end
    window = max(1, len(history) // 10)
    if len(history) > window and settled(history[-1] - history[-1 - window], window,
                                         result.iterations, num_data):
        return None  # converged in practice: more iterations would not change the fit
    last = "last iteration" if window == 1 else f"last {window} iterations"
    change = (f": the objective rose by {history[-1] - history[-1 - window]:.3g} nats over its "
              f"{last}" if len(history) > window else "")
    if limit == "iterations":
        what = f"iteration limit (maxiter={result.iterations})"
    else:
        what = (f"limit of objective evaluations ({result.evaluations}, at most "
                "max(15000, 2·maxiter))")
    return (f"{name}.fit stopped at its {what} before L-BFGS-B converged{change}; pass a "
            f"larger maxiter= (e.g. fit(maxiter={2 * max(result.iterations, 1)})) or a looser "
            "tol=")
