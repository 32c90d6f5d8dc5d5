"""Hand-written gradients that are right to the second order or refuse it, clearly.

Every `torch.autograd.Function` of the package is written in the `setup_context` form (so
that `torch.func.grad` can run it) and its backward pass is either differentiable — a double
backward (`create_graph=True`, `torch.autograd.functional.hessian`, nested `torch.func.grad`)
gives the true second derivative — or ends in `first_order_only`, which makes any attempt to
differentiate the gradient raise `SecondDerivativeError`.

Why not `torch.autograd.function.once_differentiable`: it runs the backward under no_grad and
then (a) does nothing at all when the incoming gradient does not require grad — the usual
case, e.g. loss = −F gives g = −1 — so the hand-written gradient enters the second-order
graph as a constant; and (b) otherwise hangs its error node from *detached copies* of the
gradients, which leads to no input, so `torch.autograd.grad(gradient, params)` never runs
it. Either way a Hessian silently drops the hand-written part and keeps only what autograd
saw around it (the softplus of the positive parameters, the priors): the wrong numbers of
the bug report. `first_order_only` links its error node to the Function's own output (saved
for the purpose) and to the incoming gradient, which lead to every input.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn, Protocol, TypeVar

import torch
from torch import Tensor


class Context(Protocol):
    """What the package's `torch.autograd.Function`s use of the context object torch hands
    their `setup_context` and `backward`. A Function that keeps more on it (`ctx.kernel =
    ...`) declares those attributes in a protocol derived from this one."""

    @property
    def saved_tensors(self) -> tuple[Tensor, ...]: ...

    @property
    def needs_input_grad(self) -> tuple[bool, ...]: ...

    def save_for_backward(self, *tensors: Tensor | None) -> None: ...

    def mark_non_differentiable(self, *args: Tensor) -> None: ...

    def set_materialize_grads(self, value: bool) -> None: ...


class SecondDerivativeError(RuntimeError):
    """A second derivative was asked of a gradient that is only right to first order."""


def transforms_active() -> bool:
    """Whether a torch.func transform (grad, vmap, jacrev, …) is running. torch has no public
    way to ask: this is the one place that uses its private one."""
    return bool(torch._C._are_functorch_transforms_active())


def refusal(what: str, why: str) -> str:
    """The one message of every refusal."""
    return f"second derivatives of {what} are not supported: {why}"


class _Refuse(torch.autograd.Function):
    """The first `n` tensors unchanged (views); differentiating them raises `message`. The
    tensors after them are only linked to, so that the node lies on every path to the
    inputs."""

    generate_vmap_rule = True

    @staticmethod
    def forward(message: str, n: int, *tensors: Tensor) -> tuple[Tensor, ...]:
        return tuple(t.view_as(t) for t in tensors[:n])

    @staticmethod
    def setup_context(ctx: _RefusalContext, inputs: tuple[Any, ...],
                      output: tuple[Tensor, ...]) -> None:
        ctx.message = inputs[0]

    @staticmethod
    def backward(ctx: _RefusalContext, *grads: Tensor) -> NoReturn:
        raise SecondDerivativeError(ctx.message)


class _RefusalContext(Context, Protocol):
    message: str


def first_order_only(grads: Sequence[Tensor | None], links: Sequence[Tensor | None],
                     what: str, why: str) -> tuple[Tensor | None, ...]:
    """The gradients `grads` of a hand-written backward pass, as they are — unless a graph of
    them is being built (`create_graph=True`, `torch.func.grad`): then the same values, whose
    differentiation raises `SecondDerivativeError(refusal(what, why))`. `links` must lead to
    everything the gradients depend on: the Function's output (saved in `setup_context`) and
    the incoming gradients. With nothing to link to, the refusal is immediate (a gradient
    that a graph would take for a constant is what this module exists to prevent)."""
    if not torch.is_grad_enabled():
        return tuple(grads)
    present = [g for g in grads if g is not None]
    anchors = [t for t in links if t is not None and t.requires_grad]
    if not present:
        return tuple(grads)
    if not anchors:
        raise SecondDerivativeError(refusal(what, why))
    out = iter(_Refuse.apply(refusal(what, why), len(present), *present, *anchors))
    return tuple(None if g is None else next(out) for g in grads)


F = TypeVar("F", bound=Callable[..., Any])


def first_order(what: str, why: str) -> Callable[[F], F]:
    """Decorates a Function's `backward(ctx, *grad_outputs)`: run without a graph, its
    gradients pass through `first_order_only`, linked to the saved tensors (which must
    include the Function's output) and to the incoming gradients."""

    def decorate(backward: F) -> F:
        @functools.wraps(backward)
        def wrapper(ctx: Context, *grad_outputs: Tensor) -> Any:
            if not torch.is_grad_enabled():
                return backward(ctx, *grad_outputs)
            with torch.no_grad():  # detached: a backward pass that runs autograd inside
                # (recomputing under enable_grad) must not reach back through them
                grads = backward(ctx, *(None if g is None else g.detach()
                                        for g in grad_outputs))
            single = not isinstance(grads, tuple)
            out = first_order_only((grads,) if single else grads,
                                   (*ctx.saved_tensors, *grad_outputs), what, why)
            return out[0] if single else out

        return wrapper  # type: ignore[return-value]

    return decorate


class _FirstOrderValue(torch.autograd.Function):
    @staticmethod
    def forward(t: Tensor, message: tuple[str, str]) -> Tensor:
        return t.view_as(t)

    @staticmethod
    def setup_context(ctx: _FirstOrderContext, inputs: tuple[Any, ...], output: Tensor) -> None:
        ctx.message = inputs[1]
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx: _FirstOrderContext, g: Tensor) -> tuple[Tensor | None, None]:
        (out,) = ctx.saved_tensors
        return first_order_only((g,), (out, g), *ctx.message)[0], None


class _FirstOrderContext(Context, Protocol):
    message: tuple[str, str]


def first_order_value(t: Tensor, what: str, why: str) -> Tensor:
    """t itself, whose gradient — whatever autograd computes for it, e.g. a surrogate's —
    may be taken once but not differentiated again (`first_order_only`)."""
    if not t.requires_grad:
        return t
    return _FirstOrderValue.apply(t, (what, why))


def blockwise_gradients(value: Callable[..., Tensor], grad: Callable[[int], Tensor],
                        starts: Iterable[int], tensors: tuple[Tensor | None, ...],
                        need: Sequence[bool]) -> tuple[Tensor | None, ...]:
    """Σ over blocks s of ⟨grad(s), ∂value(s, *tensors)/∂tensors⟩ (None where not `need`ed)
    by autograd, with a graph (`create_graph`): a hand-written gradient's twice-differentiable
    stand-in, block by block."""
    wrt = [t for t, n in zip(tensors, need) if n and t is not None]
    total: list[Tensor | None] = [None] * len(wrt)
    for s in starts:
        with torch.enable_grad():
            found = torch.autograd.grad(value(s, *tensors), wrt, grad(s), allow_unused=True,
                                        create_graph=True)
        total = [a if b is None else (b if a is None else a + b) for a, b in zip(total, found)]
    out = iter(torch.zeros_like(t) if g is None else g for t, g in zip(wrt, total))
    return tuple(next(out) if n and t is not None else None for t, n in zip(tensors, need))
