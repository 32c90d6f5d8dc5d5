"""Streams and runs of `sparsegp experiment streaming`: a data set cut into batches, and after
each batch the streaming model (`SGPR.update`), a batch SGPR on every point seen so far and an
SGPR on the new batch only, scored on held-out points."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ...datasets import snelson
from ...diagnostics import ApproximationWarning, ConvergenceWarning
from ...linalg import JitterWarning
from ...models import SGPR
from ..shared.data import read_kin40k, standardise, uci_problem
from ..shared.metrics import predictive_scores

#: The models compared after each batch: (name, approximation options of SGPR, streams?).
METHODS: tuple[tuple[str, dict[str, Any], bool], ...] = (
    ("streaming VFE", {}, True),
    ("streaming Power EP α=0.5", {"approximation": "pep", "alpha": 0.5}, True),
    ("batch SGPR (all seen)", {}, False),
    ("SGPR on new batch only", {}, False),
)


@dataclass(frozen=True)
class Stream:
    """Training batches (in arrival order) and test sets: name -> (Xs, ys, mask per batch or
    None); `mask(k, X_seen)` picks the test points scored after batch k (None: all)."""

    X: list[np.ndarray]
    y: list[np.ndarray]
    tests: dict[str, tuple[np.ndarray, np.ndarray, Callable[[np.ndarray], np.ndarray] | None]]


def _batches(X: np.ndarray, y: np.ndarray, count: int, size: int | None) -> tuple[list, list]:
    rows = np.arange(X.shape[0]) if size is None else np.arange(min(count * size, X.shape[0]))
    parts = np.array_split(rows, count)
    return [X[p] for p in parts], [y[p] for p in parts]


def random_stream(X: np.ndarray, y: np.ndarray, Xs: np.ndarray, ys: np.ndarray, batches: int,
                  size: int | None, test: int | None, seed: int = 0) -> Stream:
    """The training rows in a seeded random order, `batches` batches of `size` rows (None:
    all rows split evenly); `test` seeded held-out rows (None: all)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(X.shape[0])
    keep = rng.permutation(Xs.shape[0])[: test or Xs.shape[0]]
    bx, by = _batches(X[order], y[order], batches, size)
    return Stream(bx, by, {"held-out": (Xs[keep], ys[keep], None)})


def kin40k_stream(folder: Path, batches: int, size: int, test: int) -> Stream:
    """kin40k (standardised by its training statistics), random order."""
    X, y, Xs, ys = read_kin40k(folder)
    p = standardise(X, y.reshape(-1), Xs, ys.reshape(-1))
    return random_stream(p.X, p.y, p.Xs, p.ys, batches, size, test)


def uci_stream(data_dir: Path, name: str, batches: int, size: int | None,
               test: int | None) -> Stream:
    """UCI set `name`, split 0 (standardised by its training statistics), random order."""
    p = uci_problem(data_dir, name, 0)
    return random_stream(p.X, p.y, p.Xs, p.ys, batches, size, test)


def snelson_stream(batches: int) -> Stream:
    """Snelson's data sorted by x (drifting inputs): every 4th point held out; the others
    arrive from left to right. Two test sets: the held-out points up to the largest x seen
    so far, and all held-out points."""
    X, y = snelson()
    test = np.zeros(len(y), bool)
    test[::4] = True
    order = np.argsort(X[~test, 0])
    bx, by = _batches(X[~test][order], y[~test][order], batches, None)
    Xt, yt = X[test], y[test]

    def seen(X_seen: np.ndarray) -> np.ndarray:
        return Xt[:, 0] <= X_seen[:, 0].max()

    return Stream(bx, by, {"seen range": (Xt, yt, seen), "all": (Xt, yt, None)})


def _timed(step: Callable[[], SGPR]) -> tuple[SGPR, float]:
    start = time.perf_counter()
    with warnings.catch_warnings():
        for w in (JitterWarning, ConvergenceWarning, ApproximationWarning):
            warnings.simplefilter("ignore", w)
        model = step()
    return model, time.perf_counter() - start


def run_stream(stream: Stream, M: int, maxiter: int, methods: tuple[str, ...],
               log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """After each batch, each method in `methods` (names of METHODS) fitted and scored on every
    test set: rows of batch, points seen, method, test set, RMSE, NLPD, seconds."""
    streams: dict[str, SGPR] = {}
    rows: list[dict[str, Any]] = []
    for k, (Xb, yb) in enumerate(zip(stream.X, stream.y), 1):
        X_seen, y_seen = np.concatenate(stream.X[:k]), np.concatenate(stream.y[:k])
        for name, options, streaming in METHODS:
            if name not in methods:
                continue
            if streaming and name in streams:
                model, seconds = _timed(partial(streams[name].update, Xb, yb, maxiter=maxiter,
                                                progress=False))
            else:
                Xf, yf = (X_seen, y_seen) if name.startswith("batch") else (Xb, yb)

                def fresh(Xf: np.ndarray = Xf, yf: np.ndarray = yf,
                          options: dict[str, Any] = options) -> SGPR:
                    m = SGPR(Xf, yf, inducing_points=M, **options)
                    m.fit(maxiter=maxiter, progress=False, diagnose=False)
                    return m

                model, seconds = _timed(fresh)
            if streaming:
                streams[name] = model
            for test, (Xs, ys, mask) in stream.tests.items():
                keep = np.ones(len(ys), bool) if mask is None else mask(X_seen)
                nlpd, _, rmse = predictive_scores(model, Xs[keep], ys[keep])
                rows.append({"batch": k, "seen": len(y_seen), "method": name, "test": test,
                             "test points": int(keep.sum()), "RMSE": rmse, "NLPD": nlpd,
                             "seconds": seconds})
        if log is not None:
            log(f"  batch {k}: {len(y_seen)} points seen")
    return rows
