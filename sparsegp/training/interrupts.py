"""Ctrl-C and SIGTERM during a fit: what stops it, and what `fit()` does then.

Ctrl-C stops a fit and `fit()` returns the model at its last accepted state
(`FitResult.interrupted`): an interactive fit keeps its work. SIGTERM — what `kill`,
`timeout`, `docker stop` and batch schedulers send to end a program — stops it the same way,
and then `fit()` raises `FitTerminated`, a SystemExit with status 143 (128 + SIGTERM) that
carries the interrupted result: the program ends after the current fit, its `finally:`
blocks run (and can save the model), instead of going on to the next fit until SIGKILL.
`interrupts_end_run` changes either choice.

Training in lock-step (L-BFGS on sharded data, minibatches under DistributedDataParallel)
makes the same collective operations on every rank. A rank that stops on its own — Ctrl-C
in its terminal, a callback's KeyboardInterrupt — leaves the others inside a collective that
it will pair with a different one (a wrong value, silently) or never make (a timeout). So in
lock-step the first Ctrl-C only sets a flag, and at the next agreed point (the end of an
iteration or an epoch) every rank asks whether any rank was interrupted and, if so, all stop.
A second Ctrl-C interrupts at once.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import FrameType

import torch

from ..distributed import any_rank, is_distributed
from .result import INTERRUPTED, TERMINATED, TERMINATED_STATUS, FitResult, FitTerminated


class Interrupts:
    """The flag the deferred Ctrl-C sets (`pressed`), and `call`, run at each agreed point:
    the user's callback, then KeyboardInterrupt on every rank when some rank was
    interrupted."""

    def __init__(self, lockstep: bool, device: torch.device) -> None:
        self.lockstep, self.device, self.pressed = lockstep, device, False

    def call(self, callback: Callable[[int, float], None] | None, i: int, value: float) -> None:
        """Run the user's callback; in lock-step its KeyboardInterrupt is agreed first."""
        stop = False
        if callback is not None:
            try:
                callback(i, value)
            except KeyboardInterrupt:
                if not self.lockstep:
                    raise
                stop = True
        if self.lockstep and any_rank(stop or self.pressed, "an interrupt", self.device):
            raise KeyboardInterrupt


@contextmanager
def agreed_interrupts(lockstep: bool, device: torch.device) -> Iterator[Interrupts]:
    """While training in lock-step (in the main thread), the first Ctrl-C sets the flag that
    `Interrupts.call` reads; without lock-step nothing changes."""
    state = Interrupts(lockstep, device)
    if not lockstep or threading.current_thread() is not threading.main_thread():
        yield state
        return
    previous = signal.getsignal(signal.SIGINT)

    def record(signum: int, frame: FrameType | None) -> None:
        state.pressed = True
        signal.signal(signal.SIGINT, previous)  # a second Ctrl-C interrupts at once

    signal.signal(signal.SIGINT, record)
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, previous)


class Termination:
    """What `termination_as_interrupt` yields: `received` once SIGTERM came during the fit."""

    def __init__(self) -> None:
        self.received = False


_TERMINATION: ContextVar[Termination | None] = ContextVar("sparsegp_termination", default=None)


@contextmanager
def termination_as_interrupt() -> Iterator[Termination | None]:
    """While fitting (in the main thread), SIGTERM — what schedulers, `kill`, `timeout` and
    `docker stop` send — stops training as Ctrl-C does (the model goes back to its last
    accepted state), and records that it came (`Termination.received`), so that `fit()` then
    ends the program (`end_run_if_asked` raises `FitTerminated`, exit status 143) instead of
    returning. The previous handler is put back afterwards, and a second SIGTERM meets it at
    once; between fits SIGTERM keeps its own action. Inside another fit (a callback that
    fits) the outer fit's handler answers. Yields None where SIGTERM keeps its action: under
    torch.distributed (it is how torchrun stops the other ranks when one fails, and a rank
    that went on would wait in the next collective instead), outside the main thread, and
    where the program has a SIGTERM handler of its own or ignores SIGTERM."""
    outer = _TERMINATION.get()
    if outer is not None:
        yield outer
        return
    if is_distributed() or threading.current_thread() is not threading.main_thread():
        yield None
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:  # the program's own handling: it asked for that
        yield None
        return
    state = Termination()

    def interrupt(signum: int, frame: FrameType | None) -> None:
        state.received = True
        signal.signal(signal.SIGTERM, previous)  # a second SIGTERM acts as before
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    token = _TERMINATION.set(state)
    try:
        yield state
    finally:
        _TERMINATION.reset(token)
        signal.signal(signal.SIGTERM, previous)


def terminating() -> bool | None:
    """What the interrupt's warning says: None unless SIGTERM stopped the fit running now;
    then whether `fit()` raises `FitTerminated` (False inside `interrupts_end_run(False)`)."""
    state = _TERMINATION.get()
    if state is None or not state.received:
        return None
    return _ENDS_RUN.get() is not False


#: What an interrupted fit does at its end: None (the default) ends the program after a
#: SIGTERM and returns after Ctrl-C; True ends it after either; False returns after either.
_ENDS_RUN: ContextVar[bool | None] = ContextVar("sparsegp_interrupt_ends_run", default=None)


@contextmanager
def interrupts_end_run(on: bool | None = True) -> Iterator[None]:
    """Which interrupts end the program rather than return from `fit()`. In every case the
    interrupted fit first puts its model back at the last accepted state and warns once.

    - Outside any `interrupts_end_run` (or with `on=None`): SIGTERM ends the program — `fit()`
      raises `sparsegp.FitTerminated`, a SystemExit with status 143 that carries the
      interrupted `FitResult` as `.result` — while Ctrl-C returns the interrupted result
      (`interrupted=True`), for an interactive fit.
    - `on=True`: Ctrl-C too ends it (`fit()` raises KeyboardInterrupt), for programs that run
      fit after fit (`sparsegp bench`, `sparsegp experiment`), where stopping one fit means
      stopping the program, not going on to the next.
    - `on=False`: `fit()` returns its interrupted result after SIGTERM too, for a program that
      saves and ends by itself.

    The model object holds the last accepted state either way, so a `finally:` (or
    `except SystemExit:`) around the fits can still save it:

        >>> import os, signal, warnings
        >>> import sparsegp as sg
        >>> from sparsegp.training import interrupts_end_run
        >>> X, y = sg.datasets.snelson()
        >>> def terminate(i, objective):
        ...     if i == 2:
        ...         os.kill(os.getpid(), signal.SIGTERM)
        >>> model = sg.SGPR(X, y, inducing_points=10)
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     try:
        ...         model.fit(callback=terminate, progress=False)
        ...     except sg.FitTerminated as stop:
        ...         print(stop.code, stop.result.interrupted, stop.result.iterations)
        ...     with interrupts_end_run(False):
        ...         result = model.fit(callback=terminate, progress=False)
        143 True 2
        >>> result.interrupted
        True

    `fit()` leaves SIGTERM alone (it keeps its action) under torch.distributed, outside the
    main thread, and where the program installed a SIGTERM handler of its own (or ignores
    SIGTERM): that handler answers."""
    token = _ENDS_RUN.set(None if on is None else bool(on))
    try:
        yield
    finally:
        _ENDS_RUN.reset(token)


def end_run_if_asked(result: FitResult, termination: Termination | None) -> FitResult:
    """The end of `fit()`, after `termination_as_interrupt(termination)`: raise
    `FitTerminated` when SIGTERM stopped it, KeyboardInterrupt after Ctrl-C, as
    `interrupts_end_run` asks; else return `result`. Inside another fit the interrupt is
    raised as KeyboardInterrupt, for the outer fit to answer."""
    ends = _ENDS_RUN.get()
    if termination is not None and termination.received:
        result = dataclasses.replace(result, message=result.message.replace(INTERRUPTED,
                                                                            TERMINATED))
        if ends is not False:
            if _TERMINATION.get() is not None:  # inside another fit: it answers
                raise KeyboardInterrupt
            raise FitTerminated(result)
    if result.interrupted and ends is True:
        raise KeyboardInterrupt
    return result


def warn_interrupted(what: str, where: str, stacklevel: int = 3) -> None:
    """The one message every training loop gives when Ctrl-C (or SIGTERM) stops it."""
    ends = terminating()  # None: not SIGTERM
    then = ("fit() raises sparsegp.FitTerminated, which ends the program with exit status "
            f"{TERMINATED_STATUS} unless caught" if ends
            else "fit() returned (see FitResult.interrupted)")
    warnings.warn(f"{what} {INTERRUPTED if ends is None else TERMINATED} {where}; the model "
                  f"holds the last accepted parameters and {then}", RuntimeWarning,
                  stacklevel=stacklevel)
