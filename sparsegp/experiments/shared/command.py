"""The command line of an experiment: the options every experiment takes (--out, --quick,
--data-dir), and running it after judging its data (the exit status of docs/data.md)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ...diagnostics.convergence import ConvergenceWarning
from ...runtime.shown_warnings import on_shown_warnings
from .datafolder import (
    DATA_DIR_VARIABLE,
    DATA_DOCS,
    MISSING_DATA_STATUS,
    Missing,
    data_dir_help,
    data_folder,
    data_sources,
    describe_missing,
    how_to_get_data,
)


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


#: What the `ConvergenceWarning`s of a fit that ran to its budget say (`limit_message`):
#: "stopped at its iteration limit", "... round limit", "ran its budget of 8 epochs".
BUDGET_WORDS = re.compile(r"stopped at its (iteration |round )?limit|limit of objective "
                          r"evaluations|ran its budget of")


@contextmanager
def budgets_summarised(command: str, budget_option: str | None = None) -> Iterator[None]:
    """The experiment's fits run to the budgets its protocol sets (iterations, epochs, Adam
    steps); a `ConvergenceWarning` that one stopped there advises a larger `maxiter=` in code
    the user did not write. Inside, those warnings are counted instead of shown (under the
    user's filters: "error" still raises, "ignore" hides) and one line on standard error
    after the run says how many fits, of which models, and what the user can change:
    `budget_option` (e.g. "--maxiter N") where the experiment has one. Every other warning is
    shown as before."""
    caught: list[str] = []

    def withheld(message: Warning | str, category: type[Warning]) -> bool:
        if issubclass(category, ConvergenceWarning) and BUDGET_WORDS.search(str(message)):
            caught.append(str(message))
            return False
        return True

    with on_shown_warnings(withheld):
        try:
            yield
        finally:
            if caught:
                print(budget_summary(command, caught, budget_option), file=sys.stderr)


def budget_summary(command: str, messages: list[str], budget_option: str | None) -> str:
    """The one line that stands for the `ConvergenceWarning`s `messages` of an experiment's
    fits: how many, by model ("BayesianGPLVM 1, GPSSM 1"), and what to change."""
    by_model: dict[str, int] = {}
    for text in messages:
        name = re.match(r"(\w+)\.fit\b", text)
        key = name.group(1) if name else "other"
        by_model[key] = by_model.get(key, 0) + 1
    counts = ", ".join(f"{name} {n}" for name, n in by_model.items())
    change = (f"{budget_option} sets it" if budget_option is not None else
              "the budgets are part of its protocol (--quick's are shorter)")
    fits = "fit" if len(messages) == 1 else "fits"
    return (f"{command}: {len(messages)} {fits} ran to the budget the experiment sets "
            f"(iterations, rounds or epochs) before the optimiser's own convergence test was "
            f"met ({counts}); the results are those of the budget as set, and {change}")


def run_with_data(command: str, given: Path | None, needs: Callable[[Path], Missing],
                  data_free: bool, run: Callable[[Path], object],
                  budget_option: str | None = None) -> int:
    """Run an experiment from the command line and return its exit status, judging its data
    first (docs/data.md, "Missing data and the exit status"):

    * `given` (`--data-dir`) names no folder: an error, nothing runs, status 2;
    * every part asked for needs files that are missing (`needs(data_dir)`: part -> missing
      files, for the parts asked for) and nothing runs without data (`data_free` false: no
      synthetic part, or one part was asked for by name): the parts and their missing files
      are listed on standard error, nothing runs, status 2;
    * otherwise `run(data_dir)`: the parts whose files are missing are skipped (results.md says
      so), listed on standard error after the run, and the status is 0. The fits that ran to
      the experiment's budgets are counted in one line, not warned about one by one
      (`budgets_summarised`; `budget_option`: the experiment's option that sets them)."""
    data_dir = data_folder(given).absolute()
    origin = ("given by --data-dir" if given is not None else
              f"from ${DATA_DIR_VARIABLE}" if os.environ.get(DATA_DIR_VARIABLE) else
              "the default: the user cache folder")
    if given is not None and not data_dir.is_dir():
        print(f"{command}: error: --data-dir {data_dir}: no such folder. Give the folder that "
              f"holds the data files; where to get them: {DATA_DOCS}.", file=sys.stderr)
        return MISSING_DATA_STATUS
    wanted = needs(data_dir)
    missing = {part: files for part, files in wanted.items() if files}
    lines = [f"  {part}: {'; '.join(describe_missing(data_dir, files))}"
             for part, files in missing.items()]
    lines += [f"  {text}" for text in
              data_sources(data_dir, [f for files in missing.values() for f in files])]
    where = f"in {data_dir} ({origin}{'' if data_dir.is_dir() else '; no such folder'})"
    if missing and len(missing) == len(wanted) and not data_free:
        print("\n".join([f"{command}: nothing was run: the data files it needs are not {where}:",
                         *lines, how_to_get_data()]), file=sys.stderr)
        return MISSING_DATA_STATUS
    with budgets_summarised(command, budget_option):
        run(data_dir)
    if missing:
        print("\n".join([f"{command}: skipped for missing data: {', '.join(missing)}; these "
                         f"files are not {where}:", *lines, how_to_get_data()]), file=sys.stderr)
    return 0


def experiment_main(build_parser: Callable[[], argparse.ArgumentParser],
                    run: Callable[..., Any], argv: Sequence[str] | None = None,
                    needs: Callable[[Path, bool], Missing] | None = None) -> int:
    """The command-line entry of an experiment whose every part is run (some need no data):
    parse --out, --quick, --data-dir and run (`run_with_data`; `needs(data_dir, quick)`:
    the parts that read data files -> the files missing)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_with_data(parser.prog, args.data_dir,
                         lambda d: needs(d, args.quick) if needs is not None else {}, True,
                         lambda d: run(args.out, quick=args.quick, data_dir=d))
