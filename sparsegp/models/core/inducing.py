"""What every model with inducing variables (SGPR, SGPC, SVGP) shares: the `inducing_points`
argument, the feature it becomes, and the views of it in the units of X."""

from __future__ import annotations

import numbers
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from ... import covariances as cov
from ...distributed import POOLED_ROWS
from ...features.base import InducingFeature, InducingLike
from ...features.inducing_points import InducingPoints
from ...features.patches import InducingPatches, MultiChannelPatches
from ...features.separate import Separate as SeparateFeatures
from ...features.stacked import Stacked
from ...kernels.base import Kernel, Sum
from ...kernels.convolutional import Convolutional
from ...kernels.separate import separate_parts
from ...runtime.allocator import check_request
from ...validation import ArrayLike, as_inputs, check_columns
from .data import Placement

DEFAULT_NUM_INDUCING = 100
#: M×M matrices a model with M inducing variables holds at once (Kuu, its factor, A, L_B).
INDUCING_MATRICES = 4


def resolve_feature(inducing_points: InducingLike, kernel: Kernel, X: Tensor, x_shift: Tensor,
                    x_scale: Tensor, method: str, seed: int, at_most: bool = False
                    ) -> InducingFeature:
    """The model's feature (internal units) from `inducing_points`: an int M (M inputs chosen
    from X by `method`; M inducing patches cut from the images for a convolutional kernel),
    an array [M, D] in the units of X, a registered feature object in the units of X, or None
    (min(N, 100) inducing variables, and no more than X has distinct rows — distinct patches
    for a convolutional kernel; `at_most=True` caps an int M so too)."""
    if kernel.input_dim is not None and kernel.input_dim != X.shape[1]:
        raise ValueError(f"X has {X.shape[1]} columns but the kernel {type(kernel).__name__} "
                         f"requires {kernel.input_dim}")
    identity = bool((x_shift == 0).all() and (x_scale == 1).all())
    if kernel.input_dim is not None and not identity:
        raise TypeError(f"the kernel {type(kernel).__name__} fixes the meaning of each input "
                        "column (image pixels shared across patch positions), so per-column "
                        "standardize_X=True does not apply; scale the inputs yourself")
    if inducing_points is None:
        inducing_points, at_most = min(X.shape[0], DEFAULT_NUM_INDUCING), True
    kernels = separate_parts(kernel)
    if kernels is not None:  # one feature per output, from one spec each (or a shared one)
        if isinstance(inducing_points, SeparateFeatures):
            specs: list[Any] = list(inducing_points.features)
        elif isinstance(inducing_points, (list, tuple)) and len(inducing_points) > 0 and all(
                isinstance(z, (InducingFeature, numbers.Integral)) or np.ndim(z) == 2
                for z in inducing_points):
            specs = list(inducing_points)  # one per kernel (as many as kernels: checked next)
        else:
            specs = [inducing_points] * len(kernels)
        if len(specs) != len(kernels):
            raise ValueError(f"inducing_points: {len(specs)} features for {len(kernels)} "
                             "kernels: give one per output")
        return SeparateFeatures([resolve_feature(z, k, X, x_shift, x_scale, method, seed, at_most)
                                 for z, k in zip(specs, kernels)])
    if isinstance(inducing_points, InducingFeature):
        if cov.input_dim(inducing_points, kernel) != X.shape[1]:
            raise ValueError(f"the inducing feature is for inputs of dimension "
                             f"{inducing_points.input_dim} but X has {X.shape[1]} columns")
        feature = inducing_points if identity else inducing_points.transformed(x_shift, x_scale)
    elif isinstance(inducing_points, bool) or (isinstance(inducing_points, numbers.Real)
                                               and not isinstance(inducing_points, numbers.Integral)):
        raise TypeError("inducing_points must be an int M, an array [M, D] or an inducing feature "
                        f"(sparsegp.features); got {inducing_points!r}")
    elif isinstance(inducing_points, numbers.Integral):
        feature = default_feature(kernel, X, int(inducing_points), method, seed, at_most)
    else:
        if not hasattr(inducing_points, "__len__") and not hasattr(inducing_points, "shape"):
            raise TypeError("inducing_points must be an int M, an array [M, D] or an inducing "
                            f"feature (sparsegp.features); got a {type(inducing_points).__name__}")
        Z = as_inputs(cast(ArrayLike, inducing_points), "inducing_points",
                      num_features=X.shape[1], device=X.device).to(X.dtype)
        feature = InducingPoints((Z - x_shift) / x_scale)
    M = int(getattr(feature, "num_inducing", 0))
    check_request(INDUCING_MATRICES * M * M * X.element_size(),
                  f"{M} inducing variables ({INDUCING_MATRICES} {M}×{M} matrices: Kuu, its "
                  "factor and the posterior's)", "use fewer inducing points", X.device)
    cov.check_pair(feature, kernel)
    return feature


def resolve_shared_feature(inducing_points: InducingLike, kernel: Kernel, X: Tensor, x_shift: Tensor,
                           x_scale: Tensor, method: str, seed: int, placement: Placement
                           ) -> InducingFeature:
    """`resolve_feature` for data sharded over torch.distributed ranks: an int M (or the
    default) is chosen from the rows of all ranks (at most `distributed.POOLED_ROWS`, in
    rank order: `Placement.pooled`), the same on every rank — one process's choice when the
    data have no more rows than that — and a choice that cannot be made (M above the rows)
    is the same ValueError on every rank."""
    if placement.sharded and isinstance(inducing_points, (numbers.Integral, type(None))):
        (X,) = placement.pooled([X], POOLED_ROWS, seed,
                                "the rows the inducing inputs are chosen from")
    return resolve_feature(inducing_points, kernel, X, x_shift, x_scale, method, seed)


def default_feature(kernel: Kernel, X: Tensor, M: int, method: str, seed: int,
                    at_most: bool = False) -> InducingFeature:
    """M inducing variables chosen from X for `kernel`: inducing patches for a convolutional
    kernel; for a sum with a convolutional part, a separate set of M for every part
    (van der Wilk 2018, §5.7.2); inducing points otherwise. `at_most`: no more than the
    distinct rows (patches) each set is chosen from."""
    if isinstance(kernel, Convolutional):
        cls = MultiChannelPatches if kernel.multichannel else InducingPatches
        return cls.from_data(X, M, seed=seed, method=method, kernel=kernel, at_most=at_most)
    if isinstance(kernel, Sum) and any(isinstance(k, Convolutional) for k in kernel.kernels):
        return Stacked([default_feature(k, X, M, method, seed, at_most) for k in kernel.kernels])
    return InducingPoints.from_data(X, M, seed=seed, method=method, at_most=at_most)


class InducingInputs:
    """`model.inducing_points` (a descriptor of the models with an inducing feature):
    the locations [M, D] of the inducing variables in the units of X (the inducing inputs Z
    for inducing points, the window centres of multi-scale features, ...); assigning new
    locations of the same shape moves them."""

    def __get__(self, model: Any, owner: type | None = None) -> Any:
        if model is None:
            return self
        Z = model.feature.locations()
        if Z is None:
            raise TypeError(f"{type(model.feature).__name__} features have no input locations; "
                            "read model.feature instead")
        return model.units.user_inputs(Z.detach()).cpu().numpy()

    def __set__(self, model: Any, Z: Any) -> None:
        check_columns(Z, model.feature_names, "inducing_points")
        T = as_inputs(Z, "inducing_points", num_features=model.input_dim, device=model.device)
        current = model.feature.locations()
        if current is not None and T.shape != current.shape:
            raise ValueError(f"inducing_points must have shape {tuple(current.shape)}; "
                             f"got {tuple(T.shape)}")
        model.feature.set_locations(model.units.inputs(T.to(model.x_shift.dtype)))


def location_alias(feature: InducingFeature) -> dict[str, str]:
    """'inducing_points' as a name of the feature's location parameter (Z, or the centres of
    TFIF windows), for `freeze`, `set_prior`, ...: {} for a feature without one."""
    where = feature.locations()
    for name, p in feature.named_parameters():
        if p is where:
            return {"inducing_points": f"feature.{name}"}
    return {}


def extended_feature(feature: InducingFeature, z: Tensor, device: torch.device
                     ) -> InducingFeature:
    """`feature` with inducing points f(z) appended (z [K, D], internal units); frozen
    parameters stay frozen."""
    new = feature.extended(z)
    frozen = {name for name, p in feature.named_parameters() if not p.requires_grad}
    for name, p in new.named_parameters():
        p.requires_grad_(name not in frozen)
    return new.to(device=device)
