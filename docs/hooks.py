"""MkDocs hook: write the generated pages into docs/generated/ before the build reads the files.

* generated/cli.md — the command-line reference, from the argparse parsers themselves
  (`sparsegp`, every subcommand, every benchmark and experiment: their `--help` text).
* generated/gallery/<script>.md — each examples/gallery/*.py (jupytext "percent" format:
  `# %%` code cells, `# %% [markdown]` text cells) executed in a fresh process, rendered as
  its text, its code, what it printed and the figures it wrote. Quick mode
  (`SPARSEGP_QUICK=1`, a few seconds each) unless `SPARSEGP_DOCS_FULL=1`. A script that fails
  fails the build.
* generated/figures/ — the experiments' committed figures (results/**.png) for the guide.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ROOT / "docs" / "generated"
GALLERY = ROOT / "examples" / "gallery"


def on_pre_build(config: Any, **kwargs: Any) -> None:
    if GENERATED.exists():
        shutil.rmtree(GENERATED)
    (GENERATED / "gallery").mkdir(parents=True)
    (GENERATED / "cli.md").write_text(cli_reference())
    copy_figures(GENERATED / "figures")
    for script in sorted(GALLERY.glob("*.py")):
        render_script(script, GENERATED / "gallery")


# -- the command line -------------------------------------------------------------------------
def help_text(argv: list[str]) -> str:
    """What `sparsegp <argv> --help` prints (in this process: argparse exits after printing)."""
    from sparsegp.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([*argv, "--help"])
    return out.getvalue().rstrip()


def command_paths() -> list[list[str]]:
    """Every command, from the parser: the subcommands, and the benchmarks and experiments
    that `bench` and `experiment` dispatch to (the choices of their `which` argument)."""
    import argparse

    from sparsegp.cli import build_parser

    paths: list[list[str]] = [[]]
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        paths.append([name])
        which = [a for a in parser._actions if a.dest == "which"]
        for choice in which[0].choices if which else []:
            paths.append([name, choice])
    return paths


def cli_reference() -> str:
    parts = ["# Command line\n",
             "Generated from the parsers themselves: each section is the command's `--help`.\n"]
    for path in command_paths():
        title = " ".join(["sparsegp", *path])
        parts.append(f"## `{title}`\n\n```text\n{help_text(path)}\n```\n")
    return "\n".join(parts)


# -- figures of the experiments ---------------------------------------------------------------
def copy_figures(target: Path) -> None:
    for png in sorted((ROOT / "results").glob("*/*.png")):
        dest = target / png.parent.name / png.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, dest)


# -- the gallery ------------------------------------------------------------------------------
def cells(source: str) -> list[tuple[str, str]]:
    """(kind, text) cells of a percent-format script: 'markdown' (comment markers removed) or
    'code'; lines before the first marker (the module docstring) are left out."""
    out: list[tuple[str, list[str]]] = []
    for line in source.splitlines():
        if line.startswith("# %%"):
            out.append(("markdown" if "[markdown]" in line else "code", []))
        elif out:
            kind, lines = out[-1]
            lines.append(line[2:] if kind == "markdown" and line.startswith("# ")
                         else "" if kind == "markdown" and line == "#" else line)
    return [(kind, "\n".join(lines).strip("\n")) for kind, lines in out
            if "\n".join(lines).strip()]


def quick_mode() -> bool:
    """Whether the gallery runs in quick mode (`SPARSEGP_QUICK=1`): unless SPARSEGP_DOCS_FULL=1."""
    return os.environ.get("SPARSEGP_DOCS_FULL") != "1"


def printed_heading(quick: bool) -> str:
    """The line above what a gallery script printed: in quick mode it says so, as its fits are
    shorter than a run of the script as written and its numbers differ."""
    if not quick:
        return "What it prints:"
    return ("What it prints in quick mode (`SPARSEGP_QUICK=1`, the mode this site is built in: "
            "shorter fits than `python` on the script gives, so the numbers and figures differ "
            "from a full run's):")


def run_script(script: Path, out_dir: Path) -> str:
    """Run a gallery script in a fresh process (quick mode unless SPARSEGP_DOCS_FULL=1); its
    figures land in out_dir. Returns what it printed; raises if it fails."""
    env = {**os.environ, "MPLBACKEND": "Agg", "SPARSEGP_GALLERY_OUT": str(out_dir)}
    if quick_mode():
        env["SPARSEGP_QUICK"] = "1"
    done = subprocess.run([sys.executable, str(script)], cwd=out_dir, env=env,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"gallery script {script.name} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def render_script(script: Path, out_dir: Path) -> None:
    before = set(out_dir.glob("*.png"))
    printed = run_script(script, out_dir)
    figures = sorted(set(out_dir.glob("*.png")) - before)
    page = []
    for kind, text in cells(script.read_text()):
        page.append(text if kind == "markdown" else f"```python\n{text}\n```")
    if printed.strip():
        page.append(f"{printed_heading(quick_mode())}\n\n```text\n{printed.rstrip()}\n```")
    page += [f"![{fig.stem}]({fig.name})" for fig in figures]
    page.append(f"*The script: `examples/gallery/{script.name}` (run it with `python "
                f"examples/gallery/{script.name}`; `SPARSEGP_QUICK=1` for a quick run).*")
    (out_dir / f"{script.stem}.md").write_text("\n\n".join(page) + "\n")
