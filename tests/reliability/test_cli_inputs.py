"""Small input faults and the command line's edges: a string where a flag belongs, a NaN cell
in a CSV, a memory request no device can meet, `--out -` where no standard output is
possible, help texts, and Ctrl-C at any point of `sparsegp`, its imports included."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

import sparsegp as sg
from sparsegp.cli import build_parser, main

from ..conftest import make_problem


def _write(path, names, rows):
    path.write_text(",".join(names) + "\n" + "\n".join(",".join(map(str, r)) for r in rows)
                    + "\n")


# -- flags -----------------------------------------------------------------------------------

def _labels(y):
    return (y > np.median(y)).astype(int)


MODELS = {
    "SGPR": lambda X, y, **kw: sg.SGPR(X, y, inducing_points=5, **kw),
    "GPR": lambda X, y, **kw: sg.GPR(X, y, **kw),
    "SVGP": lambda X, y, **kw: sg.SVGP(X, y, inducing_points=5, **kw),
    "SGPC": lambda X, y, **kw: sg.SGPC(X, _labels(y), inducing_points=5, **kw),
    "RFF": lambda X, y, **kw: sg.RFF(X, y, num_features=5, **kw),
}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("value", ["False", "false", 0, 1, None, "yes"])
def test_a_flag_that_is_not_a_bool_is_a_type_error_naming_it(name, value):
    X, y = make_problem(3, N=30)
    # "False" is a true string: it used to switch standardisation on
    with pytest.raises(TypeError, match=f"standardize_X must be True or False; got {value!r}"):
        MODELS[name](X, y, standardize_X=value)


def test_a_string_flag_is_told_to_drop_its_quotes_and_numpy_bools_are_flags():
    from sparsegp.validation import check_bool

    with pytest.raises(TypeError, match="pass False without quotes"):
        check_bool("False", "standardize_X")
    assert check_bool(np.bool_(True), "x") is True and check_bool(False, "x") is False
    X, y = make_problem(3, N=30)
    X = X * [1.0, 100.0]
    plain = sg.SGPR(X, y, inducing_points=5, standardize_X=True)
    numpy_flag = sg.SGPR(X, y, inducing_points=5, standardize_X=np.bool_(True))
    np.testing.assert_array_equal(numpy_flag.x_scale, plain.x_scale)
    assert float(plain.x_scale[1]) > 10  # standardised: the second column's spread


# -- CSV cells -------------------------------------------------------------------------------

@pytest.mark.parametrize("cell", ["nan", "NaN", " inf", "-inf", "Infinity"])
def test_a_non_finite_cell_is_named_by_file_line_and_column(tmp_path, cell):
    from sparsegp.runtime.tabular import read_csv

    X, y = make_problem(1, N=6)
    rows = [[a, b, t] for (a, b), t in zip(X, y)]
    rows[2][1] = cell  # line 4 of the file (the header is line 1)
    _write(tmp_path / "data.csv", ["a", "b", "y"], rows)
    message = rf"data.csv, line 4, column 'b': '{cell.strip()}' is not a finite number"
    with pytest.raises(ValueError, match=message):
        read_csv(tmp_path / "data.csv")


def test_a_nan_cell_in_the_cli_is_a_one_line_error_naming_the_place(tmp_path, capsys):
    X, y = make_problem(2, N=30)
    rows = [[a, b, t] for (a, b), t in zip(X, y)]
    rows[6][2] = "nan"
    _write(tmp_path / "train.csv", ["a", "b", "y"], rows)
    # it was "y contains NaN (first at index (6,))": a position in an array, not in the file
    assert main(["fit", str(tmp_path / "train.csv"), "--target", "y", "-M", "5",
                 "--out", str(tmp_path / "m.pt")]) == 2
    err = capsys.readouterr().err
    assert "train.csv, line 8, column 'y': 'nan' is not a finite number" in err
    assert err.count("\n") == 1 and not (tmp_path / "m.pt").exists()
    rows[6][2] = "0.5"
    _write(tmp_path / "train.csv", ["a", "b", "y"], rows)
    assert main(["fit", str(tmp_path / "train.csv"), "--target", "y", "-M", "5",
                 "--maxiter", "5", "--out", str(tmp_path / "m.pt")]) == 0
    new = [[0.1, 0.2], [0.3, "NaN"]]
    _write(tmp_path / "new.csv", ["a", "b"], new)
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "m.pt"), str(tmp_path / "new.csv")]) == 2
    assert "new.csv, line 3, column 'b': 'NaN' is not a finite number" in capsys.readouterr().err


# -- memory ----------------------------------------------------------------------------------

def test_a_request_beyond_any_memory_is_refused_with_its_size_before_allocating():
    from sparsegp.runtime.allocator import MemoryRequestError, check_request

    with pytest.raises(MemoryRequestError, match=r"a test needs about 4611\.7 PB of memory; "
                       r"this machine \(or its container\) has [\d.]+ [kMGTP]?B: do less") as caught:
        check_request(2**62, "a test", "do less")
    assert isinstance(caught.value, MemoryError)
    check_request(10**6, "a small request", "nothing to do")  # what fits passes


def test_a_chunk_size_beyond_the_memory_is_refused_naming_chunk_size():
    from sparsegp.runtime.chunking import auto_chunk_size, chunk_rows

    with pytest.raises(MemoryError, match=r"a chunk of 1000000000 rows × 100000 columns "
                       r"\(chunk_size=1000000000\) needs about 3\.2 PB .*pass a smaller "
                       r"chunk_size"):
        chunk_rows(10**9, 10**5, 8, chunk_size=10**9)
    assert chunk_rows(1000, 10, 8, chunk_size=100) == 100
    assert chunk_rows(50, 10, 8, chunk_size=100) == 50  # never more rows than there are
    assert chunk_rows(10**7, 100, 8) == auto_chunk_size(100, 8)


def test_a_gpr_too_large_for_the_machine_is_refused_at_construction(monkeypatch):
    from sparsegp.runtime import allocator

    X, y = make_problem(4, N=400)
    monkeypatch.setattr(allocator, "device_memory", lambda device=None: 10**6)  # 1 MB here
    with pytest.raises(MemoryError, match=r"GPR on 400 rows \(2 400×400 matrices\) needs "
                       r"about 2\.6 MB of memory.*use a sparse model"):
        sg.GPR(X, y)
    monkeypatch.setattr(allocator, "device_memory", lambda device=None: 10**7)
    assert sg.GPR(X, y).num_data == 400  # what fits is built


def test_an_exact_gp_too_large_for_the_machine_is_refused_before_any_model(tmp_path, capsys,
                                                                          monkeypatch):
    from sparsegp.cli import check_exact_memory
    from sparsegp.runtime import allocator

    with pytest.raises(MemoryError, match=r"exact on 10000000 rows .* needs about 1\.6 PB"):
        check_exact_memory(10**7)  # on any machine with less than 1.6 PB of memory
    X, y = make_problem(4, N=400)
    _write(tmp_path / "d.csv", ["a", "b", "y"], [[a, b, t] for (a, b), t in zip(X, y)])
    monkeypatch.setattr(allocator, "device_memory", lambda device=None: 10**6)  # 1 MB here
    monkeypatch.setattr(sg.models, "GPR", lambda *a, **k: pytest.fail("built the exact GP"))
    assert main(["fit", str(tmp_path / "d.csv"), "--target", "y", "--approximation", "exact",
                 "--out", str(tmp_path / "m.pt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert ("--approximation exact on 400 rows (2 400×400 float64 matrices) needs about 2.6 MB "
            "of memory; this machine (or its container) has 1.0 MB: use a sparse "
            "approximation instead (--approximation vfe") in err


def test_torchs_allocation_failure_is_told_with_its_size_and_what_to_do(tmp_path, capsys,
                                                                       monkeypatch):
    X, y = make_problem(5, N=30)
    _write(tmp_path / "d.csv", ["a", "b", "y"], [[a, b, t] for (a, b), t in zip(X, y)])

    def out_of_memory(*args, **kwargs):  # torch's own words on a failed CPU allocation
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
                           "can't allocate memory: you tried to allocate 8000000000000 bytes. "
                           "Error code 12 (Cannot allocate memory)")

    monkeypatch.setattr(sg.SGPR, "fit", out_of_memory)
    assert main(["fit", str(tmp_path / "d.csv"), "--target", "y", "-M", "5",
                 "--out", str(tmp_path / "m.pt")]) == 2
    err = capsys.readouterr().err
    assert err == ("sparsegp fit: error: out of memory: one array of 8.0 TB could not be "
                   "allocated; use a smaller chunk_size, fewer inducing points or a sparse "
                   "model (the exact GP needs N×N matrices)\n")


# -- outputs and help ------------------------------------------------------------------------

def test_an_experiment_refuses_standard_output_for_its_folder(capsys):
    from sparsegp.experiments.shared.command import experiment_parser

    parser = experiment_parser(None, "sparsegp experiment x", "", "x-results", "quick", "data")
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--out", "-"])  # it used to write into a folder called "-"
    assert exit_.value.code == 2
    assert "an experiment writes a folder of files" in capsys.readouterr().err
    assert str(parser.parse_args(["--out", "results"]).out) == "results"


def test_the_demo_refuses_standard_output_for_its_figure_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--out", "-"]) == 2  # it used to fit and draw into a folder "-"
    assert "the demo writes a figure (PNG) into a folder" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_every_option_and_argument_of_every_command_has_a_help_text():
    import argparse

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [f"{name} {'/'.join(action.option_strings) or action.dest}"
               for name, sub in commands.choices.items() for action in sub._actions
               if not isinstance(action, argparse._HelpAction) and not action.help]
    assert missing == []  # fit --out, --kernel, --maxiter and predict's model had none
    described = {c.dest: c.help for c in commands._choices_actions}
    assert "kissgp" in described["bench"] and "compare" in described["bench"]


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["fit", "--help"]])
def test_version_and_help_import_neither_torch_nor_numpy(argv):
    code = ("import sys\nfrom sparsegp.cli import main\ntry:\n    main(sys.argv[1:])\n"
            "except SystemExit:\n    pass\n"
            "print(sorted({'torch', 'numpy'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         check=True).stdout
    assert out.splitlines()[-1] == "[]"  # they used to import both (~5 s with the models)


def test_the_package_loads_its_parts_on_first_use_and_exports_every_name():
    code = ("import sys\nimport sparsegp as sg\nprint('torch' in sys.modules)\n"
            "from sparsegp import *\nprint('torch' in sys.modules, SGPR is sg.models.SGPR)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "True", "True"]
    import importlib

    homes = {"ScaleWarning": "validation", "CholeskyError": "linalg", "FitOptions": "models.core.fitting",
             "select_inducing": "workflows", "load": "models", "kernels": None}
    for name, home in homes.items():
        expected = (importlib.import_module(f"sparsegp.{name}") if home is None
                    else getattr(importlib.import_module(f"sparsegp.{home}"), name))
        assert getattr(sg, name) is expected
    assert set(sg.__all__) <= set(dir(sg))
    assert sg.models.SGPR is sg.SGPR and sg.linalg.JitterWarning is sg.JitterWarning
    with pytest.raises(AttributeError, match="has no attribute 'SPGR'"):
        sg.SPGR  # noqa: B018 - a typo is an AttributeError, as before


# -- Ctrl-C while `sparsegp` starts ---------------------------------------------------------

#: `python -m sparsegp` and the console entry (`sparsegp`, which calls sparsegp.cli:entry).
ENTRIES = {"python -m": ["-m", "sparsegp"],
           "entry": ["-c", "import sys; from sparsegp.cli import entry; sys.exit(entry())"]}

#: A child that raises KeyboardInterrupt when the module named by argv[1] starts importing:
#: Ctrl-C at exactly that moment of the start (the hook is the test's, not the library's).
INTERRUPTED_IMPORT = """
import runpy, sys
TARGET, ENTRY = sys.argv[1], sys.argv[2]

class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == TARGET:
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, CtrlC())
sys.argv = ["sparsegp", *sys.argv[3:]]
if ENTRY == "entry":
    from sparsegp.cli import entry
    sys.exit(entry())
runpy.run_module("sparsegp", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("entry", ["python -m", "entry"])
@pytest.mark.parametrize("module", ["torch", "numpy", "sparsegp.models", "sparsegp.runtime.tabular",
                                    "sparsegp.kernels"])
def test_ctrl_c_during_the_imports_is_one_line_and_exit_130(tmp_path, entry, module):
    # a data file that passes the argument checks, which run before torch is imported
    (tmp_path / "d.csv").write_text("x,y\n1,2\n2,3\n3,5\n")
    result = subprocess.run([sys.executable, "-c", INTERRUPTED_IMPORT, module, entry, "fit",
                             str(tmp_path / "d.csv"), "--target", "y"],
                            capture_output=True, text=True, timeout=300)
    assert (result.returncode, result.stderr) == (130, "sparsegp fit: interrupted\n")


def test_ctrl_c_while_python_m_loads_the_command_line_is_one_line():
    result = subprocess.run([sys.executable, "-c", INTERRUPTED_IMPORT, "sparsegp.cli",
                             "python -m", "--version"], capture_output=True, text=True,
                            timeout=300)
    assert (result.returncode, result.stderr) == (130, "sparsegp: interrupted\n")


def _ctrl_c_as_in_a_terminal() -> None:
    """In the child: SIGINT's default action, which Python replaces by KeyboardInterrupt (a
    shell runs background jobs with SIGINT ignored, and children inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child: POSIX")
@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_real_ctrl_c_during_the_import_of_torch_exits_130_without_a_traceback(tmp_path, entry):
    # -X importtime reports each module as its import ends: the first torch.* line means the
    # child is inside `import torch`; SIGINT is then sent, again every half second until the
    # child exits (a second Ctrl-C while it shuts down must not print a traceback either).
    # The data file passes the argument checks, which run before torch is imported.
    (tmp_path / "d.csv").write_text("x,y\n1,2\n2,3\n3,5\n")
    child = subprocess.Popen([sys.executable, "-X", "importtime", *ENTRIES[entry], "fit",
                              str(tmp_path / "d.csv"), "--target", "y"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=_ctrl_c_as_in_a_terminal)
    lines: list[str] = []
    in_torch = threading.Event()

    def read() -> None:
        for line in child.stderr:
            lines.append(line)
            if line.split("|")[-1].strip().startswith("torch."):
                in_torch.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert in_torch.wait(timeout=300), "".join(lines[-20:])
        for _ in range(600):
            child.send_signal(signal.SIGINT)
            try:
                child.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                continue
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        reader.join(timeout=30)
    stderr = "".join(lines)
    said = [line for line in lines if not line.startswith("import time:")]
    assert "Traceback" not in stderr
    assert (child.returncode, said) == (130, ["sparsegp fit: interrupted\n"])
    # the interrupt came while the models were being imported: what `fit` imports after them
    # never was (importtime reports a failed import too, so the models' own lines are there);
    # the argument checks, with their sparsegp.runtime.tabular, ran before torch
    imported = {line.split("|")[-1].strip() for line in lines if line.startswith("import time:")}
    assert "sparsegp.partition" not in imported and "sparsegp.runtime.tabular" in imported


def test_bench_out_dash_is_standard_output_and_the_table_is_written_whole(tmp_path, monkeypatch,
                                                                         capsys):
    from sparsegp.benchmarking import speed

    p = speed.bench_parser("sparsegp bench speed", "", 1)
    assert speed.parse_bench_args(p, ["--out", "-"]).out is None  # not a file named "-"
    out = tmp_path / "table.md"
    out.write_text("the previous table\n")

    def failing(path, content, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr("sparsegp.runtime.files.write_atomically", failing)
    with pytest.raises(KeyboardInterrupt):
        speed.report("| a |", out)
    assert out.read_text() == "the previous table\n"  # went through the atomic writer
    monkeypatch.undo()
    speed.report("| a |", out)
    assert out.read_text().endswith("| a |\n") and "| a |" in capsys.readouterr().out


@pytest.mark.parametrize("make", [
    lambda X, y: sg.SVGP(X, y, inducing_points=5, whiten="False"),
    lambda X, y: sg.SVGP(X, y, inducing_points=5, mean_field=0),
    lambda X, y: sg.SGPR(X, y, inducing_points=5, standardize_y="False"),
    lambda X, y: sg.GPSSM(y[:, None], state_dim=1, inducing_points=5, markov="True"),
    lambda X, y: sg.SGPR(X, y, inducing_points=5).fit(maxiter=2, diagnose="False"),
    lambda X, y: sg.SGPR(X, y, inducing_points=5).fit(maxiter=2, progress="no"),
])
def test_every_flag_refuses_a_value_that_is_not_a_bool(make):
    X, y = make_problem(0, N=40, D=2)
    with pytest.raises(TypeError, match="must be True or False"):
        make(X, y)
