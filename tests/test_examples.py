"""Examples and benchmark scripts run as written (small sizes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sparsegp.cli import main

pytestmark = pytest.mark.slow  # `-m "not slow"` leaves these out

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed in this build")
def test_distributed_example_under_torchrun_with_two_processes():
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          str(ROOT / "examples" / "distributed_sgpr.py"), "--quick"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "N = 2000 over 2 process(es) (1000 here)" in out.stdout
    assert "test RMSE" in out.stdout


def test_speed_benchmark_quick_run_writes_its_table(tmp_path, capsys):
    assert main(["bench", "speed", "--quick", "--methods", "vfe", "--device", "cpu", "--out",
                 str(tmp_path / "r.md")]) == 0
    text = (tmp_path / "r.md").read_text()
    assert "| 2,000 | 50 | vfe |" in text and "| 2,000 | 50 | naive-vfe |" in text
    assert "points / s" in text and "Machine:" in text


def test_interdomain_benchmark_quick_run_writes_its_table(tmp_path):
    assert main(["bench", "interdomain", "--quick", "--out", str(tmp_path / "r.md")]) == 0
    text = (tmp_path / "r.md").read_text()
    for setup in ("deltas", "points M·C", "naive deltas"):
        assert f"| 2,000 | 20 | 5 | {setup} |" in text
    assert "| 2,000 | 20 | 5 | deltas | " in text and "| 1.00 |" in text and "Machine:" in text


def test_classification_example_runs_and_writes_its_figure(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "classification_2d.py"), "--quick",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    errors = [float(line.split()[-3]) for line in out.stdout.splitlines()
              if line.startswith(("SGPC", "SVGP"))]
    assert len(errors) == 4 and max(errors) < 0.3
    assert (tmp_path / "classification_2d.png").read_bytes()[:4] == b"\x89PNG"


def test_streaming_example_runs_and_the_stream_keeps_up_with_the_batch_fit():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "streaming_sgpr.py"), "--quick"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 6
    for row in rows[1:]:
        stream, batch, new_only = (float(v) for v in row[4:7])
        assert stream < 1.1 * batch and stream < new_only
