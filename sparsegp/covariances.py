"""Kuu(feature, kernel) and Kuf(feature, kernel, X): one registry for (feature, kernel) pairs.

One level of dispatch: the most specific registered pair along both classes' MROs wins;
an unregistered pair is an error that lists what is registered.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from .features.inducing_points import InducingPoints
from .kernels.base import Kernel

_KUU: dict[tuple[type, type], Callable[..., Tensor]] = {}
_KUF: dict[tuple[type, type], Callable[..., Tensor]] = {}
_STREAMED: dict[tuple[type, type], type] = {}  # fast streamed Kuf (see cross_covariance.py)


def register(which: str, feature_type: type, kernel_type: type) -> Callable:
    """Decorator registering the 'Kuu' or 'Kuf' function, or the 'streamed' Kuf class, of a pair."""
    table = {"Kuu": _KUU, "Kuf": _KUF, "streamed": _STREAMED}[which]

    def deco(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
        table[(feature_type, kernel_type)] = fn
        return fn

    return deco


def _find(table: dict, feature: object, kernel: object) -> Callable | None:
    for f in type(feature).__mro__:
        for k in type(kernel).__mro__:
            fn = table.get((f, k))
            if fn is not None:
                return fn
    return None


def _lookup(table: dict, which: str, feature: object, kernel: object) -> Callable[..., Tensor]:
    fn = _find(table, feature, kernel)
    if fn is not None:
        return fn
    pairs = ", ".join(f"({f.__name__}, {k.__name__})" for f, k in table)
    raise TypeError(
        f"no {which} registered for ({type(feature).__name__}, {type(kernel).__name__}); "
        f"registered pairs: {pairs}"
    )


def lookup_streamed(feature: object, kernel: object) -> type | None:
    """The registered fast streamed-Kuf class of the pair, or None (use the generic one)."""
    return _find(_STREAMED, feature, kernel)


def Kuu(feature: object, kernel: Kernel) -> Tensor:
    """Covariance of the inducing variables, without jitter. Shape: [M, M]."""
    return _lookup(_KUU, "Kuu", feature, kernel)(feature, kernel)


def Kuf(feature: object, kernel: Kernel, X: Tensor) -> Tensor:
    """Cross-covariance cov(u, f(X)). Shapes: X [N, D] -> [M, N]."""
    return _lookup(_KUF, "Kuf", feature, kernel)(feature, kernel, X)


@register("Kuu", InducingPoints, Kernel)
def _kuu_points(feature: InducingPoints, kernel: Kernel) -> Tensor:
    return kernel.K(feature.Z)


@register("Kuf", InducingPoints, Kernel)
def _kuf_points(feature: InducingPoints, kernel: Kernel, X: Tensor) -> Tensor:
    return kernel.K(feature.Z, X)
