"""Chunk sizes: a cache-sized budget on a CPU, a share of the free memory on a GPU (faked here:
the rule is arithmetic on what the device reports, checked without a GPU)."""

from __future__ import annotations

import pytest
import torch

from sparsegp.runtime import chunking
from sparsegp.runtime.config import (
    CHUNK_MEMORY_BYTES,
    CHUNK_TEMPORARIES,
    CUDA_CHUNK_MEMORY_FRACTION,
    CUDA_MIN_CHUNK_ROWS,
)


def test_cpu_chunks_fit_the_cache_budget_whatever_the_device_argument():
    rows = chunking.auto_chunk_size(500, 8)
    assert rows == CHUNK_MEMORY_BYTES // (500 * 8 * CHUNK_TEMPORARIES)
    assert chunking.auto_chunk_size(500, 8, device=torch.device("cpu")) == rows
    assert chunking.auto_chunk_size(500, 8, budget=10**6) == 10**6 // (500 * 8 * CHUNK_TEMPORARIES)


@pytest.mark.parametrize("free_bytes", [80 * 2**30, 2**20])
def test_cuda_chunks_come_from_the_free_memory_with_a_floor(monkeypatch, free_bytes):
    seen = []

    def mem_get_info(device):
        seen.append(device)
        return free_bytes, 80 * 2**30

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    rows = chunking.auto_chunk_size(1000, 8, device=torch.device("cuda", 1))
    expected = int(CUDA_CHUNK_MEMORY_FRACTION * free_bytes) // (1000 * 8 * CHUNK_TEMPORARIES)
    assert rows == max(CUDA_MIN_CHUNK_ROWS, expected)
    assert seen == [torch.device("cuda", 1)]
    if free_bytes > 2**30:  # 80 GB free: far larger than a CPU chunk (the GPU's fast path)
        assert rows > 100 * chunking.auto_chunk_size(1000, 8)
    else:
        assert rows == CUDA_MIN_CHUNK_ROWS
    # an explicit budget still wins on any device
    assert chunking.auto_chunk_size(1000, 8, budget=8 * 10**6, device="cuda") == 250


def test_chunk_buffers_hand_back_the_same_tensor_until_the_shape_changes():
    buffers = chunking.ChunkBuffers()
    a = buffers.get("K", (5, 7), torch.float64, torch.device("cpu"))
    assert buffers.get("K", (5, 7), torch.float64, torch.device("cpu")) is a
    assert buffers.get("V", (5, 7), torch.float64, torch.device("cpu")) is not a  # by name
    b = buffers.get("K", (5, 3), torch.float64, torch.device("cpu"))  # a shorter last chunk
    assert b is not a and b.shape == (5, 3)
    c = buffers.get("K", (5, 3), torch.float32, torch.device("cpu"))
    assert c is not b and c.dtype == torch.float32
    assert buffers.get("K", (5, 3), torch.float32, torch.device("cpu")) is c
