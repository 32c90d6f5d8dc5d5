"""Kernel base class and the sum and product of kernels.

Kernels know nothing about inducing variables: they map inputs to covariances,
`K(X, X2)` [N, N2] and `K_diag(X)` [N]. Parameters not given by the user are marked
*unset*; a model fills them from its data through `initialise_from_data`.
"""

from __future__ import annotations

import math
from abc import ABC, ABCMeta, abstractmethod
from collections.abc import Sequence
from typing import Any, TypeAlias, cast

import numpy as np
import torch
from torch import Tensor, nn

from ..parameters import Parameterised, as_user_value
from ..registry import Registered, Registry
from ..validation import ArrayLike

#: Input columns (`active_dims=`, `Active`'s dims): one column index or a list of them.
Columns: TypeAlias = "int | np.integer | Sequence[int | np.integer] | np.ndarray"

#: `Kernel.K_blocks` forms K of at most this many rows at a time (for several small blocks).
BLOCK_ROWS = 256


class _KernelType(ABCMeta):
    """Every kernel class takes `active_dims=` besides its own arguments: a list of input
    columns, and the kernel is built on those columns only (`kernels.Active(kernel,
    active_dims)`, found through the registry so that this module need not import it)."""

    def __call__(cls, *args: Any, active_dims: Columns | None = None, **kwargs: Any) -> Any:
        kernel = super().__call__(*args, **kwargs)
        if active_dims is None:
            return kernel
        return cast(Any, Kernel.registry.get("Active"))(kernel, active_dims)


class Kernel(Registered, Parameterised, ABC, metaclass=_KernelType):
    """A positive-definite covariance function k(x, x').

    Shapes: X [N, D], X2 [N2, D] -> `K(X, X2)` [N, N2], `K_diag(X)` [N]. A subclass implements
    `K` and `K_diag`; positive parameters are declared with `_declare(name, value, default,
    floor)` and read with `value(name)`; `k1 + k2` and `k1 * k2` give `Sum` and `Product`.
    Every kernel class also takes `active_dims=[columns]`: the kernel on those input columns
    only (`Active`), e.g. `SquaredExponential(active_dims=[0]) + Matern32(active_dims=[1, 2])`
    for an additive model.

    Example:

        >>> import torch, sparsegp as sg
        >>> class Cosine(sg.kernels.Kernel):
        ...     # σ² cos(ω (x − x')) for 1-D inputs
        ...     def __init__(self, variance=None, frequency=1.0):
        ...         super().__init__()
        ...         self._declare("variance", variance, 1.0, 1e-6)
        ...         self._declare("frequency", frequency, 1.0, 1e-6)
        ...     def K(self, X, X2=None):
        ...         X2 = X if X2 is None else X2
        ...         return self.value("variance") * torch.cos(self.value("frequency") * (X - X2.T))
        ...     def K_diag(self, X):
        ...         return self.value("variance").expand(X.shape[0])
        >>> k = Cosine(variance=2.0)
        >>> X = torch.zeros(3, 1, dtype=torch.float64)
        >>> isinstance(k, sg.kernels.Kernel), tuple(k.K(X).shape), round(k.K_diag(X)[0].item(), 6)
        (True, (3, 3), 2.0)
    """

    registry = Registry("kernel")

    #: The number of input columns the kernel requires, or None for any (most kernels).
    input_dim: int | None = None

    #: Parameters with one value per input column when given so (ARD lengthscales, a linear
    #: kernel's variances): what a model's summary labels with the columns' names.
    per_input: tuple[str, ...] = ()

    #: Elementary evaluations in one k(x, x') (Q² for a convolutional kernel over Q patches):
    #: memory budgets of chunked passes scale with it.
    evaluation_cost: int = 1

    def __init__(self) -> None:
        super().__init__()
        self._unset: set[str] = set()

    def _declare(self, name: str, value: ArrayLike | None, default: ArrayLike, floor: float,
                 max_dim: int = 1) -> None:
        """A positive parameter (a scalar for `max_dim` 0, else scalar or per-input);
        `value=None` means unset (default now, data-based later)."""
        if value is None:
            self._unset.add(name)
            value = default
        self._add_positive(name, value, floor, max_dim)

    @abstractmethod
    def K(self, X: Tensor, X2: Tensor | None = None) -> Tensor:
        """Covariance matrix. Shapes: X [N, D], X2 [N2, D] (X if None) -> [N, N2]."""

    @abstractmethod
    def K_diag(self, X: Tensor) -> Tensor:
        """Diagonal of K(X, X). Shapes: X [N, D] -> [N]."""

    def K_blocks(self, X: Tensor) -> Tensor:
        """K(X_b, X_b) of B sets of S inputs at once. Shapes: X [B, S, D] -> [B, S, S].

        This one forms K of the rows of up to `BLOCK_ROWS` of them at a time and keeps its
        diagonal blocks (up to BLOCK_ROWS/S times the work needed); kernels that can evaluate
        batches directly override it.

        Example:

            >>> import torch, sparsegp as sg
            >>> k = sg.kernels.Linear()
            >>> X = torch.randn(4, 3, 2, dtype=torch.float64)
            >>> bool(torch.allclose(k.K_blocks(X)[1], k.K(X[1])))
            True
        """
        B, S, D = X.shape
        step = max(1, BLOCK_ROWS // S)
        parts = []
        for i in range(0, B, step):
            b = min(step, B - i)
            K = self.K(X[i:i + b].reshape(b * S, D)).view(b, S, b, S)
            parts.append(K.diagonal(dim1=0, dim2=2).permute(2, 0, 1))
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def forget_given_values(self) -> None:
        """Take every parameter as unset (as if no value had been given): the next
        `initialise_from_data` gives each its data-based starting value."""
        self._unset = set(self._floors)

    def initialise_from_data(self, X: Tensor, signal_variance: float) -> None:
        """Give every unset parameter a starting value based on the inputs X [N, D]."""
        if "variance" in self._unset:
            self._assign("variance", signal_variance)

    def initialise_from_targets(self, X: Tensor, y: Tensor, signal_variance: float) -> None:
        """Give every unset parameter a starting value based on the inputs X [N, D] and the
        targets y [N] of a regression model (its residuals from the prior mean): as
        `initialise_from_data` for most kernels; a kernel whose natural start reads the
        targets (`SpectralMixture`: the peaks of their periodogram) overrides it."""
        self.initialise_from_data(X, signal_variance)

    def _assign(self, name: str, value: ArrayLike, reshape: bool = False) -> None:
        """`set_value` (in place; `reshape=True` where the shape is meant to change), and the
        parameter is no longer unset."""
        self.set_value(name, value, reshape=reshape)
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
        args = self.positive_arguments()
        return {"type": type(self).__name__, "args": args}

    def __repr__(self) -> str:
        vals = ", ".join(f"{n}={_short(self.value(n))}" for n in self._floors)
        return f"{type(self).__name__}({vals})"


def kernel_from_config(cfg: dict[str, Any]) -> Kernel:
    """Rebuild a kernel from `Kernel.config()` output.

    Shapes: none (a plain dict in, a kernel out); the structure and the values written in the
    config are rebuilt, the exact parameter values then come from `load_state_dict`.

    Example:

        >>> import sparsegp as sg
        >>> k = sg.kernels.Matern32(lengthscale=2.0) * sg.kernels.Periodic(period=0.5)
        >>> cfg = k.config()
        >>> cfg["type"], [part["type"] for part in cfg["kernels"]]
        ('Product', ['Matern32', 'Periodic'])
        >>> k2 = sg.kernels.kernel_from_config(cfg)
        >>> _ = k2.load_state_dict(k.state_dict())
        >>> repr(k2) == repr(k)
        True
    """
    return Kernel.registry.build(cfg)


def _short(t: Tensor) -> str:
    return _format(as_user_value(t))


def _format(v: Any) -> str:
    """A number as 4 significant digits, an array of any shape as nested lists of them."""
    if isinstance(v, float) or np.ndim(v) == 0:
        return f"{float(v):.4g}"
    return "[" + ", ".join(_format(x) for x in v) + "]"


class Combination(Kernel):
    """Kernels combined elementwise; nested combinations of the same kind are flattened."""

    #: The parts: an `nn.ModuleList` (so that they are submodules), typed as the kernels it holds.
    kernels: Sequence[Kernel]

    def __init__(self, kernels: list[Kernel]) -> None:
        super().__init__()
        if isinstance(kernels, Kernel) or not isinstance(kernels, (list, tuple)) or not kernels:
            raise ValueError(f"{type(self).__name__} takes a non-empty list of kernels; got "
                             f"{kernels!r}")
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

    @abstractmethod
    def _share(self, signal_variance: float) -> float:
        """Each part's starting signal variance, given the whole's."""

    def initialise_from_data(self, X: Tensor, signal_variance: float) -> None:
        for k in self.kernels:
            k.initialise_from_data(X, self._share(signal_variance))

    def initialise_from_targets(self, X: Tensor, y: Tensor, signal_variance: float) -> None:
        for k in self.kernels:
            k.initialise_from_targets(X, y, self._share(signal_variance))


class Sum(Combination):
    """k(x, x') = Σ_i k_i(x, x').

    Shapes: X [N, D], X2 [N2, D] -> K [N, N2], K_diag [N]. `k1 + k2` builds it; nested sums are
    flattened into one list `kernels`. A model's data-based start splits the signal variance
    equally among the parts.

    Example:

        >>> import torch, sparsegp as sg
        >>> k = sg.kernels.SquaredExponential(variance=1.0) + sg.kernels.Constant(variance=0.5)
        >>> isinstance(k, sg.kernels.Sum), len(k.kernels)
        (True, 2)
        >>> X = torch.zeros(4, 2, dtype=torch.float64)
        >>> [round(v, 6) for v in k.K_diag(X).tolist()]
        [1.5, 1.5, 1.5, 1.5]
    """

    def K(self, X: Tensor, X2: Tensor | None = None) -> Tensor:
        return cast(Tensor, sum(k.K(X, X2) for k in self.kernels))

    def K_blocks(self, X: Tensor) -> Tensor:
        return cast(Tensor, sum(k.K_blocks(X) for k in self.kernels))

    def K_diag(self, X: Tensor) -> Tensor:
        return cast(Tensor, sum(k.K_diag(X) for k in self.kernels))

    def _share(self, signal_variance: float) -> float:
        return signal_variance / len(self.kernels)


class Product(Combination):
    """k(x, x') = Π_i k_i(x, x').

    Shapes: X [N, D], X2 [N2, D] -> K [N, N2], K_diag [N]. `k1 * k2` builds it; nested
    products are flattened into one list `kernels`.

    Example:

        >>> import torch, sparsegp as sg
        >>> k = sg.kernels.Linear(variance=2.0) * sg.kernels.Constant(variance=3.0)
        >>> type(k).__name__, len(k.kernels)
        ('Product', 2)
        >>> X = torch.ones(3, 1, dtype=torch.float64)
        >>> tuple(k.K(X).shape), round(k.K_diag(X)[0].item(), 6)
        ((3, 3), 6.0)
    """

    def K(self, X: Tensor, X2: Tensor | None = None) -> Tensor:
        return cast(Tensor, math.prod(k.K(X, X2) for k in self.kernels))

    def K_blocks(self, X: Tensor) -> Tensor:
        return cast(Tensor, math.prod(k.K_blocks(X) for k in self.kernels))

    def K_diag(self, X: Tensor) -> Tensor:
        return cast(Tensor, math.prod(k.K_diag(X) for k in self.kernels))

    def _share(self, signal_variance: float) -> float:
        return signal_variance ** (1.0 / len(self.kernels))


def as_inputs(X: Tensor, name: str = "X") -> Tensor:
    """Check that X is a 2-D tensor of inputs."""
    if not isinstance(X, Tensor) or X.dim() != 2:
        shape = tuple(X.shape) if isinstance(X, Tensor) else type(X).__name__
        raise ValueError(f"{name} must be a 2-D tensor [N, D]; got {shape}")
    return X


def check_input_pair(X: Tensor, X2: Tensor | None) -> None:
    """Check X [N, D] and X2 [N2, D] (or None) as inputs with the same columns."""
    as_inputs(X)
    if X2 is not None and as_inputs(X2, "X2").shape[1] != X.shape[1]:
        raise ValueError(f"X has {X.shape[1]} columns but X2 has {X2.shape[1]}")

