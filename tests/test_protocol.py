"""The parent/child wire protocol is defined once, in pytest_dlperf.protocol, and both sides use it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest_dlperf
from pytest_dlperf import protocol

PACKAGE = Path(pytest_dlperf.__file__).resolve().parent


def test_a_result_file_reads_back_as_written_and_a_missing_or_broken_one_as_empty(tmp_path):
    path = tmp_path / "x.result.json"
    assert protocol.read_result(path) == {}
    protocol.write_result(path, {protocol.ERROR: {"reason": "crashed", "type": "E", "message": "m"}})
    assert protocol.read_result(path)[protocol.ERROR]["reason"] == "crashed"
    path.write_text("{not json", encoding="utf-8")
    assert protocol.read_result(path) == {}


def test_no_other_module_spells_out_a_word_of_the_protocol():
    """The round prefix, the go line, the paced flag and the result line appear only in protocol.py."""
    words = [protocol.ROUND_PREFIX, protocol.RESULT_LINE, protocol.HEARTBEAT, protocol.PACED_FLAG,
             protocol.GO.strip() + "\\n", "EXIT_ERROR = "]
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "protocol.py":
            continue
        code = "\n".join(line for line in path.read_text(encoding="utf-8").splitlines()
                         if not line.lstrip().startswith(("#", "``", ":")))
        for word in words:
            if re.search(r"[\"']" + re.escape(word), code):
                found.append(f"{path.relative_to(PACKAGE)}: {word!r}")
    assert found == []
