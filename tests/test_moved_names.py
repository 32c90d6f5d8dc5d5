"""Nothing breaks for users: every class and function a module of sparsegp 0.4.0 defined under
a public name (`fixtures/v0_4_0/public_names.json`, written by `public_names.py` there) still
imports from where 0.4.0 had it — from a module that moved with a `DeprecationWarning` naming
where it lives now — or, for the base classes the models were assembled from before they were
composed of parts, raises an AttributeError that says what replaced it."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import warnings
from pathlib import Path

import pytest

from sparsegp import moved

PUBLIC = json.loads((Path(__file__).parent / "fixtures" / "v0_4_0" / "public_names.json")
                    .read_text())


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_every_name_of_0_4_0_imports_or_says_where_it_went(module):
    if module in moved.MODULES:  # imported afresh: it warns
        sys.modules.pop(module, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        imported = importlib.import_module(module)
        for name in PUBLIC[module]:
            qualified = f"{module}.{name}"
            if qualified in moved.REMOVED:
                with pytest.raises(AttributeError, match="removed: "):
                    getattr(imported, name)
                continue
            value = getattr(imported, name)
            if qualified in moved.NAMES:
                new_module, new_name = moved.NAMES[qualified].rsplit(".", 1)
                assert value is getattr(importlib.import_module(new_module), new_name)
    deprecations = [str(w.message) for w in caught if w.category is DeprecationWarning]
    if module in moved.MODULES:
        assert any(f"moved to {moved.MODULES[module]}" in m for m in deprecations), deprecations


def test_a_moved_module_forwards_to_the_module_it_moved_to():
    sys.modules.pop("sparsegp.models.base", None)
    with pytest.warns(DeprecationWarning, match="sparsegp.models.base moved to "
                                                "sparsegp.models.core.model"):
        old = importlib.import_module("sparsegp.models.base")
    from sparsegp.models.core import model
    assert old.Model is model.Model
    with pytest.warns(DeprecationWarning, match="sparsegp.models.GPModel moved to"):
        from sparsegp.models import GPModel
    from sparsegp.models.core.regression import Regression
    assert GPModel is Regression


def test_every_former_path_leads_somewhere():
    for old, new in moved.MODULES.items():
        importlib.import_module(new)
        assert importlib.util.find_spec(old) is not None, old
    for new in moved.NAMES.values():
        module, name = new.rsplit(".", 1)
        assert hasattr(importlib.import_module(module), name), new
