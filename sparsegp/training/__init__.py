"""Optimiser loops, written once: L-BFGS-B on full-batch objectives, minibatch Adam with
natural gradients for variational models, Power-EP site schedules; progress bars and
Ctrl-C handling (the model goes back to its last accepted parameters, `fit()` returns; after
SIGTERM it raises `FitTerminated`, which ends the program; `interrupts_end_run` changes
either)."""

from .interrupts import interrupts_end_run
from .lbfgs import fit_lbfgsb
from .natural_gradients import natural_gradient_step
from .result import FitResult, FitTerminated, Snapshot

__all__ = ["FitResult", "FitTerminated", "Snapshot", "fit_lbfgsb", "interrupts_end_run",
           "natural_gradient_step"]
