"""Replay study of the L-BFGS-B fits' stopping rules (`training.settle.SettleRule`, with the
objective's `training.stall.StallRule`) on the regression rows of `sparsegp bench fit`.

For each case (friedman1, the UCI power plant data, kin40k: `benchmarking.fit`'s cases) and
model (SGPR VFE, SGPR Power EP α = 0.5, SVGP, GPR on the first 3,000 points:
`benchmarking.fit.regression_models`), `record` runs ONE long L-BFGS-B fit with neither rule
(`fit(tol=1e-10, maxiter=...)`: tol switches both off and only changes scipy's termination
tests, not its steps, so the path is the default fit's), and after every iteration keeps, in
the callback (whose own time is left out of the elapsed seconds, as `bench fit` does):

* the elapsed fit seconds;
* the probe's predictions: the library's own probe (`Regression._prediction_probe()` for
  GPR/SGPR, `svgp.training.collapsed_probe` for SVGP: the same 256 rows and the same mean and
  variance the default fit's settling rule reads), with its own seconds (the default fit pays
  one every 5 iterations; the replay adds them back);
* the parameters (state_dict, q(u) left out: SVGP's is set from the hyperparameters when
  scored, `benchmarking.fit.settle_q`);
* every 5th iteration, the objective recomputed at the model's parameters (a check that the
  callback sees the accepted iterate, where the library's probe is taken).

The objective after every iteration (the stall rule's input) is the fit's `history`.
`default` runs each row's default `fit()` once (a check of the replay: the same stop, and the
seconds of the checks after fitting). `analyse` scores kept states as needed
(`benchmarking.fit.scores`, cached), takes the long fit's last state as the converged
reference, replays the stall rule (`fitting.stall_rule`) and the settling rule
(`SettleRule(...).tracker(probe)` fed the recorded predictions) for a grid of candidates,
and prints the tables.

    OMP_NUM_THREADS=1 python benchmarks/settle_replay.py record [--rows friedman1-vfe,...]
    OMP_NUM_THREADS=1 python benchmarks/settle_replay.py default [--rows ...]
    OMP_NUM_THREADS=1 python benchmarks/settle_replay.py analyse [--rows ...]

Outputs: /tmp/settle_replay/ (`--out`): <row>.npz (seconds, probes, objective), <row>.pt
(states), <row>.scores.json (scores by iteration), <row>.default.json, report.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsegp.benchmarking.fit import (
    Case,
    data_cases,
    good,
    regression_models,
    scores,
    settle_q,
    standard_cases,
)
from sparsegp.experiments.shared.datafolder import default_data_dir
from sparsegp.linalg import CholeskyError
from sparsegp.models.core.fitting import FitOptions, stall_rule
from sparsegp.models.svgp.training import CollapsedBound, collapsed_probe
from sparsegp.training.lbfgs import MAXITER
from sparsegp.training.settle import SettleRule

OUT = Path("/tmp/settle_replay")
CASES = ("friedman1", "power-plant", "kin40k")
MODELS = {"vfe": "SGPR (VFE)", "pep": "SGPR (PEP, α = 0.5)", "svgp": "SVGP",
          "gpr": "GPR (first 3000 points)"}
#: the long fits' iterations: bench fit's reference is the default fit continued by up to
#: 1,000 iterations at tol=1e-10 (kin40k's PEP default stops at about 1,723)
#: (friedman1's and the power plant's stall-rule fits stopped by 270), GPR's by 81
LONG_MAXITER = {"vfe": 1500, "pep": 1500, "svgp": 1500, "gpr": 150}
LONG_MAXITER_KIN40K = 3000
LONG_TOL = 1e-10
#: scipy's own L-BFGS-B ftol where no tol is given (the default fit's)
SCIPY_FTOL = 2.220446049250313e-09
#: the grid of candidates (every 5, window 25)
GRID = {"rest": (0.01, 0.0125, 0.015, 0.02), "min_window": (5, 10), "confirm": (1, 2)}
CURRENT = SettleRule()  # the defaults of fitting.settle_rule: rest 0.015, min_window 10, 1


# -- the rows ---------------------------------------------------------------------------------
def all_cases(data_dir: Path) -> dict[str, Case]:
    cases = {c.name: c for c in standard_cases(False) if not c.labels}
    cases.update({c.name: c for c in data_cases(data_dir, False) if not c.labels})
    return {name: cases[name] for name in CASES if name in cases}


def row_names(arg: str | None) -> list[str]:
    rows = [f"{c}-{m}" for c in CASES for m in MODELS]
    if not arg:
        return rows
    wanted = [r.strip() for r in arg.split(",")]
    unknown = [r for r in wanted if r not in rows]
    if unknown:
        raise SystemExit(f"unknown rows {unknown}; rows are {rows}")
    return wanted


def split(row: str) -> tuple[str, str]:
    case, model = row.rsplit("-", 1)
    return case, model


def build(case: Case, model: str) -> Any:
    return regression_models(False)[MODELS[model]](case.X, case.y)


def library_probe(m: Any, model: str) -> Any:
    """The probe the model's default fit gives its settling rule."""
    probe = collapsed_probe(m) if model == "svgp" else m._prediction_probe()
    if probe is None:
        raise RuntimeError(f"{type(m).__name__} gives no probe")
    return probe


def objective_function(m: Any, model: str) -> Any:
    """x ↦ −training_loss at the model's parameters, as fit_lbfgsb's history holds it."""
    target = CollapsedBound(m) if model == "svgp" else m
    return lambda: -float(target.training_loss().detach())


def kept_state(m: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in m.state_dict().items() if not k.startswith("q_")}


# -- record -------------------------------------------------------------------------------------
def record(row: str, case: Case, out: Path, maxiter: int | None = None) -> None:
    _, model = split(row)
    m = build(case, model)
    probe = library_probe(m, model)
    objective = objective_function(m, model)
    P = int(probe()[0].numel())
    seconds: list[float] = []
    means: list[np.ndarray] = []
    variances: list[np.ndarray] = []
    probe_ok: list[bool] = []
    probe_seconds: list[float] = []
    check: list[tuple[int, float, float]] = []  # (iteration, callback's objective, recomputed)
    states: list[dict[str, torch.Tensor]] = []
    spent = [0.0]

    def keep(iteration: int, value: float | None, start: float | None) -> None:
        t = time.perf_counter()
        if start is not None:
            seconds.append(t - start - spent[0])
        states.append(kept_state(m))
        tp = time.perf_counter()
        try:
            with torch.no_grad():
                mean, var = probe()
            means.append(mean.detach().double().reshape(-1).cpu().numpy())
            variances.append(var.detach().double().reshape(-1).cpu().numpy())
            probe_ok.append(True)
        except CholeskyError:
            means.append(np.full(P, np.nan))
            variances.append(np.full(P, np.nan))
            probe_ok.append(False)
        probe_seconds.append(time.perf_counter() - tp)
        if value is not None and iteration % 5 == 0:
            with torch.no_grad():
                check.append((iteration, value, objective()))
        spent[0] += time.perf_counter() - t

    keep(0, None, None)  # the starting values (the library probes them before iterating)
    seconds.append(0.0)
    maxiter = maxiter or (LONG_MAXITER_KIN40K if row.startswith("kin40k") and model != "gpr"
                          else LONG_MAXITER[model])
    print(f"{row}: long fit, maxiter {maxiter}, tol {LONG_TOL}", flush=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        result = m.fit(tol=LONG_TOL, maxiter=maxiter, progress=False, diagnose=False,
                       callback=lambda i, v: keep(i, v, start))
        total = time.perf_counter() - start - spent[0]
    K = len(seconds) - 1
    history = np.asarray(result.history, dtype=np.float64)
    if len(history) != K + 1:
        print(f"  warning: history has {len(history)} entries, callbacks {K}", flush=True)
    check_arr = np.asarray(check, dtype=np.float64).reshape(-1, 3)
    mismatch = np.abs(check_arr[:, 1] - check_arr[:, 2]) if len(check_arr) else np.zeros(0)
    np.savez_compressed(
        out / f"{row}.npz", seconds=np.asarray(seconds), mean=np.stack(means),
        var=np.stack(variances), probe_ok=np.asarray(probe_ok),
        probe_seconds=np.asarray(probe_seconds), history=history, check=check_arr)
    torch.save(states, out / f"{row}.pt")
    meta = {"row": row, "iterations": K, "nit": int(result.iterations),
            "message": str(result.message), "fit_seconds": total,
            "result_seconds": float(result.seconds), "maxiter": maxiter, "tol": LONG_TOL,
            "threads": torch.get_num_threads(), "commit": commit(),
            "probe_median_s": float(np.median(probe_seconds)),
            "objective_check_max_abs": float(mismatch.max()) if len(mismatch) else 0.0,
            "probe_failures": int(np.sum(~np.asarray(probe_ok)))}
    (out / f"{row}.meta.json").write_text(json.dumps(meta, indent=1))
    print(f"  {K} iterations in {total:.1f} s ({result.message[:70]}); probe "
          f"{meta['probe_median_s'] * 1e3:.1f} ms; objective check max |diff| "
          f"{meta['objective_check_max_abs']:.3g}", flush=True)


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except OSError:
        return "?"


# -- the default fit, once (a check of the replay) -----------------------------------------------
def default_fit(row: str, case: Case, out: Path) -> None:
    _, model = split(row)
    m = build(case, model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        result = m.fit(progress=False)
        total = time.perf_counter() - start
    rmse, nlpd = scores(m, case)
    info = {k: v for k, v in result.info.items() if isinstance(v, (bool, int, float, str))}
    d = {"row": row, "iterations": int(result.iterations), "message": str(result.message),
         "fit_seconds": total, "lbfgsb_seconds": float(result.seconds),
         "after_seconds": total - float(result.seconds), "scores": [rmse, nlpd],
         "info": info, "threads": torch.get_num_threads(), "commit": commit()}
    (out / f"{row}.default.json").write_text(json.dumps(d, indent=1))
    print(f"{row}: default fit {result.iterations} it, {total:.2f} s (L-BFGS-B "
          f"{result.seconds:.2f} s), RMSE {rmse:.4f}, NLPD {nlpd:.4f}: "
          f"{str(result.message)[:90]}", flush=True)


# -- scoring kept states, cached ------------------------------------------------------------------
class Scorer:
    def __init__(self, row: str, case: Case, out: Path) -> None:
        self.row, self.case, self.path = row, case, out / f"{row}.scores.json"
        self.cache: dict[int, tuple[float, float]] = {}
        if self.path.is_file():
            self.cache = {int(k): tuple(v) for k, v in json.loads(self.path.read_text()).items()}
        self.states: list[dict[str, torch.Tensor]] | None = None
        self.model: Any = None
        self.out = out
        self.dirty = 0

    def __call__(self, i: int) -> tuple[float, float]:
        if i not in self.cache:
            if self.model is None:
                _, model = split(self.row)
                self.model = build(self.case, model)
                self.states = torch.load(self.out / f"{self.row}.pt")
            assert self.states is not None
            self.model.load_state_dict(self.states[i], strict=False)
            settle_q(self.model)
            self.cache[i] = scores(self.model, self.case)
            self.dirty += 1
            if self.dirty >= 50:
                self.save()
        return self.cache[i]

    def save(self) -> None:
        if self.dirty:
            self.path.write_text(json.dumps({str(k): v for k, v in sorted(self.cache.items())}))
            self.dirty = 0


# -- the replay ----------------------------------------------------------------------------------
def replay(trace: dict[str, np.ndarray], rule: SettleRule | None, use_stall: bool,
           num_data: int, maxiter: int = MAXITER) -> tuple[int, str]:
    """(stop iteration, which rule) of the default fit's loop (`fit_lbfgsb.on_iteration`) on the
    recorded objective and predictions: the stall rule after every iteration, then the settling
    rule's tracker at every `every`-th, fed the predictions recorded there. scipy's own ftol
    (2.2e-9 relative) is replayed too (its gtol 1e-5 is not: the gradient is not recorded)."""
    history = [float(h) for h in trace["history"]]
    K = len(history) - 1
    mean, var, ok = trace["mean"], trace["var"], trace["probe_ok"]
    at = [0]

    def fake_probe() -> tuple[torch.Tensor, torch.Tensor]:
        i = at[0]
        if not ok[i]:
            raise CholeskyError("recorded: the probe failed here")
        return torch.from_numpy(mean[i]), torch.from_numpy(var[i])

    tracker = rule.tracker(fake_probe) if rule is not None else None

    def settled(i: int) -> str | None:
        at[0] = i
        try:
            return tracker.update(i) if tracker is not None else None
        except CholeskyError:
            return None

    stall = stall_rule(num_data, FitOptions()) if use_stall else None
    settled(0)
    for k in range(1, K + 1):
        f0, f1 = -history[k - 1], -history[k]
        if (f0 - f1) / max(abs(f0), abs(f1), 1.0) <= SCIPY_FTOL:
            return k, "scipy ftol"
        if stall is not None and stall.check(history[:k + 1]) is not None:
            return k, "stall"
        if tracker is not None and k % tracker.rule.every == 0 and settled(k) is not None:
            return k, "settle"
        if k >= maxiter:
            return k, "maxiter"
    return K, "end of record"


def probes_before(k: int, every: int, after_probe: bool) -> int:
    """Probes a default fit has taken by its callback at iteration k (after_probe: and the
    probe at k, when the fit stopped on it)."""
    return 1 + (k // every if after_probe else max(k - 1, 0) // every)


def analyse(rows: list[str], cases: dict[str, Case], out: Path, grid: dict[str, Any]) -> str:
    lines: list[str] = []
    data: dict[str, Any] = {}
    for row in rows:
        case_name, model = split(row)
        if not (out / f"{row}.npz").is_file() or case_name not in cases:
            lines.append(f"{row}: not recorded (skipped)")
            continue
        case = cases[case_name]
        trace = dict(np.load(out / f"{row}.npz"))
        meta = json.loads((out / f"{row}.meta.json").read_text())
        dflt = (json.loads((out / f"{row}.default.json").read_text())
                if (out / f"{row}.default.json").is_file() else None)
        score = Scorer(row, case, out)
        K = len(trace["seconds"]) - 1
        ref = score(K)
        # the first state within 1% of the converged scores: every state from the start
        g = next((i for i in range(K + 1) if good(*score(i), ref)), None)
        num_data = int(build(case, model).num_data)
        data[row] = {"trace": trace, "meta": meta, "default": dflt, "score": score,
                     "ref": ref, "good": g, "K": K, "num_data": num_data}
    # the candidates
    candidates = [SettleRule(rest=r, min_window=w, confirm=c) for r, w, c in
                  itertools.product(grid["rest"], grid["min_window"], grid["confirm"])]
    if CURRENT not in candidates:
        candidates.insert(0, CURRENT)
    results: dict[SettleRule | None, dict[str, dict[str, Any]]] = {}
    for rule in [None, *candidates]:
        results[rule] = {}
        for row, d in data.items():
            k, why = replay(d["trace"], rule, True, d["num_data"])
            results[rule][row] = evaluate(d, k, why, rule)
    lines += header(data)
    lines += ["", "## The current defaults (rest 0.015, min_window 10, confirm 1) + stall rule",
              ""]
    lines += table(results[CURRENT], data)
    alone = {row: evaluate(d, *replay(d["trace"], CURRENT, False, d["num_data"]), CURRENT)
             for row, d in data.items()}
    lines += ["", "### The settling rule alone (no stall rule), current defaults", ""]
    lines += table(alone, data)
    lines += ["", "### The stall rule alone (no settling rule)", ""]
    lines += table(results[None], data)
    lines += ["", "## Every candidate (with the stall rule): worst row", "",
              "ok = every row within 1% at its stop and fit-time ratio ≤ 2.0 (≤ 2.2 for "
              "'about 2')", "",
              "| rest | min_window | confirm | rows within 1% at stop | max ratio (s, fit) | "
              "max ratio (s, fit + checks) | max ratio (it.) | worst row | ok (≤ 2.0) | "
              "ok (≤ 2.2) |", "|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    summary = []
    for rule in candidates:
        res = results[rule]
        within = sum(r["within"] for r in res.values())
        ratios = {row: r["ratio_s"] for row, r in res.items()}
        worst = max(ratios, key=lambda x: ratios[x] if ratios[x] is not None else math.inf)
        max_s = max((x if x is not None else math.inf) for x in ratios.values())
        max_c = max((r["ratio_c"] if r["ratio_c"] is not None else math.inf)
                    for r in res.values())
        max_it = max((r["ratio_it"] if r["ratio_it"] is not None else math.inf)
                     for r in res.values())
        ok2 = within == len(res) and max_s <= 2.0
        ok22 = within == len(res) and max_s <= 2.2
        summary.append((rule, within, max_s, max_c, max_it, ok2, ok22))
        lines.append(f"| {rule.rest} | {rule.min_window} | {rule.confirm} | {within}/{len(res)} "
                     f"| {max_s:.2f} | {max_c:.2f} | {max_it:.2f} | {worst} | "
                     f"{'yes' if ok2 else 'no'} | {'yes' if ok22 else 'no'} |")
    passing = [s for s in summary if s[6]]
    if passing:
        best = min(passing, key=lambda s: (s[2], -s[0].rest))
    else:
        best = max(summary, key=lambda s: (s[1], -s[2]))
    lines += ["", f"## Best candidate: rest {best[0].rest}, min_window {best[0].min_window}, "
              f"confirm {best[0].confirm} (+ stall rule)", ""]
    lines += table(results[best[0]], data)
    for rule, *_ in sorted(passing, key=lambda s: s[2])[:4]:
        if rule == best[0]:
            continue
        lines += ["", f"### Also passing: rest {rule.rest}, min_window {rule.min_window}, "
                  f"confirm {rule.confirm}", ""]
        lines += table(results[rule], data)
    lines += ["", "## The checks of the current rule on each row (up to the first stop of any "
              "candidate and a little beyond; `SettleRule.measure`)", ""]
    for row, d in data.items():
        lines += checks(row, d, results)
    for d in data.values():
        d["score"].save()
    dump = {str(rule): {row: {k: v for k, v in r.items()} for row, r in res.items()}
            for rule, res in results.items()}
    (out / "replay.json").write_text(json.dumps(dump, indent=1, default=str))
    return "\n".join(lines)


def checks(row: str, d: dict[str, Any], results: dict[Any, dict[str, dict[str, Any]]]
           ) -> list[str]:
    """w, d₁, d₀ and the rest d₁²/(d₀ − d₁) at every check of the current rule, up to 30
    iterations past the latest settle stop of any candidate (at most 200 checks), with the
    test scores there."""
    mean, var = d["trace"]["mean"], d["trace"]["var"]
    stops = [res[row]["stop"] for res in results.values() if row in res]
    last = min(d["K"], max(stops + [d["good"] or 0]) + 30, 1000)
    predictions = {i: (torch.from_numpy(mean[i]), torch.from_numpy(var[i]))
                   for i in range(0, last + 1, CURRENT.every) if d["trace"]["probe_ok"][i]}
    out = [f"**{row}** (within 1% at {d['good']}; reference RMSE {d['ref'][0]:.4f}, NLPD "
           f"{d['ref'][1]:.4f})", "", "| it. | w | d₁ | d₀ | rest | RMSE vs ref | NLPD vs ref |",
           "|---:|---:|---:|---:|---:|---:|---:|"]
    for t in range(CURRENT.every, last + 1, CURRENT.every):
        measured = CURRENT.measure(predictions, t)
        if measured is None:
            continue
        w, d1, d0 = measured
        rest = d1 * d1 / (d0 - d1) if d1 < d0 else math.inf
        sc = d["score"](t)
        out.append(f"| {t} | {w} | {d1:.4g} | {d0:.4g} | {rest:.4g} | "
                   f"{100 * (sc[0] / d['ref'][0] - 1):+.2f}% | {sc[1] - d['ref'][1]:+.4f} |")
        if len(out) > 204:
            break
    return out + [""]


def seconds_at(d: dict[str, Any], k: int, every: int, after_probe: bool) -> float:
    """The default fit's seconds at iteration k: the long fit's (probes left out) plus the
    probes a default fit would have taken by then (the recorded median probe)."""
    return float(d["trace"]["seconds"][k]) + probes_before(k, every, after_probe) * \
        d["meta"]["probe_median_s"]


def evaluate(d: dict[str, Any], k: int, why: str, rule: SettleRule | None) -> dict[str, Any]:
    every = rule.every if rule is not None else 5
    probing = rule is not None
    stop_s = (seconds_at(d, k, every, why == "settle") if probing
              else float(d["trace"]["seconds"][k]))
    g = d["good"]
    good_s = None if g is None else (seconds_at(d, g, every, False) if probing
                                     else float(d["trace"]["seconds"][g]))
    after = d["default"]["after_seconds"] if d["default"] is not None else None
    at_stop = d["score"](k)
    within = good(*at_stop, d["ref"])
    ratio_s = None if good_s is None or good_s <= 0 else stop_s / good_s
    ratio_c = (None if good_s is None or good_s <= 0 or after is None
               else (stop_s + after) / good_s)
    ratio_it = None if g is None or g == 0 else k / g
    return {"stop": k, "why": why, "stop_s": stop_s, "good": g, "good_s": good_s,
            "ratio_s": ratio_s, "ratio_c": ratio_c, "ratio_it": ratio_it, "within": within,
            "rmse_rel": at_stop[0] / d["ref"][0] - 1, "nlpd_diff": at_stop[1] - d["ref"][1]}


def header(data: dict[str, Any]) -> list[str]:
    lines = ["# settle_replay", "", "Long fits (tol=1e-10): iterations, seconds (probes left "
             "out), the converged reference (the long fit's last state), the first state "
             "within 1%, the median probe; and the default fit run once (a check).", "",
             "| row | long fit: it., s, stopped | reference RMSE, NLPD | within 1% at it. | "
             "probe (ms) | objective check | default fit: it., s (L-BFGS-B s), stopped by |",
             "|---|---|---|---:|---:|---:|---|"]
    for row, d in data.items():
        m, df = d["meta"], d["default"]
        dtxt = "—" if df is None else (
            f"{df['iterations']}, {df['fit_seconds']:.2f} ({df['lbfgsb_seconds']:.2f}), "
            + ("settle" if df["info"].get("settled") else "stall" if df["info"].get("stalled")
               else df["message"][:30]))
        lines.append(f"| {row} | {m['iterations']}, {m['fit_seconds']:.1f}, "
                     f"{m['message'][:40]} | {d['ref'][0]:.4f}, {d['ref'][1]:.4f} | "
                     f"{d['good']} | {m['probe_median_s'] * 1e3:.1f} | "
                     f"{m['objective_check_max_abs']:.2g} | {dtxt} |")
    return lines


def table(res: dict[str, dict[str, Any]], data: dict[str, Any]) -> list[str]:
    lines = ["| row | stop it. (rule) | stop s | within 1% it. | within 1% s | ratio s (fit) | "
             "ratio s (+ checks) | ratio it. | within 1% at stop | RMSE vs ref | NLPD vs ref |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"]

    def f(x: float | None, fmt: str = ".2f") -> str:
        return "—" if x is None else format(x, fmt)

    for row, r in res.items():
        lines.append(f"| {row} | {r['stop']} ({r['why']}) | {r['stop_s']:.2f} | "
                     f"{f(r['good'], 'd')} | {f(r['good_s'])} | {f(r['ratio_s'])} | "
                     f"{f(r['ratio_c'])} | {f(r['ratio_it'])} | "
                     f"{'yes' if r['within'] else 'NO'} | {100 * r['rmse_rel']:+.2f}% | "
                     f"{r['nlpd_diff']:+.4f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=("record", "default", "analyse", "all"))
    p.add_argument("--rows", help="comma-separated rows, e.g. friedman1-vfe,kin40k-gpr "
                   f"(cases {', '.join(CASES)}; models {', '.join(MODELS)})")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--data-dir", type=Path, default=default_data_dir(),
                   help="the folder of the UCI power plant and kin40k data")
    p.add_argument("--force", action="store_true", help="record rows already recorded")
    p.add_argument("--maxiter", type=int, help="the long fits' iterations (a smoke test)")
    p.add_argument("--rest", help="comma-separated rest values of the grid")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = row_names(args.rows)
    cases = all_cases(args.data_dir)
    grid = dict(GRID)
    if args.rest:
        grid["rest"] = tuple(float(x) for x in args.rest.split(","))
    print(f"torch threads {torch.get_num_threads()}; commit {commit()}", flush=True)
    for row in rows:
        case_name, _ = split(row)
        if case_name not in cases:
            print(f"{row}: the case is not in {args.data_dir}: skipped", flush=True)
            continue
        if args.command in ("record", "all") and (args.force
                                                   or not (args.out / f"{row}.npz").is_file()):
            record(row, cases[case_name], args.out, args.maxiter)
        if args.command in ("default", "all") and (
                args.force or not (args.out / f"{row}.default.json").is_file()):
            default_fit(row, cases[case_name], args.out)
    if args.command in ("analyse", "all"):
        text = analyse(rows, cases, args.out, grid)
        (args.out / "report.md").write_text(text + "\n")
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
