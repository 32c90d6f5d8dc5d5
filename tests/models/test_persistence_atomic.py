"""Loading checks what it reads: a value that does not match the checksum written with it is a
damaged file, and so are NaN/inf parameters; files written before the checksum still load.
(That saving is atomic is tested with every other writer in tests/reliability/test_files.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg

from ..conftest import make_problem


def _models():
    X, y = make_problem(21, N=30)
    return X, sg.SGPR(X, y, inducing_points=5), sg.SGPR(X, -y, inducing_points=5)


def _resave(path, edit):
    payload = torch.load(path, weights_only=True)
    edit(payload)
    torch.save(payload, path)


def test_a_flipped_bit_in_a_stored_value_is_a_damaged_file_not_another_model(tmp_path):
    X, first, _ = _models()
    path = tmp_path / "model.pt"
    first.save(path)

    def flip(payload):
        raw = payload["state_dict"]["kernel.raw_lengthscale"]
        raw.view(torch.int64)[0] ^= 1 << 40  # one bit of the mantissa
    _resave(path, flip)
    with pytest.raises(ValueError, match="do not match the checksum"):
        sg.load(path)


@pytest.mark.parametrize("keep_digest", [False, True])
def test_non_finite_parameters_are_refused_even_with_a_matching_checksum(tmp_path, keep_digest):
    from sparsegp.models.core.persistence import digest

    X, first, _ = _models()
    path = tmp_path / "model.pt"
    first.save(path)

    def infinite(payload):
        payload["state_dict"]["kernel.raw_lengthscale"][:] = float("inf")
        if keep_digest:
            payload["digest"] = digest(payload)
        else:
            del payload["digest"]  # as a file written before the digest existed
    _resave(path, infinite)
    with pytest.raises(ValueError, match="kernel.raw_lengthscale holds NaN or inf"):
        sg.load(path)


def test_a_file_without_a_digest_still_loads(tmp_path):
    X, first, _ = _models()
    path = tmp_path / "model.pt"
    first.save(path)
    _resave(path, lambda payload: payload.pop("digest"))
    np.testing.assert_array_equal(sg.load(path).predict(X[:3])[0], first.predict(X[:3])[0])
