"""Each model's constructor options are one typed, frozen value (`models/options.py`) whose
fields are exactly the constructor's arguments besides the data: a new argument cannot be
forgotten on the way to the construction hooks."""

import dataclasses
import inspect

import numpy as np
import pytest

import sparsegp as sg
from sparsegp.models.core.options import ModelOptions, RegressionOptions
from sparsegp.models.kissgp import KISSGPOptions
from sparsegp.models.sgpc import SGPCOptions
from sparsegp.models.sgpr import SGPROptions
from sparsegp.models.spectral import RFFOptions
from sparsegp.models.svgp.targets import SVGPOptions

OPTIONS = {sg.GPR: RegressionOptions, sg.SGPR: SGPROptions, sg.SVGP: SVGPOptions,
           sg.SGPC: SGPCOptions, sg.KISSGP: KISSGPOptions, sg.RFF: RFFOptions,
           sg.SSGP: RFFOptions}
# set by the constructor, not given by the user: the exact and the spectral models fix them
FIXED = {sg.KISSGP: {"jitter", "noise_groups"}, sg.RFF: {"jitter", "noise_groups"},
         sg.SSGP: {"jitter", "noise_groups"}, sg.GPR: set(), sg.SGPR: set(), sg.SVGP: set(),
         sg.SGPC: set()}


@pytest.mark.parametrize("model", list(OPTIONS), ids=lambda m: m.__name__)
def test_the_options_are_the_constructor_arguments(model):
    arguments = set(inspect.signature(model.__init__).parameters) - {"self", "X", "y"}
    fields = {f.name for f in dataclasses.fields(OPTIONS[model])}
    assert fields == arguments | FIXED[model]
    assert issubclass(OPTIONS[model], ModelOptions)


def test_options_are_frozen_and_checked_when_made():
    X, y = sg.datasets.snelson()
    given = dict(kernel=None, mean=None, jitter=1e-6, standardize_X=False, dtype=None,
                 noise_variance=None, noise_groups=None, standardize_y=True,
                 inducing_points=5, inducing_init="kmeans++", seed=0, chunk_size=None,
                 approximation="vfe", alpha=None, blocks=None, mixing=None, compute_dtype=None)
    options = SGPROptions(**given)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.jitter = 0.1  # type: ignore[misc]
    assert options.given() == given
    for name, bad, error in [("jitter", -1.0, ValueError), ("standardize_y", "False", TypeError),
                             ("seed", 1.5, TypeError), ("chunk_size", 0, ValueError),
                             ("compute_dtype", "float32", TypeError)]:
        with pytest.raises(error, match=name):
            SGPROptions(**{**given, name: bad})
    # the model reaches the same checks through its constructor
    with pytest.raises(TypeError, match="compute_dtype"):
        sg.SGPR(X, y, compute_dtype=np.float32)
