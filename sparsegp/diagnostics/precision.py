"""Does float32 resolve this objective? The model's objective in its compute dtype against the
same objective in float64.

float32 N·M² work (kernel values, products, triangular solves; the M×M factorisations stay
float64) keeps about 1e-3 of the objective's magnitude while σ² ≥ 10⁻³ var(y). Below that its
rounding, ε₃₂ ≈ 6e-8 of kernel values near the signal variance, is amplified by up to
N·var/σ² (the condition of Qff + σ²I): at σ² = 10⁻⁶ var and N = 1000 nothing bounds the
relative error below O(1), and float32 objectives 10–30 % away from the float64 value have
been measured (the value depends on the CPU's rounding). Such an objective cannot be fitted
to the right hyperparameters, so `diagnose` evaluates it both ways and says so.

Shapes: `float32_discrepancy(objective32, objective64)` on floats -> a warning string or None.
"""

from __future__ import annotations

#: The relative difference of the compute-dtype and float64 objectives above which the
#: diagnostics warn: ten times the ~1e-3 that float32 work keeps where it is accurate.
RELATIVE_TOLERANCE = 1e-2


def float32_discrepancy(objective32: float, objective64: float) -> str | None:
    """The warning for an objective evaluated in float32 that differs from its float64 value
    by more than `RELATIVE_TOLERANCE` of its magnitude (a non-finite one always), or None."""
    scale = max(abs(objective64), 1.0)
    error = abs(objective32 - objective64)
    if error == error and error <= RELATIVE_TOLERANCE * scale:  # NaN fails the first test
        return None
    return (f"the objective in float32 ({objective32:.6g}) differs from its float64 value "
            f"({objective64:.6g}) by {error / scale:.2g} of its magnitude: float32 cannot "
            "resolve these data at this noise variance (σ² well below 1e-3·var(y)), so its "
            "fitted hyperparameters are not to be trusted; fit in float64 (model.double(), "
            "or compute_dtype=torch.float64)")
