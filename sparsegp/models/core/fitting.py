"""One `fit()` for every model: its options typed once (`FitOptions`), and the model's
training plan (`TrainingPlan`: L-BFGS-B on a collapsed bound, minibatch Adam with natural
gradients, Power-EP site schedules, Adam on a stochastic estimate, ...).

A model declares the options its plans take (`fit_options`) and chooses a plan from the
options given (`training_plan`); `run` (what `fit` calls) refuses an option the model never
takes (TypeError), warns about one given to a plan that does not take it (it would be
ignored in silence), runs the plan, and gives a `ConvergenceWarning` when the fit stopped at
its iteration or round limit, or ran out of its epoch budget while the objective still rose
(`diagnostics.convergence`). No model overrides `fit`. `restart_if_stuck` is what
regression models do after L-BFGS-B: a fit that started and stalled with a lengthscale far
beyond the inputs' extent is tried again from the data-based starting values.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any, ClassVar, NamedTuple, Protocol, TypeVar

import torch
from torch import Tensor, nn

from ...diagnostics.convergence import ConvergenceWarning, limit_message, material_nats
from ...diagnostics.starts import far_lengthscales
from ...linalg import CholeskyError
from ...training import FitResult, Snapshot
from ...training.guard import FitGuard, accepted
from ...training.interrupts import end_run_if_asked, termination_as_interrupt
from ...training.options import warn_unused
from ...training.settle import SettleRule
from ...training.stall import StallRule
from ...validation import check_bool

T = TypeVar("T")


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
    # callback(iteration, objective) after every iteration or epoch
    callback: Callable[[int, float], None] | None = None
    diagnose: bool | None = None  # checks after fitting (regression models; default True)
    batch_size: int | None = None  # minibatch training
    epochs: int | None = None
    lr: float | None = None  # Adam's learning rate
    natgrad: bool | None = None  # natural-gradient steps on q(u) (default True)
    gamma: float | None = None  # their step size
    seed: int | None = None  # the minibatches' draws
    data: Iterable[tuple[Tensor, Tensor]] | None = None  # a DataLoader of (X, y) batches (SVGP)
    schedule: str | None = None  # SGPC: "full" or "stochastic"
    inner_maxiter: int | None = None  # SGPC's full schedule
    max_sweeps: int | None = None
    sweeps_per_batch: int | None = None  # SGPC's stochastic schedule
    refresh_every: int | None = None

    def __post_init__(self) -> None:
        for name in ("progress", "diagnose", "natgrad"):  # "False" (a string) would be true
            if getattr(self, name) is not None:
                check_bool(getattr(self, name), name)

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


class Trainable(Protocol):
    """What `run` needs of a model."""

    fit_options: ClassVar[frozenset[str]]

    @property
    def num_data(self) -> int: ...

    def _require_data(self) -> None: ...

    def training_plan(self, options: FitOptions) -> TrainingPlan: ...


def run(model: Trainable, options: FitOptions) -> FitResult:
    """`fit()` of every model (see `Model.fit`): refuse an option the model never takes
    (TypeError), warn about one the chosen plan does not read, run the plan under the guard
    against interrupts, then warn when it stopped at its limit before converging."""
    given = options.given()
    refused = sorted(set(given) - model.fit_options)
    if refused:
        raise TypeError(f"{type(model).__name__}.fit() takes no {', '.join(refused)} (it "
                        f"takes {', '.join(sorted(model.fit_options))})")
    model._require_data()
    plan = model.training_plan(options)
    ignored = {k: v for k, v in given.items() if k not in plan.takes | ALWAYS}
    warn_unused(ignored, plan.others, plan.name)
    # SIGTERM stops training as Ctrl-C does; an interrupt that escapes the plan (its setup,
    # its checks after training) or the limit check leaves the last accepted state (then
    # SIGTERM raises FitTerminated, and inside `interrupts_end_run()` Ctrl-C raises
    # KeyboardInterrupt)
    if not isinstance(model, nn.Module):
        raise TypeError(f"fit() trains a torch module, not {type(model).__name__}")
    with termination_as_interrupt() as termination, FitGuard(model, stacklevel=3) as guard:
        result = plan.run(options)
        if options.diagnose is not False:
            budget = (("epochs=", "epochs") if "epochs" in plan.takes
                      else ("maxiter=", "steps"))
            message = limit_message(result, type(model).__name__, int(model.num_data),
                                    *budget)
            if message is not None:
                warnings.warn(message, ConvergenceWarning, stacklevel=3)
    if guard.result is not None:
        result = guard.interrupted_result()
    return end_run_if_asked(result, termination)


#: The default stopping rule of the L-BFGS-B fits (`training.stall.StallRule`): stop once the
#: last 25 iterations gained less than `STALL_GAIN`·N/1000 nats and the decay of the last two
#: windows' gains says the rest would add less than `STALL_REST`·N/1000 (shorter windows, from
#: 5 iterations, before iteration 50: a warm-started refit of friedman1, N = 2,200, stops at
#: iteration 10 as it did under the former rule, instead of 50). Measured on SGPR fits
#: of twelve data sets run to 3,000 iterations (friedman1, kin40k, pumadyn32nm, nine UCI
#: sets): the rule stops kin40k (N = 10⁴) at 1,155 iterations and protein (N = 41,157) at 435,
#: both within 1% of their converged test RMSE and NLPD, where ten iterations gaining less
#: than N/10⁴ stopped them at 910 and 319, 1.8% and 1.2% above it; friedman1 (N = 2·10⁴) stops
#: at 154 rather than 143 and the power plant data at 119 rather than 110. Without a floor
#: small problems (cheap iterations) run close to the optimum: yacht (N = 277) stops at 631,
#: within 1%, where the former rule's floor of 0.1 nats stopped it at 177, 6.7% above.
#: Boston housing (N = 455) crawls along a plateau from about iteration 200 to 700 and comes
#: within 1% only at about 1,300; the rule stops it at 767, 1.7% above.
STALL_GAIN, STALL_REST = 0.25, 0.4


def stall_rule(num_data: int, options: FitOptions) -> StallRule | None:
    """The stall rule of an L-BFGS-B fit on `num_data` points; None when the user gave `tol`
    (scipy's own tolerances then decide alone)."""
    if options.tol is not None:
        return None
    scale = num_data / 1000  # nats; material_nats(N) without its floor
    return StallRule(gain_nats=STALL_GAIN * scale, remaining_nats=STALL_REST * scale)


#: The settling rule of the L-BFGS-B fits of models that probe their predictions
#: (`training.settle.SettleRule`, GPR and SGPR): a check every 5 iterations over windows of 10
#: to 25 iterations (the first at iteration 20); the fit stops once the predictions' moves
#: shrank at this check and the one before and their extrapolated rest is below
#: `SETTLE_REST` (at `SETTLE_CONFIRM` checks in a row). Measured on SGPR fits
#: (benchmarks/RESULTS.md, "Stopping on the predictions"): friedman1 (N = 2·10⁴, within 1% of
#: its converged test scores at iteration 10) stops at 20, the power plant data (within 1% at
#: 40) at 50; kin40k's smallest rest before it comes within 1% (iteration 890) is 0.034, at
#: iteration 55, 2.3× above the threshold, and it is stopped by the stall rule. Power EP
#: (α = 0.5) on the power plant data stops at 60 with its test RMSE 1.3% above the
#: converged fit's (the stall rule alone: 270 iterations).
SETTLE_REST, SETTLE_CONFIRM = 0.015, 1
#: Whether default fits use it (`settle_rule`).
SETTLE_BY_DEFAULT = True
#: The training inputs at which the settling rule follows the predictions (the models' probes)
PROBES = 256


def probe_rows(X: Tensor) -> Tensor:
    """The rows of X [N, D] a probe predicts at: `PROBES` of them (all, for fewer) spread
    evenly over the rows [min(N, PROBES)]."""
    n = int(X.shape[0])
    return torch.linspace(0, n - 1, min(n, PROBES), device=X.device).round().long()


def settle_rule(options: FitOptions, default: bool | None = None) -> SettleRule | None:
    """The settling rule of an L-BFGS-B fit: None when the user gave `tol`, or when it is not
    on (`default`, by default `SETTLE_BY_DEFAULT`)."""
    on = SETTLE_BY_DEFAULT if default is None else default
    if options.tol is not None or not on:
        return None
    return SettleRule(rest=SETTLE_REST, confirm=SETTLE_CONFIRM)


#: SGPC's full schedule ends once a round changes its energy by less than this fraction of
#: material_nats(N) (see `SGPC.training_plan`).
ROUND_FRACTION = 0.1


def round_stall_nats(num_data: int, options: FitOptions) -> float | None:
    """SGPC's round threshold (nats) on `num_data` points; None when the user gave `tol`."""
    return None if options.tol is not None else ROUND_FRACTION * material_nats(num_data)


def default(value: T | None, fallback: T) -> T:
    """`value`, or `fallback` where it is None (an option not given)."""
    return fallback if value is None else value


def restart_if_stuck(model: Any, result: FitResult, start: Snapshot,
                     reset: Callable[[], None], refit: Callable[[], FitResult],
                     stacklevel: int = 4) -> FitResult:
    """After a fit (`result`) of `model` from the values `start` holds: when a trainable
    lengthscale started and ended far beyond the inputs' extent
    (`diagnostics.starts.far_lengthscales`), the fit may have stalled where the kernel is
    nearly constant over the data (the objective is flat in the lengthscale there). The model
    then goes back to `start`, takes the data-based starting values (`reset()`: those of the
    trainable hyperparameters) and trains again (`refit()`); it keeps that fit when it ends
    higher by more than max(1, N/1000) nats, and a `ConvergenceWarning` and the returned
    result's message say so (`info["restart"]`: the first fit's objective and iterations).
    Otherwise the model and `result` are left as they were. Nothing is evaluated unless a
    lengthscale ended far out; a lengthscale that grew there from a start within the data's
    extent (an input that does not matter, say) is taken as found. With sharded data every
    rank decides alike. `stacklevel` 4 points the warning at the caller of `fit()` when the
    plan's `run` calls this."""
    sharded = model.placement.sharded
    far = far_lengthscales(model.kernel, model.X, sharded)
    if far is None:
        return result
    fitted = Snapshot(model)
    start.restore()
    if far_lengthscales(model.kernel, model.X, sharded) is None:  # it went there on its own
        fitted.restore()
        return accepted(result)
    try:
        reset()
        again = refit()
    except (CholeskyError, ValueError):  # the data-based values are no start here
        fitted.restore()
        return accepted(result)
    if not again.objective > result.objective + material_nats(model.num_data):
        fitted.restore()
        return accepted(dataclasses.replace(result,
                                            interrupted=result.interrupted or again.interrupted))
    first = (f"the fit from the given starting values stayed at {far}, where the kernel is "
             f"nearly constant over the data, and ended at objective {result.objective:.6g}")
    warnings.warn(f"{type(model).__name__}.fit: {first}. A fit from the data-based starting "
                  "values (lengthscales from the inputs' spread, signal variance var(y), noise "
                  f"var(y)/10) reached {again.objective:.6g} and is kept; freeze a value to "
                  "keep it as given (model.kernel.freeze(\"lengthscale\"))",
                  ConvergenceWarning, stacklevel=stacklevel)
    return dataclasses.replace(
        again, message=f"restarted from the data-based starting values ({first}); "
        f"{again.message}", evaluations=result.evaluations + again.evaluations,
        seconds=result.seconds + again.seconds,
        info={**again.info, "restart": {"first_objective": result.objective,
                                        "first_iterations": result.iterations}})
