"""`sparsegp experiment streaming`: the quick run writes its tables, figures and results.md;
on the sorted Snelson stream the streaming model stays near the batch reference and far ahead
of an SGPR on the new batch only; missing data files skip their streams with the reason."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from sparsegp.experiments.streaming import experiment as st
from sparsegp.experiments.streaming.runs import METHODS, random_stream, snelson_stream

from ...conftest import TEST_DATA_DIR, no_data_reason

PNG = b"\x89PNG\r\n\x1a\n"
HAS_KIN40K = not st.missing_data(TEST_DATA_DIR)["kin40k"]
HAS_UCI = not st.missing_data(TEST_DATA_DIR)[st.UCI_NAME]


def _final(path, test):
    rows = [r for r in csv.DictReader(path.open()) if r["test"] == test]
    last = max(int(r["batch"]) for r in rows)
    return {r["method"]: (float(r["RMSE"]), float(r["NLPD"])) for r in rows
            if int(r["batch"]) == last}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("streaming")
    assert st.main(["--quick", "--out", str(out)]) == 0  # data from SPARSEGP_DATA_DIR
    return out


def test_quick_run_writes_the_snelson_results_and_they_make_sense(quick_run):
    out = quick_run
    assert {"results.md", "snelson.csv", "snelson.png"} <= {f.name for f in out.iterdir()}
    assert (out / "snelson.png").read_bytes()[:8] == PNG
    rows = list(csv.DictReader((out / "snelson.csv").open()))
    methods = [m[0] for m in METHODS]
    # every method, after every batch, on both test sets; finite scores
    assert len(rows) == st.QUICK.batches * len(methods) * 2
    assert {r["method"] for r in rows} == set(methods)
    assert all(math.isfinite(float(r[c])) for r in rows for c in ("RMSE", "NLPD", "seconds"))
    # the range seen so far grows with the batches, up to all 50 held-out points
    seen = [int(r["test points"]) for r in rows
            if r["test"] == "seen range" and r["method"] == methods[0]]
    assert seen == sorted(seen) and seen[-1] == 50 and seen[0] < 50
    final = _final(out / "snelson.csv", "all")
    batch = final["batch SGPR (all seen)"]
    new_only = final["SGPR on new batch only"]
    for name in ("streaming VFE", "streaming Power EP α=0.5"):
        rmse, nlpd = final[name]
        # near the batch reference (measured: 0.274 / 0.272 against 0.275) ...
        assert rmse < 1.3 * batch[0] and nlpd < batch[1] + 0.3
        # ... and far ahead of forgetting the old batches (0.81, NLPD 1.06)
        assert rmse < 0.5 * new_only[0] and nlpd < new_only[1] - 0.5
    report = (out / "results.md").read_text()
    assert "3. Snelson, sorted by x" in report and "![snelson](snelson.png)" in report


@pytest.mark.skipif(not HAS_KIN40K, reason=no_data_reason("kin40k/"))
def test_quick_run_on_kin40k_streams_near_the_batch_reference(quick_run):
    final = _final(quick_run / "kin40k.csv", "held-out")
    assert final["streaming VFE"][0] < 1.2 * final["batch SGPR (all seen)"][0]
    assert (quick_run / "kin40k.png").read_bytes()[:8] == PNG


@pytest.mark.skipif(not HAS_UCI, reason=no_data_reason(f"uci/{st.UCI_NAME}/data/"))
def test_quick_run_on_the_uci_set_streams_near_the_batch_reference(quick_run):
    final = _final(quick_run / f"{st.UCI_NAME}.csv", "held-out")
    assert final["streaming VFE"][0] < 1.2 * final["batch SGPR (all seen)"][0]
    assert "non-commercial" in (quick_run / "results.md").read_text()


def test_streams_without_their_files_are_skipped_with_the_reason(tmp_path, capsys):
    empty = tmp_path / "data"
    empty.mkdir()
    out = tmp_path / "out"
    cfg = st.Config(batches=2, snelson_M=5, maxiter=5, methods=("streaming VFE",))
    st.run(out, data_dir=empty, log=None, cfg=cfg)
    report = (out / "results.md").read_text()
    assert report.count("skipped: data not found") == 2
    assert "kin40k_train_data.asc.gz" in report and f"uci/{st.UCI_NAME}/data/" in report
    assert {f.name for f in out.iterdir()} == {"results.md", "snelson.csv", "snelson.png"}
    # from the command line: Snelson needs no data, so the status is 0 and the skipped
    # streams are named; a --data-dir that is no folder is an error (status 2)
    assert st.main(["--data-dir", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_the_streams_cut_the_data_as_described():
    rng = np.random.default_rng(1)
    X, y = rng.standard_normal((23, 2)), rng.standard_normal(23)
    s = random_stream(X, y, X[:5], y[:5], batches=4, size=None, test=3)
    assert [len(b) for b in s.y] == [6, 6, 6, 5]
    assert sorted(np.concatenate(s.y)) == sorted(y)  # every row once, in a new order
    assert not np.array_equal(np.concatenate(s.y), y)
    assert len(s.tests["held-out"][1]) == 3
    s = random_stream(X, y, X, y, batches=2, size=4, test=None)
    assert [len(b) for b in s.y] == [4, 4] and len(s.tests["held-out"][1]) == 23
    s = snelson_stream(5)
    xs = np.concatenate([b[:, 0] for b in s.X])
    assert len(xs) == 150 and np.all(np.diff(xs) >= 0)  # sorted by x: drifting inputs
    Xt, _, seen = s.tests["seen range"]
    assert seen is not None and np.all(Xt[seen(s.X[0]), 0] <= s.X[0][:, 0].max())
    assert seen(s.X[0]).sum() < seen(np.concatenate(s.X)).sum() == 50
