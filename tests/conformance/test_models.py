"""Every registered model class (recipes in `recipes.MODELS_`): built on tiny data, a finite
training loss whose gradient matches finite differences, save/load round trips that predict
identically (with and without the data), and the config round trip that `load` relies on.
The conditioned models (`condition_on_observations`: frozen parameters) skip the training
checks; the models of fantasies hold no data set and say so clearly."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.models.core.registry import MODELS

from .helpers import assert_same_state, perturb
from .recipes import built, cases

pytestmark = pytest.mark.usefixtures("quiet_models")


def build(name, case):
    return built("model", name, case, case.make())


def trainable(model):
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def trains(case):
    return not case.conditioned


def moved(model, case, seed):
    """The model with its parameters moved off the recipe's values (not a model of fantasies:
    its posterior is all it has; `test_a_model_of_fantasies_says_it_holds_no_data_set`)."""
    if case.conditioned != "fantasies":
        perturb(model, seed=seed, scale=0.05)
    return model


@pytest.mark.parametrize("name,case", cases("model", "loss", trains))
def test_the_training_loss_and_its_gradient_are_finite(name, case):
    model = build(name, case)
    loss = model.training_loss()
    assert loss.dim() == 0 and bool(torch.isfinite(loss))
    params = trainable(model)
    assert params, "a model with nothing to train"
    grads = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True)
    for (n, _), g in zip(params, grads):
        assert g is None or bool(torch.isfinite(g).all()), n


def central_difference(model, p, index, step=1e-5):
    with torch.no_grad():
        flat = p.view(-1)
        old = flat[index].item()
        flat[index] = old + step
        up = float(model.training_loss())
        flat[index] = old - step
        down = float(model.training_loss())
        flat[index] = old
    return (up - down) / (2 * step)


@pytest.mark.parametrize("name,case", cases("model", "gradient", trains))
def test_the_gradient_matches_finite_differences(name, case):
    # the first and the last entry of every trainable parameter (raw values)
    model = build(name, case)
    params = trainable(model)
    entries = [(n, p, i) for n, p in params for i in sorted({0, p.numel() - 1})]
    numeric = torch.tensor([central_difference(model, p, i) for _, p, i in entries])
    if case.gradient == "exact":
        grads = torch.autograd.grad(model.training_loss(), [p for _, p in params], allow_unused=True)
        by_name = {n: torch.zeros_like(p) if g is None else g for (n, p), g in zip(params, grads)}
        analytic = torch.tensor([float(by_name[n].reshape(-1)[i]) for n, _, i in entries])
        torch.testing.assert_close(analytic, numeric, rtol=1e-5, atol=1e-6)
        return
    # "unbiased": training_loss(step) draws step's own probe vectors; the mean of the
    # gradient estimates is within 4 standard errors of the gradient of the (exact) value
    assert case.gradient == "unbiased"
    draws = []
    for step in range(30):
        grads = torch.autograd.grad(model.training_loss(step), [p for _, p in params])
        by_name = dict(zip((n for n, _ in params), grads))
        draws.append(torch.tensor([float(by_name[n].reshape(-1)[i]) for n, _, i in entries]))
    draws = torch.stack(draws)
    mean, se = draws.mean(0), draws.std(0) / np.sqrt(len(draws))
    assert bool(((mean - numeric).abs() <= 4 * se + 1e-6).all()), (mean, se, numeric)


def assert_same_predictions(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("name,case", cases("model", "save"))
def test_save_and_load_predict_identically(name, case, tmp_path):
    model = moved(build(name, case), case, seed=1)  # not the constructor's values
    model.metadata["recipe"] = case.id
    before = case.predict(model)
    for include_data in (False, True) if case.conditioned != "fantasies" else (False,):
        path = tmp_path / f"{name}-{include_data}.pt"
        model.save(path, include_data=include_data)
        back = sg.load(path)
        assert type(back) is type(model)
        assert back.metadata == {"recipe": case.id}
        # data-sized state (SGPC's sites) is saved with the data only
        assert_same_state(back, model, skip=() if include_data else model.data_extras())
        assert back.config() == model.config()
        assert_same_predictions(case.predict(back), before)
        if include_data:
            with torch.no_grad():
                assert float(back.training_loss()) == float(model.training_loss())


@pytest.mark.parametrize("name,case", cases("model", "config"))
def test_config_and_state_dict_rebuild_the_model(name, case):
    # what `load` does, without a file: the registry finds the class by name, `_restore`
    # rebuilds the structure from config(), load_state_dict the values
    model = moved(build(name, case), case, seed=2)
    cfg = model.config()
    assert MODELS.get(type(model).__name__) is type(model)
    back = type(model)._restore(copy.deepcopy(cfg), model.state_dict())
    back.load_state_dict(model.state_dict())
    assert type(back) is type(model)
    assert back.config() == cfg
    assert_same_state(back, model)


@pytest.mark.parametrize("name,case", cases("model", "fantasies",
                                            lambda case: case.conditioned == "fantasies"))
def test_a_model_of_fantasies_says_it_holds_no_data_set(name, case, tmp_path):
    model = build(name, case)
    F = model.num_fantasies
    assert F == case.ynew().shape[1] and model.y is None
    with pytest.raises(RuntimeError, match=f"holds {F} fantasies .* not one data set"):
        model.training_loss()
    with pytest.raises(ValueError, match=f"no data.*holds {F} fantasies"):
        model.save(tmp_path / "model.pt", include_data=True)
    with torch.no_grad():  # new parameter values: nothing to rebuild the posterior from
        next(model.parameters()).add_(0.1)
    with pytest.raises(RuntimeError, match="not one data set"):
        model.predict_f(case.Xnew())
