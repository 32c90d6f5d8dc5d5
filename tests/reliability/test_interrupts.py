"""Ctrl-C and SIGTERM at any moment of `fit()`, for every model's plan: the setup before the
first step (the optimiser's construction, the first batch), the steps, the work after the
loop (final site sweeps, q(u) at its optimum, the energy) and the checks after fitting.

Each interrupt is injected deterministically: a function that the fit calls at that moment
is wrapped to raise KeyboardInterrupt (Ctrl-C) or to send this process SIGTERM at its n-th
call, optionally after it ran (an interrupt in the middle of a step). Whatever the moment,
the model holds the values it had when the interrupted call began (the starting values before
the first step; the last accepted step's values otherwise; SVGP's full-batch plan then puts
q(u) at its optimum for the hyperparameters kept, as after any interrupted L-BFGS-B), it
predicts finite values, and the result says `interrupted=True`: `fit()` returns it after
Ctrl-C and raises it inside `sparsegp.FitTerminated` (exit status 143) after SIGTERM.

Scripts of several fits run in a subprocess: SIGTERM during the second of three ends the
program with status 143 after that fit (its `finally:` saves the model at its last accepted
state), Ctrl-C does not, and `interrupts_end_run(False)` keeps `fit()` returning.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.training import ep, interrupts_end_run, lbfgs, minibatch
from sparsegp.training.guard import FitGuard

from ..conftest import make_problem

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM to oneself: POSIX")


def values(model: Any) -> dict[str, torch.Tensor]:
    """Copies of every parameter and buffer of the model (the sites of SGPC included)."""
    named = [*model.named_parameters(), *model.named_buffers()]
    return {name: t.detach().clone() for name, t in named if t is not None}


def _signal_checkpoint() -> None:
    """A Python call: a pending signal's handler runs on entering it."""


@dataclass
class Moment:
    """Interrupt the `call`-th call of `owner.name` (`after`: once it has run) by Ctrl-C or
    SIGTERM, and remember the model's values when that call began."""

    owner: Any
    name: str
    call: int = 1
    after: bool = False
    seen: list[dict[str, torch.Tensor]] = field(default_factory=list)

    def install(self, monkeypatch: pytest.MonkeyPatch, model: Any, how: str) -> None:
        real, calls = getattr(self.owner, self.name), [0]

        def interrupted(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            if calls[0] != self.call:
                return real(*args, **kwargs)
            self.seen.append(values(model))
            if self.after:
                real(*args, **kwargs)
            if how == "ctrl-c":
                raise KeyboardInterrupt
            os.kill(os.getpid(), signal.SIGTERM)
            _signal_checkpoint()  # SIGTERM's handler raises KeyboardInterrupt here
            raise AssertionError("SIGTERM did not stop the fit")

        monkeypatch.setattr(self.owner, self.name, interrupted)


@dataclass
class Case:
    name: str
    build: Callable[[], Any]
    fit: dict[str, Any]
    moment: Callable[[], Moment]
    inputs: Callable[[Any], np.ndarray]
    recomputed: tuple[str, ...] = ()  # set from the others after an interrupted loop


def _regression(D: int = 2) -> tuple[np.ndarray, np.ndarray]:
    return make_problem(3, N=40, D=D)


def _X(model: Any) -> np.ndarray:
    return np.linspace(-2.0, 2.0, 3 * model.input_dim).reshape(3, model.input_dim)


def _labels() -> tuple[np.ndarray, np.ndarray]:
    X, y = _regression()
    return X, (y > np.median(y)).astype(float)


def _svgp() -> Any:
    return sg.SVGP(*_regression(), inducing_points=5)


def _kissgp() -> Any:
    return sg.KISSGP(*_regression(D=1), grid_size=20)


def _sgpc() -> Any:
    return sg.SGPC(*_labels(), inducing_points=5)


def _rff() -> Any:
    return sg.RFF(*_regression(), num_features=10)


def _ssgp() -> Any:
    return sg.SSGP(*_regression(), num_features=10)


def _gplvm() -> Any:
    X, y = _regression()
    return sg.BayesianGPLVM(np.c_[X, y], latent_dim=1, inducing_points=5)


def _gpssm() -> Any:
    X, y = _regression()
    return sg.GPSSM(np.c_[X, y], state_dim=1, inducing_points=5)


def fit_returning(model: Any, how: str = "ctrl-c", **options: Any) -> Any:
    """model.fit(progress=False, **options): its result after Ctrl-C, that of the
    `FitTerminated` it must raise after SIGTERM; a test failure if KeyboardInterrupt
    escapes or SIGTERM lets it return."""
    try:
        result = model.fit(progress=False, **options)
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped fit()")
    except sg.FitTerminated as stop:
        assert how == "sigterm" and stop.code == 143 and isinstance(stop, SystemExit)
        assert "SIGTERM" in stop.result.message
        return stop.result
    assert how == "ctrl-c", "fit() returned after SIGTERM"
    return result


MINIBATCH = {"batch_size": 10, "epochs": 2}
STOCHASTIC = {"schedule": "stochastic", "batch_size": 20, "epochs": 1}

CASES = [
    # the optimiser, the first batch and the first step of minibatch training
    Case("SVGP minibatch, Adam's construction", _svgp, MINIBATCH,
         lambda: Moment(torch.optim.Adam, "__init__"), _X),
    Case("SVGP minibatch, the first batch", _svgp, MINIBATCH,
         lambda: Moment(minibatch._Batches, "__iter__"), _X),
    Case("SVGP minibatch, the first natural-gradient step", _svgp, MINIBATCH,
         lambda: Moment(minibatch, "natural_update", after=True), _X),
    # full batch: L-BFGS-B's setup, and q(u) set at its optimum after it
    Case("SVGP full batch, the progress bar", _svgp, {"maxiter": 5},
         lambda: Moment(lbfgs, "progress_bar"), _X, recomputed=("q_mu", "q_sqrt")),
    Case("SVGP full batch, q(u) at its optimum after L-BFGS-B", _svgp, {"maxiter": 5},
         lambda: Moment(sg.SVGP, "natural_gradient_step", after=True), _X),
    # KISS-GP: Adam's construction, a step half taken, the grid check after fitting
    Case("KISSGP, Adam's construction", _kissgp, {"maxiter": 5},
         lambda: Moment(torch.optim.Adam, "__init__"), _X),
    Case("KISSGP, inside the third Adam step", _kissgp, {"maxiter": 5},
         lambda: Moment(torch.optim.Adam, "step", call=3, after=True), _X),
    Case("KISSGP, the grid check after fitting", _kissgp, {"maxiter": 3},
         lambda: Moment(sg.KISSGP, "_warn_coarse_grid"), _X),
    # SGPC, stochastic schedule: Adam's construction, the final sweeps, the final energy
    Case("SGPC stochastic, Adam's construction", _sgpc, STOCHASTIC,
         lambda: Moment(torch.optim.Adam, "__init__"), _X),
    Case("SGPC stochastic, the final site sweeps", _sgpc, STOCHASTIC,
         lambda: Moment(ep, "site_sweeps", call=3, after=True), _X),
    Case("SGPC stochastic, the final energy", _sgpc, STOCHASTIC,
         lambda: Moment(sg.SGPC, "log_marginal_likelihood", call=2), _X),
    # SGPC, full schedule: inside L-BFGS-B, the final sweeps and the final energy
    Case("SGPC full, L-BFGS-B's first evaluation", _sgpc, {"maxiter": 2, "inner_maxiter": 5},
         lambda: Moment(sg.SGPC, "training_loss"), _X),
    Case("SGPC full, the final site sweeps", _sgpc, {"maxiter": 1, "inner_maxiter": 3},
         lambda: Moment(ep, "site_sweeps", call=2, after=True), _X),
    Case("SGPC full, the final energy", _sgpc, {"maxiter": 1, "inner_maxiter": 3},
         lambda: Moment(sg.SGPC, "log_marginal_likelihood"), _X),
    # RFF and SSGP: the checks after fitting
    Case("RFF, the checks after fitting", _rff, {"maxiter": 5},
         lambda: Moment(sg.RFF, "diagnostics"), _X),
    Case("SSGP, the checks after fitting", _ssgp, {"maxiter": 5},
         lambda: Moment(sg.RFF, "diagnostics"), _X),
    # L-BFGS-B's setup for the exact and collapsed regressions
    Case("SGPR, the progress bar", lambda: sg.SGPR(*_regression(), inducing_points=5),
         {"maxiter": 5}, lambda: Moment(lbfgs, "progress_bar"), _X),
    Case("GPR, the progress bar", lambda: sg.GPR(*_regression()), {"maxiter": 5},
         lambda: Moment(lbfgs, "progress_bar"), _X),
    # latent-input models: both plans
    Case("GP-LVM full batch, the first evaluation", _gplvm, {"maxiter": 5},
         lambda: Moment(sg.BayesianGPLVM, "training_loss"), _X),
    Case("GP-LVM minibatch, Adam's construction", _gplvm, MINIBATCH,
         lambda: Moment(torch.optim.Adam, "__init__"), _X),
    Case("GPSSM minibatch, Adam's construction", _gpssm, MINIBATCH,
         lambda: Moment(torch.optim.Adam, "__init__"), _X),
    Case("GPSSM minibatch, the second natural-gradient step", _gpssm, MINIBATCH,
         lambda: Moment(minibatch, "natural_update", call=2, after=True), _X),
]


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_an_interrupt_at_any_moment_returns_the_last_accepted_model(case, how, monkeypatch):
    model = case.build()
    moment = case.moment()
    moment.install(monkeypatch, model, how)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.warns(RuntimeWarning, match="interrupted") as caught:
        result = fit_returning(model, how, **case.fit)
    monkeypatch.undo()
    said = [str(w.message) for w in caught if "interrupted" in str(w.message)]
    assert len(said) == 1 and ("FitTerminated" in said[0]) == (how == "sigterm"), said
    assert signal.getsignal(signal.SIGTERM) is before
    assert result.interrupted and not result.success and "interrupted" in result.message
    assert len(moment.seen) == 1  # the moment came, once
    now = values(model)
    assert now.keys() == moment.seen[0].keys()
    for name, value in moment.seen[0].items():
        assert torch.isfinite(now[name]).all(), name
        if name not in case.recomputed:
            torch.testing.assert_close(now[name], value, rtol=0, atol=0, msg=name)
    mean, var = model.predict_f(case.inputs(model))
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(var)) and np.all(var >= 0)


@pytest.mark.parametrize("build, fit", [
    (lambda X, y: sg.SGPR(X, y, inducing_points=5), {}),
    (lambda X, y: sg.SVGP(X, y, inducing_points=5), {"batch_size": 10, "epochs": 50}),
    (lambda X, y: sg.KISSGP(X, y, grid_size=20), {"maxiter": 50}),
])
def test_sigterm_from_a_callback_stops_a_fit_as_ctrl_c_does_and_the_model_is_kept(build, fit):
    X, y = make_problem(7, N=30)
    model = build(X, y)
    before = signal.getsignal(signal.SIGTERM)

    def terminate(i, objective):
        if i == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fit_returning(model, "sigterm", callback=terminate, **fit)
    assert result.interrupted and result.iterations >= 2
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is put back
    mean, var = model.predict(X[:3])
    assert np.all(np.isfinite(mean)) and np.all(var > 0)


@pytest.mark.parametrize("case", [c for c in CASES if c.name in {
    "KISSGP, the grid check after fitting", "RFF, the checks after fitting",
    "SVGP full batch, q(u) at its optimum after L-BFGS-B"}],
    ids=lambda c: c.name)
def test_the_warning_of_an_interrupt_after_the_steps_names_the_caller_of_fit(case, monkeypatch):
    model = case.build()
    case.moment().install(monkeypatch, model, "ctrl-c")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fit_returning(model, **case.fit)
    assert result.interrupted and "interrupted" in result.message
    interrupted = [w for w in caught if "interrupted" in str(w.message)]
    assert len(interrupted) == 1 and interrupted[0].category is RuntimeWarning
    assert interrupted[0].filename == __file__


def test_the_checks_of_a_fitted_rff_warn_at_the_caller_of_fit():
    X, y = _regression()
    with pytest.warns(sg.ApproximationWarning, match="can interpolate the data") as caught:
        sg.RFF(X, y, num_features=20).fit(maxiter=3, progress=False)  # 2R = N
    assert {w.filename for w in caught if "interpolate" in str(w.message)} == {__file__}


def test_a_guard_inside_a_guard_of_the_same_model_leaves_the_interrupt_to_the_outer():
    model = sg.SGPR(*_regression(), inducing_points=5)
    start = values(model)
    with pytest.warns(RuntimeWarning, match="interrupted") as caught:
        with FitGuard(model) as outer:
            with FitGuard(model) as inner:
                with torch.no_grad():
                    model.kernel.raw_lengthscale.add_(1.0)  # never accepted
                raise KeyboardInterrupt
    assert inner.result is None and len(caught) == 1
    result = outer.interrupted_result()
    assert result.interrupted and result.iterations == 0 and np.isnan(result.objective)
    for name, value in start.items():
        torch.testing.assert_close(values(model)[name], value, rtol=0, atol=0, msg=name)


def test_a_guard_of_another_model_answers_for_its_own_model_only():
    first, second = (sg.SGPR(*_regression(), inducing_points=5) for _ in range(2))
    with FitGuard(first) as outer:
        first.fit(maxiter=3, progress=False)  # accepted
        fitted = values(first)
        with pytest.warns(RuntimeWarning, match="interrupted"):
            with FitGuard(second) as inner:
                second.fit(maxiter=3, progress=False)
                raise KeyboardInterrupt
        assert inner.interrupted_result().interrupted and outer.result is None
    for name, value in fitted.items():
        torch.testing.assert_close(values(first)[name], value, rtol=0, atol=0, msg=name)


def _stop_at_second(how: str) -> Callable[[int, float], None]:
    """A callback that stops the fit at its second iteration by Ctrl-C or SIGTERM."""
    def stop(i, objective):
        if i == 2:
            if how == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)
                _signal_checkpoint()
            raise KeyboardInterrupt
    return stop


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_inside_interrupts_end_run_an_interrupted_fit_raises_with_the_model_kept(how):
    X, y = make_problem(7, N=30)
    kept, ended = sg.SGPR(X, y, inducing_points=5), sg.SGPR(X, y, inducing_points=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        returned = fit_returning(kept, how, callback=_stop_at_second(how))
        # inside: Ctrl-C too ends the run, SIGTERM still as FitTerminated (exit status 143)
        with interrupts_end_run(), pytest.raises(
                KeyboardInterrupt if how == "ctrl-c" else sg.FitTerminated):
            ended.fit(callback=_stop_at_second(how), progress=False)
        with interrupts_end_run(False):  # off: both return
            assert sg.SGPR(X, y, inducing_points=5).fit(
                callback=_stop_at_second(how), progress=False).interrupted
            with interrupts_end_run(None):  # the default again, inside
                assert fit_returning(sg.SGPR(X, y, inducing_points=5), how,
                                     callback=_stop_at_second(how)).interrupted
    assert returned.interrupted
    for name, value in values(kept).items():  # the same last accepted state either way
        torch.testing.assert_close(values(ended)[name], value, rtol=0, atol=0, msg=name)


def test_a_sigterm_handler_of_the_program_is_left_to_answer():
    """A program that handles (or ignores) SIGTERM itself asked for that: `fit()` leaves the
    handler in place, and the fit goes on."""
    X, y = make_problem(7, N=30)
    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = sg.SGPR(X, y, inducing_points=5).fit(
                maxiter=5, callback=_stop_at_second("sigterm"), progress=False)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert received == [signal.SIGTERM]
    assert result.interrupted and "KeyboardInterrupt" in result.message  # the callback's own


def test_sigterm_in_a_fit_inside_another_fit_ends_the_outer_one_at_its_accepted_state():
    """A callback that fits another model: SIGTERM there stops both fits, each model at its
    last accepted state, and only the outer `fit()` raises `FitTerminated`."""
    X, y = make_problem(7, N=30)
    outer, inner = sg.SGPR(X, y, inducing_points=5), sg.SGPR(X, y, inducing_points=5)
    seen = {}

    def fit_inner(i, objective):
        if i == 2:
            seen["outer"] = objective
            inner.fit(callback=_stop_at_second("sigterm"), progress=False)

    before = signal.getsignal(signal.SIGTERM)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fit_returning(outer, "sigterm", callback=fit_inner)
    assert signal.getsignal(signal.SIGTERM) is before
    assert result.interrupted and result.iterations == 2
    assert -float(outer.training_loss()) == pytest.approx(seen["outer"], rel=1e-10)


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
@pytest.mark.parametrize("command", ["bench", "experiment", "fit"])
def test_an_interrupted_fit_ends_bench_and_experiment_but_not_fit(command, how, monkeypatch):
    """`sparsegp bench`/`experiment` run fit after fit: Ctrl-C in one ends the program with
    status 130, SIGTERM with 143; `sparsegp fit` gets the result back after Ctrl-C (to save it)
    and ends with 143 after SIGTERM."""
    from sparsegp import cli

    X, y = make_problem(7, N=30)
    started = []

    def run(args):
        for _ in range(2):
            started.append(1)
            sg.SGPR(X, y, inducing_points=5).fit(callback=_stop_at_second(how), progress=False)
        return 0

    monkeypatch.setattr(cli, {"bench": "_bench", "experiment": "_experiment",
                              "fit": "_fit"}[command], run)
    monkeypatch.setattr(cli, "_fit_arguments", lambda args: None)  # no data.csv to check
    argv = {"bench": ["bench", "speed"], "experiment": ["experiment", "streaming"],
            "fit": ["fit", "data.csv", "--target", "y"]}[command]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        status = cli.main(argv)
    expected = {("fit", "ctrl-c"): (0, 2)}.get((command, how),
                                               (130 if how == "ctrl-c" else 143, 1))
    assert (status, len(started)) == expected


# -- scripts of several fits, in a subprocess -------------------------------------------------
#: Three fits in a row of one model; the second sends this process `signal` from its callback
#: at iteration 2 and records the accepted objective it was given there. `finally:` saves the
#: model (as a user's script would) and notes which fits ran and how they ended.
SCRIPT = textwrap.dedent("""
    import json, os, signal, sys, warnings
    import sparsegp as sg
    from sparsegp.training import interrupts_end_run

    how, out, log = sys.argv[1], sys.argv[2], sys.argv[3]
    warnings.simplefilter("ignore", sg.ConvergenceWarning)  # maxiter=6
    X, y = sg.datasets.snelson()
    model = sg.SGPR(X[::4], y[::4], inducing_points=5)
    notes = {"started": [], "results": [], "stopped_at": None}

    def stop(i, objective):
        if len(notes["started"]) == 2 and i == 2:
            notes["stopped_at"] = objective
            os.kill(os.getpid(), signal.SIGINT if how == "ctrl-c" else signal.SIGTERM)

    def fits():
        for k in range(3):
            notes["started"].append(k)
            result = model.fit(maxiter=6, tol=1e-12, callback=stop, progress=False)
            notes["results"].append([result.interrupted, result.objective, result.message])

    try:
        if how == "returning":
            with interrupts_end_run(False):
                fits()
        else:
            fits()
    finally:
        model.save(out, include_data=True)
        with open(log, "w") as f:
            json.dump(notes, f)
""")


def _run_script(tmp_path, how: str) -> tuple[subprocess.CompletedProcess, dict, Any]:
    import json

    (tmp_path / "fits.py").write_text(SCRIPT)
    out, log = tmp_path / "model.pt", tmp_path / "notes.json"
    done = subprocess.run([sys.executable, str(tmp_path / "fits.py"), how, str(out), str(log)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    return done, json.loads(log.read_text()), sg.load(out)


def _objective(model: Any) -> float:
    with torch.no_grad():
        return -float(model.training_loss())


def test_sigterm_during_the_second_of_three_fits_ends_the_script_with_143(tmp_path):
    done, notes, saved = _run_script(tmp_path, "sigterm")
    assert done.returncode == 143, done.stderr
    assert notes["started"] == [0, 1], "the third fit ran"  # the program ended after the second
    assert [r[0] for r in notes["results"]] == [False]  # the second did not return
    assert done.stderr.count("RuntimeWarning") == 1, done.stderr  # the one warning, saying:
    assert "interrupted by SIGTERM at iteration 2" in done.stderr
    assert "fit() raises sparsegp.FitTerminated" in done.stderr
    assert "Traceback" not in done.stderr  # SystemExit(143): no traceback
    # `finally:` saved the model at its last accepted state: the second fit's iteration 2
    assert _objective(saved) == pytest.approx(notes["stopped_at"], rel=1e-10, abs=1e-10)


@pytest.mark.parametrize("how", ["ctrl-c", "returning"])
def test_ctrl_c_or_interrupts_end_run_false_return_and_the_script_goes_on(tmp_path, how):
    """Ctrl-C returns the interrupted fit; so does SIGTERM inside `interrupts_end_run(False)`."""
    done, notes, saved = _run_script(tmp_path, how)
    assert done.returncode == 0, done.stderr
    assert notes["started"] == [0, 1, 2]
    assert [r[0] for r in notes["results"]] == [False, True, False]
    _, second, message = notes["results"][1]
    assert second == pytest.approx(notes["stopped_at"], rel=1e-12)  # the accepted state
    said = "SIGTERM" if how == "returning" else "the user (KeyboardInterrupt)"
    assert f"interrupted by {said} at iteration 2" in message
    assert done.stderr.count("RuntimeWarning") == 1, done.stderr
    assert f"interrupted by {said}" in done.stderr and "fit() returned" in done.stderr
    assert _objective(saved) == pytest.approx(notes["results"][2][1], rel=1e-10)  # the third's


#: `sparsegp fit` whose objective sends this process SIGTERM at its 6th evaluation.
CLI_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import sparsegp as sg
    from sparsegp.cli import entry

    real, calls = sg.SGPR.training_loss, [0]

    def terminated(self):
        calls[0] += 1
        if calls[0] == 6:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self)

    sg.SGPR.training_loss = terminated
    sys.argv = ["sparsegp", *sys.argv[1:]]
    sys.exit(entry())
""")


@pytest.mark.parametrize("save", [True, False])
def test_sigterm_during_sparsegp_fit_exits_143_after_saving_with_save_interrupted(tmp_path,
                                                                                   save):
    X, y = make_problem(5, N=60)
    np.savetxt(tmp_path / "d.csv", np.c_[X, y], delimiter=",", header="a,b,y", comments="")
    out = tmp_path / "m.pt"
    (tmp_path / "cli.py").write_text(CLI_SCRIPT)
    done = subprocess.run([sys.executable, str(tmp_path / "cli.py"), "fit", str(tmp_path / "d.csv"),
                           "--target", "y", "-M", "5", "--out", str(out),
                           *(["--save-interrupted"] if save else [])],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 143, done.stderr
    assert "interrupted by SIGTERM" in done.stdout  # the result's line
    assert out.is_file() == save, done.stdout
    if save:
        assert f"model written to {out}" in done.stdout
        mean, var = sg.load(out).predict(X[:3])
        assert np.all(np.isfinite(mean)) and np.all(var > 0)
