"""The resumable result store of `sparsegp experiment bui2017`: one JSON line per finished run.

`OUT/runs.jsonl` holds a row per (part, data set, split, M, method), appended (and flushed
to disk) by the main process as soon as the run ends, successful or failed. `OUT/store.json`
records the grid's settings (`Config.identity`): rows of a different setting (a --quick run,
another budget) are never mixed into a store. A rerun reads the rows, skips the runs that
have one and does the rest; a row cut short by a kill (an unparsable last line) is ignored
and its run done again.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

from ...runtime.files import write_atomically

Key = tuple[str, str, int, int, str]
ROWS = "runs.jsonl"
SETTINGS = "store.json"
VERSION = 1

T = TypeVar("T")


def row_key(row: dict[str, Any]) -> Key:
    """(part, data set, split, M, method): what identifies a run."""
    return (str(row["part"]), str(row["dataset"]), int(row["split"]), int(row["M"]),
            str(row["method"]))


def _clean(value: T) -> T | None:
    # JSON has no NaN or infinity: store them as null
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _last_byte(path: Path) -> bytes:
    with path.open("rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return b""
        f.seek(-1, os.SEEK_END)
        return f.read(1)


class Store:
    """Rows of finished runs in `folder`, keyed by `row_key` (the last row of a key wins)."""

    def __init__(self, folder: str | Path, identity: dict[str, Any]) -> None:
        self.folder = Path(folder)
        self.path = self.folder / ROWS
        self.identity = {"version": VERSION, **identity}
        settings = self.folder / SETTINGS
        if settings.is_file():
            saved = json.loads(settings.read_text())
            if saved != self.identity:
                raise ValueError(
                    f"{self.folder} holds results of another setting ({saved}); this run is "
                    f"{self.identity}. Use another --out folder (or delete {settings} and {ROWS} "
                    "there to start again)")
        else:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomically(settings, json.dumps(self.identity, indent=1) + "\n")
        self.rows: dict[Key, dict[str, Any]] = {}
        self.broken = 0  # lines that could not be read (a run killed while writing)
        if self.path.is_file():
            for line in self.path.read_text().splitlines():
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    self.rows[row_key(row)] = row
                except (ValueError, KeyError, TypeError):
                    self.broken += 1
            if _last_byte(self.path) not in (b"", b"\n"):  # a line cut short: end it
                with self.path.open("a") as f:
                    f.write("\n")

    def __contains__(self, key: Key) -> bool:
        return key in self.rows

    def __len__(self) -> int:
        return len(self.rows)

    def append(self, row: dict[str, Any]) -> None:
        """Add a finished run's row and write it to disk at once."""
        row = {k: _clean(v) for k, v in row.items()}
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.rows[row_key(row)] = row

    def select(self, part: str, keys: Iterable[Key] | None = None) -> list[dict[str, Any]]:
        """The rows of `part` (of the given keys only, when given)."""
        if keys is None:
            return [r for k, r in self.rows.items() if k[0] == part]
        return [self.rows[k] for k in keys if k in self.rows and k[0] == part]
