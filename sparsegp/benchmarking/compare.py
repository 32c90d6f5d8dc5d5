"""`sparsegp bench compare`: sparsegp and its peers side by side on the same data.

For each case — the exact GP, VFE, FITC and Power EP (α = ½) (SGPR), random Fourier
features, the sparse spectrum GP and KISS-GP — one evaluation of the objective and its
gradient at the same hyperparameters is timed in a fresh process per library, the libraries
taking turns round by round (interleaved, so a change of the machine's load hits all of
them); the table gives the median seconds, the ratio to sparsegp, the fraction of the
machine's GEMM rate, each process's peak memory above its baseline, and the objective
values. The data are those of `bench speed` (D = 8 standard normal inputs, a
squared-exponential ARD kernel with lengthscales 2, noise 0.1; D = 1 for KISS-GP). "of GEMM"
counts N³ flops for the exact GP (Cholesky and inverse), 3·N·M² for VFE and 6·N·M² for FITC
and Power EP, and divides their rate by that of a float64 product timed in the same process
right before the timed evaluation (M×B by B×M, B the chunk size, for the sparse methods; S×S
by S×S, S = min(2048, N), for the exact GP). Peers: GPyTorch (exact GP, SGPR's
InducingPointKernel, RFFKernel, GridInterpolationKernel) and GPflow (GPR, SGPR, GPRFITC)
where installed — a missing peer is skipped with a message. The exact GP, VFE and FITC are
the same numbers in every library (their values must agree); RFF draws different random
frequencies in each library and KISS-GP uses different grids and stochastic estimators, so
their values only come close. SSGP and Power EP have no peer.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .speed import (
    METHODS,
    bench_parser,
    gemm_seconds,
    gigabytes,
    machine,
    parse_bench_args,
    peak_rss,
    random_problem,
    report,
    run_in_subprocess,
    synchronise,
)

if TYPE_CHECKING:
    from ..models.core.regression import Regression

#: (method, N, size): size is M inducing points, R spectral pairs or G grid points.
FULL_CASES = [("exact", 2_000, 0), ("exact", 5_000, 0), ("vfe", 10_000, 500),
              ("vfe", 100_000, 500), ("fitc", 100_000, 500), ("pep", 100_000, 500),
              ("rff", 10_000, 250), ("ssgp", 10_000, 250), ("ski", 10_000, 1000),
              ("ski", 100_000, 5000)]
QUICK_CASES = [("exact", 500, 0), ("vfe", 2_000, 50), ("fitc", 2_000, 50), ("rff", 2_000, 25),
               ("ski", 2_000, 200)]
LIBRARIES = ("sparsegp", "gpytorch", "gpflow")
PEERS = {"gpytorch": {"exact", "vfe", "rff", "ski"}, "gpflow": {"exact", "vfe", "fitc"}}
LENGTHSCALE, VARIANCE, NOISE = 2.0, 1.0, 0.1
#: the exact GP's reference product: S × S by S × S with S = min(SQUARE, N)
SQUARE = 2048


def _data(method: str, N: int):
    X, y, _ = random_problem(N, 0)
    return (X[:, :1], y) if method == "ski" else (X, y)


def counted_flops(method: str, N: int, size: int) -> float | None:
    """The flops the "of GEMM" column counts (None: no count for this method)."""
    if method == "exact":
        return float(N) ** 3
    if method in METHODS:
        return METHODS[method][2] * float(N) * size * size
    return None


def gemm_rate(method: str, N: int, size: int, device: str) -> float:
    """Flops per second of the reference product of `method` (module docstring), best of 3."""
    import torch

    if method == "exact":
        m = b = min(SQUARE, N)
    else:
        from ..runtime.chunking import auto_chunk_size

        m = size
        b = min(N, auto_chunk_size(size, 8, device=torch.device(device)))
    return 2.0 * m * m * b / gemm_seconds(m, b, device)


def _sparsegp(method: str, X, y, size: int):
    import torch

    import sparsegp as sg

    kernel = sg.kernels.SquaredExponential(lengthscale=[LENGTHSCALE] * X.shape[1],
                                           variance=VARIANCE)
    model: Regression
    # y as given (standardize_y=False): the peers' objectives at the same values
    if method == "exact":
        model = sg.GPR(X, y, kernel=kernel, noise_variance=NOISE, standardize_y=False)
    elif method in METHODS:
        approximation, alpha, _ = METHODS[method]
        model = sg.SGPR(X, y, kernel=kernel, inducing_points=X[:size], noise_variance=NOISE,
                        approximation=approximation, alpha=alpha, standardize_y=False)
    elif method in ("rff", "ssgp"):
        model = (sg.RFF if method == "rff" else sg.SSGP)(X, y, kernel=kernel, num_features=size,
                                                         noise_variance=NOISE,
                                                         standardize_y=False)
    else:
        model = sg.KISSGP(X, y, kernel=kernel, grid_size=size, noise_variance=NOISE,
                          standardize_y=False)
    params = [p for p in model.parameters() if p.requires_grad]

    def step() -> float:
        loss = model.training_loss()
        torch.autograd.grad(loss, params)
        return -float(loss.detach())
    return step


def gpytorch_model(method: str, X, y, size: int):
    import gpytorch
    import torch

    D = X.shape[1]
    base = gpytorch.kernels.RBFKernel(ard_num_dims=D)
    if method == "rff":
        base = gpytorch.kernels.RFFKernel(num_samples=size, num_dims=D)
    elif method == "ski":
        base = gpytorch.kernels.GridInterpolationKernel(base, grid_size=size, num_dims=D)
    covar = gpytorch.kernels.ScaleKernel(base)
    lik = gpytorch.likelihoods.GaussianLikelihood()
    if method == "vfe":
        covar = gpytorch.kernels.InducingPointKernel(covar, inducing_points=X[:size].clone(),
                                                     likelihood=lik)

    class Model(gpytorch.models.ExactGP):
        def __init__(self) -> None:
            super().__init__(X, y, lik)
            self.mean_module, self.covar_module = gpytorch.means.ZeroMean(), covar

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    model = Model().double().to(X.device)
    scale = model.covar_module if method != "vfe" else model.covar_module.base_kernel
    inner = scale.base_kernel.base_kernel if method == "ski" else scale.base_kernel
    inner.lengthscale = LENGTHSCALE
    scale.outputscale = VARIANCE
    lik.noise = NOISE
    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    params = [p for p in model.parameters() if p.requires_grad]

    # the exact GP by Cholesky as in the other libraries (GPyTorch's default switches to
    # CG and stochastic Lanczos above 800 points, a different and approximate objective)
    cholesky = gpytorch.settings.max_cholesky_size(10**8 if method == "exact" else 800)

    def step() -> float:
        with cholesky:
            value = mll(model(X), y) * X.shape[0]  # GPyTorch divides by N
            torch.autograd.grad(value, params, allow_unused=True)
        return float(value.detach())
    return step


def gpflow_model(X, y, lengthscales, variance: float, noise_variance: float, inducing=None,
                 fitc: bool = False):
    """GPflow's GPR, or its SGPR (VFE; GPRFITC with `fitc`) on the inducing inputs `inducing`
    [M, D], with a squared exponential kernel at these values, on X [N, D] and y [N] in
    float64 (also `sparsegp bench fit`'s GPflow row)."""
    import gpflow
    import numpy as np

    data = (np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64).reshape(-1, 1))
    kernel = gpflow.kernels.SquaredExponential(
        lengthscales=np.asarray(lengthscales, dtype=np.float64), variance=np.float64(variance))
    if inducing is None:
        return gpflow.models.GPR(data, kernel=kernel, noise_variance=np.float64(noise_variance))
    sparse = gpflow.models.GPRFITC if fitc else gpflow.models.SGPR
    return sparse(data, kernel=kernel, inducing_variable=np.array(inducing, dtype=np.float64),
                  noise_variance=np.float64(noise_variance))


def _gpflow(method: str, X, y, size: int):
    import tensorflow as tf

    Xn, yn = X.cpu().numpy(), y.cpu().numpy()  # TensorFlow places them itself
    model = gpflow_model(Xn, yn, [LENGTHSCALE] * X.shape[1], VARIANCE, NOISE,
                         None if method == "exact" else Xn[:size], fitc=method == "fitc")

    def step() -> float:
        with tf.GradientTape() as tape:
            value = model.maximum_log_likelihood_objective()
        tape.gradient(value, model.trainable_variables)
        return float(value.numpy())
    return step


def worker(spec: dict) -> dict:
    method, N, size, library = spec["method"], spec["N"], spec["size"], spec["library"]
    device = spec.get("device") or "cpu"
    X, y = (t.to(device) for t in _data(method, N))
    baseline = peak_rss(device)
    step = {"sparsegp": _sparsegp, "gpytorch": gpytorch_model, "gpflow": _gpflow}[library](
        method, X, y, size)
    step()  # warm-up
    flops = counted_flops(method, N, size)
    rate = gemm_rate(method, N, size, device) if flops is not None else None
    synchronise(device)
    t = time.perf_counter()
    value = step()  # float(...) of the objective waits for the device
    synchronise(device)
    seconds = time.perf_counter() - t
    return {**spec, "seconds": seconds, "value": value,
            "of_gemm": None if rate is None or flops is None else flops / seconds / rate,
            "above_baseline_bytes": peak_rss(device) - baseline}


def _available(library: str) -> bool:
    import importlib.util

    return library == "sparsegp" or importlib.util.find_spec(library) is not None


def format_results(rows: list[dict]) -> str:
    lines = ["| method | N | M / R / G | library | seconds (median) | × sparsegp | of GEMM | "
             "objective | memory above baseline GB |", "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    base = {(r["method"], r["N"]): r["seconds"] for r in rows
            if r["library"] == "sparsegp" and "seconds" in r}
    for r in rows:
        head = f"| {r['method']} | {r['N']:,} | {r['size'] or '—'} | {r['library']} | "
        if "seconds" not in r:
            lines.append(head + f"{r.get('skipped') or 'failed: ' + r.get('error', '')} | | | | |")
            continue
        ratio = r["seconds"] / base.get((r["method"], r["N"]), float("nan"))
        of_gemm = "—" if r.get("of_gemm") is None else f"{r['of_gemm']:.0%}"
        lines.append(head + f"{r['seconds']:.3f} | {ratio:.2f} | {of_gemm} | {r['value']:.3f} | "
                     f"{gigabytes(r['above_baseline_bytes'])} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("sparsegp bench compare", __doc__, 3)
    parser.add_argument("--methods", default="exact,vfe,fitc,pep,rff,ssgp,ski",
                        help="comma-separated subset of exact, vfe, fitc, pep, rff, ssgp, ski")
    parser.add_argument("--device", default="cpu", help="torch device for sparsegp and "
                        "GPyTorch, e.g. cuda (GPflow: wherever TensorFlow puts it)")
    args = parse_bench_args(parser, argv)
    methods = set(args.methods.split(","))
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    rounds = 1 if args.quick else max(3, args.repeats)
    print(machine(args.device), flush=True)
    rows = []
    for method, N, size in QUICK_CASES if args.quick else FULL_CASES:
        if method not in methods:
            continue
        libraries = [lib for lib in LIBRARIES if lib == "sparsegp" or method in PEERS[lib]]
        runs: dict[str, list[dict]] = {lib: [] for lib in libraries}
        for _ in range(rounds):  # interleaved: every library once per round
            for lib in libraries:
                spec = {"method": method, "N": N, "size": size, "library": lib,
                        "device": args.device}
                if not _available(lib):
                    runs[lib].append({**spec, "skipped": f"skipped: {lib} is not installed"})
                else:
                    runs[lib].append(run_in_subprocess(spec, __name__))
        for lib in libraries:
            done = [r for r in runs[lib] if "seconds" in r]
            if done:
                fractions = [r["of_gemm"] for r in done if r.get("of_gemm") is not None]
                row = {**done[-1], "seconds": statistics.median(r["seconds"] for r in done),
                       "of_gemm": statistics.median(fractions) if fractions else None,
                       "above_baseline_bytes": max(r["above_baseline_bytes"] for r in done)}
            else:
                row = runs[lib][-1]
            rows.append(row)
            print(json.dumps(row), flush=True)
    report(format_results(rows), args.out, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
