"""Two revisions of a project in one process (A/B of a revision alternating in one child): each side imports
its own files, whatever else is on the path; nothing but the project's modules changes sides; and a side
that ran a file from outside its tree is refused."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_dlperf.child.owncode import CodeOriginError, Side
from pytest_dlperf.processes import owncode
from pytest_dlperf.scenario import Scenario


def _tree(root: Path, work: int) -> Path:
    """A src-layout revision whose step imports a helper lazily, at call time, and a venv inside the project."""
    package = root / "src" / "altproj"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "helper.py").write_text(f"WORK = {work}\n", encoding="utf-8")
    (package / "step.py").write_text("import alt_dep\n\ndef make():\n    def step():\n"
                                     "        from altproj.helper import WORK\n        return WORK, alt_dep\n"
                                     "    return step\n", encoding="utf-8")
    site = root / ".venv" / "lib" / "python3" / "site-packages"
    site.mkdir(parents=True)
    (root / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n", encoding="utf-8")
    (site / "alt_dep.py").write_text("", encoding="utf-8")
    return root


def _side(tree: Path, other: Path, name: str) -> Side:
    code = owncode.find([tree, tree / "src"], tree, tree)  # the rootdir, as the fixture gives it, and src/
    scenario = Scenario(framework="torch", model="m", step="altproj.step:make", import_path=code.roots,
                        own_code={"modules": list(code.modules), "tree": str(tree), "other": str(other)})
    return Side(scenario, name)


@pytest.fixture
def clean_imports(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_each_side_runs_its_own_files_and_a_venv_inside_the_project_stays_loaded(tmp_path, clean_imports):
    base, change = _tree(tmp_path / "base", 1), _tree(tmp_path / "change", 3)
    sys.path.append(str(base / ".venv" / "lib" / "python3" / "site-packages"))
    sides = {"base": _side(base, change, "base"), "change": _side(change, base, "change")}
    steps = {}
    for name, side in sides.items():
        side.enter()
        steps[name] = importlib.import_module("altproj.step").make()
        side.leave()
    results = {}
    for _ in range(2):  # rounds alternate; the lazy import of each round finds its own side's helper
        for name, side in sides.items():
            side.enter()
            results.setdefault(name, []).append(steps[name]())
            side.leave()
    assert [w for w, _ in results["base"]] == [1, 1] and [w for w, _ in results["change"]] == [3, 3]
    dependency = {id(dep) for runs in results.values() for _, dep in runs}
    assert dependency == {id(sys.modules["alt_dep"])}  # one module object, never imported again
    assert "altproj" not in sys.modules  # set aside with its side
    for side in sides.values():
        side.check()
    assert sides["change"].origins() == {"altproj": str((change / "src" / "altproj").resolve())}


def test_an_installed_or_editable_copy_of_the_project_is_set_aside(tmp_path, clean_imports):
    base, change = _tree(tmp_path / "base", 1), _tree(tmp_path / "change", 3)
    elsewhere = _tree(tmp_path / "installed", 7) / "src"
    sys.path[:0] = [str(elsewhere), str(base / ".venv" / "lib" / "python3" / "site-packages")]  # found first

    class EditableFinder:  # setuptools' editable finder maps the names to the checkout
        @staticmethod
        def find_spec(name, path=None, target=None):
            return importlib.machinery.PathFinder.find_spec(name, [str(elsewhere)])

    sys.meta_path.insert(0, EditableFinder())
    side = _side(base, change, "base")
    side.enter()
    assert importlib.import_module("altproj.step").make()()[0] == 1
    side.leave()
    side.check()


def test_a_project_module_loaded_from_outside_its_tree_is_refused_naming_it(tmp_path, clean_imports):
    base, change = _tree(tmp_path / "base", 1), _tree(tmp_path / "change", 3)
    stale = tmp_path / "stale" / "helper.py"
    stale.parent.mkdir()
    stale.write_text("WORK = 9\n", encoding="utf-8")
    side = _side(base, change, "the reference side")
    side.enter()
    spec = importlib.util.spec_from_file_location("altproj.helper", stale)
    sys.modules["altproj.helper"] = importlib.util.module_from_spec(spec)
    side.leave()
    with pytest.raises(CodeOriginError, match=rf"the reference side imported the project's module altproj.helper "
                                              rf"from {stale}, outside"):
        side.check()


def test_a_file_of_the_other_tree_that_both_sides_share_is_refused(tmp_path, clean_imports):
    base, change = _tree(tmp_path / "base", 1), _tree(tmp_path / "change", 3)
    (change / "tools").mkdir()
    (change / "tools" / "alt_shared.py").write_text("", encoding="utf-8")
    sys.path.append(str(change / "tools"))
    importlib.import_module("alt_shared")
    with pytest.raises(CodeOriginError, match="module alt_shared .* comes from the other side's tree"):
        _side(base, change, "base").check()


def test_the_project_s_modules_are_what_its_folders_hold(tmp_path):
    project = tmp_path / "repo" / "services" / "trainer"
    (project / "lib" / "acme" / "trainer").mkdir(parents=True)  # a namespace package in a declared folder
    (project / "lib" / "acme" / "trainer" / "__init__.py").write_text("", encoding="utf-8")
    (project / "pyproject.toml").write_text('[tool.setuptools.packages.find]\nwhere = ["lib"]\n', encoding="utf-8")
    (project / "tests").mkdir()
    (project / "tests" / "test_speed.py").write_text("", encoding="utf-8")
    (project / "tools.py").write_text("", encoding="utf-8")
    (project / ".venv").mkdir()
    (project / ".venv" / "pyvenv.cfg").write_text("", encoding="utf-8")
    (project / "venv2" / "lib").mkdir(parents=True)
    (project / "venv2" / "pyvenv.cfg").write_text("", encoding="utf-8")
    (project / "ext").mkdir()
    (project / "ext" / "__init__.py").write_text("", encoding="utf-8")
    (project / "ext" / "_fast.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    code = owncode.find([project / "tests", project], project, tmp_path / "repo")
    assert code.roots == tuple(str(p.resolve()) for p in (project / "tests", project, project / "lib"))
    assert set(code.modules) == {"test_speed", "tools", "ext", "acme.trainer"}
    assert code.compiled == (str(project / "ext" / "_fast.cpython-311-x86_64-linux-gnu.so"),)
    outside = owncode.find([tmp_path / "elsewhere"], project, project / "lib")
    assert "tools" not in outside.modules  # a folder outside the repository is shared, not the project's


def test_an_editable_install_s_folders_inside_the_repository_are_roots(tmp_path, monkeypatch):
    (tmp_path / "src" / "edproj").mkdir(parents=True)
    (tmp_path / "src" / "edproj" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "flat" / "fproj").mkdir(parents=True)
    (tmp_path / "flat" / "fproj" / "__init__.py").write_text("", encoding="utf-8")
    finder = type(sys)("__editable___fproj_0_1_finder")
    finder.MAPPING = {"fproj": str(tmp_path / "flat" / "fproj")}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, finder.__name__, finder)
    venv_bin = tmp_path / ".venv" / "bin"  # the folder of the script that started pytest: first on sys.path
    venv_bin.mkdir(parents=True)
    (tmp_path / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n", encoding="utf-8")
    (venv_bin / "activate_this.py").write_text("", encoding="utf-8")  # as uv's venvs have
    monkeypatch.setattr(sys, "path", [str(venv_bin), *sys.path, str(tmp_path / "src")])  # and a path .pth
    roots = owncode.editable_roots(tmp_path)
    assert roots == [(tmp_path / "src").resolve(), (tmp_path / "flat").resolve()]


def test_two_environments_that_imported_different_files_of_the_project_are_told_apart():
    same = {"myproj": "/repo/src/myproj"}
    assert owncode.first_difference(same, dict(same)) is None
    assert owncode.first_difference(same, {"myproj": "/venv/lib/site-packages/myproj"}) == (
        "myproj", "/repo/src/myproj", "/venv/lib/site-packages/myproj")
    assert owncode.first_difference({}, same) == ("myproj", "(not imported)", "/repo/src/myproj")


LOOP = """
import time

def train(steps):
    import torch
    from altloop.work import DELAY
    while not steps.done:
        time.sleep(DELAY)
        steps.step(torch.tensor(1.0), figures={"delay": DELAY})
"""


def _loop_tree(root: Path, delay: float, loop: str = LOOP) -> Path:
    package = root / "src" / "altloop"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "work.py").write_text(f"DELAY = {delay}\n", encoding="utf-8")
    (package / "train.py").write_text(loop, encoding="utf-8")
    return root


def _sides_of(trees: dict[str, Path], **settings: Any) -> dict[str, Scenario]:
    """Each side's scenario: its tree's project modules, its tree and the other side's."""
    sides = {}
    for name, tree in trees.items():
        other = trees["candidate" if name == "reference" else "reference"]
        code = owncode.find([tree, tree / "src"], tree, tree)
        sides[name] = Scenario(framework="torch", model="m", import_path=code.roots, batch_size=2, **settings,
                               own_code={"modules": list(code.modules), "tree": str(tree), "other": str(other),
                                         "describe": f"the {name} tree"})
    return sides


def _loop_sides(tmp_path: Path, reference: float, candidate: float, loop: str = LOOP) -> dict[str, Scenario]:
    trees = {"reference": _loop_tree(tmp_path / "base", reference), "candidate": _loop_tree(tmp_path / "change",
                                                                                              candidate, loop)}
    return _sides_of(trees, loop="altloop.train:train", warmup_steps=1, rounds=2, steps_per_round=3)


@pytest.fixture
def torch_loop_core():
    """The loop core and torch, imported before ``clean_imports`` notes what is loaded: torch cannot be
    imported a second time in one process, so it must not be unloaded after a test."""
    importlib.import_module("pytest_dlperf.child.cores.torch_loop")


@pytest.mark.framework("torch")
def test_two_revisions_of_a_plain_loop_alternate_in_one_process_each_running_its_own_files(
        tmp_path, torch_loop_core, clean_imports):
    from pytest_dlperf.child.alternate import alternate

    results = alternate(_loop_sides(tmp_path, reference=0.001, candidate=0.02), say=lambda _: None)
    reference, candidate = results["reference"], results["candidate"]
    # each side's figure is what its own revision's module says (a lazy import, inside the running loop)
    assert reference.metrics["delay"].samples == (0.001, 0.001)
    assert candidate.metrics["delay"].samples == (0.02, 0.02)
    assert candidate.throughput.value < reference.throughput.value / 3
    for result in results.values():
        assert len(result.losses) == 7 and result.details["user_loop"]["marked_steps"] >= 7
        assert result.details["alternation"]["order"] == "ABBA"
    assert candidate.details["own_code"]["altloop"] == str((tmp_path / "change" / "src" / "altloop").resolve())


@pytest.mark.framework("torch")
def test_a_side_s_loop_error_names_the_side_and_a_trainer_asks_for_process_pairs(tmp_path, torch_loop_core,
                                                                                  clean_imports):
    from pytest_dlperf.child.alternate import alternate
    from pytest_dlperf.child.loop import TrainerInOneProcess
    from pytest_dlperf.child.usercode import UserCodeError

    broken = LOOP.replace("steps.step(", "raise ValueError('my loop broke')\n        steps.step(")
    with pytest.raises(UserCodeError, match=r"the candidate side \(.*\): loop altloop.train:train raised "
                                            r"ValueError: my loop broke"):
        alternate(_loop_sides(tmp_path / "a", 0.001, 0.001, broken), say=lambda _: None)
    trainer = "def train(steps):\n    callbacks = [steps.lightning()]\n"
    with pytest.raises(TrainerInOneProcess):
        alternate(_loop_sides(tmp_path / "b", 0.001, 0.001, trainer), say=lambda _: None)


COUNTING_STEP = """
from pathlib import Path

def make_step(scenario):
    calls = Path(__file__).parent / "calls"

    def step():
        with calls.open("a") as log:
            log.write("x")
        return 1.0

    return step
"""


def _step_sides(tmp_path: Path, reference_has_step: bool = True, reference_has_function: bool = True,
                ) -> dict[str, Scenario]:
    trees = {}
    for name in ("reference", "candidate"):
        package = tmp_path / name / "src" / "newproj"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("", encoding="utf-8")
        if name == "candidate" or reference_has_step:
            text = COUNTING_STEP if name == "candidate" or reference_has_function else "def other():\n    pass\n"
            (package / "step.py").write_text(text, encoding="utf-8")
        trees[name] = tmp_path / name
    return _sides_of(trees, step="newproj.step:make_step", warmup_steps=2, rounds=3, steps_per_round=4)


@pytest.mark.framework("torch")
def test_each_side_rewarms_before_the_timed_pairs_and_keeps_only_timed_losses(tmp_path, torch_loop_core,
                                                                              clean_imports):
    from pytest_dlperf.child.alternate import alternate
    from pytest_dlperf.child.measure import rewarm_steps

    sides = _step_sides(tmp_path)
    results = alternate(sides, say=lambda _: None)
    scenario = sides["candidate"]
    timed = scenario.rounds * scenario.steps_per_round
    for name in ("reference", "candidate"):
        calls = (tmp_path / name / "src" / "newproj" / "calls").read_text(encoding="utf-8")
        assert len(calls) == scenario.warmup_steps + rewarm_steps(scenario) + timed
        assert len(results[name].losses) == scenario.warmup_steps + timed
        assert results[name].throughput.stats.n == scenario.rounds


@pytest.mark.framework("torch")
def test_a_step_the_reference_revision_does_not_hold_is_new_in_the_candidate(tmp_path, torch_loop_core,
                                                                             clean_imports):
    from pytest_dlperf.child.alternate import NotInReference, alternate
    from pytest_dlperf.child.usercode import UserCodeError

    with pytest.raises(NotInReference, match=r"^the reference tree has no module newproj\.step$"):
        alternate(_step_sides(tmp_path / "a", reference_has_step=False), say=lambda _: None)
    with pytest.raises(NotInReference, match=r"^the reference tree has no make_step in newproj\.step$"):
        alternate(_step_sides(tmp_path / "b", reference_has_function=False), say=lambda _: None)
    broken = _step_sides(tmp_path / "c")  # the candidate's own missing step stays an error in your code
    broken["candidate"] = broken["candidate"].replace(step="newproj.gone:make_step")
    with pytest.raises(UserCodeError, match=r"the candidate side \(the candidate tree\): step='newproj.gone"):
        alternate(broken, say=lambda _: None)
