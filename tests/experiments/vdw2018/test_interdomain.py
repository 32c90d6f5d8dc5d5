"""`sparsegp experiment vdw2018-interdomain`: the quick run writes every file in well under two
minutes on kin40k (when the data are in the tests' data folder), the machinery runs on any
data, and without kin40k the analyses are skipped with the reason."""

from __future__ import annotations

import csv
import math
import re

import numpy as np
import pytest

from sparsegp.cli import main
from sparsegp.experiments.vdw2018 import interdomain as vdw

from ...conftest import TEST_DATA_DIR, no_data_reason

PNG = b"\x89PNG\r\n\x1a\n"
FILES = {"free.csv", "free.png", "fixed.csv", "fixed.png", "compression.png", "results.md"}


def check_outputs(out, cfg):
    assert {f.name for f in out.iterdir()} == FILES
    for name in ("free.csv", "fixed.csv"):
        rows = list(csv.DictReader((out / name).open()))
        assert len(rows) == len(cfg.M) * len(cfg.C)
        for r in rows:
            M, C = int(r["M"]), int(r["C"])
            assert int(r["stored floats"]) == M + M * M + M * C * 9  # D = 8 (+ 1 weight)
            assert all(math.isfinite(float(r[k])) for k in ("test RMSE", "test NLPP",
                                                             "bound −F/N", "noise variance"))
            assert 0.0 < float(r["test RMSE"]) < 1.5  # kin40k's targets have unit spread
    for name in ("free.png", "fixed.png", "compression.png"):
        assert (out / name).read_bytes()[:8] == PNG and (out / name).stat().st_size > 10_000
    report = (out / "results.md").read_text()
    for title in ("## 1.", "## 2.", "## 3."):
        assert title in report
    return float(re.search(r"total time ([0-9.]+) s", report).group(1))


@pytest.mark.skipif(bool(vdw.missing_data(TEST_DATA_DIR)["kin40k"]),
                    reason=no_data_reason("kin40k/"))
def test_quick_run_on_kin40k_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "out"  # the data from SPARSEGP_DATA_DIR (tests/conftest.py)
    assert main(["experiment", "vdw2018-interdomain", "--quick", "--out", str(out)]) == 0
    log = capsys.readouterr().out
    seconds = check_outputs(out, vdw.QUICK)
    assert seconds < 120.0  # the budget for --quick on 2 cores (measured: ~6 s)
    assert "inducing points" in log and "files written" in log


def test_the_analyses_run_on_any_data_given_as_arrays(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1.7, 1.7, (300, 8))
    f = lambda A: np.sin(2 * A[:, 0]) * np.cos(A[:, 1]) + 0.5 * A[:, 2]  # noqa: E731
    Xs = rng.uniform(-1.7, 1.7, (200, 8))
    data = (X, f(X) + 0.1 * rng.normal(size=300), Xs, f(Xs) + 0.1 * rng.normal(size=200))
    files = vdw.run(tmp_path, quick=True, data=data, log=None)
    assert {p.name for p in files} == FILES
    check_outputs(tmp_path, vdw.QUICK)


def test_without_kin40k_the_analyses_are_skipped_with_the_reason(tmp_path):
    vdw.run(tmp_path / "out", quick=True, data_dir=tmp_path / "nowhere", log=None)
    report = (tmp_path / "out" / "results.md").read_text()
    assert f"skipped: data not found in {tmp_path / 'nowhere'}: " in report
    assert ", ".join(vdw.FILES) + " in kin40k/" in report
    assert "--data-dir" in report and "SPARSEGP_DATA_DIR" in report and "docs/data.md" in report


def test_stored_floats():
    assert vdw.stored_floats(10, 1, 8) == 10 + 100 + 90
    assert vdw.stored_floats(5, 20, 3) == 5 + 25 + 5 * 20 * 4
