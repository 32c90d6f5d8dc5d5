"""Fixtures shared by the conformance checks."""

from __future__ import annotations

import warnings

import pytest

import sparsegp as sg


@pytest.fixture
def quiet_models():
    """The recipes' data are tiny on purpose: the library's scale advice and approximation
    warnings are not the point of the model checks."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sg.ScaleWarning)
        warnings.simplefilter("ignore", sg.ApproximationWarning)
        yield
