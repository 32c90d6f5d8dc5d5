"""What the conformance tests share: inputs, gradient checks through a module's parameters,
perturbed copies, plain configs, and brute-force Gaussian expectations (the references of the
likelihood checks). Nothing here knows any particular class."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch import Tensor, nn

DTYPE = torch.float64


# -- inputs -----------------------------------------------------------------------------------
def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def normal(*shape: int, seed: int = 0) -> Tensor:
    return torch.randn(*shape, generator=generator(seed), dtype=DTYPE)


def uniform(*shape: int, seed: int = 0, low: float = 0.0, high: float = 1.0) -> Tensor:
    return low + (high - low) * torch.rand(*shape, generator=generator(seed), dtype=DTYPE)


# -- parameters -------------------------------------------------------------------------------
@contextmanager
def substituted(module: nn.Module, values: Sequence[Tensor]) -> Iterator[None]:
    """Within the block, the module's parameters (in `named_parameters` order) are the given
    tensors, so that a function of them can be differentiated by `gradcheck`."""
    names = [name for name, _ in module.named_parameters()]
    if len(names) != len(values):
        raise ValueError(f"{len(values)} values for {len(names)} parameters")
    saved = []
    try:
        for name, value in zip(names, values):
            *path, leaf = name.split(".")
            owner = module.get_submodule(".".join(path)) if path else module
            saved.append((owner, leaf, owner._parameters[leaf]))
            owner._parameters[leaf] = value
        yield
    finally:
        for owner, leaf, old in reversed(saved):
            owner._parameters[leaf] = old


def parameter_copies(*modules: nn.Module) -> list[Tensor]:
    """Leaf copies (requiring grad) of every parameter of the modules, in order."""
    return [p.detach().clone().requires_grad_(True) for m in modules for p in m.parameters()]


def gradcheck_through(modules: Sequence[nn.Module], fn: Callable[..., Any],
                      inputs: Sequence[Tensor] = (), **options: Any) -> bool:
    """`torch.autograd.gradcheck` of fn(*inputs) with respect to every parameter of the modules
    (their raw, unconstrained tensors) and to the inputs that require grad; float64 central
    differences against autograd."""
    counts = [len(list(m.parameters())) for m in modules]
    params = parameter_copies(*modules)

    def wrapped(*args: Tensor) -> Any:
        with ExitStack() as stack:
            start = 0
            for module, n in zip(modules, counts):
                stack.enter_context(substituted(module, args[start:start + n]))
                start += n
            return fn(*args[start:])

    options = {"atol": 1e-6, "rtol": 1e-5, **options}
    return torch.autograd.gradcheck(wrapped, (*params, *inputs), **options)


def perturb(module: nn.Module, seed: int = 0, scale: float = 0.1) -> None:
    """Move every parameter (raw values) by a small seeded random amount, so that a round trip
    that lost a value cannot pass by reproducing the constructor's default."""
    g = generator(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))


def assert_plain(value: Any, where: str = "config") -> None:
    """A config holds plain Python values only (what a weights-only model file can store)."""
    if isinstance(value, dict):
        for key, item in value.items():
            assert isinstance(key, str), f"{where} has a key {key!r} that is not a string"
            assert_plain(item, f"{where}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            assert_plain(item, f"{where}[{i}]")
    else:
        assert value is None or type(value) in (str, int, float, bool), \
            f"{where} is a {type(value).__name__}, not a plain value: {value!r}"


def assert_same_state(a: nn.Module, b: nn.Module, skip: Any = ()) -> None:
    """The same state_dict entries and values (but the keys in `skip`)."""
    sa, sb = a.state_dict(), b.state_dict()
    assert set(sa) - set(skip) == set(sb) - set(skip), set(sa) ^ set(sb)
    for key in set(sa) - set(skip):
        assert torch.equal(sa[key], sb[key]), key


def assert_psd(K: Tensor, what: str, rtol: float = 1e-10) -> None:
    """K symmetric (to rounding) with its smallest eigenvalue ≥ −rtol·max|diag K|."""
    scale = float(K.diagonal().abs().max().clamp_min(1e-300))
    asym = float((K - K.mT).abs().max())
    assert asym <= 1e-12 * scale, f"{what} is not symmetric: max |K − Kᵀ| = {asym:.3g}"
    smallest = float(torch.linalg.eigvalsh(K).min())
    assert smallest >= -rtol * scale, \
        f"{what} is not positive semi-definite: smallest eigenvalue {smallest:.3g} (scale {scale:.3g})"


# -- brute-force Gaussian expectations -------------------------------------------------------
def _grid(points: int, width: float) -> tuple[Tensor, Tensor]:
    """Equally spaced standard-normal nodes on [−width, width] with normalised density weights:
    the trapezoid rule, spectrally accurate for smooth integrands on a wide enough window."""
    z = torch.linspace(-width, width, points, dtype=DTYPE)
    w = torch.exp(-0.5 * z * z)
    return z, w / w.sum()


def expectation(fn: Callable[[Tensor], Tensor], mean: Tensor, var: Tensor
                ) -> tuple[Tensor, Tensor]:
    """(E, error bar) of fn(f) for f ~ N(mean, diag var), elementwise over the data points,
    knowing nothing of fn: mean, var [N] (one latent function) or [N, C].

    C = 1: a dense 1-D grid of 4001 nodes over ±12 standard deviations; C = 2: a 2-D grid of
    401² nodes over ±9; error bars 0. C ≥ 3: randomised quasi-Monte Carlo (REPLICATES
    independently scrambled Sobol sequences of POINTS points), with the standard error over
    the replicates as error bar. fn maps f [S, N] or [S, N, C] to [S, N] or [S, N, K]."""
    if mean.dim() == 1:
        z, w = _grid(4001, 12.0)
        f = mean + var.sqrt() * z[:, None]
        return torch.tensordot(w, fn(f), dims=([0], [0])), torch.zeros(())
    C = mean.shape[-1]
    if C == 2:
        z, w = _grid(401, 9.0)
        Z = torch.stack(torch.meshgrid(z, z, indexing="ij"), -1).reshape(-1, 2)
        W = (w[:, None] * w[None, :]).reshape(-1)
        f = mean + var.sqrt() * Z[:, None, :]
        return torch.tensordot(W, fn(f), dims=([0], [0])), torch.zeros(())
    estimates, high, low = [], None, None
    for replicate in range(REPLICATES):
        u = torch.quasirandom.SobolEngine(C, scramble=True, seed=1000 + replicate).draw(
            POINTS, dtype=DTYPE)
        Z = torch.special.ndtri(u.clamp(1e-15, 1.0 - 1e-15))
        values = fn(mean + var.sqrt() * Z[:, None, :])
        estimates.append(values.mean(0))
        top, bottom = values.max(), values.min()
        high = top if high is None else torch.maximum(high, top)
        low = bottom if low is None else torch.minimum(low, bottom)
    E = torch.stack(estimates)
    # the spread of the replicates; at least the range of fn's values times 3/(points seen):
    # an event that no point hit (a rare class of a piecewise-constant fn, where every point
    # gives the same value) has a probability ≲ 3/n
    spread = E.std(0) / math.sqrt(REPLICATES)
    return E.mean(0), torch.maximum(spread, (high - low) * 3.0 / (REPLICATES * POINTS))


#: randomised quasi-Monte Carlo of `expectation` for C ≥ 3: independent scramblings × points
REPLICATES, POINTS = 8, 2**14
