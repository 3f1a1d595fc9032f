"""What runs in a measuring process loads none of the parent's code.

The package says which side a module is on by where it lives: ``pytest_dlperf.child`` is what a
measuring process runs (the worker, the timing harness, the cores, the loaders, a rank), the modules
at the package's top level are shared by both sides, and ``plugin``, ``processes``, ``judging`` and
``reports`` are the parent's. A child module may import only child and shared modules, and a shared
module only shared ones. Checked twice: by reading every import statement of those modules
(function-local ones too, which run only on some paths), and by what a training child, a loader
child and a rank really hold in a fresh interpreter, as a child starts.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_dlperf

PACKAGE = Path(pytest_dlperf.__file__).resolve().parent
#: The folder holding the package (src/), for the fresh interpreters.
IMPORT_ROOT = PACKAGE.parent
#: The shared modules: every module at the package's top level (and the package itself).
SHARED = {"pytest_dlperf"} | {f"pytest_dlperf.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
CHILD = "pytest_dlperf.child"
#: The parent's packages: a child that loads any of them is wrong.
PARENT_PACKAGES = ("pytest_dlperf.plugin", "pytest_dlperf.processes", "pytest_dlperf.judging",
                   "pytest_dlperf.reports")

TRAINING_CORES = {"torch": "pytest_dlperf.child.cores.torch_core", "tensorflow": "pytest_dlperf.child.cores.tf_core",
                  "mxnet": "pytest_dlperf.child.cores.mxnet_core"}
RANK_CORES = {"torch": "pytest_dlperf.child.cores.torch_ddp", "tensorflow": "pytest_dlperf.child.cores.tf_mwms",
              "mxnet": "pytest_dlperf.child.cores.mxnet_dist"}
STEP_AND_GPT_CORES = {"pytest_dlperf.child.cores.torch_step": "torch", "pytest_dlperf.child.cores.torch_gpt": "torch",
                      "pytest_dlperf.child.cores.tf_step": "tensorflow",
                      "pytest_dlperf.child.cores.mxnet_step": "mxnet"}
#: A training child runs the worker, which imports its core by name and measures with the harness.
TRAINING_IMPORTS = ("pytest_dlperf.child.train", "pytest_dlperf.child.measure")
#: A rank runs its framework's entry point, which imports the rank side and the harness.
RANK_IMPORTS = ("pytest_dlperf.child.rank", "pytest_dlperf.child.measure")
#: A loader child runs ``loaders.main``, which imports the worker's error reporting and the harness.
LOADER_IMPORTS = ("pytest_dlperf.child.loaders", "pytest_dlperf.child.train", "pytest_dlperf.child.measure")

PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("pytest_dlperf"))))
"""


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _allowed_in_a_child(module: str) -> bool:
    return module in SHARED or _in(module, CHILD)


def _module_name(path: Path) -> str:
    parts = path.relative_to(IMPORT_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every ``pytest_dlperf`` module a file's import statements name, wherever they stand."""
    name = _module_name(path)
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            # ``from pkg import name``: name is a module of pkg or an attribute of it
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                found.add(candidate if _is_module(candidate) else target)
    return {m for m in found if _in(m, "pytest_dlperf")}


def _is_module(name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (PACKAGE / relative).with_suffix(".py").is_file() or (PACKAGE / relative / "__init__.py").is_file()


def _files(where: Path, recursive: bool) -> list[Path]:
    return sorted(where.rglob("*.py") if recursive else where.glob("*.py"))


@pytest.mark.parametrize("path", _files(PACKAGE / "child", True), ids=lambda p: _module_name(p))
def test_a_child_module_imports_only_child_and_shared_modules(path):
    wrong = sorted(m for m in imports_of(path) if not _allowed_in_a_child(m))
    assert wrong == [], f"{_module_name(path)} imports the parent's {wrong}"


@pytest.mark.parametrize("path", _files(PACKAGE, False), ids=lambda p: _module_name(p))
def test_a_shared_module_imports_only_shared_modules(path):
    wrong = sorted(m for m in imports_of(path) if m not in SHARED)
    assert wrong == [], f"{_module_name(path)}, shared by both sides, imports {wrong}"


def test_the_parents_packages_are_the_rest():
    """Every subpackage is the child's or one of the parent's: a new one has to be placed."""
    subpackages = {f"pytest_dlperf.{p.parent.name}" for p in PACKAGE.glob("*/__init__.py")}
    assert subpackages == {CHILD, *PARENT_PACKAGES}


def loaded_by(*modules: str) -> list[str]:
    """The ``pytest_dlperf`` modules a fresh interpreter holds after importing ``modules``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(IMPORT_ROOT), os.environ.get("PYTHONPATH", ""))
                                                      if p))
    for name in ("DMLC_ROLE", "TF_CONFIG"):  # an MXNet server would serve inside its import; TF would dial peers
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-c", PROBE, *modules], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"importing {modules} failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _parent_modules(loaded: list[str]) -> list[str]:
    return [m for m in loaded if not _allowed_in_a_child(m)]


def _needs(framework: str) -> None:
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed in this environment")


def test_a_rank_without_a_framework_loads_only_child_and_shared_modules():
    loaded = loaded_by(*RANK_IMPORTS)
    assert "pytest_dlperf.child.rank" in loaded  # the probe really imported it
    assert _parent_modules(loaded) == [], f"a rank process would load the parent's {_parent_modules(loaded)}"


@pytest.mark.parametrize("child, cores, imports", [("rank", RANK_CORES, RANK_IMPORTS),
                                                    ("training child", TRAINING_CORES, TRAINING_IMPORTS)])
@pytest.mark.parametrize("framework", sorted(RANK_CORES))
def test_a_frameworks_child_loads_only_child_and_shared_modules(framework, child, cores, imports):
    """A rank (its framework's entry point) and a training child (the worker and the core)."""
    _needs(framework)
    loaded = loaded_by(cores[framework], *imports)
    assert cores[framework] in loaded and "pytest_dlperf.sample_stats" in loaded  # the probe really imported them
    assert _parent_modules(loaded) == [], (
        f"a {child} ({cores[framework]}) would load the parent's {_parent_modules(loaded)}")


@pytest.mark.parametrize("core", sorted(STEP_AND_GPT_CORES))
def test_the_user_step_and_gpt_cores_load_only_child_and_shared_modules(core):
    """The cores for your own ``step=`` and the built-in GPT (the worker picks them by scenario)."""
    _needs(STEP_AND_GPT_CORES[core])
    loaded = loaded_by(core, *TRAINING_IMPORTS)
    assert core in loaded
    assert _parent_modules(loaded) == [], f"a training child ({core}) would load the parent's {_parent_modules(loaded)}"


def test_a_loader_child_loads_only_child_and_shared_modules():
    loaded = loaded_by(*LOADER_IMPORTS)
    assert "pytest_dlperf.child.loaders" in loaded
    assert _parent_modules(loaded) == [], f"a loader child would load the parent's {_parent_modules(loaded)}"


def test_the_distributed_package_exports_every_name():
    from pytest_dlperf.processes import distributed as dist

    for name in dist.__all__:
        assert getattr(dist, name) is not None, name
    assert dist.run_job.__module__ == "pytest_dlperf.processes.distributed.supervise"


def test_no_exported_name_is_also_a_module_of_the_package():
    """Importing a submodule sets the package attribute of its name: a function exported under the
    same name (``network`` from ``network.py``) turned into the module once anything imported it."""
    import importlib
    import pkgutil

    from pytest_dlperf.processes import distributed as dist

    modules = {m.name for m in pkgutil.iter_modules(dist.__path__)}
    assert modules & set(dist.__all__) == set()
    for name in sorted(modules):
        importlib.import_module(f"pytest_dlperf.processes.distributed.{name}")
    assert callable(dist.network) and callable(dist.run_job)
