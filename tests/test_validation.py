"""Bad input fails early with a ValueError/TypeError that names the argument."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import sparsegp as sg

from .conftest import make_problem

X, y = make_problem(0, N=30)


def SGPR(X=X, y=y, **kw):
    kw.setdefault("inducing_points", 5)
    return sg.SGPR(X, y, **kw)


@pytest.mark.parametrize("model", [SGPR, lambda X=X, y=y, **kw: sg.GPR(X, y, **kw)])
def test_data_errors_name_the_argument(model):
    with pytest.raises(ValueError, match=r"X must be 2-D.*reshape\(-1, 1\)"):
        model(X=X[:, 0])
    with pytest.raises(ValueError, match="X must be 2-D"):
        model(X=X[None])
    with pytest.raises(ValueError, match="y has 29 entries but X has 30 rows"):
        model(y=y[:29])
    with pytest.raises(ValueError, match=r"y must be 1-D \[N\] or "):
        model(y=y[:, None, None])
    Xn = X.copy()
    Xn[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"X contains NaN \(first at index \(3, 1\)\)"):
        model(X=Xn)
    yi = y.copy()
    yi[7] = np.inf
    with pytest.raises(ValueError, match="y contains inf"):
        model(y=yi)
    with pytest.raises(ValueError, match="X is empty"):
        model(X=np.zeros((0, 2)), y=np.zeros(0))
    with pytest.raises(TypeError, match="X must hold real numbers"):
        model(X=np.array([["a", "b"]] * 30))
    with pytest.raises(TypeError, match="X is torch.float32 but y is torch.float64"):
        model(X=torch.tensor(X, dtype=torch.float32), y=torch.tensor(y))
    with pytest.raises(ValueError, match="different devices"):
        model(X=torch.tensor(X), y=torch.tensor(y, device="meta"))
    with pytest.raises(TypeError, match="kernel must be a sparsegp kernel"):
        model(kernel="rbf")
    for bad in (-1.0, 0.0, np.nan, [0.1, 0.2]):
        with pytest.raises(ValueError, match="noise_variance"):
            model(noise_variance=bad)
    for bad in (-1e-3, 1.0, "big", True):
        with pytest.raises(ValueError, match="jitter"):
            model(jitter=bad)


def test_sgpr_specific_errors():
    with pytest.raises(ValueError, match="inducing_points=31 exceeds the number of data points N=30"):
        SGPR(inducing_points=31)
    with pytest.raises(ValueError, match="inducing_points must be at least 1"):
        SGPR(inducing_points=0)
    with pytest.raises(ValueError, match="inducing_points has 3 columns but the model expects 2"):
        SGPR(inducing_points=np.zeros((4, 3)))
    with pytest.raises(ValueError, match="inducing_points contains NaN"):
        SGPR(inducing_points=np.full((4, 2), np.nan))
    with pytest.raises(TypeError, match="inducing_points must be an int"):
        SGPR(inducing_points=True)
    with pytest.raises(ValueError, match="inducing_init"):
        SGPR(inducing_init="greedy")
    with pytest.raises(ValueError, match="only 1 of the data points are distinct"):
        sg.SGPR(np.ones((10, 2)), np.arange(10.0), inducing_points=3)
    with pytest.raises(ValueError, match="approximation must be one of"):
        SGPR(approximation="sor")
    for bad in (0.0, 1.01, -0.5):
        with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\]"):
            SGPR(approximation="pep", alpha=bad)
    with pytest.raises(ValueError, match="chunk_size"):
        SGPR(chunk_size=0)


def test_prediction_input_errors():
    m = SGPR()
    with pytest.raises(ValueError, match="Xnew has 3 columns but the model expects 2"):
        m.predict(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="Xnew contains NaN"):
        m.predict(np.array([[0.0, np.nan]]))
    mean32, _ = m.predict(torch.zeros(3, 2, dtype=torch.float32))  # any floating dtype: its own
    assert mean32.dtype == torch.float32
    with pytest.raises(TypeError, match="Xnew must hold real numbers"):
        m.predict(torch.zeros(3, 2, dtype=torch.complex64))
    with pytest.raises(ValueError, match="Xnew is on meta"):
        m.predict(torch.zeros(3, 2, dtype=torch.float64, device="meta"))
    mean, var = m.predict(torch.zeros(3, 2, dtype=torch.float64))  # tensors of the right kind
    assert mean.shape == var.shape == (3,)


def test_float32_data_give_a_float32_model():
    m = sg.SGPR(torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32),
                inducing_points=5)
    # the N·M² work and the outputs are float32; parameters and factorisations float64
    assert m.dtype == torch.float32 and m.compute_dtype == torch.float32
    assert m.feature.Z.dtype == torch.float64
    assert np.isfinite(m.log_marginal_likelihood())
    mean, var = m.predict(X[:4])
    assert mean.dtype == var.dtype == np.float32
    mean, var = m.predict(torch.tensor(X[:4], dtype=torch.float32))
    assert mean.dtype == var.dtype == torch.float32


@pytest.mark.parametrize("convert", [np.asarray, torch.as_tensor])
def test_a_model_does_not_share_memory_with_the_users_arrays(convert):
    X, y = make_problem(30, N=40)
    X_user, y_user = convert(X.copy()), convert(y.copy())
    model = sg.SVGP(X_user, y_user, inducing_points=5)  # SVGP kept y_user's memory
    before = model.log_marginal_likelihood()
    X_user[:] = 0.0
    y_user[:] = 0.0
    assert model.log_marginal_likelihood() == before


def test_read_only_arrays_are_read_without_a_warning():
    X, y = make_problem(31, N=40)
    for a in (X, y):
        a.flags.writeable = False  # a memory map or a pandas copy-on-write column, say
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch: "The given NumPy array is not writable"
        model = sg.SGPR(X, y, inducing_points=5)
        model.predict(X[:3])


def test_the_scale_warning_is_given_at_construction_and_documented_so():
    # the data are given to the constructor, as in GPflow: a `catch_warnings()` around `fit()`
    # alone does not see it, and the documentation says where to put it
    from pathlib import Path

    X, y = sg.datasets.snelson()
    with warnings.catch_warnings(record=True) as built:
        warnings.simplefilter("always")
        model = sg.SGPR(X * 1e4, y, inducing_points=10)
    with warnings.catch_warnings(record=True) as fitted:
        warnings.simplefilter("always")
        model.fit(maxiter=3, progress=False, diagnose=False)
    assert [w.category for w in built] == [sg.ScaleWarning]
    assert sg.ScaleWarning not in {w.category for w in fitted}
    doc = " ".join((sg.ScaleWarning.__doc__ or "").split())
    assert "when the model is built" in doc and "not again by `fit()`" in doc
    page = (Path(__file__).resolve().parents[1] / "docs" / "diagnostics.md").read_text()
    assert "put the construction inside `warnings.catch_warnings()` too" in " ".join(page.split())
