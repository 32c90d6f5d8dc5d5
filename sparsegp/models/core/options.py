"""A model's constructor options as one typed value: what `__init__` was given besides the
data, checked once when the value is made.

Every model that takes data (X, y) declares its options as a frozen dataclass built from these
parts — `ModelOptions` (every model), `RegressionOptions` (Gaussian noise and the units of y),
`InducingOptions` (inducing variables) — plus its own fields, e.g. `sgpr.SGPROptions`. Its
`__init__` keeps the public signature and its defaults, and makes the value in one call; the
construction hooks (`Model._configure`, `_prepare_targets`, `_target_scale_problems`,
`_initialise`) all receive that one value, typed, in place of keyword plumbing: adding an
option is one field and the lines that use it. Checks that need no data (types, ranges,
flags) run when the value is made (`__post_init__`, each class checking its own fields);
those that need the data (inducing inputs against X, targets against the likelihood) run in
the hooks. What a model saves is the plain configuration the hooks derive from it
(`Model._config`), so that files saved before options existed keep loading.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, fields
from typing import Any

import torch

from ...features.base import InducingLike
from ...kernels.base import Kernel
from ...means import MeanLike
from ...runtime.chunking import check_chunk_size
from ...validation import check_bool, check_seed


def check_jitter(jitter: object) -> float:
    """`jitter` as a float in [0, 1) (relative to a mean diagonal), or a ValueError."""
    if isinstance(jitter, bool) or not isinstance(jitter, numbers.Real) or not (
        0.0 <= float(jitter) < 1.0
    ):
        raise ValueError(f"jitter must be a number in [0, 1) (relative to the mean diagonal); got {jitter!r}")
    return float(jitter)


@dataclass(frozen=True, kw_only=True)
class ModelOptions:
    """Options every model with data takes: the kernel (None: SE with ARD lengthscales), the
    prior mean (None: zero), the jitter, whether X is standardised, the dtype of the work."""

    kernel: Kernel | None
    mean: MeanLike
    jitter: float
    standardize_X: bool
    dtype: torch.dtype | None

    def __post_init__(self) -> None:
        self._set("jitter", check_jitter(self.jitter))
        self._set("standardize_X", check_bool(self.standardize_X, "standardize_X"))

    def _set(self, name: str, value: Any) -> None:
        """Store a checked (normalised) value in the frozen dataclass."""
        object.__setattr__(self, name, value)

    def given(self) -> dict[str, Any]:
        """The options as keyword arguments (the model's constructor takes them)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, kw_only=True)
class RegressionOptions(ModelOptions):
    """Gaussian noise: its variance (None: a tenth of var(y); a number, or one per point or
    group), the groups sharing one, and whether y is standardised inside."""

    noise_variance: Any
    noise_groups: Any
    standardize_y: bool

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set("standardize_y", check_bool(self.standardize_y, "standardize_y"))


@dataclass(frozen=True, kw_only=True)
class InducingOptions(ModelOptions):
    """Inducing variables: `inducing_points` (an int M, an array [M, D], a feature or None),
    how M points are chosen from X, the seed of that choice, and the rows per chunk."""

    inducing_points: InducingLike
    inducing_init: str
    seed: int
    chunk_size: int | None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set("seed", check_seed(self.seed))
        self._set("chunk_size", check_chunk_size(self.chunk_size))
