"""`sparsegp experiment streaming`: streaming sparse GP regression (Bui, Nguyen & Turner 2017)
against its alternatives on real streams.

Each data set arrives in batches; after each batch four models with the same M are scored on
held-out points (test RMSE, NLPD of noisy targets) and timed: the streaming model
(`SGPR.update`, which never revisits old data; VFE, and Power EP with α = 0.5), a batch SGPR
fitted on every point seen so far (the reference streaming approximates), and an SGPR fitted
on the new batch only (what forgetting the old data gives). Streams: kin40k (random order),
a UCI set (split 0, random order) and Snelson's data sorted by x (drifting inputs; scored on
the held-out points in the range seen so far and on all of them). Data: DATA_DIR/kin40k and
DATA_DIR/uci (docs/data.md); Snelson ships with the package. `--quick` runs small subsets,
few batches and few iterations in seconds.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..shared.command import experiment_main, experiment_parser
from ..shared.data import KIN40K_FILES, missing_uci
from ..shared.datafolder import Missing, data_folder, missing_files, skipped_for_data
from ..shared.plotting import new_figure, save
from ..shared.sections import Section, run_sections
from ..shared.tables import Table
from .runs import METHODS, Stream, kin40k_stream, run_stream, snelson_stream, uci_stream

UCI_NAME = "kin8nm"


@dataclass(frozen=True)
class Config:
    """Sizes and budgets (`FULL` or `QUICK`)."""

    batches: int = 10
    kin40k_batch: int = 1000
    kin40k_test: int = 5000
    uci_batch: int | None = None  # None: split 0's training rows in `batches` equal parts
    uci_test: int | None = None  # None: all of split 0's test rows
    M: int = 100
    snelson_M: int = 12
    maxiter: int = 150
    methods: tuple[str, ...] = tuple(m[0] for m in METHODS)


FULL = Config()
QUICK = Config(batches=3, kin40k_batch=100, kin40k_test=200, uci_batch=100, uci_test=200, M=15,
               snelson_M=10, maxiter=30)


def stream_section(out: Path, cfg: Config, name: str, title: str, description: str,
                   stream: Callable[[], Stream], M: int) -> Section:
    """Run one stream: table (also CSV), findings, figure."""
    sec = Section(f"streaming-{name}", title, description)
    rows = run_stream(stream(), M, cfg.maxiter, cfg.methods)
    table = Table(f"{title}: after each batch", ["batch", "seen", "method", "test",
                                                 "test points", "RMSE", "NLPD", "seconds"])
    for r in rows:
        table.add(*(r[c] for c in table.columns))
    sec.tables.append(table)
    sec.files.append(table.write_csv(out / f"{name}.csv"))
    sec.findings += _findings(rows)
    sec.files.append(_figure(out / f"{name}.png", title, rows))
    return sec


def _findings(rows: list[dict[str, Any]]) -> list[str]:
    last = max(r["batch"] for r in rows)
    texts = []
    for test in dict.fromkeys(r["test"] for r in rows):
        final = {r["method"]: r for r in rows if r["batch"] == last and r["test"] == test}
        texts.append(f"after the last batch ({test} test points): " + "; ".join(
            f"{m} RMSE {r['RMSE']:.3f}, NLPD {r['NLPD']:.3f}" for m, r in final.items()))
    seconds = {m: sum(r["seconds"] for r in rows if r["method"] == m and r["test"] == rows[0]["test"])
               for m in dict.fromkeys(r["method"] for r in rows)}
    texts.append("seconds over all batches: " + "; ".join(f"{m} {s:.1f}" for m, s in
                                                        seconds.items()))
    return texts


def _figure(path: Path, title: str, rows: list[dict[str, Any]]) -> Path:
    tests = list(dict.fromkeys(r["test"] for r in rows))
    fig, axes = new_figure(len(tests), 2, (9, 3.2 * len(tests)))
    for i, test in enumerate(tests):
        for j, score in enumerate(("RMSE", "NLPD")):
            ax = axes[i, j]
            for method in dict.fromkeys(r["method"] for r in rows):
                pts = [(r["seen"], r[score]) for r in rows
                       if r["method"] == method and r["test"] == test]
                ax.plot(*zip(*pts), "o-", ms=3, label=method)
            ax.set_xlabel("training points seen")
            ax.set_ylabel(f"test {score}")
            ax.set_title(f"{score}, {test} test points", fontsize=9)
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return save(fig, path)


def missing_data(data_dir: Path, quick: bool = False) -> Missing:
    """Per data-set stream read from `data_dir` (kin40k and the UCI set), its missing files."""
    return {"kin40k": missing_files(Path(data_dir) / "kin40k", KIN40K_FILES),
            UCI_NAME: [Path(f) for f in missing_uci(Path(data_dir), (UCI_NAME,), 1)]}


def run(out: Path, quick: bool = False, data_dir: Path | None = None,
        log: Callable[[str], None] | None = print, cfg: Config | None = None) -> list[Path]:
    """Run every stream into `out` (results.md, CSV tables, figures); returns the files.
    `cfg` overrides the sizes of `quick`; `data_dir`: the data folder (None:
    `shared.datafolder.default_data_dir()`)."""
    cfg = cfg or (QUICK if quick else FULL)
    data_dir = data_folder(data_dir)
    missing = missing_data(data_dir)
    how = (f"M = {{M}} for every model (inducing inputs by k-means++; the streaming update "
           f"re-chooses them from the old ones and the new batch), L-BFGS-B ≤ {cfg.maxiter} "
           "iterations per fit or update, the default SE kernel (a lengthscale per input), "
           "seeds fixed; the timed seconds are each fit's or update's own.")
    kb = cfg.kin40k_batch
    kin = ("kin40k", "1. kin40k, random order",
           f"{cfg.batches} batches of {kb} training points in a seeded random order, inputs and "
           f"targets standardised by the training statistics; {cfg.kin40k_test} held-out test "
           f"points. " + how.format(M=cfg.M),
           lambda: kin40k_stream(data_dir / "kin40k", cfg.batches, kb, cfg.kin40k_test), cfg.M)
    first = "" if cfg.uci_batch is None else f", {cfg.batches * cfg.uci_batch} of them"
    uci = (UCI_NAME, f"2. UCI {UCI_NAME}, random order",
           f"Split 0 of the UCI set (training rows{first} in a seeded random order, "
           f"{cfg.batches} batches; standardised by the training "
           f"statistics; {'all' if cfg.uci_test is None else cfg.uci_test} test rows). The UCI "
           "splits are for non-commercial use. " + how.format(M=cfg.M),
           lambda: uci_stream(data_dir, UCI_NAME, cfg.batches, cfg.uci_batch, cfg.uci_test),
           cfg.M)
    snel = ("snelson", "3. Snelson, sorted by x (drifting inputs)",
            f"Every 4th of the 200 points held out; the other 150 arrive sorted by x in "
            f"{cfg.batches} batches. Scored on the held-out points up to the largest x seen so "
            "far (\"seen range\") and on all 50 held-out points (\"all\"). "
            + how.format(M=cfg.snelson_M),
            lambda: snelson_stream(cfg.batches), cfg.snelson_M)
    steps: list[tuple[Callable[[], Section], int]] = []
    for name, title, description, stream, M in (kin, uci, snel):
        if missing.get(name):
            def skipped(n: str = name, t: str = title, d: str = description) -> Section:
                sec = Section(f"streaming-{n}", t, d)
                sec.skipped = skipped_for_data(data_dir, missing[n])
                return sec

            steps.append((skipped, 1))
        else:
            def section(n: str = name, t: str = title, d: str = description,
                        s: Callable[[], Stream] = stream, m: int = M) -> Section:
                return stream_section(out, cfg, n, t, d, s, m)

            steps.append((section, 1))
    return run_sections(out, "Streaming sparse GP regression against its alternatives",
                        "quick" if quick else "full", steps, log)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The experiment's options (on `parser`, e.g. a CLI subparser, or a new parser)."""
    return experiment_parser(parser, "sparsegp experiment streaming", __doc__,
                             "streaming-results", "small subsets, few batches (seconds)",
                             "kin40k/ and uci/ (optional)")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 without the data: the Snelson
    stream needs none)."""
    return experiment_main(build_parser, run, argv, missing_data)


if __name__ == "__main__":
    raise SystemExit(main())
