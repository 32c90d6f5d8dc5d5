"""`sparsegp bench fit`: time to a good fit — how long each model's default `fit()` takes to
reach test scores within 1% of those of a converged fit, on standard and real data.

For each case and model the default `fit()` runs once, a copy of the parameters kept at every
iteration (or epoch) with its elapsed time (the copies' own time left out); the model is then
fitted on to convergence (`fit(maxiter=..., tol=1e-10)` from where the default stopped: the
reference). Afterwards the test scores of every kept state are computed: the table gives the
first time at which the test RMSE (regression; the error rate for classification) is within
1% of the reference's and the test NLPD (mean −log p(y*)) within log 1.01 nats of it (the
geometric-mean predictive density within 1%), the default fit's own time, iterations and
scores, and the reference's; and, for a peer's row, when sparsegp's default SGPR fit first
scored at least as well as the peer's end.

Cases: friedman1 (Friedman 1991: 10 inputs on [0, 1], 5 of them relevant, noise 1; seeded, N
= 20,000 training and 5,000 test points) for SGPR (VFE; Power EP α = 0.5), SVGP (Gaussian)
and GPR (on the first 3,000 points); friedman1's targets above their median as labels (N =
5,000) for SGPC; and, when DATA_DIR holds them (docs/data.md), kin40k (10,000 training
points, 5,000 test) and the UCI power plant data (split 0 of `uci/power-plant`: 8,611
training points, 957 test, standardised by the training data) for the regression models and
the Pima diabetes data (classification, a seeded two-thirds split) for SGPC. Where GPyTorch
is installed, its SGPR with its tutorials' recipe (Adam, lr 0.1, 200 steps; `fit_peers.py`)
is scored against the converged sparsegp SGPR (VFE) of the same case; so is GPflow's SGPR
with its usual recipe (SciPy's L-BFGS-B from sparsegp's starting values) where GPflow
imports. `--quick` is a smoke test of every path, not a measurement: 500 training and
500 test points of each regression case (GPR on 300 of them), 300 and 300 of friedman1's
labels, GPyTorch's recipe for 20 steps, and references of 100 iterations (SGPC: 10 rounds).
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..experiments.shared.data import missing_uci, uci_problem
from .fit_peers import (
    GPYTORCH_STEPS,
    PeerFit,
    gpflow_missing,
    gpflow_sgpr_fit,
    gpytorch_available,
    gpytorch_sgpr_fit,
)
from .speed import bench_parser, machine, parse_bench_args, report

if TYPE_CHECKING:
    from ..models import Model
    from ..training import FitResult

#: the UCI regression set (docs/data.md): 9,568 points of 4 inputs, split 0 (8,611 training)
UCI_SET = "power-plant"
#: "within 1%": RMSE (or error rate) ≤ 1.01 × the reference's; NLPD ≤ the reference's
#: + log 1.01 nats, a geometric-mean predictive density within 1% of the reference's (1% of
#: the NLPD's own magnitude would be no tolerance at all where the NLPD is near 0).
WITHIN = 0.01


@dataclass
class Case:
    """A data set: training and test arrays, and whether its targets are labels."""

    name: str
    X: np.ndarray
    y: np.ndarray
    Xs: np.ndarray
    ys: np.ndarray
    labels: bool = False


@dataclass
class Trace:
    """The kept states of a fit: elapsed seconds and the parameters at each."""

    seconds: list[float] = field(default_factory=list)
    states: list[dict[str, Any]] = field(default_factory=list)


def friedman1(n: int, seed: int, noise: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Friedman's first function: y = 10 sin(π x₁x₂) + 20 (x₃ − ½)² + 10 x₄ + 5 x₅ + ε,
    X uniform on [0, 1]¹⁰ (x₆…x₁₀ irrelevant), ε ~ N(0, noise²)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 10))
    f = (10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3]
         + 5 * X[:, 4])
    return X, f + noise * rng.standard_normal(n)


#: --quick's sizes: training and test points of a regression case, of a classification case
QUICK_N, QUICK_LABELS = (500, 500), (300, 300)
#: --quick's reference fits: L-BFGS-B iterations, SGPC rounds
QUICK_REFERENCE, QUICK_ROUNDS = 100, 10


def standard_cases(quick: bool) -> list[Case]:
    n, test = QUICK_N if quick else (20_000, 5_000)
    X, y = friedman1(n + test, seed=0)
    cases = [Case("friedman1", X[:n], y[:n], X[n:], y[n:])]
    m, test = QUICK_LABELS if quick else (5_000, test)
    Xc, yc = friedman1(m + test, seed=1)
    labels = (yc > np.median(yc)).astype(float)
    cases.append(Case("friedman1 labels", Xc[:m], labels[:m], Xc[m:], labels[m:], True))
    return cases


def data_cases(folder: Path | None, quick: bool) -> list[Case]:
    """kin40k, the UCI power plant data and the Pima diabetes data, where `folder` holds
    them."""
    cases: list[Case] = []
    if folder is None:
        return cases
    kin = folder / "kin40k"
    names = ["kin40k_train_data.asc.gz", "kin40k_train_labels.asc.gz",
             "kin40k_test_data.asc.gz", "kin40k_test_labels.asc.gz"]
    if all((kin / f).is_file() for f in names):
        X, y, Xs, ys = (np.loadtxt(kin / f, dtype=np.float64) for f in names)
        rng = np.random.default_rng(0)
        n, test = QUICK_N if quick else (X.shape[0], 5_000)
        keep = rng.choice(X.shape[0], n, replace=False)
        keep_s = rng.choice(Xs.shape[0], test, replace=False)
        cases.append(Case("kin40k", X[keep], y[keep].ravel(), Xs[keep_s], ys[keep_s].ravel()))
    if not missing_uci(folder, (UCI_SET,), 1):  # split 0, standardised by its training data
        p = uci_problem(folder, UCI_SET, 0)
        n, test = QUICK_N if quick else (p.X.shape[0], p.Xs.shape[0])
        cases.append(Case(UCI_SET, p.X[:n], p.y[:n], p.Xs[:test], p.ys[:test]))
    pima = folder / "classification" / "pima_indians_diabetes.csv"
    if pima.is_file():
        data = np.loadtxt(pima, delimiter=",", skiprows=1)
        rng = np.random.default_rng(0)
        order = rng.permutation(data.shape[0])
        cut = 2 * data.shape[0] // 3
        train, test_rows = data[order[:cut]], data[order[cut:]]
        cases.append(Case("pima", train[:, :-1], train[:, -1], test_rows[:, :-1],
                          test_rows[:, -1], True))
    return cases


def regression_M(quick: bool) -> int:
    """The M of the sparse models: SGPR's default min(N, 100)."""
    return 100


def regression_models(quick: bool) -> dict[str, Callable[[Any, Any], Any]]:
    import sparsegp as sg

    exact_rows = 300 if quick else 3_000
    return {"SGPR (VFE)": lambda X, y: sg.SGPR(X, y),
            "SGPR (PEP, α = 0.5)": lambda X, y: sg.SGPR(X, y, approximation="pep", alpha=0.5),
            "SVGP": lambda X, y: sg.SVGP(X, y),
            f"GPR (first {exact_rows} points)": lambda X, y: sg.GPR(X[:exact_rows],
                                                                   y[:exact_rows])}


def classification_models(quick: bool) -> dict[str, Callable[[Any, Any], Any]]:
    import sparsegp as sg

    # a common default: standardised inputs (Pima's columns differ in scale by 10³)
    return {"SGPC": lambda X, y: sg.SGPC(X, y, standardize_X=True)}


def traced_fit(model: Model, **options: Any) -> tuple[FitResult, Trace]:
    """The model's `fit(**options)` with a copy of its parameters after every iteration."""
    trace = Trace()
    spent = [0.0]  # the copies' own time, left out of the elapsed seconds
    start = time.perf_counter()

    def keep(*_: object) -> None:
        t = time.perf_counter()
        trace.states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        trace.seconds.append(t - start - spent[0])
        spent[0] += time.perf_counter() - t

    keep()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = model.fit(callback=keep, progress=False, **options)
    seconds = time.perf_counter() - start - spent[0]
    trace.states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    trace.seconds.append(seconds)
    return result, trace


def scores(model: Model, case: Case) -> tuple[float, float]:
    """(test RMSE or error rate, test NLPD) of the model as it is."""
    import torch

    with torch.no_grad():
        nlpd = -float(np.mean(model.predict_log_density(case.Xs, case.ys)))
        if case.labels:
            return float(np.mean(model.predict(case.Xs) != case.ys)), nlpd
        mean = model.predict_y(case.Xs)[0]
    return float(np.sqrt(np.mean((mean - case.ys) ** 2))), nlpd


def settle_q(model: Any) -> None:
    """SVGP's full-batch fit optimises the hyperparameters with q(u) at its optimum given
    them (the collapsed bound) and sets q(u) there at the end: a state kept on the way holds
    the starting q(u), so set it as that fit would have before scoring it."""
    from ..likelihoods import Gaussian

    if hasattr(model, "natural_gradient_step") and isinstance(model.likelihood, Gaussian):
        model.natural_gradient_step(1.0)


def good(point: float, nlpd: float, ref: tuple[float, float]) -> bool:
    return point <= (1 + WITHIN) * ref[0] + 1e-12 and nlpd <= ref[1] + math.log1p(WITHIN) + 1e-12


def first_index(last: int, ok: Callable[[int], bool]) -> int | None:
    """The first of the states 0..last with `ok` (None when not even the last is): a coarse
    pass over the states, then a fine one before the first good state it found; `ok` is
    called at most once per state."""
    ok = functools.cache(ok)
    if not ok(last):
        return None
    step = max(1, last // 40)
    coarse = next(i for i in list(range(0, last, step)) + [last] if ok(i))
    return next(j for j in range(max(0, coarse - step + 1), coarse + 1) if ok(j))


def first_state(model: Model, case: Case, trace: Trace, ok_scores: Callable[[float, float], bool]
                ) -> tuple[float | None, int | None]:
    """(seconds, iteration) of the first kept state whose test scores pass `ok_scores` (None
    when not even the last does); states are scored as needed."""

    def ok(i: int) -> bool:
        model.load_state_dict(trace.states[i])
        settle_q(model)
        return ok_scores(*scores(model, case))

    i = first_index(len(trace.states) - 1, ok)
    return (None, None) if i is None else (trace.seconds[i], i)


def first_good(model: Model, case: Case, trace: Trace, ref: tuple[float, float]
               ) -> tuple[float | None, int | None]:
    """(seconds, iteration) of the first kept state within 1% of the reference."""
    return first_state(model, case, trace, lambda point, nlpd: good(point, nlpd, ref))


def peer_row(case: Case, peer: PeerFit, ref: tuple[float, float],
             ours: Callable[[float, float], tuple[float | None, int | None]]) -> dict[str, Any]:
    """The table row of a peer's fit, scored against sparsegp's converged `ref`; `ours(point,
    nlpd)`: when sparsegp's default fit first scored at least as well as the peer's end."""
    score = functools.cache(peer.score)  # the last state's scores serve twice
    at = first_index(len(peer.seconds) - 1, lambda i: good(*score(i), ref))
    end = score(len(peer.seconds) - 1)
    return {"case": case.name, "N": case.X.shape[0], "model": peer.model,
            "fit_seconds": peer.fit_seconds, "iterations": peer.iterations,
            "stopped": peer.stopped[:60], "good_seconds": None if at is None else peer.seconds[at],
            "good_at": at, "default": end, "reference": ref,
            "reference_seconds": float("nan"), "ours_at_peer_end": ours(*end)}


def run_case(case: Case, name: str, build: Callable[[Any, Any], Any], reference_maxiter: int
             ) -> tuple[dict[str, Any], Callable[[float, float], tuple[float | None, int | None]]]:
    """The table row of a model's default fit, and `reached(point, nlpd)`: (seconds, iteration)
    of the first kept state of that fit scoring at least as well as (point, nlpd)."""
    model = build(case.X, case.y)
    result, trace = traced_fit(model)
    default_scores = scores(model, case)
    iterations = getattr(result, "iterations", len(trace.states) - 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        more = {"tol": 1e-10} if "tol" in model.fit_options else {}
        if "maxiter" in model.fit_options:
            more["maxiter"] = reference_maxiter
        model.fit(progress=False, **more)
        reference_seconds = result.seconds + time.perf_counter() - start
    ref = scores(model, case)
    seconds, at = first_good(model, case, trace, ref)

    def reached(point: float, nlpd: float) -> tuple[float | None, int | None]:
        return first_state(model, case, trace, lambda p, n: p <= point and n <= nlpd)

    return {"case": case.name, "N": case.X.shape[0], "model": name,
            "fit_seconds": trace.seconds[-1], "iterations": iterations,
            "stopped": str(result.message)[:60], "good_seconds": seconds, "good_at": at,
            "default": default_scores, "reference": ref,
            "reference_seconds": reference_seconds}, reached


def format_rows(rows: list[dict[str, Any]]) -> str:
    lines = ["| case | N | model | default fit (s) | iterations | within 1% after (s) | "
             "test RMSE / error: default, converged | test NLPD: default, converged | "
             "converged after (s) | SGPR (VFE) at these end scores after (s) |",
             "|---|---:|---|---:|---:|---:|---|---|---:|---:|"]
    for r in rows:
        good_s = "—" if r["good_seconds"] is None else f"{r['good_seconds']:.1f} (it. {r['good_at']})"
        ours = ""
        if "ours_at_peer_end" in r:
            s, i = r["ours_at_peer_end"]
            ours = "not reached" if s is None else f"{s:.1f} (it. {i})"
        lines.append(
            f"| {r['case']} | {r['N']} | {r['model']} | {r['fit_seconds']:.1f} | "
            f"{r['iterations']} | {good_s} | {r['default'][0]:.4f}, {r['reference'][0]:.4f} | "
            f"{r['default'][1]:.4f}, {r['reference'][1]:.4f} | "
            + ("(SGPR's)" if r["reference_seconds"] != r["reference_seconds"]
               else f"{r['reference_seconds']:.1f}") + f" | {ours} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = bench_parser("sparsegp bench fit", __doc__, 1)
    next(a for a in p._actions if a.dest == "quick").help = (
        f"a smoke test of every path in seconds, not a measurement: {QUICK_N[0]} training "
        f"points per regression case, {QUICK_LABELS[0]} of labels, references of "
        f"{QUICK_REFERENCE} iterations ({QUICK_ROUNDS} SGPC rounds)")
    p.add_argument("--data-dir", type=Path,
                   help="folder with kin40k/ and classification/ (docs/data.md); without it "
                        "only the simulated cases run")
    p.add_argument("--models", help="comma-separated names to run (default: all), e.g. SGPR,SVGP")
    p.add_argument("--reference-maxiter", type=int,
                   help="iterations (SGPC: rounds) of the converged reference fit (default "
                        f"1000; with --quick {QUICK_REFERENCE}, SGPC {QUICK_ROUNDS} rounds)")
    args = parse_bench_args(p, argv)
    rounds = args.reference_maxiter  # SGPC's maxiter counts rounds of sweeps and steps
    if args.reference_maxiter is None:
        args.reference_maxiter = QUICK_REFERENCE if args.quick else 1000
        rounds = QUICK_ROUNDS if args.quick else 1000
    if args.reference_maxiter < 1:
        p.error("--reference-maxiter must be a positive integer")
    print(machine(), flush=True)
    cases = standard_cases(args.quick) + data_cases(args.data_dir, args.quick)
    wanted = None if not args.models else [m.strip() for m in args.models.split(",")]
    peers = gpytorch_available() and (wanted is None or "GPyTorch" in wanted)
    if not gpytorch_available():
        print("GPyTorch is not installed: its row is left out", flush=True)
    gpflow = wanted is None or "GPflow" in wanted
    if gpflow and (reason := gpflow_missing()) is not None:
        print(reason, flush=True)
        gpflow = False
    rows = []
    for case in cases:
        models = (classification_models if case.labels else regression_models)(args.quick)
        for name, build in models.items():
            if wanted is not None and not any(name.startswith(w) for w in wanted):
                continue
            row, reached = run_case(case, name, build,
                                    rounds if case.labels else args.reference_maxiter)
            rows.append(row)
            print(format_rows([row]).splitlines()[-1], flush=True)
            if name != "SGPR (VFE)":
                continue
            for peer in ("GPyTorch", "GPflow"):
                if peer == "GPyTorch" and peers:
                    done = gpytorch_sgpr_fit(case, regression_M(args.quick),
                                             20 if args.quick else GPYTORCH_STEPS)
                elif peer == "GPflow" and gpflow:  # from the default SGPR's starting values
                    done = gpflow_sgpr_fit(case, build(case.X, case.y))
                else:
                    continue
                rows.append(peer_row(case, done, row["reference"], reached))
                print(format_rows(rows[-1:]).splitlines()[-1], flush=True)
    if not rows:
        p.error("no model matched --models")
    report(format_rows(rows), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
