"""Stochastic variational GPs (SVGP; Hensman et al. 2013, 2015) for any likelihood."""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from .. import covariances as cov
from ..config import DEFAULT_JITTER
from ..distributed import all_reduce_, is_distributed
from ..features.inducing_points import InducingPoints
from ..kernels.base import Kernel
from ..likelihoods import Gaussian, likelihood_from_config
from ..likelihoods.base import Likelihood
from ..linalg import jittered_cholesky
from ..objectives import svgp as objective
from ..objectives.collapsed import collapsed_objective, family
from ..objectives.streaming import auto_chunk_size
from ..posteriors import VariationalPosterior
from ..training import FitResult, fit_lbfgsb
from ..validation import as_tensor, check_finite
from .base import Model
from .inducing import InducingPointsMixin


class SVGP(InducingPointsMixin, Model):
    """The uncollapsed variational GP: q(u) = N(m, S) per latent function, any likelihood.

    Shapes: X [N, D], y [N]. `whiten=True` (default) parameterises q(v), u = L v. `num_latent`
    latent functions (default: what the likelihood needs) share the kernel and the inducing
    inputs. `fit()` uses Adam on the hyperparameters and natural gradients on q(u) over
    minibatches, or full-batch L-BFGS for a Gaussian likelihood without minibatches. Under
    an initialised torch.distributed process group, `fit()` trains with
    DistributedDataParallel and a DistributedSampler over (X, y).
    """

    def __init__(
        self, X: Any, y: Any, kernel: Kernel | None = None, likelihood: Likelihood | None = None,
        inducing_points: Any = None, whiten: bool = True, num_latent: int | None = None, *,
        jitter: float = DEFAULT_JITTER, chunk_size: int | None = None,
        inducing_init: str = "kmeans++", seed: int = 0, standardize_X: bool = False,
        dtype: torch.dtype | None = None,
    ) -> None:
        likelihood = Gaussian() if likelihood is None else likelihood
        if not isinstance(likelihood, Likelihood):
            raise TypeError(f"likelihood must be a sparsegp likelihood; got {type(likelihood).__name__}")
        self._check_labels = likelihood.check_targets  # a bound method: usable before nn.Module init
        super().__init__(X, y, kernel, jitter=jitter, standardize_X=standardize_X, dtype=dtype)
        self.likelihood = likelihood.to(dtype=self.dtype, device=self.device)
        self.kernel.initialise_from_data(self.X, 1.0)
        self._init_inducing(inducing_points, inducing_init, seed)
        C = likelihood.num_latent if num_latent is None else int(num_latent)
        if C < 1 or (likelihood.num_latent > 1 and C != likelihood.num_latent):
            raise ValueError(f"num_latent must be {likelihood.num_latent} for this likelihood; got {C}")
        self.whiten = bool(whiten)
        self.chunk_size = chunk_size
        M = self.feature.num_inducing
        self.q_mu = nn.Parameter(torch.zeros(M, C, dtype=self.dtype, device=self.device))
        eye = torch.eye(M, dtype=self.dtype, device=self.device).expand(C, M, M).clone()
        if not self.whiten:  # start at the prior, S = Kuu
            with torch.no_grad():
                eye = self._cholesky_kuu().expand(C, M, M).clone()
        self.q_sqrt = nn.Parameter(eye)

    def _prepare_targets(self, y: Any, n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
        t = as_tensor(y, "y", dtype=dtype, device=device)
        if t.dim() == 2 and t.shape[1] == 1:
            t = t[:, 0]
        if t.dim() != 1 or t.shape[0] != n:
            raise ValueError(f"y must have one entry per row of X ({n}); got shape {tuple(t.shape)}")
        return self._check_labels(check_finite(t, "y"))

    @property
    def num_latent(self) -> int:
        return self.q_mu.shape[1]

    def _cholesky_kuu(self) -> Tensor:
        return jittered_cholesky(cov.Kuu(self.feature, self.kernel), self.jitter, name="Kuu")[0]

    def _chunk(self) -> int:
        return self.chunk_size or auto_chunk_size(self.num_inducing * (1 + self.num_latent),
                                                  self.X.element_size())

    # -- the bound ------------------------------------------------------------------------
    def elbo(self, X: Tensor | None = None, y: Tensor | None = None, q_mu: Tensor | None = None,
             q_sqrt: Tensor | None = None) -> Tensor:
        """The ELBO (total, not per datum): on all data, or an unbiased estimate from the
        minibatch (X, y) in internal units. q(u) may be overridden (natural gradients)."""
        X, y = (self.X, self.y) if X is None else (X, y)
        return objective.elbo(self.kernel, self.feature, self.likelihood, X, y,
                              self._cholesky_kuu(), self.q_mu if q_mu is None else q_mu,
                              self.q_sqrt if q_sqrt is None else q_sqrt, self.whiten,
                              self.num_data, self._chunk())

    def _objective(self) -> Tensor:
        return self.elbo()

    def forward(self, X: Tensor, y: Tensor) -> Tensor:
        """Minus the minibatch ELBO estimate (and log priors): what DDP and Adam minimise."""
        return -(self.elbo(X, y) + self.log_prior())

    def log_marginal_likelihood(self) -> float:
        """The ELBO on all the data (a lower bound on log p(y))."""
        self._require_data()
        with torch.no_grad():
            return float(self.elbo())

    # -- natural gradients ----------------------------------------------------------------
    def natural_gradient_step(self, gamma: float = 1.0, X: Tensor | None = None,
                              y: Tensor | None = None) -> float:
        """One natural-gradient step of size γ on q(u) (Salimbeni et al. 2018).

        The natural gradient in the natural parameters θ = (S⁻¹m, −½S⁻¹) is the ordinary
        gradient with respect to the expectation parameters η = (m, S + mmᵀ): θ ← θ + γ ∂L/∂η.
        For a Gaussian likelihood and all the data, γ = 1 lands on the optimal q(u). The step
        is halved until the new precision is positive definite; returns the step taken.
        """
        m0, S_root = self.q_mu.detach(), self.q_sqrt.detach().tril()
        m = m0.mT  # [C, M]
        S = S_root @ S_root.mT
        eta1 = m.clone().requires_grad_(True)
        eta2 = (S + m[..., None] * m[..., None, :]).requires_grad_(True)
        S_eta = eta2 - eta1[..., None] * eta1[..., None, :]
        root = torch.stack([jittered_cholesky(s, 0.0, name="S")[0] for s in S_eta])
        value = self.elbo(X, y, q_mu=eta1.mT, q_sqrt=root)
        g1, g2 = torch.autograd.grad(value, (eta1, eta2))
        if is_distributed():  # every rank's estimate is unbiased: average them
            all_reduce_([g1, g2], "the natural gradient")
            g1, g2 = g1 / torch.distributed.get_world_size(), g2 / torch.distributed.get_world_size()
        g2 = 0.5 * (g2 + g2.mT)
        L_S = torch.linalg.cholesky(S)
        theta1 = torch.cholesky_solve(m[..., None], L_S)[..., 0]  # S⁻¹m
        precision = torch.cholesky_inverse(L_S)  # S⁻¹ (q(u) is stored by its covariance)
        step = gamma
        for _ in range(30):
            new_prec = precision - 2.0 * step * g2  # −2θ₂ after the step
            L_P, info = torch.linalg.cholesky_ex(new_prec)
            if int(info.max()) == 0:
                break
            step /= 2.0
        else:
            raise RuntimeError("natural-gradient step: no step size keeps S positive definite")
        new_m = torch.cholesky_solve((theta1 + step * g1)[..., None], L_P)[..., 0]
        new_S = torch.cholesky_inverse(L_P)
        with torch.no_grad():
            self.q_mu.copy_(new_m.mT)
            self.q_sqrt.copy_(torch.linalg.cholesky(0.5 * (new_S + new_S.mT)))
        return step

    # -- training -------------------------------------------------------------------------
    def fit(self, batch_size: int | None = None, epochs: int | None = None, lr: float = 0.01,
            natgrad: bool = True, gamma: float | None = None, maxiter: int = 1000,
            data: Any = None, progress: bool | None = None, seed: int = 0,
            callback: Any = None) -> FitResult:
        """Train; every argument has a default that works for a few thousand points.

        Gaussian likelihood, `batch_size=None` and no `data`: full-batch L-BFGS-B (`maxiter`)
        on the hyperparameters with q(u) at its optimum throughout — the collapsed bound
        (Titsias 2009), which is the ELBO maximised over q(u) — then one natural-gradient step
        of size 1 puts q(u) at that optimum.
        Otherwise minibatches of `batch_size` (default min(N, 256)) from (X, y) or from
        `data` (a DataLoader of (X, y) batches in the units of X) for `epochs` (default:
        about 2,000 steps), each step an Adam step (`lr`) on the hyperparameters and, with
        `natgrad`, a natural-gradient step of size `gamma` (default 0.1) on q(u) — or Adam on
        q(u) too without `natgrad`.
        """
        self._require_data()
        start = time.perf_counter()
        if batch_size is None and data is None and isinstance(self.likelihood, Gaussian) \
                and not is_distributed():
            res = fit_lbfgsb(_CollapsedBound(self), maxiter=maxiter, progress=progress,
                             callback=callback)
            self.natural_gradient_step(1.0)  # the optimal q(u) at the fitted hyperparameters
            res.objective = self.log_marginal_likelihood() + float(self.log_prior().detach())
            res.seconds = time.perf_counter() - start
            return res
        return self._fit_minibatch(batch_size, epochs, lr, natgrad, gamma, data, progress, seed,
                                   callback, start)

    def _loader(self, batch_size: int, data: Any, seed: int) -> tuple[Any, Any]:
        if data is not None:
            return data, None
        dataset = torch.utils.data.TensorDataset(self.X, self.y)
        g = torch.Generator().manual_seed(seed)
        if is_distributed():
            sampler = torch.utils.data.distributed.DistributedSampler(dataset, shuffle=True, seed=seed)
            return torch.utils.data.DataLoader(dataset, batch_size, sampler=sampler), sampler
        return torch.utils.data.DataLoader(dataset, batch_size, shuffle=True, generator=g), None

    def _fit_minibatch(self, batch_size: int | None, epochs: int | None, lr: float, natgrad: bool,
                       gamma: float | None, data: Any, progress: bool | None, seed: int,
                       callback: Any, start: float) -> FitResult:
        N = self.num_data
        B = min(N, 256) if batch_size is None else int(batch_size)
        if B < 1:
            raise ValueError(f"batch_size must be positive; got {batch_size}")
        if epochs is None:
            epochs = max(1, math.ceil(2000 * B / N))
        gamma = 0.1 if gamma is None else float(gamma)
        loader, sampler = self._loader(B, data, seed)
        q = {id(self.q_mu), id(self.q_sqrt)}
        hyper = [p for p in self.parameters() if p.requires_grad and (not natgrad or id(p) not in q)]
        opt = torch.optim.Adam(hyper, lr=lr)
        module: nn.Module = self
        if is_distributed():
            module = nn.parallel.DistributedDataParallel(self)
        show = sys.stderr.isatty() if progress is None else bool(progress)
        show = show and not (is_distributed() and torch.distributed.get_rank() != 0)
        history, steps = [], 0
        bar = tqdm(total=epochs, disable=not show, desc="fit SVGP", leave=False)
        for epoch in range(epochs):
            if sampler is not None:
                sampler.set_epoch(epoch)
            total = 0.0
            for Xb, yb in loader:
                if data is not None:
                    Xb = self._internal_inputs(Xb, "a batch of X")
                    yb = self._prepare_batch_targets(yb)
                if natgrad:
                    self.natural_gradient_step(gamma, Xb, yb)
                opt.zero_grad()
                loss = module(Xb, yb)
                loss.backward()
                opt.step()
                total += float(loss.detach())
                steps += 1
            history.append(-total / max(1, len(loader)))
            bar.update(1)
            bar.set_postfix(elbo=f"{history[-1]:.6g}")
            if callback is not None:
                callback(epoch, history[-1])
            if not math.isfinite(history[-1]):
                bar.close()
                return FitResult(False, f"the ELBO became {history[-1]} in epoch {epoch}", epoch + 1,
                                 steps, history[-1], history, time.perf_counter() - start)
        bar.close()
        return FitResult(True, f"{epochs} epochs of {steps // epochs} steps", epochs, steps,
                         history[-1], history, time.perf_counter() - start)

    def _prepare_batch_targets(self, yb: Any) -> Tensor:
        t = as_tensor(yb, "a batch of y", dtype=self.dtype, device=self.device)
        return self.likelihood.check_targets(t.reshape(-1))

    # -- persistence ----------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return {**super().config(), "likelihood": self.likelihood.config(), "whiten": self.whiten,
                "chunk_size": self.chunk_size}

    @classmethod
    def _restore(cls, config: dict[str, Any], state: dict[str, Tensor]) -> SVGP:
        model = super()._restore(config, state)
        model.likelihood = likelihood_from_config(config["likelihood"]).to(dtype=model.dtype)
        model.feature = InducingPoints(state["feature.Z"])
        model.whiten, model.chunk_size = bool(config["whiten"]), config["chunk_size"]
        model.q_mu = nn.Parameter(torch.zeros_like(state["q_mu"]))
        model.q_sqrt = nn.Parameter(torch.zeros_like(state["q_sqrt"]))
        return model

    def _restore_posterior(self, saved: dict[str, Any]) -> VariationalPosterior:
        return VariationalPosterior(self.kernel, self.feature, saved["L"], saved["q_mu"],
                                    saved["q_sqrt"], True, saved["jitter"])

    # -- prediction -----------------------------------------------------------------------
    def _build_posterior(self) -> VariationalPosterior:
        return VariationalPosterior(self.kernel, self.feature, self._cholesky_kuu(), self.q_mu,
                                    self.q_sqrt, self.whiten, self.jitter)

    def _latent(self, Xnew: Any, full_cov: bool = False) -> tuple[Tensor, Tensor]:
        Xs = self._internal_inputs(Xnew)
        with torch.no_grad():
            return self.posterior().predict_f(Xs, full_cov)

    def predict_f(self, Xnew: Any, full_cov: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the latent functions: [N*] for one, [N*, C] for several."""
        mean, var = self._latent(Xnew, full_cov)
        if self.num_latent == 1:
            mean, var = mean[:, 0], (var[0] if full_cov else var[:, 0])
        return mean.cpu().numpy(), var.cpu().numpy()

    def predict_y(self, Xnew: Any) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of y* under the likelihood."""
        mean, var = self._latent(Xnew)
        if self.likelihood.num_latent == 1:
            mean, var = mean[:, 0], var[:, 0]
        with torch.no_grad():
            m, v = self.likelihood.predict_mean_and_var(mean, var)
        return m.cpu().numpy(), v.cpu().numpy()

    def predict_proba(self, Xnew: Any) -> np.ndarray:
        """Class probabilities: P(y* = 1) [N*] for Bernoulli, [N*, C] for several classes."""
        return self.predict_y(Xnew)[0]

    def predict_log_density(self, Xnew: Any, ynew: Any) -> np.ndarray:
        """log p(y* | data) at each test point [N*] (e.g. for the test NLPD)."""
        mean, var = self._latent(Xnew)
        y = self._prepare_batch_targets(ynew)
        if self.likelihood.num_latent == 1:
            mean, var = mean[:, 0], var[:, 0]
        with torch.no_grad():
            return self.likelihood.predict_log_density(mean, var, y).cpu().numpy()


class _CollapsedBound:
    """The SVGP's hyperparameters under the collapsed bound max_q ELBO (Gaussian likelihood)."""

    def __init__(self, model: SVGP) -> None:
        self.model = model
        self._params = [p for n, p in model.named_parameters() if not n.startswith("q_")]

    def parameters(self) -> list[nn.Parameter]:
        return self._params

    def training_loss(self) -> Tensor:
        m = self.model
        fam = family("vfe")
        F = collapsed_objective(m.kernel, m.feature, m.X, m.y, m.likelihood.value("variance"),
                                fam, m.jitter, m.chunk_size)
        return -(F + m.log_prior())

    def summary(self) -> str:
        return self.model.summary()

