"""One way to write a file atomically (pytest_dlperf.atomic), used by children, ranks and baselines."""

from __future__ import annotations

import json

import pytest

from pytest_dlperf.atomic import write_atomically
from pytest_dlperf import protocol
from pytest_dlperf.child import rank


def test_the_new_content_replaces_the_old_and_no_temporary_file_stays(tmp_path):
    target = tmp_path / "result.json"
    target.write_text("old", encoding="utf-8")
    write_atomically(target, "new")
    assert target.read_text(encoding="utf-8") == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_the_file_keeps_its_permissions_and_a_new_one_gets_the_umasks(tmp_path):
    import os
    import stat

    shared = tmp_path / "baseline.json"
    shared.write_text("old", encoding="utf-8")
    shared.chmod(0o664)
    write_atomically(shared, "new")
    assert stat.S_IMODE(shared.stat().st_mode) == 0o664  # not mkstemp's 0600: a baseline others read and commit

    umask = os.umask(0o027)
    try:
        write_atomically(tmp_path / "new.json", "{}")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o640


def test_a_failed_write_leaves_the_old_content_and_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "baseline.json"
    target.write_text("old", encoding="utf-8")

    def broken_replace(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr("pytest_dlperf.atomic.os.replace", broken_replace)
    with pytest.raises(OSError, match="disk gone"):
        write_atomically(target, "new")
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["baseline.json"]


def test_a_childs_and_a_ranks_result_go_through_it(tmp_path, monkeypatch):
    written = []
    real = write_atomically

    def spy(path, text):
        written.append(str(path))
        real(path, text)

    monkeypatch.setattr(protocol, "write_atomically", spy)
    monkeypatch.setattr(rank, "write_atomically", spy)
    protocol.write_result(str(tmp_path / "child.json"), {"result": {}})
    rank.write_rank_result(tmp_path / "rank.json", {"step": 1})
    assert written == [str(tmp_path / "child.json"), str(tmp_path / "rank.json")]
    assert json.loads((tmp_path / "child.json").read_text()) == {"result": {}}
    assert json.loads((tmp_path / "rank.json").read_text())["step"] == 1
