"""Former module paths and names of sparsegp, kept importing with a `DeprecationWarning`.

`MODULES`: a module that moved, by its former path (sparsegp 0.4.0) -> its path now; importing
the former path gives a stand-in that forwards to the module now (with the former names of
`NAMES` that lived in it). `NAMES`: a name that moved or was renamed, by its former qualified
name -> its qualified name now. `REMOVED`: the base classes the models were assembled from
before they were composed of parts (`docs/architecture.md`), by former qualified name: reading
one raises an AttributeError that says what replaced it.

A package whose module moved out of it answers its former attributes through `former(...)`
in its own `__getattr__` (`sparsegp.models.pathwise`, `sparsegp.models.GPModel`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

MODULES: dict[str, str] = {
    "sparsegp.models.base": "sparsegp.models.core.model",
    "sparsegp.models.classes": "sparsegp.models.core.registry",
    "sparsegp.models.conditioning": "sparsegp.models.core.conditioning",
    "sparsegp.models.coregional": "sparsegp.models.core.mixing",
    "sparsegp.models.dtypes": "sparsegp.models.core.dtypes",
    "sparsegp.models.fitting": "sparsegp.models.core.fitting",
    "sparsegp.models.inducing": "sparsegp.models.core.inducing",
    "sparsegp.models.labels": "sparsegp.models.core.labels",
    "sparsegp.models.latent": "sparsegp.models.core.latent",
    "sparsegp.models.options": "sparsegp.models.core.options",
    "sparsegp.models.pathwise": "sparsegp.models.core.pathwise",
    "sparsegp.models.pathwise_features": "sparsegp.models.core.pathwise_features",
    "sparsegp.models.persistence": "sparsegp.models.core.persistence",
    "sparsegp.models.predictions": "sparsegp.models.core.predictions",
    "sparsegp.models.regression": "sparsegp.models.core.regression",
    "sparsegp.models.state": "sparsegp.models.core.state",
    "sparsegp.models.units": "sparsegp.models.core.units",
    "sparsegp.models.streamed": "sparsegp.models.core.streaming",
    "sparsegp.models.streaming_inducing": "sparsegp.models.core.streaming",
    "sparsegp.models.streaming": "sparsegp.models.sgpr.streaming",
    "sparsegp.models.streaming_svgp": "sparsegp.models.svgp.streaming",
    "sparsegp.models.streaming_sgpc": "sparsegp.models.sgpc.streaming",
    "sparsegp.models.svgp_targets": "sparsegp.models.svgp.targets",
    "sparsegp.models.svgp_training": "sparsegp.models.svgp.training",
    "sparsegp.models.svgp_predictions": "sparsegp.models.core.predictions",
    "sparsegp.models.svgp_diagnostics": "sparsegp.models.svgp.model",
    "sparsegp.models.gpssm_gibbs": "sparsegp.objectives.latent.particle_gibbs",
    **{f"sparsegp.objectives.{old}": f"sparsegp.objectives.{new}" for old, new in (
        ("blocks", "collapsed.blocks"), ("heteroscedastic", "collapsed.heteroscedastic"),
        ("coregional", "collapsed.coregional"), ("statistics", "collapsed.sums"),
        ("recomputed", "collapsed.recomputed"), ("online_bounds", "online.bounds"),
        ("online_svgp", "online.svgp"), ("conditioning", "online.conditioning"),
        ("gplvm", "latent.gplvm"), ("gpssm", "latent.gpssm"), ("psi", "latent.psi"),
        ("kalman", "latent.kalman"), ("streaming", "chunked"))},
    "sparsegp.covariances.streamed": "sparsegp.covariances.chunked",
}

NAMES: dict[str, str] = {
    "sparsegp.models.GPModel": "sparsegp.models.core.regression.Regression",
    "sparsegp.models.regression.GPModel": "sparsegp.models.core.regression.Regression",
    "sparsegp.models.base.nonzero": "sparsegp.models.core.data.nonzero",
    "sparsegp.models.base.signal_variance": "sparsegp.models.core.regression.signal_variance",
    "sparsegp.training.result.warn_interrupted": "sparsegp.training.interrupts.warn_interrupted",
    # "stream" means the online updates only; the sums over chunks of the data are "chunked"
    **{f"sparsegp.objectives.{old}": f"sparsegp.objectives.{new}" for old, new in (
        ("streaming.Stream", "chunked.ChunkedSums"),
        ("streaming.streamed_sum", "chunked.chunked_sum"),
        ("statistics.WhitenedStream", "collapsed.sums.WhitenedSums"),
        ("statistics.PowerEPStream", "collapsed.sums.PowerEPSums"),
        ("blocks.BlockPowerEPStream", "collapsed.blocks.BlockPowerEPSums"),
        ("recomputed.RecomputedStream", "collapsed.recomputed.RecomputedSums"),
        ("heteroscedastic.PointNoiseStream", "collapsed.heteroscedastic.PointNoiseSums"),
        ("gplvm.PsiStream", "latent.gplvm.PsiChunkedSums"),
        ("parametric.FeatureMapStream", "parametric.FeatureMapSums"))},
    **{f"sparsegp.covariances.{where}lookup_streamed": "sparsegp.covariances.lookup_chunked"
       for where in ("", "registry.")},
}

_COMPOSED = ("the models are composed of parts now (docs/architecture.md): what it gave is in "
             "sparsegp.models.Model and the functions of sparsegp.models.core")
REMOVED: dict[str, str] = {
    **{f"sparsegp.models.{name}": _COMPOSED for name in (
        "base.local_mean_std", "conditioning.Conditioning", "core.ModelCore",
        "coregional.CoregionalMixin", "dtypes.DtypeModule", "fitting.Fitting",
        "inducing.InducingMixin", "regression.Bounded", "svgp_diagnostics.SVGPDiagnostics",
        "svgp_predictions.SVGPPredictions", "svgp_targets.SVGPData",
        "svgp_training.SVGPTraining", "units.TargetUnits")},
    "sparsegp.models.predictions.Predicting": "the prediction methods are those of "
                                              "sparsegp.models.Model",
    "sparsegp.models.conditioning.fantasies_of": "a model's num_fantasies says it",
    "sparsegp.models.fitting.stall_nats": "sparsegp.models.core.fitting.stall_rule gives the "
                                          "rule",
}


def _warn(old: str, new: str, stacklevel: int) -> None:
    warnings.warn(f"{old} moved to {new}; import it from there", DeprecationWarning,
                  stacklevel=stacklevel + 1)


def former(module: str, name: str, stacklevel: int = 2) -> object:
    """The value a former name `module.name` stands for now (with a DeprecationWarning): a
    moved name, a moved module; an AttributeError for a removed or unknown one."""
    qualified = f"{module}.{name}"
    if qualified in NAMES:
        new_module, new_name = NAMES[qualified].rsplit(".", 1)
        _warn(qualified, NAMES[qualified], stacklevel + 1)
        return getattr(importlib.import_module(new_module), new_name)
    if qualified in MODULES:
        return importlib.import_module(qualified)  # the stand-in warns
    if qualified in REMOVED:
        raise AttributeError(f"{qualified} was removed: {REMOVED[qualified]}")
    raise AttributeError(f"module {module!r} has no attribute {name!r}")


class _StandIn(ModuleType):
    """A former module path: every attribute is the module's now (or a former name)."""

    def __init__(self, old: str, new: ModuleType) -> None:
        super().__init__(old, new.__doc__)
        self.__dict__["_new"] = new

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        qualified = f"{self.__name__}.{name}"
        if qualified in NAMES or qualified in REMOVED:
            return former(self.__name__, name, stacklevel=2)
        return getattr(self.__dict__["_new"], name)

    def __dir__(self) -> list[str]:
        return dir(self.__dict__["_new"])


class _Loader(importlib.abc.Loader):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        _warn(self.old, self.new, stacklevel=2)
        return _StandIn(self.old, importlib.import_module(self.new))

    def exec_module(self, module: ModuleType) -> None:
        return None


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the former module paths of `MODULES`."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        new = MODULES.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(fullname, new))


def install() -> None:
    """Let the former module paths import (once per process)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
