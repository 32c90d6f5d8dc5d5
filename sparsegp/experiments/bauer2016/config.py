"""Problem sizes and budgets of the Bauer, van der Wilk & Rasmussen (2016) reproduction."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ZxProtocol:
    """How experiment 3 optimises from Z = X: perturb Z by N(0, (perturb·ℓ)²) (seeded), take
    `adam_steps` torch Adam steps on `training_loss()`, then ≤ `rounds` L-BFGS-B runs of
    ≤ `maxiter` iterations (`tol`: scipy's ftol and gtol; None = scipy's defaults)."""

    name: str
    perturb: float = 0.0  # in lengthscales of the exact GP
    seed: int = 0
    adam_steps: int = 0
    adam_lr: float = 0.03
    rounds: int = 10
    maxiter: int = 500
    tol: float | None = 1e-15

    def describe(self) -> str:
        parts = []
        if self.perturb > 0.0:
            parts.append(f"Z = X + N(0, ({self.perturb:g} ℓ)²) noise (seed {self.seed})")
        if self.adam_steps:
            parts.append(f"{self.adam_steps} Adam steps (lr {self.adam_lr:g})")
        if self.rounds:
            tol = "scipy's default tol" if self.tol is None else f"tol {self.tol:g}"
            parts.append(f"≤ {self.rounds} L-BFGS-B runs of ≤ {self.maxiter} iterations, {tol}")
        return ", then ".join(parts)


# experiment 3's protocols: the first is the plain one the others are compared with
ZX_FULL = (
    ZxProtocol("L-BFGS-B"),
    ZxProtocol("L-BFGS-B restarts, default tol", rounds=20, maxiter=2000, tol=None),
    ZxProtocol("perturbed 0.01ℓ + L-BFGS-B", perturb=0.01),
    ZxProtocol("perturbed 0.1ℓ + L-BFGS-B", perturb=0.1),
    ZxProtocol("Adam 0.01 + L-BFGS-B", adam_steps=3000, adam_lr=0.01, rounds=4),
    ZxProtocol("Adam 0.03 + L-BFGS-B", adam_steps=3000, adam_lr=0.03, rounds=4),
)
ZX_QUICK = (
    ZxProtocol("L-BFGS-B", rounds=3, maxiter=100),
    ZxProtocol("Adam 0.03 + L-BFGS-B", adam_steps=300, adam_lr=0.03, rounds=1, maxiter=30),
)


@dataclass(frozen=True)
class Config:
    """Problem sizes and optimiser budgets of every experiment (`FULL` or `QUICK`)."""

    snelson_M: tuple[int, ...] = (4, 6, 8, 12)  # experiment 1, every other Snelson point
    maxiter: int = 2000  # L-BFGS-B iterations of an ordinary fit
    gain_M: int = 7  # experiment 2
    gain_candidates: int = 400
    zx_step: int = 2  # experiment 3: every zx_step-th Snelson point, Z = X
    zx_protocols: tuple[ZxProtocol, ...] = ZX_FULL
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
QUICK = Config(snelson_M=(4, 8), maxiter=300, gain_candidates=120, zx_step=4,
               zx_protocols=ZX_QUICK, sample_train=192, sample_test=192, sample_M=(8, 32, 192),
               sample_maxiter_large=60, puma_train=1024, puma_test=512, puma_exact=384,
               puma_M=20, puma_exact_maxiter=60, puma_frozen_maxiter=100)
