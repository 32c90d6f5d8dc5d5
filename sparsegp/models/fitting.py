"""One `fit()` for every model: its options typed once (`FitOptions`), and the model's
training plan (`TrainingPlan`: L-BFGS-B on a collapsed bound, minibatch Adam with natural
gradients, Power-EP site schedules, Adam on a stochastic estimate, ...).

A model declares the options its plans take (`fit_options`) and chooses a plan from the
options given (`training_plan`); `fit` refuses an option the model never takes (TypeError),
warns about one given to a plan that does not take it (it would be ignored in silence), and
runs the plan. No model overrides `fit`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, ClassVar, NamedTuple

from ..training import FitResult
from ..training.interrupts import termination_as_interrupt
from ..training.options import warn_unused


@dataclass(frozen=True)
class FitOptions:
    """Every option of `fit()`; None means the plan's default. Which a model takes is its
    `fit_options`; what each means is in its plan (the model's `training_plan`).

        >>> import sparsegp as sg
        >>> X, y = sg.datasets.snelson()
        >>> m = sg.SVGP(X, y, inducing_points=10)
        >>> m.training_plan(sg.FitOptions()).name
        'full-batch L-BFGS-B (`maxiter`)'
        >>> m.training_plan(sg.FitOptions(batch_size=50)).name
        'minibatch training because of batch_size given (`epochs` sets its length)'
    """

    maxiter: int | None = None  # iterations (L-BFGS-B, Adam steps, EP rounds)
    tol: float | None = None  # L-BFGS-B's tolerance; the EP energy's
    progress: bool | None = None  # a progress bar (None: on a terminal)
    callback: Any = None  # callback(iteration, objective) after every iteration or epoch
    diagnose: bool | None = None  # check the fitted model (regression models; default True)
    batch_size: int | None = None  # minibatch training
    epochs: int | None = None
    lr: float | None = None  # Adam's learning rate
    natgrad: bool | None = None  # natural-gradient steps on q(u) (default True)
    gamma: float | None = None  # their step size
    seed: int | None = None  # the minibatches' draws
    data: Any = None  # a DataLoader of (X, y) batches (SVGP)
    schedule: str | None = None  # SGPC: "full" or "stochastic"
    inner_maxiter: int | None = None  # SGPC's full schedule
    max_sweeps: int | None = None
    sweeps_per_batch: int | None = None  # SGPC's stochastic schedule
    refresh_every: int | None = None

    def given(self) -> dict[str, Any]:
        """The options given (not None), by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}


class TrainingPlan(NamedTuple):
    """One way of training a model: `run(options)` trains it and returns the `FitResult`.
    `takes`: the options it reads; `name` and `others` (who reads the rest) word the warning
    for an option it would ignore."""

    name: str
    takes: frozenset[str]
    run: Callable[[FitOptions], FitResult]
    others: str = "another way of training"


#: Options every plan reads.
ALWAYS = frozenset({"progress"})


class Fitting:
    """`fit()` for every model (the base classes inherit it)."""

    #: The options this model's `fit` takes (those of all its plans); any other is refused.
    fit_options: ClassVar[frozenset[str]] = frozenset({"maxiter", "tol", "progress", "callback"})

    def fit(self, maxiter: int | None = None, tol: float | None = None,
            progress: bool | None = None, callback: Any = None, *,
            diagnose: bool | None = None, batch_size: int | None = None,
            epochs: int | None = None, lr: float | None = None, natgrad: bool | None = None,
            gamma: float | None = None, seed: int | None = None, data: Any = None,
            schedule: str | None = None, inner_maxiter: int | None = None,
            max_sweeps: int | None = None, sweeps_per_batch: int | None = None,
            refresh_every: int | None = None) -> FitResult:
        """Train the model by its training plan and return the `FitResult` (Ctrl-C stops at
        the last accepted state; the result says it was interrupted).

        Which options a model takes (`fit_options`), their defaults and the plan they choose
        are the model's: see its `training_plan`. SIGTERM (schedulers, `docker stop`) stops
        training as Ctrl-C does. An option the model never takes is a
        TypeError; one that the chosen plan does not read gives a warning naming it."""
        options = FitOptions(maxiter, tol, progress, callback, diagnose, batch_size, epochs,
                             lr, natgrad, gamma, seed, data, schedule, inner_maxiter,
                             max_sweeps, sweeps_per_batch, refresh_every)
        given = options.given()
        refused = sorted(set(given) - self.fit_options)
        if refused:
            raise TypeError(f"{type(self).__name__}.fit() takes no {', '.join(refused)} (it "
                            f"takes {', '.join(sorted(self.fit_options))})")
        model: Any = self  # a ModelCore, which declares training_plan
        model._require_data()
        plan = model.training_plan(options)
        ignored = {k: v for k, v in given.items() if k not in plan.takes | ALWAYS}
        warn_unused(ignored, plan.others, plan.name)
        with termination_as_interrupt():  # SIGTERM stops training as Ctrl-C does
            return plan.run(options)


def default(value: Any, fallback: Any) -> Any:
    """`value`, or `fallback` where it is None (an option not given)."""
    return fallback if value is None else value
