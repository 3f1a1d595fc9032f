"""Another revision of the user's repository, checked out beside the working tree for A/B mode.

``--dlperf-reference-rev REV`` runs the reference side of every A/B comparison on the code as it is
at ``REV``: the plugin adds a detached ``git worktree`` of that commit for the run and removes it at
the end. The project's import folders (:mod:`pytest_dlperf.processes.owncode`) and, when the plugin
itself lives in the repository, this package are taken from the worktree instead of the working tree
(:meth:`Worktree.remap`); the candidate is the working tree as it is, uncommitted changes included. What git
ignores in the working tree and the code reads at run time (data sets, checkpoints, a generated ``_version.py``)
is in no revision, so the worktree shares it (:func:`share_ignored`).
"""

from __future__ import annotations

import importlib.machinery
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pytest_dlperf.processes.owncode import is_venv


class RevisionError(ValueError):
    """The revision cannot be checked out; the message names the problem and the fix."""


#: What git ignores that the worktree must not share: caches and build outputs (the revision's own, or none),
#: and, apart from these names, virtual environments and compiled extension modules (:func:`share_ignored`).
NOT_SHARED = frozenset({".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox", ".nox",
                        "build", "dist"})


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    #: "with uncommitted changes" when it describes a working tree that differs from its commit.
    note: str = ""

    @property
    def short(self) -> str:
        return self.sha[:10]

    def describe(self) -> str:
        return f"{self.short} '{self.subject}'" + (f" {self.note}" if self.note else "")


def _git(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("git") is None:
        raise RevisionError("--dlperf-reference-rev needs git on PATH")
    return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, check=False)


def toplevel(folder: Path) -> Path:
    """The root of the git repository holding ``folder``."""
    done = _git(folder, "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise RevisionError(f"--dlperf-reference-rev compares revisions of the git repository holding the rootdir, "
                            f"and {folder} is not in one: run pytest inside your repository's checkout")
    return Path(done.stdout.strip()).resolve()


def resolve(top: Path, rev: str) -> Commit:
    """The commit ``rev`` names in the repository at ``top``."""
    done = _git(top, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise RevisionError(f"--dlperf-reference-rev {rev!r}: no such commit in {top}; give a commit, branch or tag "
                            "(git log --oneline; in a shallow CI clone fetch the base first, e.g. "
                            "git fetch --depth=1 origin main)")
    sha = done.stdout.strip()
    return Commit(sha, _git(top, "log", "-1", "--format=%s", sha).stdout.strip())


def working_tree(top: Path) -> Commit:
    """The working tree as the candidate: its HEAD, and whether tracked files differ from it."""
    head = resolve(top, "HEAD")
    dirty = _git(top, "status", "--porcelain", "--untracked-files=no").stdout.strip()
    return Commit(head.sha, head.subject, "with uncommitted changes" if dirty else "")


class Worktree:
    """A detached worktree of ``commit``, added on entry and removed (with git's record of it) on exit."""

    def __init__(self, top: Path, commit: Commit, parent: Path | None = None):
        self.top, self.commit = top, commit
        self.path = Path(tempfile.mkdtemp(prefix=f"dlperf-rev-{commit.short}-", dir=parent)) / "tree"
        self.shared: list[str] = []

    def __enter__(self) -> "Worktree":
        done = _git(self.top, "worktree", "add", "--detach", "--quiet", str(self.path), self.commit.sha)
        if done.returncode != 0:
            raise RevisionError(f"could not check out {self.commit.describe()} beside {self.top}: "
                                f"{done.stderr.strip()}")
        self.shared = share_ignored(self.top, self.path)
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def remove(self) -> None:
        if self.path.exists():
            _git(self.top, "worktree", "remove", "--force", str(self.path))
        shutil.rmtree(self.path.parent, ignore_errors=True)
        _git(self.top, "worktree", "prune")

    def remap(self, path: str) -> str:
        """``path`` in this worktree when it lies in the repository, else unchanged."""
        try:
            relative = Path(path).resolve().relative_to(self.top)
        except ValueError:
            return path
        return str(self.path / relative)

    def package(self, package_dir: Path) -> Path | None:
        """This revision's copy of a package: the same folder where the package lives in the repository,
        else the repository's own source of a package of that name (``src/<name>`` or ``<name>``), as when
        the plugin's repository runs an installed wheel of itself (a tox environment). None: the repository
        holds no copy, so both sides run the installed one."""
        mapped = Path(self.remap(str(package_dir)))
        if mapped != package_dir and mapped.is_dir():
            return mapped
        for source in (Path("src") / package_dir.name, Path(package_dir.name)):
            if (self.top / source / "__init__.py").is_file() and (self.path / source / "__init__.py").is_file():
                return self.path / source
        return None


def share_ignored(top: Path, tree: Path) -> list[str]:
    """Give the worktree ``tree`` what git ignores in the working tree ``top``: a folder or a data file is
    linked, a Python file copied (a generated module is then the worktree's own, as the origin check requires);
    virtual environments, caches, build outputs and compiled extension modules are not shared. The paths
    shared, relative to ``top`` (a wholly ignored folder ends in ``/``)."""
    done = _git(top, "ls-files", "--others", "--ignored", "--exclude-standard", "--directory", "-z")
    shared = []
    for relative in (done.stdout.split("\0") if done.returncode == 0 else []):
        path = relative.rstrip("/")
        source, target = top / path, tree / path
        if not path or _not_shared(path, source) or target.exists() or target.is_symlink():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_file() and source.suffix == ".py":
            shutil.copy2(source, target)
        else:
            target.symlink_to(source, target_is_directory=source.is_dir())
        shared.append(relative)
    return shared


def _not_shared(path: str, source: Path) -> bool:
    """A cache, build output, virtual environment or compiled extension module: none is the worktree's to share."""
    return (any(part in NOT_SHARED or part.endswith(".egg-info") for part in Path(path).parts)
            or path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)) or is_venv(source))


class ReferenceRevision:
    """The run's reference revision: resolved when the run starts, checked out on first use, removed at the end."""

    def __init__(self, top: Path, commit: Commit, candidate: Commit):
        self.top, self.commit, self.candidate = top, commit, candidate
        self._tree: Worktree | None = None
        #: What the worktree shares of the working tree's ignored files (:func:`share_ignored`), once made.
        self.shared: list[str] = []

    @classmethod
    def of(cls, folder: Path, rev: str) -> "ReferenceRevision":
        top = toplevel(folder)
        return cls(top, resolve(top, rev), working_tree(top))

    def tree(self) -> Worktree:
        if self._tree is None:
            self._tree = Worktree(self.top, self.commit).__enter__()
            self.shared = self._tree.shared
        return self._tree

    def close(self) -> None:
        if self._tree is not None:
            self._tree.remove()
            self._tree = None

    def describe(self) -> str:
        shared = ""
        if self.shared:
            more = f" and {len(self.shared) - 3} more" if len(self.shared) > 3 else ""
            shared = f"; the worktree shares what git ignores here: {', '.join(self.shared[:3])}{more}"
        return (f"reference {self.commit.describe()}, candidate the working tree at {self.candidate.describe()}"
                + shared)
