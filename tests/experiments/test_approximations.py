"""`sparsegp experiment approximations` at tiny sizes: every method on Snelson (KISS-GP too,
D = 1), the data sections skipped with the reason without their data, and SSGP's
over-fitting visible already at small R."""

from __future__ import annotations

import csv
import math

from sparsegp.experiments import approximations as ap

TINY = ap.Config(budgets=(8,), splits=2, maxiter=15, ski_steps=10, overfit_R=(5, 40),
                 overfit_seeds=2)


def test_tiny_run_without_data(tmp_path):
    out = tmp_path / "out"
    files = ap.run(out, data_dir=tmp_path / "no-data", log=None, cfg=TINY)
    names = {f.name for f in files}
    assert names == {"snelson.csv", "snelson.png", "ssgp_overfitting.csv",
                     "ssgp_overfitting.png", "which_when.csv", "results.md"}
    wins = list(csv.DictReader((out / "which_when.csv").open()))
    assert sum(int(r["best NLPD"]) for r in wins) == len(TINY.budgets)  # one case: Snelson
    rows = list(csv.DictReader((out / "snelson.csv").open()))
    assert [r["method"] for r in rows] == list(ap.METHODS)
    for r in rows:
        assert all(math.isfinite(float(r[k])) for k in ("RMSE", "NLPD", "noise variance"))
        assert 0 < float(r["RMSE"]) < 1.5  # standardised targets
    report = (out / "results.md").read_text()
    # kin40k and the UCI sets, each with its files and where to get them
    assert report.count(f"skipped: data not found in {tmp_path / 'no-data'}: ") == 1 + len(ap.UCI)
    assert report.count("where to get them: docs/data.md") == 1 + len(ap.UCI)
    over = {(r["method"], int(r["R"])): r for r in csv.DictReader(
        (out / "ssgp_overfitting.csv").open())}
    # SSGP's training NLPD falls below its test NLPD by far more than RFF's at R = 40
    gap = lambda m: float(over[(m, 40)]["test NLPD"]) - float(over[(m, 40)]["train NLPD"])  # noqa: E731
    assert gap("SSGP") > gap("RFF") + 0.5


def test_the_command_line_knows_the_experiment():
    from sparsegp.cli import build_parser

    args = build_parser().parse_args(["experiment", "approximations", "--quick"])
    assert args.which == "approximations"
