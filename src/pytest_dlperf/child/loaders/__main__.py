"""``python -m pytest_dlperf.child.loaders SCENARIO.json RESULT.json``: measure a loader alone."""

import sys

from pytest_dlperf.child.loaders import main

sys.exit(main(sys.argv[1:]))
