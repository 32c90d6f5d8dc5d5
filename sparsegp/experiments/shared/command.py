"""The command line of an experiment: the options every experiment takes (--out, --quick,
--data-dir), and running it after judging its data (the exit status of docs/data.md)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
