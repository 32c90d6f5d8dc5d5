"""k-means++ initialisation of the inducing inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sparsegp.features.initialisation import kmeans_plus_plus, random_subset


def test_kmeans_finds_well_separated_clusters():
    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]])
    X = torch.as_tensor(np.repeat(centres, 50, axis=0) + 0.1 * rng.normal(size=(200, 2)))
    C = kmeans_plus_plus(X, 4, seed=3).numpy()
    # every true centre has exactly one found centre next to it
    d = np.linalg.norm(C[:, None] - centres[None], axis=-1)
    assert sorted(d.argmin(1).tolist()) == [0, 1, 2, 3] and d.min(1).max() < 0.1


def test_kmeans_is_seeded_and_gives_distinct_centres():
    X = torch.as_tensor(np.random.default_rng(1).normal(size=(500, 3)))
    a, b, c = kmeans_plus_plus(X, 20, 0), kmeans_plus_plus(X, 20, 0), kmeans_plus_plus(X, 20, 1)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert len({tuple(r) for r in a.tolist()}) == 20


def test_kmeans_with_duplicated_data_and_too_few_distinct_points():
    X = torch.as_tensor(np.repeat(np.arange(5.0)[:, None], 10, axis=0))
    C = kmeans_plus_plus(X, 5, 0)
    assert sorted(C[:, 0].tolist()) == [0.0, 1.0, 2.0, 3.0, 4.0]
    with pytest.raises(ValueError, match="only 5 of the data points are distinct"):
        kmeans_plus_plus(X, 6, 0)


def test_random_subset_rows_come_from_the_data():
    X = torch.arange(40.0, dtype=torch.float64).reshape(20, 2)
    Z = random_subset(X, 5, 0)
    assert len({tuple(r) for r in Z.tolist()}) == 5
    assert all(r in X.tolist() for r in Z.tolist())


def test_a_random_subset_takes_distinct_rows():
    from sparsegp.features.initialisation import random_subset

    X = torch.randn(50, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(3)  # distinct rows: the first M of the permutation
    assert torch.equal(random_subset(X, 7, seed=3), X[torch.randperm(50, generator=g)[:7]])
    repeated = torch.tensor(np.repeat([[0.0], [1.0], [2.0]], 10, axis=0))
    # drew copies of one row before: Kuu singular
    assert sorted(random_subset(repeated, 3, seed=0)[:, 0].tolist()) == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="only 3 of the data points are distinct"):
        random_subset(repeated, 4, seed=0)
