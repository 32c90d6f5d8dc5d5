"""`sparsegp experiment randominputs`: GP models with random inputs (van der Wilk 2018, ch. 6).

1. Bayesian GP-LVM on three-phase synthetic data (three clusters in a known 2-D latent space,
   12 outputs): the latent plot against PCA's, the ARD relevances of a 5-D latent space, the
   bound, and the leave-one-out 1-NN error of the class labels in each embedding (Titsias &
   Lawrence 2010 score the oil-flow embedding this way; no package ships the oil data, so the
   task is imitated with known structure).
2. The same on MNIST digits from DATA_DIR/mnist/mnist.npz (docs/data.md; skipped with the reason
   when absent, the other sections still run).
3. GPSSM on the kink function (Frigola et al. 2014) and on a bistable growth map: the learned
   transition with its band against the truth, and k-step forecasts beyond the training
   sequence against a linear-Gaussian state-space model fitted by maximum likelihood (Kalman
   filter), RMSE and NLPD per horizon averaged over independent sequences; and the states'
   Markov q(x) (the default) against the mean-field q(x): bound, fitted process noise,
   transition error; and, on the first sequence, the transition's posterior by particle
   Gibbs (no variational factorisation) against the variational one.
`--quick` runs reduced sizes in about a minute.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch

from ...models import GPSSM, BayesianGPLVM
from ...models.core.latent import pca_latents
from ...objectives.latent.particle_gibbs import PosteriorSamples
from ..shared.command import experiment_main, experiment_parser
from ..shared.datafolder import Missing, data_folder, missing_files, skipped_for_data
from ..shared.fitting import se_of
from ..shared.metrics import gaussian_nll
from ..shared.plotting import new_figure, save
from ..shared.sections import Section, run_sections
from ..shared.tables import Table
from .data import (
    SYSTEMS,
    System,
    fit_linear_ssm,
    linear_forecast,
    mnist_digits,
    nearest_neighbour_error,
    three_phase,
)


@dataclass(frozen=True)
class Config:
    """Sizes and budgets (`FULL` or `QUICK`)."""

    synthetic_n: int = 600
    mnist_n: int = 2000
    latent_dim: int = 5
    M: int = 40
    maxiter: int = 800
    T: int = 200  # training steps of each GPSSM sequence
    horizon: int = 15
    repeats: int = 20
    ssm_M: int = 15
    ssm_maxiter: int = 500
    gibbs_samples: int = 300  # particle Gibbs on the first sequence of each system
    gibbs_burn_in: int = 100
    gibbs_particles: int = 20
    linear_iterations: int = 40  # L-BFGS iterations of the linear baseline's fit


FULL = Config()
QUICK = Config(synthetic_n=150, mnist_n=200, M=15, maxiter=80, T=80, horizon=6, repeats=1,
               ssm_M=10, ssm_maxiter=120, linear_iterations=15, gibbs_samples=30,
               gibbs_burn_in=10, gibbs_particles=10)


def relevance(model: BayesianGPLVM) -> np.ndarray:
    """The spread of each latent dimension over its squared lengthscale (ARD relevance)."""
    spread = model.latent_mean.var(0) + model.latent_variance.mean(0)
    return spread / np.broadcast_to(se_of(model).lengthscale, spread.shape) ** 2


def gplvm_section(out: Path, cfg: Config, name: str, title: str, description: str,
                  Y: np.ndarray, labels: np.ndarray, truth: np.ndarray | None) -> Section:
    """Fit a GP-LVM with ARD, compare its embedding with PCA's: table, findings, figure."""
    sec = Section(name, title, description)
    model = BayesianGPLVM(Y, latent_dim=cfg.latent_dim, inducing_points=cfg.M)
    start = model.log_marginal_likelihood()
    result = model.fit(maxiter=cfg.maxiter, progress=False)
    rel = relevance(model)
    order = np.argsort(rel)[::-1]
    scaled = model.latent_mean / np.broadcast_to(se_of(model).lengthscale, rel.shape)
    pca = pca_latents(torch.as_tensor(Y, dtype=torch.float64), cfg.latent_dim).numpy()
    table = Table(f"{title}: leave-one-out 1-NN error of the labels in each embedding",
                  ["embedding", "2-D (top two dimensions)", f"all {cfg.latent_dim} dimensions"])
    table.add("PCA", nearest_neighbour_error(pca[:, :2], labels),
              nearest_neighbour_error(pca, labels))
    table.add("Bayesian GP-LVM", nearest_neighbour_error(model.latent_mean[:, order[:2]], labels),
              nearest_neighbour_error(scaled, labels))
    if truth is not None:
        table.add("true latent points", nearest_neighbour_error(truth, labels), None)
    sec.tables.append(table)
    sec.files.append(table.write_csv(out / f"{name}.csv"))
    rel_norm = rel / rel.max()
    sec.findings += [
        f"bound {start:.1f} → {model.log_marginal_likelihood():.1f} nats after "
        f"{result.iterations} L-BFGS-B iterations ({result.seconds:.0f} s); noise variance "
        f"{model.noise_variance:.3g}",
        "ARD relevances (largest = 1): " + ", ".join(f"{r:.3g}" for r in np.sort(rel_norm)[::-1])
        + f"; {int(np.sum(rel_norm > 0.05))} dimension(s) above 5% of the largest",
    ]
    sec.files.append(_embedding_figure(out / f"{name}.png", title, model.latent_mean[:, order[:2]],
                                       pca[:, :2], labels, rel_norm, truth))
    return sec


def _embedding_figure(path: Path, title: str, latent: np.ndarray, pca: np.ndarray,
                      labels: np.ndarray, rel: np.ndarray, truth: np.ndarray | None) -> Path:
    panels = [("true latent points", truth)] if truth is not None else []
    panels += [("PCA (first two components)", pca), ("GP-LVM (two most relevant dims)", latent)]
    fig, axes = new_figure(1, len(panels) + 1, (3.4 * (len(panels) + 1), 3.3))
    for ax, (name, Z) in zip(axes[0], panels):
        scatter = ax.scatter(Z[:, 0], Z[:, 1], c=labels, cmap="tab10", s=6,
                             vmin=0, vmax=max(9, int(labels.max())))
        ax.set_title(name, fontsize=9)
    ax = axes[0, -1]
    ax.bar(np.arange(rel.shape[0]), np.sort(rel)[::-1])
    ax.set_yscale("log")
    ax.set_xlabel("latent dimension (sorted)")
    ax.set_title("ARD relevance (largest = 1)", fontsize=9)
    fig.colorbar(scatter, ax=axes[0, len(panels) - 1], label="label")
    fig.suptitle(title, fontsize=10)
    return save(fig, path)


def gpssm_section(out: Path, cfg: Config, system: System) -> Section:
    """GPSSM vs a linear-Gaussian SSM on sequences of `system`: transition and forecasts."""
    sec = Section(f"gpssm-{system.name}", f"GPSSM: the {system.name} system",
                  f"x_(t+1) = f(x_t) + N(0, {system.q}), y_t = x_t + N(0, {system.r}); the GPSSM "
                  f"(M = {cfg.ssm_M}, emission C = 1 given, L-BFGS-B ≤ {cfg.ssm_maxiter} "
                  f"iterations) and a linear-Gaussian SSM (a, b, q, r by maximum likelihood) are "
                  f"trained on {cfg.T} observations and forecast the next {cfg.horizon}; "
                  f"{cfg.repeats} independent sequences. The GPSSM's forecasts sample its "
                  "approximating process (1,000 trajectories). Its states' q(x) is a Markov "
                  "chain; the same GPSSM with a mean-field q(x) is fitted alongside.")
    errors: dict[str, list[np.ndarray]] = {"GPSSM": [], "linear SSM": []}
    nlpd: dict[str, list[np.ndarray]] = {"GPSSM": [], "linear SSM": []}
    # the Markov q(x) (the model's default) against the mean-field q(x), per sequence:
    # bound, fitted process noise, transition RMSE and 1-step forecast error
    by_q: dict[str, list[tuple[float, float, float, float]]] = {"Markov": [], "mean-field": []}
    first: tuple[GPSSM, np.ndarray, np.ndarray] | None = None
    for rep in range(cfg.repeats):
        states, Y = system.simulate(cfg.T + cfg.horizon, seed=rep)
        train, future = Y[: cfg.T], Y[cfg.T:, 0]
        lo, hi = np.quantile(states[: cfg.T - 1], [0.05, 0.95])
        grid = np.linspace(lo, hi, 100)[:, None]
        for name in by_q:
            candidate = GPSSM(train, state_dim=1, inducing_points=cfg.ssm_M, emission=[[1.0]],
                              markov=name == "Markov")
            candidate.fit(maxiter=cfg.ssm_maxiter, progress=False)
            f_rmse = _transition_error(candidate.transition(grid), system.f(grid[:, 0]))[0]
            f_mean, f_var, _ = candidate.forecast(cfg.horizon, num_samples=1000, seed=rep)
            by_q[name].append((candidate.log_marginal_likelihood(),
                               float(candidate.process_noise[0]), f_rmse,
                               float(abs(f_mean[0, 0] - future[0]))))
            if name == "Markov":
                model, mean, var = candidate, f_mean, f_var
        lin_mean, lin_var = linear_forecast(fit_linear_ssm(train, cfg.linear_iterations), train, cfg.horizon)
        for key, (m, v) in (("GPSSM", (mean[:, 0], var[:, 0])), ("linear SSM", (lin_mean, lin_var))):
            errors[key].append((m - future) ** 2)
            nlpd[key].append(gaussian_nll(future, m, v))
        if first is None:
            first = (model, states[: cfg.T], train)
    table = Table(f"{system.name}: k-step forecasts (mean over {cfg.repeats} sequences)",
                  ["k", "GPSSM RMSE", "linear RMSE", "GPSSM NLPD", "linear NLPD"])
    rmse = {k: np.sqrt(np.mean(v, 0)) for k, v in errors.items()}
    mean_nlpd = {k: np.mean(v, 0) for k, v in nlpd.items()}
    for k in range(cfg.horizon):
        table.add(k + 1, float(rmse["GPSSM"][k]), float(rmse["linear SSM"][k]),
                  float(mean_nlpd["GPSSM"][k]), float(mean_nlpd["linear SSM"][k]))
    sec.tables.append(table)
    sec.files.append(table.write_csv(out / f"gpssm_{system.name}.csv"))
    wins = int(np.sum(rmse["GPSSM"] < rmse["linear SSM"]))
    transition_rmse = [row[2] for row in by_q["Markov"]]
    sec.findings += [
        f"transition RMSE over the visited states (5–95% quantiles): "
        f"{np.mean(transition_rmse):.3f} (mean over sequences; range "
        f"{min(transition_rmse):.3f}–{max(transition_rmse):.3f})",
        f"GPSSM forecast RMSE below the linear model's at {wins} of {cfg.horizon} horizons; "
        f"1-step {rmse['GPSSM'][0]:.3f} vs {rmse['linear SSM'][0]:.3f}, "
        f"{cfg.horizon}-step {rmse['GPSSM'][-1]:.3f} vs {rmse['linear SSM'][-1]:.3f}; "
        f"mean NLPD {np.mean(mean_nlpd['GPSSM']):.3f} vs {np.mean(mean_nlpd['linear SSM']):.3f}",
    ]
    q_table = Table(f"{system.name}: the states' q(x), Markov (default) or mean-field (mean over "
                    f"{cfg.repeats} sequences; true process noise {system.q})",
                    ["q(x)", "bound", "process noise", "transition RMSE", "1-step |error|"])
    summary = {name: np.mean(np.array(rows), 0) for name, rows in by_q.items()}
    for name, row in summary.items():
        q_table.add(name, *(float(v) for v in row))
    sec.tables.append(q_table)
    sec.files.append(q_table.write_csv(out / f"gpssm_{system.name}_q.csv"))
    better = sum(a[0] > b[0] for a, b in zip(by_q["Markov"], by_q["mean-field"]))
    sec.findings.append(
        f"Markov q(x): a higher bound on {better} of {cfg.repeats} sequences (by "
        f"{summary['Markov'][0] - summary['mean-field'][0]:.1f} nats on average); fitted process "
        f"noise {summary['Markov'][1]:.3f} vs {summary['mean-field'][1]:.3f} with mean-field "
        f"q(x) (true {system.q}); transition RMSE {summary['Markov'][2]:.3f} vs "
        f"{summary['mean-field'][2]:.3f}")
    assert first is not None  # cfg.repeats ≥ 1 sequences
    samples = first[0].sample_posterior(cfg.gibbs_samples, burn_in=cfg.gibbs_burn_in,
                                        particles=cfg.gibbs_particles, seed=0, progress=False)
    lo, hi = np.quantile(first[1][:-1], [0.05, 0.95])
    grid = np.linspace(lo, hi, 100)[:, None]
    truth = system.f(grid[:, 0])
    summary_f = []
    for name, posterior in (("variational", first[0].transition(grid)),
                            ("particle Gibbs", samples.transition(grid))):
        f_rmse, inside = _transition_error(posterior, truth)
        summary_f.append(f"{name} RMSE {f_rmse:.3f}, true f inside ±2σ of f at {inside:.0%} of "
                         "the grid")
    sec.findings.append(
        f"first sequence, the transition's posterior with the fitted hyperparameters: "
        f"{'; '.join(summary_f)} (particle Gibbs: {cfg.gibbs_samples} draws after "
        f"{cfg.gibbs_burn_in}, {cfg.gibbs_particles} particles, {samples.acceptance:.0%} of the "
        f"states renewed per sweep, effective sample size {samples.effective_sample_size[0]:.0f}"
        f" for the states' mean)")
    sec.files.append(_transition_figure(out / f"gpssm_{system.name}.png", system, *first, rmse,
                                        samples))
    return sec


def _transition_error(posterior: tuple[np.ndarray, np.ndarray], truth: np.ndarray
                      ) -> tuple[float, float]:
    """(RMSE of the mean, fraction of points with the truth inside ±2σ) of a transition's
    posterior (mean, variance [N, 1]) against the true f [N]."""
    err = posterior[0][:, 0] - truth
    return float(np.sqrt(np.mean(err**2))), float(np.mean(np.abs(err) < 2 * np.sqrt(posterior[1][:, 0])))


def _transition_figure(path: Path, system: System, model: GPSSM, states: np.ndarray,
                       Y: np.ndarray, rmse: dict[str, np.ndarray],
                       samples: PosteriorSamples) -> Path:
    fig, axes = new_figure(1, 2, (10, 3.8))
    ax = axes[0, 0]
    lo, hi = states.min() - 0.3, states.max() + 0.3
    grid = np.linspace(lo, hi, 200)[:, None]
    mean, var = model.transition(grid)
    band = 2 * np.sqrt(var[:, 0] + model.process_noise[0])
    ax.plot(Y[:-1, 0], Y[1:, 0], ".", color="0.7", ms=3, label="(y_t, y_t+1)")
    ax.plot(model.state_mean[:-1, 0], model.state_mean[1:, 0], ".", color="C2", ms=3,
            label="(μ_t, μ_t+1)")
    ax.plot(grid[:, 0], system.f(grid[:, 0]), "k--", lw=1.2, label="true f")
    ax.plot(grid[:, 0], mean[:, 0], color="C0", lw=1.5, label="learned f")
    ax.fill_between(grid[:, 0], mean[:, 0] - band, mean[:, 0] + band, color="C0", alpha=0.2,
                    label="±2σ of x_t+1")
    mean, var = samples.transition(grid)
    band = 2 * np.sqrt(var[:, 0] + model.process_noise[0])
    ax.plot(grid[:, 0], mean[:, 0], color="C1", lw=1.2, label="particle Gibbs f")
    for sign in (-1, 1):
        ax.plot(grid[:, 0], mean[:, 0] + sign * band, color="C1", lw=0.8, ls=":",
                label="±2σ (Gibbs)" if sign > 0 else None)
    Z = model.inducing_points[:, 0]
    Z = Z[(Z >= lo) & (Z <= hi)]  # inducing inputs that wandered off the data are not shown
    ax.plot(Z, np.full_like(Z, ax.get_ylim()[0]), "|", color="C3", ms=10, mew=2, label="Z")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("x_t")
    ax.set_ylabel("x_t+1")
    ax.legend(fontsize=7)
    ax.set_title(f"{system.name}: learned transition (first sequence)", fontsize=9)
    ax = axes[0, 1]
    k = np.arange(1, rmse["GPSSM"].shape[0] + 1)
    for name, values in rmse.items():
        ax.plot(k, values, "o-", label=name)
    ax.set_xlabel("forecast horizon k")
    ax.set_ylabel("RMSE of y")
    ax.legend(fontsize=8)
    ax.set_title("k-step forecast error", fontsize=9)
    return save(fig, path)


def missing_data(data_dir: Path, quick: bool = False) -> Missing:
    """The MNIST file of section 2 when it is missing from `data_dir`."""
    return {"GP-LVM on MNIST (section 2)": missing_files(Path(data_dir) / "mnist", ["mnist.npz"])}


def run(out: Path, quick: bool = False, data_dir: Path | None = None,
        log: Callable[[str], None] | None = print) -> list[Path]:
    """Run every section into `out` (results.md, CSV tables, figures); returns the files.
    `data_dir`: the data folder (None: `shared.datafolder.default_data_dir()`)."""
    cfg = QUICK if quick else FULL
    data_dir = data_folder(data_dir)
    Y, X, labels = three_phase(cfg.synthetic_n)
    synthetic = lambda: gplvm_section(  # noqa: E731
        out, cfg, "gplvm-three-phase", "1. Bayesian GP-LVM: three-phase synthetic data",
        f"{cfg.synthetic_n} points in three clusters of a 2-D latent space mapped to 12 "
        f"outputs by a random tanh network (noise sd 0.05); GP-LVM with a {cfg.latent_dim}-D "
        f"latent space, SE-ARD kernel, M = {cfg.M}, PCA start, L-BFGS-B ≤ {cfg.maxiter} "
        "iterations.", Y, labels, X)
    steps: list[tuple[Callable[[], Section], int]] = [(synthetic, 1), (lambda: _mnist(out, cfg,
                                                                                 data_dir), 2)]
    steps += [(partial(gpssm_section, out, cfg, s), 1) for s in SYSTEMS]
    mode = "quick" if quick else "full"
    return run_sections(out, "Random-input GPs: the Bayesian GP-LVM and the GPSSM", mode,
                        steps, log)


def _mnist(out: Path, cfg: Config, data_dir: Path) -> Section:
    folder = data_dir / "mnist"
    title = "2. Bayesian GP-LVM: MNIST digits"
    missing = missing_files(folder, ["mnist.npz"])
    if missing:
        sec = Section("gplvm-mnist", title, "Needs mnist/mnist.npz in the data folder.")
        sec.skipped = skipped_for_data(data_dir, missing)
        return sec
    Y, labels = mnist_digits(folder, cfg.mnist_n)
    return gplvm_section(out, cfg, "gplvm-mnist", title,
                         f"{cfg.mnist_n} training images (seeded), pixels scaled to [0, 1]; "
                         f"GP-LVM with a {cfg.latent_dim}-D latent space, SE-ARD, M = {cfg.M}, "
                         f"L-BFGS-B ≤ {cfg.maxiter} iterations; colours are the digit labels "
                         "(not used in fitting).", Y, labels, None)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The experiment's options (on `parser`, e.g. a CLI subparser, or a new parser)."""
    return experiment_parser(parser, "sparsegp experiment randominputs", __doc__,
                             "randominputs-results", "reduced sizes (about a minute)",
                             "mnist/ (optional)")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 without MNIST: the other
    sections need no data)."""
    return experiment_main(build_parser, run, argv, missing_data)


if __name__ == "__main__":
    raise SystemExit(main())
