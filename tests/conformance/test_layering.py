"""The import structure of sparsegp: no import cycles between its modules, and no module
importing from a layer above its own.

The imports are read from the source with `ast` (nothing is imported): `import a.b`,
`from a.b import c` (an edge to the module `a.b.c` if there is one, else to `a.b`) and the
relative forms. An import names the module it loads; the packages above it, which Python
initialises on the way, are not counted (else every submodule importing a sibling would
"import" its own package's `__init__`, which imports it back).

Where an import sits decides what counts:

* module level: counted everywhere;
* inside a function (a lazy import): counted too. It runs later than the module's own import,
  so it cannot break the import itself, but a lazy import that closes a circle is the usual
  way of hiding one, and a lazy upward import is an upward dependency all the same;
* under `if TYPE_CHECKING:`: never executed, so not part of any import cycle (annotations of
  mutually referring modules are what these blocks are for); still counted for the layers: a
  lower layer should not need a higher layer's types either.

The layers are those the package is built in, from the bottom: foundations that import
nothing of sparsegp, utilities on the configuration, the parts (kernels, features,
likelihoods, means), what pairs or structures them, inference, fitting and diagnostics,
models, the public API, applications. A module may import from its own layer and below.
Every module must belong to a layer (`LAYERS`, by the first component of its name): a new
subpackage or top-level module fails `test_every_module_belongs_to_a_layer` until it is
placed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import sparsegp

#: From the bottom; a unit is the first component of a module's name below `sparsegp`
#: (a subpackage or a top-level module), "__init__" the package itself; in the subpackages of
#: `SPLIT`, whose modules sit in different layers, each module is a unit of its own.
LAYERS: list[tuple[str, set[str]]] = [
    ("foundations", {"version", "moved", "registry", "autograd", "distributed", "datasets",
                     "quadrature",
                     "runtime", "runtime.config", "runtime.allocator", "runtime.checkpointing",
                     "runtime.files", "runtime.shown_warnings", "runtime.tabular",
                     "runtime.threads", "runtime.transforms"}),
    ("utilities", {"validation", "linalg", "parameters", "runtime.chunking"}),
    ("parts", {"kernels", "features", "likelihoods", "means"}),
    ("pairings", {"covariances", "structured", "conditionals", "partition"}),
    ("inference", {"objectives", "posteriors"}),
    ("fitting", {"training", "diagnostics"}),
    ("models", {"models"}),
    ("api", {"__init__", "sklearn", "workflows", "botorch"}),
    ("applications", {"cli", "__main__", "experiments", "benchmarking"}),
]

#: Subpackages whose modules are placed one by one ("runtime.chunking").
SPLIT = {"runtime"}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module
    line: int
    kind: str  # "module", "lazy" (inside a function) or "typing" (under TYPE_CHECKING)

    def __str__(self) -> str:
        where = {"module": "", "lazy": " (inside a function)", "typing": " (TYPE_CHECKING)"}
        return f"{self.source}:{self.line} imports {self.target}{where[self.kind]}"


def module_files(root: Path) -> dict[str, Path]:
    """Module name -> file for every .py file of the package at `root`."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(root: Path) -> list[Import]:
    """Every import of one of the package's modules by another, with its kind."""
    modules = module_files(root)
    found: list[Import] = []
    for name, path in modules.items():
        found += module_imports(name, path, modules, root.name)
    return found


def module_imports(name: str, path: Path, modules: dict[str, Path], package: str) -> list[Import]:
    """The imports of one module (`name`, its file `path`) of the package's `modules`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: list[Import] = []

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    def visit(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, "lazy" if kind == "module" else kind)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    statement(stmt, "typing")
                for stmt in child.orelse:
                    statement(stmt, kind)
            else:
                statement(child, kind)

    def statement(node: ast.AST, kind: str) -> None:
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in modules else src
                       for a in node.names]
        else:
            visit(node, kind)
            return
        for target in targets:
            resolved = resolve(target) if target.split(".")[0] == package else None
            if resolved is not None and resolved != name:
                found.append(Import(name, resolved, node.lineno, kind))

    visit(tree, "module")
    return found


def cycles(edges: list[Import]) -> list[list[str]]:
    """The import cycles: strongly connected components of more than one module (Tarjan),
    each as a list of modules."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def connect(v: str) -> None:  # recursion depth: the package's import depth, small
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def unit(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] in SPLIT:
        return f"{parts[1]}.{parts[2]}"
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of(layers: list[tuple[str, set[str]]]) -> dict[str, int]:
    return {u: i for i, (_, units) in enumerate(layers) for u in units}


def upward(edges: list[Import], layers: list[tuple[str, set[str]]]) -> list[str]:
    """Imports from a module of a lower layer of one of a higher layer."""
    rank = layer_of(layers)
    names = [name for name, _ in layers]
    return [f"{e} — {names[rank[unit(e.source)]]} imports {names[rank[unit(e.target)]]}"
            for e in edges
            if unit(e.source) in rank and unit(e.target) in rank
            and rank[unit(e.target)] > rank[unit(e.source)]]


ROOT = Path(sparsegp.__file__).parent


@pytest.fixture(scope="module")
def edges():
    return imports(ROOT)


def test_every_module_belongs_to_a_layer():
    rank = layer_of(LAYERS)
    placed = [u for _, units in LAYERS for u in units]
    assert len(placed) == len(set(placed)), "a unit listed in two layers"
    unplaced = sorted({unit(m) for m in module_files(ROOT)} - set(rank))
    assert not unplaced, (f"modules of sparsegp in no layer: {unplaced}; add each to LAYERS in "
                          "tests/conformance/test_layering.py (the lowest layer above everything "
                          "it imports)")


def test_the_package_has_imports_to_check(edges):
    # guards against a reader that silently finds nothing
    assert len(edges) > 100
    assert any(e.source == "sparsegp.models.core.model" and e.target == "sparsegp.kernels.base"
               for e in edges)
    assert any(e.kind == "lazy" for e in edges) and any(e.kind == "typing" for e in edges)


def test_no_import_cycles(edges):
    found = cycles([e for e in edges if e.kind != "typing"])
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_module_imports_from_a_higher_layer(edges):
    found = upward(edges, LAYERS)
    assert not found, "upward imports:\n" + "\n".join(found)


# -- the checks themselves, on a made-up package ----------------------------------------------
def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checks_find_cycles_and_upward_imports(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "from .low import a\n",
        "low/__init__.py": "",
        "low/a.py": "from . import b\n",
        "low/b.py": "def f():\n    from .a import x\n",  # a lazy import closing a circle
        "low/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import T\n",
        "low/d.py": "from .c import U\n",  # a cycle through TYPE_CHECKING only: not one
        "low/e.py": "import pkg.high.h\n",  # upward, absolute
        "high/__init__.py": "",
        "high/h.py": "from ..low import a\nfrom .. import low\n",
    })
    found = imports(root)
    kinds = {(e.source, e.target): e.kind for e in found}
    assert kinds[("pkg.low.b", "pkg.low.a")] == "lazy"
    assert kinds[("pkg.low.c", "pkg.low.d")] == "typing"
    assert kinds[("pkg.high.h", "pkg.low")] == "module"
    assert cycles([e for e in found if e.kind != "typing"]) == [["pkg.low.a", "pkg.low.b"]]
    layers = [("low", {"low"}), ("high", {"high", "__init__"})]
    assert [u.split(" — ")[0] for u in upward(found, layers)] == ["pkg.low.e:1 imports pkg.high.h"]
