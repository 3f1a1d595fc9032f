"""The fixtures a perf test asks for, driven by its markers: ``gpu``, ``precision``, ``distributed``.

* ``gpu``: the CUDA device(s) the test trains on (``@pytest.mark.gpu(count=N)``, one by
  default). Without enough devices the test is skipped with the reason; otherwise the
  fixture gives the devices' description and holds their device lock for the whole test,
  so no other pytest run measures on them meanwhile (``dlperf.run`` takes the same lock
  again, which nests).
* ``precision``: one test per precision named in ``@pytest.mark.precision(...)``, with
  the precision as the test id (``test_x[amp_bf16]``); the fixture's value is the name.
* ``distributed``: a ready set of hosts for ``@pytest.mark.distributed(workers=,
  launcher=, rate=)``: this host (``local``, or the user's ``--dlperf-launcher`` when the
  marker names none), network namespaces built for the test (``netns``, optionally behind
  a ``tbf`` rate limit) and torn down after it, or the ``--dlperf-hostfile`` hosts of the
  ssh/mpi/slurm launchers. Skipped with the reason when they cannot be had here.

A ``precision`` or ``distributed`` marker without its fixture drives nothing, so it is a usage
error (:func:`pytest_dlperf.plugin.markers.validate`), and so is each of the three fixtures without its
marker. A ``gpu`` marker alone is complete: it selects the test for ``-m gpu``, skips it without
devices, and ``dlperf.scenario`` trains on ``cuda``, each run holding the device lock; the fixture
adds the lock over the whole test and the devices' description.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import pytest

from pytest_dlperf.plugin import markers
from pytest_dlperf.processes.devicelock import device_lock, visible_gpus
from pytest_dlperf.child.gpus import Gpu, gpus

# pytest_dlperf.processes.distributed (numpy with it) is imported by the distributed fixture: every
# pytest run imports this module through the plugin's hooks.


@dataclass(frozen=True)
class GpuDevices:
    """The CUDA devices a ``gpu`` test holds: what ``nvidia-smi`` says about each."""

    devices: tuple[Gpu, ...]

    @property
    def count(self) -> int:
        return len(self.devices)

    @property
    def name(self) -> str:
        return self.devices[0].name

    def describe(self) -> str:
        first = self.devices[0]
        many = f"{self.count} x " if self.count > 1 else ""
        return f"{many}{first.name} ({first.memory_mib} MiB, driver {first.driver})"


def gpu(request: pytest.FixtureRequest) -> Iterator[GpuDevices]:
    needed = markers.gpu_count_required(request.node) or 1
    found = gpus()
    if len(found) < needed:
        pytest.skip(f"needs {needed} CUDA device(s), found {len(found)}: run it on a GPU runner (pytest -m gpu)")
    held = found[:needed]
    with device_lock(visible_gpus(needed)[:needed], owner=request.node.nodeid):
        yield GpuDevices(held)


def parametrize_precision(metafunc: pytest.Metafunc) -> None:
    """``pytest_generate_tests``: one call of the test per precision its marker names."""
    if "precision" not in metafunc.fixturenames:
        return
    mark = metafunc.definition.get_closest_marker("precision")
    # A missing or malformed marker is reported by markers.validate once collection is done: raised
    # here, pytest would show it as a collection error behind its own traceback.
    if mark is None:
        return
    try:
        markers.check_precision(metafunc.definition, mark)
    except pytest.UsageError:
        return
    names = list(dict.fromkeys(mark.args))
    metafunc.parametrize("precision", names, ids=names, indirect=True)


def precision(request: pytest.FixtureRequest) -> str:
    return request.param


@dataclass
class Hosts:
    """A ready set of hosts: ``launcher`` starts a job's ranks on them (``distributed.Job(launcher=)``)."""

    launcher: Any
    workers: int
    addresses: tuple[str, ...]
    rate: str | None = None

    @property
    def name(self) -> str:
        return self.launcher.name

    def describe(self) -> str:
        where = ", ".join(self.addresses)
        limit = f", links limited to {self.rate}" if self.rate else ""
        return f"{self.workers} workers through the {self.name} launcher on {where}{limit}"


def _addresses(launcher: Any, workers: int) -> tuple[str, ...]:
    return tuple(dict.fromkeys(launcher.address(slot) for slot in range(workers)))


def distributed(request: pytest.FixtureRequest, options: Any) -> Iterator[Hosts]:
    """``options``: the run's :class:`pytest_dlperf.plugin.options.Options` (its launcher and hostfile)."""
    mark = request.node.get_closest_marker("distributed")
    if mark is None:
        raise pytest.UsageError(
            f"{request.node.nodeid}: the distributed fixture needs @pytest.mark.distributed(workers=..., "
            f"launcher=...) (usage: {markers.MARKERS['distributed']})")
    workers, name, rate = markers.distributed_args(request.node, mark)
    name = name or options.launcher
    if name == "netns":
        yield from _netns_hosts(workers, rate)
        return
    from pytest_dlperf.processes.distributed.launchers import make_launcher

    try:
        launcher = make_launcher(name, options.hostfile)
    except ValueError as exc:  # no hostfile for ssh/mpi/slurm, or one they cannot honour
        pytest.skip(f"distributed(launcher={name!r}): {exc}")
    missing = launcher.missing()
    if missing:
        pytest.skip(f"distributed(launcher={name!r}): {missing}")
    yield Hosts(launcher, workers, _addresses(launcher, workers))


def _netns_hosts(workers: int, rate: str | None) -> Iterator[Hosts]:
    from pytest_dlperf.processes.distributed.launchers import NetnsLauncher
    from pytest_dlperf.processes.distributed.netns import NetnsCluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(f"distributed(launcher='netns'): {reason}")
    with NetnsCluster(workers, rate=rate) as cluster:  # namespaces and their processes go on exit
        launcher = NetnsLauncher(cluster.namespaces, cluster.addresses)
        yield Hosts(launcher, workers, tuple(cluster.addresses), rate)
