"""Seconds per Adam step of the 10-class MNIST convolutional runs of `sparsegp experiment
vdw2018-conv` (their models, batches and learning rate), on a device: what a full run of each
kernel costs before starting one.

    python benchmarks/mnist_step_rate.py --device cuda --data-dir DATA [--quick] [--out F]

DATA holds mnist/mnist.npz (docs/data.md). Each kernel's model is built, 2 steps warm up,
then 8 steps are timed; one JSON row per kernel (also appended to --out when given).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from sparsegp.experiments.vdw2018 import conv as vc
from sparsegp.experiments.vdw2018.conv_runs import Segments


def synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--quick", action="store_true", help="the experiment's --quick sizes")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    device = torch.device(args.device)
    cfg = vc.QUICK if args.quick else vc.FULL
    images = vc.load_images("mnist", args.data_dir, cfg, device)
    for spec in vc.specs("mnist", cfg, images):
        start = time.perf_counter()
        model = spec.build(images.X, images.y)
        build = time.perf_counter() - start
        for steps in (2, 8):  # warm-up, then timed
            synchronise(device)
            start = time.perf_counter()
            model.fit(data=Segments(images.X, images.y, spec.batch, steps, 0), epochs=1,
                      lr=spec.lr, natgrad=False, progress=False)
            synchronise(device)
        per_step = (time.perf_counter() - start) / 8
        row = {"kernel": spec.kernel, "build_s": build, "seconds_per_step": per_step,
               "steps": cfg.mnist_steps, "hours": per_step * cfg.mnist_steps / 3600,
               "peak_GB": (torch.cuda.max_memory_allocated() / 1e9
                           if device.type == "cuda" else None)}
        print(json.dumps(row), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()


if __name__ == "__main__":
    main()
