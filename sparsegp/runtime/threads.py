"""Small problems run on one thread: torch's intra-op threads cost more than they save when
one objective evaluation is a few million flops (measured on a busy 2-core machine: SGPC's
site sweeps at N = 60, M = 10 took 0.55–0.74 s with 2 threads against 0.11 s with 1, and
100 L-BFGS-B iterations of SGPR 3.7–4.0 s against 0.59 s)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

#: Flops of one objective evaluation below which training runs on one thread.
SMALL_WORK = 1e7


@contextmanager
def threads_for(work: float) -> Iterator[None]:
    """One torch thread while the block runs if `work` (flops per evaluation) is small;
    the caller's setting otherwise, and always afterwards."""
    before = torch.get_num_threads()
    if work >= SMALL_WORK or before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
