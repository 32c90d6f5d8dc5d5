"""Bauer, van der Wilk & Rasmussen (2016), experiment 4: a sample from a 4-D GP.

Inputs uniform on [−3, 3]⁴, an isotropic SE kernel with ℓ = 1.5, σ_f = 1 and Gaussian noise of
variance 0.01; half the points train, half test. FITC and VFE for a range of M against the
exact GP: objective, learned noise, test NLPD and SMSE.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...models import GPR, SGPR
from ..shared.fitting import AS_GIVEN, quiet_fit, se_kernel, se_of
from ..shared.metrics import predictive_scores
from ..shared.plotting import new_figure, save
from ..shared.sections import Section
from ..shared.tables import Table
from .config import Config

LENGTHSCALE, SIGNAL_VARIANCE, NOISE_VARIANCE, DIM = 1.5, 1.0, 0.01, 4


def sample_gp_data(num_train: int, num_test: int, seed: int = 2016
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X, y, Xs, ys): one draw of f ~ GP(0, SE(ℓ=1.5, σ_f²=1)) on [−3, 3]⁴ plus noise 0.01."""
    rng = np.random.default_rng(seed)
    n = num_train + num_test
    X = rng.uniform(-3.0, 3.0, size=(n, DIM))
    sq = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    K = SIGNAL_VARIANCE * np.exp(-0.5 * sq / LENGTHSCALE**2) + 1e-8 * np.eye(n)
    f = np.linalg.cholesky(K) @ rng.standard_normal(n)
    y = f + np.sqrt(NOISE_VARIANCE) * rng.standard_normal(n)
    return X[:num_train], y[:num_train], X[num_train:], y[num_train:]


def gp_sample_4d(out: Path, cfg: Config) -> Section:
    """Experiment 4: objective, noise, NLPD and SMSE against M for FITC, VFE and exact."""
    X, y, Xs, ys = sample_gp_data(cfg.sample_train, cfg.sample_test)
    N = X.shape[0]
    sec = Section("gp_sample_4d", "4. A sample from a 4-D GP",
                  f"{N} training / {Xs.shape[0]} test points from a GP with an isotropic SE kernel "
                  f"(ℓ = {LENGTHSCALE}, σ_f = 1) on [−3, 3]⁴ with noise variance {NOISE_VARIANCE}. "
                  "Every model starts from the same data-based hyperparameters; sparse models from "
                  "k-means++ inducing inputs (M = N: Z = X). All parameters are optimised "
                  f"(at most {cfg.maxiter} L-BFGS-B iterations, {cfg.sample_maxiter_large} for M ≥ 512).")
    exact = GPR(X, y, kernel=se_kernel(), **AS_GIVEN)
    quiet_fit(exact, cfg.maxiter)
    table = Table("Objective, learned noise and test performance",
                  ["method", "M", "objective", "upper bound", "noise variance", "lengthscale",
                   "test NLPD", "test SMSE"])
    e_nlpd, e_smse, _ = predictive_scores(exact, Xs, ys)
    e_obj = exact.log_marginal_likelihood()
    table.add("exact", N, e_obj, None, exact.noise_variance, float(se_of(exact).lengthscale),
              e_nlpd, e_smse)
    series: dict[str, list[tuple[float, ...]]] = {"vfe": [], "fitc": []}
    for M in cfg.sample_M:
        M = min(M, N)
        maxiter = cfg.maxiter if M < 512 else cfg.sample_maxiter_large
        for approx in ("vfe", "fitc"):
            m = SGPR(X, y, kernel=se_kernel(), inducing_points=M, approximation=approx,
                     **AS_GIVEN)
            quiet_fit(m, maxiter)
            nlpd, smse, _ = predictive_scores(m, Xs, ys)
            F = m.log_marginal_likelihood()
            table.add(approx.upper(), M, F, m.upper_bound(), m.noise_variance,
                      float(se_of(m).lengthscale), nlpd, smse)
            series[approx].append((M, F, m.noise_variance, nlpd, smse))
    fig, axes = new_figure(2, 2, (10, 7), sharex=True)
    panels = [("objective (nats)", 1, e_obj), ("noise variance", 2, exact.noise_variance),
              ("test NLPD", 3, e_nlpd), ("test SMSE", 4, e_smse)]
    for ax, (name, j, ref) in zip(axes.flat, panels):
        for approx, style in (("vfe", "C0o-"), ("fitc", "C3s-")):
            rows = np.asarray(series[approx])
            ax.plot(rows[:, 0], rows[:, j], style, ms=4, label=approx.upper())
        ax.axhline(ref, color="k", ls="--", lw=1, label="exact GP")
        if j == 2:
            ax.axhline(NOISE_VARIANCE, color="0.5", ls=":", lw=1, label="true noise")
            ax.set_yscale("log")
        ax.set_xscale("log", base=2)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("M")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(f"4-D GP sample, N = {N}")
    sec.files.append(save(fig, out / "gp_sample_4d.png"))
    sec.files.append(table.write_csv(out / "gp_sample_4d.csv"))
    sec.tables.append(table)
    vfe, fitc = np.asarray(series["vfe"]), np.asarray(series["fitc"])
    sec.findings += [
        f"VFE's objective rises monotonically with M towards the exact {e_obj:.1f}: "
        f"{bool(np.all(np.diff(vfe[:, 1]) > -1e-6 * abs(e_obj)))} "
        f"({', '.join(f'{v:.1f}' for v in vfe[:, 1])}); its noise falls from "
        f"{vfe[0, 2]:.4f} to {vfe[-1, 2]:.4f} (exact {exact.noise_variance:.4f}).",
        f"FITC's objective exceeds the exact GP's at M = "
        f"{[int(r[0]) for r in fitc if r[1] > e_obj + 1e-6] or 'none'}; its noise ranges "
        f"{fitc[:, 2].min():.4f}–{fitc[:, 2].max():.4f}.",
        f"Test NLPD at the smallest M: VFE {vfe[0, 3]:.3f}, FITC {fitc[0, 3]:.3f}; at the largest: "
        f"VFE {vfe[-1, 3]:.3f}, FITC {fitc[-1, 3]:.3f}, exact {e_nlpd:.3f}.",
    ]
    return sec
