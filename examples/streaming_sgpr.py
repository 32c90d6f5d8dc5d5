"""Streaming sparse GP regression (Bui, Nguyen & Turner 2017) on the Snelson data, sorted by x.

    python examples/streaming_sgpr.py [--batches 6] [--inducing 10] [--approximation vfe]
                                      [--alpha A] [--quick]

Every 4th point is held out for testing; the other 150 arrive in `--batches` batches from left
to right. After each batch three models are compared on the held-out points seen so far
(x up to the largest x seen): the streaming model (the previous model updated with the new
batch: `sparsegp.models.sgpr.streaming.update`, which never revisits old data), an SGPR fitted to
all the data seen (what streaming approximates, at the cost of keeping the data), and an SGPR
fitted to the new batch only (what forgetting the old data gives). Prints test RMSE and NLPD
(mean negative log predictive density of y) of each.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

import sparsegp as sg
from sparsegp.models.sgpr.streaming import update


def scores(model: sg.SGPR, X: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Test RMSE and NLPD of `model` at (X, y)."""
    mean = model.predict_y(X)[0]
    return float(np.sqrt(np.mean((mean - y) ** 2))), float(-np.mean(model.predict_log_density(X, y)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=6, help="batches of the sorted stream (5-10)")
    p.add_argument("--inducing", type=int, default=10, help="inducing points M of every model")
    p.add_argument("--approximation", default="vfe", choices=["vfe", "pep", "fitc"])
    p.add_argument("--alpha", type=float, default=None, help="Power EP's α (with pep)")
    p.add_argument("--quick", action="store_true", help="fewer optimiser iterations")
    args = p.parse_args()
    maxiter = 100 if args.quick else 1000
    options = dict(inducing_points=args.inducing, approximation=args.approximation,
                   alpha=args.alpha)

    X, y = sg.datasets.snelson()
    test = np.zeros(len(y), bool)
    test[::4] = True
    Xt, yt = X[test], y[test]
    order = np.argsort(X[~test, 0])
    Xs, ys = X[~test][order], y[~test][order]
    batches = np.array_split(np.arange(len(ys)), args.batches)

    warnings.simplefilter("ignore", sg.ConvergenceWarning)
    warnings.simplefilter("ignore", sg.ApproximationWarning)
    print(f"{args.approximation}{'' if args.alpha is None else f' α={args.alpha}'}, "
          f"M = {args.inducing}, {len(batches)} batches sorted by x; held-out points seen so far")
    print(f"{'batch':>5} {'x up to':>7} {'seen':>5} | {'RMSE':>21} {'':>5} | {'NLPD':>21}")
    print(f"{'':>5} {'':>7} {'':>5} | {'stream':>7} {'batch':>7} {'new only':>8}"
          f" | {'stream':>7} {'batch':>7} {'new only':>8}")
    stream = None
    for k, rows in enumerate(batches, 1):
        Xb, yb = Xs[rows], ys[rows]
        if stream is None:
            stream = sg.SGPR(Xb, yb, **options)
            stream.fit(maxiter=maxiter)
        else:
            stream = update(stream, Xb, yb, maxiter=maxiter)
        seen = slice(0, rows[-1] + 1)
        batch = sg.SGPR(Xs[seen], ys[seen], **options)
        batch.fit(maxiter=maxiter)
        new_only = sg.SGPR(Xb, yb, **options)
        new_only.fit(maxiter=maxiter)
        where = Xt[:, 0] <= Xb[-1, 0]
        got = [scores(m, Xt[where], yt[where]) for m in (stream, batch, new_only)]
        rmse = " ".join(f"{s[0]:{w}.3f}" for s, w in zip(got, (7, 7, 8)))
        nlpd = " ".join(f"{s[1]:{w}.3f}" for s, w in zip(got, (7, 7, 8)))
        print(f"{k:5d} {Xb[-1, 0]:7.2f} {rows[-1] + 1:5d} | {rmse} | {nlpd}")


if __name__ == "__main__":
    main()
