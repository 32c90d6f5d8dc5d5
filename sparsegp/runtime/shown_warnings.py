"""Warnings as they are shown: a hook on every warning that reaches the user (after the
filters: "ignore" hides it, "error" raises it before), for commands that count or summarise
what a run printed. Standard library only, so the command line can use it before torch is
imported."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def on_shown_warnings(hook: Callable[[Warning | str, type[Warning]], bool]) -> Iterator[None]:
    """Inside, every warning about to be shown is first passed to `hook(message, category)`;
    it is shown as before when the hook returns True, and withheld when it returns False.
    The previous way of showing warnings is put back afterwards."""
    with warnings.catch_warnings():
        show = warnings.showwarning

        def shown(message: Warning | str, category: type[Warning], *args: Any,
                  **kwargs: Any) -> None:
            if hook(message, category):
                show(message, category, *args, **kwargs)

        warnings.showwarning = shown
        yield
