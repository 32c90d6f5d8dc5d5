"""Lower and upper bounds on the exact log evidence meet as inducing inputs are added."""

# %% [markdown]
# # Bounds that meet
#
# At fixed hyperparameters the VFE objective is a lower bound on log p(y) and Titsias' (2014)
# bound is an upper one. Adding inducing inputs closes the gap: when the two meet, the sparse
# model is as good as the exact GP. This is the check `model.diagnostics()` reports.

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt

import sparsegp as sg

QUICK = os.environ.get("SPARSEGP_QUICK") == "1"
OUT = Path(os.environ.get("SPARSEGP_GALLERY_OUT", "."))

X, y = sg.datasets.snelson()
exact = sg.GPR(X, y)
exact.fit(maxiter=60 if QUICK else 1000)
evidence = exact.log_marginal_likelihood()

sizes = [2, 4, 8, 16] if QUICK else [2, 3, 4, 6, 8, 10, 12, 16, 20, 25, 30]
lower, upper = [], []
for M in sizes:  # inducing inputs by k-means++ at the exact GP's hyperparameters
    vfe = sg.SGPR(X, y, kernel=exact.kernel, inducing_points=M,
                  noise_variance=exact.noise_variance)
    lower.append(vfe.log_marginal_likelihood())
    upper.append(vfe.upper_bound())
    print(f"M = {M:>2}: {lower[-1]:9.2f} <= log p(y) = {evidence:.2f} <= {upper[-1]:9.2f}")

# %%
fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(sizes, lower, "o-", label="VFE lower bound")
ax.plot(sizes, upper, "s-", label="upper bound (Titsias 2014)")
ax.axhline(evidence, color="k", ls="--", label="exact log p(y)")
ax.set_xlabel("inducing inputs M")
ax.set_ylabel("log evidence")
ax.set_ylim(evidence - 150, evidence + 150)
ax.legend()
fig.tight_layout()
fig.savefig(OUT / "bounds.png", dpi=90)
