"""The bundled Snelson data are the published files, byte for byte."""

from __future__ import annotations

import hashlib
from importlib import resources

import numpy as np

import sparsegp as sg

SHA256 = {  # from shared/data/snelson/PROVENANCE.md
    "snelson_train_inputs.dat": "fd745fae3686ee6b1e03feef7bf4be1b577231ec7406e0e84715fcb37731e44c",
    "snelson_train_outputs.dat": "5f8752c19dbd536ad6435eed26d3e96b0d8101fa194ca31f05d10ab2a5bd9205",
    "snelson_test_inputs.dat": "494c34d9632e896bbb1571f37e61c717c5e9ef4879a7ec3869b4717b45d3c0b0",
}


def test_files_match_their_published_checksums():
    folder = resources.files("sparsegp.datasets").joinpath("data")
    for name, digest in SHA256.items():
        assert hashlib.sha256(folder.joinpath(name).read_bytes()).hexdigest() == digest


def test_snelson_shapes_and_values():
    X, y = sg.datasets.snelson()
    assert X.shape == (200, 1) and y.shape == (200,)
    assert X.dtype == np.float64 and y.dtype == np.float64
    assert 0.05 < X.min() < 0.06 and 5.96 < X.max() < 5.97
    assert abs(y.mean() + 0.343) < 1e-3 and abs(y.std() - 0.843) < 2e-3
    Xt = sg.datasets.snelson_test_inputs()
    assert Xt.shape == (301, 1) and Xt[0, 0] == -3.0 and Xt[-1, 0] == 10.0
