"""A user's project whose training step pytest-dlperf A/Bs against an earlier revision (examples/run_layouts.py)."""
