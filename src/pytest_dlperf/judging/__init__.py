"""Judging: the statistics, the gates, the verdicts and the baselines they are judged against.

The parent's side only (the plugin, the ``dlperf`` command, the benches): no measuring child
imports this package.
"""
