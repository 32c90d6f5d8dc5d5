"""What an experiment's command line says about its own fits (`experiments.shared.command`):
a fit that ran to the budget the experiment sets is counted in one line, not warned about
with advice (`fit(maxiter=...)`) for code the user did not write."""

from __future__ import annotations

import warnings

import pytest

import sparsegp as sg
from sparsegp.experiments.shared.command import run_with_data


def fits_to_a_budget(data_dir):
    X, y = sg.datasets.snelson()
    for maxiter in (2, 3):
        sg.SGPR(X, y, inducing_points=8).fit(maxiter=maxiter, progress=False)
    warnings.warn("something else the user should see", UserWarning, stacklevel=1)


def test_fits_at_the_experiments_budget_are_one_line_naming_the_option(tmp_path, capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status = run_with_data("sparsegp experiment x", tmp_path, lambda d: {}, True,
                               fits_to_a_budget, budget_option="--maxiter N")
    assert status == 0
    assert [w.category for w in caught] == [UserWarning]  # other warnings pass unchanged
    err = capsys.readouterr().err
    assert "maxiter=" not in err and "fit(" not in err
    [line] = err.splitlines()
    assert line.startswith("sparsegp experiment x: 2 fits ran to the budget the experiment sets")
    assert "(SGPR 2)" in line and line.endswith("--maxiter N sets it")


def test_without_an_option_the_line_says_the_budget_is_the_protocols(tmp_path, capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_with_data("sparsegp experiment y", tmp_path, lambda d: {}, True, fits_to_a_budget)
    assert not any(issubclass(w.category, sg.ConvergenceWarning) for w in caught)
    assert "part of its protocol (--quick's are shorter)" in capsys.readouterr().err


def test_a_convergence_warning_filtered_as_an_error_still_raises(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", sg.ConvergenceWarning)
        with pytest.raises(sg.ConvergenceWarning):
            run_with_data("sparsegp experiment z", tmp_path, lambda d: {}, True,
                          fits_to_a_budget)
