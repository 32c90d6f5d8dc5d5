"""Benchmarks and the naive baseline they are measured against (`sparsegp bench`)."""
