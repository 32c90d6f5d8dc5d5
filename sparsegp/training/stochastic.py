"""Adam on a stochastic full-batch objective (e.g. KISS-GP's, whose gradient is estimated
with random probe vectors): `model.training_loss(step)` draws fresh randomness per step, so
the steps follow an unbiased gradient estimate. Ctrl-C at any moment keeps the last completed
step (the starting values before the first; a step interrupted half-way is undone)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch
from tqdm import tqdm

from ..validation import positive_float, positive_int
from .guard import accepted
from .interrupts import warn_interrupted
from .progress import progress_bar
from .result import INTERRUPTED, FitResult, Snapshot


def fit_adam(model: Any, steps: int, lr: float, progress: bool | None,
             callback: Callable[[int, float], None] | None = None) -> FitResult:
    """`steps` Adam steps (`lr`) on `model.training_loss(step)`; the history holds minus the
    loss estimate of each step."""
    start = time.perf_counter()
    name = type(model).__name__
    history: list[float] = []
    bar: tqdm | None = None
    success, message, interrupted, done = True, "", False, 0
    try:  # from the first instant: Ctrl-C in the setup leaves the starting values
        steps = positive_int(steps, "maxiter")
        message = f"{steps} Adam steps"
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.Adam(params, lr=positive_float(lr, "lr"))
        bar = progress_bar(progress, steps, f"fit {name}")
        for step in range(steps):
            snapshot = Snapshot(model)
            try:  # a step interrupted half-way is undone
                opt.zero_grad()
                loss = model.training_loss(step)
                value = float(loss.detach())
                if not math.isfinite(value):
                    snapshot.restore()
                    success, message = False, f"the objective became {value} at step {step}"
                    break
                loss.backward()
                opt.step()
            except KeyboardInterrupt:
                snapshot.restore()
                raise
            history.append(-value)
            done = step + 1
            bar.update(1)
            if callback is not None:
                callback(step, -value)
    except KeyboardInterrupt:
        success, interrupted = False, True
        message = f"{INTERRUPTED} after {done} steps"
        warn_interrupted(f"{name}.fit", f"after {done} steps", stacklevel=4)
    finally:
        if bar is not None:
            bar.close()
    return accepted(FitResult(success, message, done, done,
                              history[-1] if history else float("nan"), history,
                              time.perf_counter() - start, interrupted=interrupted,
                              fixed_budget=True))
