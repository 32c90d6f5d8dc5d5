"""`sparsegp experiment vdw2018-conv`: convolutional GPs with inducing patches (van der Wilk,
Rasmussen & Hensman 2017; van der Wilk 2018, ch. 5) on rectangles, MNIST 0-vs-1 and MNIST.

Three tasks, each a section of results.md with a CSV table, a CSV of traces and figures:
1. rectangles (1200 binary 28×28 training images, Bernoulli likelihood): translation-invariant
   and weighted convolutional kernels (3×3 patches, M = 16 inducing patches drawn from
   uniform noise; SVGP trained by Adam, lr 0.01, on minibatches of 100) against an SE kernel on
   whole images whose inducing points are all the training images (Z = X fixed, so the SVGP is
   the full variational GP), trained by L-BFGS-B on the full ELBO (`SVGP.fit` would use
   minibatch Adam for a non-Gaussian likelihood); figures of the inducing patches and weights;
2. mnist01 (MNIST zeros against ones): invariant and weighted kernels, 5×5 patches, M = 50
   patches drawn from the training images (as in the authors' code), Adam lr 0.01, batches of
   100; inducing patches and the map of the patch weights;
3. mnist (10 classes, robust-max likelihood): invariant, SE, weighted and weighted + SE (a sum
   with separate inducing sets, §5.7.2, built by SVGP from `inducing_points=M`), M = 750 per
   set (random training patches / images), Adam lr 0.001 on batches of 200: the final table
   (thesis Table 5.1).
Every run traces the ELBO per training image (estimated on a fixed subset of the training
images), test error and NLPP (mean −log p(y*|data), on a fixed subset of the test images)
against training time, and checkpoints into OUT/checkpoints: rerun with the same --out to
resume (`conv_runs`). Final scores use the whole test set (`Config.test` caps it).
Budgets (`FULL`) fit a 2-core machine, far below the authors' GPU runs: rectangles ~30 min,
mnist01 ~18 min, mnist ~10 h (measured on one torch thread; see `run`).
`--quick`: 200 training and 500 test images average-pooled to 14×14, 6 steps, small M: every
path (all kernels, checkpoints) in seconds. `--kernels` trains only some kernels' runs (the
others are reported from their records), e.g. to share a CPU budget among the MNIST kernels.
Data: DATA_DIR/rectangles/rectangles.npz and DATA_DIR/mnist/mnist.npz (docs/data.md); a task
without its file is skipped, and when no task asked for can run nothing is (exit status 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...features import InducingPatches
from ...kernels import Convolutional, SquaredExponential
from ...likelihoods import Bernoulli, MultiClass
from ...models import SVGP, load
from ...validation import ArrayLike
from ..shared.command import experiment_parser, run_with_data
from ..shared.datafolder import Missing, data_folder, missing_files, skipped_for_data
from ..shared.sections import Section, run_sections
from ..shared.tables import Table
from .conv_plots import plot_inducing_patches, plot_traces, plot_weights
from .conv_runs import Images, Spec, execute

TASKS = ("rectangles", "mnist01", "mnist")
#: The kernels of the tasks' runs (`--kernels`): rectangles has the first three, mnist01 the
#: first two, mnist all four.
KERNEL_NAMES = ("invariant", "weighted", "SE", "weighted + SE")
FILES = {"rectangles": ("rectangles", "rectangles.npz"), "mnist01": ("mnist", "mnist.npz"),
         "mnist": ("mnist", "mnist.npz")}
COLUMNS = ["kernel", "M", "test error %", "test NLPP", "ELBO/N", "steps", "train seconds",
           "status"]


@dataclass(frozen=True)
class Config:
    """Sizes and budgets (`FULL` or `QUICK`). Steps are Adam steps (L-BFGS-B iterations for
    the rectangles SE model); `segment` steps pass between checkpoint opportunities."""

    train: int | None = None  # training images per task (None: all)
    test: int | None = None  # test images for the final scores (None: all)
    trace_train: int = 500  # training images of the periodic ELBO estimate
    trace_test: int = 1000  # test images of the periodic error and NLPP
    downsample: int = 1  # average-pool the images by this factor
    rect_M: int = 16
    rect_steps: int = 600  # 50 epochs of 12 batches
    rect_se_maxiter: int = 100
    mnist01_M: int = 50
    mnist01_steps: int = 600
    mnist_M: int = 750
    mnist_steps: int = 2_000  # ~7 epochs: 5-7.5 s a step for the convolutional kernels
    batch: int = 100  # rectangles and mnist01
    mnist_batch: int = 200
    mnist_lr: float = 0.001
    segment: int = 12
    evals: int = 8
    checkpoint_seconds: float = 600.0


FULL = Config()
QUICK = Config(train=200, test=500, trace_train=50, trace_test=100, downsample=2, rect_M=8,
               rect_steps=6, rect_se_maxiter=6, mnist01_M=10, mnist01_steps=6, mnist_M=20,
               mnist_steps=6, batch=50, mnist_batch=50, mnist_lr=0.01, segment=3, evals=2,
               checkpoint_seconds=0.0)


def missing_data(data_dir: Path, tasks: Sequence[str] = TASKS) -> Missing:
    """Per task of `tasks`, its data file when missing from `data_dir` (else nothing)."""
    return {t: missing_files(Path(data_dir) / FILES[t][0], [FILES[t][1]]) for t in tasks}


def load_images(task: str, folder: Path, cfg: Config, device: torch.device) -> Images:
    """A task's images (pixels scaled to [0, 1], flattened rows of H·W) with seeded subsets."""
    with np.load(folder / FILES[task][0] / FILES[task][1]) as d:
        X, y, Xs, ys = d["x_train"], d["y_train"], d["x_test"], d["y_test"]
    if task == "mnist01":
        X, y = X[y <= 1], y[y <= 1]
        Xs, ys = Xs[ys <= 1], ys[ys <= 1]
    rng = np.random.default_rng(0)

    def subset(A: np.ndarray, b: np.ndarray, n: int | None) -> tuple[np.ndarray, np.ndarray]:
        keep = np.sort(rng.choice(A.shape[0], n, replace=False)) if n and n < A.shape[0] else \
            np.arange(A.shape[0])
        return A[keep], b[keep]

    X, y = subset(X, y, cfg.train)
    Xs, ys = subset(Xs, ys, cfg.test)
    f = cfg.downsample
    scale = 1.0 if X.max() <= 1 else 255.0

    def rows(A: np.ndarray) -> torch.Tensor:
        A = A.astype(np.float64) / scale
        if f > 1:
            n, H, W = A.shape
            A = A[:, :H - H % f, :W - W % f].reshape(n, H // f, f, W // f, f).mean((2, 4))
        return torch.as_tensor(A.reshape(A.shape[0], -1), device=device)

    tX, tXs = rows(X), rows(Xs)
    ty, tys = (torch.as_tensor(b.astype(np.float64), device=device) for b in (y, ys))
    a = rng.permutation(tX.shape[0])[:cfg.trace_train]
    b = rng.permutation(tXs.shape[0])[:cfg.trace_test]
    side = X.shape[1] // f, X.shape[2] // f
    return Images(tX, ty, tXs, tys, side, tX[a], ty[a], tXs[b], tys[b])


def conv(images: Images, patch: int, weighted: bool) -> Convolutional:
    return Convolutional(SquaredExponential(), image_shape=images.image_shape,
                         patch_shape=(patch, patch), weighted=weighted)


def specs(task: str, cfg: Config, images: Images) -> list[Spec]:
    """The runs of a task, each with its model builder and budget."""
    setting = (("train", images.X.shape[0]), ("test", images.Xs.shape[0]),
               ("trace_train", cfg.trace_train), ("trace_test", cfg.trace_test),
               ("downsample", cfg.downsample))
    if task == "rectangles":
        def rect(weighted: bool) -> Callable[[Any, Any], SVGP]:
            def build(X: ArrayLike, y: ArrayLike) -> SVGP:
                Z = np.random.default_rng(0).uniform(size=(cfg.rect_M, 9))
                return SVGP(X, y, kernel=conv(images, 3, weighted), likelihood=Bernoulli(),
                            inducing_points=InducingPatches(Z))
            return build

        def se(X: ArrayLike, y: ArrayLike) -> SVGP:
            model = SVGP(X, y, kernel=SquaredExponential(), likelihood=Bernoulli(), inducing_points=X)
            return model.freeze("inducing_points")

        common: dict[str, Any] = dict(segment=cfg.segment, batch=cfg.batch, lr=0.01, evals=cfg.evals,
                      setting=(*setting, ("M", cfg.rect_M)))
        return [Spec(task, "invariant", rect(False), steps=cfg.rect_steps, **common),
                Spec(task, "weighted", rect(True), steps=cfg.rect_steps, **common),
                Spec(task, "SE", se, optimiser="lbfgs", steps=cfg.rect_se_maxiter, segment=1,
                     evals=cfg.evals, setting=(*setting, ("M", images.X.shape[0])))]
    if task == "mnist01":
        def digits(weighted: bool) -> Callable[[Any, Any], SVGP]:
            def build(X: ArrayLike, y: ArrayLike) -> SVGP:
                k = conv(images, 5, weighted)
                Z = InducingPatches.from_data(X, cfg.mnist01_M, method="random", kernel=k)
                return SVGP(X, y, kernel=k, likelihood=Bernoulli(), inducing_points=Z)
            return build

        common = dict(steps=cfg.mnist01_steps, segment=cfg.segment, batch=cfg.batch, lr=0.01,
                      evals=cfg.evals, setting=(*setting, ("M", cfg.mnist01_M)))
        return [Spec(task, "invariant", digits(False), **common),
                Spec(task, "weighted", digits(True), **common)]

    kernels: dict[str, Callable[[], Any]] = {
        "invariant": lambda: conv(images, 5, False), "SE": SquaredExponential,
        "weighted": lambda: conv(images, 5, True),
        "weighted + SE": lambda: conv(images, 5, True) + SquaredExponential()}

    def classes(make: Callable[[], Any]) -> Callable[[Any, Any], SVGP]:
        # random training images for SE as in the authors' code (theirs: distinct training
        # patches for the convolutional part); k-means++ seeding would cost ~7 min for the SE
        # part alone (60000 × 784, M = 750) at every build, resumes included
        # chunk_size: SVGP's automatic chunk (from Kuf's M·Q values per image) is 2 rows here,
        # and every chunk repeats C·M²-sized work on q(u): measured 80 s and a 20 GB peak per
        # weighted + SE step (batch 200) against 7.5 s and 1.3 GB with whole batches
        return lambda X, y: SVGP(X, y, kernel=make(), inducing_points=cfg.mnist_M,
                                 inducing_init="random", chunk_size=cfg.mnist_batch,
                                 likelihood=MultiClass(10, link="robustmax"))

    return [Spec(task, name, classes(make), steps=cfg.mnist_steps, segment=cfg.segment,
                 batch=cfg.mnist_batch, lr=cfg.mnist_lr, evals=cfg.evals,
                 setting=(*setting, ("M", cfg.mnist_M))) for name, make in kernels.items()]


DESCRIPTIONS = {
    "rectangles": ("1. Rectangles", "Rectangles (Larochelle et al. 2007; taller or wider "
                   "outline), Bernoulli (probit) likelihood. Convolutional kernels: 3×3 patches, "
                   "M = {M} inducing patches from uniform noise, Adam (lr 0.01, batches of {batch}) "
                   "on every parameter for {steps} steps. SE: all {N} training images as fixed "
                   "inducing points, L-BFGS-B (≤ {maxiter} iterations) on the full ELBO."),
    "mnist01": ("2. MNIST 0 vs 1", "MNIST zeros against ones, Bernoulli (probit) likelihood, "
                "5×5 patches, M = {M} inducing patches drawn from the training images, Adam (lr "
                "0.01, batches of {batch}) for {steps} steps."),
    "mnist": ("3. MNIST, 10 classes (thesis Table 5.1)", "MNIST, robust-max likelihood (ε = "
              "1e-3), 10 latent GPs sharing kernel and inducing variables; 5×5 patches, M = {M} "
              "per inducing set (random training patches / images), Adam (lr {lr}, batches of "
              "{batch}) for {steps} steps. weighted + SE sums a weighted convolutional and an SE "
              "kernel with separate inducing sets and a joint q(u)."),
}


def task_section(task: str, cfg: Config, data_dir: Path, out: Path, device: torch.device,
                 log: Callable[[str], None] | None, progress: bool | None,
                 train: bool = True, kernels: Sequence[str] | None = None) -> Section:
    """A task's section: its runs trained (or, without `train`, reported from the records an
    earlier invocation left in `out`; `kernels` trains only the runs of those kernels),
    tables, traces and figures."""
    title, text = DESCRIPTIONS[task]
    missing = missing_data(data_dir, (task,))[task]
    if missing:
        sec = Section(task, title, f"This task reads {FILES[task][0]}/{FILES[task][1]}.")
        sec.skipped = skipped_for_data(data_dir, missing)
        return sec
    images = load_images(task, data_dir, cfg, device)
    runs = specs(task, cfg, images)
    M = {"rectangles": cfg.rect_M, "mnist01": cfg.mnist01_M, "mnist": cfg.mnist_M}[task]
    description = text.format(M=M, steps=runs[0].steps, N=images.X.shape[0],
                              maxiter=cfg.rect_se_maxiter, batch=runs[0].batch, lr=runs[0].lr)
    H, W = images.image_shape
    description += (f" {images.X.shape[0]} training images of {H}×{W}; final scores on "
                    f"{images.Xs.shape[0]} test images; traces on fixed subsets of "
                    f"{images.trace_X.shape[0]} training and {images.trace_Xs.shape[0]} test "
                    "images. ELBO/N is the ELBO per training image estimated on that subset; train "
                    "seconds are optimiser time (tracing excluded) summed over invocations, while "
                    "the section's time below counts this invocation only.")
    if not train:
        description += " (Reported from an earlier invocation's records; not trained now.)"
    sec = Section(task, title, description)
    folder = out / "checkpoints"
    records = [(s, execute(s, images, folder, log, progress, cfg.checkpoint_seconds,
                           train and (kernels is None or s.kernel in kernels))) for s in runs]
    table = Table(title.split(". ", 1)[1], COLUMNS)
    traces = Table(f"{task} traces", ["kernel", "step", "train seconds", "ELBO/N",
                                      "test error %", "test NLPP"])
    for spec, rec in records:
        done = rec.get("status") == "done"
        table.add(spec.kernel, rec.get("M"), 100 * rec["error"] if done else None,
                  rec.get("nlpp") if done else None, rec.get("elbo") if done else None,
                  min(rec.get("segments", 0) * spec.segment, spec.steps),
                  rec.get("train_seconds"), {"running": "unfinished"}.get(rec["status"], rec["status"]))
        for p in rec.get("trace", []):
            traces.add(spec.kernel, p["step"], p["seconds"], p["elbo"], 100 * p["error"], p["nlpp"])
        if rec.get("message"):
            sec.findings.append(f"{spec.kernel}: {rec['message']}")
    sec.tables.append(table)
    sec.files += [table.write_csv(out / f"{task}.csv"), traces.write_csv(out / f"{task}_traces.csv"),
                  plot_traces([(s.kernel, r) for s, r in records], out / f"{task}_traces.png",
                              f"{title}: training traces")]
    finished = {s.kernel: load(folder / f"{s.name}.pt") for s, r in records
                if r.get("status") == "done" and (folder / f"{s.name}.pt").is_file()}
    patches = [(k, m) for k, m in finished.items() if isinstance(m.feature, InducingPatches)
               and m.num_latent == 1]
    if patches:
        sec.files.append(plot_inducing_patches(patches, out / f"{task}_patches.png",
                                               f"{title}: inducing patches sorted by E[u]"))
    if "weighted" in finished:
        sec.files.append(plot_weights(finished["weighted"], out / f"{task}_weights.png",
                                      f"{title}: patch weights of the weighted kernel"))
    scored = [(r["error"], s.kernel, r["nlpp"]) for s, r in records if r.get("status") == "done"]
    sec.findings += [f"{k}: test error {100 * e:.2f}%, NLPP {n:.4f}" for e, k, n in scored]
    if len(scored) > 1:
        e, k, _ = min(scored)
        sec.findings.append(f"lowest test error: {k} ({100 * e:.2f}%)")
    return sec


def run(out_dir: str | Path = "vdw2018-conv-results", quick: bool = False,
        data_dir: str | Path | None = None, tasks: Sequence[str] = TASKS, device: str = "cpu",
        log: Callable[[str], None] | None = print, progress: bool | None = None,
        kernels: Sequence[str] | None = None) -> list[Path]:
    """Run `tasks` into `out_dir` (resuming what a previous run there left); return the files
    written. Tasks whose data are missing from `data_dir` are skipped with the reason; other
    tasks with records in `out_dir` are reported from them (not trained), so that results.md
    covers every task run there. `kernels` (names of `KERNEL_NAMES`) trains only those
    kernels' runs; the others are reported from their records."""
    unknown = sorted(set(kernels or ()) - set(KERNEL_NAMES))
    if unknown:
        raise ValueError(f"unknown kernel(s) {unknown}; the kernels are {list(KERNEL_NAMES)}")
    out, cfg = Path(out_dir), (QUICK if quick else FULL)
    folder = data_folder(data_dir)
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available to torch here")
    # One torch thread: the work is elementwise on [Q, Q] blocks, and on a shared 2-core
    # machine two threads ran 4-9× slower than one (measured, rectangles, batch of 100).
    earlier = {t for t in TASKS if any((out / "checkpoints").glob(f"{t}-*.json"))}
    steps: list[tuple[Callable[[], Section], int]] = [
        (partial(task_section, t, cfg, folder, out, dev, log, progress, t in tasks, kernels), 1)
        for t in TASKS if t in tasks or t in earlier]
    mode = ("quick (200 training / 500 test images pooled to 14×14, 6 steps, small M)" if quick else
            "full (budgets of vdw2018_conv.FULL)")
    return run_sections(out, "van der Wilk (2018) ch. 5: convolutional Gaussian processes", mode,
                        steps, log)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The experiment's options (on `parser`, e.g. a CLI subparser, or a new parser)."""
    p = experiment_parser(parser, "sparsegp experiment vdw2018-conv", __doc__,
                          "vdw2018-conv-results", "small subsets, 6 steps (seconds)",
                          "rectangles/ and mnist/")
    p.add_argument("--task", choices=[*TASKS, "all"], default="all", help="which task (default: all)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cuda (default: cpu)")
    p.add_argument("--kernels", nargs="+", choices=KERNEL_NAMES, metavar="KERNEL",
                   help="train only these kernels' runs (of " + ", ".join(
                       repr(k) for k in KERNEL_NAMES) + "); the others are reported from "
                   "their records, e.g. to give every MNIST kernel a share of a CPU budget")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (2 when no task asked for has its
    data: the one `--task` names, or all three)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    tasks = TASKS if args.task == "all" else (args.task,)
    return run_with_data(parser.prog, args.data_dir, lambda d: missing_data(d, tasks), False,
                         lambda d: run(args.out, quick=args.quick, data_dir=d, tasks=tasks,
                                       device=args.device, kernels=args.kernels))


if __name__ == "__main__":
    raise SystemExit(main())
