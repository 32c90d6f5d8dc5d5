"""What every experiment shares: sections of results (tables, findings, figures), running
them into one results.md, quiet fitting, test metrics and the default data folder."""

from __future__ import annotations

import argparse
import math
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from ..files import write_atomically
from ..kernels import SquaredExponential
from ..likelihoods.gaussian import gaussian_log_density
from ..linalg import JitterWarning
from .tables import Table

#: The project's shared data folder (../shared/data next to the repository); `--data-dir`
#: overrides it. A user's fresh clone has none: data-driven sections are then skipped.
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data"


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


#: The experiments model y as their protocols give it (the papers' raw Snelson targets, or targets
#: the data modules standardise with the training statistics), as when their results were
#: computed: not standardised again inside the models (the models' default since then).
AS_GIVEN: dict[str, Any] = {"standardize_y": False}


def se_kernel(lengthscale: Any = None, variance: Any = None, ard: bool = False) -> SquaredExponential:
    return SquaredExponential(lengthscale=lengthscale, variance=variance, ard=ard)


def se_of(model: Any) -> SquaredExponential:
    """A model's kernel, a squared exponential in these experiments (`se_kernel`)."""
    return cast(SquaredExponential, model.kernel)


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


def run_sections(out: Path, title: str, mode: str,
                 steps: list[tuple[Callable[[], Section], int]],
                 log: Callable[[str], None] | None) -> list[Path]:
    """Run (section, torch threads) steps in order, write `results.md` with every section,
    and return the files written; each section is timed and its findings logged."""
    out.mkdir(parents=True, exist_ok=True)
    sections: list[Section] = []
    total = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JitterWarning)
        for step, threads in steps:
            torch.manual_seed(0)
            start = time.perf_counter()
            with torch_threads(threads):
                sec = step()
            sec.seconds = time.perf_counter() - start
            sections.append(sec)
            if log is not None:
                log(f"{sec.title}: {sec.skipped or f'{sec.seconds:.1f} s'}")
                for finding in sec.findings:
                    log(f"  {finding}")
    seconds = time.perf_counter() - total
    head = [f"# {title}", "", f"Mode: {mode}; total time {seconds:.1f} s. Objectives are log "
            "marginal likelihoods (or the approximation's objective) in nats.", ""]
    report = out / "results.md"
    write_atomically(report, "\n".join(head + [s.markdown() for s in sections]))
    files = [f for s in sections for f in s.files] + [report]
    if log is not None:
        log(f"{len(files)} files written to {out} in {seconds:.1f} s")
    return files


def experiment_parser(parser: argparse.ArgumentParser | None, prog: str, description: str,
                      default_out: str, quick_help: str, data: str) -> argparse.ArgumentParser:
    """The options every experiment takes: --out, --quick and --data-dir (`data` names the
    folders it reads below the data directory)."""
    p = parser or argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--out", type=output_folder, default=Path(default_out),
                   help=f"folder for the figures and tables (default: ./{default_out}); files "
                   "of an earlier run there are replaced")
    p.add_argument("--quick", action="store_true", help=quick_help)
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                   help=f"folder holding {data} (default: {DEFAULT_DATA_DIR})")
    return p


def output_folder(text: str) -> Path:
    """`--out` of an experiment: a folder; "-" (standard output) is refused, as an experiment
    writes several files (tables, figures, results.md), not one text."""
    if text.strip() == "-":
        raise argparse.ArgumentTypeError("an experiment writes a folder of files (tables, "
                                         "figures, results.md), not standard output; give a "
                                         "folder name")
    return Path(text)


def experiment_main(build_parser: Callable[[], argparse.ArgumentParser],
                    run: Callable[..., Any], argv: Any = None) -> int:
    """The command-line entry of an experiment: parse --out, --quick, --data-dir and run."""
    args = build_parser().parse_args(argv)
    run(args.out, quick=args.quick, data_dir=args.data_dir)
    return 0
