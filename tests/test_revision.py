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


def test_the_worktree_shares_what_git_ignores_but_environments_caches_and_builds(repo: Path) -> None:
    (repo / ".gitignore").write_text("data/\n.venv/\n__pycache__/\nbuild/\n*.so\npkg/_version.py\nnew_untracked_ok\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "Ignore data and outputs")
    (repo / "data").mkdir()
    (repo / "data" / "train.bin").write_bytes(b"\x00" * 64)
    (repo / ".venv").mkdir()
    (repo / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (repo / "pkg" / "__pycache__").mkdir()
    (repo / "pkg" / "__pycache__" / "step.cpython-311.pyc").write_bytes(b"")
    (repo / "build" / "lib").mkdir(parents=True)
    (repo / "pkg" / "fast.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    (repo / "pkg" / "_version.py").write_text("version = '1.0'\n")  # as setuptools-scm writes it
    (repo / "pkg" / "new.py").write_text("")  # untracked, not ignored: the candidate's own change
    with Worktree(repo, resolve(repo, "HEAD")) as tree:
        assert (tree.path / "data").is_symlink() and (tree.path / "data" / "train.bin").read_bytes() == b"\x00" * 64
        version = tree.path / "pkg" / "_version.py"
        assert version.is_file() and not version.is_symlink()  # the worktree's own module, for the origin check
        for absent in (".venv", "pkg/__pycache__", "build", "pkg/fast.cpython-311-x86_64-linux-gnu.so", "pkg/new.py"):
            assert not (tree.path / absent).exists(), absent
        assert sorted(tree.shared) == ["data/", "pkg/_version.py"]
    assert (repo / "data" / "train.bin").read_bytes() == b"\x00" * 64  # removing the worktree left the data
    assert (repo / "pkg" / "_version.py").exists()
