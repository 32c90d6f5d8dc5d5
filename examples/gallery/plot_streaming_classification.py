"""A classifier that learns from batches it never sees again: streaming SVGP."""

# %% [markdown]
# # Streaming classification
#
# `SVGP.update(X_new, y_new)` returns a model that has seen the old data through the old
# posterior q(u) alone (Bui, Nguyen & Turner 2017; the bound is derived in the maths notes,
# §10). Here the data arrive in three batches, left to right, and each update fits the new
# batch and the summary of the ones before it. After the last batch the streamed classifier
# is close to one fitted to all the data at once.

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import sparsegp as sg

QUICK = os.environ.get("SPARSEGP_QUICK") == "1"
OUT = Path(os.environ.get("SPARSEGP_GALLERY_OUT", "."))
EPOCHS = 60 if QUICK else 400

rng = np.random.default_rng(0)
X = np.sort(rng.uniform(-3, 3, (300, 1)), axis=0)
p_true = 1 / (1 + np.exp(-4 * np.sin(1.5 * X[:, 0])))
y = (rng.uniform(size=300) < p_true).astype(float)
batches = np.array_split(np.arange(300), 3)  # left, middle, right

model = sg.SVGP(X[batches[0]], y[batches[0]], likelihood=sg.likelihoods.Bernoulli(),
                inducing_points=10)
model.fit(epochs=EPOCHS, progress=False)
stages = [model]
for rows in batches[1:]:
    model = model.update(X[rows], y[rows], inducing_points=10, epochs=EPOCHS, progress=False)
    stages.append(model)
batch = sg.SVGP(X, y, likelihood=sg.likelihoods.Bernoulli(), inducing_points=10)
batch.fit(epochs=EPOCHS, progress=False)

Xs = np.linspace(-3, 3, 200)[:, None]
gap = np.abs(stages[-1].predict_proba(Xs) - batch.predict_proba(Xs)).max()
print(f"after 3 batches: {stages[-1].num_data_seen} points seen, largest gap to the batch "
      f"classifier's probability {gap:.3f}")

# %%
fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(X[:, 0], y, "|", color="0.6", ms=8)
ax.plot(Xs[:, 0], 1 / (1 + np.exp(-4 * np.sin(1.5 * Xs[:, 0]))), "k:", label="true p(y=1)")
for i, (m, rows) in enumerate(zip(stages, batches, strict=True)):
    ax.plot(Xs[:, 0], m.predict_proba(Xs), f"C{i}", label=f"after batch {i + 1}")
    ax.axvspan(X[rows[0], 0], X[rows[-1], 0], color=f"C{i}", alpha=0.06)
ax.plot(Xs[:, 0], batch.predict_proba(Xs), "C3--", label="all data at once")
ax.set_xlabel("x")
ax.set_ylabel("p(y = 1 | x)")
ax.legend(loc="lower left", fontsize=8)
fig.tight_layout()
fig.savefig(OUT / "streaming_classification.png", dpi=90)
