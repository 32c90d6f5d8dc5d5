"""Noise that grows with the input: a heteroscedastic likelihood in SVGP."""

# %% [markdown]
# # Input-dependent noise
#
# `sg.likelihoods.HeteroscedasticGaussian()` models the log noise variance as a second latent
# GP, p(y | f, g) = N(y | f, e^g). Against a GP with one noise variance, its predictive band
# follows the data: narrow on the left, wide on the right, and the held-out log density says
# which model is right.

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import sparsegp as sg

QUICK = os.environ.get("SPARSEGP_QUICK") == "1"
OUT = Path(os.environ.get("SPARSEGP_GALLERY_OUT", "."))


def draw(seed, n):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (n, 1))
    return X, np.sin(6 * X[:, 0]) + (0.03 + 0.6 * X[:, 0] ** 2) * rng.normal(size=n)


X, y = draw(0, 300)
X_test, y_test = draw(1, 1000)
het = sg.SVGP(X, y, likelihood=sg.likelihoods.HeteroscedasticGaussian(), inducing_points=12)
het.fit(batch_size=300, epochs=150 if QUICK else 1000, lr=0.03, progress=False)
hom = sg.SVGP(X, y, inducing_points=12)
hom.fit()
for name, model in {"heteroscedastic": het, "one noise variance": hom}.items():
    print(f"{name:<20} test NLPD {-model.predict_log_density(X_test, y_test).mean():.3f}")

# %%
Xs = np.linspace(0, 1, 200)[:, None]
fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(X[:, 0], y, ".", color="0.6", ms=3)
for name, model, color in [("heteroscedastic", het, "C0"), ("one noise variance", hom, "C1")]:
    mean, var = model.predict_y(Xs)
    ax.plot(Xs[:, 0], mean, color, label=name)
    ax.fill_between(Xs[:, 0], mean - 2 * np.sqrt(var), mean + 2 * np.sqrt(var), color=color,
                    alpha=0.15)
ax.legend(loc="lower left")
fig.tight_layout()
fig.savefig(OUT / "heteroscedastic.png", dpi=90)
