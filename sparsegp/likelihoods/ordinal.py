"""Ordered classes: p(y = k | f) = F((c_k − f)/σ) − F((c_{k−1} − f)/σ), cumulative probit or logit."""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.nn.functional import logsigmoid

from .. import quadrature
from ..parameters import as_user_array, at_least_above
from ..runtime.config import DEFAULT_DTYPE, POSITIVE_FLOOR
from ..validation import ArrayLike
from .base import LOG_SQRT_2PI, Likelihood

LINKS = ("probit", "logit")

#: The trapezoid rule's nodes span ±GRID_HALF_WIDTH standard deviations of N(μ, v) (about the
#: tilted mode for Power EP's moments), N(0, 1) mass beyond: 4e-33.
GRID_HALF_WIDTH = 12.0

#: At most 2 × GRID_MAX_STEPS + 1 nodes: the step resolves edges of width σ for √v ≤ 21σ.
GRID_MAX_STEPS = 1024

#: Bisections of the bracket of the tilted mode (its precision matters little: the grid is wide).
MODE_BISECTIONS = 60


def _log1mexp(x: Tensor) -> Tensor:
    """log(1 − eˣ) for x < 0, accurate at both ends (Mächler 2012); each branch sees only
    the inputs it serves, so that neither puts a NaN into the other's gradient."""
    near = x > -math.log(2.0)
    return torch.where(near, torch.log(-torch.expm1(torch.where(near, x, -1.0))),
                       torch.log1p(-torch.exp(torch.where(near, -1.0, x))))


class Ordinal(Likelihood):
    """K ordered classes y ∈ {0, …, K − 1} from one latent function f and K − 1 increasing
    cut points c_0 < … < c_{K−2} (c_{−1} = −∞, c_{K−1} = +∞):
    p(y = k | f) = F((c_k − f)/σ) − F((c_{k−1} − f)/σ), F = Φ (``link="probit"``, the default)
    or the logistic sigmoid (``link="logit"``): y is the bin of c that f plus noise of scale σ
    falls in (Chu & Ghahramani 2005). Shapes: f, mean, var [..., N], y [N] -> [..., N];
    class probabilities (`conditional_mean`, `predict_mean_and_var`) [..., N, K].

    The cut points are learned, as the first one c_0 (a free parameter, `first_cut`) and the
    K − 2 positive gaps c_k − c_{k−1} (`gaps`, floored at `POSITIVE_FLOOR`), so that they
    stay ordered. The noise scale σ (`scale`, default 1) is fixed, not learned: replacing
    (f, c, σ) by (af, ac, aσ) for any a > 0 leaves every p(y | f) unchanged, and a GP prior
    on f takes the factor a² into its kernel variance, so σ is not identifiable alongside a
    learned kernel variance and cut points; it only sets the units of f.

    The probit link has closed forms: the predictive class probabilities
    Φ((c_k − m)/√(σ² + v)) − Φ((c_{k−1} − m)/√(σ² + v)), the predictive density (their log)
    and, at α = 1, Power EP's tilted moments (their derivatives in m). Everything else (the
    variational expectation under either link; under the logit link or α ≠ 1 the rest) is
    the trapezoid rule in z = (f − m)/√v over ±12 on a grid of step ¼ min(1, σ/√v) (the
    largest v of the batch; at most 2049 nodes), about the tilted distribution's mode for
    its moments and the predictive density. Gauss–Hermite quadrature would not do: the
    likelihood's edges are σ wide, and 32 points err by 2e-4 at √v = 4σ and 8e-3 at
    √v = 8σ. Measured against adaptive quadrature (scipy.integrate.quad), σ ∈ {0.3, 1},
    v ∈ [0.01, 4], m ∈ [−3, 2], α ∈ {½, 1}, both links: absolute error ≤ 3e-14 in the
    variational expectation and log Z̃, relative error ≤ 5e-12 in its derivatives
    (`quadrature_points` is unused). log p is
    concave in f under both links (a log-concave density integrated over an interval), so
    the tilted distribution has one mode, is narrower than N(μ, v), and SGPC's site
    precisions stay positive; the curvature of log p is bounded by 1/σ² (probit) and
    1/(4σ²) (logit): `bounded_curvature`.

    A model under it (SVGP, SGPC) gives class probabilities [N*, K] from `predict_y`, as
    under `MultiClass`.

    Example:

        >>> import numpy as np, torch, sparsegp as sg
        >>> lik = sg.likelihoods.Ordinal(3, cutpoints=[-1.0, 1.0])
        >>> lik.cutpoints.tolist(), lik.num_latent
        ([-1.0, 1.0], 1)
        >>> mean, var = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
        >>> p, _ = lik.predict_mean_and_var(mean, var)  # class probabilities [N, K]
        >>> tuple(p.shape), [round(s, 6) for s in p.sum(-1).tolist()]
        ((2, 3), [1.0, 1.0])
        >>> X = np.linspace(0, 3, 30)[:, None]
        >>> m = sg.SVGP(X, np.floor(X[:, 0]).clip(0, 2), likelihood=lik, inducing_points=5)
        >>> m.predict_y(X[:4])[0].shape
        (4, 3)
    """

    bounded_curvature = True

    num_classes: int
    link: str
    scale: float

    def __init__(self, num_classes: int, cutpoints: ArrayLike | None = None, link: str = "probit",
                 scale: float = 1.0, quadrature_points: int = quadrature.DEFAULT_POINTS) -> None:
        super().__init__(quadrature_points)
        if (not isinstance(num_classes, numbers.Integral) or isinstance(num_classes, bool)
                or num_classes < 2):
            raise ValueError(f"num_classes must be an integer ≥ 2; got {num_classes!r}")
        if link not in LINKS:
            raise ValueError(f"link must be one of {LINKS}; got {link!r}")
        if not isinstance(scale, numbers.Real) or not (math.isfinite(scale) and scale > 0.0):
            raise ValueError(f"scale must be a positive finite number; got {scale!r}")
        self.num_classes, self.link, self.scale = int(num_classes), link, float(scale)
        K = self.num_classes
        if cutpoints is None:  # unit gaps, centred on 0
            cutpoints = [k - 0.5 * (K - 2) for k in range(K - 1)]
        c = self._checked_cutpoints(cutpoints)
        self._add_free("first_cut", c[0].clone())
        if K > 2:
            self._add_positive("gaps", at_least_above(torch.diff(c), POSITIVE_FLOOR),
                               POSITIVE_FLOOR, max_dim=1)

    def _checked_cutpoints(self, cutpoints: ArrayLike) -> Tensor:
        K = self.num_classes
        try:
            c = torch.as_tensor(cutpoints, dtype=DEFAULT_DTYPE).detach().clone().reshape(-1)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"cutpoints must be an array of {K - 1} numbers") from err
        if c.numel() != K - 1:
            raise ValueError(f"cutpoints must hold num_classes − 1 = {K - 1} values; got {c.numel()}")
        if not bool(torch.isfinite(c).all()):
            raise ValueError("cutpoints must be finite")
        if K > 2 and not bool((torch.diff(c) > 0).all()):
            raise ValueError(f"cutpoints must be strictly increasing; got {c.tolist()}")
        return c

    # -- parameters and structure -----------------------------------------------------------
    def cut_values(self) -> Tensor:
        """The cut points c [K − 1] (differentiable): c_0 and c_0 plus the running sums of the gaps."""
        first = self.value("first_cut").reshape(1)
        if self.num_classes == 2:
            return first
        return torch.cat([first, first + torch.cumsum(self.value("gaps"), 0)])

    @property
    def cutpoints(self) -> np.ndarray:
        """The cut points c_0 < … < c_{K−2}."""
        return as_user_array(self.cut_values().detach())

    @cutpoints.setter
    def cutpoints(self, value: ArrayLike) -> None:
        c = self._checked_cutpoints(value)
        self.set_value("first_cut", c[0])
        if self.num_classes > 2:
            self.set_value("gaps", at_least_above(torch.diff(c), POSITIVE_FLOOR))

    def config(self) -> dict[str, Any]:
        """{"type": "Ordinal", "args": {"num_classes", "cutpoints", "link", "scale",
        "quadrature_points"}}: the cut points as a plain list (`load_state_dict` restores the
        exact parameter values)."""
        return {"type": "Ordinal", "args": {"cutpoints": self.cutpoints.tolist(), **self._structure()}}

    def _structure(self) -> dict[str, Any]:
        return {"num_classes": self.num_classes, "link": self.link, "scale": self.scale,
                **super()._structure()}

    def check_targets(self, y: Tensor) -> Tensor:
        """Labels [N] must be integers in {0, …, K − 1} (any numeric dtype); returned unchanged."""
        bad = y[~torch.isfinite(y) | (y < 0) | (y > self.num_classes - 1) | (y != torch.round(y))]
        if bad.numel():
            values = torch.unique(bad).tolist()
            raise ValueError(f"Ordinal labels must be integers in 0..{self.num_classes - 1} "
                             f"(num_classes = {self.num_classes}); got {bad.numel()} offending "
                             f"values, e.g. {values[:10]}")
        return y

    def check_training_targets(self, y: Tensor) -> Tensor:
        """`check_targets`, and a warning when some class has no label: nothing in the data
        then holds its cut points apart, and fitting them narrows the class's interval
        towards the floor (a predicted probability near 0 for that class)."""
        y = self.check_targets(y)
        absent = sorted(set(range(self.num_classes)) - set(torch.unique(y).long().tolist()))
        if absent:
            warnings.warn(f"Ordinal with num_classes = {self.num_classes}: no training label is "
                          f"in class{'es' if len(absent) > 1 else ''} {absent}, so the data do "
                          f"not place the cut points around {'them' if len(absent) > 1 else 'it'}"
                          "; a fit shrinks such a class's interval and predicts it with "
                          "probability near 0. Give fewer classes, or set the cut points and "
                          "freeze them (`freeze`)", UserWarning, stacklevel=4)
        return y

    # -- densities ----------------------------------------------------------------------------
    def _log_interval(self, f: Tensor, y: Tensor, scale: Tensor | float) -> Tensor:
        """log[F((c_y − f)/s) − F((c_{y−1} − f)/s)], computed in the tail where it is small."""
        K = self.num_classes
        c = self.cut_values().to(f.dtype)
        y = y.to(f.dtype)
        hi = c[y.clamp(max=K - 2).long()]
        lo = c[(y - 1.0).clamp(min=0).long()]
        b, a = (hi - f) / scale, (lo - f) / scale
        first, last = y == 0, y == K - 1
        a_mid = torch.where(first | last, b - 1.0, a)  # finite, below b: no NaN in any branch
        if self.link == "probit":
            log_F = torch.special.log_ndtr
            lower_tail = log_F(b) + _log1mexp(log_F(a_mid) - log_F(b))
            upper_tail = log_F(-a_mid) + _log1mexp(log_F(-b) - log_F(-a_mid))
            middle = torch.where(a_mid + b > 0.0, upper_tail, lower_tail)
            return torch.where(first, log_F(b), torch.where(last, log_F(-a), middle))
        # σ(b) − σ(a) = σ(b) σ(−a) (1 − e^(a − b))
        middle = logsigmoid(b) + logsigmoid(-a_mid) + _log1mexp(a_mid - b)
        return torch.where(first, logsigmoid(b), torch.where(last, logsigmoid(-a), middle))

    def log_prob(self, f: Tensor, y: Tensor) -> Tensor:
        """log p(y | f) = log[F((c_y − f)/σ) − F((c_{y−1} − f)/σ)]."""
        return self._log_interval(f, y, self.scale)

    def _class_probabilities(self, z: Tensor) -> Tensor:
        """Differences of the cumulative probabilities z [..., K − 1] padded with 0 and 1."""
        zeros = torch.zeros_like(z[..., :1])
        return torch.diff(torch.cat([zeros, z, zeros + 1.0], -1), dim=-1).clamp_min(0.0)

    def conditional_mean(self, f: Tensor) -> Tensor:
        """Class probabilities p(y = k | f) [..., N, K]."""
        z = (self.cut_values().to(f.dtype) - f[..., None]) / self.scale
        F = torch.exp(torch.special.log_ndtr(z)) if self.link == "probit" else torch.sigmoid(z)
        return self._class_probabilities(F)

    def conditional_variance(self, f: Tensor) -> Tensor:
        """p(1 − p) for each class [..., N, K]."""
        p = self.conditional_mean(f)
        return p * (1.0 - p)

    def predict_mean_and_var(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """Class probabilities of y* [N, K] and p(1 − p): probit Φ((c_k − m)/√(σ² + v))
        differenced, logit E[σ((c_k − f)/σ)] by the trapezoid rule (`_prior_grid`).
        Shapes: [N] -> two [N, K]."""
        c = self.cut_values().to(mean.dtype)
        if self.link == "probit":
            z = (c - mean[..., None]) / torch.sqrt(self.scale**2 + var[..., None])
            F = torch.exp(torch.special.log_ndtr(z))
        else:
            f, log_w = self._prior_grid(mean, var)  # [..., N, S]
            F = (torch.exp(log_w)[..., None, :]
                 * torch.sigmoid((c[:, None] - f[..., None, :]) / self.scale)).sum(-1)
        p = self._class_probabilities(F)
        return p, p * (1.0 - p)

    def _step(self, var: Tensor) -> float:
        """The trapezoid rule's step in standard deviations of N(μ, v): a quarter of the
        narrower of the Gaussian (1) and the likelihood's edges (σ/√v, the largest v of the
        batch), at least GRID_HALF_WIDTH/GRID_MAX_STEPS."""
        with torch.no_grad():
            sd = float(var.detach().max().sqrt()) if var.numel() else 1.0
        narrow = min(1.0, self.scale / sd) if sd > 0.0 else 1.0
        return max(0.25 * narrow, GRID_HALF_WIDTH / GRID_MAX_STEPS)

    def _grid(self, centre: Tensor, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """Nodes f = centre + √v z [..., N, S], z on the grid of step h over ±GRID_HALF_WIDTH,
        and log weights log(h √v N(f; μ, v)), so that E_{N(μ, v)}[g] ≈ Σ exp(log w) g(f)."""
        h = self._step(var)
        steps = int(math.ceil(GRID_HALF_WIDTH / h))
        z = h * torch.arange(-steps, steps + 1, dtype=mean.dtype, device=mean.device)
        sd = torch.sqrt(var)[..., None]
        f = centre[..., None] + sd * z
        u = (f - mean[..., None]) / sd
        return f, math.log(h) - 0.5 * u * u - LOG_SQRT_2PI

    def _prior_grid(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        return self._grid(mean, mean, var)

    def _mode(self, mean: Tensor, var: Tensor, y: Tensor, alpha: float) -> Tensor:
        """The mode of N(f; μ, v) p(y | f)^α (log-concave: one root of its slope), by
        bracketing and bisection, under no_grad."""
        with torch.no_grad():
            shape = torch.broadcast_shapes(mean.shape, var.shape, y.shape)
            mu, v, yy = mean.detach().expand(shape), var.detach().expand(shape), y.expand(shape)

            def h(f: Tensor) -> Tensor:  # increasing in f
                return (f - mu) / v - alpha * self._slope(f, yy)

            sd = torch.sqrt(v)
            width = sd.clone()
            low, high = mu - width, mu + width
            for _ in range(64):  # widen until the root is bracketed
                out_low, out_high = h(low) > 0.0, h(high) < 0.0
                if not bool((out_low | out_high).any()):
                    break
                width = 2.0 * width
                low = torch.where(out_low, mu - width, low)
                high = torch.where(out_high, mu + width, high)
            for _ in range(MODE_BISECTIONS):
                mid = 0.5 * (low + high)
                below = h(mid) <= 0.0
                low, high = torch.where(below, mid, low), torch.where(below, high, mid)
            return 0.5 * (low + high)

    def _slope(self, f: Tensor, y: Tensor) -> Tensor:
        """∂ log p(y | f)/∂f = −(F'(b) − F'(a))/(σ p(y | f)), F' at the finite ends only."""
        K = self.num_classes
        c = self.cut_values().to(f.dtype)
        b = (c[y.clamp(max=K - 2).long()] - f) / self.scale
        a = (c[(y - 1.0).clamp(min=0).long()] - f) / self.scale
        log_p = self.log_prob(f, y)
        if self.link == "probit":
            log_db, log_da = -0.5 * b * b - LOG_SQRT_2PI, -0.5 * a * a - LOG_SQRT_2PI
        else:
            log_db, log_da = logsigmoid(b) + logsigmoid(-b), logsigmoid(a) + logsigmoid(-a)
        rb = torch.where(y == K - 1, torch.zeros_like(b), torch.exp(log_db - log_p))
        ra = torch.where(y == 0, torch.zeros_like(a), torch.exp(log_da - log_p))
        return -(rb - ra) / self.scale

    def _tilted_grid(self, mean: Tensor, var: Tensor, y: Tensor, alpha: float
                     ) -> tuple[Tensor, Tensor]:
        """The grid about the mode of N(f; μ, v) p(y | f)^α (which is narrower than N(μ, v):
        log p is concave) and the log terms log w + α log p(y | f) [..., N, S]."""
        y = y.to(mean.dtype)
        f, log_w = self._grid(self._mode(mean, var, y, alpha), mean, var)
        return f, log_w + alpha * self.log_prob(f.movedim(-1, 0), y).movedim(0, -1)

    def variational_expectations(self, mean: Tensor, var: Tensor, y: Tensor) -> Tensor:
        """E_{N(f | m, v)}[log p(y | f)] by the trapezoid rule in z = (f − m)/√v (class
        docstring). Shapes: [N] -> [N]."""
        f, log_w = self._prior_grid(mean, var)
        log_p = self.log_prob(f.movedim(-1, 0), y.to(mean.dtype)).movedim(0, -1)
        return (torch.exp(log_w) * log_p).sum(-1)

    def predict_log_density(self, mean: Tensor, var: Tensor, y: Tensor) -> Tensor:
        """Probit: log[Φ((c_y − m)/s) − Φ((c_{y−1} − m)/s)], s = √(σ² + v), exact; logit: the
        trapezoid rule about the integrand's mode. Shapes: [N] -> [N]."""
        if self.link != "probit":
            return torch.logsumexp(self._tilted_grid(mean, var, y, 1.0)[1], dim=-1)
        return self._log_interval(mean, y, torch.sqrt(self.scale**2 + var))

    def tilted_moments(self, mean: Tensor, var: Tensor, y: Tensor, alpha: float
                       ) -> tuple[Tensor, Tensor, Tensor]:
        """Probit and α = 1: Z̃ = Φ(b) − Φ(a), b = (c_y − μ)/s, a = (c_{y−1} − μ)/s,
        s = √(σ² + v); ∂ log Z̃/∂μ = −(N(b) − N(a))/(s Z̃) and
        ∂² log Z̃/∂μ² = −(b N(b) − a N(a))/(s² Z̃) − (∂ log Z̃)², N the standard normal density
        (the infinite ends contribute 0), ratios computed in logs. Otherwise the trapezoid rule
        about the mode of the tilted distribution (class docstring): ∂ log Z̃/∂μ = (m̃ − μ)/v
        and ∂² log Z̃/∂μ² = (ṽ − v)/v². Shapes: [N] -> three [N]."""
        if self.link != "probit" or alpha != 1.0:
            f, log_terms = self._tilted_grid(mean, var, y, alpha)
            log_Z = torch.logsumexp(log_terms, dim=-1)
            p = torch.exp(log_terms - log_Z[..., None])
            dev = f - mean[..., None]
            m1 = (p * dev).sum(-1)
            m2 = (p * (dev - m1[..., None]) ** 2).sum(-1)
            return log_Z, m1 / var, (m2 - var) / var**2
        K = self.num_classes
        s = torch.sqrt(self.scale**2 + var)
        log_Z = self._log_interval(mean, y, s)
        c = self.cut_values().to(mean.dtype)
        yy = y.to(mean.dtype)
        b = (c[yy.clamp(max=K - 2).long()] - mean) / s
        a = (c[(yy - 1.0).clamp(min=0).long()] - mean) / s
        # N(x)/Z̃ at each finite end, 0 at an infinite one
        rb = torch.where(yy == K - 1, torch.zeros_like(b), torch.exp(-0.5 * b * b - LOG_SQRT_2PI - log_Z))
        ra = torch.where(yy == 0, torch.zeros_like(a), torch.exp(-0.5 * a * a - LOG_SQRT_2PI - log_Z))
        d1 = -(rb - ra) / s
        d2 = -(b * rb - a * ra) / (s * s) - d1 * d1
        return log_Z, d1, d2
