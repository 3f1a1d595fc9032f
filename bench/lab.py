"""Where the recorded lab data lies.  (Not a pytest test.)

The raw reports, logs and JSON samples that ``calibration.py``, ``memory_tail.py`` and
``otava_crosscheck.py`` re-read left the tree; git history keeps them under ``bench/results/`` at
:data:`LAB_COMMIT`. :func:`results_dir` gives a folder holding them: ``$DLPERF_LAB_RESULTS`` if set,
else that commit's copy, extracted once with ``git archive`` into the temporary folder.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The last commit whose tree holds bench/results/.
LAB_COMMIT = "621f63b"


def results_dir() -> Path:
    if os.environ.get("DLPERF_LAB_RESULTS"):
        return Path(os.environ["DLPERF_LAB_RESULTS"])
    home = Path(tempfile.gettempdir()) / f"dlperf-lab-{LAB_COMMIT}"
    if not (home / "bench" / "results").is_dir():
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", LAB_COMMIT, "bench/results"],
                                 check=True, capture_output=True).stdout
        part = Path(tempfile.mkdtemp(prefix=home.name + ".", dir=home.parent))
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(part)
        try:
            part.rename(home)
        except OSError:  # another process extracted it first
            pass
    return home / "bench" / "results"
