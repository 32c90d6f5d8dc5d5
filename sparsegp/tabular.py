"""Reading and writing the numeric CSV files of the command line (header row, then numbers)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np


def read_csv(path: str | Path) -> tuple[list[str], np.ndarray]:
    """Column names and an [N, C] float64 array from a CSV file with a header row."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such data file: {path}")
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    rows = [r for r in rows if r and any(c.strip() for c in r)]
    if not rows:
        raise ValueError(f"{path} is empty")
    names = [c.strip() for c in rows[0]]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: duplicate column names in the header {names}")
    if len(rows) < 2:
        raise ValueError(f"{path} has a header but no data rows")
    data = np.empty((len(rows) - 1, len(names)))
    for i, row in enumerate(rows[1:], start=2):
        if len(row) != len(names):
            raise ValueError(f"{path}, line {i}: {len(row)} fields but the header has {len(names)}")
        for j, cell in enumerate(row):
            try:
                data[i - 2, j] = float(cell)
            except ValueError:
                raise ValueError(
                    f"{path}, line {i}, column {names[j]!r}: {cell!r} is not a number"
                ) from None
    return names, data


def select_columns(names: list[str], data: np.ndarray, wanted: list[str], path: str | Path
                   ) -> np.ndarray:
    """The columns `wanted`, by name, in that order."""
    missing = [w for w in wanted if w not in names]
    if missing:
        raise ValueError(f"{path} has no column(s) {missing}; it has {names}")
    return data[:, [names.index(w) for w in wanted]]


def write_csv(path: str | Path | None, names: list[str], columns: list[np.ndarray]) -> str:
    """Write columns under a header to `path` (or return the text if `path` is None)."""
    lines = [",".join(names)]
    lines += [",".join(f"{v:.17g}" for v in row) for row in zip(*columns)]
    text = "\n".join(lines) + "\n"
    if path is not None:
        Path(path).write_text(text)
    return text
