"""Result tables of the experiments: markdown for reports, CSV for further analysis."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...runtime.files import atomic_file


def _cell(v: object, digits: int) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "—"
        if v != 0.0 and (abs(v) < 1e-3 or abs(v) >= 1e6):
            return f"{v:.{digits}e}"
        return f"{v:.{digits}f}" if abs(v) < 10 else f"{v:.{max(digits - 1, 1)}f}"
    return str(v)


@dataclass
class Table:
    """A titled table: column names and rows of numbers or strings."""

    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)

    def add(self, *row: object) -> None:
        if len(row) != len(self.columns):
            raise ValueError(f"row has {len(row)} cells; the table has {len(self.columns)} columns")
        self.rows.append(list(row))

    def column(self, name: str) -> list[Any]:
        i = self.columns.index(name)
        return [r[i] for r in self.rows]

    def markdown(self, digits: int = 4) -> str:
        head = "| " + " | ".join(self.columns) + " |"
        rule = "| " + " | ".join("---" for _ in self.columns) + " |"
        body = ["| " + " | ".join(_cell(v, digits) for v in r) + " |" for r in self.rows]
        return "\n".join([head, rule, *body])

    def write_csv(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(path, "w", what="CSV file", newline="") as f:  # whole or not at all
            w = csv.writer(f)
            w.writerow(self.columns)
            for r in self.rows:
                w.writerow(["" if v is None else (f"{v:.10g}" if isinstance(v, float) else v)
                            for v in r])
        return path
