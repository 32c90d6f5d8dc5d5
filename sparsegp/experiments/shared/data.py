"""The data sets several experiments read, from the data folder (docs/data.md): the UCI
regression sets with their 20 train/test splits (DATA_DIR/uci/<name>/data/), kin40k
(DATA_DIR/kin40k/) and the gzip-compressed DELVE-style text files; and standardising a split
with its training statistics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

#: The kin40k files (DATA_DIR/kin40k/): training inputs and targets, test inputs and targets.
KIN40K_FILES = ("kin40k_train_data.asc.gz", "kin40k_train_labels.asc.gz",
                "kin40k_test_data.asc.gz", "kin40k_test_labels.asc.gz")


@dataclass(frozen=True)
class Problem:
    """Standardised training and test data. Shapes: X [N, D], y [N], Xs [N*, D], ys [N*]."""

    X: np.ndarray
    y: np.ndarray
    Xs: np.ndarray
    ys: np.ndarray


def standardise(X: np.ndarray, y: np.ndarray, Xs: np.ndarray, ys: np.ndarray) -> Problem:
    """Shift and scale inputs and targets by the training means and standard deviations
    (a constant training column is only centred: its scale is taken as 1)."""
    mx, sx = X.mean(0), X.std(0)
    sx = np.where(sx > 0, sx, 1.0)
    my, sy = y.mean(), y.std()
    sy = sy if sy > 0 else 1.0
    return Problem((X - mx) / sx, (y - my) / sy, (Xs - mx) / sx, (ys - my) / sy)


def seeded_rows(n_rows: int, n: int | None, rng: np.random.Generator) -> np.ndarray | slice:
    """`n` of `n_rows` row indices drawn without replacement by `rng` (all rows, as a slice,
    when `n` is None or not below `n_rows`)."""
    if n is None or n >= n_rows:
        return slice(None)
    return rng.choice(n_rows, n, replace=False)


def read_text_files(folder: Path, names: Sequence[str]) -> tuple[np.ndarray, ...]:
    """The whitespace-separated number files `names` in `folder` (gzip-compressed when they
    end in .gz), in float64, in the order given."""
    return tuple(np.loadtxt(Path(folder) / name, dtype=np.float64) for name in names)


def read_kin40k(folder: Path) -> tuple[np.ndarray, ...]:
    """(X [10000, 8], y, Xs [30000, 8], ys) as stored in the kin40k files in `folder`."""
    return read_text_files(folder, KIN40K_FILES)


def uci_folder(data_dir: Path, name: str) -> Path:
    """The folder of UCI set `name` below the data folder."""
    return Path(data_dir) / "uci" / name / "data"


@lru_cache(maxsize=4)
def _uci_table(folder: str) -> tuple[np.ndarray, np.ndarray, int]:
    d = Path(folder)
    data = np.loadtxt(d / "data.txt")
    features = np.atleast_1d(np.loadtxt(d / "index_features.txt", dtype=int))
    target = int(np.loadtxt(d / "index_target.txt"))
    return data, features, target


def uci_table(data_dir: Path, name: str) -> tuple[np.ndarray, np.ndarray, int]:
    """UCI set `name` whole: (data [N, columns], the input columns, the target column)."""
    return _uci_table(str(uci_folder(data_dir, name)))


def uci_split(data_dir: Path, name: str, split: int) -> tuple[np.ndarray, np.ndarray]:
    """The 0-based training and test rows of split `split` of UCI set `name`."""
    folder = uci_folder(data_dir, name)
    return (np.loadtxt(folder / f"index_train_{split}.txt", dtype=int),
            np.loadtxt(folder / f"index_test_{split}.txt", dtype=int))


def uci_problem(data_dir: Path, name: str, split: int) -> Problem:
    """UCI data set `name`, split `split`, standardised with its training statistics."""
    data, features, target = uci_table(data_dir, name)
    tr, te = uci_split(data_dir, name, split)
    return standardise(data[tr][:, features], data[tr, target], data[te][:, features],
                       data[te, target])


def missing_uci(data_dir: Path, names: tuple[str, ...], splits: int) -> list[str]:
    """The files of UCI sets `names` with `splits` splits that are not in `data_dir` (empty
    when all are there)."""
    missing = []
    for name in names:
        folder = uci_folder(data_dir, name)
        need = ["data.txt", "index_features.txt", "index_target.txt",
                *(f"index_{part}_{s}.txt" for s in range(splits) for part in ("train", "test"))]
        missing += [str(folder / f) for f in need if not (folder / f).is_file()]
    return missing
