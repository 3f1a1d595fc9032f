"""A revision checked out beside the working tree: resolved, described, mapped, removed, and the errors a
user meets outside a repository or with an unknown revision."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pytest_dlperf.processes.revision import RevisionError, Worktree, resolve, toplevel, working_tree


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    top = tmp_path / "project"
    (top / "pkg").mkdir(parents=True)
    git(tmp_path, "init", "-q", str(top))
    git(top, "config", "user.email", "dev@example.com")
    git(top, "config", "user.name", "Dev")
    (top / "pkg" / "step.py").write_text("WORK = 1\n")
    git(top, "add", ".")
    git(top, "commit", "-q", "-m", "Add the step")
    (top / "pkg" / "step.py").write_text("WORK = 2\n")
    git(top, "commit", "-qam", "Make the step heavier")
    return top


def test_a_revision_is_checked_out_mapped_and_removed(repo: Path) -> None:
    base = resolve(repo, "HEAD~1")
    assert base.subject == "Add the step" and len(base.sha) == 40
    with Worktree(toplevel(repo / "pkg"), base) as tree:
        mapped = Path(tree.remap(str(repo / "pkg")))
        assert (mapped / "step.py").read_text() == "WORK = 1\n"  # the reference side's code
        assert tree.remap("/usr/lib") == "/usr/lib"  # outside the repository: the same for both sides
        assert tree.package(repo / "pkg") == mapped
        where = tree.path
    assert not where.exists()
    assert str(where) not in git(repo, "worktree", "list")  # git forgets it too
    assert (repo / "pkg" / "step.py").read_text() == "WORK = 2\n"  # the working tree is untouched


def test_an_installed_copy_of_a_package_the_repository_holds_maps_to_the_revisions_source(repo: Path,
                                                                                         tmp_path: Path) -> None:
    """tox installs the plugin's own repository as a wheel outside its source folder: the reference side must
    still run the revision's source, or an A/B of the plugin's own cores compares the candidate with itself."""
    (repo / "src" / "plugin").mkdir(parents=True)
    (repo / "src" / "plugin" / "__init__.py").write_text("VERSION = 'base'\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "Add the plugin's source")
    installed = tmp_path / "site-packages" / "plugin"
    installed.mkdir(parents=True)
    with Worktree(repo, resolve(repo, "HEAD")) as tree:
        assert tree.package(installed) == tree.path / "src" / "plugin"
        assert (tree.package(installed) / "__init__.py").read_text() == "VERSION = 'base'\n"
        assert tree.package(tmp_path / "site-packages" / "other") is None  # a package the repository does not hold
    with Worktree(repo, resolve(repo, "HEAD~1")) as tree:
        assert tree.package(installed) is None  # the revision predates the source: both sides run the installed one


def test_the_working_tree_says_when_it_has_uncommitted_changes(repo: Path) -> None:
    assert working_tree(repo).note == ""
    (repo / "pkg" / "step.py").write_text("WORK = 3\n")
    candidate = working_tree(repo)
    assert candidate.describe().endswith("'Make the step heavier' with uncommitted changes")


def test_an_unknown_revision_names_the_fix(repo: Path) -> None:
    with pytest.raises(RevisionError, match="'nope': no such commit .* git fetch"):
        resolve(repo, "nope")


def test_outside_a_repository_the_error_says_where_to_run(tmp_path: Path) -> None:
    with pytest.raises(RevisionError, match="not in one: run pytest inside your repository"):
        toplevel(tmp_path)
