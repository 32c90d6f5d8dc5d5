"""`sparsegp bench conv` at small sizes: every case and set-up gives a row of finite positive
numbers (the naive per-patch ELBO having matched the library's in its worker)."""

from __future__ import annotations

import math

from sparsegp.benchmarking.convolutional import QUICK_CASES, SETUPS, main


def test_quick_run_writes_a_row_of_finite_positive_numbers_per_case_and_setup(tmp_path, monkeypatch):
    # One thread per worker: on a loaded machine, two threads per tiny op cost far more than
    # the work itself, and no timing is asserted here.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "conv.md"
    assert main(["--quick", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("Machine: ")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "×" in line.split("|")[1]]
    assert len(rows) == len(QUICK_CASES) * len(SETUPS)
    for (side, patch, weighted, M, B), pair in zip(QUICK_CASES, zip(rows[::2], rows[1::2])):
        for setup, row in zip(SETUPS, pair):
            cells = [c.strip() for c in row.strip("|").split("|")]
            kind = "weighted" if weighted else "invariant"
            assert cells[:6] == [f"{side}×{side}", f"{patch}×{patch}", kind, str(M), str(B), setup], row
            numbers = [float(c.replace(",", "").rstrip("%")) for c in cells[6:]]
            assert len(numbers) == 6 and all(math.isfinite(x) for x in numbers), row
            seconds, per_second, ratio, gflops, fraction, memory = numbers
            assert min(seconds, per_second, ratio, gflops, fraction) > 0 and memory >= 0, row
            if setup == "sparsegp":
                assert ratio == 1.0
