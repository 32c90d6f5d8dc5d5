"""Sections of results (tables, findings, figures) and running them into one results.md."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...linalg import JitterWarning
from ...runtime.files import write_atomically
from .progress import torch_threads
from .tables import Table


@dataclass
class Section:
    """One experiment's results: tables (also written as CSV), findings, files, time."""

    name: str
    title: str
    description: str
    tables: list[Table] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0
    skipped: str | None = None

    def markdown(self) -> str:
        lines = [f"## {self.title}", "", self.description, ""]
        if self.skipped:
            return "\n".join([*lines, f"**{self.skipped}**", ""])
        for t in self.tables:
            lines += [f"**{t.title}**", "", t.markdown(), ""]
        if self.findings:
            lines += ["Findings:", ""] + [f"* {f}" for f in self.findings] + [""]
        figures = [p for p in self.files if p.suffix == ".png"]
        lines += [f"![{p.stem}]({p.name})" for p in figures]
        lines += ["", f"_Time: {self.seconds:.1f} s._", ""]
        return "\n".join(lines)


def run_sections(out: Path, title: str, mode: str,
                 steps: list[tuple[Callable[[], Section], int]],
                 log: Callable[[str], None] | None) -> list[Path]:
    """Run (section, torch threads) steps in order, write `results.md` with every section,
    and return the files written; each section is timed and its findings logged."""
    out.mkdir(parents=True, exist_ok=True)
    sections: list[Section] = []
    total = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JitterWarning)
        for step, threads in steps:
            torch.manual_seed(0)
            start = time.perf_counter()
            with torch_threads(threads):
                sec = step()
            sec.seconds = time.perf_counter() - start
            sections.append(sec)
            if log is not None:
                log(f"{sec.title}: {sec.skipped or f'{sec.seconds:.1f} s'}")
                for finding in sec.findings:
                    log(f"  {finding}")
    seconds = time.perf_counter() - total
    head = [f"# {title}", "", f"Mode: {mode}; total time {seconds:.1f} s. Objectives are log "
            "marginal likelihoods (or the approximation's objective) in nats.", ""]
    report = out / "results.md"
    write_atomically(report, "\n".join(head + [s.markdown() for s in sections]))
    files = [f for s in sections for f in s.files] + [report]
    if log is not None:
        log(f"{len(files)} files written to {out} in {seconds:.1f} s")
    return files
