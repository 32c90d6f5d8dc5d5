"""Reproducible experiments and the demo: user entry points, no maths."""
