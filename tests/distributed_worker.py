"""One rank of the two-process tests in test_distributed.py (run as a script, not collected)."""

from __future__ import annotations

import datetime
import json
import os
import signal
import sys
import time
import warnings

import numpy as np
import torch

import sparsegp as sg

MEMBERS = [("vfe", None), ("fitc", None), ("dtc", None), ("pep", 0.4)]


BLOCK_MEMBERS = [("fitc", None), ("pep", 0.4)]  # PITC and block Power EP


def block_labels(X):
    """Eight blocks of nearby points (a grid on the first two inputs)."""
    return (np.floor(X[:, 0] + 2.0).clip(0, 3) * 2 + (X[:, 1] > 0)).astype(int)


def problem(N=301, D=3, seed=5):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (N, D))
    y = np.sin(X).sum(1) + 0.1 * rng.standard_normal(N) + 3.0
    return X, y, X[rng.choice(N, 9, replace=False)] + 0.05, rng.uniform(-2, 2, (7, D))


def build(X, y, Z, approx, alpha, **kw):
    kernel = sg.kernels.SquaredExponential(lengthscale=[0.8, 1.1, 1.5], variance=1.3)
    kw.setdefault("noise_variance", 0.2)
    return sg.SGPR(X, y, kernel=kernel, inducing_points=Z, approximation=approx, alpha=alpha,
                   chunk_size=16, standardize_y=True, **kw)


def row_terms(X):
    """Options whose parameters reach the objective through each rank's rows only: a
    trainable constant mean and one noise variance per group of points."""
    return {"mean": sg.means.Constant(0.5), "noise_variance": [0.2, 0.3],
            "noise_groups": (X[:, 0] > 0).astype(int)}


def svgp_model(X, y):
    labels = (y > np.median(y)).astype(float)
    return sg.SVGP(X[:300], labels[:300], likelihood=sg.likelihoods.Bernoulli(), inducing_points=X[:8])


def spectral_models(X, y):
    """RFF and SSGP with a trainable constant mean (its gradient reaches the objective through
    each rank's rows only); the kernel's and the mean's starting values from the data."""
    kw = {"num_features": 12, "seed": 3, "chunk_size": 16, "standardize_y": True}
    return {cls.__name__: cls(X, y, mean="constant", **kw) for cls in (sg.RFF, sg.SSGP)}


def whole_data_models(X, y):
    """Models that hold all the data on every rank (not sharded) and stream their sums."""
    gplvm = sg.BayesianGPLVM(np.c_[y, X], latent_dim=1, inducing_points=5, chunk_size=16)
    svgp = sg.SVGP(X, y, inducing_points=X[:8], chunk_size=16)
    return {"GPLVM": lambda: gplvm.training_loss().item(),
            "SVGP diagnostics": lambda: [getattr(svgp.diagnostics(), k)
                                         for k in ("objective", "lower_bound", "upper_bound")]}


def evaluate_spectral(model, Xtest):
    loss = model.training_loss()
    grads = torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad])
    mean, var = model.predict(Xtest)
    return {"loss": loss.item(), "grads": [g.reshape(-1).tolist() for g in grads],
            "mean": mean.tolist(), "var": var.tolist()}


def diagnosed_inducing(Z):
    """Z with one inducing point on top of another and one far from all the data."""
    return np.r_[Z, Z[:1] + 1e-5, [[30.0, 30.0, 30.0]]]


def report_numbers(rep):
    return {"objective": rep.objective, "lower": rep.lower_bound, "upper": rep.upper_bound,
            "exact": rep.exact, "noise_ratio": rep.noise_ratio, "num_data": rep.num_data,
            "noise": rep.noise_variance,
            "merged": [list(p) for p in rep.merged_pairs], "far": rep.far_inducing,
            "effective": rep.effective_num_inducing, "tight": rep.tight_upper_bound,
            "warnings": rep.warnings}


def evaluate(model, Xtest):
    loss = model.training_loss()
    grads = torch.autograd.grad(loss, list(model.parameters()))
    mean, var = model.predict(Xtest)
    return {"loss": loss.item(), "grads": [g.reshape(-1).tolist() for g in grads],
            "upper": model.upper_bound(), "mean": mean.tolist(), "var": var.tolist()}


def main() -> int:
    mode, out = sys.argv[1], sys.argv[2]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world,
                                         timeout=datetime.timedelta(seconds=20))
    X, y, Z, Xtest = problem()
    Xr, yr = X[rank::world], y[rank::world]
    if mode == "die":
        if rank == 1:
            os._exit(1)  # a rank dies after joining the group
        start = time.perf_counter()
        try:
            evaluate(build(Xr, yr, Z, "vfe", None), Xtest)
        except sg.DistributedError as err:
            print(f"DistributedError after {time.perf_counter() - start:.1f} s: {err}", flush=True)
            # the group is unusable now; tearing it down joins gloo's threads, which the
            # interpreter's exit would otherwise destroy while running (SIGABRT)
            torch.distributed.destroy_process_group()
            return 3
        return 0
    if mode == "svgp":
        # every rank holds all the data; DistributedSampler gives each half of it per epoch
        model = svgp_model(X, y)
        fit = model.fit(batch_size=X.shape[0] // world, epochs=3, lr=0.05)
        again = svgp_model(X, y)  # rank 1's callback interrupts after epoch 1

        def stop(epoch, objective):
            if rank == 1 and epoch == 1:
                raise KeyboardInterrupt

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cut = again.fit(batch_size=X.shape[0] // world, epochs=5, lr=0.05, callback=stop)
        with open(f"{out}.{rank}.json", "w") as f:
            json.dump({"params": [p.detach().reshape(-1).tolist() for p in model.parameters()],
                       "history": fit.history,
                       "interrupted": [cut.interrupted, cut.iterations,
                                       [p.detach().reshape(-1).tolist()
                                        for p in again.parameters()]]}, f)
        torch.distributed.destroy_process_group()
        return 0
    if mode == "spectral":  # RFF and SSGP on shards; the non-sharded models on all the data
        models = spectral_models(Xr, yr)
        results = {name: evaluate_spectral(m, Xtest) for name, m in models.items()}
        rep = models["RFF"].diagnostics()
        results["diagnostics"] = [rep.objective, rep.exact, rep.noise_variance, rep.num_data]
        model = sg.RFF(Xr, yr, num_features=8, standardize_y=True)
        fit = model.fit(maxiter=15)
        results["fit"] = {"params": [p.detach().reshape(-1).tolist() for p in model.parameters()],
                          "objective": fit.objective, "iterations": fit.iterations}
        results["whole"] = {name: value() for name, value in whole_data_models(X, y).items()}
        with open(f"{out}.{rank}.json", "w") as f:
            json.dump(results, f)
        torch.distributed.destroy_process_group()
        return 0
    if mode == "interrupt":  # one rank interrupted: every rank stops at the same iteration
        results = {}
        for how, who, at in (("callback", 1, 3), ("ctrl-c", 0, 2)):
            def stop(i, objective, how=how, who=who, at=at):
                if rank == who and i == at:
                    if how == "callback":
                        raise KeyboardInterrupt
                    os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C in this rank's terminal
            model = build(Xr, yr, Z, "vfe", None)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fit = model.fit(maxiter=30, callback=stop)
            results[how] = {"interrupted": fit.interrupted, "iterations": fit.iterations,
                            "params": [p.detach().reshape(-1).tolist()
                                       for p in model.parameters()],
                            "after": model.log_marginal_likelihood()}
        with open(f"{out}.{rank}.json", "w") as f:
            json.dump(results, f)
        torch.distributed.destroy_process_group()
        return 0
    if mode == "diagnose":  # the report of sharded data: all ranks' rows
        results = {}
        for approx, alpha in (("vfe", None), ("fitc", None)):
            rep = build(Xr, yr, diagnosed_inducing(Z), approx, alpha).diagnostics()
            results[approx] = report_numbers(rep)
        rep = build(Xr, yr, diagnosed_inducing(Z), "vfe", None, **row_terms(Xr)).diagnostics()
        results["rows"] = report_numbers(rep)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            build(Xr, yr, Z[:2], "vfe", None).fit(maxiter=3)
        results["fit warnings"] = [str(w.message) for w in caught
                                   if issubclass(w.category, sg.ApproximationWarning)]
        with open(f"{out}.{rank}.json", "w") as f:
            json.dump(results, f)
        torch.distributed.destroy_process_group()
        return 0
    if mode == "agree":  # what every rank must agree on, and what rank 0 alone chooses
        results = {}
        mine = slice(0, 40) if rank == 0 else slice(40, 43)  # rank 1: 3 rows
        for M in (5, None, 50):  # 50: more than the 43 rows of both ranks
            try:
                model = sg.SGPR(X[mine], y[mine], inducing_points=M, mean="constant")
                results[str(M)] = {"Z": model.inducing_points.tolist(),
                                   "loss": model.training_loss().item()}
            except ValueError as err:
                results[str(M)] = f"ValueError: {err}"
        for what, Xr in (("columns", X[mine] if rank == 0 else X[mine][:, :2]),):
            start = time.perf_counter()
            try:
                sg.SGPR(Xr, y[mine], inducing_points=Z[:, :Xr.shape[1]])
                results[what] = "built"
            except ValueError as err:
                results[what] = f"ValueError after {time.perf_counter() - start:.1f} s: {err}"
        with open(f"{out}.{rank}.json", "w") as f:
            json.dump(results, f)
        torch.distributed.destroy_process_group()
        return 0
    if mode in ("blocks", "split-blocks"):
        labels = block_labels(X)
        mine = labels % world == rank if mode == "blocks" else np.arange(len(y)) % world == rank
        try:
            results = {a: evaluate(build(X[mine], y[mine], Z, a, al, blocks=labels[mine]), Xtest)
                       for a, al in BLOCK_MEMBERS}
            if mode == "blocks":
                for a, al in MEMBERS + BLOCK_MEMBERS:
                    blocks = {"blocks": labels[mine]} if (a, al) in BLOCK_MEMBERS else {}
                    model = build(X[mine], y[mine], Z, a, al, **row_terms(X[mine]), **blocks)
                    results[f"rows-{a}-{al}-{bool(blocks)}"] = evaluate(model, Xtest)
        except ValueError as err:  # a block on two ranks: every rank says so
            print(err, flush=True)
            torch.distributed.destroy_process_group()
            return 4
        with open(f"{out}.{rank}.json", "w") as f:
            json.dump(results, f)
        torch.distributed.destroy_process_group()
        return 0
    results = {f"{a}-{al}": evaluate(build(Xr, yr, Z, a, al), Xtest) for a, al in MEMBERS}
    model = sg.SGPR(Xr, yr, inducing_points=6, approximation="fitc", standardize_y=True)
    fit = model.fit(maxiter=15)
    results["fit"] = {"params": [p.detach().reshape(-1).tolist() for p in model.parameters()],
                      "objective": fit.objective, "iterations": fit.iterations}
    with open(f"{out}.{rank}.json", "w") as f:
        json.dump(results, f)
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # not sys.exit: at interpreter teardown gloo's threads can abort the process ("terminate
    # called without an active exception", status -6) after every result was written and the
    # process group destroyed — seen on loaded 2-core machines, a torch teardown race
    os._exit(code)
