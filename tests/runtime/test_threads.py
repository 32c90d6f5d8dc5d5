"""Small problems train on one torch thread and give the caller's setting back afterwards;
large ones keep it (`sparsegp.runtime.threads`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.runtime.threads import SMALL_WORK, threads_for


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def problem(n=60):
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 5, (n, 2))
    return X, np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)


def test_threads_for_switches_by_work_and_restores(two_threads):
    with threads_for(SMALL_WORK / 10):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with threads_for(SMALL_WORK * 10):
        assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError), threads_for(1.0):
        raise RuntimeError("restored even on errors")
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("make", [
    lambda X, y: sg.SGPR(X, y, inducing_points=8),
    lambda X, y: sg.GPR(X, y),
    lambda X, y: sg.SVGP(X, y, inducing_points=8),
])
def test_small_fits_run_on_one_thread(two_threads, make):
    X, y = problem()
    m = make(X, y)
    seen = []
    m.fit(maxiter=3, callback=lambda *args: seen.append(torch.get_num_threads()))
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == 2


def test_sgpc_sweeps_run_on_one_thread_and_large_work_keeps_the_setting(two_threads,
                                                                         monkeypatch):
    X, y = problem()
    clf = sg.SGPC(X, (y > 0).astype(float), inducing_points=8)
    seen = []
    real = clf.site_marginals
    monkeypatch.setattr(clf, "site_marginals",
                        lambda idx=None, totals=None: seen.append(torch.get_num_threads())
                        or real(idx, totals))
    clf.update_sites(max_sweeps=2)
    assert set(seen) == {1}
    seen.clear()
    monkeypatch.setattr(clf, "evaluation_work", lambda: 10 * SMALL_WORK)
    clf.update_sites(max_sweeps=2)
    assert set(seen) == {2}
