"""The `sparsegp` command line (also `python -m sparsegp`): a demo, fitting a model to a CSV
file and predicting with it, benchmarks and paper reproductions."""

# Only the standard library at the top: torch, numpy and the models are imported where a
# command needs them (`--version` and `--help` need none of them), inside `entry`'s handling
# of Ctrl-C, so that an interrupt while they load is reported like any other. A command's
# argument checks (its `check`: the files exist, the columns are there, the options agree)
# run before they are imported, so that a mistyped file name is an error at once.

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from .version import __version__

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import numpy as np

    from .kernels.stationary import RadialKernel
    from .models.core.regression import Regression

#: The pseudo-point family of `--approximation` (`objectives.collapsed.APPROXIMATIONS`, named
#: here so that the parser is built without importing torch; a test keeps the two equal).
PSEUDO_POINT = ("vfe", "fitc", "dtc", "pep")

#: `--kernel`'s names (`kernel_class` gives the classes).
KERNEL_NAMES = ("matern12", "matern32", "matern52", "se")


def kernel_class(name: str) -> Callable[..., RadialKernel]:
    """The kernel class of a `--kernel` name."""
    from .kernels import Matern12, Matern32, Matern52, SquaredExponential

    return {"se": SquaredExponential, "matern12": Matern12, "matern32": Matern32,
            "matern52": Matern52}[name]


def _demo_arguments(args: argparse.Namespace) -> None:
    """The demo's argument check, before torch is imported."""
    if str(args.out) == "-":
        raise ValueError("--out -: the demo writes a figure (PNG) into a folder, not text for "
                         "standard output (the table is printed there anyway); give a folder "
                         "name")


def _demo(args: argparse.Namespace) -> int:
    from .experiments.demo import format_table, run_demo

    rows, path = run_demo(args.out, num_inducing=args.num_inducing, progress=args.progress)
    print(format_table(rows))
    print(f"\nfigure written to {path}")
    return 0


def _fit_arguments(args: argparse.Namespace) -> tuple[Path, list[str]]:
    """The checks of `sparsegp fit`'s arguments that need neither torch nor the models (run
    before they are imported, which takes seconds): the output path, the data file, its
    columns and the options that exclude each other. Returns (the output path, the input
    columns)."""
    from .runtime.files import check_model_path
    from .runtime.tabular import csv_header

    if str(args.out) == "-":
        raise ValueError("--out -: a model is a binary file, not text for standard output; "
                         "give a file name such as model.pt")
    check_not_an_input(args.out, [args.data], "--out")
    out = check_model_path(args.out)  # before the fit, not after it
    names = csv_header(args.data)
    if args.target not in names:
        raise ValueError(f"--target {args.target!r} is not a column of {args.data}; it has {names}")
    features = (_listed_features(args.features, args.target) if args.features is not None
                else [n for n in names if n != args.target])
    if not features:
        raise ValueError(f"{args.data} has no input columns besides the target {args.target!r}")
    if args.blocks is not None and args.approximation not in ("fitc", "pep"):
        raise ValueError("--blocks applies to --approximation fitc (PITC) or pep")
    if args.alpha is not None and args.approximation not in PSEUDO_POINT:
        raise ValueError(f"--alpha applies to the pseudo-point family ({', '.join(PSEUDO_POINT)}),"
                         f" not to --approximation {args.approximation}")
    if args.approximation == "exact" and args.num_inducing is not None:
        raise ValueError("-M does not apply to --approximation exact")
    return out, features


def _fit(args: argparse.Namespace) -> int:
    from .runtime.shown_warnings import on_shown_warnings

    out, features = args.checked  # `main` ran `_fit_arguments` before the imports
    shown: list[str] = []  # the warnings the run printed (a ScaleWarning at construction, ...)

    def counted(message: Warning | str, category: type[Warning]) -> bool:
        shown.append(category.__name__)
        return True  # shown as before, and counted

    with on_shown_warnings(counted):
        return _fit_model(args, out, features, shown)


def _fit_model(args: argparse.Namespace, out: Path, features: list[str], shown: list[str]) -> int:
    from .diagnostics.convergence import limit_message
    from .models import GPR, KISSGP, RFF, SGPR, SSGP
    from .partition import cluster_blocks
    from .runtime.tabular import read_csv
    from .training.result import TERMINATED_STATUS, FitTerminated

    _, data = read_csv(args.data, columns=[*features, args.target])  # only these are parsed
    X, y = data[:, :-1], data[:, -1]
    kernel = kernel_class(args.kernel)(ard=True)
    # y is standardised inside as every regression model does by default; X with --standardize
    common = dict(kernel=kernel, mean=args.mean, standardize_X=args.standardize)
    M = args.num_inducing  # None: the model's own default (SGPR: min(N, 100) inducing points)
    model: Regression
    if args.approximation == "exact":
        check_exact_memory(X.shape[0])
        model = GPR(X, y, **common)
    elif args.approximation == "ski":  # -M grid points per input dimension
        model = KISSGP(X, y, seed=args.seed, **({} if M is None else {"grid_size": M}), **common)
    elif args.approximation in ("rff", "ssgp"):  # -M spectral pairs
        model = (RFF if args.approximation == "rff" else SSGP)(
            X, y, seed=args.seed, **({} if M is None else {"num_features": M}), **common)
    else:
        alpha = 0.5 if args.approximation == "pep" and args.alpha is None else args.alpha
        blocks = None if args.blocks is None else cluster_blocks(X, args.blocks, seed=args.seed)
        model = SGPR(X, y, inducing_points=args.num_inducing, approximation=args.approximation,
                     alpha=alpha, seed=args.seed, blocks=blocks, **common)
    model.feature_names = features  # saved with the model; `predict` reads these columns
    start = time.perf_counter()
    try:  # after Ctrl-C the exit status is 130; after SIGTERM 143, once the model is saved
        result, status = model.fit(maxiter=args.maxiter, progress=args.progress,
                                   diagnose=False), 130
    except FitTerminated as stop:
        result, status = stop.result, TERMINATED_STATUS
    seconds = time.perf_counter() - start
    print(f"{type(model).__name__} ({args.approximation}) on {X.shape[0]} points, "
          f"{X.shape[1]} inputs: {result}; {seconds:.2f} s")
    note = limit_message(result, type(model).__name__, X.shape[0], "--maxiter", "iterations")
    if note is not None:  # the checks print below instead of warning; the limit is said here
        print(f"sparsegp fit: warning: {note} (here: --maxiter)", file=sys.stderr)
        shown.append("the iteration limit")
    model.metadata.update(target=args.target)
    if result.interrupted and not args.save_interrupted:
        print(f"sparsegp fit: interrupted; no model written (--save-interrupted writes the last "
              f"accepted parameters to {out})", file=sys.stderr)
        return status
    if status == TERMINATED_STATUS:  # SIGTERM: save at once, before a scheduler's SIGKILL
        report = "(no diagnostics: the fit was stopped by SIGTERM)"
    else:
        try:  # objective, bounds, noise and the checks, in place of a warning
            report = str(model.diagnostics())
        except Exception as err:  # noqa: BLE001 - a report must not cost the user the model
            report = f"(the diagnostics could not be computed: {type(err).__name__}: {err})"
    print(with_run_warnings(report, shown))
    model.save(out)
    print(f"model written to {out}")
    return status if result.interrupted else 0


def with_run_warnings(report: str, shown: list[str]) -> str:
    """The diagnostics `report` of `sparsegp fit`, its count of warnings made that of the whole
    run: the checks' own, and those printed on standard error while it ran (`shown`: their
    categories), so that it never ends "no warnings" after a warning."""
    if not shown:
        return report
    kinds = ", ".join(dict.fromkeys(shown))
    during = (f"{len(shown)} during the run, printed on standard error above ({kinds})")
    lines = report.splitlines()
    if lines and lines[-1] == "no warnings":
        return "\n".join([*lines[:-1], f"warnings: {during}; none from these checks"])
    if "warnings:" in lines:  # the checks' list, then these
        return f"{report}\n  - and {during}"
    return f"{report}\nwarnings: {during}"


def check_exact_memory(n: int) -> None:
    """Refuse, before any model is built, an exact GP whose N×N matrices exceed the machine's
    memory (a `MemoryRequestError` with the bytes it would need and the sparse alternative)."""
    from .models.gpr import EXACT_MATRICES
    from .models.gpr import check_exact_memory as check

    check(n, what=f"--approximation exact on {n} rows ({EXACT_MATRICES} {n}×{n} float64 "
          "matrices)", advice="use a sparse approximation instead (--approximation vfe, the "
          "default, with -M inducing points)")


def check_not_an_input(out: Path, inputs: list[Path], option: str) -> None:
    """Refuse an output path that is one of the command's inputs (it would be overwritten)."""
    for path in inputs:
        if Path(out).exists() and Path(path).exists() and os.path.samefile(out, path):
            raise ValueError(f"{option} {out} is the command's input {path}: writing there "
                             "would overwrite it; give another file name")


def _listed_features(text: str, target: str) -> list[str]:
    """The column names of --features: comma-separated, none empty, repeated or the target."""
    features = [f.strip() for f in text.split(",")]
    if not all(features):
        raise ValueError(f"--features must be comma-separated column names; got {text!r}")
    if target in features:
        raise ValueError(f"--features includes the target {target!r}: a model cannot take its "
                         "own target as an input")
    if len(set(features)) < len(features):
        raise ValueError(f"--features names a column twice: {text!r}")
    return features


def _predict_arguments(args: argparse.Namespace) -> Path | None:
    """The checks of `sparsegp predict`'s arguments that need neither torch nor the models
    (run before they are imported): the model and data files exist, the output is neither.
    Returns the output path (None: standard output)."""
    out = None if args.out is None or str(args.out) == "-" else args.out  # "-": stdout
    if out is not None:  # before anything is read or computed
        check_not_an_input(out, [args.model, args.data], "--out")
    if Path(args.model).is_dir():  # the messages of `load` and `read_csv`
        raise IsADirectoryError(f"{args.model} is a folder, not a model file")
    if not Path(args.model).is_file():
        raise FileNotFoundError(f"no such model file: {args.model}")
    if not Path(args.data).is_file():
        raise FileNotFoundError(f"no such data file: {args.data}")
    return out


def _predict(args: argparse.Namespace) -> int:
    from .models import load
    from .models.core.regression import Regression
    from .runtime.tabular import csv_header, read_csv, write_csv

    out = args.checked  # `main` ran `_predict_arguments` before the imports
    model = load(args.model)
    if not hasattr(model, "feature_names"):  # the random-input models predict from latents
        raise TypeError(f"sparsegp predict takes models of inputs X (regression and "
                        f"classification); a {type(model).__name__} has none: use it from Python")
    # by name when the model has them (metadata["features"]: files written before feature_names)
    features = model.feature_names or model.metadata.get("features")
    if features is None:  # fitted on an unnamed array: the file holds exactly its inputs
        header = csv_header(args.data)
        if len(header) != model.input_dim:
            raise ValueError(f"the model was fitted on an array without column names, so "
                             f"{args.data} must hold exactly its {model.input_dim} input "
                             f"column(s), in the order of fitting; it has {len(header)}: {header}")
        features = header
    _, X = read_csv(args.data, columns=list(features))
    if isinstance(model, Regression):
        mean, var = model.predict(X, include_noise=not args.latent)
    else:  # SVGP, SGPC: y's mean and variance (for labels: p(y = 1) and p(1 − p))
        mean, var = model.predict_f(X) if args.latent else model.predict_y(X)
    text = write_csv(out, *prediction_columns(mean, var))
    if out is None:
        sys.stdout.write(text)
    else:
        print(f"{X.shape[0]} predictions written to {args.out}")
    return 0


def prediction_columns(mean: np.ndarray, var: np.ndarray) -> tuple[list[str], list[np.ndarray]]:
    """(header, columns) of predictions: mean and variance of one output [N*], or mean_p and
    variance_p of each of P outputs (classes of a multi-class model, latent functions)
    [N*, P]."""
    if mean.ndim == 1:
        return ["mean", "variance"], [mean, var]
    P = mean.shape[1]
    names = [f"mean_{p}" for p in range(P)] + [f"variance_{p}" for p in range(P)]
    return names, [*mean.T, *var.T]


def _bench(args: argparse.Namespace) -> int:
    from .benchmarking import compare, convolutional, fit, interdomain, kissgp, speed, startup

    benches = {"speed": speed, "interdomain": interdomain, "conv": convolutional,
               "kissgp": kissgp, "compare": compare, "fit": fit, "startup": startup}
    return benches[args.which].main(args.args)


def _experiment(args: argparse.Namespace) -> int:
    from .experiments import (
        additive,
        approximations,
        bauer2016,
        bui2017,
        likelihoods,
        randominputs,
        streaming,
    )
    from .experiments.vdw2018 import conv as vdw2018_conv
    from .experiments.vdw2018 import interdomain as vdw2018_interdomain

    runner = {"bauer2016": bauer2016, "vdw2018-interdomain": vdw2018_interdomain,
              "vdw2018-conv": vdw2018_conv, "bui2017": bui2017,
              "randominputs": randominputs, "approximations": approximations,
              "additive": additive, "streaming": streaming,
              "likelihoods": likelihoods}[args.which]
    return runner.main(args.args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sparsegp", description=__doc__)
    p.add_argument("--version", action="version", version=f"sparsegp {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="exact GP, VFE, FITC and PEP(0.5) on the bundled Snelson data")
    d.add_argument("--out", type=Path, default=Path("sparsegp-demo"),
                   help="folder for the figure (default: ./sparsegp-demo)")
    d.add_argument("-M", "--num-inducing", type=int, default=12,
                   help="inducing points of the sparse models (default: 12)")
    d.add_argument("--progress", action="store_true", help="show progress bars")
    d.set_defaults(run=_demo, check=_demo_arguments)

    f = sub.add_parser("fit", help="fit a model to a CSV file and save it")
    f.add_argument("data", type=Path, help="CSV file with a header row")
    f.add_argument("--target", required=True, help="name of the target column")
    f.add_argument("--features", help="comma-separated input columns (default: all others)")
    f.add_argument("--approximation", default="vfe",
                   choices=[*PSEUDO_POINT, "exact", "rff", "ssgp", "ski"],
                   help="a member of the pseudo-point family, the exact GP, random Fourier "
                   "features / the sparse spectrum GP (then -M counts spectral pairs), or "
                   "KISS-GP (ski: -M grid points per input dimension, at most 3 inputs)")
    f.add_argument("--alpha", type=float, help="Power-EP power in (0, 1] (with pep; default 0.5)")
    f.add_argument("-M", "--num-inducing", type=int,
                   help="inducing points (default min(N, 100)), spectral pairs (rff, ssgp: "
                   "default 100) or grid points per input (ski: default 100)")
    f.add_argument("--mean", default="zero", choices=["zero", "constant", "linear"],
                   help="prior mean function (trained with the other parameters)")
    f.add_argument("--blocks", type=int, metavar="B",
                   help="block Power EP / PITC (with fitc or pep): B blocks by k-means")
    f.add_argument("--kernel", default="se", choices=KERNEL_NAMES,
                   help="covariance function, with a lengthscale per input: squared "
                   "exponential (se, the default) or Matérn 1/2, 3/2, 5/2")
    f.add_argument("--standardize", action="store_true",
                   help="standardise the columns of X inside (y always is)")
    f.add_argument("--maxiter", type=int, default=None,
                   help="most optimiser iterations (default: the model's own: 2000 L-BFGS-B "
                   "iterations, 300 Adam steps for ski); the fit may stop earlier when it has "
                   "converged")
    f.add_argument("--seed", type=int, default=0, help="seed of the k-means++ initialisation")
    f.add_argument("--progress", action="store_true", help="show a progress bar")
    f.add_argument("--out", type=Path, default=Path("model.pt"),
                   help="file the fitted model is written to (default: model.pt; replaced "
                   "whole if it exists; `sparsegp predict` and sparsegp.load read it)")
    f.add_argument("--save-interrupted", action="store_true",
                   help="on Ctrl-C (exit status 130) or SIGTERM (143), still write the model "
                        "at the last accepted parameters")
    f.set_defaults(run=_fit, check=_fit_arguments)

    q = sub.add_parser("predict", help="predict with a saved model at the rows of a CSV file")
    q.add_argument("model", type=Path,
                   help="model file written by `sparsegp fit` or model.save() in Python")
    q.add_argument("data", type=Path, help="CSV file with the model's input columns")
    q.add_argument("--out", type=Path, help="output CSV, replaced whole if it exists "
                   "(default, or -: standard output)")
    q.add_argument("--latent", action="store_true",
                   help="variance of the latent f (default: of noisy y, noise included)")
    q.set_defaults(run=_predict, check=_predict_arguments)

    b = sub.add_parser("bench", help="benchmarks: speed (seconds and memory of the VFE, FITC "
                       "and PEP objectives and gradients), interdomain (inducing deltas against "
                       "points), conv (images per second of a convolutional SVGP), kissgp "
                       "(KISS-GP's evidence and gradient against GPyTorch's and a dense one), "
                       "compare (sparsegp and its peers, GPyTorch and GPflow where installed, "
                       "on the same data), fit (time until the default fit's test scores are "
                       "within 1%% of a converged fit's), startup (seconds to import the "
                       "package and to answer --help); `sparsegp bench kissgp --help` etc. "
                       "for the options",
                       epilog="The repository's benchmarks/ folder (not installed) holds the "
                       "development benchmarks, each a script measuring one change against what "
                       "it replaced, and RESULTS.md with every measurement of record: see "
                       "benchmarks/README.md.")
    b.add_argument("which", choices=["speed", "interdomain", "conv", "kissgp", "compare", "fit",
                                     "startup"],
                   help="which benchmark")
    b.add_argument("args", nargs=argparse.REMAINDER, help="options of the benchmark")
    b.set_defaults(run=_bench)

    x = sub.add_parser("experiment", help="paper reproductions: `sparsegp experiment bauer2016 "
                       "--help`, `sparsegp experiment vdw2018-interdomain --help`, "
                       "`sparsegp experiment vdw2018-conv --help`, "
                       "`sparsegp experiment bui2017 --help`, "
                       "`sparsegp experiment randominputs --help`, "
                       "`sparsegp experiment approximations --help`, "
                       "`sparsegp experiment additive --help`, "
                       "`sparsegp experiment streaming --help`, "
                       "`sparsegp experiment likelihoods --help`")
    x.add_argument("which", choices=["bauer2016", "vdw2018-interdomain", "vdw2018-conv", "bui2017",
                                     "randominputs", "approximations", "additive",
                                     "streaming", "likelihoods"],
                   help="which experiment")
    x.add_argument("args", nargs=argparse.REMAINDER, help="options of the experiment")
    x.set_defaults(run=_experiment)
    return p


#: The Python arguments a library message may name, and `sparsegp fit`'s options for them.
FIT_OPTIONS = {"standardize_": "--standardize", "inducing_points": "-M",
               "num_features": "-M", "grid_size": "-M", "num_blocks": "--blocks"}


def command_text(message: str, command: str) -> str:
    """A library message as the command line says it: where it names the Python arguments
    of `sparsegp fit`'s options, the options are named after it."""
    if command != "fit":
        return message
    options = sorted({option for name, option in FIT_OPTIONS.items() if name in message})
    return f"{message} (on the command line: {', '.join(options)})" if options else message


def _show_warning(command: str) -> Callable[..., None]:
    def show(message: Warning | str, category: type[Warning], *_: object, **__: object) -> None:
        print(f"sparsegp {command}: {category.__name__}: {command_text(str(message), command)}",
              file=sys.stderr)
    return show


def entry() -> int:
    """The `sparsegp` program (and `python -m sparsegp`): `main` on the process's arguments,
    its warnings printed as one line each (`sparsegp fit: ScaleWarning: ...`);
    `sparsegp experiment ...` first makes the process keep freed memory for reuse (long runs
    of same-sized steps; `runtime/allocator.py`). Calling `main` from Python changes no such setting.
    Ctrl-C at any point, the imports of torch and the models included, ends it with one line
    (`sparsegp fit: interrupted`) and exit status 130. SIGTERM during a fit ends it with
    status 143 once that fit has stopped (`sparsegp fit --save-interrupted` first writes the
    model); outside a fit SIGTERM keeps its own action."""
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    try:
        if command == "experiment":
            from .runtime.allocator import keep_freed_memory
            keep_freed_memory()
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning(command)
            status = main()
    except KeyboardInterrupt:
        _ignore_further_interrupts()
        print(f"sparsegp{f' {command}' if command in COMMANDS else ''}: interrupted",
              file=sys.stderr)
        return 130
    if status == 130:
        _ignore_further_interrupts()
    return status


#: The commands of `sparsegp`.
COMMANDS = ("demo", "fit", "predict", "bench", "experiment")


def _ignore_further_interrupts() -> None:
    """Let the interrupted program exit in peace: another Ctrl-C while it shuts down would
    print a traceback from wherever the interpreter is."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to change
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:  # the arguments' own errors (a missing file, a column that is not there) first:
        if hasattr(args, "check"):  # importing torch and the models takes seconds
            args.checked = args.check(args)
    except (ValueError, TypeError, OSError) as err:
        return _error(args.command, err)
    from .training.interrupts import interrupts_end_run
    from .training.result import TERMINATED_STATUS, FitTerminated

    try:
        # an interrupted fit ends the commands that run many (bench, experiment, demo);
        # `fit` gets it back after Ctrl-C or SIGTERM, to save it with --save-interrupted
        with interrupts_end_run(True if args.command != "fit" else None):
            return args.run(args)
    except KeyboardInterrupt:
        print(f"sparsegp {args.command}: interrupted", file=sys.stderr)
        return 130
    except FitTerminated:  # SIGTERM during a fit: exit status 143
        print(f"sparsegp {args.command}: terminated (SIGTERM)", file=sys.stderr)
        return TERMINATED_STATUS
    except (ValueError, TypeError, OSError, RuntimeError, MemoryError) as err:
        return _error(args.command, err)


def _error(command: str, err: Exception) -> int:
    """Print an error of `command` as its one line; returns the exit status, 2."""
    from .runtime.allocator import allocation_failure

    message = allocation_failure(err) or str(err)
    print(f"sparsegp {command}: error: {command_text(message, command)}", file=sys.stderr)
    return 2
