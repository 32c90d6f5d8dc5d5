"""SGPC's stochastic schedule: the unbiased minibatch energy and the running sums of the
sites (`training.site_sums`) that spare it a pass over all the data per step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp import covariances as cov
from sparsegp.objectives import pep_classification as pep
from sparsegp.training.ep import refresh_steps, site_sweeps
from sparsegp.training.site_sums import RunningSiteSums


def banana(N, seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (N, 2))
    p = 1 / (1 + np.exp(-4 * np.sin(X[:, 0]) * np.cos(X[:, 1])))
    return X, (rng.uniform(size=N) < p).astype(float)


def exact_sums(clf):
    L, _ = cov.Kuu_cholesky(clf.feature, clf.kernel, clf.jitter)
    s = pep.site_statistics(clf.kernel, clf.feature, clf.X, L, clf.tau, clf.nu, 10_000)
    return L, s.A.detach(), s.c.detach()


def test_minibatch_energies_average_to_the_energy_and_its_gradient():
    """Over all pairs of batches of a partition of the sites into equal batches the estimates
    (values and gradients) average to the full energy's exactly: q(u) is all the sites'
    posterior; the local terms come from one batch, the sums' gradient from the other. A
    q(u) of the batch's sites alone, scaled by N/|batch|, fails this (the energy is not
    linear in the sites' statistics), and so does one batch for both (the gradient is then
    biased: checked below)."""
    X, y = banana(60, 4)
    clf = sg.SGPC(X, y, inducing_points=7, alpha=0.5, mean=sg.means.Constant(0.3))
    clf.update_sites(max_sweeps=3)  # sites away from their fixed point: nothing cancels
    params = [p for p in clf.parameters() if p.requires_grad]
    full = clf.minibatch_energy(None)
    g_full = torch.autograd.grad(full, params)
    order = torch.randperm(60, generator=torch.Generator().manual_seed(0))
    batches = order.split(15)

    def average(pairs):
        values, grads = [], []
        for idx, other in pairs:
            F = clf.minibatch_energy(idx, other)
            values.append(F.detach())
            grads.append(torch.autograd.grad(F, params))
        return torch.stack(values), [torch.stack(g).mean(0) for g in zip(*grads)]

    values, grads = average([(b, c) for b in batches for c in batches])
    assert float(values.std()) > 1.0  # the batches' estimates do differ
    torch.testing.assert_close(values.mean(), full.detach(), rtol=1e-12, atol=0)
    for g, want in zip(grads, g_full):
        torch.testing.assert_close(g, want, rtol=1e-10, atol=1e-12)
    _, same = average([(b, b) for b in batches])
    assert max(float((g - want).abs().max()) for g, want in zip(same, g_full)) > 1e-3
    with pytest.raises(ValueError, match="statistics_idx"):
        clf.minibatch_energy(batches[0])


def test_small_minibatches_reach_the_full_schedules_energy():
    """Batches of 20 of 400 sites: Adam on the unbiased estimate ends within 2 nats of the
    full schedule's converged energy (measured: 0.6–1.3 nats over six seeds; a q(u) from the
    batch's sites alone ended 3.9–5.1 nats below it)."""
    X, y = banana(400, 3)
    full = sg.SGPC(X, y, inducing_points=15, alpha=0.5)
    full.fit()
    clf = sg.SGPC(X, y, inducing_points=15, alpha=0.5)
    res = clf.fit(schedule="stochastic", epochs=12, batch_size=20, lr=0.05, progress=False)
    assert res.info["steps"] == 12 * 20
    assert clf.log_marginal_likelihood() > full.log_marginal_likelihood() - 2.0


def test_running_sums_follow_the_sites_exactly_and_cost_only_the_batch(monkeypatch):
    """Sweeps of a batch with running sums: the sums equal a fresh pass over all the sites
    (at fixed hyperparameters), and only the batch's rows are evaluated — per sweep its
    marginals and its sums' update, per energy its local terms and the sums' batch."""
    X, y = banana(200, 5)
    clf = sg.SGPC(X, y, inducing_points=9, alpha=0.5)
    clf.update_sites(max_sweeps=2)
    sums = RunningSiteSums(clf)
    rows = []
    real = cov.Kuf
    monkeypatch.setattr(cov, "Kuf", lambda f, k, Xb: rows.append(Xb.shape[0]) or real(f, k, Xb))
    idx, other = torch.arange(30, 55), torch.arange(100, 125)
    site_sweeps(clf, 3, tol=0.0, batch=idx, sums=sums)
    assert sum(rows) == 3 * 2 * 25
    L, A, c = exact_sums(clf)
    got_A, got_c = sums.totals(L)
    torch.testing.assert_close(got_A, A, rtol=0, atol=1e-12)
    torch.testing.assert_close(got_c, c, rtol=0, atol=1e-12)
    rows.clear()
    F = clf.minibatch_energy(idx, other, sums.totals)
    assert sum(rows) == 50
    monkeypatch.setattr(cov, "Kuf", real)
    torch.testing.assert_close(F, clf.minibatch_energy(idx, other), rtol=1e-12, atol=0)


def test_running_sums_keep_the_sites_weights_when_the_hyperparameters_move():
    """Between refreshes the sums hold w_n = Kuu⁻¹k_n of the refresh and re-whiten with the
    current Kuu: A = Σ τ_n (Lᵀw_n)(Lᵀw_n)ᵀ (checked densely). w_n does not depend on the
    kernel variance, so after a change of the variance alone the sums are exact."""
    X, y = banana(120, 6)
    clf = sg.SGPC(X, y, inducing_points=8, alpha=0.5)
    clf.update_sites(max_sweeps=3)
    sums = RunningSiteSums(clf)
    Kuu0 = sums.L0 @ sums.L0.mT  # Kuu with the jitter the refresh used
    W0 = torch.linalg.solve(Kuu0, cov.Kuf(clf.feature, clf.kernel, clf.X).detach())  # [M, N]
    with torch.no_grad():
        clf.kernel.lengthscale = clf.kernel.lengthscale * 1.3
        clf.feature.Z.add_(0.05)
    L, A_now, _ = exact_sums(clf)
    Lw = L.detach().mT @ W0
    A, c = sums.totals(L)
    torch.testing.assert_close(A, (Lw * clf.tau) @ Lw.mT, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(c, Lw @ clf.nu, rtol=1e-10, atol=1e-12)
    assert float((A - A_now).abs().max()) > 1e-3  # stale, as it should be between refreshes
    sums.refresh()
    with torch.no_grad():
        clf.kernel.variance = clf.kernel.variance * 2.5
    L, A_now, c_now = exact_sums(clf)
    A, c = sums.totals(L)
    torch.testing.assert_close(A, A_now, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(c, c_now, rtol=1e-10, atol=1e-12)


def test_refresh_interval():
    assert refresh_steps(400, 20) == 5 and refresh_steps(100, 100) == 1
    assert refresh_steps(10**6, 100) == 10
    X, y = banana(60, 1)
    for bad in (0, True, 2.5):
        with pytest.raises(ValueError, match="refresh_every"):
            sg.SGPC(X, y, inducing_points=5).fit(schedule="stochastic", refresh_every=bad)


def test_the_stochastic_schedule_counts_its_adam_steps_as_iterations():
    X, y = banana(80, 3)
    res = sg.SGPC(X, y, inducing_points=5).fit(schedule="stochastic", epochs=2, batch_size=20,
                                               progress=False)
    assert res.iterations == res.info["steps"] == 8  # 2 epochs of 4 batches (was: 2)
    assert res.info["epochs"] == len(res.history) == 2
    assert str(res).startswith("finished after 8 iterations")
