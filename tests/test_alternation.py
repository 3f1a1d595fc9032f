"""Two versions of one module in one process (A/B of a revision alternating in one child): each side's
imports find its own files, and the plugin's own modules are never dropped."""

from __future__ import annotations

import importlib
import sys

from pytest_dlperf.child.alternate import forget_modules_under


def test_a_module_loaded_from_one_revision_is_forgotten_so_the_other_loads_its_own(tmp_path, monkeypatch):
    for side, work in (("base", 1), ("change", 3)):
        (tmp_path / side).mkdir()
        (tmp_path / side / "alt_work.py").write_text(f"WORK = {work}\n", encoding="utf-8")
        (tmp_path / side / "alt_step.py").write_text("from alt_work import WORK\n\ndef make():\n    return WORK\n",
                                                     encoding="utf-8")
    monkeypatch.setattr(sys, "path", list(sys.path))
    made = []
    for side in ("base", "change"):
        sys.path.insert(0, str(tmp_path / side))
        made.append(importlib.import_module("alt_step").make)
        dropped = forget_modules_under([str(tmp_path / side)])
        assert sorted(dropped) == ["alt_step", "alt_work"] and str(tmp_path / side) not in sys.path
    assert [make() for make in made] == [1, 3]  # each built function keeps the module it came from


def test_the_plugin_s_own_modules_stay_whatever_the_folders(tmp_path, monkeypatch):
    """Where a project holds the plugin in its folders, forgetting the project's modules keeps the plugin's."""
    from pytest_dlperf.child import alternate

    (tmp_path / "plugin_copy").mkdir()
    (tmp_path / "plugin_copy" / "alt_plugin_part.py").write_text("X = 1\n", encoding="utf-8")
    (tmp_path / "alt_project_part.py").write_text("Y = 2\n", encoding="utf-8")
    monkeypatch.setattr(alternate, "_PACKAGE_DIR", str(tmp_path / "plugin_copy"))
    monkeypatch.setattr(sys, "path", [str(tmp_path), str(tmp_path / "plugin_copy"), *sys.path])
    importlib.import_module("alt_plugin_part"), importlib.import_module("alt_project_part")
    try:
        assert forget_modules_under([str(tmp_path)]) == ["alt_project_part"]
        assert "alt_plugin_part" in sys.modules
    finally:
        sys.modules.pop("alt_plugin_part", None)
