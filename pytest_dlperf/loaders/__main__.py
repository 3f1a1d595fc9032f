"""``python -m pytest_dlperf.loaders SCENARIO.json RESULT.json``: measure a loader alone."""

import sys

from . import main

sys.exit(main(sys.argv[1:]))
