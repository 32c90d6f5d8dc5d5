"""The GPU targets of record, measured in one process and compared with their goals.

Each target prints one line and appends one JSON row to --out as soon as it is measured (so a
device call that runs out of time keeps what it finished); the table of every row in --out
is printed at the end. Targets (one objective + gradient, float64 unless stated):

* objective  VFE ≥ 60% of the device's GEMM rate at N = 1e6, M = 1000 and 2000 (3NM² flops);
             FITC and PEP(0.5) ≥ 40% at N = 1e6, M = 1000 (6NM²) — `sparsegp bench speed`'s
             worker, GEMM of the chunk's shape timed alongside
* float32    VFE with compute_dtype=float32 at least 1.5× faster than float64 (N = 1e6,
             M = 1000) where the device's float32 GEMM is faster; the objective's relative error
* predict    mean and variance at 1e6 test points, M = 500: ≥ 3× GPyTorch's SGPR points/s
* svgp       one epoch of minibatch SVGP (Bernoulli, natural gradients on q(u) + Adam) no
             slower than GPyTorch's VariationalStrategy + Adam: N = 1e5, M = 500, B = 1024
             and N = 1e6, M = 1000, B = 4096
* exact      the exact GP at N = 4e4: peak memory ≤ 3 N×N matrices (and its seconds)
* large      VFE at N = 1e7, M = 2000 trained by L-BFGS-B for 100 iterations in < 10 min
             (--large-n 1000000: measured at N = 1e6 and its time scaled by 10, the cost
             being linear in N; the row says so)

    python benchmarks/gpu_targets.py --device cuda --only objective,float32,predict --out t.jsonl
    python benchmarks/gpu_targets.py --device cuda --only svgp,exact --out t.jsonl
    python benchmarks/gpu_targets.py --device cuda --only large --out t.jsonl  # --large-maxiter 50
    python benchmarks/gpu_targets.py --quick        # tiny sizes on the CPU: a smoke test
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import sparsegp as sg
from sparsegp.benchmarking import speed

TARGETS = ("objective", "float32", "predict", "svgp", "exact", "large")


class Run:
    """Sizes (full or quick), the device, and the rows written so far."""

    def __init__(self, device: str, quick: bool, out: Path, large_maxiter: int = 100,
                 large_n: int = 10_000_000) -> None:
        self.device, self.quick, self.out = device, quick, out
        self.large_maxiter, self.large_n = large_maxiter, large_n

    def n(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    def sync(self) -> None:
        speed.synchronise(self.device)

    def timed(self, step: Callable[[], Any], repeats: int = 3) -> float:
        step()  # warm-up
        out = []
        for _ in range(repeats):
            self.sync()
            t = time.perf_counter()
            step()
            self.sync()
            out.append(time.perf_counter() - t)
        return statistics.median(out)

    def row(self, target: str, case: str, measured: float, goal: float, higher_is_better: bool,
            unit: str, **details: Any) -> None:
        met = measured >= goal if higher_is_better else measured <= goal
        row = {"target": target, "case": case, "measured": measured, "goal": goal,
               "higher_is_better": higher_is_better, "unit": unit, "met": met,
               "device": self.device, "quick": self.quick, **details}
        with self.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(_line(row), flush=True)

    def data(self, N: int, D: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        X = torch.randn(N, D, dtype=torch.float64, generator=g)
        y = torch.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * torch.randn(N, dtype=torch.float64,
                                                                   generator=g)
        return X.to(self.device), y.to(self.device)


def _line(r: dict[str, Any]) -> str:
    sign = "≥" if r["higher_is_better"] else "≤"
    return (f"| {r['target']} | {r['case']} | {r['measured']:.3g} {r['unit']} | "
            f"{sign} {r['goal']:.3g} | {'met' if r['met'] else 'NOT met'} |")


def objective(run: Run) -> None:
    N = run.n(1_000_000, 20_000)
    cases = [("vfe", 1000, 0.6), ("vfe", 2000, 0.6), ("fitc", 1000, 0.4), ("pep", 1000, 0.4)]
    n = run.n(8192, 1024)  # the device's float64 GEMM rate on a large square product
    A = torch.randn(n, n, dtype=torch.float64, device=run.device)
    square = 2 * n**3 / run.timed(lambda: A @ A) / 1e9
    for method, M, goal in cases:
        M = run.n(M, M // 10)
        r = speed.worker({"N": N, "M": M, "method": method, "repeats": 3, "device": run.device})
        run.row("objective", f"{method} N={N} M={M}", r["fraction"], goal, True,
                "of GEMM", seconds=r["seconds"], gflops=r["gflops"],
                gemm_gflops=r["gemm_gflops"], chunk=r["chunk_size"], peak_bytes=r["peak_bytes"],
                square_gemm_gflops=square, fraction_of_square_gemm=r["gflops"] / square)


def float32(run: Run) -> None:
    N, M = run.n(1_000_000, 20_000), run.n(1000, 100)
    X, y = run.data(N)
    seconds, values = {}, {}
    for dtype in (torch.float64, torch.float32):
        model = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=[2.0] * 8),
                        inducing_points=X[:M], noise_variance=0.1, compute_dtype=dtype)
        params = [p for p in model.parameters() if p.requires_grad]

        def step(model: sg.SGPR = model, params: list = params) -> None:
            torch.autograd.grad(model.training_loss(), params)
        seconds[dtype] = run.timed(step)
        values[dtype] = float(model.training_loss().detach())
    A = {t: torch.randn(4096, 4096, dtype=t, device=run.device) for t in seconds}
    gemm = {t: run.timed(lambda a=a: a @ a) for t, a in A.items()}
    faster = gemm[torch.float64] / gemm[torch.float32]
    rel = abs(values[torch.float32] - values[torch.float64]) / abs(values[torch.float64])
    run.row("float32", f"vfe N={N} M={M}", seconds[torch.float64] / seconds[torch.float32],
            1.5 if faster > 1.5 else 1.0, True, "× float64", float32_gemm_speedup=faster,
            objective_relative_error=rel, seconds_float64=seconds[torch.float64],
            seconds_float32=seconds[torch.float32])


def predict(run: Run) -> None:
    N, M, n_test = run.n(100_000, 5_000), run.n(500, 50), run.n(1_000_000, 50_000)
    X, y = run.data(N)
    Xs, _ = run.data(n_test, seed=1)
    model = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=[2.0] * 8),
                    inducing_points=X[:M], noise_variance=0.1)
    post = model.posterior()

    def ours() -> None:
        with torch.no_grad():
            post.predict_f(Xs)
    ours_rate = n_test / run.timed(ours)
    try:
        import gpytorch
    except ImportError:
        run.row("predict", f"M={M} points={n_test}", ours_rate, float("nan"), True, "points/s",
                note="GPyTorch is not installed: no ratio")
        return
    peer = _gpytorch_sgpr(gpytorch, X, y, M)

    def theirs() -> None:
        with torch.no_grad(), gpytorch.settings.fast_pred_var():
            f = peer(Xs)
            _ = (f.mean, f.variance)  # both computed, as sparsegp's predict_f does
    their_rate = n_test / run.timed(theirs)
    run.row("predict", f"M={M} points={n_test}", ours_rate / their_rate, 3.0, True, "× GPyTorch",
            sparsegp_points_per_second=ours_rate, gpytorch_points_per_second=their_rate)


def _gpytorch_sgpr(gpytorch: Any, X: torch.Tensor, y: torch.Tensor, M: int) -> Any:
    lik = gpytorch.likelihoods.GaussianLikelihood()
    covar = gpytorch.kernels.InducingPointKernel(
        gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=X.shape[1])),
        inducing_points=X[:M].clone(), likelihood=lik)

    class Model(gpytorch.models.ExactGP):
        def __init__(self) -> None:
            super().__init__(X, y, lik)
            self.mean_module, self.covar_module = gpytorch.means.ZeroMean(), covar

        def forward(self, x: torch.Tensor) -> Any:
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    model = Model().double().to(X.device)
    model.covar_module.base_kernel.base_kernel.lengthscale = 2.0
    lik.noise = 0.1
    model.eval()
    return model


def svgp(run: Run) -> None:
    for N, M, B in ((100_000, 500, 1024), (1_000_000, 1000, 4096)):
        N, M, B = run.n(N, N // 100), run.n(M, M // 10), run.n(B, B // 10)
        X, f = run.data(N)
        y = (f > 0).to(torch.float64)
        model = sg.SVGP(X, y, likelihood=sg.likelihoods.Bernoulli(), inducing_points=X[:M])
        model.fit(batch_size=B, epochs=1, progress=False)  # warm-up
        run.sync()
        t = time.perf_counter()
        model.fit(batch_size=B, epochs=1, progress=False)
        run.sync()
        ours = time.perf_counter() - t
        try:
            import gpytorch
        except ImportError:
            run.row("svgp", f"N={N} M={M} B={B}", ours, float("nan"), False, "s / epoch",
                    note="GPyTorch is not installed: no ratio")
            continue
        theirs = _gpytorch_svgp_epoch(gpytorch, run, X, y, M, B)
        run.row("svgp", f"N={N} M={M} B={B}", ours / theirs, 1.0, False, "× GPyTorch",
                sparsegp_seconds=ours, gpytorch_seconds=theirs)


def _gpytorch_svgp_epoch(gpytorch: Any, run: Run, X: torch.Tensor, y: torch.Tensor, M: int,
                         B: int) -> float:
    D = X.shape[1]

    class GPC(gpytorch.models.ApproximateGP):
        def __init__(self) -> None:
            q = gpytorch.variational.CholeskyVariationalDistribution(M)
            super().__init__(gpytorch.variational.VariationalStrategy(
                self, X[:M].clone(), q, learn_inducing_locations=True))
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel(ard_num_dims=D))

        def forward(self, x: torch.Tensor) -> Any:
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    model = GPC().double().to(X.device)
    lik = gpytorch.likelihoods.BernoulliLikelihood().double().to(X.device)
    mll = gpytorch.mlls.VariationalELBO(lik, model, num_data=X.shape[0])
    opt = torch.optim.Adam([*model.parameters(), *lik.parameters()], lr=0.01)

    def epoch() -> None:
        order = torch.randperm(X.shape[0], device=X.device)
        for i in range(0, X.shape[0], B):
            idx = order[i:i + B]
            opt.zero_grad()
            loss = -mll(model(X[idx]), y[idx])
            loss.backward()
            opt.step()
    model.train()
    epoch()  # warm-up
    run.sync()
    t = time.perf_counter()
    epoch()
    run.sync()
    return time.perf_counter() - t


def exact(run: Run) -> None:
    N = run.n(40_000, 2_000)
    X, y = run.data(N)
    model = sg.GPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=[2.0] * 8),
                   noise_variance=0.1)
    params = [p for p in model.parameters() if p.requires_grad]
    if run.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(run.device)
    base = speed.peak_rss(run.device)

    def step() -> None:
        torch.autograd.grad(model.training_loss(), params)
    seconds = run.timed(step, repeats=1)
    matrices = (speed.peak_rss(run.device) - base) / (8 * N * N)
    run.row("exact", f"N={N}", matrices, 3.0, False, "N×N matrices at peak", seconds=seconds,
            note="" if run.device.startswith("cuda") else "CPU: peak resident set, not torch's")


def large(run: Run) -> None:
    N, M = run.n(run.large_n, 20_000), run.n(2000, 100)
    X, y = run.data(N)
    scale = 10_000_000 / N  # the time of N = 1e7 at this N's rate (O(N M^2) per evaluation)
    g = torch.Generator().manual_seed(2)
    Z = X[torch.randperm(N, generator=g)[:M].to(X.device)].clone()
    model = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=[2.0] * 8),
                    inducing_points=Z, noise_variance=0.1)
    run.sync()
    start = time.perf_counter()

    def say(iteration: int, *_: Any) -> None:  # the rate, in case the call runs out of time
        if iteration % 10 == 0:
            print(f"  large: iteration {iteration}, {time.perf_counter() - start:.1f} s",
                  flush=True)
    result = model.fit(maxiter=run.large_maxiter, progress=False, callback=say)
    run.sync()
    seconds = time.perf_counter() - start
    per_100 = seconds * 100 / max(1, result.iterations) * (1.0 if run.quick else scale)
    notes = [] if result.iterations >= 100 else ["extrapolated from fewer iterations"]
    if not run.quick and N != 10_000_000:
        notes.append(f"measured at N = {N}, time scaled by {scale:g} to N = 1e7")
    case = f"vfe N={N if run.quick else '1e7'} M={M} L-BFGS-B, seconds per 100 iterations"
    run.row("large", case, per_100, 600.0, False, "s", iterations=result.iterations,
            seconds=seconds, measured_N=N,
            evaluations=getattr(result, "evaluations", None), objective=result.objective,
            on_device=model.X.device.type, note="; ".join(notes))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    p.add_argument("--only", default=",".join(TARGETS), help="comma-separated subset of "
                   + ", ".join(TARGETS))
    p.add_argument("--out", type=Path, default=Path("gpu_targets.jsonl"))
    p.add_argument("--large-maxiter", type=int, default=100,
                   help="L-BFGS-B iterations of the large target (fewer: its time per 100 "
                   "iterations is extrapolated; each iteration's rate is printed as it goes)")
    p.add_argument("--large-n", type=int, default=10_000_000,
                   help="N of the large target (below 1e7 its time is scaled to N = 1e7)")
    args = p.parse_args()
    chosen = [t for t in args.only.split(",") if t]
    unknown = sorted(set(chosen) - set(TARGETS))
    if unknown:
        p.error(f"unknown target(s) {unknown}; the targets are {list(TARGETS)}")
    run = Run(args.device, args.quick, args.out, args.large_maxiter, args.large_n)
    print(speed.machine(args.device), flush=True)
    for name in chosen:
        try:
            globals()[name](run)
        except Exception as e:  # one failing target must not cost the others' device time
            run.row(name, "failed", math.nan, math.nan, True, "", error=f"{type(e).__name__}: {e}")
    print("\n| target | case | measured | goal | |\n|---|---|---|---|---|")
    for line in args.out.read_text().splitlines():
        print(_line(json.loads(line)))


if __name__ == "__main__":
    main()
