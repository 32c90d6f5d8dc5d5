"""The CUDA path: the same numbers on a GPU as on the CPU. Skipped where no GPU is present.

``SPARSEGP_TEST_DEVICE`` names another device to compare with the CPU (``cpu`` runs the same
checks here, to try these tests' code before a GPU is at hand)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import sparsegp as sg

from .conftest import make_problem

DEVICE = os.environ.get("SPARSEGP_TEST_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(),
                                reason="no CUDA device on this machine")

MEMBERS = [("vfe", None), ("fitc", None), ("pep", 0.5)]


def trained(model):
    return [p for p in model.parameters() if p.requires_grad]


def pair(approx, alpha, **kw):
    X, y = make_problem(0, N=500, D=3)
    Z = X[:20]
    make = lambda: sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=[1.0, 1.2, 0.8]),  # noqa: E731
                           inducing_points=Z, approximation=approx, alpha=alpha,
                           noise_variance=0.1, chunk_size=64, **kw)
    return make(), make().to(DEVICE)


@pytest.mark.parametrize("approx,alpha", MEMBERS)
def test_objective_gradient_and_predictions_match_the_cpu(approx, alpha):
    cpu, gpu = pair(approx, alpha)
    assert gpu.device.type == torch.device(DEVICE).type == gpu.X.device.type
    lc, lg = cpu.training_loss(), gpu.training_loss()
    assert lg.item() == pytest.approx(lc.item(), rel=1e-10)
    for a, b in zip(torch.autograd.grad(lc, trained(cpu)),
                    torch.autograd.grad(lg, trained(gpu))):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-8, atol=1e-10)
    Xs = np.linspace(-2, 2, 30)[:, None].repeat(3, 1)
    for x, y_ in zip(cpu.predict(Xs), gpu.predict(Xs)):
        np.testing.assert_allclose(y_, x, rtol=1e-9, atol=1e-12)
    assert gpu.upper_bound() == pytest.approx(cpu.upper_bound(), rel=1e-10)


def test_models_built_from_device_tensors_live_on_that_device():
    """Data, inducing inputs and test inputs given as tensors on the device, the kernel built on
    the CPU (as a user writes it): the model moves to the data's device, its predictions are
    tensors there, and they equal the CPU model's."""
    X, y = make_problem(0, N=300, D=3)
    labels = (y > np.median(y)).astype(float)
    Xt, yt, lt = (torch.as_tensor(a) for a in (X, y, labels))
    Xs = torch.linspace(-2, 2, 30, dtype=torch.float64)[:, None].repeat(1, 3)
    makers = [lambda X, y, l: sg.SGPR(X, y, kernel=sg.kernels.SquaredExponential(ard=True),
                                      inducing_points=X[:20]),
              lambda X, y, l: sg.SVGP(X, l, likelihood=sg.likelihoods.Bernoulli(),
                                      kernel=sg.kernels.Matern32(), inducing_points=X[:20]),
              lambda X, y, l: sg.GPR(X, y, kernel=sg.kernels.SquaredExponential())]
    for make in makers:
        cpu, gpu = make(Xt, yt, lt), make(Xt.to(DEVICE), yt.to(DEVICE), lt.to(DEVICE))
        assert {p.device.type for p in gpu.parameters()} == {torch.device(DEVICE).type}
        with torch.no_grad():
            mc, vc = cpu.predict_f(Xs)
            mg, vg = gpu.predict_f(Xs.to(DEVICE))
        assert mg.device.type == torch.device(DEVICE).type
        torch.testing.assert_close(mg.cpu(), mc, rtol=1e-6, atol=1e-8)
        torch.testing.assert_close(vg.cpu(), vc, rtol=1e-6, atol=1e-8)


def test_block_power_ep_matches_the_cpu():
    X, _ = make_problem(0, N=500, D=3)
    labels = sg.cluster_blocks(X, 40, seed=0)  # blocks of mixed sizes: padded batches
    for approx, alpha in (("fitc", None), ("pep", 0.5)):
        cpu, gpu = pair(approx, alpha, blocks=labels)
        lc, lg = cpu.training_loss(), gpu.training_loss()
        assert lg.item() == pytest.approx(lc.item(), rel=1e-10)
        for a, b in zip(torch.autograd.grad(lc, trained(cpu)),
                        torch.autograd.grad(lg, trained(gpu))):
            torch.testing.assert_close(b.cpu(), a, rtol=1e-8, atol=1e-10)


def test_fit_on_the_gpu_and_float32_compute():
    cpu, gpu = pair("vfe", None)
    res = gpu.fit(maxiter=30)
    assert res.iterations > 0 and np.isfinite(res.objective)
    _, g32 = pair("fitc", None, compute_dtype=torch.float32)
    c64, _ = pair("fitc", None)
    assert g32.training_loss().item() == pytest.approx(c64.training_loss().item(), rel=1e-5)


def test_convolutional_svgp_matches_the_cpu():
    """Multi-class SVGP with a weighted convolutional kernel plus an SE part on separate
    inducing sets: the ELBO, its gradient and predictions on the GPU equal the CPU's."""
    rng = np.random.default_rng(0)
    X, labels = rng.random((60, 64)), rng.integers(0, 3, 60)

    def make():
        k = sg.kernels.Convolutional(sg.kernels.SquaredExponential(), image_shape=(8, 8),
                                     patch_shape=(3, 3), weighted=True) + sg.kernels.SquaredExponential()
        return sg.SVGP(X, labels, kernel=k, inducing_points=6, seed=1,
                       likelihood=sg.likelihoods.MultiClass(3, link="robustmax"))

    cpu, gpu = make(), make().to(DEVICE)
    lc, lg = cpu.training_loss(), gpu.training_loss()
    assert lg.item() == pytest.approx(lc.item(), rel=1e-10)
    for a, b in zip(torch.autograd.grad(lc, trained(cpu)),
                    torch.autograd.grad(lg, trained(gpu))):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(gpu.predict_proba(X), cpu.predict_proba(X), rtol=1e-9, atol=1e-12)
    assert gpu.fit(batch_size=20, epochs=2, progress=False).iterations > 0


def test_sgpc_stochastic_schedule_matches_the_cpu():
    """SGPC on the GPU: sweeps of a batch with running sums of the sites, and the minibatch
    energy and its gradient, equal the CPU's; a stochastic fit runs."""
    from sparsegp.training.ep import site_sweeps
    from sparsegp.training.site_sums import RunningSiteSums

    X, y = make_problem(0, N=300, D=2)
    labels = (y > np.median(y)).astype(float)
    cpu = sg.SGPC(X, labels, inducing_points=X[:12], alpha=0.5)
    gpu = sg.SGPC(X, labels, inducing_points=X[:12], alpha=0.5).to(DEVICE)
    results = []
    for model in (cpu, gpu):
        model.update_sites(max_sweeps=3)
        idx = torch.arange(40, 90, device=model.device)
        other = torch.arange(150, 200, device=model.device)
        sums = RunningSiteSums(model)
        site_sweeps(model, 2, batch=idx, sums=sums)
        F = model.minibatch_energy(idx, other, sums.totals)
        results.append((model.tau.cpu(), F.item(),
                        [g.cpu() for g in torch.autograd.grad(F, trained(model))]))
    (tau_c, F_c, g_c), (tau_g, F_g, g_g) = results
    torch.testing.assert_close(tau_g, tau_c, rtol=1e-10, atol=1e-12)
    assert F_g == pytest.approx(F_c, rel=1e-10)
    for a, b in zip(g_c, g_g):
        torch.testing.assert_close(b, a, rtol=1e-8, atol=1e-10)
    res = gpu.fit(schedule="stochastic", batch_size=50, epochs=2, progress=False)
    assert res.info["steps"] == 12 and np.isfinite(gpu.log_marginal_likelihood())


def test_random_input_models_match_the_cpu():
    rng = np.random.default_rng(0)
    Y = np.tanh(rng.standard_normal((80, 2)) @ rng.standard_normal((2, 5)))
    y = np.cumsum(rng.standard_normal(60))[:, None] * 0.1
    for make in (lambda: sg.BayesianGPLVM(Y, latent_dim=3, inducing_points=10),
                 lambda: sg.GPSSM(y, state_dim=1, inducing_points=8, emission=[[1.0]])):
        cpu, gpu = make(), make().to(DEVICE)
        lc, lg = cpu.training_loss(), gpu.training_loss()
        assert lg.item() == pytest.approx(lc.item(), rel=1e-10)
        for a, b in zip(torch.autograd.grad(lc, trained(cpu)),
                        torch.autograd.grad(lg, trained(gpu))):
            torch.testing.assert_close(b.cpu(), a, rtol=1e-8, atol=1e-10)
        gpu.fit(maxiter=20)
        assert np.isfinite(gpu.log_marginal_likelihood())


def test_kissgp_and_spectral_models_match_the_cpu():
    X, y = sg.datasets.snelson()
    for make in (lambda: sg.KISSGP(X, y, grid_size=60, noise_variance=0.1),
                 lambda: sg.RFF(X, y, num_features=20, noise_variance=0.1),
                 lambda: sg.SSGP(X, y, num_features=20, noise_variance=0.1)):
        cpu, gpu = make(), make().to(DEVICE)
        # CG stops at a relative residual of 1e-6: the two devices may take different steps
        assert gpu.log_marginal_likelihood() == pytest.approx(cpu.log_marginal_likelihood(),
                                                              rel=1e-6)
        Xs = np.linspace(0.5, 5.5, 7)[:, None]
        for a, b in zip(cpu.predict(Xs), gpu.predict(Xs)):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)


def test_streaming_updates_and_conditioning_match_the_cpu():
    """A streamed SGPR, and GPR and SGPR conditioned on new observations (one set of targets
    and fantasies), predict on the device what they predict on the CPU."""
    X, y = make_problem(1, N=400, D=2)
    Xs = np.linspace(-2, 2, 25)[:, None].repeat(2, 1)
    kernel = lambda: sg.kernels.SquaredExponential(lengthscale=[1.0, 0.8])  # noqa: E731
    for approx, alpha in (("vfe", None), ("pep", 0.5)):
        first = sg.SGPR(X[:200], y[:200], kernel=kernel(), inducing_points=X[:15],
                        approximation=approx, alpha=alpha, noise_variance=0.1)
        cpu = first.update(X[200:], y[200:], fit=False)
        gpu = first.to(DEVICE).update(torch.as_tensor(X[200:], device=DEVICE),
                                      torch.as_tensor(y[200:], device=DEVICE), fit=False)
        assert gpu.device.type == torch.device(DEVICE).type
        assert gpu.log_marginal_likelihood() == pytest.approx(cpu.log_marginal_likelihood(),
                                                              rel=1e-10)
        for a, b in zip(cpu.predict(Xs), gpu.predict(Xs)):
            np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12)
    fantasies = np.random.default_rng(0).standard_normal((4, 5))
    for build in (lambda: sg.GPR(X[:300], y[:300], kernel=kernel(), noise_variance=0.1),
                  lambda: sg.SGPR(X[:300], y[:300], kernel=kernel(), inducing_points=X[:15],
                                  noise_variance=0.1)):
        cpu, gpu = build(), build().to(DEVICE)
        for targets in (y[300:305], y[300:305] + fantasies):
            c = cpu.condition_on_observations(X[300:305], targets)
            g = gpu.condition_on_observations(torch.as_tensor(X[300:305], device=DEVICE),
                                              torch.as_tensor(targets, device=DEVICE))
            for a, b in zip(c.predict(Xs), g.predict(torch.as_tensor(Xs, device=DEVICE))):
                np.testing.assert_allclose(b.detach().cpu().numpy(), a, rtol=1e-9, atol=1e-12)
