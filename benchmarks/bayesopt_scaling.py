"""Bayesian optimisation with sparsegp's models (through `sparsegp.botorch.as_botorch`) against
BoTorch's `SingleTaskGP`, in two parts:

1. Small budgets, several seeds: Branin (2-D) and Hartmann-6, the same scrambled Sobol initial
   design and the same acquisition for every model (qLogExpectedImprovement, q = 1, optimised
   by `optimize_acqf`), each model refitted on all the data every iteration. Models:
   SingleTaskGP (BoTorch's defaults: Matérn-5/2 ARD with its priors, outcome standardisation),
   `sg.GPR` and `sg.SGPR` with at most M inducing inputs (k-means++ on the distinct inputs),
   both with sparsegp's defaults (SE ARD, no priors, y standardised) except the noise
   variance, held at 10⁻⁶ of y's variance: the functions are noiseless, and a free noise
   variance lets the fit explain a few points as noise (SingleTaskGP's noise prior avoids
   that mode). Reported: the best simple regret (best value found minus the known optimum)
   per seed.
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

The machine's float64 GEMM rate (`sparsegp.benchmarking.speed._gemm_seconds`, the product
`sparsegp bench speed` measures its rates against) is measured at the start and at the end.

    OMP_NUM_THREADS=1 python benchmarks/bayesopt_scaling.py            # the full run (≈ 10 min)
    OMP_NUM_THREADS=1 python benchmarks/bayesopt_scaling.py --quick    # a smoke run (≈ 1 min)

Writes small.csv, scaling.csv, scaling.png and generated.md (the machine, the GEMM rate and
the tables) to --out (results/bayesopt by default).
"""

from __future__ import annotations

import argparse
import csv
import json
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
from sparsegp.benchmarking.speed import _gemm_seconds, machine
from sparsegp.botorch import as_botorch

DT = torch.float64
ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = {"branin": (Branin(), 0.397887), "hartmann6": (Hartmann(dim=6), -3.32237)}


def unit_to_bounds(fn, u: torch.Tensor) -> torch.Tensor:
    """The test function (minimised) at u in the unit cube."""
    lo, hi = fn.bounds.to(u)
    return fn.evaluate_true(lo + (hi - lo) * u)


def distinct(X: torch.Tensor) -> int:
    return int(torch.unique(X, dim=0).shape[0])


def fit_model(kind: str, X: torch.Tensor, y: torch.Tensor, M: int, prev=None, maxiter=200,
              noiseless: bool = False):
    """A BoTorch model of (X, y) (y maximised): SingleTaskGP, or a fitted sparsegp model
    wrapped by `as_botorch`. `prev` is the previous sparsegp model (a warm start);
    `noiseless` holds a sparsegp model's noise variance at 10⁻⁶ of y's variance."""
    if kind == "stgp":
        model = SingleTaskGP(X, y[:, None])
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
        return model, None
    if kind == "gpr":
        sparse = sg.GPR(X, y)
    else:
        Z = prev.inducing_points if prev is not None else min(M, distinct(X))
        sparse = sg.SGPR(X, y, inducing_points=Z)
    if prev is not None:
        warm = {k: v for k, v in prev.state_dict().items()
                if k.startswith("kernel.") or k == "raw_noise_variance" or k == "feature.Z"}
        sparse.load_state_dict(warm, strict=False)
    if noiseless:
        sparse.noise_variance = 1e-6 * float(y.var())
        sparse.freeze("noise_variance")
    sparse.fit(maxiter=maxiter, progress=False)
    return as_botorch(sparse), sparse


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


def scaling(args, rows: list[dict]) -> None:
    fn = Ackley(dim=args.dim)
    fn.bounds = torch.tensor([[-5.0] * args.dim, [10.0] * args.dim], dtype=DT)
    X0 = torch.quasirandom.SobolEngine(args.dim, scramble=True, seed=0).draw(args.n0).to(DT)
    state = {k: {"X": X0, "y": -unit_to_bounds(fn, X0), "prev": None, "on": True}
             for k in ("sgpr", "stgp")}
    it = 0
    while any(s["on"] for s in state.values()):
        it += 1
        for kind, s in state.items():
            if not s["on"]:
                continue
            X, y = s["X"], s["y"]
            torch.manual_seed(1000 + it)
            t0 = time.perf_counter()
            model, s["prev"] = fit_model(kind, X, y, args.M, s["prev"], maxiter=args.maxiter)
            t1 = time.perf_counter()
            cand = candidates(X, y, args.candidates, seed=it)
            with torch.no_grad():
                x = MaxPosteriorSampling(model, replacement=False)(cand, num_samples=args.q)
            t2 = time.perf_counter()
            fx = -unit_to_bounds(fn, x)
            s["X"], s["y"] = torch.cat([X, x]), torch.cat([y, fx])
            row = {"model": kind, "iteration": it, "N": len(X), "fit_s": t1 - t0,
                   "acquisition_s": t2 - t1, "best": -float(s["y"].max())}
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
    return 2 * 1000**3 / _gemm_seconds(1000, 1000) / 1e9


def write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


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
        for N in sorted({r["N"] for r in rows}):
            s, e = by.get(("sgpr", N)), by.get(("stgp", N))
            ts = s["fit_s"] + s["acquisition_s"] if s else float("nan")
            te = e["fit_s"] + e["acquisition_s"] if e else float("nan")
            out.append(f"| {N} | {ts:.2f} ({s['fit_s']:.2f} + {s['acquisition_s']:.2f}) | "
                       + (f"{te:.2f} ({e['fit_s']:.2f} + {e['acquisition_s']:.2f}) | "
                          f"{te / ts:.1f} | " if e else "stopped | | ")
                       + f"{s['best']:.3f} | " + (f"{e['best']:.3f} |" if e else "|"))
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a smoke run: tiny budgets")
    p.add_argument("--parts", default="small,scaling", help="small, scaling or both")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--dim", type=int, default=10)
    p.add_argument("--q", type=int, default=100)
    p.add_argument("--M", type=int, default=300)
    p.add_argument("--n0", type=int, default=100)
    p.add_argument("--budget", type=int, default=2000)
    p.add_argument("--candidates", type=int, default=1000)
    p.add_argument("--maxiter", type=int, default=100, help="L-BFGS-B iterations per SGPR fit")
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
            for kind in ("stgp", "gpr", "sgpr"):
                reg = [small_loop(problem, kind, s, n0, iters, M)[-1] for s in range(args.seeds)]
                name = {"stgp": "SingleTaskGP", "gpr": "GPR",
                        "sgpr": f"SGPR (M ≤ {M})"}[kind]
                small.append({"problem": problem, "budget": f"{n0} + {iters}", "model": name,
                              "regret": reg})
                print(json.dumps(small[-1]), flush=True)
        write_csv(out / "small.csv", [{"problem": r["problem"], "budget": r["budget"],
                                       "model": r["model"], "seed": i, "regret": v}
                                      for r in small for i, v in enumerate(r["regret"])])
    rows: list[dict] = []
    if "scaling" in args.parts:
        scaling(args, rows)
        write_csv(out / "scaling.csv", rows)
        figure(out / "scaling.png", rows)
    g1 = gemm_rate()
    text = summary(small, rows, args, (g0, g1), time.perf_counter() - start)
    (out / "generated.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
