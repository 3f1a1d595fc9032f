"""The one outcome vocabulary: what a comparison of a figure concluded.

A stored-baseline comparison (:mod:`pytest_dlperf.judging.verdict`), a paired comparison
(:func:`pytest_dlperf.judging.stats.decide`), the ``dlperf compare`` command and every report use
these words. A paired comparison's regression is the candidate slower than its reference.
"""

from __future__ import annotations

#: ``ok`` is "no change": the evidence bounds the change within the tolerance (its interval lies inside it);
#: ``inconclusive``: short of the gate, but a change past the tolerance still fits the evidence.
OK, REGRESSION, IMPROVEMENT, INCONCLUSIVE, MISSING, UPDATED = (
    "ok", "regression", "improvement", "inconclusive", "missing", "updated")
