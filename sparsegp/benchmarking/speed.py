"""`sparsegp bench speed`: seconds, GFLOP/s and peak memory of objective + gradient.

For each (N, M) with D = 8 and a squared-exponential ARD kernel, and each of VFE, FITC and
PEP(0.5) (and the naive baseline of `naive.py` where it fits in memory), a fresh process
times `training_loss()` plus its gradient (median of ≥ 5 after a warm-up) and, right before
every repetition, a float64 matrix product of the chunk's shapes (M×B by B×M): the ratio of
the two rates is taken repetition by repetition, so that drift of the machine's speed
affects both. Flops are counted by this convention: 3·N·M² for VFE (one symmetric
N·M² product forward, its transpose products backward), 6·N·M² for FITC and PEP. Peak
resident memory is the worker process's own (`ru_maxrss`), reported in total and above the
worker's baseline (interpreter, torch and the data). A prediction case times mean and
variance at many test points against the bound the GEMM rate sets (2M² flops per point).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import cast

FULL_CASES = [(10_000, 100), (10_000, 500), (100_000, 500), (100_000, 1000), (1_000_000, 500)]
QUICK_CASES = [(2_000, 50)]
METHODS = {"vfe": ("vfe", None, 3), "fitc": ("fitc", None, 6), "pep": ("pep", 0.5, 6)}
D = 8
NAIVE_MEMORY_LIMIT = 6 * 2**30  # bytes; the naive baseline is skipped above this estimate


def peak_rss(device: str = "cpu") -> int:
    """Peak memory of this process: its resident set on a CPU, torch's peak allocation on a
    CUDA device."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def synchronise(device: str) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously; timings must not)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def random_problem(N: int, M: int, seed: int = 0, device: str = "cpu"):
    import torch

    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, D, dtype=torch.float64, generator=g)
    y = torch.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * torch.randn(N, dtype=torch.float64, generator=g)
    Z = X[torch.randperm(N, generator=g)[:M]].clone()
    return X.to(device), y.to(device), Z.to(device)


def gemm_seconds(M: int, B: int, device: str = "cpu") -> float:
    """One float64 product of the chunk's shapes, [M, B] @ [B, M] (best of three)."""
    import torch

    K = torch.randn(M, B, dtype=torch.float64, device=device)
    K2 = torch.randn(M, B, dtype=torch.float64, device=device)
    best = float("inf")
    for _ in range(3):
        synchronise(device)
        t = time.perf_counter()
        K @ K2.mT
        synchronise(device)
        best = min(best, time.perf_counter() - t)
    return best


def worker(spec: dict) -> dict:
    """Run one case in this process and return its measurements."""
    import torch

    import sparsegp as sg
    from sparsegp.benchmarking.naive import naive_collapsed
    from sparsegp.runtime.chunking import auto_chunk_size

    N, M, method, repeats = spec["N"], spec["M"], spec["method"], spec["repeats"]
    device = spec.get("device") or "cpu"
    X, y, Z = random_problem(N, M, device=device)
    baseline = peak_rss(device)
    B = min(N, spec.get("chunk_size") or auto_chunk_size(M, 8, device=torch.device(device)))
    kernel = sg.kernels.SquaredExponential(lengthscale=[2.0] * D, variance=1.0).to(device)
    if method == "predict":
        return _predict_worker(spec, X, y, Z, kernel, baseline)
    approx, alpha, _ = METHODS[method.removeprefix("naive-")]
    model = sg.SGPR(X, y, kernel=kernel, inducing_points=Z, approximation=approx, alpha=alpha,
                    noise_variance=0.1, chunk_size=B, standardize_y=False)
    X, y = model.X, model.y
    assert X is not None and y is not None  # the model holds its data
    params = [p for p in model.parameters() if p.requires_grad]
    if method.startswith("naive-"):
        def step() -> None:
            Zm = cast(sg.features.InducingPoints, model.feature).Z  # inducing_points=Z
            F = naive_collapsed(Zm, model.kernel.value("lengthscale"),
                                model.kernel.value("variance"), model.value("noise_variance"),
                                X, y, approx, alpha)
            torch.autograd.grad(-F, params)
    else:
        def step() -> None:
            torch.autograd.grad(model.training_loss(), params)
    step()  # warm-up
    seconds, ratios = [], []
    flops = METHODS[method.removeprefix("naive-")][2] * N * M * M
    for _ in range(repeats):
        g = gemm_seconds(M, B, device)
        synchronise(device)
        t = time.perf_counter()
        step()
        synchronise(device)
        t = time.perf_counter() - t
        seconds.append(t)
        ratios.append((flops / t) / (2 * M * M * B / g))
    gemm = 2 * M * M * B / gemm_seconds(M, B, device) / 1e9
    peak = peak_rss(device)
    return {**spec, "chunk_size": B, "seconds": statistics.median(seconds),
            "gflops": flops / statistics.median(seconds) / 1e9,
            "fraction": statistics.median(ratios), "gemm_gflops": gemm,
            "peak_bytes": peak, "above_baseline_bytes": peak - baseline}


def _predict_worker(spec: dict, X, y, Z, kernel, baseline: int) -> dict:
    import torch

    import sparsegp as sg

    M, n_test = spec["M"], spec["n_test"]
    device = spec.get("device") or "cpu"
    model = sg.SGPR(X, y, kernel=kernel, inducing_points=Z, noise_variance=0.1,
                    standardize_y=False)
    post = model.posterior()
    Xs = torch.randn(n_test, D, dtype=torch.float64,
                     generator=torch.Generator().manual_seed(1)).to(device)
    B = post._rows_per_chunk()
    post.predict_f(Xs[:B])  # warm-up
    seconds, ratios = [], []
    for _ in range(spec["repeats"]):
        g = gemm_seconds(M, B, device)
        synchronise(device)
        t = time.perf_counter()
        with torch.no_grad():
            post.predict_f(Xs)
        synchronise(device)
        t = time.perf_counter() - t
        seconds.append(t)
        bound = 2 * M * M * B / g / (2 * M * M)  # points/s if only the variance's product ran
        ratios.append((n_test / t) / bound)
    t = statistics.median(seconds)
    return {**spec, "chunk_size": B, "seconds": t, "points_per_second": n_test / t,
            "fraction": statistics.median(ratios),
            "bound_points_per_second": 2 * M * M * B / gemm_seconds(M, B, device) / (2 * M * M),
            "peak_bytes": peak_rss(device), "above_baseline_bytes": peak_rss(device) - baseline}


def run_in_subprocess(spec: dict, module: str = "sparsegp.benchmarking.speed") -> dict:
    """One case in a fresh process running `module --worker SPEC`; its measurements."""
    cmd = [sys.executable, "-m", module, "--worker", json.dumps(spec)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return {**spec, "error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def machine(device: str = "cpu") -> str:
    """The CPU (and the GPU for a CUDA `device`), torch, its BLAS and threads, Python, OS."""
    import torch

    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    blas = "MKL" if torch.backends.mkl.is_available() else "other BLAS"
    gpu = (f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda}) on "
           if device.startswith("cuda") else "")
    return (f"{gpu}{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({blas}, "
            f"{torch.get_num_threads()} threads), Python {platform.python_version()}, "
            f"{platform.system()} {platform.machine()}")


def gigabytes(b: float) -> str:
    return f"{b / 2**30:.2f}"


def format_results(rows: list[dict]) -> str:
    lines = ["| N | M | method | chunk | s / (objective + gradient) | GFLOP/s | of GEMM rate "
             "| GEMM GFLOP/s | peak memory GB | above baseline GB |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r["method"] == "predict":
            continue
        if "error" in r or "skipped" in r:
            lines.append(f"| {r['N']:,} | {r['M']} | {r['method']} | | "
                         f"{r.get('skipped') or 'failed: ' + r['error']} | | | | | |")
            continue
        lines.append(
            f"| {r['N']:,} | {r['M']} | {r['method']} | {r['chunk_size']} | {r['seconds']:.3f} | "
            f"{r['gflops']:.1f} | {r['fraction']:.0%} | {r['gemm_gflops']:.1f} | "
            f"{gigabytes(r['peak_bytes'])} | {gigabytes(r['above_baseline_bytes'])} |")
    preds = [r for r in rows if r["method"] == "predict" and "error" not in r]
    if preds:
        lines += ["", "| test points | M | seconds | points / s | bound from GEMM rate | of bound "
                  "| peak memory GB |", "|---:|---:|---:|---:|---:|---:|---:|"]
        for r in preds:
            lines.append(f"| {r['n_test']:,} | {r['M']} | {r['seconds']:.3f} | "
                         f"{r['points_per_second']:,.0f} | {r['bound_points_per_second']:,.0f} | "
                         f"{r['fraction']:.0%} | {gigabytes(r['peak_bytes'])} |")
    return "\n".join(lines)


def bench_parser(prog: str, description: str, repeats: int) -> argparse.ArgumentParser:
    """The options every benchmark takes: --quick, --repeats, --out (and the hidden --worker)."""
    p = argparse.ArgumentParser(prog=prog, description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke test, seconds)")
    p.add_argument("--repeats", type=int, default=repeats)
    p.add_argument("--out", type=Path, help="also write the markdown table to this file")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    return p


def parse_bench_args(p: argparse.ArgumentParser, argv: Sequence[str] | None
                     ) -> argparse.Namespace:
    """The parsed options, checked before anything runs: --out must be a writable file (not
    a folder, in an existing folder; `-` is standard output, where the table is printed) and
    --device (where the benchmark takes one) a device
    this torch has; otherwise argparse's one-line error (exit status 2)."""
    args = p.parse_args(argv)
    if args.out is not None and str(args.out) == "-":  # the table goes to standard output anyway
        args.out = None
    if args.out is not None:
        if args.out.is_dir() or not args.out.parent.is_dir():
            p.error(f"--out {args.out}: " + ("is a folder; give a file name" if args.out.is_dir()
                                             else f"the folder {args.out.parent} does not exist"))
    device = getattr(args, "device", None)
    if device is not None and not args.worker:
        import torch  # here only: the parent process of the workers stays light

        try:
            dev = torch.device(device)
        except RuntimeError:
            p.error(f"--device {device!r} is not a torch device (cpu, cuda or cuda:N)")
        if dev.type == "cuda" and not torch.cuda.is_available():
            p.error(f"--device {device}: this torch has no CUDA device")
        if dev.type not in ("cpu", "cuda"):
            p.error(f"--device {device}: the benchmarks run on cpu or cuda")
    return args


def report(text: str, out: Path | None, device: str = "cpu") -> None:
    """Print the table and, with `out`, write it (atomically) with the machine's description."""
    from ..runtime.files import write_atomically

    print("\n" + text)
    if out:
        write_atomically(out, f"Machine: {machine(device)}\n\n{text}\n", what="benchmark table")


def main(argv: Sequence[str] | None = None) -> int:
    p = bench_parser("sparsegp bench speed", __doc__, 5)
    p.add_argument("--methods", default="vfe,fitc,pep")
    p.add_argument("--no-naive", action="store_true", help="skip the naive baseline")
    p.add_argument("--chunk-size", type=int, help="rows per chunk (default: from the budget)")
    p.add_argument("--device", default="cpu",
                   help="torch device, e.g. cuda (default chunks then come from its free memory)")
    args = parse_bench_args(p, argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    cases = QUICK_CASES if args.quick else FULL_CASES
    repeats = max(5, args.repeats) if not args.quick else 2
    methods = [m for m in args.methods.split(",") if m]
    rows = []
    print(machine(args.device), flush=True)
    for N, M in cases:
        for method in methods + ([] if args.no_naive else [f"naive-{m}" for m in methods]):
            spec = {"N": N, "M": M, "method": method, "repeats": repeats,
                    "chunk_size": args.chunk_size, "device": args.device}
            if method.startswith("naive-") and 7 * N * M * 8 > NAIVE_MEMORY_LIMIT:
                row = {**spec, "skipped": f"skipped: needs ≈ {gigabytes(7 * N * M * 8)} GB"}
            else:
                row = run_in_subprocess(spec)
            rows.append(row)
            print(json.dumps(row), flush=True)
    n_test = 20_000 if args.quick else 1_000_000
    M_pred = 50 if args.quick else 500
    rows.append(run_in_subprocess({"N": 10_000 if not args.quick else 2_000, "M": M_pred, "method": "predict",
                      "n_test": n_test, "repeats": repeats, "device": args.device}))
    report(format_results(rows), args.out, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
