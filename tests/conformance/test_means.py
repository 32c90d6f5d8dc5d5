"""Every registered mean function (recipes in `recipes.MEANS`): one value per input row,
config and state_dict round trips, gradients against finite differences."""

from __future__ import annotations

import copy

import pytest
import torch

from sparsegp.means import Mean

from .helpers import assert_plain, gradcheck_through, normal, perturb
from .recipes import MEANS, built, cases, missing_recipes, registered

N = 6


def build(name, case):
    return built("mean", name, case, case.make())


def test_a_new_class_of_the_package_without_a_recipe_is_reported(monkeypatch):
    # what makes registration sufficient: a class that sparsegp defines (here one planted in
    # sparsegp.means) is found in the registry and reported until it has a recipe; a class
    # defined elsewhere (a test's, a doctest's) is not the package's
    class Quadratic(Mean):
        def forward(self, X):
            return (X * X).sum(1)

    try:
        assert "Quadratic" not in registered("mean")
        Quadratic.__module__, Quadratic.__qualname__ = "sparsegp.means", "Quadratic"
        monkeypatch.setattr("sparsegp.means.Quadratic", Quadratic, raising=False)
        assert registered("mean")["Quadratic"] is Quadratic
        assert missing_recipes(registered("mean"), MEANS) == ["Quadratic"]
    finally:
        Mean.registry._classes.pop("Quadratic", None)


@pytest.mark.parametrize("name,case", cases("mean", "values"))
def test_one_finite_value_per_row(name, case):
    # m(X) [N] (or [N, C] for a mean of several latent functions), and row by row the same
    mean = build(name, case)
    X = normal(N, case.input_dim, seed=0)
    m = mean(X).detach()
    assert m.shape[0] == N and m.dim() in (1, 2) and m.dtype == X.dtype
    assert bool(torch.isfinite(m).all())
    torch.testing.assert_close(torch.cat([mean(X[i:i + 1]).detach() for i in range(N)]), m,
                               rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("name,case", cases("mean", "config"))
def test_config_rebuilds_the_same_mean(name, case):
    mean = build(name, case)
    perturb(mean)
    cfg = mean.config()
    assert_plain(cfg)
    assert cfg["type"] == name
    back = Mean.registry.build(copy.deepcopy(cfg))
    assert type(back) is type(mean)
    back.load_state_dict(mean.state_dict())
    assert back.config() == cfg
    X = normal(N, case.input_dim, seed=1)
    torch.testing.assert_close(back(X), mean(X), rtol=0, atol=0)


@pytest.mark.parametrize("name,case", cases("mean", "state"))
def test_state_dict_carries_every_value(name, case):
    mean, fresh = build(name, case), build(name, case)
    perturb(mean, seed=3)
    fresh.load_state_dict(mean.state_dict())
    X = normal(N, case.input_dim, seed=1)
    torch.testing.assert_close(fresh(X), mean(X), rtol=0, atol=0)


@pytest.mark.parametrize("name,case", cases("mean", "gradients"))
def test_gradients_match_finite_differences(name, case):
    # with respect to every parameter and to the inputs
    mean = build(name, case)
    X = normal(4, case.input_dim, seed=2).requires_grad_()
    assert gradcheck_through([mean], mean, [X])
