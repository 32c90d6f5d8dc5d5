"""Starting inducing inputs from the data: seeded k-means++ centres or a random subset."""

from __future__ import annotations

import numbers

import numpy as np
import torch
from torch import Tensor

from ..runtime.chunking import auto_chunk_size, chunk_slices
from ..validation import ArrayLike, as_inputs, seeded_generator

INIT_METHODS = ("kmeans++", "random")


def nearest(X: Tensor, C: Tensor) -> Tensor:
    """Index of the nearest centre for every row. Shapes: X [N, D], C [K, D] -> [N]."""
    out = torch.empty(X.shape[0], dtype=torch.long)
    cn = (C * C).sum(-1)
    for s in chunk_slices(X.shape[0], auto_chunk_size(C.shape[0], X.element_size(), device=X.device)):
        # ‖x − c‖² up to the ‖x‖² term, which does not change the argmin.
        out[s] = torch.addmm(cn[None, :], X[s], C.mT, alpha=-2.0).argmin(-1)
    return out


def kmeans_plus_plus(X: Tensor, M: int, seed: int = 0, iterations: int = 10, *,
                     at_most: bool = False, rows: str = "data points") -> Tensor:
    """M centres: k-means++ D² seeding (Arthur & Vassilvitskii 2007), then Lloyd iterations.

    Shapes: X [N, D] -> [M, D]. Deterministic for a given seed. X with k < M distinct rows:
    k centres with `at_most`, else an error naming X's rows by `rows` (plural).
    """
    g = seeded_generator(seed)
    Xc = X.detach().cpu()
    N = Xc.shape[0]
    idx = [int(torch.randint(N, (1,), generator=g))]
    d2 = ((Xc - Xc[idx[0]]) ** 2).sum(-1)
    for k in range(1, M):
        total = float(d2.sum())
        if total <= 0.0:  # every row is a centre already
            if at_most:
                break
            raise ValueError(
                f"only {k} of the {rows} are distinct: cannot place {M} distinct inducing "
                f"inputs (pass inducing_points ≤ {k})"
            )
        i = int(torch.multinomial(d2 / total, 1, generator=g))
        idx.append(i)
        d2 = torch.minimum(d2, ((Xc - Xc[i]) ** 2).sum(-1))
    C = Xc[idx].clone()
    for _ in range(iterations):
        assign = nearest(Xc, C)
        counts = torch.bincount(assign, minlength=C.shape[0]).to(Xc.dtype)
        sums = torch.zeros_like(C).index_add_(0, assign, Xc)
        keep = counts > 0  # an empty cluster keeps its centre
        new = torch.where(keep[:, None], sums / counts.clamp_min(1)[:, None], C)
        if torch.equal(new, C):
            break
        C = new
    return C.to(X.device)


def distinct_rows(X: Tensor) -> int:
    """The number of distinct rows of X [N, D] (repeated measurements share a row)."""
    return int(torch.unique(X.detach(), dim=0).shape[0])


def random_subset(X: Tensor, M: int, seed: int = 0, *, rows: str = "data points") -> Tensor:
    """M distinct rows of X drawn without replacement (a repeated row counts once: two equal
    inducing inputs make Kuu singular). Shapes: X [N, D] -> [M, D]."""
    g = seeded_generator(seed)
    order = torch.randperm(X.shape[0], generator=g).to(X.device)
    Xp = X[order].detach()
    _, first = np.unique(torch.unique(Xp, dim=0, return_inverse=True)[1].cpu().numpy(),
                         return_index=True)  # each distinct row where the order first has it
    if first.size < M:
        raise ValueError(f"only {first.size} of the {rows} are distinct: cannot place {M} "
                         f"distinct inducing inputs (pass inducing_points ≤ {first.size})")
    keep = torch.as_tensor(np.sort(first)[:M], device=X.device)
    return Xp[keep].clone()


def initial_inducing_inputs(X: ArrayLike, M: int, method: str = "kmeans++", seed: int = 0, *,
                            at_most: bool = False, rows: str = "data points") -> Tensor:
    """M inducing inputs [M, D] chosen from the rows of X [N, D] by `method` (seeded).

    `at_most=True`: M is an upper bound, lowered to the number of distinct rows of X (the
    models' default M: repeated measurements or binary images' patches have few; k-means++
    finds them as it goes, a random subset counts them first). `rows` names X's rows
    (plural) in the errors."""
    X = as_inputs(X, "X")
    if isinstance(M, bool) or not isinstance(M, numbers.Integral):
        raise TypeError(f"the number of inducing variables must be an int; got {M!r}")
    M, N = int(M), X.shape[0]
    if at_most and M >= 1:
        M = min(M, N if method == "kmeans++" else distinct_rows(X))
    if M < 1:
        raise ValueError(f"inducing_points must be at least 1; got {M}")
    if M > N:
        raise ValueError(f"inducing_points={M} exceeds the number of {rows} N={N}; choose "
                         "M ≤ N (or pass an array of inducing inputs)")
    if method not in INIT_METHODS:
        raise ValueError(f"inducing_init must be one of {INIT_METHODS}; got {method!r}")
    if method == "random":
        return random_subset(X, M, seed, rows=rows)
    return kmeans_plus_plus(X, M, seed, at_most=at_most, rows=rows)


def cluster_spreads(X: Tensor, C: Tensor, floor_fraction: float = 1e-2) -> Tensor:
    """Per-dimension standard deviation of the points nearest each centre. Shapes: X [N, D],
    C [M, D] -> [M, D]; clusters of fewer than two points, and spreads below
    `floor_fraction` of the data's, get that floor."""
    Xc, Cc = X.detach().cpu(), C.detach().cpu()
    assign = nearest(Xc, Cc)
    M = Cc.shape[0]
    counts = torch.bincount(assign, minlength=M).to(Xc.dtype)[:, None]
    mean = torch.zeros_like(Cc).index_add_(0, assign, Xc) / counts.clamp_min(1)
    sq = torch.zeros_like(Cc).index_add_(0, assign, (Xc - mean[assign]) ** 2)
    spread = torch.sqrt(sq / (counts - 1).clamp_min(1))
    floor = floor_fraction * (Xc.std(0) if Xc.shape[0] > 1 else torch.ones_like(Cc[0]))
    floor = torch.where(floor > 0, floor, torch.full_like(floor, floor_fraction))
    return torch.maximum(torch.where(counts > 1, spread, floor), floor).to(C.device)


def cluster_members(X: Tensor, C: Tensor, k: int, seed: int = 0) -> Tensor:
    """For every centre, the centre itself and k − 1 points drawn (seeded) from its cluster
    (the centre repeated where a cluster has too few). Shapes: X [N, D], C [M, D] -> [M, k, D]."""
    Xc, Cc = X.detach().cpu(), C.detach().cpu()
    assign = nearest(Xc, Cc)
    g = seeded_generator(seed)
    out = Cc[:, None, :].repeat(1, k, 1)
    for m in range(Cc.shape[0]):
        members = torch.nonzero(assign == m).flatten()
        take = members[torch.randperm(members.numel(), generator=g)[: k - 1]]
        out[m, 1:1 + take.numel()] = Xc[take]
    return out.to(C.device)
