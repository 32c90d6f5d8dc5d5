"""The protocol every inducing feature follows (data only; the maths is in `covariances.py`).

An inducing feature defines M inducing variables u_m = ∫ f(x) v(x; m) dx as linear functionals
of the GP (van der Wilk 2018, ch. 4; docs/math.md §8): inducing points (v a delta), Gaussian
windows (multi-scale), weighted sums of deltas, Fourier windows, image patches. A feature
holds its parameters and knows nothing of kernels; `covariances.Kuu/Kuf` pair it with a
kernel. What models, persistence and diagnostics need from a feature is here:

* `num_inducing` (M) and `input_dim` (D of the inputs x);
* `config()` / `from_config()`: the structure (shapes, options), the values coming from
  `state_dict`; `InducingFeature.registry.build(cfg)` rebuilds any registered feature;
* `transformed(shift, scale)`: the same inducing variables written for inputs
  x' = (x − shift)/scale (the models' `standardize_X`);
* `locations()`: representative input locations [M, D] (for the diagnostics' "merged" and
  "far from the data" checks), or None when the feature has none;
* `extended(Z)`: the feature with inducing points f(Z) added (growing M);
* `from_data(X, M, seed=...)`: a starting feature from the data (k-means++ centres).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, TypeAlias

import torch
from torch import Tensor

from ..parameters import Parameterised
from ..registry import Registered, Registry
from ..runtime.config import PARAMETER_DTYPE
from ..validation import ArrayLike, as_tensor, check_finite


class InducingFeature(Registered, Parameterised, ABC):
    """M inducing variables u_m = ∫ f(x) v(x; m) dx (van der Wilk 2018, §4.1).

    Shapes: `num_inducing` M, `input_dim` D; with a kernel, `covariances.Kuu` [M, M] and
    `covariances.Kuf` [M, N] for X [N, D]; `locations()` [M, D] or None. A new kind of feature
    subclasses this protocol and registers its covariances with `covariances.register`.

    Example:

        >>> import numpy as np, sparsegp as sg
        >>> from sparsegp import covariances
        >>> X = np.linspace(0, 1, 20)[:, None]
        >>> features = [sg.features.InducingPoints.from_data(X, 4),
        ...             sg.features.Multiscale.from_data(X, 4),
        ...             sg.features.Fourier.from_data(X, 4)]
        >>> all(isinstance(f, sg.features.InducingFeature) for f in features)
        True
        >>> k = sg.kernels.SquaredExponential(lengthscale=0.3)
        >>> [tuple(covariances.Kuu(f, k).shape) for f in features]
        [(4, 4), (4, 4), (4, 4)]
    """

    registry = Registry("inducing feature")

    @property
    @abstractmethod
    def num_inducing(self) -> int:
        """M."""

    @property
    @abstractmethod
    def input_dim(self) -> int:
        """D, the dimension of the inputs x the feature integrates f over."""

    def __len__(self) -> int:
        return self.num_inducing

    @property
    def width(self) -> int:
        """Kernel evaluations that one input costs in Kuf (M; M·C for sums of C deltas): the
        chunk sizes of the streamed passes budget memory for this many columns."""
        return self.num_inducing

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """`{"type": class name, "args": ...}`: what `from_config` needs to rebuild the
        structure (shapes, options); the values are restored by `load_state_dict`."""

    @abstractmethod
    def transformed(self, shift: Tensor, scale: Tensor) -> InducingFeature:
        """A new feature defining the same u for inputs x' = (x − shift)/scale. Shapes: [D]."""

    def locations(self) -> Tensor | None:
        """Representative input locations [M, D] of the inducing variables, or None."""
        return None

    def set_locations(self, Z: Tensor) -> None:
        """Move the inducing variables to the locations Z [M, D] (internal units)."""
        raise TypeError(f"{type(self).__name__} has no locations to set; assign its parameters "
                        "with model.set_value('feature.<name>', ...)")

    def extended(self, Z: Tensor) -> InducingFeature:
        """This feature with K more inducing variables, the function values f(Z) for
        Z [K, D] (exactly, or as closely as the feature can express them); used to grow M
        (`add_inducing_points`, `select_inducing`, the diagnostics' tighter upper bound)."""
        raise TypeError(f"{type(self).__name__} features cannot be extended by inducing points")

    @classmethod
    @abstractmethod
    def from_data(cls, X: ArrayLike, num_inducing: int, *, seed: int = 0) -> InducingFeature:
        """A starting feature of `num_inducing` inducing variables for the inputs X [N, D]
        (subclasses add their own keyword options, e.g. `method`)."""

    def extra_repr(self) -> str:
        return f"M={self.num_inducing}, D={self.input_dim}"


class PointSet(InducingFeature):
    """Base of the features defined by one trainable set of points Z [M, D]: inducing points
    (in input space) and inducing patches (in patch space). Storage, sizes and config."""

    #: What Z is called in error messages.
    points_name = "inducing points"

    Z: Tensor

    def __init__(self, Z: ArrayLike) -> None:
        super().__init__()
        self._add_free("Z", checked_array(Z, self.points_name, 2))

    @property
    def num_inducing(self) -> int:
        return self.Z.shape[0]

    @property
    def input_dim(self) -> int:
        return self.Z.shape[1]

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "args": {"shape": list(self.Z.shape)}}

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> PointSet:
        return cls(torch.zeros(cfg["args"]["shape"], dtype=PARAMETER_DTYPE))


def checked_array(value: ArrayLike, name: str, ndim: int) -> Tensor:
    """A finite float64 tensor with `ndim` dimensions, none of them empty (a clear error if not)."""
    t = check_finite(as_tensor(value, name), name)
    if t.dim() != ndim or 0 in t.shape:
        labels = {2: "[M, D]", 3: "[M, C, D]"}.get(ndim, f"{ndim}-D")
        raise ValueError(f"{name} must be a non-empty {ndim}-D array {labels}; got shape "
                         f"{tuple(t.shape)}")
    return t.detach().to(PARAMETER_DTYPE).clone()


#: What a model's `inducing_points=` takes: an int M (chosen from the data), the inducing
#: inputs [M, D], an inducing feature, one of these per output (`kernels.Separate`), or None
#: (the model's default).
InducingLike: TypeAlias = (
    "int | ArrayLike | InducingFeature | Sequence[int | ArrayLike | InducingFeature] | None")
