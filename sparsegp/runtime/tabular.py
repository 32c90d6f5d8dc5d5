"""Reading and writing the numeric CSV files of the command line (header row, then numbers)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from .files import write_atomically


def csv_header(path: str | Path) -> list[str]:
    """The column names of a CSV file (its first non-empty row)."""
    return _rows(Path(path))[0]


def _rows(path: Path) -> list[list[str]]:
    """The non-empty rows of a CSV file whose header has distinct names."""
    if not path.is_file():
        raise FileNotFoundError(f"no such data file: {path}")
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:  # Excel's BOM too
            rows = [r for r in csv.reader(f) if r and any(c.strip() for c in r)]
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text (byte {err.start} is {err.object[err.start]:#x}"
                         "): save it as UTF-8 (Excel: 'CSV UTF-8')") from None
    if not rows:
        raise ValueError(f"{path} is empty")
    rows[0] = [c.strip() for c in rows[0]]
    if len(rows[0]) == 1:
        for separator, name in ((";", "semicolons"), ("\t", "tabs")):
            if separator in rows[0][0]:
                raise ValueError(f"{path}: the header {rows[0][0]!r} looks separated by {name}; "
                                 "sparsegp reads comma-separated files")
    rows = _without_empty_unnamed_columns(path, rows)
    if len(set(rows[0])) != len(rows[0]):
        raise ValueError(f"{path}: duplicate column names in the header {rows[0]}")
    return rows


def _without_empty_unnamed_columns(path: Path, rows: list[list[str]]) -> list[list[str]]:
    """The rows without columns that have neither a name nor a value (a trailing comma on
    every line, as spreadsheets write); an unnamed column holding values is an error."""
    unnamed = [j for j, name in enumerate(rows[0]) if not name]
    if not unnamed:
        return rows
    for j in unnamed:
        if any(j < len(r) and r[j].strip() for r in rows[1:]):
            raise ValueError(f"{path}: column {j + 1} holds values but has no name in the "
                             "header; name it")
    keep = [j for j in range(len(rows[0])) if j not in unnamed]
    return [[r[j] for j in keep if j < len(r)] if len(r) == len(rows[0]) else r for r in rows]


def read_csv(path: str | Path, columns: list[str] | None = None) -> tuple[list[str], np.ndarray]:
    """Column names and an [N, C] float64 array from a CSV file with a header row.

    With `columns`, only those columns are read as numbers (in that order; the others may hold
    anything) and the names returned are `columns`; a missing one is a clear error.
    """
    path = Path(path)
    rows = _rows(path)
    names = rows[0]
    if len(rows) < 2:
        raise ValueError(f"{path} has a header but no data rows")
    wanted = names if columns is None else list(columns)
    missing = [w for w in wanted if w not in names]
    if missing:
        raise ValueError(f"{path} has no column(s) {missing}; it has {names}")
    index = [names.index(w) for w in wanted]
    data = np.empty((len(rows) - 1, len(wanted)))
    for i, row in enumerate(rows[1:], start=2):
        if len(row) != len(names):
            raise ValueError(f"{path}, line {i}: {len(row)} fields but the header has {len(names)}")
        for k, j in enumerate(index):
            data[i - 2, k] = _number(row[j], f"{path}, line {i}, column {names[j]!r}")
    return wanted, data


def _number(cell: str, where: str) -> float:
    """A cell as a finite float, or a ValueError saying `where` (file, line, column): a model
    refuses NaN and ±inf anyway, and would name only their position in the array."""
    try:
        if "_" in cell:  # Python's float() reads "1_000"; spreadsheets do not
            raise ValueError
        value = float(cell)
    except ValueError:
        raise ValueError(f"{where}: {cell!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{where}: {cell.strip()!r} is not a finite number (a missing value?); "
                         "remove the row or fill in the value")
    return value


def write_csv(path: str | Path | None, names: list[str], columns: list[np.ndarray]) -> str:
    """Write columns under a header to `path`, whole or not at all (`files.write_atomically`),
    and return the text (only returned if `path` is None)."""
    lines = [",".join(names)]
    lines += [",".join(f"{v:.17g}" for v in row) for row in zip(*columns)]
    text = "\n".join(lines) + "\n"
    if path is not None:
        write_atomically(path, text, what="CSV file")
    return text
