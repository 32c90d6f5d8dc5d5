"""Where the experiments' data are: the data folder (`--data-dir`, else $SPARSEGP_DATA_DIR,
else sparsegp/data in the user's cache folder; never beside the installed package), the files
missing from it and the messages about them: which files, where to download each data set and
its terms (docs/data.md)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from .sources import SOURCES

#: The environment variable naming the data folder when `--data-dir` is not given.
DATA_DIR_VARIABLE = "SPARSEGP_DATA_DIR"
#: The page that lists the files each experiment reads and where to obtain them.
DATA_DOCS = "docs/data.md (https://github.com/sparsegp/sparsegp/blob/HEAD/docs/data.md)"
#: Exit status of an experiment that could run nothing of what was asked for lack of data.
MISSING_DATA_STATUS = 2
#: What the experiments' data files are missing from, by part: part name -> missing files.
Missing = Mapping[str, Sequence[Path]]


def user_cache_folder(system: str = sys.platform, environ: Mapping[str, str] = os.environ,
                      home: Path | None = None) -> Path:
    """The user's cache folder on `system` (a `sys.platform` value): %LOCALAPPDATA% on Windows
    (else ~/AppData/Local), ~/Library/Caches on macOS, otherwise $XDG_CACHE_HOME when it is
    an absolute path (the XDG rule), else ~/.cache."""
    home = Path.home() if home is None else Path(home)
    if system.startswith("win"):
        local = environ.get("LOCALAPPDATA", "")
        return Path(local) if local else home / "AppData" / "Local"
    if system == "darwin":
        return home / "Library" / "Caches"
    xdg = environ.get("XDG_CACHE_HOME", "")
    return Path(xdg) if xdg and Path(xdg).is_absolute() else home / ".cache"


def default_data_dir() -> Path:
    """The data folder when `--data-dir` is not given: $SPARSEGP_DATA_DIR when set (and not
    empty; a relative path is taken from the working directory), otherwise sparsegp/data in
    the user's cache folder (`user_cache_folder`); as an absolute path."""
    value = os.environ.get(DATA_DIR_VARIABLE, "")
    if value:
        return Path(value).expanduser().absolute()
    return (user_cache_folder() / "sparsegp" / "data").absolute()


def data_folder(data_dir: str | Path | None) -> Path:
    """`data_dir` as a Path, or `default_data_dir()` when it is None."""
    return default_data_dir() if data_dir is None else Path(data_dir)


def data_dir_help(data: str) -> str:
    """The help of `--data-dir` (`data` names the folders read below it)."""
    return (f"folder holding {data} (default: ${DATA_DIR_VARIABLE} when set, otherwise the "
            "folder sparsegp/data in the user's cache folder (~/.cache/sparsegp/data on Linux)); "
            "docs/data.md lists the files and where to get them")


def missing_files(folder: Path, names: Iterable[str]) -> list[Path]:
    """The files `names` that are not in `folder` (empty when all are)."""
    return [Path(folder) / name for name in names if not (Path(folder) / name).is_file()]


def describe_missing(data_dir: Path, files: Sequence[Path], limit: int = 4) -> list[str]:
    """The missing `files`, one text per folder (relative to `data_dir` where below it), at
    most `limit` names each ("kin40k_train_data.asc.gz, ... in kin40k/")."""
    groups: dict[Path, list[str]] = {}
    for f in files:
        groups.setdefault(Path(f).parent, []).append(Path(f).name)
    texts = []
    for folder, names in groups.items():
        try:
            where = f"{folder.relative_to(data_dir).as_posix()}/"
        except ValueError:
            where = f"{folder}/"
        more = f" and {len(names) - limit} more" if len(names) > limit else ""
        texts.append(f"{', '.join(names[:limit])}{more} in {where}")
    return texts


def data_sources(data_dir: Path, files: Iterable[Path | str]) -> list[str]:
    """Where to download each data set that `files` (below `data_dir`) belong to, and its
    terms: one text per data set folder, in the order first met ("kin40k/: download from
    ...; terms: ...")."""
    folders: list[str] = []
    for f in files:
        try:
            top = Path(f).relative_to(data_dir).parts[0]
        except (ValueError, IndexError):
            continue
        if top in SOURCES and top not in folders:
            folders.append(top)
    return [f"{top}/: {SOURCES[top].advice()}" for top in folders]


def how_to_get_data() -> str:
    """The advice that follows a list of missing files."""
    return (f"Put the files there, or point --data-dir (or the {DATA_DIR_VARIABLE} environment "
            f"variable) at the folder that holds them; where to get them: {DATA_DOCS}.")


def skipped_for_data(data_dir: Path, files: Sequence[Path]) -> str:
    """A section's `skipped` text when its data files are missing: which, where, what to do."""
    return (f"skipped: data not found in {data_dir}: {'; '.join(describe_missing(data_dir, files))}. "
            f"{how_to_get_data()}")
