"""`model.to(dtype)`, `.float()` and `.double()` set the dtype of a model's work and outputs
(as `dtype=` at construction) and leave its float64 parameters alone: `nn.Module.to` used to
convert the parameters too, and prediction then failed in GPR, KISSGP and GPSSM."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg

from ..conftest import make_problem

pytestmark = pytest.mark.usefixtures("quiet_model_warnings")


def regression_models():
    X, y = make_problem(0, N=50)
    labels = (np.sin(2 * X[:, 0]) > 0).astype(int)
    return X, {
        "GPR": sg.GPR(X, y),
        "SGPR": sg.SGPR(X, y, inducing_points=8),
        "SGPR-PEP": sg.SGPR(X, y, inducing_points=8, approximation="pep", alpha=0.5),
        "SVGP": sg.SVGP(X, y, inducing_points=8),
        "KISSGP": sg.KISSGP(X, y),
        "RFF": sg.RFF(X, y),
        "SGPC": sg.SGPC(X, labels, inducing_points=8),
    }


def parameter_dtypes(model):
    return {p.dtype for p in model.parameters()} | {b.dtype for b in model.buffers()
                                                    if b.is_floating_point()}


def test_float_predicts_in_float32_and_double_restores_the_float64_predictions():
    X, models = regression_models()
    for name, model in models.items():
        mean64, var64 = model.predict_f(X[:6])
        assert model.float() is model
        assert model.dtype == torch.float32
        assert parameter_dtypes(model) == {torch.float64}, name
        mean32, var32 = model.predict_f(X[:6])
        assert mean32.dtype == var32.dtype == np.float32, name
        # float32 rounding of a float64 computation, not a different model
        scale = np.abs(mean64).max() + np.sqrt(var64.max())
        np.testing.assert_allclose(mean32, mean64, atol=1e-4 * scale, err_msg=name)
        np.testing.assert_allclose(var32, var64, atol=1e-4 * scale**2, err_msg=name)
        model.double()
        mean, var = model.predict_f(X[:6])
        assert mean.dtype == np.float64, name
        np.testing.assert_array_equal(mean, mean64, err_msg=name)
        np.testing.assert_array_equal(var, var64, err_msg=name)


def test_to_dtype_also_takes_a_device_or_a_tensor_and_float32_inputs_are_then_accepted():
    X, y = make_problem(1, N=40)
    model = sg.SGPR(X, y, inducing_points=6)
    assert model.to("cpu", torch.float32) is model and model.dtype == torch.float32
    assert model.to(torch.zeros(1, dtype=torch.float64)).dtype == torch.float64
    model.to(dtype=torch.float32)
    mean, _ = model.predict_y(torch.as_tensor(X[:3], dtype=torch.float32))
    assert mean.dtype == torch.float32  # a tensor in, a tensor out (in its dtype)
    assert model.compute_dtype == torch.float32  # the N·M² work follows a float32 model


def test_the_new_dtype_is_saved_with_the_model(tmp_path):
    X, y = make_problem(2, N=40)
    model = sg.SGPR(X, y, inducing_points=6).float()
    model.save(tmp_path / "m")
    loaded = sg.load(tmp_path / "m")
    assert loaded.dtype == torch.float32
    np.testing.assert_array_equal(loaded.predict_y(X[:4])[0], model.predict_y(X[:4])[0])


def test_a_model_loaded_without_data_converts_and_keeps_predicting(tmp_path):
    X, y = make_problem(4, N=40)
    model = sg.SGPR(X, y, inducing_points=6)
    model.fit(maxiter=5)
    model.save(tmp_path / "m")  # without data: it predicts from the saved posterior
    loaded = sg.load(tmp_path / "m")
    mean = model.predict_y(X[:4])[0]
    # used to fail: the conversion dropped the posterior, which needs the data to rebuild
    mean32 = loaded.float().predict_y(X[:4])[0]
    assert mean32.dtype == np.float32
    np.testing.assert_allclose(mean32, mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(loaded.double().predict_y(X[:4])[0], mean)


def test_the_random_input_models_convert_too():
    Y = np.random.default_rng(0).normal(size=(30, 3))
    gplvm, gpssm = sg.BayesianGPLVM(Y, 1), sg.GPSSM(Y, 1)
    latent = np.linspace(-1, 1, 4)[:, None]
    before = gplvm.predict(latent)[0], gpssm.transition(latent)[0]
    after = gplvm.float().predict(latent)[0], gpssm.float().transition(latent)[0]
    for model, b, a in zip((gplvm, gpssm), before, after):
        assert a.dtype == np.float32 and parameter_dtypes(model) == {torch.float64}
        np.testing.assert_allclose(a, b, atol=1e-5 * np.abs(b).max())


@pytest.mark.parametrize("convert", [lambda m: m.half(), lambda m: m.bfloat16(),
                                     lambda m: m.to(torch.int64), lambda m: m.type("float")])
def test_other_dtypes_are_refused_with_the_two_that_work_named(convert):
    X, y = make_problem(3, N=20)
    model = sg.GPR(X, y)
    with pytest.raises(TypeError, match="float32|torch.dtype"):
        convert(model)
    assert model.dtype == torch.float64 and parameter_dtypes(model) == {torch.float64}


@pytest.mark.parametrize("make", [
    lambda dt: sg.BayesianGPLVM(np.ones((10, 2)) + np.eye(10, 2), 1, dtype=dt),
    lambda dt: sg.GPSSM(np.ones((10, 2)) + np.eye(10, 2), 1, dtype=dt),
])
@pytest.mark.parametrize("dtype", [torch.int32, "float32"])
def test_random_input_models_refuse_a_dtype_they_cannot_work_in(make, dtype):
    with pytest.raises(TypeError, match="dtype must be torch.float32 or torch.float64"):
        make(dtype)
