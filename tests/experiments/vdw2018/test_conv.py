"""`sparsegp experiment vdw2018-conv`: the quick run writes every table, trace and figure with
finite numbers for all three tasks (when the data are in the tests' data folder), an interrupted run
resumes from its checkpoint and a rerun skips finished work, and without the data every task
is skipped with the reason."""

from __future__ import annotations

import csv
import json
import math
import re
import time

import pytest

from sparsegp.experiments.vdw2018 import conv
from sparsegp.experiments.vdw2018.conv_runs import Segments, eval_points

from ...conftest import TEST_DATA_DIR, no_data_reason

PNG = b"\x89PNG\r\n\x1a\n"
HAVE_DATA = all((TEST_DATA_DIR / d / f).is_file() for d, f in conv.FILES.values())
needs_data = pytest.mark.skipif(not HAVE_DATA, reason=no_data_reason(
    "rectangles/rectangles.npz and mnist/mnist.npz"))
KERNELS = {"rectangles": ["invariant", "weighted", "SE"], "mnist01": ["invariant", "weighted"],
           "mnist": ["invariant", "SE", "weighted", "weighted + SE"]}
FIGURES = {"rectangles": ["traces", "patches", "weights"], "mnist01": ["traces", "patches", "weights"],
           "mnist": ["traces", "weights"]}


def check_task(out, task):
    rows = list(csv.DictReader((out / f"{task}.csv").open()))
    assert [r["kernel"] for r in rows] == KERNELS[task]
    for r in rows:
        assert r["status"] == "done"
        for key in ("test error %", "test NLPP", "ELBO/N", "train seconds"):
            assert math.isfinite(float(r[key])), (task, r)
        assert 0.0 <= float(r["test error %"]) <= 100.0
        assert 0.0 < float(r["test NLPP"]) < 10.0  # ≈ log 2 or log 10 at chance
        assert float(r["ELBO/N"]) < 0.0
        assert int(r["steps"]) > 0
    trace = list(csv.DictReader((out / f"{task}_traces.csv").open()))
    for kernel in KERNELS[task]:
        points = [p for p in trace if p["kernel"] == kernel]
        assert len(points) >= 2 and int(points[0]["step"]) == 0
        assert all(math.isfinite(float(p[k])) for p in points for k in ("ELBO/N", "test NLPP"))
        seconds = [float(p["train seconds"]) for p in points]
        assert seconds == sorted(seconds)
    for name in FIGURES[task]:
        png = out / f"{task}_{name}.png"
        assert png.read_bytes()[:8] == PNG and png.stat().st_size > 10_000


@needs_data
def test_quick_run_writes_every_table_trace_and_figure(tmp_path):
    out = tmp_path / "out"
    start = time.perf_counter()
    assert conv.main(["--quick", "--out", str(out)]) == 0
    assert time.perf_counter() - start < 300.0  # the budget is 3 minutes on 2 cores
    for task in conv.TASKS:
        check_task(out, task)
    report = (out / "results.md").read_text()
    for title in ("## 1. Rectangles", "## 2. MNIST 0 vs 1", "## 3. MNIST, 10 classes"):
        assert title in report
    assert "skipped" not in report and "FAILED" not in report
    # every run left a loadable final model and a progress record
    for task, kernels in KERNELS.items():
        for kernel in kernels:
            name = f"{task}-{kernel.replace(' + ', '-plus-')}"
            record = json.loads((out / "checkpoints" / f"{name}.json").read_text())
            assert record["status"] == "done" and (out / "checkpoints" / f"{name}.pt").is_file()


@needs_data
def test_an_interrupted_run_resumes_and_a_rerun_skips_finished_work(tmp_path):
    out = tmp_path / "out"
    lines: list[str] = []

    def interrupt_weighted(line):  # Ctrl-C after the weighted kernel's first segment
        lines.append(line)
        if "rectangles-weighted: step" in line and not any("interrupted" in s for s in lines):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        conv.run(out, quick=True, tasks=["rectangles"], log=interrupt_weighted)
    record = json.loads((out / "checkpoints" / "rectangles-weighted.json").read_text())
    assert record["status"] == "running" and 1 <= record["segments"] < 2
    assert json.loads((out / "checkpoints" / "rectangles-invariant.json").read_text())["status"] == "done"
    assert not (out / "checkpoints" / "rectangles-SE.json").exists()

    second: list[str] = []
    conv.run(out, quick=True, tasks=["rectangles"], log=second.append)
    text = "\n".join(second)
    assert "rectangles-invariant: finished in an earlier run; skipped" in text
    assert "rectangles-weighted: resuming after segment 1 of 2" in text
    assert "rectangles-SE: step" in text  # trained from scratch
    check_task(out, "rectangles")
    resumed = json.loads((out / "checkpoints" / "rectangles-weighted.json").read_text())
    assert resumed["status"] == "done" and resumed["segments"] == 2
    assert [p["step"] for p in resumed["trace"]] == [0, 3, 6]  # no point traced twice

    table = (out / "rectangles.csv").read_text()
    third: list[str] = []
    start = time.perf_counter()
    conv.run(out, quick=True, tasks=["rectangles"], log=third.append)
    assert sum("finished in an earlier run; skipped" in s for s in third) == 3
    assert not any(re.search(r": step \d", s) for s in third)
    assert (out / "rectangles.csv").read_text() == table
    assert time.perf_counter() - start < 30.0  # data, tables and figures only

    # another task into the same folder: results.md reports both, rectangles untrained
    fourth: list[str] = []
    conv.run(out, quick=True, tasks=["mnist01"], log=fourth.append)
    assert not any("rectangles" in s and ": step" in s for s in fourth)
    report = (out / "results.md").read_text()
    assert "## 1. Rectangles" in report and "## 2. MNIST 0 vs 1" in report
    assert "not trained now" in report.split("## 2.")[0] and "## 3." not in report
    check_task(out, "mnist01")


def test_without_the_data_every_task_is_skipped_with_the_reason(tmp_path):
    conv.run(tmp_path / "out", quick=True, data_dir=tmp_path / "nowhere", log=None)
    report = (tmp_path / "out" / "results.md").read_text()
    assert report.count(f"skipped: data not found in {tmp_path / 'nowhere'}: ") == 3
    for folder, name in conv.FILES.values():
        assert f"{name} in {folder}/" in report
    assert "--data-dir" in report and "SPARSEGP_DATA_DIR" in report and "docs/data.md" in report


def test_segments_draw_seeded_batches_that_a_resumed_run_repeats():
    import torch

    X, y = torch.arange(20.0)[:, None], torch.arange(20.0)
    loader = Segments(X, y, 8, 3, 0)
    seen = [[b[1].tolist() for b in loader] for _ in range(3)]
    resumed = [b[1].tolist() for b in Segments(X, y, 8, 3, 2)]
    assert seen[2] == resumed and seen[0] != seen[1]
    assert all(len(set(sum(seg, []))) == 20 for seg in [s[:2] + [s[2][:4]] for s in seen])
    assert [b[1].tolist() for b in Segments(X, y, 8, 3, 0)] == seen[0]
    assert eval_points(10, 4) == {0, 1, 2, 5, 10}


def test_a_failing_run_is_recorded_and_tried_again_on_the_next_invocation(tmp_path):
    import torch

    import sparsegp as sg
    from sparsegp.experiments.vdw2018.conv_runs import Images, Spec, execute

    X = torch.rand(30, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y = (X[:, :8].sum(1) > X[:, 8:].sum(1)).double()
    images = Images(X, y, X, y, (4, 4), X, y, X, y)
    calls: list[int] = []

    def build(X, y):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("out of memory")
        k = sg.kernels.Convolutional(sg.kernels.SquaredExponential(), (4, 4), (2, 2))
        return sg.SVGP(X, y, kernel=k, likelihood=sg.likelihoods.Bernoulli(), inducing_points=4)

    spec = Spec("toy", "invariant", build, steps=4, segment=2, batch=10, evals=2)
    lines: list[str] = []
    record = execute(spec, images, tmp_path, lines.append, False, 0.0)
    assert record["status"] == "failed" and record["message"] == "RuntimeError: out of memory"
    assert json.loads((tmp_path / "toy-invariant.json").read_text())["status"] == "failed"
    record = execute(spec, images, tmp_path, lines.append, False, 0.0)
    assert "  toy-invariant: failed before (RuntimeError: out of memory); trying again" in lines
    assert record["status"] == "done" and record["segments"] == 2
    assert 0.0 <= record["error"] <= 1.0 and math.isfinite(record["nlpp"])


@needs_data
def test_kernels_option_trains_only_the_named_kernels(tmp_path):
    out = tmp_path / "out"
    lines: list[str] = []
    assert conv.main(["--quick", "--task", "rectangles", "--kernels", "SE", "--out", str(out)]) == 0
    folder = out / "checkpoints"
    assert json.loads((folder / "rectangles-SE.json").read_text())["status"] == "done"
    assert not (folder / "rectangles-invariant.json").exists()
    rows = {r["kernel"]: r["status"] for r in csv.DictReader((out / "rectangles.csv").open())}
    assert rows == {"invariant": "not run", "weighted": "not run", "SE": "done"}
    # the next invocation trains the others and leaves SE's finished run alone
    conv.run(out, quick=True, tasks=["rectangles"], kernels=["invariant", "weighted"],
             log=lines.append)
    assert "rectangles-SE: finished in an earlier run; skipped" not in "\n".join(lines)
    check_task(out, "rectangles")


def test_an_unknown_kernel_is_named():
    with pytest.raises(ValueError, match=r"unknown kernel\(s\) \['Matern'\]"):
        conv.run("unused", quick=True, kernels=["Matern"])
    with pytest.raises(SystemExit):
        conv.main(["--kernels", "Matern"])
