"""`sparsegp bench startup`: how long the package and the command line take to start.

Each case runs in a fresh Python process (nothing cached in the interpreter; the operating
system's file cache warm after the first round), the rounds interleaved, and reports the
median wall time from launching the process to its exit:

* `python -c pass`: the interpreter alone, the floor under every other row;
* `import sparsegp`: what every user pays (the public names load on first use);
* `sparsegp --help` and `sparsegp --version`: the command line answering without torch;
* `import sparsegp; sparsegp.SGPR`: the first model class, which imports torch and the
  model layer (what a script pays before its first fit).

The targets: `import sparsegp` ≤ 1.0 s and `sparsegp --help` ≤ 1.5 s; the table marks each
row against its target.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from .speed import bench_parser, parse_bench_args, report

#: (name, the Python code run with -c, its target in seconds or None)
CASES: list[tuple[str, str, float | None]] = [
    ("python -c pass", "pass", None),
    ("import sparsegp", "import sparsegp", 1.0),
    ("sparsegp --help", "import sys; sys.argv = ['sparsegp', '--help']\n"
                        "from sparsegp.cli import main\nmain()", 1.5),
    ("sparsegp --version", "import sys; sys.argv = ['sparsegp', '--version']\n"
                           "from sparsegp.cli import main\nmain()", 1.5),
    ("import sparsegp; sparsegp.SGPR", "import sparsegp; sparsegp.SGPR", None),
]


def launch(code: str) -> float:
    """Seconds from starting `python -c code` to its exit (its output discarded)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"`python -c {code!r}` failed: {done.stderr.strip()[-500:]}")
    return seconds


def table(times: dict[str, list[float]]) -> str:
    """The markdown table: median and fastest seconds of each case, against its target."""
    rows = ["| case | median s | fastest s | target s | met |", "|---|---|---|---|---|"]
    for name, _, target in CASES:
        median = statistics.median(times[name])
        met = "—" if target is None else ("yes" if median <= target else "NO")
        rows.append(f"| {name} | {median:.3f} | {min(times[name]):.3f} | "
                    f"{'—' if target is None else f'{target:.1f}'} | {met} |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    p = bench_parser("sparsegp bench startup", __doc__, 7)
    args = parse_bench_args(p, argv)
    repeats = 1 if args.quick else args.repeats
    if repeats < 1:
        p.error("--repeats must be at least 1")
    times: dict[str, list[float]] = {name: [] for name, _, _ in CASES}
    for _ in range(repeats + 1):  # the first round warms the file cache and is dropped
        for name, code, _ in CASES:
            times[name].append(launch(code))
    times = {name: t[1:] for name, t in times.items()}
    report(table(times), args.out)
    return 0
