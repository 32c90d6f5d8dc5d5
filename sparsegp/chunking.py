"""Rows in chunks: the chunk size from a memory budget, and the slices that cover the data.

Every pass over the data (objectives, prediction, initialisation, diagnostics) goes chunk by
chunk so that no N×M matrix is ever alive.
"""

from __future__ import annotations

from collections.abc import Iterator

from .config import CHUNK_MEMORY_BYTES, CHUNK_TEMPORARIES


def auto_chunk_size(num_inducing: int, itemsize: int, budget: int = CHUNK_MEMORY_BYTES) -> int:
    """Rows per chunk so that the chunk's B×M temporaries fit in `budget` bytes."""
    per_row = max(1, num_inducing) * itemsize * CHUNK_TEMPORARIES
    return max(1, budget // per_row)


def chunk_slices(n: int, size: int) -> Iterator[slice]:
    """Consecutive slices of at most `size` rows covering range(n)."""
    if size < 1:
        raise ValueError(f"chunk_size must be a positive integer; got {size}")
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))
