"""Prediction through the tensor path against the numpy path, same model, same inputs,
interleaved rounds in one run:

- numpy in, numpy out (the cached posterior, no graph);
- a tensor under `torch.no_grad()` (the cached posterior; tensors out);
- a tensor that requires grad with a frozen model (`requires_grad_(False)`): the cached
  posterior, the graph to the inputs only (what an acquisition function's optimiser needs);
- a tensor in grad mode with trainable parameters: the posterior built anew with the graph to
  every parameter, at every call (an O(N·M² + M³) build, the same work as one evaluation of
  the objective);
- joint samples (`predict_f_samples`, 16 samples at 500 points), 16 pathwise samples
  (`pathwise_samples`, 1024 feature pairs; built once) evaluated at the same 500 points, and
  `predict_f` at them, for the cost of sampling against predicting.

    python benchmarks/prediction_paths.py [--N 20000] [--M 300] [--Ns 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

import sparsegp as sg


def timed(f: Callable[[], object]) -> float:
    start = time.perf_counter()
    f()
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--N", type=int, default=20_000)
    p.add_argument("--M", type=int, default=300)
    p.add_argument("--Ns", type=int, default=20_000, help="test points")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (args.N, 4))
    y = np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.standard_normal(args.N)
    Xs = rng.uniform(-3, 3, (args.Ns, 4))
    Xt = torch.as_tensor(Xs)
    model = sg.SGPR(X, y, inducing_points=args.M)
    frozen = sg.SGPR(X, y, inducing_points=args.M).requires_grad_(False)
    model.predict(Xs), frozen.predict(Xs)  # build the cached posteriors
    paths = model.pathwise_samples(16, num_features=1024, seed=0)

    def no_grad() -> None:
        with torch.no_grad():
            model.predict(Xt)

    def inputs_only() -> None:
        x = Xt.clone().requires_grad_(True)
        mean, var = frozen.predict(x)
        (mean.sum() + var.sum()).backward()

    def every_parameter() -> None:
        x = Xt[:500].clone().requires_grad_(True)
        mean, var = model.predict(x)
        (mean.sum() + var.sum()).backward()

    cases: dict[str, Callable[[], object]] = {
        "numpy in, numpy out": lambda: model.predict(Xs),
        "tensor, no_grad": no_grad,
        "tensor, grad to the inputs (frozen model), incl. backward": inputs_only,
        "tensor, grad to every parameter (500 points), incl. backward": every_parameter,
        "objective evaluation (value + gradient), for scale": lambda: model.training_loss()
        .backward(),
        "predict_f mean at 500 points": lambda: model.predict_f(Xs[:500]),
        "predict_f_samples, 16 joint samples at 500 points": lambda: model.predict_f_samples(
            Xs[:500], 16, seed=0),
        "pathwise_samples: 16 paths evaluated at 500 points": lambda: paths(Xs[:500]),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, f in cases.items():
            times[name].append(timed(f))
    base = statistics.median(times["numpy in, numpy out"])
    print(f"SGPR N = {args.N}, M = {args.M}, D = 4, {args.Ns} test points, "
          f"{torch.get_num_threads()} thread(s), torch {torch.__version__}; median of "
          f"{args.rounds} interleaved rounds")
    print(f"{'case':<64} {'seconds':>9} {'vs numpy':>9}")
    for name, t in times.items():
        med = statistics.median(t)
        print(f"{name:<64} {med:9.4f} {med / base:9.2f}")


if __name__ == "__main__":
    main()
