"""Shared fixtures: small random regression problems in float64."""

from __future__ import annotations

import numpy as np
import pytest


def make_problem(seed: int, N: int = 40, D: int = 2, noise: float = 0.05):
    """X [N, D] uniform in [-3, 3]^D and y = smooth function + Gaussian noise."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3.0, 3.0, size=(N, D))
    f = np.sin(X).sum(1) + 0.3 * (X**2).sum(1) / D
    y = f + np.sqrt(noise) * rng.standard_normal(N)
    return X, y


@pytest.fixture
def problem():
    return make_problem(0)


@pytest.fixture
def quiet_model_warnings():
    """Silence the library's advice (ScaleWarning, ApproximationWarning) in tests that build
    models on purpose-made data (`pytestmark = pytest.mark.usefixtures(...)`)."""
    import warnings

    import sparsegp as sg

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sg.ScaleWarning)
        warnings.simplefilter("ignore", sg.ApproximationWarning)
        yield
