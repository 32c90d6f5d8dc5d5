"""What `sparsegp experiment bui2017` runs: the methods (as data), the grids and the budgets.

A method is a row of `METHODS`: a display name, the `SGPR` approximation, its α and extra
keyword arguments — fixed ones (`options`) or ones computed from the training data
(`data_options(X, Z, seed) -> dict`, e.g. block labels for PITC / block Power EP). Adding a
method is adding a row; the store, the runs and the report take their list from here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...partition import cluster_blocks

#: The exact GP of the synthetic part (the reference the approximations are compared with).
EXACT = "exact GP"

#: Power-EP powers strictly between VFE (α → 0) and EP/FITC (α = 1), as in the paper.
POWERS = (0.05, 0.1, 0.2, 0.4, 0.5, 0.6, 0.8)

#: The UCI regression data sets of the paper's §4.2 (folders below DATA_DIR/uci).
UCI = ("bostonHousing", "concrete", "energy", "kin8nm", "naval-propulsion-plant", "power-plant",
       "wine-quality-red", "yacht")


@dataclass(frozen=True)
class Method:
    """One approximation: `SGPR(..., approximation=approximation, alpha=alpha, **options,
    **data_options(X, Z, seed))`. `power` places it on the α axis of the figures (VFE 0) and
    colours it; `line` and `marker` tell apart methods of about the same power."""

    name: str
    approximation: str
    alpha: float | None = None
    options: tuple[tuple[str, Any], ...] = ()
    data_options: Callable[[np.ndarray, np.ndarray, int], dict[str, Any]] | None = field(
        default=None, compare=False, repr=False)
    #: the figures' line style and marker (block methods: dashed, square markers)
    line: str = "-"
    marker: str = "o"

    @property
    def power(self) -> float:
        if self.alpha is not None:
            return float(self.alpha)
        return {"vfe": 0.0, "dtc": 0.0}.get(self.approximation, 1.0)

    def kwargs(self, X: np.ndarray, Z: np.ndarray, seed: int) -> dict[str, Any]:
        """The SGPR keyword arguments of this method on training inputs X with initial Z."""
        extra = dict(self.options)
        if self.data_options is not None:
            extra.update(self.data_options(X, Z, seed))
        return {"approximation": self.approximation, "alpha": self.alpha, **extra}


def _blocks(X: np.ndarray, Z: np.ndarray, seed: int) -> dict[str, Any]:
    """Blocks of about M nearby training points (k-means), as PITC uses (docs/math.md §2)."""
    return {"blocks": cluster_blocks(X, max(1, math.ceil(len(X) / len(Z))), seed=seed)}


METHODS: tuple[Method, ...] = (
    Method("VFE", "vfe"),
    *(Method(f"PEP {a:g}", "pep", a) for a in POWERS),
    Method("EP", "fitc"),  # α = 1: Power EP is EP, whose energy is FITC's marginal likelihood
    # block Power EP: blocks of ~M points (the paper's PITC-like family; not in its figures)
    Method("PITC", "fitc", data_options=_blocks, line="--", marker="s"),
    Method("block PEP 0.5", "pep", 0.5, data_options=_blocks, line="--", marker="s"),
)

#: The pairs the report compares in its win-rate table and histograms (first vs second).
PAIRS = (("PEP 0.5", "VFE"), ("PEP 0.5", "EP"), ("EP", "VFE"))


def method(name: str, methods: tuple[Method, ...] = METHODS) -> Method:
    """The method called `name` among `methods` (a clear error listing the names otherwise)."""
    for m in methods:
        if m.name == name:
            return m
    raise ValueError(f"unknown method {name!r}; the methods are {[m.name for m in methods]}")


@dataclass(frozen=True)
class Config:
    """Grids and budgets. `maxiter_*` are L-BFGS-B iterations (`model.fit(maxiter=...)`;
    scipy's `maxiter`, each taking one or a few function evaluations — about 1.05 on average
    here — with `maxfun` = max(15000, 2·maxiter), so iterations are the binding limit)."""

    mode: str
    synthetic_sets: int = 30
    synthetic_points: int = 1000  # split 50:50 into training and test points
    synthetic_M: tuple[int, ...] = (5, 10, 20, 50, 100, 200, 500)
    uci_sets: tuple[str, ...] = UCI
    splits: int = 20
    uci_M: tuple[int, ...] = (5, 10, 25, 50, 100, 200)
    # ~5 h and ~10 h with --jobs 2 on 2 cores (measured per evaluation: 6 ms + 0.55 ns·N·M²
    # for VFE, 6 ms + 1.4 ns·N·M² for PEP/EP; ~1.1 evaluations per iteration)
    maxiter_synthetic: int = 500
    maxiter_uci: int = 150

    def identity(self) -> dict[str, Any]:
        """What a result store must agree with before rows are added to it."""
        return {"mode": self.mode, "synthetic_points": self.synthetic_points,
                "maxiter_synthetic": self.maxiter_synthetic, "maxiter_uci": self.maxiter_uci}


FULL = Config("full")
QUICK = Config("quick", synthetic_sets=2, synthetic_points=200, synthetic_M=(5, 20),
               uci_sets=("yacht", "concrete"), splits=2, uci_M=(5, 20),
               maxiter_synthetic=25, maxiter_uci=25)
