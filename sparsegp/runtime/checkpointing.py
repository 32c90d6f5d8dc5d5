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
from typing import Any, Protocol

import torch
from torch import Tensor

from ..autograd import Context, transforms_active


def blocked(block: Callable[[int], Tensor], starts: Iterable[int], dim: int,
            inputs: Iterable[Tensor]) -> Tensor:
    """The blocks `block(s)` for s in `starts`, concatenated along `dim`, differentiable with
    respect to those of `inputs` that require grad (every tensor the blocks read that needs a
    gradient must be among them: parameters, and the data where it requires grad).

    Twice differentiable: when a graph of the gradient is wanted (`create_graph=True`), the
    backward pass recomputes the blocks with one. Under torch.func transforms the blocks are
    evaluated with their graphs kept (as without blocking): `block` reads its tensors from
    where it finds them (a module's parameters), not from `inputs`, which a transform's
    backward pass would not see."""
    starts = tuple(starts)
    needed = tuple(t for t in inputs if t.requires_grad)
    if (not needed or not torch.is_grad_enabled()
            or transforms_active()):
        return torch.cat([block(s) for s in starts], dim)
    if len(starts) == 1:  # one block: its own graph is all there is
        return block(starts[0])
    return _Blocked.apply(block, starts, dim, *needed)


class _BlockedContext(Context, Protocol):
    block: Callable[[int], Tensor]
    starts: Sequence[int]
    dim: int


class _Blocked(torch.autograd.Function):
    @staticmethod
    def forward(block: Callable[[int], Tensor], starts: Sequence[int], dim: int,
                *inputs: Tensor) -> Tensor:
        return torch.cat([block(s) for s in starts], dim)  # autograd is off inside forward

    @staticmethod
    def setup_context(ctx: _BlockedContext, inputs: tuple[Any, ...], output: Tensor) -> None:
        block, starts, dim, *tensors = inputs
        ctx.block, ctx.starts, ctx.dim = block, starts, dim
        ctx.save_for_backward(*tensors)

    @staticmethod
    def backward(ctx: _BlockedContext, grad: Tensor) -> tuple[Tensor | None, ...]:
        inputs = ctx.saved_tensors
        create_graph = torch.is_grad_enabled()  # a second derivative will follow
        total: list[Tensor | None] = [None] * len(inputs)
        offset = 0
        for s in ctx.starts:
            with torch.enable_grad():
                part = ctx.block(s)
                g = grad.narrow(ctx.dim, offset, part.shape[ctx.dim])
                offset += part.shape[ctx.dim]
                found = torch.autograd.grad(part, inputs, g, allow_unused=True,
                                            create_graph=create_graph)
            total = [a if b is None else (b if a is None else a + b) for a, b in zip(total, found)]
        return (None, None, None, *total)
