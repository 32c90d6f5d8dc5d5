"""Kernel base class and the sum and product of kernels.

Kernels know nothing about inducing variables: they map inputs to covariances,
`K(X, X2)` [N, N2] and `K_diag(X)` [N]. Parameters not given by the user are marked
*unset*; a model fills them from its data through `initialise_from_data`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, cast

from torch import Tensor, nn

from ..parameters import Parameterised, as_user_value
from ..registry import Registered, Registry


class Kernel(Registered, Parameterised, ABC):
    """A positive-definite covariance function k(x, x')."""

    registry = Registry("kernel")

    #: The number of input columns the kernel requires, or None for any (most kernels).
    input_dim: int | None = None

    #: Elementary evaluations in one k(x, x') (Q² for a convolutional kernel over Q patches):
    #: memory budgets of chunked passes scale with it.
    evaluation_cost: int = 1

    def __init__(self) -> None:
        super().__init__()
        self._unset: set[str] = set()

    def _declare(self, name: str, value: Any, default: Any, floor: float) -> None:
        """A positive parameter; `value=None` means unset (default now, data-based later)."""
        if value is None:
            self._unset.add(name)
            value = default
        self._add_positive(name, value, floor)

    @abstractmethod
    def K(self, X: Tensor, X2: Tensor | None = None) -> Tensor:
        """Covariance matrix. Shapes: X [N, D], X2 [N2, D] (X if None) -> [N, N2]."""

    @abstractmethod
    def K_diag(self, X: Tensor) -> Tensor:
        """Diagonal of K(X, X). Shapes: X [N, D] -> [N]."""

    def initialise_from_data(self, X: Tensor, signal_variance: float) -> None:
        """Give every unset parameter a starting value based on the inputs X [N, D]."""
        if "variance" in self._unset:
            self._assign("variance", signal_variance)

    def _assign(self, name: str, value: Any) -> None:
        self.set_value(name, value)
        self._unset.discard(name)

    # -- composition ----------------------------------------------------------------------
    def __add__(self, other: Kernel) -> Sum:
        if not isinstance(other, Kernel):
            return NotImplemented
        return Sum([self, other])

    def __mul__(self, other: Kernel) -> Product:
        if not isinstance(other, Kernel):
            return NotImplemented
        return Product([self, other])

    # -- structure for save/load ----------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """Constructor arguments that rebuild this kernel's structure (values via state_dict)."""
        args = {name: _plain(as_user_value(self.value(name))) for name in self._floors}
        return {"type": type(self).__name__, "args": args}

    def __repr__(self) -> str:
        vals = ", ".join(f"{n}={_short(self.value(n))}" for n in self._floors)
        return f"{type(self).__name__}({vals})"


def kernel_from_config(cfg: dict[str, Any]) -> Kernel:
    """Rebuild a kernel from `Kernel.config()` output."""
    return Kernel.registry.build(cfg)


def _plain(v: Any) -> Any:
    return v.tolist() if hasattr(v, "tolist") else v


def _short(t: Tensor) -> str:
    v = as_user_value(t)
    return f"{v:.4g}" if isinstance(v, float) else "[" + ", ".join(f"{x:.4g}" for x in v) + "]"


class Combination(Kernel):
    """Kernels combined elementwise; nested combinations of the same kind are flattened."""

    #: The parts: an `nn.ModuleList` (so that they are submodules), typed as the kernels it holds.
    kernels: Sequence[Kernel]

    def __init__(self, kernels: list[Kernel]) -> None:
        super().__init__()
        flat: list[Kernel] = []
        for k in kernels:
            if not isinstance(k, Kernel):
                raise TypeError(f"{type(self).__name__} takes kernels; got {type(k).__name__}")
            flat.extend(k.kernels if isinstance(k, Combination) and type(k) is type(self) else [k])
        self.kernels = cast("Sequence[Kernel]", nn.ModuleList(flat))
        dims = {k.input_dim for k in flat if k.input_dim is not None}
        if len(dims) > 1:
            raise ValueError(f"the kernels require inputs of different dimensions {sorted(dims)}")
        self.input_dim = dims.pop() if dims else None
        self.evaluation_cost = sum(k.evaluation_cost for k in flat)

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "kernels": [k.config() for k in self.kernels]}

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Combination:
        return cls([kernel_from_config(c) for c in cfg["kernels"]])

    def __repr__(self) -> str:
        sep = " + " if isinstance(self, Sum) else " * "
        return "(" + sep.join(repr(k) for k in self.kernels) + ")"


class Sum(Combination):
    """k(x, x') = Σ_i k_i(x, x')."""

    def K(self, X: Tensor, X2: Tensor | None = None) -> Tensor:
        return cast(Tensor, sum(k.K(X, X2) for k in self.kernels))

    def K_diag(self, X: Tensor) -> Tensor:
        return cast(Tensor, sum(k.K_diag(X) for k in self.kernels))

    def initialise_from_data(self, X: Tensor, signal_variance: float) -> None:
        for k in self.kernels:
            k.initialise_from_data(X, signal_variance / len(self.kernels))


class Product(Combination):
    """k(x, x') = Π_i k_i(x, x')."""

    def K(self, X: Tensor, X2: Tensor | None = None) -> Tensor:
        return cast(Tensor, math.prod(k.K(X, X2) for k in self.kernels))

    def K_diag(self, X: Tensor) -> Tensor:
        return cast(Tensor, math.prod(k.K_diag(X) for k in self.kernels))

    def initialise_from_data(self, X: Tensor, signal_variance: float) -> None:
        for k in self.kernels:
            k.initialise_from_data(X, signal_variance ** (1.0 / len(self.kernels)))


def as_inputs(X: Tensor, name: str = "X") -> Tensor:
    """Check that X is a 2-D tensor of inputs."""
    if not isinstance(X, Tensor) or X.dim() != 2:
        shape = tuple(X.shape) if isinstance(X, Tensor) else type(X).__name__
        raise ValueError(f"{name} must be a 2-D tensor [N, D]; got {shape}")
    return X

