"""Full-batch training: scipy's L-BFGS-B on the unconstrained (raw) parameters.

The objective and its gradient come from `model.training_loss()` through torch autograd;
the optimiser's vector is float64 whatever the model's dtype. Frozen parameters
(`requires_grad=False`) are left out. A trial step of the line search at which the
objective cannot be evaluated (a Cholesky that fails, a non-finite value or gradient) is
backed off from (`_TrialSteps`; `info["failed_trials"]` counts the failed evaluations). If
the evaluations keep failing (`TRIAL_FAILURES` in a row), fail at the starting values, or
the user presses Ctrl-C (at any moment, the setup included), training stops, the model is
put back at the last accepted iterate (the starting values before the first), and the
result says so. In lock-step (data sharded over torch.distributed ranks) an interrupt on
any rank stops every rank at the end of the same iteration (`interrupts`).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import numpy as np
import scipy.optimize
import torch
from threadpoolctl import threadpool_limits
from torch import Tensor, nn
from tqdm import tqdm

from ..distributed import broadcast_
from ..linalg import CholeskyError
from ..validation import positive_float, positive_int
from .guard import accepted
from .interrupts import agreed_interrupts, warn_interrupted
from .progress import progress_bar
from .result import INTERRUPTED, FitResult, model_name
from .settle import Probe, SettleRule
from .stall import StallRule

#: The L-BFGS-B fits' default iteration limit (`fit(maxiter=...)`). The stall rule
#: (`stall.StallRule`) ends most fits well before it; kin40k's (N = 10⁴, M = 100) comes within
#: 1% of its converged test scores at about iteration 1,050 and stops at about 1,155.
MAXITER = 2000


class Trainable(Protocol):
    """What `fit_lbfgsb` trains: a model, or any object with its parameters and a loss."""

    def parameters(self) -> Iterable[nn.Parameter]: ...

    def training_loss(self) -> Tensor: ...


class _NonFinite(Exception):
    pass


class StartingPointError(RuntimeError):
    """The objective or its gradient cannot be evaluated at the starting parameters, so there
    is no accepted state to fit from (the model keeps its parameters)."""


#: Failed evaluations in a row (a Cholesky that fails, a non-finite objective or gradient)
#: after which the fit stops; each one shrinks the line search's step about fourfold.
TRIAL_FAILURES = 12


class _TrialSteps:
    """The objective as L-BFGS-B's line search sees it: a trial step at which the evaluation
    fails (`_NonFinite`: a failed Cholesky, a non-finite value or gradient) is answered
    with a finite value the line search rejects, so that it backs off instead of the fit
    stopping. From the last accepted iterate x₀ (objective f₀, gradient g₀) the trial point
    x = x₀ + s gets f₀ + |g₀·s| (above f₀: the sufficient decrease test fails) and the
    gradient −3g₀: along s that is the quadratic φ(t) = f₀ + (g₀·s)(t − 2t²), whose minimum,
    where scipy's interpolation puts the next trial, is at a quarter of the step (a margin of
    1e-12·|f₀| keeps it above f₀ when g₀·s rounds to nothing). Such values are never accepted,
    so they never enter the quasi-Newton memory. (Measured with scipy 1.17: +inf ends the run
    at once, "converged" at the iterate; NaN ends it as abnormal; 10¹⁰ with a zero gradient
    too, within a few iterations.) `TRIAL_FAILURES` failures in a row, or one before any
    iterate is accepted, stop the fit (`_NonFinite` again)."""

    def __init__(self, fun: Callable[[np.ndarray], tuple[float, np.ndarray]],
                 limit: int = TRIAL_FAILURES) -> None:
        self.fun, self.limit = fun, limit
        self.base: tuple[np.ndarray, float, np.ndarray] | None = None  # x₀, f₀, g₀
        self.last: tuple[np.ndarray, float, np.ndarray] | None = None  # the last that worked
        self.failures, self.total = 0, 0  # in a row, and in all
        self.error: str | None = None  # the last failure since the last accepted iterate

    def __call__(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        try:
            f, g = self.fun(x)
        except _NonFinite as err:
            self.failures += 1
            self.total += 1
            self.error = str(err)
            if self.base is None or self.failures >= self.limit:
                raise
            x0, f0, g0 = self.base
            slope = float(g0 @ (x - x0))
            return f0 + abs(slope) + 1e-12 * max(1.0, abs(f0)), -3.0 * g0
        self.failures = 0
        self.last = (x.copy(), f, g)
        if self.base is None:  # the starting point: the first line search starts there
            self.base = self.last
        return f, g

    def accept(self, x: np.ndarray) -> None:
        """L-BFGS-B accepted the iterate x (the point it evaluated last)."""
        if self.last is not None and np.array_equal(self.last[0], x):
            self.base = self.last
        self.error = None


class _Flat:
    """The trainable parameters as one float64 numpy vector, and back."""

    def __init__(self, params: list[nn.Parameter]) -> None:
        self.params = params
        self.sizes = [p.numel() for p in params]

    def get(self) -> np.ndarray:
        return np.concatenate([p.detach().cpu().double().reshape(-1).numpy() for p in self.params])

    def set(self, x: np.ndarray) -> None:
        offset = 0
        with torch.no_grad():
            for p, n in zip(self.params, self.sizes):
                p.copy_(torch.from_numpy(x[offset:offset + n]).view_as(p))
                offset += n

    def grad(self, grads: tuple) -> np.ndarray:
        parts = [np.zeros(n) if g is None else g.detach().cpu().double().reshape(-1).numpy()
                 for g, n in zip(grads, self.sizes)]
        return np.concatenate(parts)


def fit_lbfgsb(
    model: Trainable,
    maxiter: int = MAXITER,
    tol: float | None = None,
    progress: bool | None = None,
    callback: Callable[[int, float], None] | None = None,
    lockstep: bool = False,
    stall: StallRule | None = None,
    settle: SettleRule | None = None,
    probe: Probe | None = None,
) -> FitResult:
    """Maximise the model's objective (minimise `training_loss()`) with L-BFGS-B.

    `tol` is passed to scipy (ftol and gtol); with a `stall` rule the fit also stops,
    converged, once the rule says the objective has stalled (`stall.StallRule`: scipy's
    default ftol is relative to the objective, 2.2e-9·|f|, and on large data sets keeps it
    iterating long after the hyperparameters and predictions have settled); with a `settle`
    rule and a `probe` (the predictive mean and variance at fixed inputs, `settle.Probe`)
    it also stops once the predictions have settled (`settle.SettleRule`), whichever rule
    fires first;
    `progress=None` shows a bar on a terminal;
    `callback(iteration, objective)` is called after every iteration. With `lockstep`
    (data sharded over torch.distributed ranks) every evaluation's value and gradient are
    rank 0's, so that all ranks' optimisers take identical steps.
    """
    name = model_name(model)
    start = time.perf_counter()
    history: list[float] = []
    # the last accepted iterate and its objective (NaN until the first evaluation returns)
    best: dict[str, Any] = {"x": None, "f": float("nan")}
    flat: _Flat | None = None
    trials: _TrialSteps | None = None
    bar: tqdm | None = None
    evaluations = 0
    info: dict = {}
    stalled: dict[str, str | None] = {"why": None, "rule": "stalled"}
    success, interrupted, message = False, False, ""
    try:  # from the first instant: Ctrl-C in the setup leaves the starting values
        maxiter = positive_int(maxiter, "maxiter")
        tol = None if tol is None else positive_float(tol, "tol")
        if stall is not None and not isinstance(stall, StallRule):
            raise TypeError(f"stall must be a training.stall.StallRule or None; got "
                            f"{type(stall).__name__}")
        if settle is not None and not isinstance(settle, SettleRule):
            raise TypeError(f"settle must be a training.settle.SettleRule or None; got "
                            f"{type(settle).__name__}")
        if probe is not None and not callable(probe):
            raise TypeError(f"probe must be callable as probe() -> (mean, variance); got "
                            f"{type(probe).__name__}")
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be callable as callback(iteration, objective); "
                            f"got {type(callback).__name__}")
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            obj = -float(model.training_loss().detach())
            return accepted(FitResult(True, "no trainable parameters (all frozen)", 0, 1, obj,
                                      [obj]))
        flat = _Flat(params)
        x0 = flat.get()
        best["x"] = x0.copy()
        device = params[0].device
        fun = _objective(model, params, flat, lockstep, device)
        trials = _TrialSteps(fun)

        def counted(x: np.ndarray) -> tuple[float, np.ndarray]:
            nonlocal evaluations
            evaluations += 1
            return trials(x)

        bar = progress_bar(progress, maxiter, f"fit {name}")
        tracker = settle.tracker(probe) if settle is not None and probe is not None else None

        def settled(iteration: int) -> str | None:
            try:
                return tracker.update(iteration) if tracker is not None else None
            except CholeskyError:  # no predictions here: no check (nor one needing them)
                return None

        def on_iteration(intermediate_result: scipy.optimize.OptimizeResult) -> None:
            best["x"], best["f"] = intermediate_result.x.copy(), float(intermediate_result.fun)
            trials.accept(best["x"])
            history.append(-best["f"])
            bar.update(1)
            bar.set_postfix(objective=f"{history[-1]:.6g}")
            if callback is not None:  # the model at the accepted iterate, which it sees
                flat.set(best["x"])
            interrupts.call(callback, len(history) - 1, history[-1])
            if stall is not None:
                stalled["why"] = stall.check(history)
                if stalled["why"] is not None:
                    raise StopIteration  # scipy ends the run: converged by the stall rule
            if tracker is not None and (len(history) - 1) % tracker.rule.every == 0:
                flat.set(best["x"])  # the accepted iterate (the last evaluation may differ)
                why = settled(len(history) - 1)
                if why is not None:
                    stalled["why"], stalled["rule"] = why, "settled"
                    raise StopIteration  # converged by the settling rule

        options = {"maxiter": maxiter, "maxfun": max(15000, 2 * maxiter)}
        with agreed_interrupts(lockstep, device) as interrupts:
            try:
                f0, _ = counted(x0)  # no iterate yet to back off to: a failure here stops it
            except _NonFinite as err:
                flat.set(x0)
                raise StartingPointError(
                    f"cannot fit {name}: at the starting parameters {err}"
                ) from None
            history.append(-f0)
            best["f"] = f0
            settled(0)  # the starting predictions (the model is at x0)
            # numpy/scipy's own BLAS threads spin against torch's: the optimiser's vector
            # work is tiny, so give it one thread (measured: 4× faster fits on small problems).
            with threadpool_limits(1, user_api="blas"):
                res = scipy.optimize.minimize(counted, x0, jac=True, method="L-BFGS-B", tol=tol,
                                              options=options, callback=on_iteration)
        if res.status not in (0, 1, 99) and trials.error is not None:
            raise _NonFinite(trials.error)  # the line search gave up on failing trial steps
        flat.set(res.x)
        if trials.total:
            info["failed_trials"] = trials.total  # evaluations that failed, backed off from
        success, message, nit = bool(res.success), str(res.message), int(res.nit)
        if res.status == 1:  # a budget ran out, whatever words this scipy's message uses
            info["limit"] = "iterations" if nit >= maxiter else "evaluations"
        if res.status == 99 and stalled["why"] is not None:  # the callback's StopIteration
            success, message = True, (f"converged: {stalled['why']} (pass tol= to run "
                                      "L-BFGS-B to its own tolerance)")
            info[str(stalled["rule"])] = True
        objective = -float(res.fun)
    except (_NonFinite, KeyboardInterrupt) as err:
        if flat is not None and best["x"] is not None:
            flat.set(best["x"])
        nit, objective = max(len(history) - 1, 0), -best["f"]
        success = False
        if isinstance(err, KeyboardInterrupt):
            interrupted = True
            message = f"{INTERRUPTED} at iteration {nit}"
            warn_interrupted(f"{name}.fit", f"at iteration {nit}", stacklevel=3)
        else:
            summary = model.summary() if hasattr(model, "summary") else ""
            message = (f"stopped at iteration {nit}: {str(err).rstrip('.')}. The model holds "
                       f"the last accepted (finite) parameter values:\n{summary}")
            info["non_finite"] = True
            if trials is not None:
                info["failed_trials"] = trials.total
            warnings.warn(f"{name}.fit {message}", RuntimeWarning, stacklevel=3)
    finally:
        if bar is not None:
            bar.close()
    return accepted(FitResult(success, message, nit, evaluations, objective, history,
                              time.perf_counter() - start, info, interrupted))


def _objective(model: Trainable, params: list[nn.Parameter], flat: _Flat, lockstep: bool,
               device: torch.device) -> Callable[[np.ndarray], tuple[float, np.ndarray]]:
    """x ↦ (training loss, its gradient) at the raw parameters x (set on the model); with
    `lockstep` rank 0's on every rank. A failed Cholesky factorisation or a non-finite value
    raises `_NonFinite`."""

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        flat.set(x)
        try:
            loss = model.training_loss()
        except CholeskyError as err:
            raise _NonFinite(str(err)) from None
        f = float(loss.detach())
        g = flat.grad(torch.autograd.grad(loss, params, allow_unused=True))
        if lockstep:
            fg = torch.from_numpy(np.concatenate([[f], g])).to(device)  # NCCL: on the GPU
            broadcast_([fg], "the objective and gradient")
            fg = fg.cpu()
            f, g = float(fg[0]), fg[1:].numpy()
        if not np.isfinite(f):
            raise _NonFinite(f"the objective became {f}")
        if not np.all(np.isfinite(g)):
            raise _NonFinite("the gradient became non-finite")
        return f, g

    return fun
