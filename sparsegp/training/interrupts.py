"""Interrupts that every torch.distributed rank agrees on.

Training in lock-step (L-BFGS on sharded data, minibatches under DistributedDataParallel)
makes the same collective operations on every rank. A rank that stops on its own — Ctrl-C
in its terminal, a callback's KeyboardInterrupt — leaves the others inside a collective that
it will pair with a different one (a wrong value, silently) or never make (a timeout). So in
lock-step the first Ctrl-C only sets a flag, and at the next agreed point (the end of an
iteration or an epoch) every rank asks whether any rank was interrupted and, if so, all stop.
A second Ctrl-C interrupts at once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch

from ..distributed import any_rank, is_distributed


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

    def record(signum: int, frame: Any) -> None:
        state.pressed = True
        signal.signal(signal.SIGINT, previous)  # a second Ctrl-C interrupts at once

    signal.signal(signal.SIGINT, record)
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def termination_as_interrupt() -> Iterator[None]:
    """While fitting (in the main thread), SIGTERM — what schedulers, `kill` and `docker stop`
    send — stops training as Ctrl-C does: the fit returns the model at its last accepted
    state with `interrupted=True` (and the command line's `--save-interrupted` writes it),
    where the default action would end the process and lose the fit. The previous handler is
    put back afterwards. Under torch.distributed SIGTERM keeps its action: it is how torchrun
    stops the other ranks when one fails, and a rank that went on would wait in the next
    collective instead."""
    if is_distributed() or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def interrupt(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, previous)  # a second SIGTERM acts as before
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


_ENDS_RUN: ContextVar[bool] = ContextVar("sparsegp_interrupt_ends_run", default=False)


@contextmanager
def interrupts_end_run(on: bool = True) -> Iterator[None]:
    """Inside (with `on`): a fit stopped by Ctrl-C or SIGTERM still puts its model back at the
    last accepted state, and then raises KeyboardInterrupt instead of returning — for programs
    that run fit after fit (`sparsegp bench`, `sparsegp experiment`), where stopping one fit
    means stopping the program, not going on to the next. Outside, or with `on=False`, a fit
    returns its interrupted result (what `sparsegp fit --save-interrupted` saves)."""
    token = _ENDS_RUN.set(bool(on))
    try:
        yield
    finally:
        _ENDS_RUN.reset(token)


def end_run_if_asked(interrupted: bool) -> None:
    """Raise KeyboardInterrupt for an interrupted fit inside `interrupts_end_run()`."""
    if interrupted and _ENDS_RUN.get():
        raise KeyboardInterrupt
