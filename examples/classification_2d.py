"""Sparse GP classification on a 2-D problem: Power EP (α = 0.1, 0.5, 1) against SVGP.

    python examples/classification_2d.py [--out DIR] [--quick]

Generates a noisy two-class "checkerboard-banana" in code, fits `sg.SGPC` for three powers
and `sg.SVGP` with a Bernoulli likelihood (probit), prints the test error and the objective
of each, and writes a figure of P(y = 1 | x), the decision boundaries and the inducing inputs.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import sparsegp as sg
from sparsegp.experiments.shared.plotting import new_figure, save


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 2))
    p = 1.0 / (1.0 + np.exp(-4.0 * np.sin(X[:, 0]) * np.cos(X[:, 1])))
    return X, (rng.uniform(size=n) < p).astype(float)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("classification-2d"))
    p.add_argument("--quick", action="store_true", help="fewer points and iterations")
    args = p.parse_args()
    n, M = (300, 16) if args.quick else (1000, 30)
    X, y = make_data(n, 0)
    Xt, yt = make_data(5000, 1)
    grid = np.linspace(-3, 3, 80)
    G = np.stack(np.meshgrid(grid, grid), -1).reshape(-1, 2)

    models = {f"SGPC α={a}": sg.SGPC(X, y, inducing_points=M, alpha=a) for a in (0.1, 0.5, 1.0)}
    models["SVGP"] = sg.SVGP(X, y, likelihood=sg.likelihoods.Bernoulli(), inducing_points=M)
    fig, axes = new_figure(1, len(models), (4.2 * len(models), 4.2), sharey=True)
    print(f"{'model':<12} {'test error':>10} {'objective':>10} {'seconds':>8}")
    for ax, (name, model) in zip(axes.flat, models.items()):
        start = time.perf_counter()
        if isinstance(model, sg.SVGP):
            model.fit(batch_size=100, epochs=10 if args.quick else 40, lr=0.03)
        else:
            model.fit(maxiter=5 if args.quick else 20)
        seconds = time.perf_counter() - start
        error = np.mean((model.predict_proba(Xt) > 0.5) != yt)
        print(f"{name:<12} {error:10.3f} {model.log_marginal_likelihood():10.2f} {seconds:8.1f}")
        prob = model.predict_proba(G).reshape(80, 80)
        ax.contourf(grid, grid, prob, levels=np.linspace(0, 1, 11), cmap="RdBu_r", alpha=0.6)
        ax.contour(grid, grid, prob, levels=[0.5], colors="k", linewidths=1.5)
        ax.scatter(X[:, 0], X[:, 1], c=y, cmap="RdBu_r", s=4, edgecolors="none")
        Z = model.inducing_points
        ax.plot(Z[:, 0], Z[:, 1], "k^", ms=6, label="Z")
        ax.set_xlim(-3, 3)
        ax.set_ylim(-3, 3)  # inducing inputs that wandered outside the data are not drawn
        ax.set_title(f"{name}: test error {error:.3f}", fontsize=9)
    axes[0, 0].legend(loc="lower left", fontsize=8)
    path = save(fig, args.out / "classification_2d.png")
    print(f"figure written to {path}")


if __name__ == "__main__":
    main()
