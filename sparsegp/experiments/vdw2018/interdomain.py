"""`sparsegp experiment vdw2018-interdomain`: van der Wilk (2018), §4.5 — inter-domain inducing
variables made of sums of deltas, u_m = Σ_c w_mc f(z_mc), on kin40k.

Three analyses, each a section of results.md with a CSV table and a figure:
1. free hyperparameters: VFE with M inducing variables of C deltas each, every parameter fitted
   by L-BFGS-B; test RMSE, NLPP, the bound (−F/N) and the fitted noise against M for each C;
2. fixed hyperparameters (§4.5.2): the kernel and noise of a large-M VFE model held fixed, only
   the deltas and their weights fitted;
3. compression (§4.5.3): the floats a fitted model stores, M + M² + M·C·(D + 1) (mean and
   covariance of q(u), and the deltas with their weights), against its test RMSE.
C = 1 is ordinary inducing points. Seeds are fixed (k-means++ centres, cluster members as the
extra deltas), so a run is reproducible. `--quick` runs reduced sizes in well under 2 minutes.
Data: DATA_DIR/kin40k (docs/data.md); without them nothing is run (exit status 2).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ...features import SumOfDeltas
from ...models import SGPR
from ..shared.command import experiment_parser, run_with_data
from ..shared.data import KIN40K_FILES, read_kin40k, seeded_rows
from ..shared.datafolder import Missing, data_folder, missing_files, skipped_for_data
from ..shared.fitting import AS_GIVEN, copy_kernel, quiet_fit
from ..shared.fitting import se_kernel as se
from ..shared.metrics import predictive_scores
from ..shared.plotting import new_figure, save
from ..shared.sections import Section, run_sections
from ..shared.tables import Table

FILES = KIN40K_FILES
COLUMNS = ["M", "C", "test RMSE", "test NLPP", "bound −F/N", "noise variance", "stored floats",
           "iterations", "seconds"]


@dataclass(frozen=True)
class Config:
    """Sizes and budgets (`FULL` or `QUICK`)."""

    M: tuple[int, ...] = (5, 10, 20, 50, 100, 200)
    C: tuple[int, ...] = (1, 2, 5, 10, 20)
    train: int | None = None  # None: all 10000 training points
    test: int | None = None  # None: all 30000 test points
    maxiter: int = 500  # L-BFGS-B iterations per fit (M·C·(D + 1) parameters: ~1 h in all)
    reference_M: int = 1000  # the large-M model whose hyperparameters §4.5.2 fixes
    reference_maxiter: int = 300


FULL = Config()
QUICK = Config(M=(5, 20), C=(1, 5), train=1000, test=2000, maxiter=80, reference_M=100,
               reference_maxiter=60)

Data = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def missing_data(data_dir: Path) -> Missing:
    """The kin40k files missing from `data_dir` (the only part: "kin40k")."""
    return {"kin40k": missing_files(Path(data_dir) / "kin40k", FILES)}


def load_kin40k(folder: Path, cfg: Config) -> Data:
    """(X, y, Xs, ys) from the kin40k files in `folder`, subsampled (seeded) as `cfg` says."""
    X, y, Xs, ys = read_kin40k(folder)
    rng = np.random.default_rng(0)
    keep = seeded_rows(X.shape[0], cfg.train, rng)
    keep_test = seeded_rows(Xs.shape[0], cfg.test, rng)
    X, y, Xs, ys = X[keep], y[keep], Xs[keep_test], ys[keep_test]
    return X, y.reshape(-1), Xs, ys.reshape(-1)


def stored_floats(M: int, C: int, D: int) -> int:
    """Floats a fitted model of M inducing variables with C deltas each keeps: q(u)'s mean and
    covariance, and the deltas with their weights."""
    return M + M * M + M * C * (D + 1)


def _fit_grid(data: Data, cfg: Config, title: str, fixed: SGPR | None) -> Table:
    X, y, Xs, ys = data
    table = Table(title, COLUMNS)
    for C in cfg.C:
        for M in cfg.M:
            feature = SumOfDeltas.from_data(X, M, num_deltas=C, seed=0)
            if fixed is None:
                model = SGPR(X, y, kernel=se(ard=True), inducing_points=feature, **AS_GIVEN)
            else:
                model = SGPR(X, y, kernel=copy_kernel(fixed), inducing_points=feature,
                             noise_variance=fixed.noise_variance, **AS_GIVEN)
                model.freeze("kernel.lengthscale", "kernel.variance", "noise_variance")
            result = quiet_fit(model, cfg.maxiter)
            nlpp, _, rmse = predictive_scores(model, Xs, ys)
            table.add(M, C, rmse, nlpp, -model.log_marginal_likelihood() / X.shape[0],
                      model.noise_variance, stored_floats(M, C, X.shape[1]), result.iterations,
                      result.seconds)
    return table


def _by_c(table: Table, column: str) -> dict[int, tuple[list[int], list[float]]]:
    out: dict[int, tuple[list[int], list[float]]] = {}
    for row in table.rows:
        M, C = row[0], row[1]
        out.setdefault(C, ([], []))
        out[C][0].append(M)
        out[C][1].append(row[table.columns.index(column)])
    return out


def cfg_M(table: Table) -> list[int]:
    """The values of M in a table, in order."""
    return sorted(set(table.column("M")))


def _plot(table: Table, columns: Sequence[str], path: Path, title: str) -> Path:
    fig, axes = new_figure(1, len(columns), (4.2 * len(columns), 3.6))
    for ax, column in zip(axes[0], columns):
        for C, (Ms, values) in sorted(_by_c(table, column).items()):
            ax.plot(Ms, values, "o-", label=f"C = {C}" + (" (points)" if C == 1 else ""))
        ax.set_xscale("log")
        ax.set_xticks(list(cfg_M(table)), [str(m) for m in cfg_M(table)])
        ax.minorticks_off()
        ax.set_xlabel("inducing variables M")
        ax.set_title(column, fontsize=10)
        if column == "noise variance":
            ax.set_yscale("log")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(title)
    return save(fig, path)


def _improvement_findings(table: Table, what: str) -> list[str]:
    """How the RMSE and the bound change from C = 1 to the largest C, M by M."""
    rmse, bound = _by_c(table, "test RMSE"), _by_c(table, "bound −F/N")
    c_lo, c_hi = min(rmse), max(rmse)
    findings = []
    for Ms, r_lo, r_hi, b_lo, b_hi in zip(rmse[c_lo][0], rmse[c_lo][1], rmse[c_hi][1],
                                          bound[c_lo][1], bound[c_hi][1]):
        findings.append(
            f"{what}, M = {Ms}: C = {c_hi} deltas give test RMSE {r_hi:.4f} against {r_lo:.4f} "
            f"for inducing points ({100 * (r_hi - r_lo) / r_lo:+.1f}%), bound −F/N {b_hi:.4f} "
            f"against {b_lo:.4f} ({'better' if b_hi < b_lo else 'worse'})")
    return findings


def free_hyperparameters(out: Path, cfg: Config, data: Data) -> Section:
    sec = Section("free", "1. Sums of deltas, all parameters fitted",
                  "VFE (Titsias 2009) on kin40k with M inducing variables u_m = Σ_c w_mc f(z_mc) of "
                  "C deltas each (C = 1: inducing points), SE-ARD kernel, every parameter fitted "
                  f"(L-BFGS-B, ≤ {cfg.maxiter} iterations) from the data-based start (k-means++ "
                  "centres; the other deltas at points of each centre's cluster; weights 1/C). "
                  "NLPP is the mean negative log predictive density of the test targets; "
                  "−F/N is minus the bound per training point (lower is better).")
    table = _fit_grid(data, cfg, "Free hyperparameters", None)
    sec.tables.append(table)
    sec.files += [table.write_csv(out / "free.csv"),
                  _plot(table, ["test RMSE", "test NLPP", "bound −F/N", "noise variance"],
                        out / "free.png", "kin40k, VFE, all parameters fitted")]
    sec.findings += _improvement_findings(table, "free hyperparameters")
    return sec


def fixed_hyperparameters(out: Path, cfg: Config, data: Data) -> tuple[Section, Table]:
    X, y, Xs, ys = data
    sec = Section("fixed", "2. Sums of deltas, hyperparameters fixed (§4.5.2)",
                  f"The kernel and noise of a VFE model with {cfg.reference_M} inducing points "
                  f"(≤ {cfg.reference_maxiter} iterations) are held fixed; only the deltas and "
                  "their weights are fitted, so differences come from the inducing variables "
                  "alone.")
    reference = SGPR(X, y, kernel=se(ard=True), inducing_points=min(cfg.reference_M, X.shape[0]),
                     **AS_GIVEN)
    quiet_fit(reference, cfg.reference_maxiter)
    nlpp, _, rmse = predictive_scores(reference, Xs, ys)
    sec.description += (f" Reference model: test RMSE {rmse:.4f}, NLPP {nlpp:.4f}, noise "
                        f"{reference.noise_variance:.4g}.")
    table = _fit_grid(data, cfg, "Fixed hyperparameters", reference)
    sec.tables.append(table)
    sec.files += [table.write_csv(out / "fixed.csv"),
                  _plot(table, ["test RMSE", "test NLPP", "bound −F/N"], out / "fixed.png",
                        f"kin40k, VFE, hyperparameters of an M = {cfg.reference_M} model")]
    sec.findings += _improvement_findings(table, "fixed hyperparameters")
    return sec, table


def compression(out: Path, D: int, free: Table, fixed: Table) -> Section:
    sec = Section("compression", "3. Compression (§4.5.3)",
                  "Test RMSE against the floats a fitted model stores, M + M² + M·C·(D + 1). A "
                  "feature type compresses the posterior better when its curve lies below the "
                  "inducing points' (C = 1) at the same storage.")
    fig, axes = new_figure(1, 2, (9, 3.8), sharey=True)
    for ax, (name, table) in zip(axes[0], (("free", free), ("fixed", fixed))):
        floats, rmse = _by_c(table, "stored floats"), _by_c(table, "test RMSE")
        for C in sorted(floats):
            ax.plot(floats[C][1], rmse[C][1], "o-", label=f"C = {C}")
        ax.set_xscale("log")
        ax.set_xlabel("stored floats")
        ax.set_title(f"{name} hyperparameters", fontsize=10)
    axes[0, 0].set_ylabel("test RMSE")
    axes[0, 0].legend(fontsize=8)
    sec.files.append(save(fig, out / "compression.png"))
    for name, table in (("free", free), ("fixed", fixed)):
        sec.findings.append(f"{name} hyperparameters: {_compression_finding(table)}")
    return sec


def _compression_finding(table: Table) -> str:
    """Delta models against inducing points at the same storage: the points' RMSE interpolated
    (linearly in log floats) between the inducing-point models around each delta model."""
    points = sorted((r[6], r[2]) for r in table.rows if r[1] == 1)
    log_f, rmse = np.log([f for f, _ in points]), np.array([r for _, r in points])
    gains = [(row[2] - np.interp(math.log(row[6]), log_f, rmse)) / np.interp(
        math.log(row[6]), log_f, rmse) for row in table.rows
        if row[1] > 1 and points[0][0] <= row[6] <= points[-1][0]]
    if not gains:
        return "no delta model stores an amount the inducing-point models span"
    better = sum(g < 0 for g in gains)
    return (f"{better} of {len(gains)} delta models (those within the storage range of the "
            f"inducing-point models) have a lower test RMSE than inducing points storing as "
            f"many floats (interpolated); median change {100 * float(np.median(gains)):+.1f}%, "
            f"best {100 * min(gains):+.1f}%")


def run(out_dir: str | Path = "vdw2018-interdomain-results", quick: bool = False,
        data_dir: str | Path | None = None, data: Data | None = None,
        log: Callable[[str], None] | None = print) -> list[Path]:
    """Run the three analyses on kin40k (from `data_dir`, or the arrays `data`); return the
    files written. Without the data the sections are skipped with the reason."""
    out = Path(out_dir)
    cfg = QUICK if quick else FULL
    root = data_folder(data_dir)
    folder = root / "kin40k"
    missing = missing_data(root)["kin40k"]
    if data is None and missing:
        def skipped() -> Section:
            sec = Section("kin40k", "kin40k", "The three analyses need kin40k.")
            sec.skipped = skipped_for_data(root, missing)
            return sec
        steps: list[tuple[Callable[[], Section], int]] = [(skipped, 1)]
    else:
        loaded: list[Data] = [data] if data is not None else []
        tables: dict[str, Table] = {}

        def get() -> Data:
            if not loaded:
                loaded.append(load_kin40k(folder, cfg))
            return loaded[0]

        def first() -> Section:
            sec = free_hyperparameters(out, cfg, get())
            tables["free"] = sec.tables[0]
            return sec

        def second() -> Section:
            sec, tables["fixed"] = fixed_hyperparameters(out, cfg, get())
            return sec

        threads = torch.get_num_threads()
        steps = [(first, threads), (second, threads),
                 (lambda: compression(out, get()[0].shape[1], tables["free"], tables["fixed"]), 1)]
    mode = "quick (reduced sizes)" if quick else "full"
    return run_sections(out, "van der Wilk (2018) §4.5: inter-domain sums of deltas on kin40k",
                        mode, steps, log)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The experiment's options (on `parser`, e.g. a CLI subparser, or a new parser)."""
    return experiment_parser(parser, "sparsegp experiment vdw2018-interdomain", __doc__,
                             "vdw2018-interdomain-results", "reduced sizes (well under 2 minutes)",
                             "kin40k/")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (2 when kin40k is missing)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_with_data(parser.prog, args.data_dir, missing_data, False,
                         lambda d: run(args.out, quick=args.quick, data_dir=d))


if __name__ == "__main__":
    raise SystemExit(main())
