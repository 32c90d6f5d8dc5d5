"""Problem sizes and budgets of the Bauer, van der Wilk & Rasmussen (2016) reproduction."""

from __future__ import annotations

from dataclasses import dataclass


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
