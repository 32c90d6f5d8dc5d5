"""Construction goes one way: a model built by `__init__` and the same model rebuilt by `load`
from its config have the same structure, attribute for attribute; kernels, features,
likelihoods and models are rebuilt by one registry mechanism."""

from __future__ import annotations

import numpy as np
import pytest

import sparsegp as sg
from sparsegp.features import InducingFeature
from sparsegp.kernels import Kernel
from sparsegp.likelihoods import Likelihood
from sparsegp.models import Model
from sparsegp.registry import Registry

from ..conftest import make_problem


def models():
    X, y = make_problem(0, N=40)
    labels = (y > np.median(y)).astype(float)
    kernel = lambda: sg.kernels.Matern52(ard=True) + sg.kernels.Linear()  # noqa: E731
    yield sg.GPR(X, y, kernel=kernel(), standardize_X=True)
    yield sg.SGPR(X, y, kernel=kernel(), approximation="pep", alpha=0.3, chunk_size=7,
                  inducing_points=sg.features.SumOfDeltas.from_data(X, 4, num_deltas=2),
                  standardize_y=True)
    yield sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(),
                  inducing_points=sg.features.Fourier.from_data(X, 4, time_frequency=False))
    yield sg.SGPC(X, 2 * labels - 1, kernel=kernel(), inducing_points=5, alpha=0.7, damping=0.3)
    yield sg.SVGP(X, labels, kernel=sg.kernels.SquaredExponential(ard=True),
                  likelihood=sg.likelihoods.Bernoulli(link="logit"),
                  inducing_points=sg.features.Multiscale.from_data(X, 5), whiten=False)


def structure(m):
    plain = {k: v for k, v in vars(m).items() if not k.startswith("_") or k == "_config"}
    plain.pop("metadata", None)
    return ({n: tuple(p.shape) for n, p in m.named_parameters()},
            {n: tuple(b.shape) for n, b in m.named_buffers() if n not in ("X", "y", "tau", "nu")},
            sorted(vars(m)), m.config(), {k: v for k, v in plain.items() if not hasattr(v, "shape")})


@pytest.mark.parametrize("model", list(models()), ids=lambda m: type(m).__name__)
def test_load_rebuilds_exactly_the_structure_init_built(model, tmp_path):
    model.save(tmp_path / "m.pt")
    back = sg.load(tmp_path / "m.pt")
    a, b = structure(model), structure(back)
    assert a[0] == b[0]  # parameters
    assert a[1] == b[1]  # buffers
    assert a[2] == b[2]  # instance attributes, by name
    assert a[3] == b[3]  # the config
    assert {k: v for k, v in a[4].items() if k != "_config"} == \
        {k: v for k, v in b[4].items() if k != "_config"}
    # data-sized state (SGPC's sites) is saved with the data only
    saved = {k: v for k, v in model.state_dict().items() if k not in model.data_extras()}
    restored = back.state_dict()
    assert list(saved) == list(restored)
    for name, p in saved.items():
        np.testing.assert_array_equal(p.cpu().numpy(), restored[name].cpu().numpy(), err_msg=name)


def test_one_registry_mechanism_rebuilds_every_kind_from_its_config():
    for base in (Kernel, InducingFeature, Likelihood, Model):
        assert isinstance(base.registry, Registry)
    k = sg.kernels.Periodic(period=2.0) * sg.kernels.Matern32(lengthscale=[1.0, 2.0])
    assert repr(Kernel.registry.build(k.config())).startswith("(Periodic")
    f = sg.features.SumOfDeltas(np.zeros((3, 2, 4)), np.ones((3, 2)))
    assert InducingFeature.registry.build(f.config()).Z.shape == (3, 2, 4)
    lik = sg.likelihoods.MultiClass(4)
    assert Likelihood.registry.build(lik.config()).num_classes == 4
    assert Model.registry.get("SVGP") is sg.SVGP
    for registry in (Kernel.registry, InducingFeature.registry, Likelihood.registry):
        with pytest.raises(ValueError, match=f"unknown {registry.kind} type 'Nope' .*; known types"):
            registry.build({"type": "Nope", "args": {}})
