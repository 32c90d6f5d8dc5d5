"""Data sharded over two processes (gloo on localhost) give exactly one process's results."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import sparsegp as sg

from .distributed_worker import (
    BLOCK_MEMBERS,
    MEMBERS,
    block_labels,
    build,
    diagnosed_inducing,
    evaluate,
    evaluate_spectral,
    problem,
    report_numbers,
    row_terms,
    spectral_models,
    svgp_model,
    whole_data_models,
)

WORKER = Path(__file__).with_name("distributed_worker.py")

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(),
                                reason="this torch build has no torch.distributed")


def launch(mode: str, out: Path, timeout: float) -> list[subprocess.CompletedProcess]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(2):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "RANK": str(rank), "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, str(WORKER), mode, str(out)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"a rank hung for more than {timeout} s")
        results.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return results


def test_two_ranks_see_the_objective_gradient_and_posterior_of_all_the_data(tmp_path):
    runs = launch("equal", tmp_path / "out", timeout=240)
    for r in runs:
        assert r.returncode == 0, r.stderr
    ranks = [json.loads(Path(f"{tmp_path / 'out'}.{i}.json").read_text()) for i in range(2)]
    X, y, Z, Xtest = problem()
    for approx, alpha in MEMBERS:
        key = f"{approx}-{alpha}"
        ref = evaluate(build(X, y, Z, approx, alpha), Xtest)
        for res in ranks:
            assert res[key]["loss"] == pytest.approx(ref["loss"], rel=1e-12)
            assert res[key]["upper"] == pytest.approx(ref["upper"], rel=1e-12)
            for g, g_ref in zip(res[key]["grads"], ref["grads"]):
                np.testing.assert_allclose(g, g_ref, rtol=1e-9, atol=1e-11)
            np.testing.assert_allclose(res[key]["mean"], ref["mean"], rtol=1e-10)
            np.testing.assert_allclose(res[key]["var"], ref["var"], rtol=1e-9)
    # Training in lock-step: both ranks hold identical parameters afterwards.
    assert ranks[0]["fit"] == ranks[1]["fit"]
    assert ranks[0]["fit"]["iterations"] > 0


def test_svgp_under_distributed_data_parallel_equals_one_process(tmp_path):
    runs = launch("svgp", tmp_path / "out", timeout=240)
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    ranks = [json.loads(Path(f"{tmp_path / 'out'}.{i}.json").read_text()) for i in range(2)]
    assert ranks[0] == ranks[1]  # lock-step, also when rank 1 alone is interrupted:
    assert ranks[0]["interrupted"][:2] == [True, 2]  # both stop after the same epoch
    X, y, _, _ = problem()
    single = svgp_model(X, y)
    fit = single.fit(batch_size=300, epochs=3, lr=0.05)  # the two halves together: all the data
    for got, ref in zip(ranks[0]["params"], single.parameters()):
        np.testing.assert_allclose(got, ref.detach().reshape(-1).numpy(), rtol=1e-7, atol=1e-9)
    # each epoch's objective is the mean over both ranks' batches: one process's estimate
    np.testing.assert_allclose(ranks[0]["history"], fit.history, rtol=1e-7)


def test_a_dying_rank_makes_the_other_fail_clearly_instead_of_hanging(tmp_path):
    start = time.perf_counter()
    runs = launch("die", tmp_path / "out", timeout=120)
    assert time.perf_counter() - start < 100
    assert runs[1].returncode == 1
    assert runs[0].returncode == 3, runs[0].stdout + runs[0].stderr
    assert "DistributedError" in runs[0].stdout and "rank 0 of 2" in runs[0].stdout
    assert "peer process probably stopped" in runs[0].stdout


def test_without_a_process_group_nothing_is_reduced():
    assert not sg.distributed.is_distributed()


def test_blocks_means_and_group_noise_sharded_give_one_process_results(tmp_path):
    runs = launch("blocks", tmp_path / "out", timeout=240)
    for r in runs:
        assert r.returncode == 0, r.stderr
    X, y, Z, Xtest = problem()
    labels = block_labels(X)
    for approx, alpha in BLOCK_MEMBERS:
        ref = evaluate(build(X, y, Z, approx, alpha, blocks=labels), Xtest)
        for rank in range(2):
            res = json.loads(Path(f"{tmp_path / 'out'}.{rank}.json").read_text())[approx]
            assert res["loss"] == pytest.approx(ref["loss"], rel=1e-12)
            assert res["upper"] == pytest.approx(ref["upper"], rel=1e-12)
            for a, b in zip(res["grads"], ref["grads"]):
                np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(res["mean"], ref["mean"], rtol=1e-10)
            np.testing.assert_allclose(res["var"], ref["var"], rtol=1e-10)
    # a trainable mean and per-group noise reach the objective through each rank's rows only:
    # their gradients are summed over the ranks (with and without blocks)
    for approx, alpha in MEMBERS + BLOCK_MEMBERS:
        blocks = {"blocks": labels} if (approx, alpha) in BLOCK_MEMBERS else {}
        ref = evaluate(build(X, y, Z, approx, alpha, **row_terms(X), **blocks), Xtest)
        for rank in range(2):
            res = json.loads(Path(f"{tmp_path / 'out'}.{rank}.json").read_text())[
                f"rows-{approx}-{alpha}-{bool(blocks)}"]
            assert res["loss"] == pytest.approx(ref["loss"], rel=1e-12)
            for a, b in zip(res["grads"], ref["grads"]):
                np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)
    # rows dealt out regardless of blocks: every block is on both ranks; both ranks say so
    runs = launch("split-blocks", tmp_path / "split", timeout=240)
    for r in runs:
        assert r.returncode == 4, r.stderr
        assert "label 0 is on ranks 0 and 1" in r.stdout and "shard the data by block" in r.stdout


def test_spectral_models_shard_and_unsharded_models_ignore_the_process_group(tmp_path):
    """RFF and SSGP on two shards equal one process on all the data (a trainable mean
    included); models that hold all the data on every rank (the GP-LVM, SVGP's
    collapsed bound and diagnostics) give one process's numbers under a process group."""
    runs = launch("spectral", tmp_path / "out", timeout=240)
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    ranks = [json.loads(Path(f"{tmp_path / 'out'}.{i}.json").read_text()) for i in range(2)]
    X, y, _, Xtest = problem()
    models = spectral_models(X, y)
    rep = models["RFF"].diagnostics()  # the exact GP's evidence: every rank's rows gathered
    for res in ranks:
        np.testing.assert_allclose(res["diagnostics"], [rep.objective, rep.exact,
                                                        rep.noise_variance, rep.num_data],
                                   rtol=1e-10)
    for name, model in models.items():
        ref = evaluate_spectral(model, Xtest)
        for res in ranks:
            assert res[name]["loss"] == pytest.approx(ref["loss"], rel=1e-12)
            for g, g_ref in zip(res[name]["grads"], ref["grads"]):
                np.testing.assert_allclose(g, g_ref, rtol=1e-9, atol=1e-11)
            np.testing.assert_allclose(res[name]["mean"], ref["mean"], rtol=1e-10)
            np.testing.assert_allclose(res[name]["var"], ref["var"], rtol=1e-9)
    assert ranks[0]["fit"] == ranks[1]["fit"] and ranks[0]["fit"]["iterations"] > 0
    for name, value in whole_data_models(X, y).items():
        for res in ranks:
            np.testing.assert_allclose(res["whole"][name], value(), rtol=1e-12)


def test_an_interrupt_on_one_rank_stops_every_rank_at_the_same_iteration(tmp_path):
    """A callback's KeyboardInterrupt on rank 1, or Ctrl-C (SIGINT) on rank 0, in lock-step
    training: both ranks stop at that iteration with the same parameters, and the next
    collective evaluation is that of all the data at those parameters on both."""
    runs = launch("interrupt", tmp_path / "out", timeout=120)
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    ranks = [json.loads(Path(f"{tmp_path / 'out'}.{i}.json").read_text()) for i in range(2)]
    X, y, Z, _ = problem()
    for how, at in (("callback", 3), ("ctrl-c", 2)):
        a, b = ranks[0][how], ranks[1][how]
        assert a["interrupted"] and b["interrupted"]
        assert a["iterations"] == b["iterations"] == at
        assert a["params"] == b["params"]
        one = build(X, y, Z, "vfe", None)
        with torch.no_grad():
            for p, values in zip(one.parameters(), a["params"]):
                p.copy_(torch.tensor(values, dtype=p.dtype).view_as(p))
        for res in (a, b):
            assert res["after"] == pytest.approx(one.log_marginal_likelihood(), rel=1e-12)


def test_diagnostics_of_sharded_data_are_those_of_all_the_data(tmp_path):
    """On two shards, the report's bounds, exact evidence, noise ratio and inducing checks
    equal one process's on all the data; the tighter upper bound (extra inputs drawn from all
    ranks' rows) is a valid bound; a sharded fit is checked on every rank alike."""
    runs = launch("diagnose", tmp_path / "out", timeout=240)
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    ranks = [json.loads(Path(f"{tmp_path / 'out'}.{i}.json").read_text()) for i in range(2)]
    X, y, Z, _ = problem()
    for approx, alpha, terms in (("vfe", None, {}), ("fitc", None, {}),
                                 ("rows", None, row_terms(X))):  # a mean, group noise
        ref = report_numbers(build(X, y, diagnosed_inducing(Z), "fitc" if approx == "fitc"
                                   else "vfe", alpha, **terms).diagnostics())
        for res in ranks:
            got = res[approx]
            for key in ("objective", "lower", "upper", "exact", "noise_ratio", "noise"):
                assert got[key] == pytest.approx(ref[key], rel=1e-10), key
            for key in ("num_data", "merged", "far", "effective"):
                assert got[key] == ref[key], key
            assert got["tight"] >= got["exact"] - 1e-8 and got["far"] == [10]
        assert ranks[0][approx]["warnings"] == ranks[1][approx]["warnings"]
    warned = ranks[0]["fit warnings"]
    assert warned == ranks[1]["fit warnings"] and any("not certified" in w for w in warned)


def test_ranks_agree_on_shapes_and_start_where_one_process_would(tmp_path):
    """Data of different widths on two ranks: a ValueError on both at once (not the process
    group's timeout). An int M (or the default) of inducing inputs and the data-based starting
    values are taken from the rows of both ranks (40 and 3 rows): the model is one process's
    on all 43 rows; an M that the rows cannot supply fails on both ranks alike."""
    runs = launch("agree", tmp_path / "out", timeout=120)
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    ranks = [json.loads(Path(f"{tmp_path / 'out'}.{i}.json").read_text()) for i in range(2)]
    X, y, _, _ = problem()
    for M in (5, None):
        one = sg.SGPR(X[:43], y[:43], inducing_points=M, mean="constant")
        # every row an inducing input (M = None): one process's model is the exact GP
        # (`is_exact`), sharded data's the sparse one; compare with that
        one.unfreeze("inducing_points")
        for res in ranks:
            np.testing.assert_array_equal(res[str(M)]["Z"], one.inducing_points)
            assert res[str(M)]["loss"] == pytest.approx(one.training_loss().item(), rel=1e-12)
    assert np.shape(ranks[0]["None"]["Z"]) == (43, 3)
    for res in ranks:
        assert res["50"].startswith("ValueError") and "N=43" in res["50"]
        assert res["columns"].startswith("ValueError after")
        assert float(res["columns"].split()[2]) < 10  # the group's timeout is 20 s
        assert "rank 0: X [N, 3]" in res["columns"] and "rank 1: X [N, 2]" in res["columns"]


@pytest.mark.parametrize("local_rank, ranks, gpus, expected", [
    (0, 2, 0, ("gloo", "cpu")),          # no GPU: gloo on the CPU
    (1, 2, 1, ("gloo", "cuda:0")),       # two ranks share one GPU: NCCL would refuse
    (1, 2, 2, ("nccl", "cuda:1")),       # a GPU per rank
    (0, 1, 4, ("nccl", "cuda:0")),       # one rank, several GPUs
    (2, 3, 2, ("gloo", "cuda:0")),       # three ranks on two GPUs, round-robin
])
def test_backend_and_device_for_any_number_of_ranks_and_gpus(local_rank, ranks, gpus, expected):
    assert sg.distributed.backend_and_device(local_rank, ranks, gpus) == expected


def test_backend_and_device_refuses_impossible_ranks():
    with pytest.raises(ValueError, match=r"local_rank must lie in \[0, 2\)"):
        sg.distributed.backend_and_device(2, 2, 1)
    with pytest.raises(ValueError, match="gpus must be a non-negative integer"):
        sg.distributed.backend_and_device(0, 2, -1)
