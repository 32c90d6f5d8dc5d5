"""Warnings a user can trust: none on a correct fit, one naming the fix where a fit went wrong.

* a correct low-noise fit (true noise variance 1e-4, recovered) gives no warning; a noise
  the data do not support (FITC's collapse to the floor, a noise frozen far too small) does;
* a fit that stops at its iteration or round limit, or ends its epoch budget while the
  objective still rises, gives a `ConvergenceWarning` naming the option that raises it;
* a fit started at a lengthscale far beyond the inputs' extent, which stays there, is
  restarted from the data-based starting values (and says so).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import sparsegp as sg
from sparsegp.diagnostics import ConvergenceWarning

pytestmark = pytest.mark.numerics  # rounding-sensitive: rerun in CI under another code path


def low_noise_data(N=200, seed=0, noise_std=0.01):
    """Structure at scale ~1 on [-3, 3], noise variance noise_std² (1e-4)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (N, 1))
    y = latent(X) + noise_std * rng.standard_normal(N)
    return X, y


def latent(X):
    return np.sin(2 * X[:, 0]) + 0.5 * np.cos(5 * X[:, 0])


def fitted(make, **options):
    """The model made and fitted, the result, and every warning given on the way."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = make()
        result = model.fit(progress=False, **options)
    return model, result, caught


def rmse(model, X):
    return float(np.sqrt(np.mean((model.predict(X)[0] - latent(X)) ** 2)))


def of(caught, category):
    return [str(w.message) for w in caught if issubclass(w.category, category)]


# -- the noise --------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda X, y: sg.GPR(X, y),
    lambda X, y: sg.SGPR(X, y, inducing_points=50),
    lambda X, y: sg.SVGP(X, y, inducing_points=50),
], ids=["GPR", "SGPR", "SVGP"])
def test_a_correct_low_noise_fit_gives_no_warning(make):
    X, y = low_noise_data()
    model, result, caught = fitted(lambda: make(X, y))
    assert 0.7e-4 < model.noise_variance < 1.5e-4  # the true 1e-4, recovered
    assert rmse(model, np.linspace(-2.9, 2.9, 300)[:, None]) < 0.01
    assert [str(w.message) for w in caught] == []  # it said "collapsed towards zero"
    rep = model.diagnostics()
    assert rep.warnings == [] and rep.supported_noise == pytest.approx(1e-4, rel=0.3)


def test_a_correct_low_noise_fit_is_certified_without_the_exact_evidence():
    # N = 2000 is beyond the exact evidence's default 1000 rows; Titsias's upper bound is
    # loose at σ² = 1e-4 (690 nats from the lower bound here), the quadratic-form one is not
    X, y = low_noise_data(N=2000)
    model = sg.SGPR(X, y, inducing_points=60)
    model.fit(progress=False, diagnose=False)
    rep = model.diagnostics()
    assert rep.exact is None
    assert rep.tight_upper_bound - rep.lower_bound > 100.0
    assert rep.certified_gap < 0.01 * rep.num_data
    assert rep.warnings == []


def test_fitc_noise_collapsed_to_its_floor_still_warns():
    # FITC with 5 inducing points on 50 Snelson points drives σ² to its floor (Bauer et al.
    # 2016), while the exact evidence at its kernel is highest at σ² ≈ 0.07; run to L-BFGS-B's
    # own tolerance (the default stall rule stops at iteration 40, σ² at 0.012 var(y), before
    # the collapse: the last 0.4 nats come from it)
    X, y = sg.datasets.snelson()
    model, _, caught = fitted(lambda: sg.SGPR(X[::4], y[::4], inducing_points=5,
                                              approximation="fitc", inducing_init="random"),
                              tol=1e-12)
    assert model.noise_variance < 1e-5 * np.var(y[::4])
    message = " ".join(of(caught, sg.ApproximationWarning))
    # where L-BFGS-B stops on its way down to the floor depends on the CPU's rounding
    # (1.0e-6 and 1.2e-6 × var(y) measured): either words say what happened
    assert "noise variance" in message
    assert "is at its floor" in message or "has collapsed towards zero" in message
    assert "prefer approximation='vfe'" in message
    rep = model.diagnostics()
    assert 0.03 < rep.supported_noise < 0.15


def test_a_noise_frozen_far_below_what_the_data_support_warns():
    X, y = sg.datasets.snelson()  # noise variance ≈ 0.08
    model = sg.GPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=0.6),
                   noise_variance=1e-4)
    model.freeze("noise_variance")
    model.kernel.freeze("lengthscale")
    with pytest.warns(sg.ApproximationWarning, match="has collapsed towards zero: the data "
                                                     "support 0.0"):
        model.fit(progress=False)
    assert model.diagnostics().supported_noise == pytest.approx(0.08, rel=0.3)


def test_noise_check_on_nearly_noise_free_data_does_not_warn():
    X, _ = low_noise_data()
    model, _, caught = fitted(lambda: sg.GPR(X, latent(X)))
    assert model.noise_variance < 1e-4
    assert of(caught, sg.ApproximationWarning) == []


# -- the examples of the README and the docs pages ---------------------------------------------
def test_power_ep_over_estimating_by_a_fraction_of_a_nat_does_not_warn():
    # Power EP with α = 0.5 lies above log p(y) by design: by 0.05 nats on Snelson (the demo)
    # and 0.07 with 20 blocks (the README); FITC's 17.8 nats still warn
    X, y = sg.datasets.snelson()
    blocks = sg.cluster_blocks(X, 20, seed=0)
    for make in (lambda: sg.SGPR(X, y, inducing_points=12, approximation="pep", alpha=0.5),
                 lambda: sg.SGPR(X, y, inducing_points=10, approximation="pep", alpha=0.5,
                                 blocks=blocks)):
        model, _, caught = fitted(make)
        assert of(caught, UserWarning) == []
        rep = model.diagnostics()
        assert rep.objective - rep.best_upper_bound < 1.0
    fitc, _, caught = fitted(lambda: sg.SGPR(X[::2], y[::2], inducing_points=8,
                                             approximation="fitc"))
    assert any("provably over-estimates" in m for m in of(caught, sg.ApproximationWarning))


def test_a_default_vfe_fit_with_spare_inducing_points_does_not_warn():
    # `sparsegp fit` on Snelson: M = 100 on 200 points, VFE stacks 13 pairs of spare inducing
    # inputs; they cost it nothing (log p(y) is 0.0002 nats above the bound)
    X, y = sg.datasets.snelson()
    model, _, caught = fitted(lambda: sg.SGPR(X, y))
    rep = model.diagnostics()
    assert rep.effective_num_inducing < rep.num_inducing  # reported in the table
    assert of(caught, UserWarning) == [] and rep.warnings == []


# -- limits -----------------------------------------------------------------------------------
def test_sgpr_stopped_at_its_iteration_limit_warns():
    X, y = sg.datasets.snelson()
    _, result, caught = fitted(lambda: sg.SGPR(X, y, inducing_points=10), maxiter=3)
    assert not result.success and result.iterations == 3
    [message] = of(caught, ConvergenceWarning)
    assert "stopped at its iteration limit (maxiter=3)" in message
    assert "pass a larger maxiter=" in message
    assert [w.filename for w in caught if w.category is ConvergenceWarning] == [__file__]


def test_a_converged_fit_gives_no_convergence_warning_and_diagnose_false_none():
    X, y = sg.datasets.snelson()
    _, result, caught = fitted(lambda: sg.SGPR(X, y, inducing_points=10))
    assert result.success and of(caught, ConvergenceWarning) == []
    _, _, caught = fitted(lambda: sg.SGPR(X, y, inducing_points=10), maxiter=3, diagnose=False)
    assert of(caught, ConvergenceWarning) == []


def test_convergence_warnings_can_be_filtered_as_errors():
    X, y = sg.datasets.snelson()
    assert issubclass(ConvergenceWarning, UserWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        with pytest.raises(ConvergenceWarning, match="maxiter=2"):
            sg.GPR(X, y).fit(maxiter=2, progress=False)


def test_sgpc_stopped_at_its_round_limit_warns():
    X, y = sg.datasets.snelson()
    _, result, caught = fitted(lambda: sg.SGPC(X, (y > 0).astype(int), inducing_points=5),
                               maxiter=1)
    assert not result.success and result.iterations == 1
    [message] = of(caught, ConvergenceWarning)
    assert "round limit (maxiter=1 rounds" in message and "pass a larger maxiter=" in message
    _, result, caught = fitted(lambda: sg.SGPC(X, (y > 0).astype(int), inducing_points=5))
    assert result.success and of(caught, ConvergenceWarning) == []


def test_a_minibatch_budget_warns_only_while_the_objective_still_rises():
    X, y = sg.datasets.snelson()
    make = lambda: sg.SVGP(X, y, inducing_points=10)  # noqa: E731
    _, result, caught = fitted(make, batch_size=50, epochs=8)
    [message] = of(caught, ConvergenceWarning)  # ELBO −234 and rising 4 nats per epoch
    assert "budget of 8 epochs while the objective still rose" in message
    assert "pass a larger epochs=" in message
    _, result, caught = fitted(make, batch_size=50, epochs=200)  # it levels off near −57
    assert result.objective > -70 and of(caught, ConvergenceWarning) == []


# -- a start far away -------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda X, y, k: sg.GPR(X, y, kernel=k),
    lambda X, y, k: sg.SGPR(X, y, kernel=k, inducing_points=50),
], ids=["GPR", "SGPR"])
def test_a_fit_stalled_at_a_far_lengthscale_restarts_from_the_data(make):
    X, y = low_noise_data()
    Xtest = np.linspace(-2.9, 2.9, 300)[:, None]
    k = sg.kernels.SquaredExponential(lengthscale=1e4)
    model, result, caught = fitted(lambda: make(X, y, k))
    # it "converged" at ℓ = 1e4 with RMSE 0.80, the noise explaining everything
    assert rmse(model, Xtest) < 0.01 and model.kernel.lengthscale < 10
    [message] = of(caught, ConvergenceWarning)
    assert "stayed at lengthscale 1e+04" in message and "data-based starting values" in message
    assert result.message.startswith("restarted from the data-based starting values")
    assert result.info["restart"]["first_objective"] < result.objective - 100
    assert result.objective == pytest.approx(model.log_marginal_likelihood(), rel=1e-9)
    assert of(caught, sg.ApproximationWarning) == []


def test_a_far_lengthscale_the_user_froze_or_the_fit_found_is_kept():
    X, y = low_noise_data()
    model = sg.GPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=1e4))
    model.kernel.freeze("lengthscale")
    _, result, caught = fitted(lambda: model)
    assert model.kernel.lengthscale == pytest.approx(1e4) and "restart" not in result.info
    assert of(caught, ConvergenceWarning) == []
    # an input that does not matter: its lengthscale grows far beyond its extent from the
    # data-based start; that is a finding, not a stall (tol=: the predictions settle, and
    # the default fit stops, before it is 10× the extent)
    rng = np.random.default_rng(1)
    X2 = np.c_[X, rng.uniform(-3, 3, len(X))]
    model, result, caught = fitted(lambda: sg.GPR(X2, y), tol=1e-9)
    assert model.kernel.lengthscale[1] > 10 * 6 and "restart" not in result.info
    assert of(caught, ConvergenceWarning) == []
