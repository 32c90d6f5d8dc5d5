"""Where the inducing variables sit: merged on top of each other (fewer effective inducing
variables than M: FITC's clumping, Bauer et al. 2016) or far from every data point.

Scaled distances for inducing points under a radial kernel (the shortest lengthscale),
correlations for other kernels and features. `diagnose` and `diagnose_latent` report them.

Shapes: `inducing_placement(feature, kernel, X [N, D], ...)` -> a `Placement` of index lists.
"""

from __future__ import annotations

import math
from typing import NamedTuple, cast

import torch
from torch import Tensor

from .. import covariances as cov
from ..distributed import all_reduce_
from ..features.base import InducingFeature
from ..features.inducing_points import InducingPoints
from ..kernels.active import Active
from ..kernels.base import Kernel
from ..kernels.stationary import RadialKernel, Stationary
from ..runtime.chunking import chunk_slices


def shortest_lengthscale(kernel: Kernel) -> Tensor | None:
    """Elementwise shortest lengthscale ([] or [D]) over the radial parts of a kernel.

    None when there is none, when another stationary part (periodic) has a lengthscale
    that is not a distance in input units, or when a part sees only some input columns
    (`kernels.Active`: its lengthscales are not those of every column): compare correlations
    instead.
    """
    ell = None
    for part in kernel.modules():
        if isinstance(part, Active) or (isinstance(part, Stationary)
                                        and not isinstance(part, RadialKernel)):
            return None
        if isinstance(part, RadialKernel):
            v = part.value("lengthscale").detach()
            ell = v if ell is None else torch.minimum(ell, v)
    return ell


class Placement(NamedTuple):
    """Where the inducing variables sit: `merged_pairs` (index pairs closer than the merge
    threshold), `effective` (groups of merged ones counted once), `far` (indices farther than
    the threshold from every data point), and the `unit` the thresholds were measured in."""

    merged_pairs: list[tuple[int, int]]
    effective: int
    far: list[int]
    unit: str


def inducing_placement(feature: InducingFeature, kernel: Kernel, X: Tensor, merge_fraction: float,
                       far_lengthscales: float, over_ranks: bool = False) -> Placement:
    """Merged and far inducing variables (`diagnose`'s last two checks): scaled distances
    for inducing points under a radial kernel (shortest lengthscale), correlations otherwise.
    Shapes: X [N, D] (internal units, as the feature's); `over_ranks`: X is this rank's shard
    of data sharded over processes (distances to every rank's rows)."""
    ell = shortest_lengthscale(kernel) if isinstance(feature, InducingPoints) else None
    M = feature.num_inducing
    rows = max(1, 2**20 // M)
    with torch.no_grad():
        if ell is not None:  # inducing points and a radial kernel: scaled distances
            Z = cast(InducingPoints, feature).Z.detach() / ell
            close = torch.cdist(Z, Z) < merge_fraction
            nearest = torch.full((M,), float("inf"), dtype=Z.dtype, device=Z.device)
            for s in chunk_slices(X.shape[0], rows):
                nearest = torch.minimum(nearest, torch.cdist(Z, X[s] / ell).min(1).values)
            if over_ranks:
                all_reduce_([nearest], "distances to the data", op="min")
            far = nearest > far_lengthscales
            unit = "lengthscales"
        else:  # correlations of the inducing variables, with those of an SE kernel at that distance
            Kuu = cov.Kuu(feature, kernel)
            sd = torch.sqrt(torch.diagonal(Kuu).clamp_min(1e-300))
            close = Kuu / (sd[:, None] * sd[None, :]) > math.exp(-0.5 * merge_fraction**2)
            best = torch.zeros(M, dtype=Kuu.dtype, device=Kuu.device)
            for s in chunk_slices(X.shape[0], rows):
                kd = torch.sqrt(kernel.K_diag(X[s]).clamp_min(1e-300))
                corr = cov.Kuf(feature, kernel, X[s]).abs() / (sd[:, None] * kd[None, :])
                best = torch.maximum(best, corr.max(1).values)
            if over_ranks:
                all_reduce_([best], "correlations with the data", op="max")
            far = best < math.exp(-0.5 * far_lengthscales**2)
            unit = "lengthscale-equivalents (by correlation)"
    pairs = [(i, j) for i, j in torch.nonzero(torch.triu(close, 1)).tolist()]
    parent = list(range(M))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in pairs:
        parent[root(i)] = root(j)
    return Placement(pairs, len({root(i) for i in range(M)}),
                     torch.nonzero(far).flatten().tolist(), unit)


def placement_warnings(placement: Placement, M: int, merge_fraction: float,
                       far_lengthscales: float, why: str) -> list[str]:
    """The warnings of a `Placement` (`why`: what makes this approximation merge them)."""
    out = []
    pairs, far = placement.merged_pairs, placement.far
    if pairs:
        out.append(
            f"{len(pairs)} {'pairs' if len(pairs) > 1 else 'pair'} of inducing variables "
            f"{'are' if len(pairs) > 1 else 'is'} closer than {merge_fraction:g} "
            f"{placement.unit}: they have merged, so effectively M = {placement.effective} of "
            f"{M} ({why})")
    if far:
        out.append(
            f"{len(far)} inducing {'variables are' if len(far) > 1 else 'variable is'} "
            f"farther than {far_lengthscales:g} {placement.unit} from every data point (rows "
            f"{far[:10]}{'…' if len(far) > 10 else ''}): they explain no data")
    return out
