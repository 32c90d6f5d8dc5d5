"""Sums over chunks of the data with O(B·M + M²) memory, in the backward pass too.

Every collapsed objective is a function of sums of per-point statistics (docs/math.md §2). A
`ChunkedSums` says how one chunk of rows adds to those sums and, given the gradient of the sums,
how that chunk contributes to the gradients of the sums' inputs (the kernel's values, the
inducing inputs, chol(Kuu), the noise). `chunked_sum` runs the forward loop without
autograd and, in the backward pass, loops over the chunks again, recomputing what it needs:
no N×M tensor is ever alive, neither for the value nor for the gradient.

When the rows are this rank's shard of data sharded over a `torch.distributed` process group
(`over_ranks=True`), the sums are all-reduced in the forward pass and the input gradients in
the backward pass, so each rank sees exactly the objective and gradient of all the data.
Otherwise (the default) a rank's sums are its own rows', process group or not.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from .. import distributed
from ..autograd import Context, first_order, transforms_active
from ..runtime.chunking import ChunkBuffers, chunk_slices

_WHAT = ("objectives built from chunked sums (SGPR's VFE/DTC/FITC/Power EP and their "
         "block variants, the Titsias bound, the GP-LVM, GP-SSM and RFF/SSGP bounds)")
_WHY = ("their gradient is hand-written chunk by chunk (`ChunkedSums.grad_chunk`) and is not "
        "itself differentiable; use first-order optimisation, or autograd through a dense "
        "evaluation of the same objective")


class ChunkedSums(ABC):
    """How chunks of (X, y) add to a tuple of sums, and the vector-Jacobian product of that.

    `inputs` are the differentiable tensors the sums depend on. `zeros()` gives the
    accumulators, `add(acc, Xb, yb, *extra)` adds one chunk in place (under no_grad),
    `finish(acc)` turns accumulators into outputs; `grad_chunk(gacc, Xb, yb, *extra, grads)`
    adds the chunk's
    contribution to the input gradients in place, and `grad_finish(gacc)` returns them.
    """

    inputs: tuple[Tensor, ...] = ()
    want_y: bool = False  # set by the backward pass: grad_chunk returns ∂y
    want_columns: tuple[bool, ...] = ()  # the same for (y, *extra)
    backward_follows: bool = False  # set by `chunked_sum`: a backward pass will follow add()
    _buffers: ChunkBuffers | None = None

    def release_buffers(self) -> None:
        """Let go of the chunk buffers (the passes that reuse them are over)."""
        self._buffers = None

    def buffer(self, name: str, shape: tuple[int, ...], like: Tensor) -> Tensor:
        """A tensor of like's dtype and device reused from chunk to chunk of this evaluation,
        forward and backward (`ChunkBuffers`; its values are the last chunk's)."""
        if self._buffers is None:
            self._buffers = ChunkBuffers()
        return self._buffers.get(name, shape, like.dtype, like.device)

    @abstractmethod
    def zeros(self) -> list[Tensor]:
        """The accumulators, zero."""

    @abstractmethod
    def add(self, acc: list[Tensor], Xb: Tensor, yb: Tensor, *extra: Tensor) -> None:
        """Add one chunk's contribution (and of its extra per-row tensors) in place."""

    def finish(self, acc: list[Tensor]) -> tuple[Tensor, ...]:
        return tuple(acc)

    def grad_zeros(self, grads: Sequence[Tensor]) -> list[Tensor | None]:
        return [torch.zeros_like(t) if t.requires_grad else None for t in self.inputs]

    @abstractmethod
    def grad_chunk(self, gacc: list[Tensor | None], Xb: Tensor, yb: Tensor,
                   *rest: Any) -> Tensor | tuple[Tensor | None, ...] | None:
        """Add one chunk's contribution to the input gradients, in place: `rest` is the
        chunk's extra per-row tensors (if any) and then the gradients of the sums. Returns
        the chunk's ∂y [B] when `want_y` (targets that require grad), else None; or the
        gradients of (y, *extra), a tuple (see `chunked_sum`)."""

    def grad_finish(self, gacc: list[Tensor | None], grads: Sequence[Tensor]
                    ) -> list[Tensor | None]:
        return gacc


class _ChunkedSumContext(Context, Protocol):
    sums: ChunkedSums
    chunks: Sequence[slice]
    n_extra: int
    over_ranks: bool


class _ChunkedSum(torch.autograd.Function):
    """The sums by `ChunkedSums.add`, their gradient by `ChunkedSums.grad_chunk`: hand-written, right to
    first order only (`autograd.first_order`: a second derivative raises)."""

    @staticmethod
    def forward(sums: ChunkedSums, chunks: Sequence[slice], n_extra: int, over_ranks: bool,
                X: Tensor, y: Tensor, *rest: Tensor) -> tuple[Tensor, ...]:
        columns = (X, y, *rest[:n_extra])
        acc = sums.zeros()
        for s in chunks:
            sums.add(acc, *(c[s] for c in columns))
        out = sums.finish(acc)
        if not sums.backward_follows:
            sums.release_buffers()
        if over_ranks:
            distributed.all_reduce_(out, "the statistics of the objective")
        return out

    @staticmethod
    def setup_context(ctx: _ChunkedSumContext, inputs: tuple[Any, ...],
                      output: tuple[Tensor, ...]) -> None:
        sums, chunks, n_extra, over_ranks, X, y, *rest = inputs
        ctx.sums, ctx.chunks, ctx.n_extra, ctx.over_ranks = sums, chunks, n_extra, over_ranks
        # the columns, and the sums' inputs: what a refused second derivative links to
        ctx.save_for_backward(X, y, *rest)
        ctx.mark_non_differentiable(*[o for o in output if not o.is_floating_point()])

    @staticmethod
    @first_order(_WHAT, _WHY)
    def backward(ctx: _ChunkedSumContext, *grads: Tensor) -> tuple[Tensor | None, ...]:
        sums = ctx.sums
        columns = ctx.saved_tensors[:2 + ctx.n_extra]
        grads = tuple(torch.zeros_like(g) if g is None else g for g in grads)
        # which of the columns after X (y, then the extras) want a gradient
        sums.want_columns = tuple(bool(ctx.needs_input_grad[5 + j])
                                  for j in range(1 + ctx.n_extra))
        sums.want_y = sums.want_columns[0]
        gcols = [torch.zeros_like(c) if w else None
                 for c, w in zip(columns[1:], sums.want_columns)]
        gacc = sums.grad_zeros(grads)
        for s in ctx.chunks:
            g = sums.grad_chunk(gacc, *(c[s] for c in columns), grads)
            for total, part in zip(gcols, (g,) if g is None or isinstance(g, Tensor) else g):
                if total is not None and part is not None:
                    total[s] = part
        result = sums.grad_finish(gacc, grads)
        sums.release_buffers()
        if ctx.over_ranks:
            distributed.all_reduce_([g for g in result if g is not None], "the gradient")
        return (None, None, None, None, None, *gcols, *result)


def chunked_sum(sums: ChunkedSums, X: Tensor, y: Tensor, chunks: int | Sequence[slice],
                *extra: Tensor, over_ranks: bool = False) -> tuple[Tensor, ...]:
    """The totals of `sums` over all rows of X [N, D], y [N]; with `over_ranks` (the rows are
    this rank's shard of data sharded over processes) over every rank's rows.

    `chunks` is a chunk size (consecutive chunks of that many rows) or the slices themselves
    (e.g. runs of whole blocks). `extra` per-row tensors are sliced like X and y and passed
    to the sums' `add` and `grad_chunk` after them. y (targets minus a trainable mean) and
    extra columns (e.g. a trainable per-point noise) may require grad: the sums'
    `grad_chunk` then returns the chunk's ∂y, or a tuple of the gradients of (y, *extra).
    """
    if isinstance(chunks, int):
        if chunks < 1:
            raise ValueError(f"chunk_size must be a positive integer; got {chunks}")
        chunks = list(chunk_slices(X.shape[0], chunks))
    if transforms_active():
        raise RuntimeError(
            f"torch.func transforms (grad, vmap, jacrev, …) are not supported by objectives "
            f"built from chunked sums ({type(sums).__name__}): the sums hold Python "
            "state and its gradient is hand-written chunk by chunk; use torch.autograd "
            "(loss.backward() or torch.autograd.grad)")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (y, *extra, *sums.inputs)):
        sums.backward_follows = True
        return _ChunkedSum.apply(sums, chunks, len(extra), over_ranks, X, y, *extra,
                                 *sums.inputs)
    with torch.no_grad():
        return _ChunkedSum.forward(sums, chunks, len(extra), over_ranks, X, y, *extra)
