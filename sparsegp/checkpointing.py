"""Block-wise evaluations whose autograd graphs are never all alive at once.

`blocked(block, starts, dim, inputs)` is `torch.cat([block(s) for s in starts], dim)`: the
forward pass evaluates every block without a graph; the backward pass recomputes one block at
a time under autograd and pulls its slice of the incoming gradient through it (gradient
checkpointing by hand — torch.utils.checkpoint's non-reentrant variant was measured keeping
the blocks alive). Memory: one block's temporaries instead of all blocks'; cost: one more
forward evaluation per block. Used where a result is small but its intermediates are large:
a convolutional kernel's Kuf and diagonal (M·Q and Q² base-kernel values per image), the Kuu
of sums of deltas ((M·C)² values).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from torch import Tensor


def blocked(block: Callable[[int], Tensor], starts: Iterable[int], dim: int,
            inputs: Iterable[Tensor]) -> Tensor:
    """The blocks `block(s)` for s in `starts`, concatenated along `dim`, differentiable with
    respect to those of `inputs` that require grad (every tensor the blocks read that needs a
    gradient must be among them: parameters, and the data where it requires grad)."""
    starts = tuple(starts)
    needed = tuple(t for t in inputs if t.requires_grad)
    if not needed or not torch.is_grad_enabled():
        return torch.cat([block(s) for s in starts], dim)
    if len(starts) == 1:  # one block: its own graph is all there is
        return block(starts[0])
    return _Blocked.apply(block, starts, dim, *needed)


class _Blocked(torch.autograd.Function):
    @staticmethod
    def forward(ctx, block: Callable[[int], Tensor], starts: Sequence[int], dim: int,
                *inputs: Tensor) -> Tensor:
        parts = [block(s) for s in starts]  # autograd is off inside forward
        ctx.block, ctx.starts, ctx.dim = block, starts, dim
        ctx.sizes = [p.shape[dim] for p in parts]
        ctx.save_for_backward(*inputs)
        return torch.cat(parts, dim)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:
        inputs = ctx.saved_tensors
        total: list[Tensor | None] = [None] * len(inputs)
        for s, g in zip(ctx.starts, grad.split(ctx.sizes, ctx.dim)):
            with torch.enable_grad():
                part = torch.autograd.grad(ctx.block(s), inputs, g, allow_unused=True)
            total = [a if b is None else (b if a is None else a + b) for a, b in zip(total, part)]
        return (None, None, None, *total)
