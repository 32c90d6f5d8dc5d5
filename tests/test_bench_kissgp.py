"""`sparsegp bench kissgp` at small sizes: a row per case and set-up; the library's estimate
of log p(y) agrees with the dense evaluation of the same interpolated model."""

from __future__ import annotations

import math

from sparsegp.benchmarking.kissgp import QUICK_CASES, SETUPS, main


def test_quick_run_gives_a_row_per_case_and_setup(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # tiny operations: one thread per worker
    out = tmp_path / "kiss.md"
    assert main(["--quick", "--out", str(out)]) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("| 1,000 ")]
    assert len(rows) == len(QUICK_CASES) * len(SETUPS)
    values = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        if "skipped" in cells[4]:  # GPyTorch absent
            assert cells[3] == "gpytorch"
            continue
        seconds, ratio, value = float(cells[4]), float(cells[5]), float(cells[6])
        assert seconds > 0 and ratio > 0 and math.isfinite(value)
        values[(cells[1], cells[3])] = value
    for D in ("1", "2"):
        # measured: within 0.3% (10 probes, noise 0.01)
        assert abs(values[(D, "sparsegp")] - values[(D, "dense")]) < 0.01 * abs(values[(D, "dense")])
