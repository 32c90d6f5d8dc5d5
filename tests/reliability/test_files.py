"""Every file sparsegp writes is written whole or not at all (`sparsegp.runtime.files`): a write that
fails half-way (Ctrl-C, a full disk) leaves the previous file as it was and no temporary file
beside it; a reader never sees half a file. Models, the CSV of `sparsegp predict --out`, the
experiments' tables, figures, results.md, result store settings and checkpoint records.

The failure is made where every writer ends up, the file object's `write`: `open` (builtins
and io, which pathlib uses) is replaced for files in the test's folder by one whose `write`
writes half of what it is given and then raises."""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.runtime import files

from ..conftest import make_problem

FAILURES = [KeyboardInterrupt, OSError(errno.ENOSPC, "No space left on device")]


class _HalfThenFail:
    """A file object that writes half of the first block it is given, then raises."""

    def __init__(self, f, failure):
        self._f, self._failure = f, failure

    def write(self, data):
        self._f.write(data[: len(data) // 2])
        self._f.flush()
        raise self._failure

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def __iter__(self):
        return iter(self._f)


@pytest.fixture
def failing_writes(tmp_path, monkeypatch):
    """`arm(failure)`: from then on, writes to files in tmp_path fail half-way."""
    real_open = io.open

    def arm(failure):
        def fake_open(file, mode="r", *args, **kwargs):
            f = real_open(file, mode, *args, **kwargs)
            inside = isinstance(file, (str, os.PathLike)) and \
                Path(os.path.abspath(file)).parent == tmp_path
            return _HalfThenFail(f, failure) if inside and ("w" in mode or "a" in mode) else f

        monkeypatch.setattr(builtins, "open", fake_open)
        monkeypatch.setattr(io, "open", fake_open)

    yield arm
    monkeypatch.undo()


def _expected(failure):
    return KeyboardInterrupt if failure is KeyboardInterrupt else OSError


def _check_untouched(tmp_path, path, before, failure, caught):
    if _expected(failure) is OSError:
        assert "no space left on the device" in str(caught.value)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == [path.name]  # no temporary file left


@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("content", [b"new bytes " * 100, "new text " * 100,
                                     lambda f: f.write(b"written by a function " * 100)])
def test_write_atomically_fails_whole(tmp_path, failing_writes, failure, content):
    path = tmp_path / "file.txt"
    path.write_text("the old content")
    before = path.read_bytes()
    failing_writes(failure)
    with pytest.raises(_expected(failure)) as caught:
        files.write_atomically(path, content, what="test file")
    _check_untouched(tmp_path, path, before, failure, caught)
    if _expected(failure) is OSError:
        assert f"cannot write the test file {path}" in str(caught.value)


@pytest.mark.parametrize("mode", ["w", "wb"])
def test_atomic_file_fails_whole_on_an_exception_inside_the_block(tmp_path, mode):
    path = tmp_path / "table.csv"
    path.write_text("old")
    with pytest.raises(KeyboardInterrupt), files.atomic_file(path, mode) as f:
        f.write("half" if mode == "w" else b"half")
        raise KeyboardInterrupt
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["table.csv"]


def test_atomic_path_gives_a_writer_a_name_beside_the_target(tmp_path):
    path = tmp_path / "out.bin"
    with files.atomic_path(path) as tmp:
        assert tmp.parent == tmp_path and tmp != path and tmp.exists()
        tmp.write_bytes(b"abc")
        assert not path.exists()  # replaced only when the block ends
    assert path.read_bytes() == b"abc" and os.listdir(tmp_path) == ["out.bin"]


def test_a_replaced_file_keeps_its_permissions_and_a_link_its_target(tmp_path):
    path = tmp_path / "file.txt"
    path.write_text("old")
    os.chmod(path, 0o640)
    files.write_atomically(path, "new")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o640
    link = tmp_path / "link.txt"
    link.symlink_to(path)
    files.write_atomically(link, "through the link")
    assert link.is_symlink() and path.read_text() == "through the link"


def test_a_failure_to_write_names_the_reason():
    for err, reason in [(OSError(errno.ENOSPC, "x"), "no space left on the device"),
                        (PermissionError(errno.EACCES, "x"), "permission denied"),
                        (OSError(errno.EROFS, "x"), "read-only file system"),
                        (RuntimeError("[enforce fail] PermissionError: [Errno 13] Permission "
                                      "denied"), "permission denied"),
                        (OSError(errno.EIO, "x"), "OSError: [Errno 5] x"),
                        (RuntimeError("[enforce fail] unexpected pos 64 vs 32\nmore"),
                         "RuntimeError: [enforce fail] unexpected pos 64 vs 32")]:
        assert files.reason(err) == reason


def test_a_writer_that_fails_on_a_full_disk_without_saying_so_is_read_as_a_full_disk(
        tmp_path, monkeypatch):
    """torch's writer says only "file write failed" (a RuntimeError, no errno): where the
    folder has less than `FREE_FLOOR` bytes free, the message says why."""
    err = RuntimeError("[enforce fail at inline_container.cc:664] . PytorchStreamWriter "
                       "failed writing file data/0: file write failed")
    assert files.reason(err, tmp_path).startswith("RuntimeError: [enforce fail")
    free = files.shutil.disk_usage(tmp_path)
    monkeypatch.setattr(files.shutil, "disk_usage",
                        lambda _: free._replace(free=files.FREE_FLOOR - 1))
    assert files.reason(err, tmp_path) == "no space left on the device"

    def fail(f):
        raise err

    with pytest.raises(OSError, match=r"cannot write the model file .*no space left on the "
                                      r"device"):
        files.write_atomically(tmp_path / "m.pt", fail, what="model file")


def test_a_missing_folder_or_a_folder_in_the_way_is_named(tmp_path):
    with pytest.raises(OSError, match=r"cannot write the CSV file .*p.csv \(its folder does "
                       r"not exist\)"):
        files.write_atomically(tmp_path / "missing" / "p.csv", "a\n", what="CSV file")
    (tmp_path / "p.csv").mkdir()
    with pytest.raises(OSError, match=r"p.csv \(it is a folder\)"):
        files.write_atomically(tmp_path / "p.csv", "a\n", what="CSV file")
    assert os.listdir(tmp_path) == ["p.csv"] and os.listdir(tmp_path / "p.csv") == []


# -- the writers of the library, each interrupted half-way -----------------------------------

@pytest.mark.parametrize("failure", FAILURES)
def test_a_failed_csv_of_predictions_leaves_the_previous_file(tmp_path, failing_writes,
                                                                failure):
    from sparsegp.runtime.tabular import write_csv

    path = tmp_path / "predictions.csv"
    write_csv(path, ["mean", "variance"], [np.arange(50.0), np.ones(50)])
    before = path.read_bytes()
    failing_writes(failure)
    with pytest.raises(_expected(failure)) as caught:
        write_csv(path, ["mean", "variance"], [np.arange(50.0) + 1, np.ones(50)])
    _check_untouched(tmp_path, path, before, failure, caught)


@pytest.mark.parametrize("failure", FAILURES)
def test_a_failed_experiment_table_leaves_the_previous_file(tmp_path, failing_writes, failure):
    from sparsegp.experiments.shared.tables import Table

    table = Table("t", ["M", "objective"], [[m, -1.5 * m] for m in range(40)])
    path = table.write_csv(tmp_path / "table.csv")
    before = path.read_bytes()
    table.add(99, 0.5)
    failing_writes(failure)
    with pytest.raises(_expected(failure)) as caught:
        table.write_csv(path)
    _check_untouched(tmp_path, path, before, failure, caught)


@pytest.mark.parametrize("failure", FAILURES)
def test_a_failed_figure_leaves_the_previous_file(tmp_path, failing_writes, failure):
    from sparsegp.experiments.shared.plotting import new_figure, save

    fig, axes = new_figure(1, 1, (3, 2))
    axes[0, 0].plot([0, 1], [0, 1])
    path = save(fig, tmp_path / "figure.png")
    before = path.read_bytes()
    assert before[:8] == b"\x89PNG\r\n\x1a\n"
    axes[0, 0].plot([0, 1], [1, 0])
    failing_writes(failure)
    with pytest.raises(_expected(failure)) as caught:
        save(fig, path)
    _check_untouched(tmp_path, path, before, failure, caught)


@pytest.mark.parametrize("failure", FAILURES)
def test_a_failed_results_report_leaves_the_previous_file(tmp_path, failing_writes, failure):
    from sparsegp.experiments.shared.sections import Section, run_sections

    def step():
        return Section("s", "A section", "What it shows. " * 20, findings=["a finding"])

    run_sections(tmp_path, "Results", "quick", [(step, 1)], log=None)
    path = tmp_path / "results.md"
    before = path.read_bytes()
    failing_writes(failure)
    with pytest.raises(_expected(failure)) as caught:
        run_sections(tmp_path, "Results again", "quick", [(step, 1)], log=None)
    _check_untouched(tmp_path, path, before, failure, caught)


@pytest.mark.parametrize("failure", FAILURES)
def test_a_failed_checkpoint_record_leaves_the_previous_one(tmp_path, failing_writes, failure):
    from sparsegp.experiments.vdw2018.conv_runs import _write_json

    path = tmp_path / "run.json"
    _write_json(path, {"segments": 3, "status": "running", "trace": list(range(30))})
    before = path.read_bytes()
    failing_writes(failure)
    with pytest.raises(_expected(failure)) as caught:
        _write_json(path, {"segments": 4, "status": "running", "trace": list(range(40))})
    _check_untouched(tmp_path, path, before, failure, caught)
    assert json.loads(path.read_text())["segments"] == 3  # the resumable state


def test_a_failed_store_settings_file_leaves_no_half_file(tmp_path, failing_writes):
    from sparsegp.experiments.bui2017.store import SETTINGS, Store

    failing_writes(KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        Store(tmp_path, {"grid": "quick", "maxiter": 10})
    # a half-written settings file would make every later run refuse the folder
    assert not (tmp_path / SETTINGS).exists() and os.listdir(tmp_path) == []


# -- models (torch.save into the temporary file) ----------------------------------------------

def _models():
    X, y = make_problem(21, N=30)
    return X, sg.SGPR(X, y, inducing_points=5), sg.SGPR(X, -y, inducing_points=5)


@pytest.mark.parametrize("failure", FAILURES)
def test_a_failed_save_leaves_the_previous_model_and_no_temporary_one(tmp_path, monkeypatch,
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
    with pytest.raises(_expected(failure)) as caught:
        second.save(path)
    monkeypatch.undo()
    _check_untouched(tmp_path, path, before, failure, caught)
    if _expected(failure) is OSError:
        assert "cannot write the model file" in str(caught.value)
    np.testing.assert_array_equal(sg.load(path).predict(X[:3])[0], first.predict(X[:3])[0])


def test_a_save_interrupted_inside_torch_leaves_the_previous_model(tmp_path, failing_writes):
    X, first, second = _models()
    path = tmp_path / "model.pt"
    first.save(path)
    before = path.read_bytes()
    failing_writes(KeyboardInterrupt)
    with pytest.raises((KeyboardInterrupt, OSError)):  # as torch's writer passes it on
        second.save(path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["model.pt"]


def test_a_save_replaces_the_file_whole_and_keeps_its_permissions(tmp_path):
    X, first, second = _models()
    path = tmp_path / "model.pt"
    first.save(path)
    os.chmod(path, 0o640)
    second.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert os.listdir(tmp_path) == ["model.pt"]
    np.testing.assert_array_equal(sg.load(path).predict(X[:3])[0], second.predict(X[:3])[0])
