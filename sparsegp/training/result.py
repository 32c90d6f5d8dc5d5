"""What a fit returns, and taking the model back to its last accepted state."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ..moved import former


@dataclass
class FitResult:
    """What `fit()` did: success, the optimiser's message and the objective's history.

    `interrupted` is True when the user stopped training (Ctrl-C): the model then holds the
    last accepted parameters, and `fit()` returned normally. After SIGTERM `fit()` raises
    `FitTerminated` instead, which carries this result (see `training.interrupts`).
    Shapes: scalars, `history` a list of floats (the objective at the start and after every
    iteration), `info` a dict of model-specific counts.

    Example:

        >>> import sparsegp as sg
        >>> X, y = sg.datasets.snelson()
        >>> result = sg.SGPR(X, y, inducing_points=10).fit(maxiter=5)
        >>> isinstance(result, sg.FitResult), result.iterations, result.interrupted
        (True, 5, False)
        >>> len(result.history) == result.iterations + 1, result.history[-1] == result.objective
        (True, True)
        >>> str(result).startswith(("converged", "stopped", "finished"))
        True
    """

    success: bool
    message: str
    iterations: int
    evaluations: int
    objective: float  # final training objective: log marginal likelihood (+ log prior)
    history: list[float] = field(default_factory=list)  # objective at start and per iteration
    seconds: float = 0.0
    info: dict = field(default_factory=dict)  # model-specific counts (e.g. EP sweeps)
    interrupted: bool = False
    fixed_budget: bool = False  # a set number of steps (Adam, minibatches): no convergence test

    def __str__(self) -> str:
        state = ("interrupted" if self.interrupted else "stopped" if not self.success
                 else "finished" if self.fixed_budget else "converged")
        return (f"{state} after {self.iterations} iterations ({self.evaluations} evaluations, "
                f"{self.seconds:.2f} s): objective {self.objective:.6g}; {self.message}")


class Snapshot:
    """Copies of a module's parameters and state buffers, to go back to after an interrupt.

    Data buffers (`exclude`, e.g. the training inputs) are not copied.
    """

    def __init__(self, module: nn.Module, exclude: tuple[str, ...] = ("X", "y")) -> None:
        named = [*module.named_parameters(), *module.named_buffers()]
        self._saved: list[tuple[Tensor, Tensor]] = [
            (t, t.detach().clone()) for name, t in named if name.split(".")[-1] not in exclude]

    def restore(self) -> None:
        with torch.no_grad():
            for t, saved in self._saved:
                t.copy_(saved)


INTERRUPTED = "interrupted by the user (KeyboardInterrupt)"

#: What the message of a fit stopped by SIGTERM says in place of `INTERRUPTED`.
TERMINATED = "interrupted by SIGTERM"

#: The exit status of a program ended by SIGTERM: 128 + the signal's number (15), as the
#: shell reports a process the signal killed.
TERMINATED_STATUS = 128 + 15


class FitTerminated(SystemExit):
    """Raised by `fit()` when SIGTERM (`kill`, `timeout`, `docker stop`, a batch scheduler)
    stopped it: the model holds its last accepted parameters, as after Ctrl-C, and the
    program ends with exit status 143 unless it catches this. `result` is the interrupted
    `FitResult`. A subclass of SystemExit, not of Exception: `except Exception` does not stop
    it, `finally:` and `except SystemExit` (or `except FitTerminated`) see it, e.g. to save
    the model before the program ends. `training.interrupts_end_run(False)` makes `fit()`
    return the interrupted result instead.

    Example:

        >>> import sparsegp as sg
        >>> X, y = sg.datasets.snelson()
        >>> result = sg.SGPR(X, y, inducing_points=10).fit(maxiter=2, progress=False, diagnose=False)
        >>> stop = sg.FitTerminated(result)
        >>> isinstance(stop, SystemExit), stop.code, stop.result is result
        (True, 143, True)
    """

    def __init__(self, result: FitResult) -> None:
        super().__init__(TERMINATED_STATUS)
        self.result = result

    def __str__(self) -> str:
        return f"fit() stopped by SIGTERM (exit status {self.code}): {self.result}"

    def __reduce__(self) -> tuple[type[FitTerminated], tuple[FitResult]]:
        return type(self), (self.result,)  # pickled with its result (a worker's exception)


def model_name(model: object) -> str:
    """What training messages call the model: an adapter's `display_name` (the model it
    trains), else the class name."""
    return getattr(model, "display_name", type(model).__name__)


def warn_stopped(what: str, err: Exception, stacklevel: int = 3) -> str:
    """The one message a training loop gives when a step fails numerically: it stops at the
    last accepted state instead of raising. Returns the message."""
    message = f"stopped: {err}. The model holds the last accepted parameters"
    warnings.warn(f"{what} {message}", RuntimeWarning, stacklevel=stacklevel)
    return message


def __getattr__(name: str) -> object:
    """Former names of this module (`sparsegp.moved`): `warn_interrupted` lives in
    `training.interrupts`."""
    return former(__name__, name)
