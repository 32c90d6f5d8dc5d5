"""Bayesian optimisation with sparsegp's models (through `sparsegp.botorch.as_botorch`) against
BoTorch's `SingleTaskGP`, in two parts:

1. Small budgets, several seeds: Branin (2-D) and Hartmann-6, the same scrambled Sobol initial
   design and the same acquisition for every model (qLogExpectedImprovement, q = 1, optimised
   by `optimize_acqf`), each model refitted on all the data every iteration. Models:
   SingleTaskGP (BoTorch's defaults: SE ARD with the dimension-scaled log-normal lengthscale
   prior, a log-normal noise prior, outcome standardisation; a MAP fit); `sg.GPR` fitted by
   maximum marginal likelihood (sparsegp's defaults: SE ARD, no priors, y standardised);
   `sg.GPR` and `sg.SGPR` with BoTorch's lengthscale prior (`set_botorch_priors`: a MAP fit,
   lengthscales started at the prior's mode), SGPR with at most M inducing inputs (k-means++
   on the distinct inputs; fewer than N once N > M) and with M = N (all the distinct
   inputs: then SGPR is the exact GP). The sparsegp models hold the noise variance at 10⁻⁶
   of y's variance: the functions are noiseless, and a free noise variance lets the fit
   explain a few points as noise. Reported: the best simple regret (best value found minus
   the known optimum) per seed.
2. A large budget: 10-D Ackley on [-5, 10]^10 (minimised), batches of q points chosen by
   Thompson sampling on a candidate set (TuRBO-style perturbations of the incumbent: each
   coordinate perturbed with probability 20/d by N(0, 0.1²) in the unit cube, plus uniform
   Sobol points; BoTorch's `MaxPosteriorSampling` without replacement draws one joint
   posterior sample over the candidates per batch point). SGPR keeps M inducing inputs and
   is refitted every iteration warm-started (the previous hyperparameters and inducing inputs,
   a capped number of L-BFGS-B iterations) with its noise variance learned (with M ≪ N it
   absorbs what M inducing inputs cannot represent); SingleTaskGP is refitted by
   `fit_gpytorch_mll` and stops once one of its iterations (fit + acquisition) takes longer
   than a cap. The two loops take turns iteration by iteration from the same initial
   design, so a change of the machine's load hits both. The wall-clock seconds of each fit
   and each acquisition are recorded with one torch thread.

The machine's float64 GEMM rate (`sparsegp.benchmarking.speed.gemm_seconds`, the product
`sparsegp bench speed` measures its rates against) is measured at the start and at the end.

    OMP_NUM_THREADS=1 python benchmarks/bayesopt_scaling.py            # the full run (≈ 10 min)
    OMP_NUM_THREADS=1 python benchmarks/bayesopt_scaling.py --quick    # a smoke run (≈ 1 min)
    OMP_NUM_THREADS=1 python benchmarks/bayesopt_scaling.py --parts small --seeds 10

A run of one part keeps the other part's table in generated.md (read back from its CSV).
`--trust-region` draws the large budget's candidates inside a TuRBO-1 trust region
(`TrustRegion`: a box around the incumbent, per input scaled by the lengthscales, doubled
after 3 improving batches in a row, halved after ⌈max(4, d)/q⌉ that are not, restarted from
n0 fresh Sobol points once its side is below 0.5⁷), one per model, in place of the
fixed-scale perturbations; SGPR's inducing inputs then start each fit at the M evaluated
points nearest the region's centre (the other hyperparameters warm-started).

Writes small.csv, scaling.csv, scaling.png and generated.md (the machine, the GEMM rate and
the tables) to --out (results/bayesopt by default).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from botorch.acquisition import qLogExpectedImprovement
from botorch.fit import fit_gpytorch_mll
from botorch.generation.sampling import MaxPosteriorSampling
from botorch.models import SingleTaskGP
from botorch.optim import optimize_acqf
from botorch.sampling import SobolQMCNormalSampler
from botorch.test_functions import Ackley, Branin, Hartmann
from gpytorch.mlls import ExactMarginalLogLikelihood

import sparsegp as sg
from sparsegp.benchmarking.speed import gemm_seconds, machine
from sparsegp.botorch import as_botorch, set_botorch_priors

DT = torch.float64
ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = {"branin": (Branin(), 0.397887), "hartmann6": (Hartmann(dim=6), -3.32237)}
#: the small-budget models: BoTorch's, and sparsegp's fitted by maximum marginal likelihood
#: (ML-II) or with BoTorch's lengthscale prior (MAP); "sgpr_all" keeps every distinct input
SMALL_MODELS = {"stgp": "SingleTaskGP", "gpr": "GPR (ML-II)", "gpr_map": "GPR (MAP)",
                "sgpr_map": "SGPR (MAP, M ≤ {M})", "sgpr_all": "SGPR (MAP, M = N)"}


def unit_to_bounds(fn, u: torch.Tensor) -> torch.Tensor:
    """The test function (minimised) at u in the unit cube."""
    lo, hi = fn.bounds.to(u)
    return fn.evaluate_true(lo + (hi - lo) * u)


def distinct(X: torch.Tensor) -> int:
    return int(torch.unique(X, dim=0).shape[0])


def fit_model(kind: str, X: torch.Tensor, y: torch.Tensor, M: int, prev=None, maxiter=200,
              noiseless: bool = False, near: torch.Tensor | None = None):
    """A BoTorch model of (X, y) (y maximised): SingleTaskGP, or a fitted sparsegp model
    wrapped by `as_botorch` (kinds: `SMALL_MODELS`, "sgpr" without priors). `prev` is the
    previous sparsegp model (a warm start); `near` (a point) starts SGPR's inducing inputs
    at the M evaluated points nearest it (in lengthscales) in place of the previous ones;
    `noiseless` holds a sparsegp model's noise variance at 10⁻⁶ of y's variance."""
    if kind == "stgp":
        model = SingleTaskGP(X, y[:, None])
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
        return model, None
    if kind.startswith("gpr"):
        sparse = sg.GPR(X, y)
    else:
        Z = (nearest(X, near, M, prev) if near is not None
             else prev.inducing_points if prev is not None
             else distinct(X) if kind == "sgpr_all" else min(M, distinct(X)))
        sparse = sg.SGPR(X, y, inducing_points=Z)
    if kind.endswith(("_map", "_all")):
        set_botorch_priors(sparse)
    if prev is not None:
        warm = {k: v for k, v in prev.state_dict().items()
                if k.startswith("kernel.") or k == "raw_noise_variance"
                or (k == "feature.Z" and near is None)}
        sparse.load_state_dict(warm, strict=False)
    if noiseless:
        sparse.noise_variance = 1e-6 * float(y.var())
        sparse.freeze("noise_variance")
    sparse.fit(maxiter=maxiter, progress=False)
    return as_botorch(sparse), sparse


def nearest(X: torch.Tensor, centre: torch.Tensor, M: int, prev=None) -> torch.Tensor:
    """The min(M, distinct) distinct rows of X nearest `centre` (distances in the previous
    model's lengthscales, if any)."""
    U = torch.unique(X, dim=0)
    scale = (torch.as_tensor(prev.kernel.lengthscale, dtype=DT) if prev is not None
             else torch.ones(X.shape[1], dtype=DT))
    order = (((U - centre) / scale) ** 2).sum(1).argsort()
    return U[order[:M]]


def small_loop(problem: str, kind: str, seed: int, n0: int, iters: int, M: int) -> list[float]:
    """Best simple regret after the initial design and after each iteration."""
    fn, optimum = PROBLEMS[problem]
    d = fn.dim
    X = torch.quasirandom.SobolEngine(d, scramble=True, seed=seed).draw(n0).to(DT)
    y = -unit_to_bounds(fn, X)
    torch.manual_seed(seed)
    bounds = torch.stack([torch.zeros(d, dtype=DT), torch.ones(d, dtype=DT)])
    regret = [-float(y.max()) - optimum]
    for _ in range(iters):
        model, _ = fit_model(kind, X, y, M, noiseless=True)
        acq = qLogExpectedImprovement(model, best_f=y.max(),
                                      sampler=SobolQMCNormalSampler(torch.Size([128]), seed=0))
        x, _ = optimize_acqf(acq, bounds=bounds, q=1, num_restarts=4 if d <= 2 else 8,
                             raw_samples=64 if d <= 2 else 256)
        X, y = torch.cat([X, x]), torch.cat([y, -unit_to_bounds(fn, x)])
        regret.append(-float(y.max()) - optimum)
    return regret


def candidates(X: torch.Tensor, y: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """n candidates in the unit cube: 80% perturbations of the incumbent, 20% Sobol points."""
    g = torch.Generator().manual_seed(seed)
    d = X.shape[1]
    best = X[y.argmax()]
    local = n * 4 // 5
    mask = torch.rand(local, d, generator=g, dtype=DT) < min(1.0, 20.0 / d)
    mask[torch.arange(local), torch.randint(d, (local,), generator=g)] = True
    step = 0.1 * torch.randn(local, d, generator=g, dtype=DT)
    near = (best + mask * step).clamp(0.0, 1.0)
    far = torch.quasirandom.SobolEngine(d, scramble=True, seed=seed).draw(n - local).to(DT)
    return torch.cat([near, far])


class TrustRegion:
    """TuRBO-1's trust region (Eriksson et al., 2019) in the unit cube: a box around the
    incumbent of side `length` (per input, scaled by the model's lengthscales over their
    geometric mean), doubled after `succ_tol` batches in a row that improve the incumbent,
    halved after `fail_tol` batches in a row that do not, and restarted (a fresh design,
    side 0.8) once it is shorter than `lo`."""

    def __init__(self, d: int, q: int, length: float = 0.8, lo: float = 0.5 ** 7,
                 hi: float = 1.6, succ_tol: int = 3) -> None:
        self.d, self.length, self.lo, self.hi = d, length, lo, hi
        self.succ_tol, self.fail_tol = succ_tol, math.ceil(max(4.0 / q, d / q))
        self.succ = self.fail = 0
        self.best = -math.inf  # the incumbent since the last restart (maximised)
        self.centre: torch.Tensor | None = None

    def start(self, X: torch.Tensor, y: torch.Tensor) -> None:
        """Centre the region on the best of an initial design."""
        self.best, self.centre = float(y.max()), X[y.argmax()]

    def observe(self, X: torch.Tensor, y: torch.Tensor) -> bool:
        """Take a batch's values; True when the region has shrunk below `lo` (restart)."""
        top = float(y.max())
        if top > self.best + 1e-3 * abs(self.best):
            self.succ, self.fail = self.succ + 1, 0
        else:
            self.succ, self.fail = 0, self.fail + 1
        if top > self.best:
            self.best, self.centre = top, X[y.argmax()]
        if self.succ == self.succ_tol:
            self.length, self.succ = min(2.0 * self.length, self.hi), 0
        elif self.fail == self.fail_tol:
            self.length, self.fail = self.length / 2.0, 0
        return self.length < self.lo

    def candidates(self, lengthscale: torch.Tensor, n: int, seed: int) -> torch.Tensor:
        """n Sobol points in the box (each coordinate of the centre replaced with probability
        min(1, 20/d), at least one per point)."""
        assert self.centre is not None
        w = lengthscale / lengthscale.mean()
        w = w / w.prod() ** (1.0 / self.d)
        lo = (self.centre - w * self.length / 2).clamp(0.0, 1.0)
        hi = (self.centre + w * self.length / 2).clamp(0.0, 1.0)
        sobol = torch.quasirandom.SobolEngine(self.d, scramble=True, seed=seed).draw(n).to(DT)
        g = torch.Generator().manual_seed(seed)
        mask = torch.rand(n, self.d, generator=g, dtype=DT) < min(1.0, 20.0 / self.d)
        mask[torch.arange(n), torch.randint(self.d, (n,), generator=g)] = True
        return torch.where(mask, lo + (hi - lo) * sobol, self.centre)


def lengthscales(model, sparse) -> torch.Tensor:
    """The fitted model's lengthscales (unit-cube inputs)."""
    if sparse is not None:
        return torch.as_tensor(sparse.kernel.lengthscale, dtype=DT).reshape(-1)
    kernel = getattr(model.covar_module, "base_kernel", model.covar_module)
    return kernel.lengthscale.detach().to(DT).reshape(-1)


def scaling(args, rows: list[dict]) -> None:
    fn = Ackley(dim=args.dim)
    fn.bounds = torch.tensor([[-5.0] * args.dim, [10.0] * args.dim], dtype=DT)
    X0 = torch.quasirandom.SobolEngine(args.dim, scramble=True, seed=0).draw(args.n0).to(DT)
    y0 = -unit_to_bounds(fn, X0)
    state = {k: {"X": X0, "y": y0, "prev": None, "on": True, "tr": None, "restarts": 0}
             for k in ("sgpr", "stgp")}
    if args.trust_region:
        for s in state.values():
            s["tr"] = TrustRegion(args.dim, args.q)
            s["tr"].start(X0, y0)
    it = 0
    while any(s["on"] for s in state.values()):
        it += 1
        for kind, s in state.items():
            if not s["on"]:
                continue
            X, y, tr = s["X"], s["y"], s["tr"]
            torch.manual_seed(1000 + it)
            t0 = time.perf_counter()
            model, s["prev"] = fit_model(kind, X, y, args.M, s["prev"], maxiter=args.maxiter,
                                         near=None if tr is None else tr.centre)
            t1 = time.perf_counter()
            if tr is None:
                cand = candidates(X, y, args.candidates, seed=it)
            else:
                cand = tr.candidates(lengthscales(model, s["prev"]), args.candidates, seed=it)
            with torch.no_grad():
                x = MaxPosteriorSampling(model, replacement=False)(cand, num_samples=args.q)
            t2 = time.perf_counter()
            fx = -unit_to_bounds(fn, x)
            s["X"], s["y"] = torch.cat([X, x]), torch.cat([y, fx])
            row = {"model": kind, "iteration": it, "N": len(X), "fit_s": t1 - t0,
                   "acquisition_s": t2 - t1, "best": -float(s["y"].max())}
            if tr is not None:
                row["length"] = tr.length
                if tr.observe(x, fx):  # restart: a fresh design, a new region
                    s["restarts"] += 1
                    fresh = torch.quasirandom.SobolEngine(
                        args.dim, scramble=True, seed=s["restarts"]).draw(args.n0).to(DT)
                    f_fresh = -unit_to_bounds(fn, fresh)
                    s["X"], s["y"] = torch.cat([s["X"], fresh]), torch.cat([s["y"], f_fresh])
                    s["tr"] = TrustRegion(args.dim, args.q)
                    s["tr"].start(fresh, f_fresh)
                row["restarts"] = s["restarts"]
            rows.append(row)
            print(json.dumps(row), flush=True)
            if len(s["X"]) + args.q > args.budget:
                s["on"] = False
            if kind == "stgp" and t2 - t0 > args.cap:
                s["on"] = False
                print(f"SingleTaskGP stops: {t2 - t0:.1f} s per iteration at N = {len(X)}",
                      flush=True)


def gemm_rate() -> float:
    """GFLOP/s of one float64 [1000, 1000] @ [1000, 1000] product (best of three)."""
    return 2 * 1000**3 / gemm_seconds(1000, 1000) / 1e9


def write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def read_small(path: Path) -> list[dict]:
    """The rows of a small.csv, one per problem and model, the regrets in seed order."""
    out: dict[tuple[str, str, str], list[float]] = {}
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            out.setdefault((r["problem"], r["budget"], r["model"]), []).append(float(r["regret"]))
    return [{"problem": p, "budget": b, "model": m, "regret": reg}
            for (p, b, m), reg in out.items()]


def read_scaling(path: Path) -> list[dict]:
    """The rows of a scaling.csv, numbers as numbers."""
    with path.open(newline="") as f:
        return [{k: (v if k == "model" else int(v) if k in ("iteration", "N") else float(v))
                 for k, v in r.items()} for r in csv.DictReader(f)]


def figure(path: Path, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    names = {"sgpr": "sparsegp SGPR", "stgp": "BoTorch SingleTaskGP"}
    for kind, name in names.items():
        r = [x for x in rows if x["model"] == kind]
        a.plot([x["N"] for x in r], [x["fit_s"] + x["acquisition_s"] for x in r], "o-", ms=3,
               label=name)
        b.plot([x["N"] for x in r], [x["best"] for x in r], "o-", ms=3, label=name)
    a.set(xlabel="evaluations N (model's training set)", ylabel="seconds per iteration "
          "(fit + acquisition)", yscale="log", title="cost per iteration")
    b.set(xlabel="evaluations N before the batch", ylabel="best Ackley value after the batch",
          title="progress (10-D Ackley, minimum 0)")
    a.legend()
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def summary(small: list[dict], rows: list[dict], args, gemm: tuple[float, float],
            total: float) -> str:
    out = [f"Machine: {machine()}; OMP_NUM_THREADS=1.",
           f"GEMM rate (float64 1000³ product, best of three): {gemm[0]:.1f} GFLOP/s at the "
           f"start, {gemm[1]:.1f} GFLOP/s at the end. Total time {total:.0f} s.", ""]
    if small:
        out += ["**Small budgets: best simple regret per seed (lower is better)**", "",
                "| problem | budget | model | regret per seed | median | mean |",
                "| --- | --- | --- | --- | ---: | ---: |"]
        for r in small:
            reg = r["regret"]
            out.append(f"| {r['problem']} | {r['budget']} | {r['model']} | "
                       f"{', '.join(f'{v:.4f}' for v in reg)} | {statistics.median(reg):.4f} | "
                       f"{statistics.mean(reg):.4f} |")
        out.append("")
    if rows:
        out += [f"**Large budget: {args.dim}-D Ackley, q = {args.q}, M = {args.M}, "
                f"{args.candidates} candidates**", "",
                "| N | SGPR s / iteration (fit + acq.) | SingleTaskGP s / iteration | "
                "× SGPR | SGPR best | SingleTaskGP best |", "|---:|---:|---:|---:|---:|---:|"]
        by = {(r["model"], r["N"]): r for r in rows}

        def cost(r) -> str:
            return (f"{r['fit_s'] + r['acquisition_s']:.2f} ({r['fit_s']:.2f} + "
                    f"{r['acquisition_s']:.2f})" if r else "—")

        for N in sorted({r["N"] for r in rows}):
            s, e = by.get(("sgpr", N)), by.get(("stgp", N))
            ratio = (f"{(e['fit_s'] + e['acquisition_s']) / (s['fit_s'] + s['acquisition_s']):.1f}"
                     if s and e else "")
            out.append(f"| {N} | {cost(s)} | {cost(e)} | {ratio} | "
                       + (f"{s['best']:.3f}" if s else "") + " | "
                       + (f"{e['best']:.3f}" if e else "") + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a smoke run: tiny budgets")
    p.add_argument("--parts", default="small,scaling", help="small, scaling or both")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--dim", type=int, default=10)
    p.add_argument("--q", type=int, default=100)
    p.add_argument("--M", type=int, default=300)
    p.add_argument("--n0", type=int, default=100)
    p.add_argument("--budget", type=int, default=2000)
    p.add_argument("--candidates", type=int, default=1000)
    p.add_argument("--maxiter", type=int, default=100, help="L-BFGS-B iterations per SGPR fit")
    p.add_argument("--trust-region", action="store_true",
                   help="Thompson sampling inside a TuRBO-1 trust region (the large budget)")
    p.add_argument("--cap", type=float, default=20.0,
                   help="SingleTaskGP stops after an iteration slower than this (seconds)")
    p.add_argument("--out", default=str(ROOT / "results" / "bayesopt"))
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.q, args.M, args.n0, args.budget, args.candidates = 2, 20, 50, 40, 120, 300
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    g0 = gemm_rate()
    print(machine(), f"GEMM {g0:.1f} GFLOP/s", flush=True)
    small: list[dict] = []
    if "small" in args.parts:
        budgets = {"branin": (8, 16, 16), "hartmann6": (10, 25, 20)}
        for problem, (n0, iters, M) in budgets.items():
            if args.quick:
                iters = 4
            for kind, label in SMALL_MODELS.items():
                reg = [small_loop(problem, kind, s, n0, iters, M)[-1] for s in range(args.seeds)]
                name = label.format(M=M)
                small.append({"problem": problem, "budget": f"{n0} + {iters}", "model": name,
                              "regret": reg})
                print(json.dumps(small[-1]), flush=True)
        write_csv(out / "small.csv", [{"problem": r["problem"], "budget": r["budget"],
                                       "model": r["model"], "seed": i, "regret": v}
                                      for r in small for i, v in enumerate(r["regret"])])
    elif (out / "small.csv").exists():  # keep the last small-budget run's table
        small = read_small(out / "small.csv")
    rows: list[dict] = []
    if "scaling" in args.parts:
        scaling(args, rows)
        write_csv(out / "scaling.csv", rows)
        figure(out / "scaling.png", rows)
    elif (out / "scaling.csv").exists():  # keep the last large-budget run's table
        rows = read_scaling(out / "scaling.csv")
    g1 = gemm_rate()
    text = summary(small, rows, args, (g0, g1), time.perf_counter() - start)
    (out / "generated.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
