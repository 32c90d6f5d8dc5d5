"""Mean functions m(x) of the prior f ~ GP(m, k): `Zero`, `Constant`, `Linear` and their sums.

A model with a mean works with the residual y − m(X) wherever it used y (the objectives
subtract it from each chunk's targets inside the streamed statistics) and adds m(X*) to its
predictions. Parameters are trainable like a kernel's: `model.mean.constant`,
`model.freeze("mean.constant")`. Unset values start from the data (`initialise_from_data`:
the constant at the mean of y, the linear weights at zero), in the model's internal units (the
mean of a standardised y is 0). Registered by class name, so a saved model rebuilds its mean.

Shapes: X [N, D] -> m(X) [N] (torch tensors); a model's `mean=` takes a `Mean`, None or a
name ('zero', 'constant', 'linear').

Example:

    >>> import numpy as np, sparsegp as sg
    >>> X, y = sg.datasets.snelson()
    >>> m = sg.GPR(X[::4], y[::4] + 10.0, mean="constant", standardize_y=False)  # y as given
    >>> type(m.mean).__name__, bool(abs(m.mean.constant.item() - np.mean(y[::4] + 10.0)) < 1e-9)
    ('Constant', True)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, TypeAlias, cast

import numpy as np
import torch
from torch import Tensor

from .parameters import Parameterised, as_user_value
from .registry import Registered, Registry
from .runtime.config import PARAMETER_DTYPE
from .validation import ArrayLike

__all__ = ["Mean", "Zero", "Constant", "Linear", "Sum", "as_mean"]


class Mean(Registered, Parameterised, ABC):
    """A mean function. Shapes: X [N, D] -> m(X) [N].

    A subclass implements `forward(X)` and declares its parameters with `_add_free` (or
    `_add_positive`); `initialise_from_data` may give unset ones data-based starting values.
    `m1 + m2` is their `Sum`.

    Example:

        >>> import torch, sparsegp as sg
        >>> class Slope(sg.means.Mean):
        ...     # m(x) = a·x₀, the first input column only
        ...     def __init__(self, a=1.0):
        ...         super().__init__()
        ...         self._add_free("a", torch.tensor(float(a), dtype=torch.float64))
        ...     def forward(self, X):
        ...         return self.a.to(X.dtype) * X[:, 0]
        >>> mean = Slope(2.0) + sg.means.Constant(1.0)
        >>> isinstance(mean, sg.means.Mean), type(mean).__name__
        (True, 'Sum')
        >>> X = torch.tensor([[0.0, 5.0], [1.0, 5.0]], dtype=torch.float64)
        >>> [round(v, 6) for v in mean(X).tolist()]
        [1.0, 3.0]
    """

    #: Parameters with one value per input column (a linear mean's weights): what a
    #: model's summary labels with the columns' names.
    per_input: tuple[str, ...] = ()

    registry = Registry("mean")

    def __init__(self) -> None:
        super().__init__()
        self._unset: set[str] = set()

    @abstractmethod
    def forward(self, X: Tensor) -> Tensor:
        """m(X) [N] for X [N, D]."""

    def initialise_from_data(self, X: Tensor, y: Tensor) -> None:
        """Give every unset parameter a starting value from the data (X [N, D], y [N])."""

    def __setattr__(self, name: str, value: Any) -> None:
        # `model.mean.constant = 10.0` sets the value, as a kernel's `lengthscale = 0.5` does
        # (torch refuses anything but a Parameter for a parameter's name)
        current = self.__dict__.get("_parameters", {}).get(name)
        if current is None or isinstance(value, (torch.nn.Parameter, torch.nn.Module)):
            super().__setattr__(name, value)
            return
        t = _finite(value, name, () if current.dim() == 0 else None)
        if t.shape != current.shape:
            raise ValueError(f"{name} must have shape {tuple(current.shape)}; got "
                             f"{tuple(t.shape)}")
        self.set_value(name, t)
        self.__dict__.get("_unset", set()).discard(name)

    def __add__(self, other: Mean) -> Sum:
        if not isinstance(other, Mean):
            return NotImplemented
        return Sum([self, other])

    def config(self) -> dict[str, Any]:
        """`{"type": class name, "args": ...}` that rebuilds this mean's structure."""
        args = {name: _plain(as_user_value(p)) for name, p in self.named_parameters()}
        return {"type": type(self).__name__, "args": args}

    def __repr__(self) -> str:
        vals = ", ".join(f"{n}={as_user_value(p)}" for n, p in self.named_parameters())
        return f"{type(self).__name__}({vals})"


class Zero(Mean):
    """m(x) = 0 (every model's default).

    Shapes: X [N, D] -> zeros [N]. No parameters; `mean=None` in a model means this.

    Example:

        >>> import numpy as np, torch, sparsegp as sg
        >>> sg.means.Zero()(torch.ones(3, 2)).tolist()
        [0.0, 0.0, 0.0]
        >>> X, y = sg.datasets.snelson()
        >>> isinstance(sg.GPR(X[::4], y[::4]).mean, sg.means.Zero)
        True
    """

    def forward(self, X: Tensor) -> Tensor:
        return X.new_zeros(X.shape[0])


class Constant(Mean):
    """m(x) = c; `constant=None` starts at the mean of y.

    Shapes: constant [] (trainable, `model.mean.constant`); X [N, D] -> m(X) [N].

    Example:

        >>> import torch, sparsegp as sg
        >>> c = sg.means.Constant(2.5)
        >>> c(torch.zeros(3, 1, dtype=torch.float64)).tolist()
        [2.5, 2.5, 2.5]
        >>> c.config()
        {'type': 'Constant', 'args': {'constant': 2.5}}
        >>> X = torch.linspace(0, 1, 20, dtype=torch.float64)[:, None]
        >>> y = 5.0 + torch.sin(6 * X[:, 0])
        >>> m = sg.GPR(X, y, mean=sg.means.Constant(), standardize_y=False)  # y as given
        >>> abs(m.mean.constant.item() - y.mean().item()) < 1e-9  # unset: the mean of y
        True
    """

    constant: Tensor

    def __init__(self, constant: float | None = None) -> None:
        super().__init__()
        if constant is None:
            self._unset.add("constant")
            constant = 0.0
        self._add_free("constant", _finite(constant, "constant", ()))

    def forward(self, X: Tensor) -> Tensor:
        return self.constant.expand(X.shape[0]).to(X.dtype)

    def initialise_from_data(self, X: Tensor, y: Tensor) -> None:
        if "constant" in self._unset:
            self.set_value("constant", y.mean().detach())
            self._unset.discard("constant")


class Linear(Mean):
    """m(x) = wᵀx + b. `weights` [D] (None: zeros, D from the data) and `bias` (None: the
    mean of y).

    Shapes: weights [D], bias [] (both trainable); X [N, D] -> m(X) [N].

    Example:

        >>> import torch, sparsegp as sg
        >>> lin = sg.means.Linear(weights=[1.0, 2.0], bias=0.5)
        >>> lin(torch.ones(2, 2, dtype=torch.float64)).tolist()
        [3.5, 3.5]
        >>> X = torch.linspace(0, 1, 20, dtype=torch.float64)[:, None]
        >>> m = sg.GPR(X, 3.0 * X[:, 0], mean="linear", standardize_y=False)  # w = 0, b = mean(y)
        >>> tuple(m.mean.weights.shape), round(m.mean.bias.item(), 6)
        ((1,), 1.5)
    """

    per_input = ("weights",)

    weights: Tensor
    bias: Tensor

    def __init__(self, weights: ArrayLike | None = None, bias: float | None = None) -> None:
        super().__init__()
        self._sized = weights is not None
        self._add_free("weights", _finite(0.0 if weights is None else weights, "weights", None))
        if bias is None:
            self._unset.add("bias")
            bias = 0.0
        self._add_free("bias", _finite(bias, "bias", ()))

    def forward(self, X: Tensor) -> Tensor:
        return X @ self._weights_for(X) + self.bias.to(X.dtype)

    def _weights_for(self, X: Tensor) -> Tensor:
        w = self.weights.to(X.dtype)
        if w.dim() != 1 or w.shape[0] != X.shape[1]:
            raise ValueError(f"Linear mean: weights have shape {tuple(w.shape)} but the inputs "
                             f"have {X.shape[1]} columns")
        return w

    def initialise_from_data(self, X: Tensor, y: Tensor) -> None:
        if not self._sized:
            self.weights = torch.nn.Parameter(self.weights.new_zeros(X.shape[1]),
                                              requires_grad=self.weights.requires_grad)
            self._sized = True
        if "bias" in self._unset:
            self.set_value("bias", (y - X @ self._weights_for(X).detach()).mean())
            self._unset.discard("bias")


class Sum(Mean):
    """m(x) = Σ_i m_i(x).

    Shapes: X [N, D] -> m(X) [N]. `m1 + m2` builds it; the parts are in `means`, and a model
    initialises them in order, each from what the ones before it left of y.

    Example:

        >>> import torch, sparsegp as sg
        >>> s = sg.means.Constant(1.0) + sg.means.Linear(weights=[2.0])
        >>> type(s).__name__, len(s.means)
        ('Sum', 2)
        >>> X = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
        >>> s(X).tolist()
        [1.0, 3.0]
    """

    #: The parts: an `nn.ModuleList` (so that they are submodules), typed as the means it holds.
    means: Sequence[Mean]

    def __init__(self, means: list[Mean]) -> None:
        super().__init__()
        if not means or not all(isinstance(m, Mean) for m in means):
            raise TypeError("Sum takes a non-empty list of means")
        self.means = cast("Sequence[Mean]", torch.nn.ModuleList(means))

    def forward(self, X: Tensor) -> Tensor:
        return sum(m(X) for m in self.means)

    def initialise_from_data(self, X: Tensor, y: Tensor) -> None:
        for m in self.means:  # each explains what the ones before left
            m.initialise_from_data(X, y)
            y = y - m(X).detach()

    def config(self) -> dict[str, Any]:
        return {"type": "Sum", "args": {"means": [m.config() for m in self.means]}}

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Sum:
        return cls([Mean.registry.build(c) for c in cfg["args"]["means"]])


#: What a model's `mean=` takes: None (zero), a `Mean`, or a name ('zero', 'constant',
#: 'linear').
MeanLike: TypeAlias = "Mean | str | None"


def as_mean(mean: MeanLike) -> Mean:
    """A model's `mean=` argument: None (zero), a `Mean`, or a name ('zero', 'constant',
    'linear').

    Shapes: none (an argument in, a `Mean` out); anything else raises a TypeError.

    Example:

        >>> import sparsegp as sg
        >>> type(sg.means.as_mean(None)).__name__, type(sg.means.as_mean("Linear")).__name__
        ('Zero', 'Linear')
        >>> c = sg.means.Constant(1.0)
        >>> sg.means.as_mean(c) is c
        True
        >>> try:
        ...     sg.means.as_mean("quadratic")
        ... except TypeError as err:
        ...     print("TypeError")
        TypeError
    """
    if mean is None:
        return Zero()
    if isinstance(mean, Mean):
        return mean
    names = {"zero": Zero, "constant": Constant, "linear": Linear}
    if isinstance(mean, str) and mean.lower() in names:
        return names[mean.lower()]()
    raise TypeError(f"mean must be a sparsegp.means.Mean, None or one of {', '.join(names)}; "
                    f"got {mean!r}")


def _finite(value: ArrayLike, name: str, shape: tuple | None) -> Tensor:
    try:
        t = torch.as_tensor(np.asarray(value, dtype=np.float64), dtype=PARAMETER_DTYPE)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be {'a number' if shape == () else 'numbers'}; got "
                        f"{value!r}") from None
    if shape == () and t.dim() != 0:
        raise ValueError(f"{name} must be a number; got shape {tuple(t.shape)}")
    if shape is None and t.dim() > 1:
        raise ValueError(f"{name} must be a 1-D array; got shape {tuple(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} must be finite")
    return t.clone()


def _plain(v: float | np.ndarray) -> float | list[float]:
    return v.tolist() if isinstance(v, np.ndarray) else v
