"""Sums of per-point statistics over chunks of the data (memory O(B·M + M²)).

Every collapsed objective is a function of sums over data points (MATH.md §2). `reduce_chunks`
evaluates `fn` on one chunk of rows at a time and adds the results, so no N×M matrix exists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from torch import Tensor

from ..config import CHUNK_MEMORY_BYTES, CHUNK_TEMPORARIES

ChunkFn = Callable[..., Sequence[Tensor]]


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


def reduce_chunks(
    fn: ChunkFn, X: Tensor, y: Tensor, chunk_size: int, *tensors: Tensor
) -> tuple[Tensor, ...]:
    """Σ_b fn(X_b, y_b, *tensors) over chunks of at most `chunk_size` rows.

    Shapes: X [N, D], y [N]; fn returns a tuple of tensors whose shapes do not depend on
    the chunk. Differentiable by ordinary autograd.
    """
    total: list[Tensor] | None = None
    for s in chunk_slices(X.shape[0], chunk_size):
        part = fn(X[s], y[s], *tensors)
        total = list(part) if total is None else [t + p for t, p in zip(total, part)]
    if total is None:
        raise ValueError("no data: X has 0 rows")
    return tuple(total)
