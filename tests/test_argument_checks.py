"""Arguments the models used to accept and then ignore, or fail on later with an internal
error: each is now refused up front with a message that names it (found by a sweep of the
public API with awkward input)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.benchmarking import speed

from .conftest import make_problem


def series(T=40, P=2, seed=0):
    rng = np.random.default_rng(seed)
    x = np.cumsum(0.3 * rng.normal(size=T))
    return np.c_[x, -x][:, :P] + 0.05 * rng.normal(size=(T, P))


@pytest.mark.parametrize("name, value, message", [
    ("process_noise", [0.1, 0.2, 0.3], "process_noise must be one number or 1 \\(one per state"),
    ("emission_noise", [0.1, 0.2, 0.3], "emission_noise must be one number or 2 \\(one per output"),
])
def test_gpssm_noises_of_the_wrong_length_are_refused(name, value, message):
    with pytest.raises(ValueError, match=message):
        sg.GPSSM(series(), state_dim=1, inducing_points=4, **{name: value})
    ok = sg.GPSSM(series(), state_dim=1, inducing_points=4, **{name: value[:1]})
    assert np.isfinite(ok.log_marginal_likelihood())


def test_gpssm_forecast_needs_two_samples_for_a_variance():
    m = sg.GPSSM(series(), state_dim=1, inducing_points=4)
    with pytest.raises(ValueError, match="num_samples must be at least 2"):
        m.forecast(3, num_samples=1)
    _, var, _ = m.forecast(3, num_samples=2)
    assert np.all(np.isfinite(var))


def test_gplvm_noise_quadrature_and_empty_predictions_are_checked():
    Y = np.random.default_rng(1).normal(size=(30, 4))
    with pytest.raises(ValueError, match="noise_variance must be one number or 4"):
        sg.BayesianGPLVM(Y, latent_dim=2, inducing_points=5, noise_variance=[0.1, 0.2])
    for points, message in [(0, "positive integer"), (2.5, "positive integer"),
                            (1, "between 2 and 64 for latent_dim=2"),
                            (10**6, "between 2 and 64 for latent_dim=2")]:
        with pytest.raises(ValueError, match=message):
            sg.BayesianGPLVM(Y, latent_dim=2, inducing_points=5, quadrature_points=points)
    m = sg.BayesianGPLVM(Y, latent_dim=2, inducing_points=5, quadrature_points=5)
    assert np.isfinite(m.log_marginal_likelihood())
    with pytest.raises(ValueError, match=r"Xlatent is empty: shape \(0, 2\)"):
        m.predict(np.zeros((0, 2)))


@pytest.mark.parametrize("likelihood", [sg.likelihoods.Gaussian(), sg.likelihoods.Poisson()])
def test_predict_proba_needs_a_classification_likelihood(likelihood):
    X, y = make_problem(0, N=30)
    m = sg.SVGP(X, np.abs(np.round(y)), likelihood=likelihood, inducing_points=5)
    with pytest.raises(TypeError, match="predict_proba needs a classification likelihood"):
        m.predict_proba(X[:3])


def test_adding_inducing_points_to_a_model_loaded_without_data(tmp_path):
    X, y = make_problem(1, N=40)
    sg.SGPR(X, y, inducing_points=5).save(tmp_path / "sgpr.pt")
    sgpr = sg.load(tmp_path / "sgpr.pt")
    before = sgpr.predict(X[:3])
    with pytest.raises(RuntimeError, match="include_data=True"):  # refused, nothing changed
        sgpr.add_inducing_points(X[:2] + 0.01)
    assert sgpr.num_inducing == 5
    np.testing.assert_array_equal(sgpr.predict(X[:3])[0], before[0])
    sg.SVGP(X, y, inducing_points=5).save(tmp_path / "svgp.pt")
    svgp = sg.load(tmp_path / "svgp.pt")  # q(u) is the posterior: no data needed
    mean, var = svgp.predict_f(X[:3])
    svgp.add_inducing_points(X[:2] + 0.01)
    assert svgp.num_inducing == 7
    np.testing.assert_allclose(svgp.predict_f(X[:3])[0], mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(svgp.predict_f(X[:3])[1], var, rtol=1e-8, atol=1e-10)


def test_kissgp_takes_one_noise_variance_and_integer_grid_sizes():
    X, y = make_problem(2, N=60, D=1)
    with pytest.raises(ValueError, match="KISSGP takes one noise_variance"):
        sg.KISSGP(X, y, grid_size=20, noise_variance=np.full(60, 0.1))
    for grid in (2.5, None):
        with pytest.raises(ValueError, match="grid_size must be an integer"):
            sg.KISSGP(X, y, grid_size=grid)


def test_targets_without_columns_are_refused():
    X, _ = make_problem(3, N=30)
    with pytest.raises(ValueError, match="y has no columns"):
        sg.SGPR(X, np.zeros((30, 0)), inducing_points=5)


@pytest.mark.parametrize("make", [
    lambda X, y, c: sg.SVGP(X, y, inducing_points=5, chunk_size=c),
    lambda X, y, c: sg.SGPC(X, (y > 0).astype(float), inducing_points=5, chunk_size=c),
    lambda X, y, c: sg.RFF(X, y, num_features=5, chunk_size=c),
    lambda X, y, c: sg.BayesianGPLVM(np.c_[y, X], latent_dim=1, inducing_points=5, chunk_size=c),
    lambda X, y, c: sg.GPSSM(series(), state_dim=1, inducing_points=4, chunk_size=c),
])
@pytest.mark.parametrize("chunk_size", [0, 2.5, True])
def test_every_model_checks_its_chunk_size(make, chunk_size):
    X, y = make_problem(4, N=30)
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        make(X, y, chunk_size)


@pytest.mark.parametrize("value", ["1", [1.0, "a"], object()])
def test_a_kernel_parameter_that_is_not_numbers_is_named(value):
    with pytest.raises(TypeError, match="lengthscale must be a number or an array of numbers"):
        sg.kernels.SquaredExponential(lengthscale=value)


@pytest.mark.parametrize("argv, message", [
    (["--device", "nope", "--quick"], "--device 'nope' is not a torch device"),
    (["--device", "mps", "--quick"], "the benchmarks run on cpu or cuda"),
    (["--quick", "--out", "{tmp}"], "is a folder"),
    (["--quick", "--out", "{tmp}/missing/t.md"], "does not exist"),
] + ([] if torch.cuda.is_available() else
     [(["--device", "cuda", "--quick"], "this torch has no CUDA device")]))
def test_benchmark_options_are_checked_before_anything_runs(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        speed.main([a.format(tmp=tmp_path) for a in argv])
    assert stop.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("combination", [sg.kernels.Separate, sg.kernels.Sum, sg.kernels.Product])
def test_a_combination_of_no_kernels_is_refused(combination):
    with pytest.raises(ValueError, match="takes a non-empty list of kernels"):
        combination([])
    with pytest.raises(ValueError, match="takes a non-empty list of kernels"):
        combination(sg.kernels.SquaredExponential())  # a kernel, not a list of them


def separate():
    return sg.kernels.Separate([sg.kernels.SquaredExponential(), sg.kernels.SquaredExponential()])


@pytest.mark.parametrize("make", [
    lambda X, Y: sg.GPR(X, Y[:, 0], kernel=separate()),
    lambda X, Y: sg.GPSSM(Y, 1, kernel=separate()),
    lambda X, Y: sg.SGPC(X, Y[:, 0] > 0, kernel=separate()),
    lambda X, Y: sg.BayesianGPLVM(Y, 1, kernel=separate()),
])
def test_models_of_one_kernel_refuse_a_separate_kernel_by_name(make):
    X, y = make_problem(20, N=30)
    # GPR used to fail at prediction ("y must be 1-D") or inside the kernel
    with pytest.raises(TypeError, match="kernels.Separate .* is for SGPR and SVGP"):
        make(X, np.c_[y, -y])


def test_separate_kernels_with_a_wrong_number_of_inducing_sets_are_named():
    X, y = make_problem(21, N=30)
    Y = np.c_[y, -y]
    with pytest.raises(ValueError, match="3 features for 2 kernels: give one per output"):
        sg.SGPR(X, Y, kernel=separate(), inducing_points=[5, 6, 7])  # was: "must be 2-D"
    ok = sg.SGPR(X, Y, kernel=separate(), inducing_points=[5, 6])
    assert [f.num_inducing for f in ok.feature.features] == [5, 6]


@pytest.mark.parametrize("groups, error, message", [
    ([None] * 30, ValueError, r"noise_groups has no label for data point\(s\) \[0, 1, 2, 3, 4\]"),
    ([0] * 29 + [None], ValueError, r"noise_groups has no label for data point\(s\) \[29\]"),
    ([0] * 29 + [float("nan")], ValueError, "noise_groups contains NaN"),
])
def test_noise_groups_with_missing_labels_are_named(groups, error, message):
    X, y = make_problem(22, N=30)
    with pytest.raises(error, match=message):  # was numpy's "'<' not supported" TypeError
        sg.SGPR(X, y, inducing_points=5, noise_groups=groups)
    with pytest.raises(error, match=message.replace("noise_groups", "blocks")):
        sg.SGPR(X, y, inducing_points=5, approximation="pep", blocks=groups)


def test_noise_groups_of_mixed_label_types_are_named():
    X, y = make_problem(23, N=30)
    groups = np.array([0] * 15 + ["a"] * 15, dtype=object)
    with pytest.raises(TypeError, match=r"noise_groups mixes labels of types \['int', 'str'\]"):
        sg.SGPR(X, y, inducing_points=5, noise_groups=groups)


def test_sum_of_deltas_with_an_all_zero_row_of_weights_is_refused():
    Z = np.arange(12.0).reshape(3, 2, 2)
    weights = np.array([[1.0, 0.0], [0.0, 0.0], [0.5, -0.5]])
    # was a Cholesky failure blaming "duplicate or nearly coincident inducing inputs"
    with pytest.raises(ValueError, match=r"weights: row\(s\) \[1\] are all zero"):
        sg.features.SumOfDeltas(Z, weights)
    weights[1, 1] = 1e-3
    assert sg.features.SumOfDeltas(Z, weights).num_inducing == 3


def test_per_output_noise_for_one_output_is_refused_at_construction():
    X, y = make_problem(24, N=30)
    # was torch's "size of tensor a (20) must match ... (3)" at fit
    with pytest.raises(ValueError, match="has 3 variances \\(one per output\\) but y has one"):
        sg.SVGP(X, y, inducing_points=5, likelihood=sg.likelihoods.Gaussian(variance=[0.1] * 3))


def test_separate_kernels_in_svgp_say_which_requirement_failed():
    X, y = make_problem(25, N=30)
    Y = np.c_[y, -y]
    with pytest.raises(ValueError, match=r"same number of inducing variables .* got \[3, 4\]"):
        sg.SVGP(X, Y, kernel=separate(), inducing_points=[3, 4])  # said "needs whiten=True"
    with pytest.raises(ValueError, match="needs whiten=True$"):
        sg.SVGP(X, Y, kernel=separate(), inducing_points=[3, 3], whiten=False)


@pytest.mark.parametrize("make", [
    lambda Y, f: sg.BayesianGPLVM(Y, 1, inducing_points=f),
    lambda Y, f: sg.GPSSM(Y, 1, inducing_points=f),
])
def test_random_input_models_name_what_inducing_points_may_be(make):
    Y = series()
    feature = sg.features.Multiscale(np.zeros((3, 1)), 0.3)
    with pytest.raises(TypeError, match=r"an int M or an array \[M, 1\] .* got Multiscale"):
        make(Y, feature)  # was "must be a positive integer"
