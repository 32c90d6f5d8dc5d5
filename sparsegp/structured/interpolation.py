"""Local cubic interpolation onto a regular grid (Keys 1981), as KISS-GP uses it.

Per input dimension d a regular grid u_d of G_d points covers the data and 10% of its range
beyond each side (new inputs there can be predicted), plus the two cells the stencil needs.
An input x has 4 weights per dimension (on the grid points i−1 … i+2 around it, Keys' cubic
convolution kernel with a = −0.5: exact for quadratics), and 4^D weights on the product grid.
W [N, Π G_d] holds them as a sparse matrix; K_XX ≈ W K_UU Wᵀ.
Shapes: X [N, D]; indices and weights [N, D, 4].
"""

from __future__ import annotations

import itertools
from typing import cast

import torch
from torch import Tensor

#: Grid cells of margin beyond the covered range on each side (the cubic stencil reaches 2).
MARGIN = 2
#: Fraction of the data's range that the grid covers beyond each side.
EXTENSION = 0.1


def grid_bounds(X: Tensor, sizes: list[int]) -> tuple[Tensor, Tensor]:
    """(first point, spacing) [D] of grids of `sizes` points covering X and EXTENSION of its
    range beyond each side, with MARGIN more cells on each side."""
    lo, hi = X.min(0).values, X.max(0).values
    span = torch.where(hi > lo, hi - lo, torch.ones_like(hi))
    lo, hi = lo - EXTENSION * span, hi + EXTENSION * span
    span = hi - lo
    size = torch.as_tensor(sizes, dtype=X.dtype, device=X.device)
    spacing = span / (size - 1 - 2 * MARGIN)
    return lo - MARGIN * spacing, spacing


def grid_points(start: Tensor, spacing: Tensor, sizes: list[int]) -> list[Tensor]:
    """The grid of each dimension, u_d [G_d]."""
    return [start[d] + spacing[d] * torch.arange(g, dtype=start.dtype, device=start.device)
            for d, g in enumerate(sizes)]


def _keys(s: Tensor) -> Tensor:
    """Keys' cubic convolution kernel (a = −0.5) at distances |s| ≤ 2 (in grid cells)."""
    s = s.abs()
    near = (1.5 * s - 2.5) * s * s + 1.0
    far = ((-0.5 * s + 2.5) * s - 4.0) * s + 2.0
    return torch.where(s <= 1.0, near, torch.where(s < 2.0, far, torch.zeros_like(s)))


def cubic_weights(X: Tensor, start: Tensor, spacing: Tensor, sizes: list[int]
                  ) -> tuple[Tensor, Tensor]:
    """Grid indices and weights [N, D, 4] of each input in each dimension. Inputs beyond the
    grid's margin are refused (the grid is built from the training data: new points must lie
    within two cells of it)."""
    t = (X - start) / spacing  # position in grid cells
    size = torch.as_tensor(sizes, device=X.device)
    base = torch.floor(t).long()
    if bool(((base < 1) | (base > size - 3)).any()):
        raise ValueError("inputs lie beyond the interpolation grid (the training inputs' range "
                         "and 10% of it on each side): KISS-GP cannot extrapolate further; "
                         "refit with data covering the new inputs, or use SGPR")
    offsets = torch.arange(-1, 3, device=X.device)
    idx = base[..., None] + offsets  # [N, D, 4]
    return idx, _keys(t[..., None] - idx.to(X.dtype))


def interpolation_matrix(idx: Tensor, w: Tensor, sizes: list[int]) -> Tensor:
    """W [N, Π G_d] (sparse COO, coalesced) with 4^D entries per row: products of the per-dimension
    weights on the product grid (row-major: the last dimension varies fastest)."""
    N, D, _ = idx.shape
    strides = [1] * D
    for d in range(D - 2, -1, -1):
        strides[d] = strides[d + 1] * sizes[d + 1]
    cols, vals = [], []
    for combo in itertools.product(range(4), repeat=D):
        c = cast(Tensor, sum(idx[:, d, k] * strides[d] for d, k in enumerate(combo)))  # D ≥ 1 terms
        v = torch.ones(N, dtype=w.dtype, device=w.device)
        for d, k in enumerate(combo):
            v = v * w[:, d, k]
        cols.append(c)
        vals.append(v)
    col = torch.stack(cols, 1).reshape(-1)
    row = torch.arange(N, device=idx.device).repeat_interleave(len(cols))
    total = 1
    for g in sizes:
        total *= g
    return torch.sparse_coo_tensor(torch.stack([row, col]), torch.stack(vals, 1).reshape(-1),
                                   (N, total), check_invariants=False).coalesce()
