"""Registration is enough: every class the package registers (kernels, inducing features,
likelihoods, means, models) has a recipe in `recipes.py`, so every conformance check runs on
it, and every recipe is of a registered class."""

from __future__ import annotations

import pytest

from .recipes import FEATURES, KERNELS, LIKELIHOODS, MEANS, MODELS_, missing_recipes, registered

TABLES = {"kernel": (KERNELS, "KERNELS"), "feature": (FEATURES, "FEATURES"),
          "likelihood": (LIKELIHOODS, "LIKELIHOODS"), "mean": (MEANS, "MEANS"),
          "model": (MODELS_, "MODELS_")}


@pytest.mark.parametrize("kind", TABLES)
def test_every_registered_class_has_a_recipe_and_every_recipe_a_class(kind):
    recipes, table = TABLES[kind]
    classes = registered(kind)
    assert not missing_recipes(classes, recipes), (
        f"registered {kind} classes without a recipe in tests/conformance/recipes.py "
        f"{table}: {missing_recipes(classes, recipes)}")
    assert not set(recipes) - set(classes), \
        f"recipes of no registered {kind}: {set(recipes) - set(classes)}"
