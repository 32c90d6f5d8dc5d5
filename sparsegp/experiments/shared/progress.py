"""Threads and the clock of progress lines and reports."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run with `n` torch threads, then restore: small problems run fastest on one thread
    (synchronising threads costs more than the work, badly so on a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def clock(seconds: float) -> str:
    """Seconds as h:mm:ss (negative as 0), for progress lines and reports."""
    s = int(max(0.0, seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
