"""The suite's own claims, shared by its test files: scaling assertions and the CPU tuning table.

They live beside the suite, not in the package: a user's tests make claims of their own with the
``dlperf`` fixture. ``pyproject.toml`` puts the repository root on pytest's path, so the suite and the
self-tests import them as ``perf_tests.claims``.
"""
