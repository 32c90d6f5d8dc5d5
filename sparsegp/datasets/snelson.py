"""The 1-D toy data of Snelson & Ghahramani (2006), as distributed with their SPGP code.

Copied byte for byte from GPflow (Apache-2.0) at commit 81fe1fb8, identical to the files of
Snelson's SPGP_dist; see PROVENANCE.md beside the data files.
"""

from __future__ import annotations

from importlib import resources

import numpy as np


def _load(name: str) -> np.ndarray:
    with resources.files(__package__).joinpath("data", name).open("r") as f:
        return np.loadtxt(f, dtype=np.float64)


def snelson() -> tuple[np.ndarray, np.ndarray]:
    """The 200 training points: X (200, 1) float64 in [0.06, 5.97], y (200,) float64."""
    return _load("snelson_train_inputs.dat")[:, None], _load("snelson_train_outputs.dat")


def snelson_test_inputs() -> np.ndarray:
    """The 301 evenly spaced test inputs from −3 to 10, shape (301, 1) (no targets exist)."""
    return _load("snelson_test_inputs.dat")[:, None]
