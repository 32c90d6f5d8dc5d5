"""Rows in chunks: the chunk size from a memory budget, and the slices that cover the data.

Every pass over the data (objectives, prediction, initialisation, diagnostics) goes chunk by
chunk so that no N×M matrix is ever alive.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from ..validation import positive_int
from .allocator import check_request
from .config import (
    CHUNK_MEMORY_BYTES,
    CHUNK_TEMPORARIES,
    CUDA_CHUNK_MEMORY_FRACTION,
    CUDA_MIN_CHUNK_ROWS,
)


def auto_chunk_size(num_inducing: int, itemsize: int, budget: int | None = None,
                    device: torch.device | None = None) -> int:
    """Rows per chunk so that the chunk's B×M temporaries fit in `budget` bytes: by default
    `CHUNK_MEMORY_BYTES` on a CPU (a chunk that stays in cache), and on a CUDA `device` a
    fraction of its free memory, at least `CUDA_MIN_CHUNK_ROWS` rows (large GEMMs keep a GPU
    busy; config.py)."""
    per_row = max(1, num_inducing) * itemsize * CHUNK_TEMPORARIES
    if budget is None and device is not None and torch.device(device).type == "cuda":
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return max(CUDA_MIN_CHUNK_ROWS, int(CUDA_CHUNK_MEMORY_FRACTION * free) // per_row)
    return max(1, (CHUNK_MEMORY_BYTES if budget is None else budget) // per_row)


def check_chunk_size(chunk_size: object) -> int | None:
    """A model's `chunk_size` argument: None (from the memory budget) or an int ≥ 1."""
    return None if chunk_size is None else positive_int(chunk_size, "chunk_size")


def chunk_rows(n: int, width: int, itemsize: int, chunk_size: int | None = None,
               device: torch.device | None = None) -> int:
    """Rows per chunk of a pass over `n` rows whose chunk holds B×`width` temporaries: the
    model's `chunk_size` (None: `auto_chunk_size`), at most `n`. A chunk that would need more
    than the device's memory is a `MemoryRequestError` naming its bytes and advising a smaller
    chunk_size, before anything is allocated."""
    rows = min(n, chunk_size or auto_chunk_size(width, itemsize, device=device))
    check_request(rows * max(1, width) * itemsize * CHUNK_TEMPORARIES,
                  f"a chunk of {rows} rows × {width} columns (chunk_size={chunk_size})",
                  "pass a smaller chunk_size, or chunk_size=None to size chunks from the "
                  "memory budget", device)
    return max(1, rows)


def chunk_slices(n: int, size: int) -> Iterator[slice]:
    """Consecutive slices of at most `size` rows covering range(n)."""
    if size < 1:
        raise ValueError(f"chunk_size must be a positive integer; got {size}")
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


class ChunkBuffers:
    """Tensors reused from one chunk to the next within one pass (`Posterior.predict_f`, a
    chunked objective's forward and backward passes: `ChunkedSums.buffer`).

    A fresh multi-megabyte tensor per chunk is memory the C allocator has handed back to the
    operating system, and its first touch page-faults: measured at M = 500 on a 2-core CPU,
    allocating the kernel matrix and the variance's product afresh for every 1,048 test
    points took 30% of the prediction time. `get` returns the held tensor of that name when
    its shape, dtype and device match (its values are whatever the last chunk left), else a
    new one that it holds from then on. One object per pass: never shared between threads.
    """

    def __init__(self) -> None:
        self._held: dict[str, torch.Tensor] = {}

    def get(self, name: str, shape: tuple[int, ...], dtype: torch.dtype,
            device: torch.device) -> torch.Tensor:
        held = self._held.get(name)
        if (held is None or tuple(held.shape) != tuple(shape) or held.dtype != dtype
                or held.device != device):
            held = torch.empty(shape, dtype=dtype, device=device)
            self._held[name] = held
        return held

