"""The command line: demo, fit, predict, errors (run in-process and as `python -m`)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from sparsegp.cli import main

from .conftest import make_problem


def test_demo_writes_the_figure_and_prints_the_table(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for method in ("exact", "VFE", "FITC", "PEP α=0.5", "upper bound", "noise var"):
        assert method in out
    png = tmp_path / "sparsegp_demo.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:5]}
    exact = float(rows["exact"][1])
    # the exact GP on standardised y (the default; the zero-mean GP on y as given reaches −55.9)
    assert exact == pytest.approx(-55.57, abs=0.1)
    assert float(rows["VFE"][1]) <= exact <= float(rows["VFE"][2])  # VFE ≤ exact ≤ bound
    assert float(rows["VFE"][1]) <= float(rows["VFE"][3]) <= float(rows["VFE"][2])
    assert rows["VFE"][-1] == "0"  # no warnings for VFE; FITC is caught over-estimating
    assert float(rows["FITC"][1]) > float(rows["FITC"][3])
    assert "FITC: the FITC objective" in out and "provably over-estimates" in out


def test_experiment_subcommand_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["experiment", "bauer2016", "--help"])
    assert exit_.value.code == 0
    assert "--quick" in capsys.readouterr().out


def write_csv(path, names, data):
    np.savetxt(path, data, delimiter=",", header=",".join(names), comments="")


def test_fit_then_predict_round_trip(tmp_path, capsys):
    X, y = make_problem(0, N=80)
    write_csv(tmp_path / "train.csv", ["u", "target", "v"], np.c_[X[:, 0], y, X[:, 1]])
    write_csv(tmp_path / "new.csv", ["v", "u"], np.c_[X[:5, 1], X[:5, 0]])  # other order
    model = tmp_path / "m.pt"
    assert main(["fit", str(tmp_path / "train.csv"), "--target", "target", "-M", "10",
                 "--approximation", "pep", "--alpha", "0.5", "--out", str(model)]) == 0
    assert "upper bound" in capsys.readouterr().out
    assert main(["predict", str(model), str(tmp_path / "new.csv"),
                 "--out", str(tmp_path / "p.csv")]) == 0
    pred = np.loadtxt(tmp_path / "p.csv", delimiter=",", skiprows=1)
    import sparsegp as sg

    m = sg.load(model)
    mean, var = m.predict(X[:5], include_noise=True)
    np.testing.assert_allclose(pred[:, 0], mean, rtol=1e-14)
    np.testing.assert_allclose(pred[:, 1], var, rtol=1e-14)
    capsys.readouterr()
    assert main(["predict", str(model), str(tmp_path / "new.csv"), "--latent"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "mean,variance" and len(lines) == 6
    assert float(lines[1].split(",")[1]) < var[0]  # latent variance excludes the noise


def test_cli_errors_are_one_line_and_exit_2(tmp_path, capsys):
    write_csv(tmp_path / "d.csv", ["a", "b"], np.random.default_rng(0).normal(size=(10, 2)))
    (tmp_path / "bad.csv").write_text("a,b\n1,x\n")
    cases = [
        (["fit", str(tmp_path / "d.csv"), "--target", "zz"], "--target 'zz' is not a column"),
        (["fit", str(tmp_path / "bad.csv"), "--target", "b"], "line 2, column 'b': 'x' is not a number"),
        (["fit", str(tmp_path / "nope.csv"), "--target", "b"], "no such data file"),
        (["fit", str(tmp_path / "d.csv"), "--target", "b", "-M", "11"],
         "exceeds the number of data points N=10; choose M ≤ N (or pass an array of inducing "
         "inputs) (on the command line: -M)"),
        (["fit", str(tmp_path / "d.csv"), "--target", "b", "--approximation", "exact",
          "--alpha", "0.5"], "--alpha applies to the pseudo-point family"),
        (["fit", str(tmp_path / "d.csv"), "--target", "b", "--approximation", "exact",
          "-M", "5"], "-M does not apply to --approximation exact"),
        (["fit", str(tmp_path / "d.csv"), "--target", "b", "--out", str(tmp_path / "no" / "m.pt")],
         "does not exist"),
        (["fit", str(tmp_path / "d.csv"), "--target", "b", "--out", str(tmp_path)], "is a folder"),
        (["predict", str(tmp_path / "d.csv"), str(tmp_path / "d.csv")], "not a readable sparsegp model"),
    ]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1


def test_python_dash_m_entry_point():
    out = subprocess.run([sys.executable, "-m", "sparsegp", "--version"], capture_output=True,
                         text=True, check=True)
    assert out.stdout.startswith("sparsegp ")


def test_predict_writes_a_column_pair_per_output_of_multi_output_models(tmp_path, capsys):
    import sparsegp as sg

    X, y = make_problem(4, N=50)
    Y = np.c_[y, np.cos(X[:, 0])]
    write_csv(tmp_path / "new.csv", ["x0", "x1"], X[:4])
    models = {"sgpr": sg.SGPR(X, Y, inducing_points=5),
              "mc": sg.SVGP(X, (y > np.median(y)).astype(int) + (y > np.quantile(y, 0.8)),
                            inducing_points=5, likelihood=sg.likelihoods.MultiClass(3))}
    for name, model in models.items():
        model.save(tmp_path / f"{name}.pt")
        # used to crash: "unsupported format string passed to numpy.ndarray.__format__"
        assert main(["predict", str(tmp_path / f"{name}.pt"), str(tmp_path / "new.csv")]) == 0
        lines = capsys.readouterr().out.splitlines()
        P = 2 if name == "sgpr" else 3
        assert lines[0].split(",") == [f"mean_{p}" for p in range(P)] + [
            f"variance_{p}" for p in range(P)]
        values = np.array([[float(v) for v in line.split(",")] for line in lines[1:]])
        mean, var = (model.predict_y(X[:4]) if name == "mc"
                     else model.predict(X[:4], include_noise=True))
        np.testing.assert_array_equal(values, np.c_[mean, var])


def test_spreadsheet_csv_quirks_are_read_or_named(tmp_path):
    from sparsegp.runtime.tabular import read_csv

    (tmp_path / "trailing.csv").write_text("a,b,y,\n1,2,3,\n4,5,6,\n")  # a comma ending each line
    names, data = read_csv(tmp_path / "trailing.csv")  # was "column '': '' is not a number"
    assert names == ["a", "b", "y"] and data.tolist() == [[1, 2, 3], [4, 5, 6]]
    cases = {
        "a;b;y\n1;2;3\n": "looks separated by semicolons; sparsegp reads comma-separated",
        "a\tb\ty\n1\t2\t3\n": "looks separated by tabs",
        "a,,y\n1,5,3\n": "column 2 holds values but has no name",
        "a,y\n1_000,3\n": "line 2, column 'a': '1_000' is not a number",  # float() read 1000
    }
    for i, (text, message) in enumerate(cases.items()):
        (tmp_path / f"{i}.csv").write_text(text)
        with pytest.raises(ValueError, match=message):
            read_csv(tmp_path / f"{i}.csv")
    (tmp_path / "latin.csv").write_bytes("a,b,y\n1,2,caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin.csv is not UTF-8 text \(byte 13 is 0xe9\)"):
        read_csv(tmp_path / "latin.csv")  # the message lacked the file's name


def test_outputs_never_overwrite_the_commands_inputs_and_dash_is_standard_output(tmp_path,
                                                                                 capsys):
    from sparsegp.cli import main

    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (30, 2))
    data = tmp_path / "data.csv"
    data.write_text("a,b,y\n" + "\n".join(f"{a},{b},{np.sin(a) + 0.1 * b}" for a, b in X) + "\n")
    before = data.read_text()
    assert main(["fit", str(data), "--target", "y", "--out", str(data), "--maxiter", "3"]) == 2
    assert "is the command's input" in capsys.readouterr().err
    assert data.read_text() == before
    assert main(["fit", str(data), "--target", "y", "--out", "-", "--maxiter", "3"]) == 2
    assert "a model is a binary file" in capsys.readouterr().err
    assert not (tmp_path / "-").exists()
    model = tmp_path / "model.pt"
    assert main(["fit", str(data), "--target", "y", "--out", str(model), "--maxiter", "3"]) == 0
    saved = model.read_bytes()
    for target in (model, data):
        assert main(["predict", str(model), str(data), "--out", str(target)]) == 2
        assert "is the command's input" in capsys.readouterr().err
    assert model.read_bytes() == saved and data.read_text() == before
    capsys.readouterr()
    assert main(["predict", str(model), str(data), "--out", "-"]) == 0
    assert capsys.readouterr().out.startswith("mean,variance")
    assert not (tmp_path / "-").exists()


def test_the_parsers_names_are_the_librarys():
    # the parser is built without importing torch, from names of its own: they must be these
    from sparsegp import kernels
    from sparsegp.cli import KERNEL_NAMES, PSEUDO_POINT, kernel_class
    from sparsegp.objectives.collapsed.members import APPROXIMATIONS

    assert PSEUDO_POINT == APPROXIMATIONS
    assert {name: kernel_class(name) for name in KERNEL_NAMES} == {
        "se": kernels.SquaredExponential, "matern12": kernels.Matern12,
        "matern32": kernels.Matern32, "matern52": kernels.Matern52}


def test_the_getting_started_page_names_every_benchmark_and_experiment():
    from pathlib import Path

    from sparsegp.cli import build_parser

    page = (Path(__file__).parent.parent / "docs" / "index.md").read_text()
    sub = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for command in ("bench", "experiment"):
        which = next(a for a in sub[command]._actions if a.dest == "which")
        missing = [name for name in which.choices if f"sparsegp {command} {name} " not in page]
        assert not missing, f"docs/index.md's command list lacks `sparsegp {command}` {missing}"


# -- argument errors before torch -------------------------------------------------------------
def test_argument_errors_are_found_before_torch_is_imported(tmp_path):
    # importing torch and the models takes seconds (a minute on a loaded machine): a mistyped
    # file name, a missing column or options that exclude each other are errors without them
    write_csv(tmp_path / "d.csv", ["a", "y"], np.random.default_rng(0).normal(size=(10, 2)))
    d, nope = str(tmp_path / "d.csv"), str(tmp_path / "nope.csv")
    cases = [
        (["fit", nope, "--target", "y"], "no such data file"),
        (["fit", d, "--target", "zz"], "--target 'zz' is not a column"),
        (["fit", d, "--target", "y", "--out", str(tmp_path / "no" / "m.pt")], "does not exist"),
        (["fit", d, "--target", "y", "--approximation", "exact", "-M", "3"], "-M does not apply"),
        (["fit", d, "--target", "y", "--blocks", "2"], "--blocks applies to"),
        (["predict", str(tmp_path / "nope.pt"), d], "no such model file"),
        (["predict", d, nope], "no such data file"),
        (["demo", "--out", "-"], "writes a figure"),
    ]
    script = ("import sys; from sparsegp.cli import main; status = main(sys.argv[1:]); "
              "print(status, 'torch' in sys.modules)")
    for argv, message in cases:
        done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True,
                              text=True, timeout=120)
        assert done.stdout.split() == ["2", "False"], (argv, done.stdout, done.stderr)
        assert message in done.stderr and done.stderr.count("\n") == 1, (argv, done.stderr)


# -- the warnings of a run --------------------------------------------------------------------
def test_fit_never_says_no_warnings_after_printing_one(tmp_path):
    X, y = make_problem(1, N=60)
    write_csv(tmp_path / "d.csv", ["u", "v", "y"], np.c_[1e4 * X, y])  # inputs on a scale of 1e4
    done = subprocess.run([sys.executable, "-m", "sparsegp", "fit", str(tmp_path / "d.csv"),
                           "--target", "y", "-M", "10", "--out", str(tmp_path / "m.pt")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "sparsegp fit: ScaleWarning: SGPR: badly scaled data" in done.stderr
    assert "no warnings" not in done.stdout
    assert "1 during the run, printed on standard error above (ScaleWarning)" in done.stdout
    # a report whose checks found nothing says so, and counts the run's warnings
    from sparsegp.cli import with_run_warnings

    report = "Diagnostics of SGPR\n  noise variance  0.1\nno warnings"
    assert with_run_warnings(report, []) == report
    assert with_run_warnings(report, ["ScaleWarning", "the iteration limit"]).splitlines()[-1] \
        == ("warnings: 2 during the run, printed on standard error above (ScaleWarning, the "
            "iteration limit); none from these checks")


def test_the_help_texts_describe_the_software(capsys):
    import argparse
    import re

    from sparsegp.cli import build_parser

    top = " ".join(build_parser().format_help().split())
    assert "demo, fit, predict." not in top and "benchmarks and paper reproductions" in top
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    paths = [[name] for name in sub.choices]
    for name in ("bench", "experiment"):
        which = next(a for a in sub.choices[name]._actions if a.dest == "which")
        paths += [[name, choice] for choice in which.choices]
    for path in paths:  # `bench speed --help` spoke of "the issue" that defined its flops
        with pytest.raises(SystemExit):
            main([*path, "--help"])
        text = capsys.readouterr().out
        assert text.startswith("usage:"), path
        assert not re.search(r"\b(issues?|sessions?)\b", text, flags=re.I), path
