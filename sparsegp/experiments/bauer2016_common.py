"""Shared pieces of the Bauer, van der Wilk & Rasmussen (2016) reproduction: sizes, sections,
quiet fitting and test metrics."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..kernels import SquaredExponential
from ..likelihoods.gaussian import gaussian_log_density
from ..linalg import JitterWarning
from .tables import Table


@dataclass(frozen=True)
class Config:
    """Problem sizes and optimiser budgets of every experiment (`FULL` or `QUICK`)."""

    snelson_M: tuple[int, ...] = (4, 6, 8, 12)  # experiment 1, every other Snelson point
    maxiter: int = 2000  # L-BFGS-B iterations of an ordinary fit
    gain_M: int = 7  # experiment 2
    gain_candidates: int = 400
    zx_step: int = 2  # experiment 3: every zx_step-th Snelson point, Z = X
    zx_rounds: int = 10
    zx_maxiter: int = 500  # per round
    sample_train: int = 1024  # experiment 4: 4-D GP sample
    sample_test: int = 1024
    sample_M: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024)
    sample_maxiter_large: int = 150  # for M ≥ 512 (each evaluation is O(N M²) with M ~ N)
    ub_fitc_M: int = 8  # experiment 5
    puma_train: int | None = None  # experiment 6: None = all 7168
    puma_test: int | None = None
    puma_exact: int = 2048
    puma_M: int = 40
    puma_exact_maxiter: int = 120  # each evaluation is O(2048³); converged to ~1e-3 nats/N by then
    puma_frozen_maxiter: int = 500  # first phase of the 'frozen first' VFE runs


FULL = Config()
QUICK = Config(snelson_M=(4, 8), maxiter=300, gain_candidates=120, zx_step=4, zx_rounds=3,
               zx_maxiter=100, sample_train=192, sample_test=192, sample_M=(8, 32, 192),
               sample_maxiter_large=60, puma_train=1024, puma_test=512, puma_exact=384,
               puma_M=20, puma_exact_maxiter=60, puma_frozen_maxiter=100)


@dataclass
class Section:
    """One experiment's results: tables (also written as CSV), findings, files, time."""

    name: str
    title: str
    description: str
    tables: list[Table] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0
    skipped: str | None = None

    def markdown(self) -> str:
        lines = [f"## {self.title}", "", self.description, ""]
        if self.skipped:
            return "\n".join([*lines, f"**{self.skipped}**", ""])
        for t in self.tables:
            lines += [f"**{t.title}**", "", t.markdown(), ""]
        if self.findings:
            lines += ["Findings:", ""] + [f"* {f}" for f in self.findings] + [""]
        figures = [p for p in self.files if p.suffix == ".png"]
        lines += [f"![{p.stem}]({p.name})" for p in figures]
        lines += ["", f"_Time: {self.seconds:.1f} s._", ""]
        return "\n".join(lines)


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run with `n` torch threads, then restore: small problems run fastest on one thread
    (synchronising threads costs more than the work, badly so on a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def quiet_fit(model: Any, maxiter: int, tol: float | None = None) -> Any:
    """`model.fit` without progress bars or the checks the experiments report themselves."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JitterWarning)
        return model.fit(maxiter=maxiter, tol=tol, progress=False, diagnose=False)


def se_kernel(lengthscale: Any = None, variance: Any = None, ard: bool = False) -> SquaredExponential:
    return SquaredExponential(lengthscale=lengthscale, variance=variance, ard=ard)


def copy_kernel(model: Any) -> SquaredExponential:
    """A fresh SE kernel with the (internal-unit) hyperparameters of a model's SE kernel."""
    k = model.kernel
    return SquaredExponential(lengthscale=k.value("lengthscale").detach().clone(),
                              variance=k.value("variance").detach().clone())


def predictive_scores(model: Any, Xs: np.ndarray, ys: np.ndarray) -> tuple[float, float, float]:
    """(NLPD, SMSE, RMSE) of noisy test targets: mean −log N(y*|μ*, σ*² + σ²), MSE / var(y*)."""
    mean, var = model.predict(Xs, include_noise=True)  # var ≥ σ² > 0
    nlpd = -float(gaussian_log_density(*map(torch.as_tensor, (ys, mean, var))).mean())
    err = ys - mean
    mse = float(np.mean(err**2))
    return nlpd, mse / float(np.var(ys)), math.sqrt(mse)
