"""Every public name has a docstring with an example, and every example runs as a doctest.

Public names: `sparsegp.__all__` (less `__version__`), the `__all__` of `sparsegp.kernels`,
`sparsegp.features`, `sparsegp.likelihoods` and `sparsegp.means`, and the scikit-learn
estimators. Each docstring's `>>>` examples are run by `doctest` in a fresh temporary working
directory (some write files), with ELLIPSIS and NORMALIZE_WHITESPACE.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import io

import pytest

import sparsegp as sg

SKLEARN_NAMES = ["SparseGPRegressor", "SparseGPClassifier"]

#: module name -> its public names
PUBLIC: dict[str, list[str]] = {
    "sparsegp": [name for name in sg.__all__ if name != "__version__"],
    "sparsegp.kernels": list(sg.kernels.__all__),
    "sparsegp.features": list(sg.features.__all__),
    "sparsegp.likelihoods": list(sg.likelihoods.__all__),
    "sparsegp.means": list(sg.means.__all__),
    "sparsegp.sklearn": SKLEARN_NAMES,
}

NAMES = [(module, name) for module, names in PUBLIC.items() for name in names]


def public_object(module: str, name: str):
    if module == "sparsegp.sklearn":
        pytest.importorskip("sklearn", reason="scikit-learn is an optional extra")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("module", list(PUBLIC))
def test_every_public_name_has_a_docstring_with_an_example(module):
    offenders = [name for name in PUBLIC[module]
                 if ">>>" not in (public_object(module, name).__doc__ or "")]
    assert offenders == [], f"{module}: public names without a '>>>' example: {offenders}"


def test_means_all_lists_every_public_definition_of_the_module():
    defined = {name for name, obj in vars(sg.means).items()
               if not name.startswith("_") and (inspect.isclass(obj) or inspect.isfunction(obj))
               and obj.__module__ == "sparsegp.means"}
    assert sorted(sg.means.__all__) == sorted(defined)


@pytest.mark.parametrize(("module", "name"), NAMES, ids=[f"{m}.{n}" for m, n in NAMES])
def test_docstring_examples_run(module, name, tmp_path, monkeypatch):
    obj = public_object(module, name)
    monkeypatch.chdir(tmp_path)
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out = io.StringIO()
    tests = finder.find(obj, f"{module}.{name}", globs={})
    for test in tests:
        runner.run(test, out=out.write)
    assert runner.tries > 0, f"{module}.{name} has no doctest examples"
    assert runner.failures == 0, out.getvalue()
