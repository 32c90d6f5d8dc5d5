"""`sparsegp experiment bui2017`: the quick run stores a row per run and writes the report and
figures; a rerun does no fits, an interrupted store is completed without redoing finished
runs, a failing run becomes a row (not an abort), and the metrics match independent formulas."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import norm

from sparsegp.cli import main
from sparsegp.experiments.bui2017 import experiment as bui2017
from sparsegp.experiments.bui2017 import runs as bui2017_runs
from sparsegp.experiments.bui2017.classification import missing_classification
from sparsegp.experiments.bui2017.grid import EXACT, METHODS, QUICK
from sparsegp.experiments.shared.data import missing_uci
from sparsegp.experiments.shared.metrics import smll, smse
from sparsegp.experiments.shared.synthetic import synthetic_problem

from ...conftest import TEST_DATA_DIR

PNG = b"\x89PNG\r\n\x1a\n"
HAVE_UCI = not missing_uci(TEST_DATA_DIR, QUICK.uci_sets, QUICK.splits)
HAVE_CLASSIFICATION = not missing_classification(TEST_DATA_DIR)
TINY = replace(QUICK, mode="tiny", synthetic_sets=1, synthetic_points=60, synthetic_M=(4,),
               maxiter_synthetic=3)


def rows(out):
    """The store's rows, the last of a key winning, lines cut short skipped (as the store does)."""
    latest = {}
    for line in (out / "runs.jsonl").read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        latest[(r["part"], r["dataset"], r["split"], r["M"], r["method"])] = r
    return list(latest.values())


class Counter:
    """Counts calls of `run_task` (and forwards them)."""

    def __init__(self, monkeypatch):
        self.calls = []
        real = bui2017_runs.run_task

        def counted(task, data_dir):
            self.calls.append(task.key)
            return real(task, data_dir)

        monkeypatch.setattr(bui2017_runs, "run_task", counted)


def test_metrics_match_independent_formulas():
    ys = np.array([1.0, 2.0, 3.0])
    mean = np.array([1.5, 2.0, 2.5])
    var = np.array([0.5, 1.0, 2.0])
    y_train = np.array([0.0, 2.0, 4.0, 6.0])
    assert smse(ys, mean) == pytest.approx((0.25 + 0 + 0.25) / 3 / (2 / 3))  # = 0.25
    loss = -norm.logpdf(ys, mean, np.sqrt(var))
    trivial = -norm.logpdf(ys, 3.0, np.sqrt(5.0))  # training mean 3, variance 5
    assert smll(ys, mean, var, y_train) == pytest.approx(np.mean(loss - trivial), rel=1e-12)
    # both are unchanged by an affine map of the targets (so standardising is harmless)
    a, b = 3.7, -2.0
    assert smse(a * ys + b, a * mean + b) == pytest.approx(smse(ys, mean))
    assert smll(a * ys + b, a * mean + b, a * a * var, a * y_train + b) == pytest.approx(
        smll(ys, mean, var, y_train))
    # the trivial model itself scores 0
    assert smll(ys, np.full(3, 3.0), np.full(3, 5.0), y_train) == pytest.approx(0.0, abs=1e-15)


def test_synthetic_data_are_seeded_and_standardised():
    a, b = synthetic_problem(3, 80), synthetic_problem(3, 80)
    assert np.array_equal(a.X, b.X) and np.array_equal(a.ys, b.ys)
    assert not np.array_equal(a.y, synthetic_problem(4, 80).y)
    assert a.X.shape == (40, 5) and a.Xs.shape == (40, 5)
    assert abs(a.y.mean()) < 1e-12 and a.y.std() == pytest.approx(1.0)


def check_quick_rows(out, parts):
    stored = [r for r in rows(out) if r["part"] in ("synthetic", "regression")]
    assert all(r["status"] == "ok" for r in stored), [r["error"] for r in stored if r["error"]]
    expected = set()
    if "synthetic" in parts:
        expected |= {("synthetic", f"gp{i:02d}", 0, 0, EXACT) for i in range(QUICK.synthetic_sets)}
        expected |= {("synthetic", f"gp{i:02d}", 0, M, m.name) for i in range(QUICK.synthetic_sets)
                     for M in QUICK.synthetic_M for m in METHODS}
    if "regression" in parts:
        expected |= {("regression", d, s, M, m.name) for d in QUICK.uci_sets
                     for s in range(QUICK.splits) for M in QUICK.uci_M for m in METHODS}
    keys = [(r["part"], r["dataset"], r["split"], r["M"], r["method"]) for r in stored]
    assert len(keys) == len(set(keys)) and set(keys) == expected
    for r in stored:
        assert all(math.isfinite(r[k]) for k in ("smse", "smll", "mnll", "nlml")), r
        assert 0.0 < r["smse"] < 2.0 and r["noise_variance"] > 0.0
        assert 1 <= r["iterations"] <= r["maxiter"] and r["evaluations"] >= r["iterations"]
    # one seed (so one set of initial inducing inputs) per (data set, split, M)
    seeds = {}
    for r in stored:
        seeds.setdefault((r["part"], r["dataset"], r["split"], r["M"]), set()).add(r["seed"])
    assert all(len(s) == 1 for s in seeds.values())
    return stored


def test_quick_run_stores_rows_reports_and_resumes_without_refitting(tmp_path, monkeypatch,
                                                                       capsys):
    out = tmp_path / "out"
    parts = ("synthetic", "regression") if HAVE_UCI else ("synthetic",)
    argv = ["experiment", "bui2017", "--quick", "--out", str(out), "--jobs", "2"]
    assert main(argv + ([] if HAVE_UCI else ["--part", "synthetic"])) == 0
    check_quick_rows(out, parts)
    total = len(rows(out))  # with the classification part's rows where its data are present
    classified = [r for r in rows(out) if r["part"] == "classification"]
    assert bool(classified) == HAVE_CLASSIFICATION
    assert all(r["status"] == "ok" and 0.0 <= r["error_rate"] <= 1.0 for r in classified)
    err = capsys.readouterr().err
    assert f"{total}/{total} (100.0%)" in err and "ETA" in err
    report = (out / "results.md").read_text()
    assert "## 1. Synthetic data" in report and "runs of this grid succeeded" in report
    figures = ["synthetic.png"]
    if HAVE_UCI:
        assert "## 2. UCI regression" in report and "Pairwise win rates" in report
        figures += ["regression_pairs.png", "regression_win_matrix.png", "regression_ranks.png",
                    "regression_smse_per_dataset.png", "regression_smll_per_dataset.png"]
    for name in figures:
        png = out / name
        assert png.read_bytes()[:8] == PNG and png.stat().st_size > 10_000, name
    # a second run does no fits and adds no rows, and rebuilds the same report
    calls = Counter(monkeypatch)
    assert main(argv + ["--report-only"] + ([] if HAVE_UCI else ["--part", "synthetic"])) == 0
    bui2017.run(out, quick=True, parts=parts, log=None)
    assert calls.calls == [] and len(rows(out)) == total
    assert "this invocation ran 0 run(s)" in (out / "results.md").read_text()
    # a store of another setting is refused, not mixed
    with pytest.raises(ValueError, match="another setting"):
        bui2017.run(out, config=TINY, log=None)


def test_interrupted_store_is_completed_without_redoing_finished_runs(tmp_path, monkeypatch):
    out = tmp_path / "out"
    bui2017.run(out, config=TINY, parts=("synthetic",), log=None, progress=None)
    full = rows(out)
    assert len(full) == 1 + len(METHODS)
    # as if killed: the last two runs missing, the one before cut off mid-line
    lines = (out / "runs.jsonl").read_text().splitlines()
    (out / "runs.jsonl").write_text("\n".join(lines[:-3]) + "\n" + lines[-3][:40])
    calls = Counter(monkeypatch)
    bui2017.run(out, config=TINY, parts=("synthetic",), log=None, progress=None)
    redone = {(r["part"], r["dataset"], r["split"], r["M"], r["method"]) for r in full[-3:]}
    assert set(calls.calls) == redone and len(calls.calls) == 3
    again = rows(out)  # the cut line is skipped; every run has its row
    assert len(again) == len(full)
    assert {r["method"] for r in again} == {r["method"] for r in full}
    for a in again:  # deterministic: redone runs give the same numbers
        b = next(r for r in full if r["method"] == a["method"])
        assert a["smll"] == pytest.approx(b["smll"], rel=1e-8)


def test_ctrl_c_keeps_the_finished_runs_and_a_rerun_does_only_the_rest(tmp_path, monkeypatch):
    out = tmp_path / "out"
    real = bui2017_runs.fit_model
    seen = []

    def interrupted(model, maxiter):
        seen.append(model)
        if len(seen) == 4:
            raise KeyboardInterrupt
        return real(model, maxiter)

    monkeypatch.setattr(bui2017_runs, "fit_model", interrupted)
    messages = []
    with pytest.raises(KeyboardInterrupt):
        bui2017.run(out, config=TINY, parts=("synthetic",), log=None, progress=messages.append)
    assert len(rows(out)) == 3 and all(r["status"] == "ok" for r in rows(out))
    assert "rerun the same command to continue" in messages[-1]
    monkeypatch.setattr(bui2017_runs, "fit_model", real)
    calls = Counter(monkeypatch)
    bui2017.run(out, config=TINY, parts=("synthetic",), log=None, progress=None)
    assert len(calls.calls) == len(METHODS) + 1 - 3 and len(rows(out)) == len(METHODS) + 1


def test_a_failing_run_is_recorded_and_the_others_go_on(tmp_path, monkeypatch):
    out = tmp_path / "out"
    real = bui2017_runs.fit_model

    def flaky(model, maxiter):
        if getattr(model, "alpha", None) == 0.5 and model.blocks is None:
            raise RuntimeError("simulated optimiser failure")
        return real(model, maxiter)

    monkeypatch.setattr(bui2017_runs, "fit_model", flaky)
    messages = []
    bui2017.run(out, config=TINY, parts=("synthetic",), log=messages.append, progress=None)
    stored = rows(out)
    failed = [r for r in stored if r["status"] == "failed"]
    assert [r["method"] for r in failed] == ["PEP 0.5"]
    assert failed[0]["error"] == "RuntimeError: simulated optimiser failure"
    assert sum(r["status"] == "ok" for r in stored) == len(METHODS)  # the others and the GP
    assert any("1 failed" in m for m in messages)
    assert "1 run(s) failed" in (out / "results.md").read_text()
    # kept on a rerun; run again (and now succeeding) with retry_failed
    monkeypatch.setattr(bui2017_runs, "fit_model", real)
    calls = Counter(monkeypatch)
    bui2017.run(out, config=TINY, parts=("synthetic",), log=None, progress=None)
    assert calls.calls == []
    bui2017.run(out, config=TINY, parts=("synthetic",), log=None, progress=None,
                retry_failed=True)
    assert [k[4] for k in calls.calls] == ["PEP 0.5"]
    latest = {r["method"]: r for r in rows(out)}
    assert latest["PEP 0.5"]["status"] == "ok"


def test_regression_part_is_skipped_with_the_reason_when_the_data_are_absent(tmp_path):
    out = tmp_path / "out"
    bui2017.run(out, config=TINY, parts=("regression",), data_dir=tmp_path / "nowhere",
                log=None, progress=None)
    report = (out / "results.md").read_text()
    assert f"**skipped: data not found in {tmp_path / 'nowhere'}: " in report
    assert "data.txt, index_features.txt, index_target.txt" in report
    assert "SPARSEGP_DATA_DIR" in report and "docs/data.md" in report
    assert not (out / "runs.jsonl").exists()


def test_command_line_options():
    args = bui2017.build_parser().parse_args(["--quick", "--part", "synthetic", "--jobs", "2",
                                              "--out", "x", "--data-dir", "d", "--maxiter", "7"])
    assert args.quick and args.part == "synthetic" and args.jobs == 2 and args.maxiter == 7
    defaults = bui2017.build_parser().parse_args([])
    assert defaults.part == "all" and defaults.jobs == 1 and not defaults.retry_failed
    assert defaults.maxiter is None
    assert bui2017.build_parser().parse_args(["--part", "classification"]).part == "classification"
    with pytest.raises(SystemExit):
        bui2017.build_parser().parse_args(["--part", "bogus"])
