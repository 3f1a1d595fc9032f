"""The checks that help the next person: ruff and mypy, as configured in pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _tool(name: str) -> list[str]:
    """The tool beside this interpreter (the tox environment's), else on PATH; skip without it."""
    local = Path(sys.executable).with_name(name)
    if local.exists():
        return [str(local)]
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install {name}; tox.ini's torch environment has it)")
    return [found]


def test_ruff_finds_nothing():
    proc = subprocess.run([*_tool("ruff"), "check", "--output-format", "concise", "."], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_finds_nothing_in_the_package():
    proc = subprocess.run([*_tool("mypy")], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
