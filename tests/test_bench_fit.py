"""`sparsegp bench fit`: its quick run writes a table, "within 1%" is the first kept state
whose scores are within 1% of the reference's, and a peer's row says when sparsegp's default
fit first scored as well as the peer's end."""

import re
import sys

import numpy as np
import pytest

from sparsegp.benchmarking import fit
from sparsegp.experiments.shared.data import missing_uci

from .conftest import TEST_DATA_DIR, no_data_reason


def test_the_quick_run_writes_its_table(tmp_path):
    out = tmp_path / "fit.md"
    assert fit.main(["--quick", "--models", "SGPR (VFE),GPyTorch", "--out", str(out)]) == 0
    text = out.read_text()
    n = fit.QUICK_N[0]
    row = next(line for line in text.splitlines() if line.startswith(f"| friedman1 | {n} | SGPR"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert int(cells[4]) >= 1 and "it." in cells[5]  # iterations; reached within 1%
    rmse, ref = (float(v) for v in cells[6].split(","))
    assert abs(rmse - ref) <= 0.01 * ref  # the default fit ends within 1% here
    assert cells[9] == ""  # the column for the peers' rows
    peer = next(line for line in text.splitlines() if line.startswith(f"| friedman1 | {n} | GPy"))
    cells = [c.strip() for c in peer.strip("|").split("|")]
    assert cells[9] == "not reached" or re.fullmatch(r"\d+\.\d \(it\. \d+\)", cells[9])


def test_the_state_at_given_scores_is_the_first_that_scores_as_well():
    case = fit.standard_cases(quick=True)[0]
    model = fit.regression_models(quick=True)["SGPR (VFE)"](case.X[:300], case.y[:300])
    _, trace = fit.traced_fit(model, maxiter=40)
    model.load_state_dict(trace.states[12])
    target = fit.scores(model, case)
    seconds, at = fit.first_state(model, case, trace,
                                  lambda p, n: p <= target[0] and n <= target[1])
    assert at is not None and at <= 12 and seconds == trace.seconds[at]
    for i in range(at + 1):
        model.load_state_dict(trace.states[i])
        p, n = fit.scores(model, case)
        assert (p <= target[0] and n <= target[1]) == (i == at)


def test_within_one_percent_is_the_first_good_state():
    case = fit.standard_cases(quick=True)[0]
    model = fit.regression_models(quick=True)["SGPR (VFE)"](case.X[:300], case.y[:300])
    result, trace = fit.traced_fit(model, maxiter=40)
    final = fit.scores(model, case)
    seconds, at = fit.first_good(model, case, trace, final)
    assert at is not None and seconds == trace.seconds[at]
    # the state found is good, and no earlier one is
    scored = []
    for i in range(at + 1):
        model.load_state_dict(trace.states[i])
        scored.append(fit.good(*fit.scores(model, case), final))
    assert scored[-1] and not any(scored[:-1])
    assert np.all(np.diff(trace.seconds) >= 0)


def test_without_gpflow_its_row_is_left_out_with_the_reason(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gpflow", None)  # `import gpflow` raises ImportError
    out = tmp_path / "fit.md"
    assert fit.main(["--quick", "--models", "SGPR (VFE),GPflow", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "GPflow cannot be imported (ModuleNotFoundError: " in printed
    assert "its row is left out" in printed
    rows = [line for line in out.read_text().splitlines() if line.startswith("| friedman1 ")]
    assert [line.split("|")[3].strip() for line in rows] == ["SGPR (VFE)"]


@pytest.mark.skipif(bool(missing_uci(TEST_DATA_DIR, (fit.UCI_SET,), 1)),
                    reason=no_data_reason(f"uci/{fit.UCI_SET}"))
def test_the_uci_case_is_split_zero_standardised_by_its_training_data():
    case = next(c for c in fit.data_cases(TEST_DATA_DIR, quick=False) if c.name == fit.UCI_SET)
    assert case.X.shape == (8611, 4) and case.Xs.shape == (957, 4)
    np.testing.assert_allclose(case.X.mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(case.y.std(), 1.0, rtol=1e-12)
    assert abs(case.ys.mean()) < 0.2  # the test rows in the training rows' units
