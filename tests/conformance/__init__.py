"""Conformance checks parametrised over the package's registries: every registered kernel,
inducing feature, likelihood, mean and model class is checked by the same generic tests, from
a small constructor recipe in `recipes.py` (a registered class without one fails
`test_every_registered_*_has_a_recipe`). `test_layering.py` checks the import structure."""
