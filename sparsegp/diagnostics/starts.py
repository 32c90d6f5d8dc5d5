"""Did a fit stall far from its data? Lengthscales far beyond the inputs' extent, and the
data-based starting values to compare the fit with.

Started at a lengthscale far beyond the inputs' extent, a kernel is nearly constant over
the data: the objective is flat in the lengthscale there, and L-BFGS-B "converges" where it
started (a GPR started at ℓ = 1e4 on data with structure at scale 1 ended at RMSE 0.8, its
noise explaining all the variance). `far_lengthscales` says whether a fitted kernel is in
that state (cheaply: no objective is evaluated); `data_based_values` gives the starting
values a model takes from its data when none are given, to compare with.

Shapes: X [N, D] (internal units); values as the kernel's parameters.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor

from ..distributed import all_reduce_
from ..kernels.active import columns_seen
from ..kernels.base import Kernel
from ..kernels.stationary import RadialKernel

#: A lengthscale above this many times the inputs' extent (per column for ARD, the diagonal
#: of their bounding box otherwise) makes the kernel nearly constant over the data.
FAR_EXTENTS = 10.0


def input_extent(X: Tensor, sharded: bool = False) -> Tensor:
    """max − min of every column of X [D] (of every rank's rows with `sharded` data: every
    rank must call it)."""
    bounds = torch.stack([-X.min(0).values, X.max(0).values])
    if sharded:
        all_reduce_([bounds], "the extent of the inputs", op="max")
    return bounds.sum(0)


def far_lengthscales(kernel: Kernel, X: Tensor, sharded: bool = False) -> str | None:
    """The trainable lengthscales of `kernel` (its radial parts) above `FAR_EXTENTS`
    times the inputs' extent, described ("lengthscale 1e+04 (1.7e+03 × the inputs' extent
    5.99)"), or None when there are none."""
    full = input_extent(X, sharded)
    seen = columns_seen(kernel, list(range(full.shape[0])))
    found = []
    for name, part in kernel.named_modules():
        if not isinstance(part, RadialKernel) or not part._raw("lengthscale").requires_grad:
            continue
        columns = seen[id(part)]  # a part inside `kernels.Active` sees some columns only
        extent = full[columns]
        ell = part.value("lengthscale").detach()
        if ell.dim() == 0:
            span = extent.norm()
            if span > 0 and ell > FAR_EXTENTS * span:
                found.append(f"{name + '.' if name else ''}lengthscale {float(ell):.3g} "
                             f"({float(ell / span):.3g} × the inputs' extent {float(span):.3g})")
        elif ell.shape[0] == extent.shape[0]:
            far = (extent > 0) & (ell > FAR_EXTENTS * extent)
            for d in torch.nonzero(far).flatten().tolist():
                found.append(f"{name + '.' if name else ''}lengthscale[{d}] {float(ell[d]):.3g} "
                             f"({float(ell[d] / extent[d]):.3g} × the extent {float(extent[d]):.3g}"
                             f" of input column {columns[d]})")
    return "; ".join(found) if found else None


def data_based_values(kernel: Kernel, X: Tensor, signal_variance: float) -> dict[str, Tensor]:
    """The value of every parameter of `kernel` (dotted names, as `named_values`) when the
    kernel takes all its starting values from the inputs X and `signal_variance`, as a model
    does for the values not given (the kernel itself is left as it is)."""
    fresh = copy.deepcopy(kernel)
    for part in fresh.modules():
        if isinstance(part, Kernel):
            part.forget_given_values()
    fresh.initialise_from_data(X, signal_variance)
    return {name: value.detach() for name, value, _, _ in fresh.named_values()}
