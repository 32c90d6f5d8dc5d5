"""Options that only one way of training uses: their defaults, and a warning when an option
was given to a fit that takes the other way (a full-batch fit given `epochs`, say), which
would otherwise be ignored in silence."""

from __future__ import annotations

import warnings
from typing import Any

#: Adam's learning rate in minibatch and stochastic fits.
DEFAULT_LR = 0.01


def warn_unused(options: dict[str, Any], used_by: str, this_fit: str) -> None:
    """A UserWarning naming the options given (not None) that only `used_by` takes."""
    given = [name for name, value in options.items() if value is not None]
    if given:
        verb = "applies" if len(given) == 1 else "apply"
        warnings.warn(f"{', '.join(given)} {verb} only to {used_by}, not to this fit: "
                      f"{this_fit}", UserWarning, stacklevel=3)
