"""`sparsegp bench compare` at small sizes: one row per case and library, missing peers skipped
with a message, finite objectives for sparsegp, the same objective in every library for the
exact GP, VFE and FITC, and a fraction of the GEMM rate where flops are counted."""

from __future__ import annotations

import math

from sparsegp.benchmarking.compare import LIBRARIES, PEERS, QUICK_CASES, _available, main


def test_quick_run_gives_a_row_per_case_and_library(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "compare.md"
    assert main(["--quick", "--device", "cpu", "--out", str(out)]) == 0
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in out.read_text().splitlines() if line.startswith("| ") and " | " in line
            and line.split("|")[1].strip() in {m for m, _, _ in QUICK_CASES}]
    expected = [(m, lib) for m, _, _ in QUICK_CASES for lib in LIBRARIES
                if lib == "sparsegp" or m in PEERS[lib]]
    assert [(r[0], r[3]) for r in rows] == expected
    for r in rows:
        if r[3] == "sparsegp" or _available(r[3]):
            assert float(r[4]) > 0 and math.isfinite(float(r[7]))
            if r[0] in {"exact", "vfe", "fitc"}:  # flops counted: a fraction of the GEMM rate
                assert r[6].endswith("%") and 0 < float(r[6][:-1]) < 1000
            else:
                assert r[6] == "—"
        else:
            assert r[4] == f"skipped: {r[3]} is not installed"
    values = {(r[0], r[3]): float(r[7]) for r in rows if "skipped" not in r[4]}
    assert {m for m, _ in values} >= {"exact", "vfe", "fitc"}
    for method in ("exact", "vfe", "fitc"):  # the same objective in every library that ran it
        for lib in ("gpytorch", "gpflow"):
            if (method, lib) in values:
                ref = values[(method, "sparsegp")]
                assert abs(values[(method, lib)] - ref) < 1e-5 * abs(ref)
