"""Gauss–Hermite quadrature for expectations under Gaussians.

E_{f ~ N(μ, v)}[g(f)] ≈ Σ_i w_i g(μ + √(2v) x_i) / √π with the n Hermite nodes x_i and
weights w_i; exact for polynomials of degree < 2n.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

DEFAULT_POINTS = 32


@functools.lru_cache(maxsize=32)
def _hermgauss(n: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.hermite.hermgauss(n)
    return x, w / math.sqrt(math.pi)


def nodes_and_weights(n: int, like: Tensor) -> tuple[Tensor, Tensor]:
    """Standardised nodes z_i (E over N(0, 1) is Σ w_i g(z_i)) and weights, summing to 1."""
    x, w = _hermgauss(n)
    return (torch.as_tensor(x * math.sqrt(2.0), dtype=like.dtype, device=like.device),
            torch.as_tensor(w, dtype=like.dtype, device=like.device))


def points(mean: Tensor, var: Tensor, n: int = DEFAULT_POINTS) -> tuple[Tensor, Tensor]:
    """Quadrature points f_i = μ + √v z_i [..., n] and weights [n] for N(μ, v), elementwise."""
    z, w = nodes_and_weights(n, mean)
    return mean[..., None] + torch.sqrt(var)[..., None] * z, w


def expectation(fn: Callable[[Tensor], Tensor], mean: Tensor, var: Tensor,
                n: int = DEFAULT_POINTS) -> Tensor:
    """E_{f ~ N(mean, var)}[fn(f)] elementwise; fn maps points [..., n] to values [..., n]."""
    f, w = points(mean, var, n)
    return fn(f) @ w


def log_expectation_exp(log_fn: Callable[[Tensor], Tensor], mean: Tensor, var: Tensor,
                        n: int = DEFAULT_POINTS) -> Tensor:
    """log E[exp(log_fn(f))], computed stably with log-sum-exp."""
    f, w = points(mean, var, n)
    return torch.logsumexp(log_fn(f) + torch.log(w), dim=-1)
