"""The experiments are independent of one another: a module of one experiment (a subpackage or
a single module of `sparsegp.experiments`: `bauer2016`, `bui2017`, `vdw2018`, `approximations`,
...) imports only from its own experiment, the shared helpers (`sparsegp.experiments.shared`)
and the library; the shared helpers import no experiment; the package's `__init__` imports
none either. So one experiment can be changed, moved or removed without touching another.

The imports are read from the source with `ast` by the reader of the layering test (module
level, inside functions and under TYPE_CHECKING alike: each is a dependency all the same).
"""

from __future__ import annotations

from pathlib import Path

import sparsegp

from ..conformance.test_layering import imports

#: The folder of the helpers every experiment may use.
SHARED = "shared"


def experiment_of(module: str, package: str) -> str | None:
    """The experiment (first name below `package`) a module belongs to: "shared" for the
    helpers, "" for the package itself, None for a module outside `package`."""
    if module == package:
        return ""
    if not module.startswith(package + "."):
        return None
    return module[len(package) + 1:].split(".")[0]


def crossings(root: Path, package: str) -> list[str]:
    """The imports in the package at `root` by which a module of the experiments' package
    `package` (dotted) reaches into another experiment (or into any experiment, from the
    shared helpers or the package's `__init__`)."""
    found = []
    for e in imports(root):
        source, target = experiment_of(e.source, package), experiment_of(e.target, package)
        if source is None or target is None or target in (SHARED, source):
            continue
        found.append(f"{e} — {source or 'the experiments package'} imports "
                     f"{'the experiments package' if target == '' else 'experiment ' + target}")
    return found


ROOT = Path(sparsegp.__file__).parent
PACKAGE = "sparsegp.experiments"


def test_the_experiments_have_imports_to_check():
    # guards against a reader that silently finds nothing
    edges = [e for e in imports(ROOT) if experiment_of(e.source, PACKAGE)]
    experiments = {experiment_of(e.source, PACKAGE) for e in edges}
    assert {"bauer2016", "bui2017", "vdw2018", "randominputs", "approximations", "additive",
            "streaming", "likelihoods", "demo", SHARED} <= experiments
    assert any(e.source == f"{PACKAGE}.bui2017.runs" and e.target == f"{PACKAGE}.shared.data"
               for e in edges)
    assert any(e.source == f"{PACKAGE}.bauer2016.z_equals_x"
               and e.target == f"{PACKAGE}.bauer2016.snelson" for e in edges)


def test_no_experiment_imports_another():
    found = crossings(ROOT, PACKAGE)
    assert not found, ("imports across experiments (move what two experiments share into "
                       "sparsegp/experiments/shared/):\n" + "\n".join(found))


# -- the check itself, on a made-up package ---------------------------------------------------
def test_the_check_finds_every_import_across_experiments(tmp_path):
    files = {
        "__init__.py": "",
        "lib.py": "",
        "experiments/__init__.py": "from . import beta\n",  # the package -> an experiment
        "experiments/shared/__init__.py": "",
        "experiments/shared/data.py": "from ...lib import x\n",
        "experiments/shared/plots.py": "from ..alpha import run\n",  # shared -> experiment
        "experiments/alpha/__init__.py": "from .run import main\n",
        "experiments/alpha/run.py": ("from ..shared.data import y\nfrom . import util\n"
                                     "from ... import lib\n"),
        "experiments/alpha/util.py": "def f():\n    from ..beta import g\n",  # lazy, across
        "experiments/beta.py": "import pkg.experiments.alpha.run\n",  # absolute, across
        "experiments/gamma.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                 "    from .beta import T\n"),  # typing only, across
    }
    root = tmp_path / "pkg"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    found = sorted(line.split(" — ")[0] for line in crossings(root, "pkg.experiments"))
    assert found == sorted([
        "pkg.experiments:1 imports pkg.experiments.beta",
        "pkg.experiments.alpha.util:2 imports pkg.experiments.beta (inside a function)",
        "pkg.experiments.beta:1 imports pkg.experiments.alpha.run",
        "pkg.experiments.gamma:3 imports pkg.experiments.beta (TYPE_CHECKING)",
        "pkg.experiments.shared.plots:1 imports pkg.experiments.alpha.run",
    ])
