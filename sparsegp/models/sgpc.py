"""Sparse GP classification by Power EP (Bui, Yan & Turner 2017): SGPC."""

from __future__ import annotations

import math
import numbers
import sys
import time
import warnings
from typing import Any

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from .. import covariances as cov
from ..config import DEFAULT_JITTER
from ..features.inducing_points import InducingPoints
from ..kernels.base import Kernel
from ..likelihoods import Bernoulli, likelihood_from_config
from ..likelihoods.base import Likelihood
from ..linalg import jittered_cholesky
from ..objectives import pep_classification as pep
from ..objectives.collapsed import factors_from_statistics, family, solve
from ..objectives.streaming import auto_chunk_size, chunk_slices
from ..posteriors import SparsePosterior
from ..training import FitResult, fit_lbfgsb
from ..validation import as_tensor, check_finite
from .base import Model
from .inducing import InducingPointsMixin


class SGPC(InducingPointsMixin, Model):
    """Sparse GP classification with M inducing inputs by Power EP (power `alpha` in (0, 1]).

    Labels y [N] in {0, 1} or {−1, +1}; `link` "probit" (closed-form EP moments at α = 1) or
    "logit", or any single-output `likelihood` (e.g. Gaussian, for checking against SGPR).
    Each data point has a Gaussian site on h_n = w_nᵀu; `fit()` alternates damped parallel
    site sweeps with L-BFGS-B on the hyperparameters and inducing inputs (sites fixed), or
    with `schedule="stochastic"` updates minibatches of sites and takes Adam steps on the
    minibatch energy scaled by N/|batch|. Updates that would make a site precision negative
    (or whose cavity is invalid) are skipped and counted in `fit().info`.
    """

    def __init__(
        self, X: Any, y: Any, kernel: Kernel | None = None, inducing_points: Any = None,
        alpha: float = 0.5, link: str = "probit", likelihood: Likelihood | None = None, *,
        jitter: float = DEFAULT_JITTER, damping: float = 0.5, chunk_size: int | None = None,
        inducing_init: str = "kmeans++", seed: int = 0, standardize_X: bool = False,
        dtype: torch.dtype | None = None,
    ) -> None:
        self._alpha = family("pep", alpha).alpha
        if not (isinstance(damping, numbers.Real) and 0.0 < damping <= 1.0):
            raise ValueError(f"damping must lie in (0, 1]; got {damping!r}")
        if likelihood is None:
            likelihood = Bernoulli(link=link)
        if not isinstance(likelihood, Likelihood) or likelihood.num_latent != 1:
            raise TypeError("likelihood must be a sparsegp likelihood of one latent function")
        self._check_labels = likelihood.check_targets  # a bound method: usable before nn.Module init
        super().__init__(X, y, kernel, jitter=jitter, standardize_X=standardize_X, dtype=dtype)
        self.likelihood = likelihood.to(dtype=self.dtype, device=self.device)
        self.kernel.initialise_from_data(self.X, 1.0)
        self._init_inducing(inducing_points, inducing_init, seed)
        self.damping = float(damping)
        self.chunk_size = chunk_size
        self.register_buffer("tau", torch.zeros_like(self.y), persistent=False)
        self.register_buffer("nu", torch.zeros_like(self.y), persistent=False)

    def _prepare_targets(self, y: Any, n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
        t = as_tensor(y, "y", dtype=dtype, device=device)
        if t.dim() == 2 and t.shape[1] == 1:
            t = t[:, 0]
        if t.dim() != 1 or t.shape[0] != n:
            raise ValueError(f"y must be a vector of {n} labels (one per row of X); got shape "
                             f"{tuple(t.shape)}")
        check_finite(t, "y")
        y = self._check_labels(t)
        self.classes = [-1, 1] if bool((t < 0).any()) else [0, 1]  # the labels' convention
        return y

    # -- what users read ------------------------------------------------------------------
    @property
    def alpha(self) -> float:
        return self._alpha

    def _chunk(self) -> int:
        return self.chunk_size or auto_chunk_size(self.num_inducing, self.X.element_size())

    # -- energy and sites -----------------------------------------------------------------
    def _objective(self) -> Tensor:
        return pep.energy(self.kernel, self.feature, self.X, self.y, self.likelihood, self.tau,
                          self.nu, self._alpha, self.jitter, self._chunk())

    def log_marginal_likelihood(self) -> float:
        """The Power-EP energy: an approximation to log p(y) at the current sites."""
        self._require_data()
        with torch.no_grad():
            return float(self._objective())

    def _site_posterior(self, idx: Tensor | None = None) -> pep.Marginals:
        """Marginals of h_n at the rows `idx` (all if None) under the current sites."""
        L, _ = jittered_cholesky(cov.Kuu(self.feature, self.kernel), self.jitter, name="Kuu")
        stats = pep.site_statistics(self.kernel, self.feature, self.X, L, self.tau, self.nu,
                                    self._chunk())
        s = solve(stats)
        X = self.X if idx is None else self.X[idx]
        return pep.marginals(self.kernel, self.feature, X, L, s.L_B, s.e, self._chunk())

    def update_sites(self, max_sweeps: int = 200, tol: float = 1e-6,
                     batch: Tensor | None = None) -> dict[str, int]:
        """Damped parallel site sweeps (all sites, or the rows `batch`) until they stop changing.

        The damping is halved whenever a sweep changes the sites more than the one before
        it did twice in a row (oscillation). Returns the sweeps run and updates skipped.
        """
        self._require_data()
        idx = torch.arange(self.num_data, device=self.device) if batch is None else batch
        damping, skipped, previous, worse = self.damping, 0, math.inf, 0
        sweeps = 0
        with torch.no_grad():
            while sweeps < max_sweeps:
                sweeps += 1
                m = self._site_posterior(idx)
                upd = pep.update_sites(m, self.tau[idx], self.nu[idx], self.y[idx],
                                       self.likelihood, self._alpha, damping)
                self.tau[idx], self.nu[idx] = upd.tau, upd.nu
                skipped += upd.skipped
                if upd.change < tol:
                    break
                worse = worse + 1 if upd.change > previous else 0
                if worse >= 2:
                    damping, worse = max(damping / 2.0, 1e-3), 0
                previous = upd.change
        return {"sweeps": sweeps, "skipped_updates": skipped}

    def fit(self, maxiter: int = 20, tol: float = 1e-6, progress: bool | None = None,
            callback: Any = None, *, schedule: str = "full", inner_maxiter: int = 50,
            max_sweeps: int = 200, batch_size: int = 256, epochs: int = 50, lr: float = 0.01,
            sweeps_per_batch: int = 2, seed: int = 0) -> FitResult:
        """Alternate site updates and hyperparameter steps; see the class docstring.

        Full schedule: up to `maxiter` rounds of (sweeps to convergence, then L-BFGS-B for
        `inner_maxiter` iterations), until the energy changes by less than `tol`·(1 + |F|).
        Stochastic schedule: `epochs` passes over minibatches of `batch_size` sites.
        """
        self._require_data()
        if schedule not in ("full", "stochastic"):
            raise ValueError(f"schedule must be 'full' or 'stochastic'; got {schedule!r}")
        start = time.perf_counter()
        if schedule == "stochastic":
            return self._fit_stochastic(batch_size, epochs, lr, sweeps_per_batch, seed, progress,
                                        start)
        show = sys.stderr.isatty() if progress is None else bool(progress)
        counts = {"sweeps": 0, "skipped_updates": 0, "lbfgs_iterations": 0,
                  "undefined_energy_stops": 0}
        history: list[float] = []
        success, message = False, f"stopped after {maxiter} rounds"
        rounds = 0
        for rounds in tqdm(range(1, maxiter + 1), disable=not show, desc="fit SGPC", leave=False):
            for k, v in self.update_sites(max_sweeps).items():
                counts[k] += v
            with warnings.catch_warnings():
                # With the sites fixed, a large hyperparameter step can leave some cavity
                # without positive precision (energy undefined): L-BFGS then stops at the last
                # good point, and the next round re-fits the sites there.
                warnings.simplefilter("ignore", RuntimeWarning)
                res = fit_lbfgsb(self, maxiter=inner_maxiter, progress=False)
            counts["lbfgs_iterations"] += res.iterations
            counts["undefined_energy_stops"] += int(bool(res.info.get("non_finite")))
            history.append(res.objective)
            if callback is not None:
                callback(rounds, res.objective)
            if len(history) > 1 and abs(history[-1] - history[-2]) < tol * (1 + abs(history[-1])):
                success, message = True, "energy converged"
                break
        for k, v in self.update_sites(max_sweeps).items():  # sites at the final hyperparameters
            counts[k] += v
        objective = self.log_marginal_likelihood()
        return FitResult(success, message, rounds, counts["lbfgs_iterations"], objective,
                         history, time.perf_counter() - start, counts)

    def _fit_stochastic(self, batch_size: int, epochs: int, lr: float, sweeps: int, seed: int,
                        progress: bool | None, start: float) -> FitResult:
        params = [p for p in self.parameters() if p.requires_grad]
        opt = torch.optim.Adam(params, lr=lr)
        g = torch.Generator().manual_seed(seed)
        N, B = self.num_data, min(batch_size, self.num_data)
        counts = {"sweeps": 0, "skipped_updates": 0, "steps": 0}
        history = []
        show = sys.stderr.isatty() if progress is None else bool(progress)
        for _ in tqdm(range(epochs), disable=not show, desc="fit SGPC", leave=False):
            order = torch.randperm(N, generator=g).to(self.device)
            for sl in chunk_slices(N, B):
                idx = order[sl]
                for k, v in self.update_sites(sweeps, batch=idx).items():
                    counts[k] += v
                opt.zero_grad()
                F = pep.energy(self.kernel, self.feature, self.X[idx], self.y[idx],
                               self.likelihood, self.tau[idx], self.nu[idx], self._alpha,
                               self.jitter, self._chunk(), scale=N / idx.shape[0])
                (-(F + self.log_prior())).backward()
                opt.step()
                counts["steps"] += 1
            history.append(self.log_marginal_likelihood())
        for k, v in self.update_sites().items():
            counts[k] += v
        return FitResult(True, f"{epochs} epochs", epochs, counts["steps"],
                         self.log_marginal_likelihood(), history, time.perf_counter() - start,
                         counts)

    # -- persistence ----------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return {**super().config(), "likelihood": self.likelihood.config(), "alpha": self._alpha,
                "damping": self.damping, "chunk_size": self.chunk_size, "classes": self.classes}

    def data_extras(self) -> dict[str, Tensor]:
        """The sites, saved with the data so that a loaded model can continue fitting."""
        return {"tau": self.tau, "nu": self.nu}

    @classmethod
    def _restore(cls, config: dict[str, Any], state: dict[str, Tensor]) -> SGPC:
        model = super()._restore(config, state)
        model.likelihood = likelihood_from_config(config["likelihood"]).to(dtype=model.dtype)
        model.feature = InducingPoints(state["feature.Z"])
        model._alpha, model.damping = float(config["alpha"]), float(config["damping"])
        model.chunk_size, model.classes = config["chunk_size"], list(config["classes"])
        model.register_buffer("tau", None, persistent=False)
        model.register_buffer("nu", None, persistent=False)
        return model

    def _restore_posterior(self, saved: dict[str, Any]) -> SparsePosterior:
        return SparsePosterior.from_state(self.kernel, self.feature, saved)

    # -- posterior and prediction ---------------------------------------------------------
    def _build_posterior(self) -> SparsePosterior:
        L, used = jittered_cholesky(cov.Kuu(self.feature, self.kernel), self.jitter, name="Kuu")
        stats = pep.site_statistics(self.kernel, self.feature, self.X, L, self.tau, self.nu,
                                    self._chunk())
        f = factors_from_statistics(L, stats, used)
        return SparsePosterior(self.kernel, self.feature, f.L, f.L_B, f.w, f.C,
                               torch.zeros((), dtype=self.dtype, device=self.device), f.jitter)

    def predict_f(self, Xnew: Any, full_cov: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance (or covariance) of the latent f* (numpy)."""
        Xs = self._internal_inputs(Xnew)
        with torch.no_grad():
            mean, var = self.posterior().predict_f(Xs, full_cov)
        return mean.cpu().numpy(), var.cpu().numpy()

    def predict_y(self, Xnew: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of y* (for Bernoulli: p(y* = 1) and p(1 − p))."""
        Xs = self._internal_inputs(Xnew)
        with torch.no_grad():
            mean, var = self.posterior().predict_f(Xs)
            m, v = self.likelihood.predict_mean_and_var(mean, var)
        return m.cpu().numpy(), v.cpu().numpy()

    def predict_proba(self, Xnew: Any) -> np.ndarray:
        """P(y* = 1) [N*] (probit: Φ(m*/√(1 + v*)))."""
        return self.predict_y(Xnew)[0]

    def predict(self, Xnew: Any) -> np.ndarray:
        """Predicted labels [N*], in the label values of the training data."""
        lo, hi = self.classes
        return np.where(self.predict_proba(Xnew) > 0.5, hi, lo)
