"""A whole fit guarded against Ctrl-C (and SIGTERM, which `fit()` turns into Ctrl-C while it
trains, and after which it raises `FitTerminated` once the guard has put the model back; see
`training.interrupts`): the setup before the first step, the loop, the work after it and the
checks of the fitted model.

Each training loop handles an interrupt in its own steps (it puts the model back at its last
accepted step) and reports the state it leaves through `accepted`. `FitGuard` covers the rest
of a plan: a KeyboardInterrupt that escapes its block — raised before a loop began, or after
one returned (a final update, a check of the fitted model) — puts the model back at the state
the last loop reported (the starting values if none did) and leaves that loop's result,
marked interrupted, in `guard.result`, instead of ending the program and losing the fit:

    with FitGuard(model) as guard:
        return train(model)
    return guard.interrupted_result()  # reached only after an interrupt
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from contextvars import ContextVar, Token
from types import TracebackType
from typing import TypeVar

from torch import nn

from .interrupts import warn_interrupted
from .result import INTERRUPTED, FitResult, Snapshot, model_name


class _Fit:
    """The guarded fit of `model`: its last accepted state (a `Snapshot`) and the result of
    the loop that left it there (None while no loop has returned)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.state = Snapshot(model)
        self.result: FitResult | None = None


_FIT: ContextVar[_Fit | None] = ContextVar("sparsegp_guarded_fit", default=None)


def accepted(result: FitResult) -> FitResult:
    """What every training loop returns through: inside a guarded fit, the model's state now
    is the one `result` describes (the state an escaped interrupt goes back to). Returns
    `result`."""
    fit = _FIT.get()
    if fit is not None:
        fit.state, fit.result = Snapshot(fit.model), result
    return result


class FitGuard:
    """Guards a block that fits `model` (see the module's docstring): a KeyboardInterrupt
    that escapes it is not raised; the model goes back to its last accepted state, one
    RuntimeWarning says so, and `result` is the `FitResult` to return (`interrupted=True`).
    Inside another guard of the same model it does nothing (the outer one answers).
    `stacklevel` places the warning: 1 is the frame holding the `with`, 2 its caller; the
    default 3 is the caller of `fit()` when a plan's `run` holds the guard."""

    def __init__(self, model: nn.Module, stacklevel: int = 3) -> None:
        self.model, self.stacklevel = model, stacklevel
        self.result: FitResult | None = None
        self._fit: _Fit | None = None
        self._token: Token[_Fit | None] | None = None
        self._start = time.perf_counter()

    def __enter__(self) -> FitGuard:
        outer = _FIT.get()
        if outer is None or outer.model is not self.model:
            self._fit = _Fit(self.model)
            self._token = _FIT.set(self._fit)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> bool:
        if self._token is not None:
            _FIT.reset(self._token)
        if self._fit is None or kind is None or not issubclass(kind, KeyboardInterrupt):
            return False
        self.result = _interrupted(self.model, self._fit, time.perf_counter() - self._start,
                                   self.stacklevel + 3)  # + _interrupted, __exit__, warn_*
        return True

    def interrupted_result(self) -> FitResult:
        """The result to return after the guarded block: what it holds once an interrupt was
        caught."""
        if self.result is None:
            raise RuntimeError("the guarded block neither returned nor was interrupted")
        return self.result


Options = TypeVar("Options")


def guarded(model: nn.Module, run: Callable[[Options], FitResult]
            ) -> Callable[[Options], FitResult]:
    """A training plan's `run(options)` inside a `FitGuard` of `model`, for plans that cannot
    hold the guard themselves (it adds one frame between `fit()` and the plan)."""

    def run_guarded(options: Options) -> FitResult:
        with FitGuard(model) as guard:
            return run(options)
        return guard.interrupted_result()

    return run_guarded


def _interrupted(model: nn.Module, fit: _Fit, seconds: float, stacklevel: int) -> FitResult:
    """The model back at its last accepted state, and the result that says so."""
    name = f"{model_name(model)}.fit"
    fit.state.restore()
    last = fit.result
    if last is None:  # nothing accepted: the starting values
        warn_interrupted(name, "before its first step", stacklevel)
        return FitResult(False, f"{INTERRUPTED} before the first step", 0, 0, math.nan, [],
                         seconds, interrupted=True)
    if last.interrupted:  # the loop said so already
        return dataclasses.replace(last, seconds=seconds)
    warn_interrupted(name, "after its last step", stacklevel)
    return dataclasses.replace(last, success=False, interrupted=True, seconds=seconds,
                               message=f"{INTERRUPTED} after training ({last.message})")
