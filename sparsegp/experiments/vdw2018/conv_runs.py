"""Resumable training runs for `sparsegp experiment vdw2018-conv`: checkpoints, traces, scores.

A run (one kernel on one task) trains in segments of a few optimiser steps: Adam on
minibatches through `SVGP.fit(data=...)`, or full-batch L-BFGS-B through `training.fit_lbfgsb`.
After a segment the fit's callback records a trace point when one is due (the ELBO per
training image estimated on a fixed subset of the training images, test error and NLPP on a
fixed subset of the test images, against training seconds, evaluation time excluded) and
writes a checkpoint when one is due: the model (`model.save`, read back with `sparsegp.load`)
and a JSON file of progress. Rerun into the same folder, a finished run is skipped and an
unfinished one continues from its last checkpoint, with fresh optimiser state (Adam moments
and L-BFGS memory are not saved; minibatches are seeded by segment, so a resumed run sees the
batches it would have seen). A run that raises is recorded as failed with the reason, the
others go on, and the next rerun tries it again (from its last checkpoint, if it has one).
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ...models import SVGP, load
from ...runtime.files import write_atomically
from ...training import fit_lbfgsb
from ...training.interrupts import interrupts_end_run
from ...training.result import FitTerminated
from ..shared.progress import clock

Log = Callable[[str], None]


@dataclass
class Images:
    """A task's images as rows of pixels in [0, 1] (on the run's device) and its fixed subsets.

    Shapes: X [N, H·W], y [N], Xs [N*, H·W], ys [N*]; the trace subsets likewise."""

    X: Tensor
    y: Tensor
    Xs: Tensor
    ys: Tensor
    image_shape: tuple[int, int]
    trace_X: Tensor
    trace_y: Tensor
    trace_Xs: Tensor
    trace_ys: Tensor


@dataclass(frozen=True)
class Spec:
    """One run: a kernel on a task, a model builder and the optimiser's budget.

    `steps` Adam steps on minibatches of `batch` (or L-BFGS-B iterations), `segment` steps
    between checkpoint opportunities, `evals` trace points (log-spaced over the segments)."""

    task: str
    kernel: str
    build: Callable[[Tensor, Tensor], Any] = field(compare=False, repr=False)
    optimiser: str = "adam"
    steps: int = 1000
    segment: int = 10
    batch: int = 100
    lr: float = 0.01
    evals: int = 8
    setting: tuple[tuple[str, Any], ...] = ()  # data sizes etc.: a checkpoint must match them

    @property
    def name(self) -> str:
        return f"{self.task}-{self.kernel.replace(' + ', '-plus-')}"

    @property
    def segments(self) -> int:
        return math.ceil(self.steps / self.segment)

    def identity(self) -> dict[str, Any]:
        """What a checkpoint must agree with to be resumed."""
        return {"task": self.task, "kernel": self.kernel, "optimiser": self.optimiser,
                "steps": self.steps, "segment": self.segment, "batch": self.batch, "lr": self.lr,
                **dict(self.setting)}


class Segments:
    """Minibatches for `fit(data=...)`: each pass is one segment of `steps` batches of `batch`
    rows, drawn without replacement from permutations seeded by the segment's index."""

    def __init__(self, X: Tensor, y: Tensor, batch: int, steps: int, first: int, seed: int = 0):
        self.X, self.y, self.batch, self.steps = X, y, min(batch, X.shape[0]), steps
        self.next, self.seed = first, seed

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.next)
        self.next += 1
        N, need = self.X.shape[0], self.steps * self.batch
        order = torch.cat([torch.randperm(N, generator=g) for _ in range(math.ceil(need / N))])
        order = order[:need].to(self.X.device)
        for s in range(self.steps):
            rows = order[s * self.batch:(s + 1) * self.batch]
            yield self.X[rows], self.y[rows]


def scores(model: SVGP, Xs: Tensor, ys: Tensor, chunk: int = 1000) -> tuple[float, float]:
    """(test error, NLPP): the error of the most probable class and the mean −log p(y*|data),
    from one pass of q(f*) per chunk of `chunk` images. Shapes: Xs [N*, D], ys [N*]."""
    wrong, nlp = 0.0, 0.0
    lik = model.likelihood
    for i in range(0, Xs.shape[0], chunk):
        x, y = Xs[i:i + chunk], ys[i:i + chunk]
        mean, var = (torch.as_tensor(a, dtype=torch.float64) for a in model.predict_f(x))
        y = y.to(torch.float64).cpu()
        with torch.no_grad():
            p = lik.predict_mean_and_var(mean, var)[0]
            guess = p.argmax(-1) if p.dim() == 2 else (p > 0.5).to(y.dtype)
            wrong += float((guess != y).sum())
            nlp -= float(lik.predict_log_density(mean, var, y).sum())
    return wrong / Xs.shape[0], nlp / Xs.shape[0]


def elbo_per_datum(model: SVGP, X: Tensor, y: Tensor) -> float:
    """The ELBO per training image, estimated (unbiasedly) from the fixed subset (X, y)."""
    with torch.no_grad():
        return float(model.elbo(*model.internal_batch(X, y))) / model.num_data


def _write_json(path: Path, record: dict[str, Any]) -> None:
    write_atomically(path, json.dumps(record, indent=1, default=float), what="checkpoint record")


def _save_model(model: SVGP, path: Path) -> None:
    model.save(path)  # atomic: an interrupted checkpoint leaves the previous one


def eval_points(segments: int, evals: int) -> set[int]:
    """Segment counts after which the trace is taken: ~`evals` log-spaced ones, 0 and the last."""
    points = np.unique(np.round(np.geomspace(1, max(segments, 1), max(evals, 2))).astype(int))
    return {0, segments, *(int(p) for p in points)}


def execute(spec: Spec, data: Images, folder: Path, log: Log | None, progress: bool | None,
            checkpoint_seconds: float, train: bool = True) -> dict[str, Any]:
    """Train `spec` to its budget, resuming from `folder` when a matching checkpoint is there;
    return its record (status 'done' with scores, or 'failed' with the reason). Without
    `train`, only read the record (status 'not run' when there is none for these settings)."""
    folder.mkdir(parents=True, exist_ok=True)
    say = log or (lambda _: None)
    jpath, mpath = folder / f"{spec.name}.json", folder / f"{spec.name}.pt"
    record = json.loads(jpath.read_text()) if jpath.is_file() else {}
    same = record.get("run") == spec.identity()
    if not train:
        return record if same else {"run": spec.identity(), "status": "not run"}
    if same and record.get("status") == "done":
        say(f"  {spec.name}: finished in an earlier run; skipped")
        return record
    if record and not same:
        say(f"  {spec.name}: the checkpoint in {folder} is for other settings; starting afresh")
        record = {}
    try:
        model = spec.build(data.X, data.y)
        if record.get("status") == "failed":
            say(f"  {spec.name}: failed before ({record.get('message')}); trying again")
        if record.get("segments", 0) > 0 and mpath.is_file():  # an unfinished or failed run
            model.load_state_dict(load(mpath).state_dict())
            say(f"  {spec.name}: resuming after segment {record['segments']} of {spec.segments} "
                f"({clock(record['train_seconds'])} trained)")
            record.update(status="running", message="")
        else:
            record = {"run": spec.identity(), "status": "running", "segments": 0,
                      "train_seconds": 0.0, "trace": [], "message": "",
                      "M": _inducing_count(model)}
        _train(spec, model, data, record, jpath, mpath, say, progress, checkpoint_seconds)
        start = time.perf_counter()
        error, nlpp = scores(model, data.Xs, data.ys)
        record.update(status="done", error=error, nlpp=nlpp,
                      elbo=elbo_per_datum(model, data.trace_X, data.trace_y),
                      test_seconds=time.perf_counter() - start)
        _save_model(model, mpath)
        say(f"  {spec.name}: test error {100 * error:.2f}%, NLPP {nlpp:.4f}, ELBO/N "
            f"{record['elbo']:.4f} ({clock(record['train_seconds'])} training)")
    except (KeyboardInterrupt, FitTerminated):
        say(f"  {spec.name}: interrupted; rerun with the same --out to resume")
        raise
    except Exception as err:  # noqa: BLE001 - one failed run must not end the experiment
        record.update(run=spec.identity(), status="failed", message=f"{type(err).__name__}: {err}")
        say(f"  {spec.name}: FAILED: {record['message']}")
    _write_json(jpath, record)
    return record


def _inducing_count(model: SVGP) -> str:
    blocks = getattr(model.feature, "blocks", None)
    return " + ".join(map(str, blocks)) if blocks else str(model.num_inducing)


def _train(spec: Spec, model: SVGP, data: Images, record: dict[str, Any], jpath: Path,
           mpath: Path, say: Log, progress: bool | None, checkpoint_seconds: float) -> None:
    """Run the remaining segments of `spec`, tracing and checkpointing from the fit's callback."""
    first, total = int(record["segments"]), spec.segments
    due = eval_points(total, spec.evals)
    state = {"mark": time.perf_counter(), "saved": time.perf_counter(), "said": 0.0,
             "started": time.perf_counter(), "done": first}

    def trace() -> None:
        error, nlpp = scores(model, data.trace_Xs, data.trace_ys)
        elbo = elbo_per_datum(model, data.trace_X, data.trace_y)
        record["trace"].append({"seconds": record["train_seconds"],
                                "step": record["segments"] * spec.segment, "elbo": elbo,
                                "error": error, "nlpp": nlpp})

    def checkpoint() -> None:
        _save_model(model, mpath)
        _write_json(jpath, record)
        state["saved"] = time.perf_counter()

    def after_segment(k: int) -> None:
        now = time.perf_counter()
        record["train_seconds"] += now - state["mark"]
        record["segments"] = state["done"] = k
        if k in due:
            trace()
        if k in due or time.perf_counter() - state["saved"] >= checkpoint_seconds:
            checkpoint()
        now = time.perf_counter()
        if k in due or now - state["said"] >= 30.0:
            rate = (now - state["started"]) / max(1, k - first)
            last = record["trace"][-1] if record["trace"] else None
            said = f", ELBO/N {last['elbo']:.4f}, error {100 * last['error']:.2f}%" if last else ""
            say(f"  {spec.name}: step {min(k * spec.segment, spec.steps)}/{spec.steps}{said} "
                f"(traced at step {last['step'] if last else 0}); {clock(record['train_seconds'])}"
                f" trained, ETA {clock(rate * (total - k))}")
            state["said"] = now
        state["mark"] = time.perf_counter()

    if first == 0 and not record["trace"]:
        trace()
    state["mark"] = time.perf_counter()
    if first < total:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the interrupt is re-raised below
            try:  # Ctrl-C ends the run too; the model is at its last accepted state
                with interrupts_end_run():
                    result = _fit(spec, model, data, first, total, after_segment, progress)
            except (KeyboardInterrupt, FitTerminated):  # SIGTERM: exit status 143
                record["segments"] = state["done"]
                checkpoint()
                raise
        if not result.success and state["done"] < total:
            record["message"] = f"training stopped early: {result.message}"
            say(f"  {spec.name}: {record['message']}")
    if record["segments"] not in due:  # an early stop: trace the final state too
        trace()


def _fit(spec: Spec, model: SVGP, data: Images, first: int, total: int,
         after_segment: Callable[[int], None], progress: bool | None) -> Any:
    if spec.optimiser == "lbfgs":  # one segment per iteration
        return fit_lbfgsb(model, maxiter=total - first, progress=progress,
                          callback=lambda it, _: after_segment(first + it))
    if spec.optimiser != "adam":
        raise ValueError(f"optimiser must be 'adam' or 'lbfgs'; got {spec.optimiser!r}")
    batches = Segments(data.X, data.y, spec.batch, spec.segment, first)
    return model.fit(data=batches, epochs=total - first, lr=spec.lr, natgrad=False,
                     progress=progress, callback=lambda epoch, _: after_segment(first + epoch + 1))
