"""One `fit()` for every model: no model overrides it; options a model never takes are
refused, options its chosen plan does not read are named in a warning, and the plan fit()
would run can be asked for without training."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import sparsegp as sg
from sparsegp.models.classes import MODELS
from sparsegp.models.fitting import Fitting

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
        assert cls.fit is Fitting.fit, cls.__name__
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

