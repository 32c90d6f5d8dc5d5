"""Files saved by sparsegp 0.4.0 load and predict what they predicted when saved: every model
class, with and without the training data, priors, frozen parameters and metadata included
(`tests/fixtures/v0_4_0`, written by its `make_files.py` under 0.4.0)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import sparsegp as sg

FILES = Path(__file__).resolve().parents[1] / "fixtures" / "v0_4_0"
MANIFEST = json.loads((FILES / "manifest.json").read_text())
EXPECTED = np.load(FILES / "expected.npz")


@pytest.mark.parametrize("with_data", [False, True], ids=["without-data", "with-data"])
@pytest.mark.parametrize("name", sorted(MANIFEST["models"]))
def test_a_040_file_loads_and_predicts_as_it_did(name, with_data):
    entry = MANIFEST["models"][name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecation or other warning on load
        model = sg.load(FILES / f"{name}{'-data' if with_data else ''}.pt")
    assert type(model).__name__ == entry["class"]
    assert (model.y is not None) == with_data
    X_new = EXPECTED["X_NEW"]
    for i, call in enumerate(entry["calls"]):
        X = X_new[:, :1] if call["inputs"] == "first column" else X_new
        out = getattr(model, call["method"])(X, **call["kwargs"])
        out = out if isinstance(out, tuple) else (out,)
        assert len(out) == call["outputs"]
        for j, value in enumerate(out):
            want = EXPECTED[f"{name}/{i}/{j}"]
            assert np.asarray(value).shape == want.shape, (call, j)
            # the same saved posterior, the same arithmetic: equal to the last bits but for
            # the order of a few sums (a relative 1e-13 of the values' scale)
            np.testing.assert_allclose(value, want, rtol=1e-13, atol=1e-13 * np.abs(want).max(),
                                       err_msg=f"{call} output {j}")
    if with_data and entry["class"] not in ("KISSGP",):
        assert np.isfinite(model.log_marginal_likelihood())
