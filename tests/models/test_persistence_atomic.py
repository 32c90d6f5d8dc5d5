"""Saving is atomic: a failure or an interrupt while writing leaves the previous file as it
was (loadable, the same predictions) and no temporary file; a reader never sees half a file."""

from __future__ import annotations

import errno
import os
import stat

import numpy as np
import pytest
import torch

import sparsegp as sg

from ..conftest import make_problem


def _models():
    X, y = make_problem(21, N=30)
    return X, sg.SGPR(X, y, inducing_points=5), sg.SGPR(X, -y, inducing_points=5)


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError(errno.ENOSPC, "No space left on device")])
def test_a_failed_save_leaves_the_previous_file_and_no_temporary_one(tmp_path, monkeypatch,
                                                                     failure):
    X, first, second = _models()
    path = tmp_path / "model.pt"
    first.save(path)
    before = path.read_bytes()
    real = torch.save

    def half_then_fail(obj, f, *args, **kwargs):
        real(obj, f, *args, **kwargs)
        f.truncate(100)  # half a file written, then the failure
        raise failure

    monkeypatch.setattr(torch, "save", half_then_fail)
    expected = KeyboardInterrupt if failure is KeyboardInterrupt else OSError
    with pytest.raises(expected) as caught:
        second.save(path)
    if expected is OSError:
        assert "no space left on the device" in str(caught.value)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.pt"]
    np.testing.assert_array_equal(sg.load(path).predict(X[:3])[0], first.predict(X[:3])[0])


def test_a_save_replaces_the_file_whole_and_keeps_its_permissions(tmp_path):
    X, first, second = _models()
    path = tmp_path / "model.pt"
    first.save(path)
    os.chmod(path, 0o640)
    second.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert os.listdir(tmp_path) == ["model.pt"]
    np.testing.assert_array_equal(sg.load(path).predict(X[:3])[0], second.predict(X[:3])[0])


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
    from sparsegp.models.persistence import digest

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
