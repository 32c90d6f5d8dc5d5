"""`checkpointing.blocked`: the same values and gradients as the unblocked evaluation."""

from __future__ import annotations

import torch

from sparsegp.runtime.checkpointing import blocked


def test_blocks_equal_one_evaluation_in_value_and_gradient():
    g = torch.Generator().manual_seed(0)
    A = torch.randn(7, 3, dtype=torch.float64, generator=g, requires_grad=True)
    B = torch.randn(5, 3, dtype=torch.float64, generator=g, requires_grad=True)
    unused = torch.randn(2, dtype=torch.float64, generator=g, requires_grad=True)

    def rows(i: int) -> torch.Tensor:
        return torch.exp(-torch.cdist(A[i:i + 3], B) ** 2) * A[i:i + 3, :1]

    full = torch.exp(-torch.cdist(A, B) ** 2) * A[:, :1]
    split = blocked(rows, range(0, 7, 3), 0, (A, B, unused))
    torch.testing.assert_close(split, full, rtol=0, atol=0)
    W = torch.randn(7, 5, dtype=torch.float64, generator=g)
    ga, gb = torch.autograd.grad((full * W).sum(), (A, B))
    ha, hb, hu = torch.autograd.grad((split * W).sum(), (A, B, unused), allow_unused=True)
    torch.testing.assert_close(ha, ga, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(hb, gb, rtol=1e-13, atol=1e-13)
    assert hu is None
    with torch.no_grad():
        assert not blocked(rows, range(0, 7, 3), 0, (A, B)).requires_grad
