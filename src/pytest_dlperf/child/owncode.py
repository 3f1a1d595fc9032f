"""One side's copy of the project's own modules in a child: imported from its folders only, kept apart
from the other side's, and checked to have come from its own tree.

``scenario.import_path`` holds the side's folders and ``scenario.own_code`` the project's module names
(:mod:`pytest_dlperf.processes.owncode`) and, in A/B of a revision, the ``tree`` this side's code must
come from (the checkout, or the reference's worktree) and the ``other`` side's tree. While a side is
entered, its folders lead ``sys.path`` and a finder ahead of every other (an editable install's
included) resolves the project's names from those folders alone, so an installed copy of the project
is set aside; on leaving, the side's project modules move out of ``sys.modules`` into the side's own
table, and come back when it is entered again. Nothing else leaves ``sys.modules``: a virtual
environment inside the project stays loaded.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any, Sequence

from pytest_dlperf.scenario import Scenario

_PLUGIN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class HarnessError(RuntimeError):
    """The plugin failed, not your code: the message names the plugin's step that failed and the cause."""


class CodeOriginError(HarnessError):
    """A side ran a file that is not its own revision's: no verdict can be given."""


def installed(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` lies in an environment's installed packages (a venv inside the project included)."""
    parts = os.fspath(path).split(os.sep)
    return "site-packages" in parts or "dist-packages" in parts


def _under(path: str, tree: str) -> bool:
    return os.path.realpath(path).startswith(os.path.realpath(tree).rstrip(os.sep) + os.sep)


def module_files(module: ModuleType) -> list[str]:
    """The file a module was loaded from, or a namespace package's folders (a module that names no absolute
    path, such as ``torch.classes``, was not loaded from a file)."""
    path = getattr(module, "__file__", None)
    paths = [path] if isinstance(path, str) else [str(p) for p in getattr(module, "__path__", None) or ()]
    return [p for p in paths if os.path.isabs(p)]


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the project's names in one side's folders only (a namespace package's inner packages in its
    portions there). A name they lack is not found at all: that side's revision has no such module (one the
    other revision added), and the other tree's copy or an installed one must not stand in for it."""

    def __init__(self, roots: Sequence[str], modules: Sequence[str]):
        self.roots, self.modules = list(roots), set(modules)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.modules:
            return None
        parts = fullname.split(".")
        where = [os.path.join(root, *parts[:-1]) for root in self.roots]
        spec = importlib.machinery.PathFinder.find_spec(fullname, where)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {fullname!r} in {', '.join(self.roots)}", name=fullname)
        return spec


class Side:
    """One side's project modules: :meth:`enter` before its code runs, :meth:`leave` after."""

    def __init__(self, scenario: Scenario, name: str = ""):
        own = dict(scenario.own_code)
        self.name = name or "this side"
        self.roots = [os.path.realpath(p) for p in scenario.import_path]
        self.modules: list[str] = list(own.get("modules", ()))
        self.tree: str | None = own.get("tree")
        self.other: str | None = own.get("other")
        self.where: str = own.get("describe") or (self.tree or "the test's folders")
        self._finder = _Finder(self.roots, self.modules)
        self._kept: dict[str, ModuleType] = {}
        self.entered = False

    def owns(self, name: str) -> bool:
        return any(name == m or name.startswith(m + ".") for m in self.modules)

    def enter(self) -> None:
        try:
            sys.path[:] = self.roots + [p for p in sys.path if os.path.realpath(p or ".") not in self.roots]
            sys.meta_path.insert(0, self._finder)
            sys.modules.update(self._kept)
            for name, module in self._kept.items():  # a namespace package's attribute names this side's
                parent, _, child = name.rpartition(".")
                if parent in sys.modules and not self.owns(parent):
                    setattr(sys.modules[parent], child, module)
            importlib.invalidate_caches()
        except Exception as exc:
            raise HarnessError(f"pytest-dlperf could not put {self.name}'s modules in place: "
                               f"{type(exc).__name__}: {exc}") from exc
        self.entered = True

    def leave(self) -> None:
        try:
            for name in [n for n in sys.modules if self.owns(n)]:
                self._kept[name] = sys.modules.pop(name)
            if self._finder in sys.meta_path:
                sys.meta_path.remove(self._finder)
            sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") not in self.roots]
            importlib.invalidate_caches()
        except Exception as exc:
            raise HarnessError(f"pytest-dlperf could not set {self.name}'s modules aside: "
                               f"{type(exc).__name__}: {exc}") from exc
        self.entered = False

    def loaded(self) -> dict[str, ModuleType]:
        """This side's project modules, imported so far."""
        live = {n: m for n, m in sys.modules.items() if self.owns(n)} if self.entered else {}
        return {**self._kept, **live}

    def origins(self) -> dict[str, str]:
        """Each of the project's top-level modules this side imported, and its file (or folder)."""
        found = {}
        for name, module in self.loaded().items():
            files = module_files(module)
            if name in self.modules and files:
                path = files[0]
                found[name] = os.path.dirname(path) if os.path.basename(path) == "__init__.py" else path
        return found

    def check(self) -> None:
        """Raise :class:`CodeOriginError` where one of this side's project modules came from outside its tree,
        or from the other side's."""
        if self.tree is None:
            return
        for name, module in sorted(self.loaded().items()):
            for path in module_files(module):
                if installed(path) or not _under(path, self.tree):
                    raise CodeOriginError(
                        f"pytest-dlperf: {self.name} imported the project's module {name} from {path}, outside "
                        f"{self.where} ({self.tree}), so it did not run its own revision's code and no verdict is "
                        f"given. The project's modules are found in {', '.join(self.roots) or '(no folders)'}: "
                        f"import {name} by name from there (not by file path or from another copy), or add the "
                        "folder that holds it to pytest's pythonpath")
        if self.other is None:
            return
        for name, module in sorted(sys.modules.items()):
            for path in module_files(module):
                if path.startswith(_PLUGIN) or installed(path) or not _under(path, self.other):
                    continue
                raise CodeOriginError(
                    f"pytest-dlperf: module {name} ({path}) comes from the other side's tree ({self.other}) and is "
                    f"not among the project's modules as found ({', '.join(self.modules) or 'none'}), so both sides "
                    "ran that one file and no verdict is given. Add the folder that holds it to pytest's "
                    "pythonpath (or declare it in pyproject.toml) so that each side imports its own copy")
