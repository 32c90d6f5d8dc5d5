"""`sparsegp experiment bauer2016`: the analyses of Bauer, van der Wilk & Rasmussen (2016),
"Understanding probabilistic sparse Gaussian process approximations", as reproducible runs.

Six experiments (see the modules `snelson`, `z_equals_x`, `synthetic`,
`pumadyn` of this package), each writing a PNG figure and a CSV table into the output folder, plus
`results.md` with every table and the findings computed from the numbers. `--quick` runs
reduced sizes (for CI). Seeds are fixed, so a run is reproducible. Experiment 6 reads
DATA_DIR/pumadyn32nm (docs/data.md); without it that experiment is skipped and the others run.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ..shared.command import experiment_parser, run_with_data
from ..shared.datafolder import data_folder
from ..shared.sections import Section, run_sections
from .config import FULL, QUICK, Config
from .pumadyn import missing_data, pumadyn
from .snelson import inducing_gain_axis, snelson_fits, upper_bound_detection
from .synthetic import gp_sample_4d
from .z_equals_x import z_at_x


def run(out_dir: str | Path = "bauer2016-results", quick: bool = False,
        data_dir: str | Path | None = None, log: Callable[[str], None] | None = print
        ) -> list[Path]:
    """Run every experiment; return the files written (figures, CSVs, results.md)."""
    out = Path(out_dir)
    cfg: Config = QUICK if quick else FULL
    data = data_folder(data_dir)
    # (experiment, torch threads): the Snelson problems are tiny and run fastest on one thread.
    steps: list[tuple[Callable[[], Section], int]] = [
        (lambda: snelson_fits(out, cfg), 1), (lambda: inducing_gain_axis(out, cfg), 1),
        (lambda: z_at_x(out, cfg), 1), (lambda: gp_sample_4d(out, cfg), torch.get_num_threads()),
        (lambda: upper_bound_detection(out, cfg), 1),
        (lambda: pumadyn(out, cfg, data), torch.get_num_threads()),
    ]
    return run_sections(out, "Bauer, van der Wilk & Rasmussen (2016) with sparsegp",
                        "quick (reduced sizes)" if quick else "full", steps, log)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The experiment's options (on `parser`, e.g. a CLI subparser, or a new parser)."""
    return experiment_parser(parser, "sparsegp experiment bauer2016", __doc__, "bauer2016-results",
                             "reduced sizes (well under a minute)", "pumadyn32nm/")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 when pumadyn-32nm is missing:
    the other experiments need no data and run)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_with_data(parser.prog, args.data_dir, missing_data, True,
                         lambda d: run(args.out, quick=args.quick, data_dir=d))


if __name__ == "__main__":
    raise SystemExit(main())
