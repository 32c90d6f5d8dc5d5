"""Block labels for block / PITC Power EP: the inputs clustered into blocks of nearby points."""

from __future__ import annotations

import numbers

import numpy as np

from .features.initialisation import kmeans_plus_plus, nearest
from .validation import ArrayLike, as_inputs


def cluster_blocks(X: ArrayLike, num_blocks: int, seed: int = 0) -> np.ndarray:
    """A block label 0..num_blocks−1 for every row of X [N, D]: seeded k-means clusters
    (k-means++ seeding, then Lloyd iterations), for `SGPR(..., blocks=labels)`.

    Block Power EP keeps the covariances within each block exactly, so blocks of nearby
    points are what it is for (Snelson & Ghahramani 2007). The cost grows with Σ_b |b|³:
    check `np.bincount(labels)` when the inputs are very unevenly spread.
    Shapes: X [N, D] -> labels [N] (integers 0..B'−1, B' ≤ num_blocks).

    Example:

        >>> import numpy as np, sparsegp as sg
        >>> X, y = sg.datasets.snelson()
        >>> labels = sg.cluster_blocks(X, 5)
        >>> labels.shape, int(np.bincount(labels).sum()), int(labels.max()) <= 4
        ((200,), 200, True)
        >>> m = sg.SGPR(X, y, inducing_points=10, approximation="fitc", blocks=labels)  # PITC
        >>> len(m.blocks["labels"]) == len(np.unique(labels))
        True
    """
    X = as_inputs(X, "X")
    if isinstance(num_blocks, bool) or not isinstance(num_blocks, numbers.Integral):
        raise TypeError(f"num_blocks must be an int; got {num_blocks!r}")
    if not 1 <= num_blocks <= X.shape[0]:
        raise ValueError(f"num_blocks must lie between 1 and the number of points "
                         f"{X.shape[0]}; got {num_blocks}")
    centres = kmeans_plus_plus(X, int(num_blocks), seed)
    labels = nearest(X.detach().cpu(), centres.cpu()).numpy()
    # empty clusters leave gaps: renumber the blocks 0..B'−1
    return np.unique(labels, return_inverse=True)[1].reshape(-1)
