"""Optimiser loops, written once: L-BFGS-B on full-batch objectives, minibatch Adam with
natural gradients for variational models, Power-EP site schedules; progress bars and
Ctrl-C handling (the model goes back to its last accepted parameters, `fit()` returns)."""

from .lbfgs import fit_lbfgsb
from .natural_gradients import natural_gradient_step
from .result import FitResult, Snapshot

__all__ = ["FitResult", "Snapshot", "fit_lbfgsb", "natural_gradient_step"]
