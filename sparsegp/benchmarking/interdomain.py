"""`sparsegp bench interdomain`: what M inducing variables of C deltas cost against M·C points.

For each (N, M, C) with D = 8 and a squared-exponential ARD kernel, a fresh process times VFE's
objective plus its gradient (median of ≥ 3 after a warm-up) for three set-ups, in one run:
* `deltas`: `SumOfDeltas` with M variables of C deltas (the streamed M·C × B kernel evaluation);
* `points M·C`: inducing points at all M·C delta locations — the same kernel evaluations,
  but an (M·C)² instead of an M² algebra;
* `naive deltas`: Kuf = W·K(Z, X) materialised for all N and autograd for the rest.
Ratios are to the `deltas` time of the same case. The work of `deltas` is counted as
2·N·M·C·(D + 2) flops (the kernel's augmented product) + 3·N·M² (VFE's minimum), and its rate
is compared with a float64 GEMM of the chunk's shapes timed right before each repetition.
Peak resident memory above each worker's baseline is reported as for `bench speed`.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import cast

from .speed import (
    D,
    bench_parser,
    gemm_seconds,
    gigabytes,
    machine,
    parse_bench_args,
    peak_rss,
    random_problem,
    report,
    run_in_subprocess,
)

FULL_CASES = [(10_000, 50, 20), (10_000, 200, 5), (10_000, 200, 20), (100_000, 100, 10)]
QUICK_CASES = [(2_000, 20, 5)]
SETUPS = ("deltas", "points M·C", "naive deltas")
NAIVE_MEMORY_LIMIT = 6 * 2**30


def worker(spec: dict) -> dict:
    import torch

    import sparsegp as sg
    from sparsegp import covariances as cov
    from sparsegp.benchmarking.naive import naive_vfe
    from sparsegp.runtime.chunking import auto_chunk_size

    N, M, C, setup, repeats = spec["N"], spec["M"], spec["C"], spec["setup"], spec["repeats"]
    X, y, _ = random_problem(N, 1)
    feature = sg.features.SumOfDeltas.from_data(X, M, num_deltas=C)
    kernel = sg.kernels.SquaredExponential(lengthscale=[2.0] * D, variance=1.0)
    baseline = peak_rss()
    inducing: sg.features.InducingFeature
    if setup == "points M·C":
        inducing = sg.features.InducingPoints(feature.points().detach())
    else:
        inducing = feature
    model = sg.SGPR(X, y, kernel=kernel, inducing_points=inducing, noise_variance=0.1)
    params = [p for p in model.parameters() if p.requires_grad]
    if setup == "naive deltas":
        def step() -> None:
            f, k = cast(sg.features.SumOfDeltas, model.feature), model.kernel
            X, y = model.X, model.y
            assert X is not None and y is not None
            Kuf = torch.einsum("mc,mcn->mn", f.weights, k.K(f.points(), X).reshape(M, C, N))
            F = naive_vfe(Kuf, cov.Kuu(f, k), k.K_diag(X), y,
                          model.value("noise_variance"))
            torch.autograd.grad(-F, params)
    else:
        def step() -> None:
            torch.autograd.grad(model.training_loss(), params)
    step()
    B = min(N, auto_chunk_size(M * C, 8))
    flops = 2 * N * M * C * (D + 2) + 3 * N * M * M
    seconds, ratios = [], []
    for _ in range(repeats):
        g = gemm_seconds(M, B)
        t = time.perf_counter()
        step()
        t = time.perf_counter() - t
        seconds.append(t)
        ratios.append((flops / t) / (2 * M * M * B / g))
    t = statistics.median(seconds)
    return {**spec, "seconds": t, "gflops": flops / t / 1e9, "fraction": statistics.median(ratios),
            "above_baseline_bytes": peak_rss() - baseline}


def format_results(rows: list[dict]) -> str:
    lines = ["| N | M | C | set-up | s / (objective + gradient) | × deltas | GFLOP/s counted "
             "| of GEMM rate | memory above baseline GB |", "|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    base = {(r["N"], r["M"], r["C"]): r["seconds"] for r in rows
            if r["setup"] == "deltas" and "seconds" in r}
    for r in rows:
        key = (r["N"], r["M"], r["C"])
        if "seconds" not in r:
            lines.append(f"| {r['N']:,} | {r['M']} | {r['C']} | {r['setup']} | "
                         f"{r.get('skipped') or 'failed: ' + r.get('error', '')} | | | | |")
            continue
        ratio = r["seconds"] / base[key] if key in base else float("nan")
        rate = (f"{r['gflops']:.1f} | {r['fraction']:.0%}" if r["setup"] == "deltas" else " | ")
        lines.append(f"| {r['N']:,} | {r['M']} | {r['C']} | {r['setup']} | {r['seconds']:.3f} | "
                     f"{ratio:.2f} | {rate} | {gigabytes(r['above_baseline_bytes'])} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_bench_args(bench_parser("sparsegp bench interdomain", __doc__, 3), argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    repeats = 2 if args.quick else max(3, args.repeats)
    rows = []
    print(machine(), flush=True)
    for N, M, C in QUICK_CASES if args.quick else FULL_CASES:
        for setup in SETUPS:
            spec = {"N": N, "M": M, "C": C, "setup": setup, "repeats": repeats}
            if setup != "deltas" and 4 * N * M * C * 8 > NAIVE_MEMORY_LIMIT:
                row = {**spec, "skipped": f"skipped: needs ≈ {gigabytes(4 * N * M * C * 8)} GB"}
            elif setup == "points M·C" and M * C > 4000:
                row = {**spec, "skipped": "skipped: an (M·C)² algebra above 4000²"}
            else:
                row = run_in_subprocess(spec, __name__)
            rows.append(row)
            print(json.dumps(row), flush=True)
    report(format_results(rows), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
