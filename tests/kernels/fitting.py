"""The fit every new kernel's tests run: an SGPR with the kernel learns the data (its
evidence rises, its fit is close) and survives a save/load round trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sparsegp as sg


def fits_and_round_trips(kernel: Any, A: np.ndarray, y: np.ndarray, tmp_path: Path,
                         inducing_points: int, maxiter: int) -> sg.SGPR:
    """The fitted model, after checking: the fit converged and raised the evidence by more
    than one nat, the training RMSE is below a fifth of std(y), and a saved and loaded copy
    has the same kernel class and evidence (to 1e-12)."""
    m = sg.SGPR(A, y, kernel=kernel, inducing_points=inducing_points, noise_variance=0.1)
    start = m.log_marginal_likelihood()
    result = m.fit(maxiter=maxiter)
    assert result.success, result.message
    assert m.log_marginal_likelihood() > start + 1.0
    mean, _ = m.predict(A)
    assert np.sqrt(np.mean((mean - y) ** 2)) < 0.2 * np.std(y)
    m.save(tmp_path / "model.pt", include_data=True)
    loaded = sg.load(tmp_path / "model.pt")
    assert type(loaded.kernel) is type(kernel)
    assert loaded.log_marginal_likelihood() == pytest.approx(m.log_marginal_likelihood(), rel=1e-12)
    return loaded
