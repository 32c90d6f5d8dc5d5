"""Several outputs with missing values: independent outputs against the LMC."""

# %% [markdown]
# # Several outputs
#
# Three outputs share one input; the second is missing over a whole region. Independent
# outputs (`SGPR` with Y [N, 3]) can only fall back to the prior there, while the linear model
# of coregionalisation (`SVGP(..., mixing=W)`: f = W g from two latent GPs) borrows the other
# outputs' information through W.

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import sparsegp as sg

QUICK = os.environ.get("SPARSEGP_QUICK") == "1"
OUT = Path(os.environ.get("SPARSEGP_GALLERY_OUT", "."))

rng = np.random.default_rng(0)
X = np.sort(rng.uniform(-4, 4, (300, 1)), axis=0)
g = np.c_[np.sin(1.5 * X[:, 0]), 0.5 * X[:, 0]]                  # two latent functions
W_true = np.array([[1.0, 0.2], [0.8, -0.6], [-0.3, 1.0]])
F = g @ W_true.T
Y = F + 0.1 * rng.normal(size=F.shape)
gap = (X[:, 0] > 0.5) & (X[:, 0] < 2.5)
Y[gap, 1] = np.nan                                                # output 1 missing here

independent = sg.SGPR(X, Y, inducing_points=20)
independent.fit(maxiter=100 if QUICK else 1000)
lmc = sg.SVGP(X, Y, inducing_points=20, mixing=rng.normal(size=(3, 2)),
              likelihood=sg.likelihoods.Gaussian(variance=[0.1, 0.1, 0.1]))
lmc.fit(batch_size=300, epochs=300 if QUICK else 3000, lr=0.02, progress=False)

Xs = np.linspace(-4, 4, 200)[:, None]
truth = np.c_[np.sin(1.5 * Xs[:, 0]), 0.5 * Xs[:, 0]] @ W_true.T
inside = (Xs[:, 0] > 0.5) & (Xs[:, 0] < 2.5)
for name, model in {"independent": independent, "LMC": lmc}.items():
    mean = model.predict(Xs)[0] if name == "independent" else model.predict_f(Xs)[0]
    rmse = np.sqrt(np.mean((mean[inside, 1] - truth[inside, 1]) ** 2))
    print(f"{name:<12} RMSE of output 1 where it is missing: {rmse:.3f}")
print("learned W (up to a rotation of the latent functions):\n", np.round(lmc.mixing, 2))

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 3.5))
for p, ax in enumerate(axes):
    ax.plot(X[:, 0], Y[:, p], ".", color="0.6", ms=3)
    ax.plot(Xs[:, 0], truth[:, p], "k--", lw=1, label="truth")
    for name, model, color in [("independent", independent, "C0"), ("LMC", lmc, "C1")]:
        mean, var = model.predict(Xs) if name == "independent" else model.predict_f(Xs)
        ax.plot(Xs[:, 0], mean[:, p], color, label=name)
        ax.fill_between(Xs[:, 0], mean[:, p] - 2 * np.sqrt(var[:, p]),
                        mean[:, p] + 2 * np.sqrt(var[:, p]), color=color, alpha=0.15)
    if p == 1:
        ax.axvspan(0.5, 2.5, color="r", alpha=0.05)
    ax.set_title(f"output {p}")
axes[0].legend()
fig.tight_layout()
fig.savefig(OUT / "multioutput.png", dpi=90)
