"""pandas input: DataFrames/Series give exactly what the equivalent numpy arrays give, the
models keep the column names (feature_names), show them, save them, and refuse DataFrames
whose columns differ; the command line uses the same names."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest

import sparsegp as sg
from sparsegp.cli import main

from .conftest import make_problem

pd = pytest.importorskip("pandas", reason="pandas is optional; these tests need it ([test] extra)")

NAMES = ["age", "income"]


def frame(X, names=NAMES, index=None):
    return pd.DataFrame(X, columns=names, index=index)


def labels(X):
    return (np.sin(X[:, 0]) + 0.5 * X[:, 1] > 0).astype(float)


def assert_same(a, b):
    """Identical numpy outputs (tuples of arrays or arrays), and numpy, not pandas."""
    a, b = (a, b) if isinstance(a, tuple) else ((a,), (b,))
    for u, v in zip(a, b, strict=True):
        assert type(u) is np.ndarray and type(v) is np.ndarray
        np.testing.assert_array_equal(u, v)


def test_importing_sparsegp_does_not_import_pandas():
    code = "import sys, sparsegp; sys.exit('pandas' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# -- the same numbers as numpy -------------------------------------------------------------
@pytest.mark.parametrize("target", ["series", "column"])
def test_gpr_and_sgpr_equal_numpy_before_and_after_fit(target):
    X, y = make_problem(0, N=40)
    Xs = np.random.default_rng(1).uniform(-3, 3, (7, 2))
    yp = pd.Series(y, name="y") if target == "series" else pd.DataFrame({"y": y})
    for build in (lambda X, y, Z: sg.GPR(X, y, standardize_y=True),
                  lambda X, y, Z: sg.SGPR(X, y, inducing_points=Z, approximation="pep", alpha=0.5)):
        a, b = build(X, y, X[:6]), build(frame(X), yp, frame(X[:6]))
        assert a.log_marginal_likelihood() == b.log_marginal_likelihood()
        ra, rb = a.fit(maxiter=15, diagnose=False), b.fit(maxiter=15, diagnose=False)
        assert ra.objective == rb.objective
        assert_same(a.predict(Xs, include_noise=True), b.predict(frame(Xs), include_noise=True))
        assert_same(a.predict_f(Xs, full_cov=True), b.predict_f(frame(Xs), full_cov=True))
        assert_same(a.predict_y(Xs), b.predict_y(frame(Xs)))
        assert_same(b.predict(Xs), b.predict(frame(Xs)))  # arrays are taken by position
        assert a.feature_names is None and b.feature_names == NAMES


def test_sgpc_equals_numpy():
    X, _ = make_problem(2, N=50)
    y = labels(X)
    Xs = np.random.default_rng(3).uniform(-3, 3, (6, 2))
    a = sg.SGPC(X, y, inducing_points=X[:8], alpha=0.5)
    b = sg.SGPC(frame(X), pd.Series(y.astype(int)), inducing_points=frame(X[:8]), alpha=0.5)
    a.update_sites(max_sweeps=5)
    b.update_sites(max_sweeps=5)
    assert a.log_marginal_likelihood() == b.log_marginal_likelihood()
    assert_same(a.predict_f(Xs), b.predict_f(frame(Xs)))
    assert_same(a.predict_y(Xs), b.predict_y(frame(Xs)))
    assert_same(a.predict_proba(Xs), b.predict_proba(frame(Xs)))
    assert_same(a.predict(Xs), b.predict(frame(Xs)))
    assert b.feature_names == NAMES


def test_svgp_equals_numpy():
    X, _ = make_problem(4, N=50)
    y = labels(X)
    Xs = np.random.default_rng(5).uniform(-3, 3, (6, 2))
    lik = sg.likelihoods.Bernoulli
    a = sg.SVGP(X, y, likelihood=lik(), inducing_points=X[:8])
    b = sg.SVGP(frame(X), pd.DataFrame({"label": y.astype(bool)}), likelihood=lik(),
                inducing_points=frame(X[:8]))
    for m in (a, b):
        m.natural_gradient_step(0.5)
    assert a.log_marginal_likelihood() == b.log_marginal_likelihood()
    assert_same(a.predict_f(Xs), b.predict_f(frame(Xs)))
    assert_same(a.predict_y(Xs), b.predict_y(frame(Xs)))
    assert_same(a.predict_proba(Xs), b.predict_proba(frame(Xs)))
    assert_same(a.predict_log_density(Xs, labels(Xs)),
                b.predict_log_density(frame(Xs), pd.Series(labels(Xs))))
    assert b.feature_names == NAMES


def test_a_shared_index_need_not_be_the_default_one():
    X, y = make_problem(5, N=30)
    index = np.random.default_rng(0).permutation(30) + 100
    a, b = sg.GPR(X, y), sg.GPR(frame(X, index=index), pd.Series(y, index=index))
    assert a.log_marginal_likelihood() == b.log_marginal_likelihood()


# -- feature names: stored, shown, saved ---------------------------------------------------
def test_feature_names_are_strings_of_the_columns_or_none():
    X, y = make_problem(6, N=20)
    assert sg.GPR(pd.DataFrame(X), y).feature_names is None  # integer column labels
    m = sg.GPR(X, y)
    m.feature_names = ("a", "b")
    assert m.feature_names == ["a", "b"]
    names = m.feature_names
    names.append("c")  # a copy: the model's names do not change
    assert m.feature_names == ["a", "b"]
    with pytest.raises(ValueError, match="2 input columns"):
        m.feature_names = ["a"]
    with pytest.raises(ValueError, match=r"duplicate names \['a'\] in feature_names"):
        m.feature_names = ["a", "a"]
    with pytest.raises(TypeError, match="list of strings"):
        m.feature_names = "ab"
    m.feature_names = None
    assert m.feature_names is None
    with pytest.raises(ValueError, match=r"^duplicate names \['a'\] in the columns of X"):
        sg.GPR(frame(X, ["a", "a"]), y)


def test_summary_lists_ard_lengthscales_by_column():
    X, y = make_problem(7, N=30)
    m = sg.SGPR(frame(X), y, inducing_points=5)
    text = m.summary()
    ell = m.kernel.lengthscale
    lines = text.splitlines()
    row = lines.index(next(line for line in lines if line.startswith("kernel.lengthscale")))
    for d, name in enumerate(NAMES):
        assert lines[row + 1 + d].split() == ["·", name, f"{ell[d]:.6g}"]
    assert "feature.Z" in text and "noise_variance" in text and str(m).endswith(text)
    unnamed = sg.SGPR(X, y, inducing_points=5).summary()
    assert "·" not in unnamed and len(unnamed.splitlines()) == len(lines) - 2


def test_summary_of_many_columns_counts_the_rest():
    rng = np.random.default_rng(8)
    X, y = rng.normal(size=(30, 25)), rng.normal(size=30)
    text = sg.GPR(frame(X, [f"x{d}" for d in range(25)]), y).summary()
    assert "· x19" in text and "· x20" not in text and "· … 5 more" in text


def test_feature_names_survive_save_and_load(tmp_path):
    X, y = make_problem(9, N=40)
    for m in (sg.SGPR(frame(X), y, inducing_points=6), sg.GPR(frame(X), y)):
        m.save(tmp_path / "m.pt")
        back = sg.load(tmp_path / "m.pt")
        assert back.feature_names == NAMES and back.metadata == {}
        assert back.summary() == m.summary()
        assert_same(back.predict(frame(X[:3])), m.predict(X[:3]))
        with pytest.raises(ValueError, match="different order"):
            back.predict(frame(X[:3], NAMES[::-1]))


# -- errors ---------------------------------------------------------------------------------
def test_columns_other_than_the_training_ones_are_refused():
    X, y = make_problem(10, N=40)
    m = sg.SGPR(frame(X), y, inducing_points=5)
    cases = [
        (frame(X[:3], NAMES[::-1]), r"columns \['income', 'age'\] .*\(the same columns in a "
                                    r"different order\); select them with Xnew\[model.feature_names\]"),
        (frame(X[:3], ["age", "salary"]), r"\(missing \['income'\]; unexpected \['salary'\]\)"),
        (frame(X[:3], ["age", "income"]).assign(extra=1.0), r"\(unexpected \['extra'\]\)"),
    ]
    for Xnew, message in cases:
        with pytest.raises(ValueError, match=message):
            m.predict(Xnew)
    reordered = frame(X[:3])[NAMES[::-1]]
    assert_same(m.predict(reordered[m.feature_names]), m.predict(X[:3]))
    with pytest.raises(ValueError, match=r"^inducing_points has columns \['income', 'age'\]"):
        sg.SGPR(frame(X), y, inducing_points=frame(X[:5], NAMES[::-1]))
    with pytest.raises(ValueError, match=r"^inducing_points has columns"):
        m.add_inducing_points(frame(X[:2], ["a", "b"]))
    clf = sg.SGPC(frame(X), labels(X), inducing_points=5)
    with pytest.raises(ValueError, match="different order"):
        clf.predict_proba(frame(X[:3], NAMES[::-1]))
    # a model fitted on an array takes any DataFrame by position
    plain = sg.SGPR(X, y, inducing_points=5)
    assert_same(plain.predict(frame(X[:3], ["p", "q"])), plain.predict(X[:3]))


def test_candidate_inducing_inputs_are_taken_by_name_too():
    X, y = make_problem(11, N=40)
    m = sg.SGPR(frame(X), y, inducing_points=5)
    swapped = frame(X[:6], NAMES[::-1])  # used to be taken by position: wrong gains
    with pytest.raises(ValueError, match=r"^candidates has columns \['income', 'age'\]"):
        sg.diagnostics.inducing_gain(m, swapped)
    with pytest.raises(ValueError, match=r"^candidates has columns \['income', 'age'\]"):
        sg.select_inducing(frame(X), y, candidates=swapped, maxiter=5)
    by_name = sg.diagnostics.inducing_gain(m, swapped[m.feature_names])
    np.testing.assert_array_equal(by_name.total, sg.diagnostics.inducing_gain(m, X[:6, ::-1]).total)


def test_non_numeric_columns_are_named():
    X, y = make_problem(11, N=20)
    df = frame(X).assign(city=["Oslo"] * 20, grade=pd.Categorical(["a", "b"] * 10),
                         flag=True, day=pd.Timestamp("2024-01-01"))
    with pytest.raises(ValueError, match=r"^X has non-numeric column\(s\) 'city' \(.*\), "
                                         r"'grade' \(category\), 'day' .*pd.to_numeric"):
        sg.GPR(df, y)
    with pytest.raises(ValueError, match="^y is a pandas Series of non-numeric dtype"):
        sg.GPR(X, pd.Series(["a"] * 20))
    with pytest.raises(ValueError, match="^Xnew has non-numeric column"):
        sg.GPR(X, y).predict(pd.DataFrame({"a": ["x"], "b": [1.0]}))
    with pytest.raises(ValueError, match="^X has non-numeric column"):
        sg.SVGP(pd.DataFrame({"a": X[:, 0], "b": X[:, 1].astype(object)}), labels(X),
                likelihood=sg.likelihoods.Bernoulli(), inducing_points=4)
    # booleans and pandas' nullable numbers are numbers
    m = sg.GPR(frame(X).assign(flag=True, n=pd.array(range(20), dtype="Int64")), y)
    assert m.feature_names == [*NAMES, "flag", "n"]


def test_missing_values_give_the_nan_error():
    X, y = make_problem(12, N=20)
    nullable = frame(X).astype("Float64")
    nullable.iloc[2, 1] = pd.NA
    with pytest.raises(ValueError, match=r"^X contains NaN \(first at index \(2, 1\)\); remove or impute"):
        sg.SGPR(nullable, y, inducing_points=4)
    counts = pd.Series(pd.array([1, None] + [2] * 18, dtype="Int64"))
    with pytest.raises(ValueError, match=r"^y contains NaN \(first at index \(1,\)\)"):
        sg.GPR(X, counts)
    with pytest.raises(ValueError, match="^y contains NaN"):
        sg.SGPC(X, pd.Series(pd.array([1, 0, None] + [0, 1] * 8 + [1], dtype="boolean")),
                inducing_points=4)
    m = sg.GPR(frame(X), y)
    with pytest.raises(ValueError, match=r"^Xnew contains NaN \(first at index \(0, 0\)\)"):
        m.predict(frame([[np.nan, 1.0]]))


def test_other_shape_errors_speak_pandas():
    X, y = make_problem(13, N=20)
    with pytest.raises(ValueError, match=r"use X.to_frame\(\) for a single input dimension"):
        sg.GPR(frame(X)["age"], y)
    with pytest.raises(ValueError, match="X and y have different pandas indexes"):
        sg.GPR(frame(X), pd.Series(y, index=np.arange(20)[::-1]))
    with pytest.raises(ValueError, match="y must be 1-D"):
        sg.GPR(X, pd.DataFrame({"a": y, "b": y}))


# -- the command line ------------------------------------------------------------------------
def write(path, df):
    df.to_csv(path, index=False)


def test_cli_round_trip_keeps_the_names(tmp_path, capsys):
    X, y = make_problem(14, N=60)
    write(tmp_path / "train.csv", frame(X).assign(price=y, note="x"))
    model = tmp_path / "m.pt"
    assert main(["fit", str(tmp_path / "train.csv"), "--target", "price", "--features",
                 "age,income", "-M", "8", "--maxiter", "20", "--out", str(model)]) == 0
    m = sg.load(model)
    assert m.feature_names == NAMES and m.metadata == {"target": "price"}
    new = frame(X[:4])[NAMES[::-1]].assign(id=[7, 8, 9, 10])  # other order, extra column
    write(tmp_path / "new.csv", new)
    assert main(["predict", str(model), str(tmp_path / "new.csv"), "--out", str(tmp_path / "p.csv")]) == 0
    p = pd.read_csv(tmp_path / "p.csv")
    assert list(p.columns) == ["mean", "variance"] and len(p) == 4  # one row per input row
    mean, var = m.predict(new[m.feature_names], include_noise=True)
    np.testing.assert_allclose(p["mean"], mean, rtol=1e-14)
    np.testing.assert_allclose(p["variance"], var, rtol=1e-14)
    with pytest.raises(ValueError, match="different order"):
        m.predict(new[NAMES[::-1]])


def test_cli_predicts_with_a_model_fitted_on_a_dataframe_in_python(tmp_path, capsys):
    X, y = make_problem(15, N=40)
    m = sg.SGPR(frame(X), y, inducing_points=6)
    m.save(tmp_path / "m.pt")
    new = frame(X[:3])[NAMES[::-1]]  # the CLI selects the model's columns by name
    write(tmp_path / "new.csv", new)
    assert main(["predict", str(tmp_path / "m.pt"), str(tmp_path / "new.csv"), "--latent"]) == 0
    out = pd.read_csv(io.StringIO(capsys.readouterr().out))
    np.testing.assert_allclose(out["mean"], m.predict(X[:3])[0], rtol=1e-14)


def test_scale_warnings_name_the_columns_of_a_dataframe():
    X, y = make_problem(12, N=40)
    X[:, 1] *= 1e5
    with pytest.warns(sg.ScaleWarning, match=r"input column\(s\) \['income'\] have spread"):
        sg.SGPR(frame(X), y, inducing_points=5)  # was "input column(s) [1]"
    with pytest.warns(sg.ScaleWarning, match=r"input column\(s\) \[1\] have spread"):
        sg.SGPR(X, y, inducing_points=5)
