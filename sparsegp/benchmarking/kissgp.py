"""`sparsegp bench kissgp`: KISS-GP's evidence + gradient against GPyTorch's and a dense one.

For each (N, D, G) — N points uniform in [0, 3]^D, y = Σ sin(2x) + noise, G grid points per
dimension, squared exponential ARD kernel with fixed hyperparameters — a fresh process times
one evaluation of the evidence and its gradient (median of the repeats after a warm-up):
* `sparsegp`: `KISSGP` with its defaults (CG tolerance 1e-6, 10 probes, rank-50 pivoted
  Cholesky preconditioner), and `sparsegp tol 1e-2` with CG stopped at 1e-2 (closer to
  GPyTorch's training default);
* `gpytorch`: GPyTorch's `GridInterpolationKernel` with its default settings, in float64
  (skipped, with the reason, when GPyTorch is not installed: `pip install gpytorch`);
* `dense`: the same interpolated kernel W K_UU Wᵀ formed and factorised (N ≤ 6000): the naive
  implementation whose O(N³) KISS-GP avoids.
Ratios are to `sparsegp`'s time for the same case; `value` is each method's estimate of
log p(y) (KISS-GP and GPyTorch estimate the same quantity by different random probes).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Sequence

from .compare import LENGTHSCALE, NOISE, VARIANCE
from .speed import bench_parser, gigabytes, machine, parse_bench_args, peak_rss, report, run_in_subprocess

FULL_CASES = [(10_000, 1, 1000), (100_000, 1, 5000), (10_000, 2, 100), (100_000, 2, 150),
              (20_000, 3, 30)]
QUICK_CASES = [(1_000, 1, 100), (1_000, 2, 20)]
SETUPS = ("sparsegp", "sparsegp tol 1e-2", "gpytorch", "dense")
DENSE_MAX = 6000
#: GPyTorch's KISS-GP held ~0.3 GB per 1000 points at D = 2 (measured, N = 10⁴; its memory
#: grows with the 4^D interpolation weights per point): larger cases would not fit here.
GPYTORCH_MAX_2D = 20_000


def _data(N: int, D: int):
    import torch

    g = torch.Generator().manual_seed(0)
    X = 3 * torch.rand(N, D, generator=g, dtype=torch.float64)
    y = torch.sin(2 * X).sum(1) + 0.1 * torch.randn(N, generator=g, dtype=torch.float64)
    return X, y


def worker(spec: dict) -> dict:
    import torch

    N, D, G, setup, repeats = spec["N"], spec["D"], spec["G"], spec["setup"], spec["repeats"]
    X, y = _data(N, D)
    baseline = peak_rss()
    if setup == "gpytorch":
        from .compare import gpytorch_model  # the same GPyTorch KISS-GP, hyperparameters and settings

        step = gpytorch_model("ski", X, y, G)
    else:
        import sparsegp as sg
        from sparsegp.objectives.exact import exact_log_marginal_likelihood
        from sparsegp.structured.grid import kuu_matmul

        tol = 1e-2 if setup == "sparsegp tol 1e-2" else 1e-6
        model = sg.KISSGP(X, y, grid_size=G, kernel=sg.kernels.SquaredExponential(
            lengthscale=[LENGTHSCALE] * D, variance=VARIANCE), noise_variance=NOISE,
            cg_tolerance=tol, standardize_y=False)  # the dense model's units
        params = [p for p in model.parameters() if p.requires_grad]
        if setup == "dense":
            def loss() -> torch.Tensor:
                g = model.grid()
                W = g.W.to_dense()
                K = W @ kuu_matmul(model.kernel, model.grid_spacing, model.sizes)(W.mT)
                assert model.y is not None
                return -exact_log_marginal_likelihood(K, model.y, model.value("noise_variance"))
        else:
            loss = model.training_loss

        def step() -> float:
            value = loss()
            torch.autograd.grad(value, params)
            return -float(value.detach())
    v = step()
    seconds = []
    for _ in range(repeats):
        t = time.perf_counter()
        v = step()
        seconds.append(time.perf_counter() - t)
    return {**spec, "seconds": statistics.median(seconds), "value": float(v),
            "above_baseline_bytes": peak_rss() - baseline}


def format_results(rows: list[dict]) -> str:
    lines = ["| N | D | G per dim | method | s / (objective + gradient) | × sparsegp | log p(y) "
             "estimate | memory above baseline GB |", "|---:|---:|---:|---|---:|---:|---:|---:|"]
    base = {(r["N"], r["D"], r["G"]): r["seconds"] for r in rows
            if r["setup"] == "sparsegp" and "seconds" in r}
    for r in rows:
        key = (r["N"], r["D"], r["G"])
        if "seconds" not in r:
            lines.append(f"| {r['N']:,} | {r['D']} | {r['G']} | {r['setup']} | "
                         f"{r.get('skipped') or 'failed: ' + r.get('error', '')} | | | |")
            continue
        ratio = r["seconds"] / base[key] if key in base else float("nan")
        lines.append(f"| {r['N']:,} | {r['D']} | {r['G']} | {r['setup']} | {r['seconds']:.3f} | "
                     f"{ratio:.2f} | {r['value']:.2f} | {gigabytes(r['above_baseline_bytes'])} |")
    return "\n".join(lines)


def _has_gpytorch() -> bool:
    try:
        import gpytorch  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_bench_args(bench_parser("sparsegp bench kissgp", __doc__, 3), argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    repeats = 1 if args.quick else max(3, args.repeats)
    rows = []
    print(machine(), flush=True)
    for N, D, G in QUICK_CASES if args.quick else FULL_CASES:
        for setup in SETUPS:
            spec = {"N": N, "D": D, "G": G, "setup": setup, "repeats": repeats}
            if setup == "gpytorch" and not _has_gpytorch():
                row = {**spec, "skipped": "skipped: GPyTorch is not installed"}
            elif setup == "gpytorch" and D > 1 and N * 4**D > GPYTORCH_MAX_2D * 16:
                gb = 0.3 * N / 1000 * 4 ** (D - 2)
                row = {**spec, "skipped": f"skipped: would need ≈ {gb:.0f} GB"}
            elif setup == "dense" and N > DENSE_MAX:
                row = {**spec, "skipped": f"skipped: N > {DENSE_MAX} (an N×N factorisation)"}
            else:
                row = run_in_subprocess(spec, __name__)
            rows.append(row)
            print(json.dumps(row), flush=True)
    report(format_results(rows), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
