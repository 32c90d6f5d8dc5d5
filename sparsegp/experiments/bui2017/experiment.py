"""`sparsegp experiment bui2017`: the regression experiments of Bui, Yan & Turner (2017), "A
unifying framework for Gaussian process pseudo-point approximations using Power Expectation
Propagation" (JMLR 18), with VFE, Power EP (α = 0.05 … 0.8) and EP/FITC.

Parts:
* synthetic (§4.1, Fig. 3): 30 seeded GP draws of 1000 points in 5-D (half for training),
  M ∈ {5, 10, 20, 50, 100, 200, 500}; SMSE, SMLL and NLML minus those of the exact GP;
* regression (§4.2, Figs. 4, 5, 17-22): 8 UCI data sets × 20 splits (DATA_DIR/uci),
  M ∈ {5, 10, 25, 50, 100, 200}; pairwise win rates, mean ranks, per-data-set curves.
Every run (part, data set, split, M, method) is appended to OUT/runs.jsonl as soon as it
ends, failed runs too (with the error): rerun the same command to continue an interrupted
run; the report (OUT/results.md, CSV tables, PNG figures) is rebuilt from the stored rows
and says how much of the grid is complete. Budgets (full): L-BFGS-B ≤ 500 iterations on
synthetic data and ≤ 150 on UCI data (the paper: 2000 function evaluations), so that the
full grid takes about 5 + 10 hours on 2 cores with --jobs 2 (estimated from timed fits;
see grid.Config); --maxiter N gives every run N iterations instead.
`--quick`: 2 small synthetic sets and 2 UCI data sets × 2 splits, M ∈ {5, 20}, 25 iterations.
Data: DATA_DIR/uci and DATA_DIR/classification (docs/data.md). A part without its files is
skipped; `--part regression` or `--part classification` without them runs nothing (exit
status 2).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..shared.command import experiment_parser, run_with_data
from ..shared.data import missing_uci, uci_folder
from ..shared.datafolder import Missing, data_folder, skipped_for_data
from ..shared.sections import Section
from .classification import (
    ClassificationConfig,
    classification_config,
    classification_tasks,
    missing_classification,
)
from .classification_report import classification_section
from .grid import EXACT, FULL, METHODS, QUICK, Config
from .report import pending_text, regression_section, synthetic_section, write_report
from .runs import Log, Task, execute, stderr_log
from .store import Store

PARTS = ("synthetic", "regression", "classification")


def synthetic_tasks(cfg: Config) -> list[Task]:
    """Per data set: the exact GP, then every method at every M (in that order)."""
    n = cfg.synthetic_points // 2
    out = []
    for i in range(cfg.synthetic_sets):
        common: dict[str, Any] = dict(part="synthetic", dataset=f"gp{i:02d}", split=0,
                      maxiter=cfg.maxiter_synthetic, n_train=n, points=cfg.synthetic_points)
        out.append(Task(M=0, method=EXACT, **common))
        out += [Task(M=M, method=m.name, **common) for M in cfg.synthetic_M for m in METHODS]
    return out


def regression_tasks(cfg: Config, data_dir: Path) -> list[Task]:
    """Split by split (so that a partial run holds whole splits), data set, M and method."""
    sizes = {name: sum(1 for line in (uci_folder(data_dir, name) / "index_train_0.txt").open()
                       if line.strip()) for name in cfg.uci_sets}
    return [Task("regression", name, s, M, m.name, cfg.maxiter_uci, sizes[name])
            for s in range(cfg.splits) for name in cfg.uci_sets for M in cfg.uci_M
            for m in METHODS]


def missing_data(data_dir: Path, cfg: Config, ccfg: ClassificationConfig,
                 parts: Sequence[str] = PARTS) -> Missing:
    """Per data-reading part of `parts` (regression, classification), its files missing from
    `data_dir` for the grids `cfg` and `ccfg`."""
    found = {"regression": lambda: missing_uci(data_dir, cfg.uci_sets, cfg.splits),
             "classification": lambda: missing_classification(data_dir, ccfg.datasets)}
    return {part: [Path(f) for f in found[part]()] for part in parts if part in found}


def run(out_dir: str | Path = "bui2017-results", quick: bool = False,
        data_dir: str | Path | None = None, parts: Sequence[str] = PARTS, jobs: int = 1,
        log: Callable[[str], None] | None = print, progress: Log | None = stderr_log,
        retry_failed: bool = False, config: Config | None = None,
        classification: ClassificationConfig | None = None, report_only: bool = False
        ) -> list[Path]:
    """Run the missing runs of `parts` into `out_dir` and write the report; return its files.
    `config` replaces the FULL/QUICK grids (tests use it); `report_only` runs nothing and
    rebuilds the report from the stored rows (e.g. while a long run is under way)."""
    cfg = config or (QUICK if quick else FULL)
    out = Path(out_dir)
    data = data_folder(data_dir)
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown part(s) {sorted(unknown)}; the parts are {list(PARTS)}")
    if jobs < 1:
        raise ValueError(f"--jobs must be at least 1; got {jobs}")
    ccfg = classification or classification_config(cfg.mode)
    store = Store(out, {**cfg.identity(), **ccfg.identity()})
    start = time.perf_counter()
    missing = missing_uci(data, cfg.uci_sets, cfg.splits)
    grids: dict[str, list[Any]] = {"synthetic": synthetic_tasks(cfg),  # "classification": ClassificationTasks
             "regression": [] if missing else regression_tasks(cfg, data)}
    missing_cls = missing_classification(data, ccfg.datasets)
    grids["classification"] = [] if missing_cls else classification_tasks(ccfg, data)
    todo = [] if report_only else [t for p in PARTS if p in parts for t in grids[p]]
    ran, failed = execute(todo, store, data, jobs=jobs, progress=progress,
                          retry_failed=retry_failed)
    sections: list[Section] = []
    header = [f"Mode: {cfg.mode}; this invocation ran {ran} run(s) ({failed} failed) in "
              f"{time.perf_counter() - start:.1f} s with {jobs} process(es). Rows: {store.path.name} "
              f"(one JSON line per run; rerun the command to continue)."]
    for part in PARTS:
        rows = store.select(part)
        if part not in parts and not rows:
            continue
        if part == "regression" and missing:
            sec = Section(part, "2. UCI regression (paper §4.2)", "Reads DATA_DIR/uci/<name>/data.")
            sec.skipped = skipped_for_data(data, [Path(f) for f in missing])
            sections.append(sec)
            continue
        if part == "classification" and missing_cls:
            sec = Section(part, "3. Binary classification (paper §4.3)",
                          "Reads DATA_DIR/classification/<name>.csv.")
            sec.skipped = skipped_for_data(data, [Path(f) for f in missing_cls])
            sections.append(sec)
            continue
        if part == "classification":
            sec = classification_section(ccfg, grids[part], rows, out)
        else:
            build = synthetic_section if part == "synthetic" else regression_section
            sec = build(cfg, grids[part], rows, out)
        sections.append(sec)
        header.append(f"* {part}: {pending_text(grids[part], rows)}.")
    report = write_report(out, cfg, sections, header)
    files = [f for s in sections for f in s.files] + [report]
    if log is not None:
        for line in header:
            log(line)
        for s in sections:
            for finding in s.findings if not s.skipped else [s.skipped]:
                log(f"  {s.name}: {finding}")
        log(f"{len(files)} files written to {out}")
    return files


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The experiment's options (on `parser`, e.g. a CLI subparser, or a new parser)."""
    p = experiment_parser(parser, "sparsegp experiment bui2017", __doc__, "bui2017-results",
                          "2 small synthetic sets, 2 UCI sets × 2 splits, M ∈ {5, 20}, 25 "
                          "iterations (about a minute on one core)", "uci/")
    p.add_argument("--part", choices=[*PARTS, "all"], default="all",
                   help="which part to run (default: all)")
    p.add_argument("--jobs", type=int, default=1,
                   help="worker processes, one torch thread each (default: 1)")
    p.add_argument("--maxiter", type=int, default=None,
                   help="L-BFGS-B iterations of every run (default: 500 synthetic, 150 UCI; "
                   "--quick 25); a store keeps one setting")
    p.add_argument("--retry-failed", action="store_true",
                   help="run again the runs stored as failed (default: keep their rows)")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: rebuild the report from the stored rows")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (2 when the part `--part` names reads
    data files that are missing; with every part, the synthetic one runs and the status is 0)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    parts = PARTS if args.part == "all" else (args.part,)
    cfg = QUICK if args.quick else FULL
    if args.maxiter is not None:
        if args.maxiter < 1:
            raise ValueError(f"--maxiter must be at least 1; got {args.maxiter}")
        cfg = replace(cfg, maxiter_synthetic=args.maxiter, maxiter_uci=args.maxiter)
    ccfg = classification_config(cfg.mode)
    return run_with_data(parser.prog, args.data_dir,
                         lambda d: missing_data(d, cfg, ccfg, parts), "synthetic" in parts,
                         lambda d: run(args.out, data_dir=d, parts=parts, jobs=args.jobs,
                                       retry_failed=args.retry_failed, config=cfg,
                                       classification=ccfg, report_only=args.report_only),
                         budget_option="--maxiter N (the regression runs' iterations)")


if __name__ == "__main__":
    raise SystemExit(main())
