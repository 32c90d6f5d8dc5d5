"""`sparsegp bench startup`: its table, its failure message, and the command line naming it."""

from __future__ import annotations

import pytest

from sparsegp.benchmarking import startup
from sparsegp.cli import build_parser


def test_table_marks_each_case_against_its_target():
    times = {name: [0.5, 0.7, 0.6] for name, _, _ in startup.CASES}
    times["sparsegp --help"] = [2.0, 1.9, 2.1]
    rows = startup.table(times).splitlines()[2:]
    by_name = {row.split(" | ")[0].lstrip("| "): row for row in rows}
    assert set(by_name) == {name for name, _, _ in startup.CASES}
    assert by_name["import sparsegp"].endswith("| 0.600 | 0.500 | 1.0 | yes |")
    assert by_name["sparsegp --help"].endswith("| 2.000 | 1.900 | 1.5 | NO |")
    assert by_name["python -c pass"].endswith("| — | — |")


def test_a_case_that_fails_is_reported_not_timed():
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        startup.launch("1 / 0")


def test_every_case_runs_and_the_command_line_knows_the_benchmark(tmp_path, capsys):
    out = tmp_path / "startup.md"
    assert startup.main(["--quick", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("Machine: ")
    assert all(f"| {name} |" in text for name, _, _ in startup.CASES)
    args = build_parser().parse_args(["bench", "startup", "--quick"])
    assert args.which == "startup"
