"""A radial kernel's profile ρ(r²) differentiated by its own formulas, not by autograd.

Autograd through ρ written in r = √(r²) (the Matérn kernels) meets 1/r at coincident inputs
(an inducing input on top of a data input, as k-means++ places them): the first derivative
survives as a product of a tiny and a huge number, the second does not (a difference of huge
numbers, or nothing at all through the floor under r²). In r² the Matérn 3/2 and 5/2
profiles have finite derivatives at r² = 0 — dρ/dr² = −(3/2)e^{−√3 r} and
−(5/6)(1 + √5 r)e^{−√5 r}; d²ρ/d(r²)² = (25/12)e^{−√5 r} for Matérn 5/2, and for Matérn 3/2
(3√3/4)e^{−√3 r}/r, which only ever multiplies the square of a zero distance's derivative
(taken as 0 at r = 0) — so `Profile` returns ρ with the kernel's `profile_derivative` as its
derivative, itself differentiated by `profile_second_derivative`. Third derivatives are
refused (`sparsegp.autograd`).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor

from ..autograd import Context, first_order_only


class RadialKernel(Protocol):
    """A radial kernel with `profile_formula`, `profile_derivative` and
    `profile_second_derivative` (the Matérn 3/2 and 5/2 kernels), each elementwise in r²."""

    def profile_formula(self, r2: Tensor) -> Tensor: ...

    def profile_derivative(self, r2: Tensor) -> Tensor: ...

    def profile_second_derivative(self, r2: Tensor) -> Tensor: ...


class _ProfileContext(Context, Protocol):
    kernel: RadialKernel


class Profile(torch.autograd.Function):
    """ρ(r²) of `kernel`, whose derivative is `kernel.profile_derivative(r²)`."""

    @staticmethod
    def forward(r2: Tensor, kernel: RadialKernel) -> Tensor:
        return kernel.profile_formula(r2)

    @staticmethod
    def setup_context(ctx: _ProfileContext, inputs: tuple[Any, ...], output: Tensor) -> None:
        ctx.save_for_backward(inputs[0])
        ctx.kernel = inputs[1]

    @staticmethod
    def backward(ctx: _ProfileContext, g: Tensor) -> tuple[Tensor, None]:
        (r2,) = ctx.saved_tensors
        return g * ProfileDerivative.apply(r2, ctx.kernel), None


class ProfileDerivative(torch.autograd.Function):
    """dρ/d(r²) of `kernel`, whose derivative is `kernel.profile_second_derivative(r²)`."""

    @staticmethod
    def forward(r2: Tensor, kernel: RadialKernel) -> Tensor:
        return kernel.profile_derivative(r2)

    @staticmethod
    def setup_context(ctx: _ProfileContext, inputs: tuple[Any, ...], output: Tensor) -> None:
        ctx.save_for_backward(inputs[0], output)
        ctx.kernel = inputs[1]

    @staticmethod
    def backward(ctx: _ProfileContext, g: Tensor) -> tuple[Tensor | None, None]:
        r2, out = ctx.saved_tensors
        with torch.no_grad():
            grad = g.detach() * ctx.kernel.profile_second_derivative(r2)
        name = type(ctx.kernel).__name__
        return first_order_only((grad,), (out, g), f"{name}'s profile",
                                "its third derivative in r² is not implemented")[0], None


def profile(kernel: RadialKernel, r2: Tensor) -> Tensor:
    """ρ(r²), through `Profile` where a derivative may be taken."""
    if torch.is_grad_enabled() and r2.requires_grad:
        return Profile.apply(r2, kernel)
    return kernel.profile_formula(r2)
