"""The project's own code: the folders its modules are imported from, and their top-level names.

A child imports a ``step=`` or ``model_factory=`` module from these folders before anything installed
(:mod:`pytest_dlperf.child.owncode`), and A/B of a revision swaps exactly these modules between the
checkout and the reference's worktree. The folders are the test's folder, the rootdir and pytest's
``pythonpath``, the source folders the project's ``pyproject.toml`` declares for its build backend
(setuptools, hatchling, poetry-core, flit, uv) or ``src/`` by convention, and the folders an editable
install of it puts on ``sys.path`` (a path ``.pth``, or setuptools' editable finder) inside the
repository. The names are what those folders hold: modules, packages, and the packages inside a
namespace package, never a virtual environment's or this plugin's.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from pytest_dlperf.child.owncode import installed

#: This package, which A/B runs by its own means (a worktree copy on PYTHONPATH), never as the project's.
_PLUGIN = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class OwnCode:
    """Where the project's modules are imported from (in order) and their names."""

    roots: tuple[str, ...]
    modules: tuple[str, ...]
    #: The compiled extension modules among them (an A/B of a revision cannot build them).
    compiled: tuple[str, ...] = ()


def _read_pyproject(folder: Path) -> dict[str, Any]:
    path = folder / "pyproject.toml"
    if not path.is_file():
        return {}
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: pip vendors no TOML reader for us; without tomli only the conventions are used
        try:
            import tomli as tomllib
        except ImportError:
            return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def declared_roots(rootdir: Path) -> list[Path]:
    """The source folders ``rootdir/pyproject.toml`` names for its build backend, and ``src/`` if present."""
    data = _read_pyproject(rootdir)
    tool = data.get("tool", {}) if isinstance(data.get("tool"), dict) else {}
    found: list[str] = []
    setuptools = tool.get("setuptools", {})
    if isinstance(setuptools, dict):
        package_dir = setuptools.get("package-dir", {})
        if isinstance(package_dir, dict):
            found += [str(Path(where).parent) if name else where for name, where in package_dir.items()
                      if isinstance(where, str)]
        packages = setuptools.get("packages", {})
        where = packages.get("find", {}).get("where", []) if isinstance(packages, dict) else []
        found += [w for w in where if isinstance(w, str)] if isinstance(where, list) else []
    hatch = tool.get("hatch", {}).get("build", {}) if isinstance(tool.get("hatch"), dict) else {}
    if isinstance(hatch, dict):
        wheel = hatch.get("targets", {}).get("wheel", {}) if isinstance(hatch.get("targets"), dict) else {}
        for build in (hatch, wheel if isinstance(wheel, dict) else {}):
            packages = build.get("packages", [])
            found += [str(Path(p).parent) for p in packages if isinstance(p, str)] if isinstance(packages, list) else []
    poetry = tool.get("poetry", {})
    if isinstance(poetry, dict) and isinstance(poetry.get("packages"), list):
        found += [p.get("from", ".") for p in poetry["packages"] if isinstance(p, dict)]
    uv = tool.get("uv", {}).get("build-backend", {}) if isinstance(tool.get("uv"), dict) else {}
    if isinstance(uv, dict) and isinstance(uv.get("module-root", None), str):
        found.append(uv["module-root"])
    found.append("src")
    roots = []
    for name in found:
        folder = (rootdir / (name or ".")).resolve()
        if folder.is_dir() and folder not in roots:
            roots.append(folder)
    return roots


def editable_roots(repository: Path) -> list[Path]:
    """The folders inside ``repository`` that an editable install put within reach of this interpreter:
    ``sys.path`` entries (a path ``.pth``: setuptools' src layout, hatchling, poetry, flit, uv) and the
    parents of what setuptools' editable finders map (``__editable___*_finder``, its other layouts)."""
    candidates = [Path(p) for p in sys.path if p]
    for name, module in list(sys.modules.items()):
        mapping = getattr(module, "MAPPING", None)
        if name.startswith("__editable___") and isinstance(mapping, dict):
            candidates += [Path(p).parent for p in mapping.values() if isinstance(p, str)]
    roots = []
    for folder in candidates:
        real = folder.resolve()
        if real.is_dir() and _inside(real, repository) and not installed(real) and not _in_venv(real, repository) \
                and real not in roots:
            roots.append(real)
    return roots


def is_venv(folder: Path) -> bool:
    """Whether ``folder`` is a virtual environment (it holds ``pyvenv.cfg``)."""
    return (folder / "pyvenv.cfg").exists()


def _in_venv(folder: Path, repository: Path) -> bool:
    """Whether ``folder`` lies in a virtual environment inside ``repository`` (its ``bin/``, where the script
    pytest was started by puts itself first on ``sys.path``, holds no module of the project)."""
    return any(is_venv(parent) for parent in (folder, *folder.parents) if _inside(parent, repository))


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
    except ValueError:
        return False
    return True


def modules_in(root: Path, skip: Sequence[Path] = ()) -> tuple[list[str], list[str]]:
    """The importable names ``root`` holds (modules, packages, a namespace package's packages; not the
    folders in ``skip``, other roots such as ``src/``) and the compiled extension modules among them."""
    names, compiled = [], []
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return [], []
    for entry in entries:
        if entry.name.startswith((".", "__")):
            continue
        if is_venv(entry) or installed(entry) or entry.resolve() in (_PLUGIN, *skip):
            continue
        stem = entry.name.split(".")[0]
        if not stem.isidentifier():
            continue
        if entry.is_file() and entry.name.endswith(".py"):
            names.append(stem)
        elif entry.is_file() and entry.name.endswith(suffixes):
            names.append(stem)
            compiled.append(str(entry))
        elif entry.is_dir() and (entry / "__init__.py").is_file():
            names.append(entry.name)
            compiled += [str(p) for p in entry.rglob("*") if p.name.endswith(suffixes)]
        elif entry.is_dir() and "." not in entry.name:
            # a namespace package: its own packages are the project's, the namespace stays shared
            inner = [p for p in sorted(entry.iterdir()) if p.is_dir() and (p / "__init__.py").is_file()]
            names += [f"{entry.name}.{p.name}" for p in inner]
            if any(p.suffix == ".py" for p in entry.iterdir()):
                names.append(entry.name)
    return names, compiled


def find(folders: Sequence[Path], rootdir: Path, repository: Path | None) -> OwnCode:
    """The project's own code for a test: ``folders`` (its folder, the rootdir, pytest's ``pythonpath``)
    first, then the rootdir's declared source folders and, inside ``repository``, the editable ones."""
    roots: list[Path] = []
    for folder in (*folders, *declared_roots(rootdir), *(editable_roots(repository) if repository else ())):
        real = Path(folder).resolve()
        if real not in roots and real.is_dir():
            roots.append(real)
    names: list[str] = []
    compiled: list[str] = []
    for root in roots:
        if repository is not None and not _inside(root, repository):
            continue  # a folder outside the repository is the same for every revision: shared, not swapped
        found, built = modules_in(root, roots)
        names += [n for n in found if n not in names]
        compiled += built
    return OwnCode(tuple(str(r) for r in roots), tuple(_outermost(names)), tuple(compiled))


def _outermost(names: Iterable[str]) -> list[str]:
    """The names without those inside another (``acme`` holds ``acme.trainer``)."""
    names = list(names)
    return [n for n in names if not any(n.startswith(other + ".") for other in names if other != n)]


def first_difference(candidate: dict[str, str], reference: dict[str, str]) -> tuple[str, str, str] | None:
    """(module, candidate's file, reference's file) of the first project module the two sides imported from
    different files (or only one imported), else None."""
    for name in sorted(set(candidate) | set(reference)):
        if candidate.get(name) != reference.get(name):
            return name, candidate.get(name, "(not imported)"), reference.get(name, "(not imported)")
    return None


def describe_origins(origins: dict[str, str], tree: str | None) -> str:
    """Where a side's project modules came from, in words: ``myproj from src/myproj`` relative to ``tree``."""
    if not origins:
        return "none of the project's modules imported"
    def where(path: str) -> str:
        if tree and _inside(Path(path), Path(tree)):
            return os.path.relpath(path, tree)
        return path
    return ", ".join(f"{name} from {where(path)}" for name, path in sorted(origins.items()))
