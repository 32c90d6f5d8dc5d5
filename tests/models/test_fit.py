"""One `fit()` for every model: no model overrides it; options a model never takes are
refused, options its chosen plan does not read are named in a warning, and the plan fit()
would run can be asked for without training. L-BFGS-B backs off from a trial step whose
evaluation fails, and stops when the failures persist."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.models import Model
from sparsegp.models.core.registry import MODELS

from ..conftest import make_problem


def _concrete_models():
    import sparsegp.models  # noqa: F401  (every model class registered)

    return [cls for name, cls in sorted(MODELS._classes.items())
            if not getattr(cls, "__abstractmethods__", None)
            and cls.__module__.startswith("sparsegp.")]


def test_no_model_overrides_fit_and_every_model_has_a_plan():
    classes = _concrete_models()
    assert {c.__name__ for c in classes} >= {"GPR", "SGPR", "SGPC", "SVGP", "RFF", "SSGP",
                                             "KISSGP", "BayesianGPLVM", "GPSSM"}
    for cls in classes:
        assert cls.fit is Model.fit, cls.__name__
        assert "training_plan" in {k for c in cls.__mro__ for k in vars(c)}, cls.__name__


@pytest.mark.parametrize("build, option", [
    (lambda X, y: sg.SGPR(X, y, inducing_points=5), {"schedule": "full"}),
    (lambda X, y: sg.GPR(X, y), {"batch_size": 10}),
    (lambda X, y: sg.KISSGP(X, y, grid_size=20), {"tol": 1e-3}),
    (lambda X, y: sg.SVGP(X, y, inducing_points=5), {"schedule": "full"}),
    (lambda X, y: sg.SGPC(X, y > 0, inducing_points=5), {"diagnose": False}),
])
def test_an_option_the_model_never_takes_is_a_type_error_naming_it(build, option):
    X, y = make_problem(3, N=30)
    model = build(X, y)
    name = next(iter(option))
    with pytest.raises(TypeError, match=rf"{type(model).__name__}.fit\(\) takes no {name}"):
        model.fit(**option)


def test_the_plan_fit_would_run_is_named_without_training():
    X, y = make_problem(4, N=30)
    svgp = sg.SVGP(X, y, inducing_points=5)
    assert "L-BFGS-B" in svgp.training_plan(sg.FitOptions()).name
    assert "minibatch" in svgp.training_plan(sg.FitOptions(batch_size=8)).name
    sgpc = sg.SGPC(X, y > 0, inducing_points=5)
    assert sgpc.training_plan(sg.FitOptions(schedule="stochastic")).name == \
        "the stochastic schedule"
    with pytest.raises(ValueError, match="schedule must be 'full' or 'stochastic'"):
        sgpc.fit(schedule="sometimes")
    lvm = sg.BayesianGPLVM(np.c_[y, np.cos(y)], latent_dim=1, inducing_points=4)
    assert "minibatch" in lvm.training_plan(sg.FitOptions(batch_size=8)).name


def test_maxiter_is_the_first_argument_of_every_fit():
    X, y = make_problem(5, N=30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model in (sg.GPR(X, y), sg.SGPR(X, y, inducing_points=5),
                      sg.SVGP(X, y, inducing_points=5), sg.KISSGP(X, y, grid_size=20),
                      sg.RFF(X, y, num_features=10)):
            result = model.fit(2, progress=False)
            assert result.iterations <= 2, type(model).__name__


def test_options_of_the_plan_not_taken_are_named_in_one_warning():
    X, y = make_problem(6, N=30)
    with pytest.warns(UserWarning, match="epochs, lr apply only to minibatch training"):
        sg.SVGP(X, y, inducing_points=5).fit(maxiter=2, epochs=3, lr=0.1, progress=False,
                                             diagnose=False)
    with pytest.warns(UserWarning, match='batch_size applies only to schedule="stochastic"'):
        sg.SGPC(X, y > 0, inducing_points=5).fit(maxiter=1, batch_size=8, progress=False)


class _Bowl(torch.nn.Module):
    """Σ w log cosh(θ − 1) from θ = (−3, 4, −2), with a Cholesky that fails where `fails(θ)`:
    what `fit_lbfgsb` trains (parameters and a loss); every θ evaluated is kept."""

    def __init__(self, fails):
        super().__init__()
        self.theta = torch.nn.Parameter(torch.tensor([-3.0, 4.0, -2.0], dtype=torch.float64))
        self.fails, self.trials = fails, []

    def training_loss(self):
        theta = self.theta.detach().clone()
        self.trials.append(theta)
        if self.fails(theta):
            raise sg.CholeskyError("Cholesky of K failed here")
        w = torch.tensor([1.0, 30.0, 300.0], dtype=torch.float64)
        return (w * torch.log(torch.cosh(self.theta - 1.0))).sum()


def test_the_line_search_backs_off_from_a_failed_trial_step_to_a_quarter_of_it():
    from sparsegp.training import fit_lbfgsb

    model = _Bowl(lambda theta: bool(theta.abs().max() > 5.0))
    iterates = []  # how many evaluations had been made at the end of each iteration
    result = fit_lbfgsb(model, tol=1e-12, callback=lambda i, f: iterates.append(len(model.trials)))
    assert result.success and result.info["failed_trials"] == 1
    torch.testing.assert_close(model.theta.detach(), torch.ones(3, dtype=torch.float64),
                               rtol=0, atol=1e-6)
    failed = next(k for k, theta in enumerate(model.trials) if model.fails(theta))
    base = model.trials[max(n for n in iterates if n <= failed) - 1]  # the iterate before it
    step, retry = model.trials[failed] - base, model.trials[failed + 1] - base
    # `lbfgs._TrialSteps`: f₀ + |g₀·s| and gradient −3g₀ there put the next trial at s/4
    torch.testing.assert_close(retry, 0.25 * step, rtol=1e-6, atol=1e-12)


def test_failures_that_persist_stop_the_fit_at_the_last_accepted_values():
    from sparsegp.training import fit_lbfgsb
    from sparsegp.training.lbfgs import TRIAL_FAILURES

    start = torch.tensor([-3.0, 4.0, -2.0], dtype=torch.float64)
    model = _Bowl(lambda theta: not torch.equal(theta, start))  # every step fails
    with pytest.warns(RuntimeWarning, match="stopped at iteration 0: Cholesky of K failed here. "
                                            "The model holds the last accepted"):
        result = fit_lbfgsb(model)
    assert not result.success and result.info["non_finite"]
    assert result.info["failed_trials"] == TRIAL_FAILURES == 12
    assert torch.equal(model.theta.detach(), start)
