"""The pytest side: hooks (:mod:`.hooks`, the ``pytest11`` entry point), options (:mod:`.options`),
markers, the ``dlperf`` fixture (:mod:`.fixtures`, :mod:`.session`) and terminal output
(:mod:`.console`, :mod:`.report`), and the pytest-benchmark bridge (:mod:`.benchmark`).

The hooks live in their own module rather than here, so that importing one of these modules
(a test imports :mod:`.markers` or :mod:`.fixtures`) does not load the whole plugin with it.
"""
