"""Sparse GP regression on data sharded across processes with torch.distributed.

    torchrun --nproc-per-node 2 examples/distributed_sgpr.py [--quick] [--data-dir DIR]

Each rank loads only its shard of kin40k (10,000 training points, 8 inputs; from
DIR/kin40k, by default $SPARSEGP_DATA_DIR or the user cache folder as for the experiments
(docs/data.md); synthetic data of the same shape if it is absent). SGPR all-reduces its sufficient
statistics, so every rank sees the objective and gradient of all the data and L-BFGS runs in
lock-step. NCCL when every rank has a GPU of its own, gloo when ranks share GPUs or have none
(`sg.distributed.init_from_environment`). Also runs as a plain single process
(python examples/distributed_sgpr.py).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch

import sparsegp as sg


def load(data_dir: Path, quick: bool) -> tuple[np.ndarray, ...]:
    folder = data_dir / "kin40k"
    if (folder / "kin40k_train_data.asc.gz").exists():
        X = np.loadtxt(folder / "kin40k_train_data.asc.gz")
        y = np.loadtxt(folder / "kin40k_train_labels.asc.gz")
        Xt = np.loadtxt(folder / "kin40k_test_data.asc.gz")[:2000]
        yt = np.loadtxt(folder / "kin40k_test_labels.asc.gz")[:2000]
        source = "kin40k"
    else:
        rng = np.random.default_rng(0)
        X, Xt = rng.normal(size=(10_000, 8)), rng.normal(size=(2000, 8))
        f = lambda A: np.sin(A[:, 0]) * np.cos(A[:, 1]) + 0.3 * A[:, 2]  # noqa: E731
        y, yt = f(X) + 0.1 * rng.normal(size=10_000), f(Xt)
        source = "synthetic (kin40k not found)"
    n = 2000 if quick else X.shape[0]
    return X[:n], y[:n], Xt, yt, source


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=None,
                   help="folder holding kin40k/ (default: $SPARSEGP_DATA_DIR, else the user cache "
                   "folder, ~/.cache/sparsegp/data on Linux)")
    p.add_argument("--quick", action="store_true", help="2,000 points, 30 iterations")
    p.add_argument("-M", "--num-inducing", type=int, default=200)
    args = p.parse_args()

    distributed = "RANK" in os.environ
    device = torch.device("cpu")
    if distributed:  # NCCL with a GPU per rank, gloo when ranks share GPUs or have none
        device = sg.distributed.init_from_environment(timeout=300.0)
    rank = torch.distributed.get_rank() if distributed else 0
    world = torch.distributed.get_world_size() if distributed else 1

    from sparsegp.experiments.shared.datafolder import default_data_dir

    X, y, Xt, yt, source = load(args.data_dir or default_data_dir(), args.quick)
    shard = slice(rank, None, world)  # this rank's rows only
    Xr = torch.as_tensor(X[shard], device=device)
    yr = torch.as_tensor(y[shard], device=device)
    M = 50 if args.quick else args.num_inducing
    model = sg.SGPR(Xr, yr, inducing_points=M, standardize_y=True)
    start = time.perf_counter()
    result = model.fit(maxiter=30 if args.quick else 300)
    seconds = time.perf_counter() - start
    with torch.no_grad():  # tensors in, tensors out (on the device)
        mean, _ = model.predict(torch.as_tensor(Xt, device=device))
    rmse = float(np.sqrt(np.mean((mean.cpu().numpy() - yt) ** 2)))
    upper = model.upper_bound()  # a collective: every rank must call it
    if rank == 0:
        print(f"{source}: N = {model.num_data} over {world} process(es) ({Xr.shape[0]} here), "
              f"M = {M}, {result.iterations} iterations in {seconds:.1f} s")
        print(f"objective {result.objective:.2f}, upper bound {upper:.2f}, "
              f"noise {model.noise_variance:.4f}, test RMSE {rmse:.4f}")
    if distributed:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
