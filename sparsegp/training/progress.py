"""Progress bars for long fits: shown on a terminal (or when asked), only on rank 0."""

from __future__ import annotations

import sys

import torch
from tqdm.auto import tqdm

from ..distributed import is_distributed


def progress_bar(progress: bool | None, total: int, desc: str) -> tqdm:
    """A tqdm bar: `progress=None` shows one when standard error is a terminal; never on a
    torch.distributed rank other than 0."""
    show = sys.stderr.isatty() if progress is None else bool(progress)
    show = show and not (is_distributed() and torch.distributed.get_rank() != 0)
    return tqdm(total=total, disable=not show, desc=desc, leave=False)
