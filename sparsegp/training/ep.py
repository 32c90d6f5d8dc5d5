"""Power-EP schedules for sparse GP classification (Bui, Yan & Turner 2017; docs/math.md §5).

Damped parallel site sweeps (`site_sweeps`), and the two ways of alternating them with the
hyperparameters: the full schedule (sweeps to convergence, then L-BFGS-B on the energy with
the sites fixed, repeated) and the stochastic one (minibatches of sites, Adam steps on the
energy's unbiased estimate from the minibatch, q(u) from running sums of the sites). They
work on any model that offers the sites (`tau`, `nu` buffers), `site_marginals(idx, totals)`,
`minibatch_energy(idx, statistics_idx, totals)` and the usual `training_loss()` /
`log_marginal_likelihood()`.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from typing import Any, Protocol, TypedDict, Unpack

import torch
from torch import nn

from ..linalg import CholeskyError
from ..objectives import pep_classification as pep
from ..runtime.chunking import chunk_slices
from ..validation import positive_float, positive_int, seeded_generator
from .guard import accepted
from .interrupts import warn_interrupted
from .lbfgs import StartingPointError, fit_lbfgsb
from .progress import progress_bar
from .result import INTERRUPTED, FitResult, Snapshot, warn_stopped
from .site_sums import RunningSiteSums


def site_sweeps(model: Any, max_sweeps: int = 200, tol: float = 1e-6,
                batch: torch.Tensor | None = None, sums: RunningSiteSums | None = None
                ) -> dict[str, int]:
    """Damped parallel site sweeps (all sites, or the rows `batch`) until they stop changing;
    with running `sums` of all the sites q(u) comes from them (kept up to date) instead of a
    pass over all the data per sweep.

    The damping is halved whenever a sweep changes the sites more than the one before it did
    twice in a row (oscillation). Returns the sweeps run and the updates skipped.
    """
    idx = torch.arange(model.num_data, device=model.device) if batch is None else batch
    damping, skipped, previous, worse = model.damping, 0, math.inf, 0
    sweeps = 0
    with torch.no_grad():
        while sweeps < max_sweeps:
            sweeps += 1
            m = model.site_marginals(idx, None if sums is None else sums.totals)
            upd = pep.update_sites(m, model.tau[idx], model.nu[idx], model.y[idx],
                                   model.likelihood, model.alpha, damping)
            if sums is not None:
                sums.update(idx, upd.tau - model.tau[idx], upd.nu - model.nu[idx])
            model.tau[idx], model.nu[idx] = upd.tau, upd.nu
            skipped += upd.skipped
            if upd.change < tol:
                break
            worse = worse + 1 if upd.change > previous else 0
            if worse >= 2:
                damping, worse = max(damping / 2.0, 1e-3), 0
            previous = upd.change
    return {"sweeps": sweeps, "skipped_updates": skipped}


class _SweepOptions(TypedDict, total=False):
    """`site_sweeps`'s options."""

    max_sweeps: int
    tol: float
    batch: torch.Tensor | None
    sums: RunningSiteSums | None


class _HasEnergy(Protocol):
    def log_marginal_likelihood(self) -> float: ...


def _add(counts: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        counts[k] = counts.get(k, 0) + v


def fit_full(model: Any, maxiter: int, tol: float, progress: bool | None,
             callback: Callable[[int, float], None] | None, inner_maxiter: int,
             max_sweeps: int, stall_nats: float | None = None) -> FitResult:
    """Up to `maxiter` rounds of (sweeps to convergence, then L-BFGS-B for `inner_maxiter`
    iterations with the sites fixed) until the energy changes by less than tol·(1 + |F|) or,
    with `stall_nats`, by less than `stall_nats` nats in a round.
    Ctrl-C at any moment leaves the last completed round (sweeps interrupted half-way are
    undone; the starting sites and hyperparameters before the first round)."""
    start = time.perf_counter()
    name = f"{type(model).__name__}.fit"
    counts = {"sweeps": 0, "skipped_updates": 0, "lbfgs_iterations": 0,
              "undefined_energy_stops": 0}
    history: list[float] = []
    success, message, interrupted, rounds = False, "", False, 0
    where, bar = "before the first round", None
    try:  # from the first instant: Ctrl-C in the setup leaves the starting values
        maxiter = positive_int(maxiter, "maxiter")
        inner_maxiter = positive_int(inner_maxiter, "inner_maxiter")
        max_sweeps, tol = positive_int(max_sweeps, "max_sweeps"), positive_float(tol, "tol")
        stall_nats = None if stall_nats is None else positive_float(stall_nats, "stall_nats")
        message = f"stopped after {maxiter} rounds"
        bar = progress_bar(progress, maxiter, f"fit {type(model).__name__}")
        for rounds in range(1, maxiter + 1):
            where = f"in round {rounds}"
            _sweeps(model, counts, max_sweeps=max_sweeps)
            with warnings.catch_warnings():
                # With the sites fixed, a large hyperparameter step can leave some cavity
                # without positive precision (energy undefined): L-BFGS then stops at the last
                # good point, and the next round re-fits the sites there.
                warnings.simplefilter("ignore", RuntimeWarning)
                try:
                    res = fit_lbfgsb(model, maxiter=inner_maxiter, progress=False)
                except StartingPointError as err:
                    if rounds == 1:  # nothing fitted yet: the starting values are at fault
                        raise
                    # the last round's L-BFGS-B went as far as it could evaluate, and the
                    # sites refitted there leave no finite step: the fit ends at that state
                    success, message = False, warn_stopped(name, err, stacklevel=4)
                    counts["undefined_energy_stops"] += 1
                    break
            counts["lbfgs_iterations"] += res.iterations
            counts["undefined_energy_stops"] += int(bool(res.info.get("non_finite")))
            history.append(res.objective)
            bar.update(1)
            if res.interrupted:  # L-BFGS-B kept its last accepted point; its warning was
                interrupted, message = True, f"{INTERRUPTED} {where}"  # silenced above
                warn_interrupted(name, where, stacklevel=4)
                break
            change = abs(history[-1] - history[-2]) if len(history) > 1 else math.inf
            if change < tol * (1 + abs(history[-1])):
                success, message = True, "energy converged"
                break
            if stall_nats is not None and change < stall_nats:
                success, message = True, (f"the last round changed the energy by less than "
                                          f"{stall_nats:.3g} nats (pass tol= to run to the "
                                          "relative tolerance alone)")
                break
            if callback is not None and rounds < maxiter:  # the last round's: after the sweeps
                callback(rounds, res.objective)
        if not interrupted:
            where = "in the final site sweeps"
            _sweeps(model, counts, max_sweeps=max_sweeps)  # sites at the final hyperparameters
            if callback is not None and rounds:  # the model fit() returns
                callback(rounds, -float(model.training_loss().detach()))
    except KeyboardInterrupt:
        success, interrupted, message = False, True, f"{INTERRUPTED} {where}"
        warn_interrupted(name, where, stacklevel=4)
    except CholeskyError as err:
        success, message = False, warn_stopped(name, err, stacklevel=4)
    finally:
        if bar is not None:
            bar.close()
    energy = _final_energy(model)
    if energy is None:
        success, interrupted, message = _energy_interrupted(name, interrupted, message)
    return accepted(FitResult(success, message, rounds, counts["lbfgs_iterations"],
                              math.nan if energy is None else energy, history,
                              time.perf_counter() - start, counts, interrupted))


def _sweeps(model: nn.Module, counts: dict[str, int], **options: Unpack[_SweepOptions]) -> None:
    """`site_sweeps`, counted in `counts`; Ctrl-C or a failed factorisation half-way puts the
    sites (and everything else) back as they were."""
    snapshot = Snapshot(model)
    try:
        _add(counts, site_sweeps(model, **options))
    except (KeyboardInterrupt, CholeskyError):
        snapshot.restore()
        raise


def _final_energy(model: _HasEnergy) -> float | None:
    """The energy of the state a fit leaves; None when Ctrl-C cut its computation short."""
    try:
        return model.log_marginal_likelihood()
    except KeyboardInterrupt:
        return None


def _energy_interrupted(name: str, interrupted: bool, message: str) -> tuple[bool, bool, str]:
    """(success, interrupted, message) of a fit whose final energy Ctrl-C cut short."""
    if not interrupted:
        warn_interrupted(name, "while computing the final energy", stacklevel=5)
        message = f"{INTERRUPTED} while computing the final energy ({message})"
    return False, True, message


#: Steps between refreshes of the running sums at most (see `refresh_steps`).
MAX_REFRESH_STEPS = 10


def refresh_steps(N: int, B: int) -> int:
    """Steps between refreshes of the running sums by default: a refresh (a pass over the N
    sites) costs about as much as the ⌈N/(4B)⌉ steps it serves (each ~4 passes over a batch
    of B), and at most `MAX_REFRESH_STEPS` steps, so that the sites' weights w_n in the sums
    are never many Adam steps old. (Measured on 400 banana points, batches of 20, Adam lr
    0.05, 12 epochs, three seeds: refreshing every 1, 2 or 5 steps ends within 0.25 nats of
    each other, once an epoch — every 20 steps — 0.35–1.9 nats lower.)"""
    return max(1, min(MAX_REFRESH_STEPS, math.ceil(N / (4 * B))))


def fit_stochastic(model: Any, batch_size: int, epochs: int, lr: float, sweeps: int,
                   seed: int, progress: bool | None, refresh_every: int | None = None,
                   callback: Callable[[int, float], None] | None = None) -> FitResult:
    """`epochs` passes over minibatches of `batch_size` sites: a few sweeps of the batch's
    sites, then an Adam step (`lr`) on the energy estimated from the batch (Bui et al. 2017,
    §3.9; `minibatch_energy`: q(u) of all the sites, the batch's local terms and an
    independent batch's share of the sums' gradient, scaled by N/|batch|). q(u)'s sums are
    kept running (`RunningSiteSums`, refreshed every `refresh_every` steps and at each
    epoch's start; default `refresh_steps`), so that a step costs O(B·M² + M³) and the
    refreshes a pass over the data every few steps, not several passes per step. Ctrl-C at
    any moment leaves the last completed step (a step interrupted half-way is undone; the
    starting sites and hyperparameters before the first). `callback(epoch, energy)` after
    every epoch (the last one's after the final sweep over all the sites: the model `fit`
    returns)."""
    start = time.perf_counter()
    name = f"{type(model).__name__}.fit"
    counts = {"sweeps": 0, "skipped_updates": 0, "steps": 0}
    history: list[float] = []
    interrupted, stopped, message, done, bar = False, False, "", 0, None
    try:  # from the first instant: Ctrl-C in the setup leaves the starting values
        params = [p for p in model.parameters() if p.requires_grad]
        lr = positive_float(lr, "lr")
        opt = torch.optim.Adam(params, lr=lr) if params else None  # all frozen: sites only
        g = seeded_generator(seed)
        epochs = positive_int(epochs, "epochs")
        N, B = model.num_data, min(positive_int(batch_size, "batch_size"), model.num_data)
        every = refresh_steps(N, B) if refresh_every is None else refresh_every
        if isinstance(every, bool) or not (isinstance(every, int) and every >= 1):
            raise ValueError(f"refresh_every must be a positive integer; got {refresh_every!r}")
        message = f"{epochs} epochs"
        bar = progress_bar(progress, epochs, f"fit {type(model).__name__}")
        for _ in range(epochs):
            order = torch.randperm(N, generator=g).to(model.device)
            other = torch.randperm(N, generator=g).to(model.device)  # the sums' batches
            sums = RunningSiteSums(model)
            for j, sl in enumerate(chunk_slices(N, B)):
                idx = order[sl]
                if j and j % every == 0:
                    sums.refresh()
                snapshot = Snapshot(model)
                try:
                    _add(counts, site_sweeps(model, sweeps, batch=idx, sums=sums))
                    if opt is not None:
                        opt.zero_grad()
                        F = model.minibatch_energy(idx, other[sl], sums.totals)
                        (-(F + model.log_prior())).backward()
                        opt.step()
                except (KeyboardInterrupt, CholeskyError):
                    snapshot.restore()
                    raise
                counts["steps"] += 1
            history.append(model.log_marginal_likelihood())
            done += 1
            bar.update(1)
            if callback is not None and done < epochs:
                callback(done, history[-1])
        _sweeps(model, counts)  # all the sites at the final hyperparameters
        if callback is not None:  # the model fit() returns
            callback(done, model.log_marginal_likelihood())
    except KeyboardInterrupt:
        interrupted, message = True, f"{INTERRUPTED} in epoch {done}"
        warn_interrupted(name, f"in epoch {done}", stacklevel=4)
    except CholeskyError as err:
        stopped, message = True, warn_stopped(name, err, stacklevel=4)
    finally:
        if bar is not None:
            bar.close()
    energy = _final_energy(model)
    if energy is None:
        _, interrupted, message = _energy_interrupted(name, interrupted, message)
    # iterations are the Adam steps (one per minibatch), as for every other fit; history
    # holds the energy after each epoch, and info the epochs with the other counts
    return accepted(FitResult(not (interrupted or stopped), message, counts["steps"],
                              counts["steps"], math.nan if energy is None else energy, history,
                              time.perf_counter() - start, {**counts, "epochs": done},
                              interrupted, fixed_budget=True))
