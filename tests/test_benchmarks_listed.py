"""Every benchmark is listed where a user looks: the shipped ones by `sparsegp bench --help`,
the development scripts of benchmarks/ by benchmarks/README.md."""

from __future__ import annotations

from pathlib import Path

import sparsegp.benchmarking
from sparsegp.cli import build_parser

ROOT = Path(__file__).parent.parent


def test_every_development_script_is_in_the_benchmarks_readme():
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    scripts = sorted(p.name for p in (ROOT / "benchmarks").iterdir() if p.suffix in {".py", ".sh"})
    assert scripts, "no scripts found: the test would pass vacuously"
    missing = [name for name in scripts if f"`{name}`" not in readme]
    assert not missing, f"benchmarks/README.md does not list {missing}"


def test_every_shipped_benchmark_is_a_bench_command():
    package = Path(sparsegp.benchmarking.__file__).parent
    sub = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    which = next(a for a in sub["bench"]._actions if a.dest == "which")
    modules = {p.stem for p in package.glob("*.py")} - {"__init__"}
    # helpers the benchmarks share, not benchmarks of their own
    helpers = {"naive", "fit_peers"}
    named = {"conv": "convolutional"}
    commands = {named.get(c, c) for c in which.choices}
    assert modules - helpers == commands
