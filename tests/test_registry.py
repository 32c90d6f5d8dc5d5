"""Registered classes by name: a user's class cannot take over a built-in's name (saved models
would rebuild the wrong class), and redefining one's own class (a re-run cell) is fine."""

from __future__ import annotations

import pytest
import torch

import sparsegp as sg


def test_a_user_class_cannot_replace_a_built_in_of_the_same_name():
    with pytest.raises(TypeError, match="'Constant' exists already .*another name"):
        class Constant(sg.means.Mean):  # noqa: F841
            def forward(self, X: torch.Tensor) -> torch.Tensor:
                return X.new_zeros(X.shape[0])
    assert sg.means.Mean.registry.get("Constant") is sg.means.Constant


def test_redefining_ones_own_class_replaces_it():
    def define(offset):
        class Shifted(sg.means.Mean):
            def forward(self, X: torch.Tensor) -> torch.Tensor:
                return X.new_full((X.shape[0],), offset)
        return Shifted

    first, second = define(1.0), define(2.0)
    assert sg.means.Mean.registry.get("Shifted") is second is not first


def test_a_vector_where_a_scalar_belongs_is_refused_on_assignment_too():
    k = sg.kernels.SquaredExponential(lengthscale=1.0)
    with pytest.raises(ValueError, match="variance must be a scalar"):
        k.variance = [1.0, 2.0]
    with pytest.raises(ValueError, match="variance must be a scalar"):
        sg.kernels.Constant().variance = [1.0, 2.0]
    k.set_value("lengthscale", [1.0, 2.0], reshape=True)  # ARD: a vector belongs here
    assert k.lengthscale.tolist() == pytest.approx([1.0, 2.0])
    lin = sg.kernels.Linear(variance=[1.0, 0.5])
    lin.variance = [3.0, 4.0]
    assert lin.variance.tolist() == pytest.approx([3.0, 4.0])
