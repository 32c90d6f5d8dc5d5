"""Where one collapsed objective + gradient spends its time, by operator (torch.profiler).

    python benchmarks/profile_objective.py --device cuda --N 1000000 --M 1000 --method vfe
    python benchmarks/profile_objective.py --N 20000 --M 200          # on the CPU

Prints what takes the most time — the device's kernels on a GPU (cuBLAS's triangular-solve
kernels, its GEMM kernels, element-wise work), the operators on a CPU — with their share of
the total, so that a GEMM-rate target's gap can be read off.
"""

from __future__ import annotations

import argparse

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import sparsegp as sg
from sparsegp.benchmarking import speed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--N", type=int, default=20_000)
    p.add_argument("--M", type=int, default=200)
    p.add_argument("--method", default="vfe", choices=sorted(speed.METHODS))
    p.add_argument("--rows", type=int, default=12, help="operators listed")
    args = p.parse_args()
    X, y, Z = speed.random_problem(args.N, args.M, device=args.device)
    approx, alpha, flops_per = speed.METHODS[args.method]
    model = sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=[2.0] * X.shape[1]),
                    inducing_points=Z, approximation=approx, alpha=alpha, noise_variance=0.1,
                    standardize_y=False)
    params = [q for q in model.parameters() if q.requires_grad]

    def step() -> None:
        torch.autograd.grad(model.training_loss(), params)
        speed.synchronise(args.device)
    step()  # warm-up
    cuda = args.device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, with_flops=True) as prof:
        step()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    # on a GPU the kernels (and copies) themselves: an operator's device time is its kernels',
    # listed again under the operator's name, so counting both would count it twice
    events = [e for e in prof.key_averages() if getattr(e, key) > 0
              and (not cuda or e.device_type == DeviceType.CUDA)]
    total = sum(getattr(e, key) for e in events)
    print(speed.machine(args.device))
    print(f"{args.method} N={args.N} M={args.M}: {total / 1e6:.3f} s of "
          f"{'device' if cuda else 'CPU'} time; {flops_per}·N·M² = "
          f"{flops_per * args.N * args.M ** 2 / total / 1e3:.0f} GFLOP/s over it")
    print("| operator | calls | seconds | share | GFLOP/s |\n|---|---:|---:|---:|---:|")
    for e in sorted(events, key=lambda e: -getattr(e, key))[: args.rows]:
        t = getattr(e, key)
        rate = f"{e.flops / t / 1e3:.0f}" if e.flops else ""
        print(f"| {e.key[:60]} | {e.count} | {t / 1e6:.4f} | {t / total:.1%} | {rate} |")


if __name__ == "__main__":
    main()
