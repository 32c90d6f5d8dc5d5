"""Adam on a stochastic full-batch objective (e.g. KISS-GP's, whose gradient is estimated
with random probe vectors): `model.training_loss(step)` draws fresh randomness per step, so
the steps follow an unbiased gradient estimate. Ctrl-C keeps the last completed step."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch

from ..validation import positive_float, positive_int
from .progress import progress_bar
from .result import INTERRUPTED, FitResult, Snapshot, warn_interrupted


def fit_adam(model: Any, steps: int, lr: float, progress: bool | None,
             callback: Callable[[int, float], None] | None = None) -> FitResult:
    """`steps` Adam steps (`lr`) on `model.training_loss(step)`; the history holds minus the
    loss estimate of each step."""
    steps = positive_int(steps, "maxiter")
    start = time.perf_counter()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=positive_float(lr, "lr"))
    history: list[float] = []
    bar = progress_bar(progress, steps, f"fit {type(model).__name__}")
    success, message, interrupted, done = True, f"{steps} Adam steps", False, 0
    try:
        for step in range(steps):
            snapshot = Snapshot(model)
            opt.zero_grad()
            loss = model.training_loss(step)
            value = float(loss.detach())
            if not math.isfinite(value):
                snapshot.restore()
                success, message = False, f"the objective became {value} at step {step}"
                break
            loss.backward()
            opt.step()
            history.append(-value)
            done = step + 1
            bar.update(1)
            if callback is not None:
                callback(step, -value)
    except KeyboardInterrupt:
        success, interrupted = False, True
        message = f"{INTERRUPTED} after {done} steps"
        warn_interrupted(f"{type(model).__name__}.fit", f"after {done} steps", stacklevel=4)
    finally:
        bar.close()
    return FitResult(success, message, done, done, history[-1] if history else float("nan"),
                     history, time.perf_counter() - start, interrupted=interrupted,
                     fixed_budget=True)
