"""The pseudo-point family on Snelson's data: exact GP, VFE, FITC and Power EP (α = 0.5)."""

# %% [markdown]
# # The family on Snelson's data
#
# DTC, FITC, VFE and Power EP are members of one family (Bui, Yan & Turner 2017). Here each
# is fitted with the same few inducing inputs on the bundled Snelson data set and drawn next
# to the exact GP: FITC shrinks the noise and its objective can exceed the exact evidence, VFE
# is a lower bound, and Power EP with α = 0.5 sits between them.

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import sparsegp as sg

QUICK = os.environ.get("SPARSEGP_QUICK") == "1"
OUT = Path(os.environ.get("SPARSEGP_GALLERY_OUT", "."))
maxiter = 60 if QUICK else 1000

X, y = sg.datasets.snelson()
exact = sg.GPR(X, y)
exact.fit(maxiter=maxiter)
models = {"exact": exact}
for name, options in {"VFE": {"approximation": "vfe"}, "FITC": {"approximation": "fitc"},
                      "PEP α=0.5": {"approximation": "pep", "alpha": 0.5}}.items():
    model = sg.SGPR(X, y, inducing_points=6, **options)
    model.fit(maxiter=maxiter, diagnose=False)
    models[name] = model

# %% [markdown]
# The objective of each fit, its noise variance and — for the sparse ones — the Titsias
# (2014) upper bound on the exact log evidence at the same hyperparameters (the exact GP's
# objective is the log evidence itself: no bound, "—"):

# %%
print(f"{'model':<10} {'objective':>10} {'noise':>8} {'upper bound':>12}")
for name, model in models.items():
    upper = "—" if name == "exact" else f"{model.upper_bound():.2f}"
    print(f"{name:<10} {model.log_marginal_likelihood():>10.2f} {model.noise_variance:>8.4f} "
          f"{upper:>12}")

# %%
Xs = np.linspace(-1, 7, 300)[:, None]
fig, axes = plt.subplots(1, 4, figsize=(16, 3.5), sharey=True)
for ax, (name, model) in zip(axes, models.items()):
    mean, var = model.predict(Xs, include_noise=True)
    ax.plot(X[:, 0], y, ".", color="0.6", ms=3)
    ax.plot(Xs[:, 0], mean, "C0")
    ax.fill_between(Xs[:, 0], mean - 2 * np.sqrt(var), mean + 2 * np.sqrt(var), alpha=0.2)
    if name != "exact":
        Z = model.inducing_points[:, 0]
        ax.plot(Z, np.full_like(Z, y.min() - 0.5), "k^")
    ax.set_title(f"{name}: {model.log_marginal_likelihood():.1f}")
fig.tight_layout()
fig.savefig(OUT / "family.png", dpi=90)
