"""The runs of `sparsegp experiment bui2017`: one task is one model fitted on one training set
and scored on its test set; tasks run in this process or in a pool of `jobs` processes, and
every finished task becomes a row of the store at once.

Fairness and determinism: the inducing inputs of (data set, split, M) are chosen by seeded
k-means++ from the training inputs with a seed computed from those three (CRC-32, not
Python's salted hash), so every method starts from the same inducing inputs and the same
data-driven hyperparameters (SGPR's defaults: lengthscales from the input spread, signal
variance var(y), noise var(y)/10), and a run gives the same row in any process. A run that
raises becomes a row with status "failed" and the error; the others go on.
"""

from __future__ import annotations

import sys
import time
import warnings
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from ...diagnostics import ApproximationWarning
from ...features.initialisation import initial_inducing_inputs
from ...kernels import SquaredExponential
from ...linalg import JitterWarning
from ...models import GPR, SGPR
from ...runtime.allocator import keep_freed_memory
from ...training.result import FitResult, FitTerminated
from ...validation import ScaleWarning
from ..shared.data import Problem, uci_problem
from ..shared.fitting import AS_GIVEN
from ..shared.metrics import mnll, smll, smse
from ..shared.progress import clock, torch_threads
from ..shared.synthetic import synthetic_problem
from .grid import EXACT, method
from .store import Key, Store

Log = Callable[[str], None]
#: One function evaluation's fixed cost, in units of N·M² (measured: ~6 ms against ~0.8 ns
#: per N·M² on one core); used only to weigh tasks for the ETA.
_OVERHEAD = 7.5e6


@dataclass(frozen=True)
class Task:
    """One run. `dataset` is a UCI folder name, or `gpNN` for synthetic data set NN of
    `points` points; `M` is 0 for the exact GP; `n_train` weighs the task for the ETA."""

    part: str
    dataset: str
    split: int
    M: int
    method: str
    maxiter: int
    n_train: int
    points: int = 0

    @property
    def key(self) -> Key:
        return (self.part, self.dataset, self.split, self.M, self.method)

    @property
    def seed(self) -> int:
        """The seed of the inducing inputs: shared by every method at (data set, split, M)."""
        return zlib.crc32(f"{self.part}/{self.dataset}/{self.split}/{self.M}".encode()) & 0x7FFFFFFF

    def run(self, data_dir: Path) -> dict[str, Any]:
        """Fit and score this task into a store row (a subclass may fit another model)."""
        return run_task(self, data_dir)

    @property
    def cost(self) -> float:
        """Relative cost (for the ETA): iterations × (overhead + N·M², or N³ for the exact GP;
        ×1.8 for FITC/PEP, whose triangular solves cost more than VFE's product)."""
        if self.method == EXACT:
            return self.maxiter * (_OVERHEAD + self.n_train**3)
        factor = 1.0 if method(self.method).approximation == "vfe" else 1.8
        return self.maxiter * (_OVERHEAD + factor * self.n_train * self.M**2)


def load_problem(task: Task, data_dir: Path) -> Problem:
    if task.part == "synthetic":
        return synthetic_problem(int(task.dataset[2:]), task.points)
    return uci_problem(data_dir, task.dataset, task.split)


def build_model(task: Task, data: Problem) -> GPR | SGPR:
    """The task's model on the training data (SE-ARD kernel, hyperparameters from the data)."""
    kernel = SquaredExponential(ard=True)
    if task.method == EXACT:
        return GPR(data.X, data.y, kernel=kernel, **AS_GIVEN)  # y standardised by the data
    Z = initial_inducing_inputs(torch.as_tensor(data.X), task.M, "kmeans++", task.seed).numpy()
    kwargs = method(task.method).kwargs(data.X, Z, task.seed)
    return SGPR(data.X, data.y, kernel=kernel, inducing_points=Z, **AS_GIVEN, **kwargs)


def fit_model(model: GPR | SGPR, maxiter: int) -> FitResult:
    """L-BFGS-B for at most `maxiter` iterations, quietly (no bar, no diagnostics)."""
    return model.fit(maxiter=maxiter, progress=False, diagnose=False)


def recorded(task: Task, budget: dict[str, Any], score: Callable[[], dict[str, Any]],
             finite: Sequence[str]) -> dict[str, Any]:
    """The store row of one run: its key, `budget`, its seed and what `score()` returns
    (status "ok"), quietly; an exception or a non-finite metric among `finite` makes it a
    "failed" row with the error instead. Ctrl-C is not a result: it propagates."""
    row: dict[str, Any] = {"part": task.part, "dataset": task.dataset, "split": task.split,
                           "M": task.M, "method": task.method, **budget, "seed": task.seed}
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            for category in (JitterWarning, ApproximationWarning, ScaleWarning, RuntimeWarning):
                warnings.simplefilter("ignore", category)
            row.update(status="ok", error="", **score())
        if not all(np.isfinite([row[k] for k in finite])):
            row.update(status="failed", error="a metric is not finite")
    except Exception as err:  # noqa: BLE001 - one failed run must not stop the grid
        row.update(status="failed", error=f"{type(err).__name__}: {err}"[:500])
    row["seconds"] = time.perf_counter() - start
    return row


def run_task(task: Task, data_dir: Path) -> dict[str, Any]:
    """Fit, score and describe one regression task as a store row (see `recorded`)."""

    def score() -> dict[str, Any]:
        data = load_problem(task, data_dir)
        model = build_model(task, data)
        result = fit_model(model, task.maxiter)
        if getattr(result, "interrupted", False):  # Ctrl-C inside the fit: not a result
            raise KeyboardInterrupt
        mean, var = model.predict(data.Xs, include_noise=True)
        return dict(smse=smse(data.ys, mean), smll=smll(data.ys, mean, var, data.y),
                    mnll=mnll(data.ys, mean, var), nlml=-model.log_marginal_likelihood(),
                    noise_variance=float(model.noise_variance), iterations=result.iterations,
                    evaluations=result.evaluations, converged=bool(result.success),
                    message=str(result.message)[:200], n_train=int(data.X.shape[0]),
                    n_test=int(data.Xs.shape[0]))

    return recorded(task, {"maxiter": task.maxiter}, score, ("smse", "smll", "nlml"))


def _worker_init() -> None:
    torch.set_num_threads(1)
    threadpool_limits(1)
    keep_freed_memory()  # as the command line's own process (runtime/allocator.py)


def _run_in_worker(task: Task, data_dir: Path) -> dict[str, Any]:
    return task.run(data_dir)


class Progress:
    """Done/total runs, elapsed time and an ETA weighted by the tasks' relative cost."""

    def __init__(self, tasks: Sequence[Task], log: Log | None, skipped: int) -> None:
        self.total, self.done, self.log, self.skipped = len(tasks), 0, log, skipped
        self.cost_total = sum(t.cost for t in tasks) or 1.0
        self.cost_done = 0.0
        self.start = time.perf_counter()
        self.failed = 0

    def update(self, task: Task, row: dict[str, Any]) -> None:
        self.done += 1
        self.cost_done += task.cost
        self.failed += row["status"] != "ok"
        if self.log is None:
            return
        elapsed = time.perf_counter() - self.start
        eta = elapsed * (self.cost_total - self.cost_done) / max(self.cost_done, 1e-9)
        what = f"{task.part} {task.dataset} split {task.split} M={task.M} {task.method}"
        state = "ok" if row["status"] == "ok" else f"FAILED ({row['error'][:80]})"
        self.log(f"[bui2017] {self.done}/{self.total} ({100 * self.done / self.total:.1f}%) "
                 f"elapsed {clock(elapsed)} ETA {clock(eta)} | {what}: {state}, "
                 f"{row['seconds']:.1f} s")


def stderr_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def execute(tasks: Sequence[Task], store: Store, data_dir: Path, jobs: int = 1,
            progress: Log | None = stderr_log, retry_failed: bool = False) -> tuple[int, int]:
    """Run the tasks that have no row in `store` (and failed ones with `retry_failed`), in
    `jobs` processes, appending each row when it finishes; return (runs done, failed).
    Ctrl-C stops the pool; the rows stored so far stay, so a rerun continues from there."""
    todo = [t for t in tasks if t.key not in store or
            (retry_failed and store.rows[t.key].get("status") != "ok")]
    bar = Progress(todo, progress, len(tasks) - len(todo))
    if progress is not None:
        progress(f"[bui2017] {len(todo)} of {len(tasks)} runs to do ({len(tasks) - len(todo)} "
                 f"already stored in {store.path}); {jobs} process(es)")
    if not todo:
        return 0, 0
    try:
        if jobs <= 1:
            with torch_threads(1), threadpool_limits(1):
                for task in todo:
                    row = task.run(data_dir)
                    store.append(row)
                    bar.update(task, row)
        else:
            _pool(todo, store, data_dir, jobs, bar)
    except (KeyboardInterrupt, FitTerminated):
        if progress is not None:
            progress(f"[bui2017] interrupted: {len(store)} runs are stored in {store.path}; "
                     "rerun the same command to continue")
        raise
    return bar.done, bar.failed


def _pool(todo: Sequence[Task], store: Store, data_dir: Path, jobs: int, bar: Progress) -> None:
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"),
                               initializer=_worker_init)
    try:
        futures = {pool.submit(_run_in_worker, t, data_dir): t for t in todo}
        for fut in as_completed(futures):
            try:
                row = fut.result()
            except BrokenProcessPool as err:
                raise RuntimeError(f"a worker process died ({err}); perhaps out of memory. "
                                   f"{store.path} keeps the {len(store)} finished runs: rerun "
                                   "to continue, perhaps with fewer --jobs") from None
            store.append(row)
            bar.update(futures[fut], row)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
