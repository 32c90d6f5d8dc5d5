"""The classification part of `sparsegp experiment bui2017` (Bui, Yan & Turner 2017, §4.3):
Power EP with a probit likelihood on six small binary data sets, trained stochastically.

Data: DATA_DIR/classification/<name>.csv (features, then `label` ∈ {0, 1}). Split s of a
data set is a stratified random 80/20 train/test split drawn from
`numpy.random.default_rng([2017, crc32(name), s])` (the paper uses random splits without
publishing them); inputs are standardised with the training means and standard deviations.
Methods: the α grid of the regression parts (`grid.METHODS`, so the same names,
pairs and colours): "PEP α" and "EP" (α = 1) are `SGPC(alpha=α)` fitted by the stochastic
Power-EP schedule (§3.9: a batch's sites swept twice in parallel, then an Adam step on the
batch's energy, without waiting for the sites to converge); "VFE" is the α → 0 limit, which
SGPC does not take (α ∈ (0, 1]), so it is `SVGP` with a probit Bernoulli likelihood (Hensman
et al. 2015; docs/math.md §5), trained with the same batches, epochs and Adam step size (natural
gradients on q(u)). One row is not in the paper: "PEP 0.001", SGPC at α = 10⁻³ (α → 0 by
the PEP rows' own optimiser): against "VFE" it measures the optimiser, against the other
powers the power. Every method at (data set, split, M) starts from the same k-means++
inducing inputs and the same data-driven SE-ARD hyperparameters. Metrics: test error rate
and test NLL (lower is better).

Protocol (FULL): 150 epochs of one batch of all training points (≤ 614 here), Adam lr 0.05,
γ = 0.5: on pima (M = 100) the energies of VFE and PEP 0.5 are then within 0.5 nats of
their values after 300 steps (EP's, and all on sonar at M = 100, still creep up by a few
nats per 100 steps while the test NLL worsens). The paper's nine methods (4320 runs) take
about 6.5 core-hours, 3.2 hours with --jobs 2 (timed on a busy 2-core machine); the small
power's row adds 480 runs.
The grid was run with one batch of all sites because, when it ran, SGPC's minibatch energy
built q(u) from the batch's sites alone (scaled by N/|batch|) and its Adam steps stalled far
below the full-batch energy (pima, PEP 0.5, M = 20, 150 epochs of batches of 50: −308 against
−294.6). Since sparsegp 0.3.0 the minibatch energy is unbiased (q(u) of all the sites) and
batches of 50 reach −294.7 there: `Stochastic.batch_size` now gives the paper's
minibatch protocol.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...features.initialisation import initial_inducing_inputs
from ...kernels import SquaredExponential
from ...likelihoods import Bernoulli
from ...models import SGPC, SVGP
from ..shared.data import Problem, standardise
from .grid import PAIRS as GRID_PAIRS
from .grid import POWERS, Method, method
from .runs import Task, recorded

PART = "classification"
#: The data sets of the paper's Table 2 (files below DATA_DIR/classification).
DATASETS = ("australian", "breast_cancer_wisconsin", "crabs", "ionosphere",
            "pima_indians_diabetes", "sonar")
#: α → 0 by SGPC itself (not in the paper): it separates the power from the optimiser.
SMALL_POWER = Method("PEP 0.001", "pep", 1e-3, line=":", marker="^")
#: VFE (α → 0, by SVGP), Power EP and EP (α = 1, by SGPC): the regression parts' methods,
#: and SGPC at the small power.
METHODS: tuple[Method, ...] = (method("VFE"), SMALL_POWER,
                               *(method(n) for n in (*(f"PEP {a:g}" for a in POWERS), "EP")))
NAMES = tuple(m.name for m in METHODS)
#: The pairs of the win-rate tables: the regression parts' and two that the small power adds
#: (the optimiser: PEP 0.001 against VFE; the power with one optimiser: PEP 0.5 against it).
PAIRS = (*GRID_PAIRS, (SMALL_POWER.name, "VFE"), ("PEP 0.5", SMALL_POWER.name))
METRICS = ("error_rate", "nll")
TEST_FRACTION = 0.2
#: Predictive probabilities are clipped to [ε, 1 − ε] before the log loss.
EPS = 1e-12


# -- data ---------------------------------------------------------------------------------
def data_file(data_dir: Path, name: str) -> Path:
    return Path(data_dir) / "classification" / f"{name}.csv"


def missing_classification(data_dir: Path, names: tuple[str, ...] = DATASETS) -> list[str]:
    """The classification files of `names` that are not in `data_dir` (empty if all are)."""
    return [str(data_file(data_dir, n)) for n in names if not data_file(data_dir, n).is_file()]


@lru_cache(maxsize=8)
def _table(path: str) -> tuple[np.ndarray, np.ndarray]:
    data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    return data[:, :-1], data[:, -1]


def split_indices(y: np.ndarray, name: str, split: int,
                  test_fraction: float = TEST_FRACTION) -> tuple[np.ndarray, np.ndarray]:
    """Sorted (training, test) row indices of split `split`: per class, a seeded random
    round(test_fraction · n_class) of its rows are for testing, the rest for training."""
    rng = np.random.default_rng([2017, zlib.crc32(name.encode()), split])
    test = []
    for c in np.unique(y):
        rows = np.flatnonzero(y == c)
        test.append(rng.permutation(rows)[: int(round(test_fraction * rows.size))])
    te = np.sort(np.concatenate(test))
    return np.setdiff1d(np.arange(y.size), te), te


def classification_problem(data_dir: Path, name: str, split: int,
                           test_fraction: float = TEST_FRACTION) -> Problem:
    """Data set `name`, split `split`: inputs standardised by the training statistics (a
    constant training column only centred), labels in {0, 1} as they are."""
    X, y = _table(str(data_file(data_dir, name)))
    tr, te = split_indices(y, name, split, test_fraction)
    p = standardise(X[tr], y[tr], X[te], y[te])
    return Problem(p.X, y[tr], p.Xs, y[te])


# -- metrics ------------------------------------------------------------------------------
def error_rate(ys: np.ndarray, p: np.ndarray) -> float:
    """Fraction of test labels ys ∈ {0, 1} [N*] misclassified by predicting 1 iff p > ½."""
    return float(np.mean((p > 0.5) != (ys == 1)))


def bernoulli_nll(ys: np.ndarray, p: np.ndarray) -> float:
    """Mean over test points of −log p(y*|D): −[y log p + (1 − y) log(1 − p)], p = P(y* = 1)
    clipped to [ε, 1 − ε]. Shapes: ys, p [N*]."""
    p = np.clip(p, EPS, 1.0 - EPS)
    return float(-np.mean(np.where(ys == 1, np.log(p), np.log1p(-p))))


# -- tasks --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stochastic:
    """The stochastic training protocol shared by every method (Bui et al. 2017, §3.9):
    `epochs` passes over batches of `batch_size` points (None: one batch of all of them),
    Adam steps of size `lr`; SGPC sweeps each batch's sites `sweeps` times before its step,
    SVGP takes a natural-gradient step of size `gamma` on q(u) before its step."""

    epochs: int = 150
    batch_size: int | None = None
    lr: float = 0.05
    sweeps: int = 2
    gamma: float = 0.5

    def identity(self) -> dict[str, Any]:
        return {f"classification_{k}": v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class ClassificationTask(Task):
    """One classification run: `Task` with the training protocol; `maxiter` holds the epochs."""

    fit: Stochastic = field(default_factory=Stochastic)

    @property
    def cost(self) -> float:
        """Relative cost for the ETA, in the regression tasks' units (~0.8 ns): per step
        1.6e7 + 4e4·N + 5·N·M² for SGPC, 0.65 of that for SVGP (timed on pima, australian,
        sonar, ionosphere and crabs at M = 10 … 100)."""
        steps = self.fit.epochs * math.ceil(self.n_train / self.batch_size)
        factor = 0.65 if self.method == "VFE" else 1.0
        return steps * factor * (1.6e7 + 4e4 * self.n_train + 5.0 * self.n_train * self.M**2)

    @property
    def batch_size(self) -> int:
        return min(self.fit.batch_size or self.n_train, self.n_train)

    def run(self, data_dir: Path) -> dict[str, Any]:
        return run_classification_task(self, data_dir)


@dataclass(frozen=True)
class ClassificationConfig:
    """The classification grid: data sets × `splits` random splits × M × `NAMES`, trained
    by the protocol `fit`."""

    mode: str
    datasets: tuple[str, ...] = DATASETS
    splits: int = 20
    Ms: tuple[int, ...] = (10, 20, 50, 100)
    fit: Stochastic = field(default_factory=Stochastic)

    def identity(self) -> dict[str, Any]:
        """What a result store must agree with (rows of another protocol are not mixed in)."""
        return {"classification_test_fraction": TEST_FRACTION, **self.fit.identity()}


FULL = ClassificationConfig("full")
QUICK = ClassificationConfig("quick", datasets=("crabs", "sonar"), splits=2, Ms=(10,),
                             fit=Stochastic(epochs=20))


def classification_config(mode: str) -> ClassificationConfig:
    """QUICK for the --quick mode, FULL otherwise."""
    return QUICK if mode == "quick" else FULL


def classification_tasks(cfg: ClassificationConfig, data_dir: Path) -> list[ClassificationTask]:
    """Split by split (so that a partial run holds whole splits), data set, M and method.
    (Stratified splits of a data set all have the same training size: split 0's.)"""
    sizes = {n: split_indices(_table(str(data_file(data_dir, n)))[1], n, 0)[0].size
             for n in cfg.datasets}
    return [ClassificationTask(PART, n, s, M, m, cfg.fit.epochs, sizes[n], fit=cfg.fit)
            for s in range(cfg.splits) for n in cfg.datasets for M in cfg.Ms for m in NAMES]


def effective_M(X: np.ndarray, M: int) -> int:
    """M capped at the number of distinct training inputs (k-means++ needs distinct centres)."""
    return min(M, np.unique(X, axis=0).shape[0])


def build_classifier(name: str, data: Problem, M: int, seed: int) -> SGPC | SVGP:
    """The model of method `name` on the training data: SE-ARD kernel, k-means++ inducing
    inputs of `seed` (the same for every method)."""
    alpha = method(name, METHODS).power
    Z = initial_inducing_inputs(torch.as_tensor(data.X), M, "kmeans++", seed).numpy()
    kernel = SquaredExponential(ard=True)
    if alpha == 0.0:
        return SVGP(data.X, data.y, kernel=kernel, likelihood=Bernoulli("probit"),
                    inducing_points=Z)
    return SGPC(data.X, data.y, kernel=kernel, inducing_points=Z, alpha=alpha, link="probit")


def fit_classifier(model: SGPC | SVGP, fit: Stochastic, seed: int) -> Any:
    """The stochastic protocol, quietly; returns the `FitResult`."""
    B = min(fit.batch_size or model.num_data, model.num_data)
    if isinstance(model, SVGP):
        return model.fit(batch_size=B, epochs=fit.epochs, lr=fit.lr, natgrad=True,
                         gamma=fit.gamma, progress=False, seed=seed)
    return model.fit(schedule="stochastic", batch_size=B, epochs=fit.epochs,
                     lr=fit.lr, sweeps_per_batch=fit.sweeps, progress=False, seed=seed)


def run_classification_task(task: ClassificationTask, data_dir: Path) -> dict[str, Any]:
    """Fit, score and describe one task as a store row; errors become a "failed" row.
    Columns: the key, epochs, seed, status, error, error_rate, nll, energy (final Power-EP
    energy or ELBO), steps, finished (no stop on an error), message, n_train, n_test, M_used, seconds."""

    def score() -> dict[str, Any]:
        data = classification_problem(data_dir, task.dataset, task.split)
        M = effective_M(data.X, task.M)
        model = build_classifier(task.method, data, M, task.seed)
        result = fit_classifier(model, task.fit, task.seed)
        p = model.predict_proba(data.Xs)
        return dict(error_rate=error_rate(data.ys, p), nll=bernoulli_nll(data.ys, p),
                    energy=model.log_marginal_likelihood(), steps=int(result.evaluations),
                    finished=bool(result.success), message=str(result.message)[:200],
                    n_train=int(data.X.shape[0]), n_test=int(data.Xs.shape[0]), M_used=M)

    return recorded(task, {"epochs": task.fit.epochs}, score, ("error_rate", "nll"))
