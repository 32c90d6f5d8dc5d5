"""`sparsegp bench conv`: images per second of an SVGP training step with a convolutional kernel.

For 28×28 images, 3×3 and 5×5 patches (translation-invariant, and weighted), M = 750 inducing
patches and a minibatch of B = 100, a fresh process times one training step of a whitened SVGP
with a Bernoulli likelihood — the minibatch ELBO and its gradient with respect to every
parameter (the base kernel's, the patch weights, the inducing patches Z, q_mu and q_sqrt);
median of ≥ 3 after a warm-up — for two set-ups:
* `sparsegp`: `model.forward(Xb, yb)`, i.e. Kuf by one base-kernel evaluation of the unfolded
  patches and K_diag by batched patch Gram matrices (`covariances/patches.py`);
* `naive per-patch`: the same ELBO written as a user would from docs/math.md §9, with a Python loop
  over the Q patch positions, Kuf = Σ_q w_q k_g(Z, x^[q]) by one `base_kernel.K` call per
  position, and diag Kff by materialising each image's Q×Q patch Gram matrix, Σ w_q w_q' k_g.
  Its value must equal the library's to 1e-10 (relative) and its gradient to 1e-7, or the
  case fails; it is skipped where one step would take more than a minute (extrapolated from
  a few patch positions and images).
The images are synthetic and MNIST-like: smooth noise thresholded with grey edges (23% of the
pixels inked, 6% grey), so that many patches repeat (44% of 3×3 patches and 17% of 5×5 ones
are blank). The work is counted as the base kernel's products only: 2·B·Q·M·d flops for Kuf
and 2·B·Q²·d for diag Kff (d = h·w pixels per patch, Q patch positions per image) — the
forward pass, not the exponentials nor the backward pass — and its rate is compared with
float64 products of those shapes ([B·Q, d] @ [d, M] and B × [Q, d] @ [d, Q], into outputs
allocated beforehand) timed right before each repetition: "of GEMM rate" is the time of those
products over the step's time. Peak resident memory above each worker's baseline (after the model is built)
is reported as for `bench speed`.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from .speed import bench_parser, gigabytes, machine, parse_bench_args, peak_rss, report, run_in_subprocess

# (image side, patch side, weighted, M, minibatch B)
FULL_CASES = [(28, 3, False, 750, 100), (28, 3, True, 750, 100),
              (28, 5, False, 750, 100), (28, 5, True, 750, 100)]
QUICK_CASES = [(12, 3, False, 20, 10), (12, 5, True, 20, 10)]
SETUPS = ("sparsegp", "naive per-patch")
DATA_PER_BATCH = 10  # the model's data set holds this many minibatches
NAIVE_SECONDS_LIMIT = 60.0

if TYPE_CHECKING:
    from torch import Tensor

    from ..features.patches import InducingPatches
    from ..kernels.convolutional import Convolutional
    from ..models.svgp import SVGP


def images(N: int, side: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    """N binary-ish side×side images [N, side²] in [0, 1] and labels [N] in {0, 1}: smooth noise
    thresholded at its 80th percentile with a ramp one fifth of a standard deviation wide."""
    import torch

    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(N, 1, side + 4, side + 4, dtype=torch.float64, generator=g)
    t = torch.arange(-2, 3, dtype=torch.float64)
    blur = torch.exp(-0.5 * (t[:, None] ** 2 + t[None, :] ** 2) / 1.2**2)
    smooth = torch.nn.functional.conv2d(noise, (blur / blur.sum())[None, None]).reshape(N, -1)
    level = smooth.quantile(0.8, dim=1, keepdim=True)
    X = ((smooth - level) / (0.2 * smooth.std(1, keepdim=True)) + 0.5).clamp(0.0, 1.0)
    half = side * (side // 2)
    y = (X[:, :half].sum(1) > X[:, -half:].sum(1)).to(torch.float64)
    return X, y


def naive_elbo(model: SVGP, Xb: Tensor, yb: Tensor, jitter: float) -> Tensor:
    """The minibatch ELBO of a whitened SVGP with a convolutional kernel and inducing patches,
    with a Python loop over patch positions (Kuf) and one Q×Q Gram matrix per image (diag Kff).
    `jitter` is the relative jitter of chol(Kuu) (the one the library ended up using)."""
    import torch

    kernel = cast("Convolutional", model.kernel)
    base, Z = kernel.base_kernel, cast("InducingPatches", model.feature).Z
    (H, W), (h, w) = kernel.image_shape, kernel.patch_shape
    weights = kernel.weights if kernel.weighted else None
    B, M, Q = Xb.shape[0], Z.shape[0], kernel.num_patches
    pictures = Xb.reshape(B, H, W)
    Kuf = Xb.new_zeros(M, B)
    patches: list[Tensor] = []
    for i in range(H - h + 1):
        for j in range(W - w + 1):
            q = len(patches)
            patch = pictures[:, i:i + h, j:j + w].reshape(B, h * w)
            patches.append(patch)
            Kuf = Kuf + (1.0 if weights is None else weights[q]) * base.K(Z, patch)
    ones = Xb.new_ones(Q) if weights is None else weights
    A_all = torch.stack(patches, 1)  # [B, Q, d]
    kdiag = torch.stack([ones @ base.K(A_all[n]) @ ones for n in range(B)])
    Kuu = base.K(Z)
    eye = torch.eye(M, dtype=Z.dtype, device=Z.device)
    L = torch.linalg.cholesky(Kuu + jitter * Kuu.diagonal().mean() * eye)
    A = torch.linalg.solve_triangular(L, Kuf, upper=False)  # L⁻¹Kuf [M, B]
    R = model.q_sqrt[0].tril()
    mean = A.mT @ model.q_mu[:, 0]
    var = (kdiag - (A * A).sum(0)).clamp_min(0.0) + ((R.mT @ A) ** 2).sum(0)
    data = model.likelihood.variational_expectations(mean, var.clamp_min(1e-12), yb).sum()
    kl = 0.5 * ((R * R).sum() + (model.q_mu ** 2).sum() - M
                - 2.0 * torch.log(torch.abs(R.diagonal())).sum())
    return data * (model.num_data / B) - kl


def _naive_estimate(model: SVGP, Xb: Tensor) -> float:
    """Seconds of one naive step extrapolated from 4 patch positions and 2 images (forward and
    backward of each part)."""
    import torch

    kernel = cast("Convolutional", model.kernel)
    base, Z = kernel.base_kernel, cast("InducingPatches", model.feature).Z
    A = kernel.patches(Xb)
    B, Q = A.shape[:2]
    t = time.perf_counter()
    s = cast("Tensor", sum(base.K(Z, A[:, q]).sum() for q in range(min(4, Q))))
    torch.autograd.grad(s, [Z])
    kuf = (time.perf_counter() - t) * Q / min(4, Q)
    t = time.perf_counter()
    s = cast("Tensor", sum(base.K(A[n]).sum() for n in range(min(2, B))))
    torch.autograd.grad(s, [p for p in base.parameters() if p.requires_grad])
    return kuf + (time.perf_counter() - t) * B / min(2, B)


def _build(spec: dict) -> tuple[SVGP, Tensor, Tensor]:
    import torch

    import sparsegp as sg

    side, patch, M, B = spec["side"], spec["patch"], spec["M"], spec["B"]
    X, y = images(DATA_PER_BATCH * B, side)
    kernel = sg.kernels.Convolutional(sg.kernels.SquaredExponential(), image_shape=(side, side),
                                      patch_shape=(patch, patch), weighted=spec["weighted"])
    model = sg.SVGP(X, y, kernel=kernel, likelihood=sg.likelihoods.Bernoulli(), inducing_points=M)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # a q(u) away from the prior, and weights away from 1
        model.q_mu.copy_(0.3 * torch.randn(model.q_mu.shape, dtype=torch.float64, generator=g))
        noise = 0.05 * torch.randn(model.q_sqrt.shape, dtype=torch.float64, generator=g)
        model.q_sqrt.copy_(0.7 * model.q_sqrt + noise.tril())
        if spec["weighted"]:
            w = 1.0 + 0.2 * torch.randn(kernel.num_patches, dtype=torch.float64, generator=g)
            kernel.set_value("weights", w)
    return model, *model.internal_batch(X[:B], y[:B])


def gemm_seconds(B: int, Q: int, M: int, d: int) -> float:
    """[B·Q, d] @ [d, M] plus B × [Q, d] @ [d, Q] in float64, into outputs allocated (and their
    pages touched) beforehand: each the best of three."""
    import torch

    P, Zt, Pt = (torch.randn(B * Q, d, dtype=torch.float64), torch.randn(d, M, dtype=torch.float64),
                 torch.randn(B, d, Q, dtype=torch.float64))
    C, G = torch.zeros(B * Q, M, dtype=torch.float64), torch.zeros(B, Q, Q, dtype=torch.float64)
    total = 0.0
    for product in (lambda: torch.mm(P, Zt, out=C), lambda: torch.bmm(P.reshape(B, Q, d), Pt, out=G)):
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            product()
            best = min(best, time.perf_counter() - t)
        total += best
    return total


def _check_naive(model: SVGP, Xb: Tensor, yb: Tensor, value: Tensor, grads: Sequence[Tensor],
                 params: list) -> None:
    """The naive step's value and gradient against the library's: equal up to rounding, or
    the comparison would not be of the same computation."""
    import torch

    ref = model.forward(Xb, yb)
    ref_grads = torch.autograd.grad(ref, params)
    err = abs(float(value.detach() - ref.detach())) / max(1.0, abs(float(ref.detach())))
    assert err < 1e-10, f"naive ELBO differs from the library's by {err:.1e} (relative)"
    for p, a, b in zip(params, grads, ref_grads):
        gerr = float((a - b).norm() / b.norm().clamp_min(1e-300))
        assert gerr < 1e-7, f"naive gradient of a {tuple(p.shape)} parameter differs by {gerr:.1e}"


def worker(spec: dict) -> dict:
    import torch

    from sparsegp import covariances as cov

    model, Xb, yb = _build(spec)
    params = [p for p in model.parameters() if p.requires_grad]
    baseline = peak_rss()
    naive = spec["setup"] == "naive per-patch"
    if naive:
        estimate = _naive_estimate(model, Xb)
        if estimate > NAIVE_SECONDS_LIMIT:
            return {**spec, "skipped": f"skipped: ≈ {estimate:.0f} s per step (extrapolated)"}
        jitter = cov.Kuu_cholesky(model.feature, model.kernel, model.jitter)[1]

        def loss():
            return -(naive_elbo(model, Xb, yb, jitter) + model.log_prior())
    else:
        def loss():
            return model.forward(Xb, yb)

    def step():
        value = loss()
        return value, torch.autograd.grad(value, params)

    value, grads = step()  # warm-up
    B, M, kernel = Xb.shape[0], model.num_inducing, cast("Convolutional", model.kernel)
    Q, d = kernel.num_patches, kernel.patch_dim
    flops = 2 * B * Q * M * d + 2 * B * Q * Q * d
    seconds, ratios = [], []
    for _ in range(spec["repeats"]):
        g = gemm_seconds(B, Q, M, d)
        t = time.perf_counter()
        step()
        t = time.perf_counter() - t
        seconds.append(t)
        ratios.append(g / t)
    memory = peak_rss() - baseline
    if naive:  # after the measurements, so that the library's step is not in the naive peak
        _check_naive(model, Xb, yb, value, grads, params)
    t = statistics.median(seconds)
    return {**spec, "Q": Q, "seconds": t, "images_per_second": B / t, "gflops": flops / t / 1e9,
            "fraction": statistics.median(ratios), "loss": float(value.detach()),
            "above_baseline_bytes": memory}


def _figure(x: float) -> str:
    """Three significant figures (whole numbers from 100 up)."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def format_results(rows: list[dict]) -> str:
    lines = ["| image | patch | kernel | M | B | set-up | s / step | images / s | × sparsegp "
             "| GFLOP/s counted | of GEMM rate | memory above baseline GB |",
             "|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    key = ("side", "patch", "weighted", "M", "B")
    base = {tuple(r[k] for k in key): r["seconds"] for r in rows
            if r["setup"] == "sparsegp" and "seconds" in r}
    for r in rows:
        head = (f"| {r['side']}×{r['side']} | {r['patch']}×{r['patch']} | "
                f"{'weighted' if r['weighted'] else 'invariant'} | {r['M']} | {r['B']} | {r['setup']} |")
        if "seconds" not in r:
            lines.append(f"{head} {r.get('skipped') or 'failed: ' + r.get('error', '')} | | | | | |")
            continue
        ratio = r["seconds"] / base.get(tuple(r[k] for k in key), math.nan)
        lines.append(f"{head} {r['seconds']:.3f} | {_figure(r['images_per_second'])} | {ratio:.2f} | "
                     f"{_figure(r['gflops'])} | {_figure(100 * r['fraction'])}% | "
                     f"{gigabytes(r['above_baseline_bytes'])} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_bench_args(bench_parser("sparsegp bench conv", __doc__, 3), argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    repeats = 2 if args.quick else max(3, args.repeats)
    rows = []
    print(machine(), flush=True)
    for side, patch, weighted, M, B in QUICK_CASES if args.quick else FULL_CASES:
        for setup in SETUPS:
            spec = {"side": side, "patch": patch, "weighted": weighted, "M": M, "B": B,
                    "setup": setup, "repeats": repeats}
            row = run_in_subprocess(spec, __name__)
            rows.append(row)
            print(json.dumps(row), flush=True)
    report(format_results(rows), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
