"""Per push, the A/B of one scenario of a framework's core against the base revision (tox's ab-base-*):

    python .ci/ab_base.py BASE -- [pytest arguments]

runs ``pytest [arguments] --dlperf-reference-rev BASE``, unless the working tree runs the same code as BASE:
both sides of the A/B run this repository's ``src/pytest_dlperf`` and ``perf_tests`` of their own revision (the
environment is one), so where neither differs from BASE, committed, staged, unstaged or untracked, the
comparison is of a revision with itself. It would take minutes and could only read "inconclusive" or "no
change"; it is not run, and the script says so. Where BASE does not resolve (a shallow clone, the first
commit), pytest runs and the plugin names the problem.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

#: What the two sides of the A/B take from their own revision.
RUNS = ("src/pytest_dlperf", "perf_tests")
ROOT = Path(__file__).resolve().parents[1]


def git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)


def same_code(base: str, root: Path = ROOT) -> str:
    """The base commit's description where the working tree's :data:`RUNS` equal its own, else ""."""
    commit = git(root, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}").stdout.strip()
    if not commit:
        return ""
    changed = git(root, "diff", "--quiet", commit, "--", *RUNS).returncode
    untracked = git(root, "ls-files", "--others", "--exclude-standard", "--", *RUNS).stdout.strip()
    if changed or untracked:
        return ""
    return git(root, "log", "-1", "--format=%h '%s'", commit).stdout.strip()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2 or argv[1] != "--":
        print("usage: python .ci/ab_base.py BASE -- [pytest arguments]", file=sys.stderr)
        return 2
    base, given = argv[0], argv[2:]
    described = same_code(base)
    if described:
        print(f"A/B against {base} not run: {' and '.join(RUNS)} are the same in the working tree as in "
              f"{described}, so both sides would run the same code", flush=True)
        return 0
    found = shutil.which("pytest")
    command = [found] if found else [sys.executable, "-m", "pytest"]
    return subprocess.call([*command, *given, "--dlperf-reference-rev", base])


if __name__ == "__main__":
    sys.exit(main())
