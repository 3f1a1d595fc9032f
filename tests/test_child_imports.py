"""What runs in a measuring process loads none of the parent's code.

A training child (``python -m pytest_dlperf.worker``) imports the worker, its framework's core and
the measuring modules; a loader child, :mod:`pytest_dlperf.loaders`; a rank, its framework's entry
point (``cores/torch_ddp.py``, ``tf_mwms.py``, ``mxnet_dist.py``), which imports
:mod:`pytest_dlperf.distributed.rank`, and :mod:`pytest_dlperf.measure` to time its rounds. None of
that may pull in the parent's orchestration (supervise, remote, launchers, netns hosts, engines,
the paired runner), its judging (statistics, verdicts, baselines, the scaling and tuning claims)
or the pytest side. Each check runs in a fresh interpreter, as a child does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: What a rank process imports: the rank side, and the measuring modules it uses to time its rounds.
RANK_IMPORTS = ("pytest_dlperf.distributed.rank", "pytest_dlperf.measure", "pytest_dlperf.scenario",
                "pytest_dlperf.synthetic")
#: What a training child and a loader child import (the worker imports its core by name).
TRAINING_IMPORTS = ("pytest_dlperf.worker", "pytest_dlperf.measure")
#: ``loaders.main`` imports the worker's error reporting and the measuring harness when it runs.
LOADER_IMPORTS = ("pytest_dlperf.loaders", "pytest_dlperf.worker", "pytest_dlperf.measure")
#: The parent's modules. The measuring side's statistics (median, Summary) are in ``summary``.
PARENT_SIDE = tuple(f"pytest_dlperf.distributed.{m}" for m in (
    "job", "supervise", "rendezvous", "processes", "tagged", "remote", "launchers", "netns", "engines",
    "networks", "paced_job", "scaling", "results")) + tuple(f"pytest_dlperf.{m}" for m in (
    "paired", "session", "plugin", "fixtures", "settings", "markers", "report",
    "runner", "devicelock", "tuning", "judging", "judging.verdict", "judging.baselines", "judging.stats",
    "judging.gates"))

TRAINING_CORES = {"torch": "pytest_dlperf.cores.torch_core", "tensorflow": "pytest_dlperf.cores.tf_core",
                  "mxnet": "pytest_dlperf.cores.mxnet_core"}
CORES = {"torch": "pytest_dlperf.cores.torch_ddp", "tensorflow": "pytest_dlperf.cores.tf_mwms",
         "mxnet": "pytest_dlperf.cores.mxnet_dist"}

PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("pytest_dlperf"))))
"""


def loaded_by(*modules: str) -> list[str]:
    """The ``pytest_dlperf`` modules a fresh interpreter holds after importing ``modules``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    for name in ("DMLC_ROLE", "TF_CONFIG"):  # an MXNet server would serve inside its import; TF would dial peers
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-c", PROBE, *modules], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"importing {modules} failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _parent_modules(loaded: list[str]) -> list[str]:
    return [m for m in loaded if m in PARENT_SIDE]


def test_the_rank_side_loads_none_of_the_parents_modules():
    loaded = loaded_by(*RANK_IMPORTS)
    assert "pytest_dlperf.distributed.rank" in loaded  # the probe really imported it
    assert _parent_modules(loaded) == [], f"a rank process would load the parent's {_parent_modules(loaded)}"


@pytest.mark.parametrize("child, cores, imports", [("rank", CORES, RANK_IMPORTS),
                                                    ("training child", TRAINING_CORES, TRAINING_IMPORTS)])
@pytest.mark.parametrize("framework", sorted(CORES))
def test_a_frameworks_child_loads_none_of_the_parents_modules(framework, child, cores, imports):
    """A rank (its framework's entry point) and a training child (the worker and the core)."""
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed in this environment")
    loaded = loaded_by(cores[framework], *imports)
    assert cores[framework] in loaded and "pytest_dlperf.summary" in loaded  # the probe really imported them
    assert _parent_modules(loaded) == [], (
        f"a {child} ({cores[framework]}) would load the parent's {_parent_modules(loaded)}")


@pytest.mark.parametrize("core, framework", [("pytest_dlperf.cores.torch_step", "torch"),
                                             ("pytest_dlperf.cores.torch_gpt", "torch"),
                                             ("pytest_dlperf.cores.tf_step", "tensorflow"),
                                             ("pytest_dlperf.cores.mxnet_step", "mxnet")])
def test_the_user_step_and_gpt_cores_load_none_of_the_parents_modules(core, framework):
    """The cores for your own ``step=`` and the built-in GPT (the worker picks them by scenario)."""
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed in this environment")
    loaded = loaded_by(core, *TRAINING_IMPORTS)
    assert core in loaded
    assert _parent_modules(loaded) == [], f"a training child ({core}) would load the parent's {_parent_modules(loaded)}"


def test_a_loader_child_loads_none_of_the_parents_modules():
    loaded = loaded_by(*LOADER_IMPORTS)
    assert "pytest_dlperf.loaders" in loaded
    assert _parent_modules(loaded) == [], f"a loader child would load the parent's {_parent_modules(loaded)}"


def test_the_package_loads_its_parts_on_first_use():
    """``distributed.NAME`` works for every exported name, and importing the package alone loads none of them."""
    parts = [m for m in loaded_by("pytest_dlperf.distributed") if m.startswith("pytest_dlperf.distributed.")]
    assert parts == [], f"importing the package loaded {parts}"
    from pytest_dlperf import distributed as dist

    for name in dist.__all__:
        assert getattr(dist, name) is not None, name
    assert dist.run_job.__module__ == "pytest_dlperf.distributed.supervise"
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        dist.no_such_name  # noqa: B018


def test_no_exported_name_is_also_a_module_of_the_package():
    """Importing a submodule sets the package attribute of its name: a function exported under the
    same name (``network`` from ``network.py``) turned into the module once anything imported it."""
    import importlib
    import pkgutil

    from pytest_dlperf import distributed as dist

    modules = {m.name for m in pkgutil.iter_modules(dist.__path__)}
    assert modules & set(dist.__all__) == set()
    for name in sorted(modules):
        importlib.import_module(f"pytest_dlperf.distributed.{name}")
    assert callable(dist.network) and callable(dist.run_job)
