"""Kuu(feature, kernel) and Kuf(feature, kernel, X): one registry for (feature, kernel) pairs.

One level of dispatch: the most specific registered pair along both classes' MROs wins, but
a registration covers subclasses only where it says so (`feature_subclasses`,
`kernel_subclasses`): a subclass never silently inherits a pair whose maths may not hold for
it (an image-patch feature is not a set of points in image space; a subclass of the squared
exponential may change K). An unregistered pair is an error that names both classes and
lists what is registered.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import Tensor

from ..features.base import InducingFeature
from ..features.collection import FeatureList
from ..kernels.base import Combination, Kernel
from ..linalg import jittered_cholesky
from ..moved import former

#: A registered function (Kuu, Kuf, width, cholesky) or chunked-Kuf class of a pair.
Registered = Callable[..., Any]
R = TypeVar("R", bound=Registered)


@dataclass(frozen=True)
class _Entry:
    fn: Registered
    feature_subclasses: bool
    kernel_subclasses: bool


_TABLES: dict[str, dict[tuple[type, type], _Entry]] = {"Kuu": {}, "Kuf": {}, "chunked": {},
                                                        "width": {}, "cholesky": {}}


def register(which: str, feature_type: type, kernel_type: type, *,
             feature_subclasses: bool = False, kernel_subclasses: bool = False
             ) -> Callable[[R], R]:
    """Decorator registering the 'Kuu' or 'Kuf' function, the 'chunked' Kuf class, or the
    'width' (kernel evaluations per input in Kuf, when not the default) or the Kuu
    'cholesky' (when it has structure to exploit) of a pair. By default
    the registration covers exactly these two classes; say which side's
    subclasses it also covers (e.g. `kernel_subclasses=True` for maths written in terms of
    `kernel.K`, which holds for every kernel)."""
    if which == "streamed":  # its name before "stream" meant the online updates only
        warnings.warn('register("streamed", ...) is now register("chunked", ...)',
                      DeprecationWarning, stacklevel=2)
        which = "chunked"
    table = _TABLES[which]

    def deco(fn: R) -> R:
        table[(feature_type, kernel_type)] = _Entry(fn, feature_subclasses, kernel_subclasses)
        return fn

    return deco


def _find(which: str, feature: object, kernel: object) -> Registered | None:
    ft, kt = type(feature), type(kernel)
    for f in ft.__mro__:
        for k in kt.__mro__:
            entry = _TABLES[which].get((f, k))
            if entry is None:
                continue
            if (f is ft or entry.feature_subclasses) and (k is kt or entry.kernel_subclasses):
                return entry.fn
    return None


def _describe(entry_key: tuple[type, type], entry: _Entry) -> str:
    f, k = entry_key
    fs = f"{f.__name__}{'+' if entry.feature_subclasses else ''}"
    ks = f"{k.__name__}{'+' if entry.kernel_subclasses else ''}"
    return f"({fs}, {ks})"


def _lookup(which: str, feature: object, kernel: object) -> Registered:
    fn = _find(which, feature, kernel)
    if fn is not None:
        return fn
    pairs = ", ".join(_describe(key, e) for key, e in _TABLES[which].items())
    raise TypeError(
        f"no {which} registered for the feature {type(feature).__name__} with the kernel "
        f"{type(kernel).__name__}: there is no maths for this pair; registered pairs "
        f"('+': and subclasses): {pairs}"
    )


def check_pair(feature: InducingFeature, kernel: Kernel) -> None:
    """Raise a clear TypeError unless Kuu and Kuf are registered for this pair, and for every
    pair they are built from (a sum of kernels: each part), by evaluating both once."""
    _lookup("Kuu", feature, kernel)
    _lookup("Kuf", feature, kernel)
    with torch.no_grad():
        Kuu(feature, kernel)
        x = torch.zeros(1, input_dim(feature, kernel), dtype=torch.float64,
                        device=kernel_device(kernel))
        Kuf(feature, kernel, x)


def paired(feature: FeatureList, kernel: Combination) -> list[tuple[InducingFeature, Kernel]]:
    """(feature_i, kernel_i) of a list of features (`features.Stacked`, `features.Separate`)
    against the kernels of a combination (a sum, `kernels.Separate`): one feature per kernel."""
    features, kernels = list(feature.features), list(kernel.kernels)
    if len(features) != len(kernels):
        raise ValueError(f"{type(feature).__name__} has {len(features)} inducing features but "
                         f"{type(kernel).__name__} has {len(kernels)} kernels: give one feature "
                         f"per {feature.part_name}")
    return list(zip(features, kernels))


def input_dim(feature: InducingFeature, kernel: Kernel) -> int:
    """Columns of the inputs X: fixed by the kernel where it requires a dimension (images of a
    convolutional kernel, whose features live in patch space), else the feature's."""
    return kernel.input_dim if kernel.input_dim is not None else feature.input_dim


def width(feature: InducingFeature, kernel: Kernel) -> int:
    """Elementary kernel evaluations that one input costs in Kuf (what chunked passes budget
    memory for): registered per pair where it differs from the feature's width times the
    kernel's evaluation cost."""
    fn = _find("width", feature, kernel)
    return fn(feature, kernel) if fn is not None else feature.width * kernel.evaluation_cost


def kernel_device(kernel: Kernel) -> torch.device | None:
    p = next(iter(kernel.parameters()), None)
    return None if p is None else p.device


def lookup_chunked(feature: object, kernel: object) -> Registered | None:
    """The registered fast chunked-Kuf class of the pair, or None (use the generic one)."""
    return _find("chunked", feature, kernel)


def Kuu(feature: object, kernel: Kernel) -> Tensor:
    """Covariance of the inducing variables, without jitter. Shape: [M, M]."""
    return _lookup("Kuu", feature, kernel)(feature, kernel)


def Kuu_cholesky(feature: object, kernel: Kernel, jitter: float, name: str = "Kuu"
                 ) -> tuple[Tensor, float]:
    """(L, j): the lower Cholesky factor of Kuu with relative jitter j (`linalg.jittered_cholesky`),
    block by block where the pair registers a structured factorisation."""
    fn = _find("cholesky", feature, kernel)
    if fn is not None:
        return fn(feature, kernel, jitter, name)
    return jittered_cholesky(Kuu(feature, kernel), jitter, name=name)


def Kuf(feature: object, kernel: Kernel, X: Tensor) -> Tensor:
    """Cross-covariance cov(u, f(X)). Shapes: X [N, D] -> [M, N]."""
    return _lookup("Kuf", feature, kernel)(feature, kernel, X)


def __getattr__(name: str) -> object:
    """Former names of this module (`sparsegp.moved`)."""
    return former(__name__, name)
