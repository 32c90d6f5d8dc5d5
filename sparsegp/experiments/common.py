"""What every experiment shares: sections of results (tables, findings, figures), running
them into one results.md, quiet fitting, test metrics, and where the data are: the data
folder (`--data-dir`, else $SPARSEGP_DATA_DIR, else ./data), the messages about missing files
and the exit status of a run that lacks them (docs/data.md)."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from ..kernels import SquaredExponential
from ..likelihoods.gaussian import gaussian_log_density
from ..linalg import JitterWarning
from ..runtime.files import write_atomically
from .tables import Table

#: The environment variable naming the data folder when `--data-dir` is not given.
DATA_DIR_VARIABLE = "SPARSEGP_DATA_DIR"
#: The page that lists the files each experiment reads and where to obtain them.
DATA_DOCS = "docs/data.md (https://github.com/sparsegp/sparsegp/blob/HEAD/docs/data.md)"
#: Exit status of an experiment that could run nothing of what was asked for lack of data.
MISSING_DATA_STATUS = 2
#: What the experiments' data files are missing from, by part: part name -> missing files.
Missing = Mapping[str, Sequence[Path]]


def default_data_dir() -> Path:
    """The data folder when `--data-dir` is not given: $SPARSEGP_DATA_DIR when set (and not
    empty), otherwise ./data under the current working directory; as an absolute path."""
    value = os.environ.get(DATA_DIR_VARIABLE, "")
    return (Path(value).expanduser() if value else Path("data")).absolute()


def data_folder(data_dir: str | Path | None) -> Path:
    """`data_dir` as a Path, or `default_data_dir()` when it is None."""
    return default_data_dir() if data_dir is None else Path(data_dir)


def data_dir_help(data: str) -> str:
    """The help of `--data-dir` (`data` names the folders read below it)."""
    return (f"folder holding {data} (default: ${DATA_DIR_VARIABLE} when set, otherwise ./data "
            "in the current folder); docs/data.md lists the files and where to get them")


def missing_files(folder: Path, names: Iterable[str]) -> list[Path]:
    """The files `names` that are not in `folder` (empty when all are)."""
    return [Path(folder) / name for name in names if not (Path(folder) / name).is_file()]


def describe_missing(data_dir: Path, files: Sequence[Path], limit: int = 4) -> list[str]:
    """The missing `files`, one text per folder (relative to `data_dir` where below it), at
    most `limit` names each ("kin40k_train_data.asc.gz, ... in kin40k/")."""
    groups: dict[Path, list[str]] = {}
    for f in files:
        groups.setdefault(Path(f).parent, []).append(Path(f).name)
    texts = []
    for folder, names in groups.items():
        try:
            where = f"{folder.relative_to(data_dir).as_posix()}/"
        except ValueError:
            where = f"{folder}/"
        more = f" and {len(names) - limit} more" if len(names) > limit else ""
        texts.append(f"{', '.join(names[:limit])}{more} in {where}")
    return texts


def how_to_get_data() -> str:
    """The advice that follows a list of missing files."""
    return (f"Put the files there, or point --data-dir (or the {DATA_DIR_VARIABLE} environment "
            f"variable) at the folder that holds them; where to get them: {DATA_DOCS}.")


def skipped_for_data(data_dir: Path, files: Sequence[Path]) -> str:
    """A section's `skipped` text when its data files are missing: which, where, what to do."""
    return (f"skipped: data not found in {data_dir}: {'; '.join(describe_missing(data_dir, files))}. "
            f"{how_to_get_data()}")


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


def gaussian_nll(y: Any, mean: Any, var: Any) -> np.ndarray:
    """−log N(y | mean, var) per point, as numpy (the library's Gaussian log density, negated).
    Shapes: y [N*], mean and var [N*] or scalars."""
    values = (torch.as_tensor(np.asarray(a, dtype=np.float64)) for a in (y, mean, var))
    return np.asarray(-gaussian_log_density(*values).numpy())


def clock(seconds: float) -> str:
    """Seconds as h:mm:ss (negative as 0), for progress lines and reports."""
    s = int(max(0.0, seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


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
    p.add_argument("--data-dir", type=Path, default=None, help=data_dir_help(data))
    return p


def output_folder(text: str) -> Path:
    """`--out` of an experiment: a folder; "-" (standard output) is refused, as an experiment
    writes several files (tables, figures, results.md), not one text."""
    if text.strip() == "-":
        raise argparse.ArgumentTypeError("an experiment writes a folder of files (tables, "
                                         "figures, results.md), not standard output; give a "
                                         "folder name")
    return Path(text)


def run_with_data(command: str, given: Path | None, needs: Callable[[Path], Missing],
                  data_free: bool, run: Callable[[Path], object]) -> int:
    """Run an experiment from the command line and return its exit status, judging its data
    first (docs/data.md, "Missing data and the exit status"):

    * `given` (`--data-dir`) names no folder: an error, nothing runs, status 2;
    * every part asked for needs files that are missing (`needs(data_dir)`: part -> missing
      files, for the parts asked for) and nothing runs without data (`data_free` false: no
      synthetic part, or one part was asked for by name): the parts and their missing files
      are listed on standard error, nothing runs, status 2;
    * otherwise `run(data_dir)`: the parts whose files are missing are skipped (results.md says
      so), listed on standard error after the run, and the status is 0."""
    data_dir = data_folder(given).absolute()
    origin = ("given by --data-dir" if given is not None else
              f"from ${DATA_DIR_VARIABLE}" if os.environ.get(DATA_DIR_VARIABLE) else
              "the default: ./data in the current folder")
    if given is not None and not data_dir.is_dir():
        print(f"{command}: error: --data-dir {data_dir}: no such folder. Give the folder that "
              f"holds the data files; where to get them: {DATA_DOCS}.", file=sys.stderr)
        return MISSING_DATA_STATUS
    wanted = needs(data_dir)
    missing = {part: files for part, files in wanted.items() if files}
    lines = [f"  {part}: {'; '.join(describe_missing(data_dir, files))}"
             for part, files in missing.items()]
    where = f"in {data_dir} ({origin}{'' if data_dir.is_dir() else '; no such folder'})"
    if missing and len(missing) == len(wanted) and not data_free:
        print("\n".join([f"{command}: nothing was run: the data files it needs are not {where}:",
                         *lines, how_to_get_data()]), file=sys.stderr)
        return MISSING_DATA_STATUS
    run(data_dir)
    if missing:
        print("\n".join([f"{command}: skipped for missing data: {', '.join(missing)}; these "
                         f"files are not {where}:", *lines, how_to_get_data()]), file=sys.stderr)
    return 0


def experiment_main(build_parser: Callable[[], argparse.ArgumentParser],
                    run: Callable[..., Any], argv: Any = None,
                    needs: Callable[[Path, bool], Missing] | None = None) -> int:
    """The command-line entry of an experiment whose every part is run (some need no data):
    parse --out, --quick, --data-dir and run (`run_with_data`; `needs(data_dir, quick)`:
    the parts that read data files -> the files missing)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_with_data(parser.prog, args.data_dir,
                         lambda d: needs(d, args.quick) if needs is not None else {}, True,
                         lambda d: run(args.out, quick=args.quick, data_dir=d))
