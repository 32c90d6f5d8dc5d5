"""Data and baselines of `sparsegp experiment randominputs`: latent-structure data for the
GP-LVM, the two nonlinear dynamical systems for the GPSSM, a linear-Gaussian state-space model
fitted by maximum likelihood, PCA and the 1-nearest-neighbour error of a latent embedding."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ...objectives.latent.kalman import LinearSSM, kalman_filter, kalman_forecast
from ...runtime.threads import threads_for


def three_phase(n: int, seed: int = 0, D: int = 12) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Y [n, D], latent X [n, 2], labels [n]): three clusters in a 2-D latent space (like the
    three flow regimes of the oil-flow data), mapped to D outputs through a random two-layer
    tanh network, plus noise of standard deviation 0.05."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 3
    angle = 2 * np.pi * labels / 3
    X = 1.5 * np.c_[np.cos(angle), np.sin(angle)] + 0.4 * rng.standard_normal((n, 2))
    H = np.tanh(X @ rng.standard_normal((2, 8)))
    Y = H @ rng.standard_normal((8, D)) / math.sqrt(8) + 0.05 * rng.standard_normal((n, D))
    return Y, X, labels


def mnist_digits(folder: Path, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n training images of `folder`/mnist.npz (seeded), pixels in [0, 1], and labels."""
    with np.load(folder / "mnist.npz") as d:
        keep = np.random.default_rng(seed).choice(d["x_train"].shape[0], n, replace=False)
        return d["x_train"][keep].reshape(n, -1) / 255.0, d["y_train"][keep].astype(int)


def nearest_neighbour_error(Z: np.ndarray, labels: np.ndarray) -> float:
    """Leave-one-out 1-nearest-neighbour error of the labels in the embedding Z [n, k]."""
    sq = (Z * Z).sum(1)
    dist = sq[:, None] + sq[None, :] - 2 * Z @ Z.T
    np.fill_diagonal(dist, np.inf)
    return float(np.mean(labels[dist.argmin(1)] != labels))


def kink(x: np.ndarray) -> np.ndarray:
    """The kink function of Frigola et al. (2014)."""
    return 0.8 + (x + 0.2) * (1 - 5 / (1 + np.exp(-2 * x)))


def bistable(x: np.ndarray) -> np.ndarray:
    """A bistable growth map, x/2 + 2.5x/(1 + x²): stable fixed points at ±2 and an unstable
    one at 0; the process noise (variance 0.8) makes the state switch between the wells now
    and then (a scaled version of the classic growth model)."""
    return 0.5 * x + 2.5 * x / (1 + x * x)


@dataclass(frozen=True)
class System:
    """A 1-D nonlinear transition observed directly: x_{t+1} = f(x_t) + N(0, q), y = x + N(0, r)."""

    name: str
    f: Callable[[np.ndarray], np.ndarray]
    q: float
    r: float
    x0: float

    def simulate(self, T: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(states [T], observations [T, 1])."""
        rng = np.random.default_rng(seed)
        x = [self.x0]
        for _ in range(T - 1):
            x.append(float(self.f(np.array(x[-1]))) + math.sqrt(self.q) * rng.standard_normal())
        states = np.array(x)
        return states, (states + math.sqrt(self.r) * rng.standard_normal(T))[:, None]


SYSTEMS = (System("kink", kink, 0.05, 0.1, 0.5), System("bistable", bistable, 0.8, 0.1, 1.0))


def fit_linear_ssm(Y: np.ndarray, iterations: int = 200) -> LinearSSM:
    """x_{t+1} = a x_t + b + N(0, q), y = x + N(0, r) (the GPSSM's emission) with a, b, q, r
    maximising the Kalman filter's likelihood (L-BFGS from the least-squares AR(1) fit of y,
    its residual variance split evenly between q and r), x_0 ~ N(0, 1)."""
    y = torch.as_tensor(Y, dtype=torch.float64)
    a, b = np.polyfit(Y[:-1, 0], Y[1:, 0], 1)
    half = max(float(np.var(Y[1:, 0] - a * Y[:-1, 0] - b)) / 2, 1e-6)
    theta = torch.tensor([a, b, math.log(half), math.log(half)], dtype=torch.float64,
                         requires_grad=True)

    def ssm(t: torch.Tensor) -> LinearSSM:
        one = torch.ones(1, 1, dtype=torch.float64)
        return LinearSSM(A=t[0] * one, b=t[1:2], Qn=t[2].exp() * one, C=one,
                         d=torch.zeros(1, dtype=torch.float64), R=t[3].exp() * one,
                         m0=torch.zeros(1, dtype=torch.float64), P0=one)

    opt = torch.optim.LBFGS([theta], max_iter=iterations, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = -kalman_filter(y, ssm(theta))[0]
        loss.backward()
        return loss

    with threads_for(0.0):  # a sequence of tiny operations: one thread (runtime/threads.py)
        opt.step(closure)
    return ssm(theta.detach())


def linear_forecast(ssm: LinearSSM, Y: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Means and variances [steps] of y beyond the data, from the filtered last state."""
    with torch.no_grad(), threads_for(0.0):
        _, means, covs = kalman_filter(torch.as_tensor(Y, dtype=torch.float64), ssm)
        mean, var = kalman_forecast(ssm, means[-1], covs[-1], steps)
    return mean[:, 0].numpy(), var[:, 0].numpy()
