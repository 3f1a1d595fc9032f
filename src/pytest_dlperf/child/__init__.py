"""What runs in a measuring child process: the worker (its one entry point), the timing harness,
the host description, the framework cores, the input pipelines, synthetic data and data sets,
the step API's loader and a distributed rank's side.

Nothing under this package imports the parent's code (:mod:`pytest_dlperf.plugin`,
:mod:`pytest_dlperf.processes`, :mod:`pytest_dlperf.judging`, :mod:`pytest_dlperf.reports`):
only its own modules and the shared ones at the package's top level
(``tests/test_child_imports.py`` holds that).
"""
