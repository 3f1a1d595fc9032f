"""CPU tuning (seed 003): thread, OpenMP and NUMA settings, as changes to a scenario.

Seed 003 trains ResNet-50 on CPU under a series of settings and reports each one's
speedup over the default: intra/inter-op threads, ``OMP_NUM_THREADS``,
``KMP_AFFINITY``, ``KMP_BLOCKTIME``, the MKL/oneDNN build, ``numactl
--interleave=all``. Here each is a :class:`Setting` that turns a scenario into the
tuned one (``env``, thread fields, ``launch_prefix``), so it is in force before the
framework starts and is recorded with the result.

The values follow the machine: thread counts from its physical cores, the
``KMP_*`` variables only where the framework really loads Intel's OpenMP (GNU
libgomp ignores them; the standard ``OMP_PROC_BIND``/``OMP_PLACES`` and
``OMP_WAIT_POLICY`` say the same thing to any runtime). Topology and the OpenMP runtime come
from :mod:`pytest_dlperf.child.environment`; nothing here imports a framework.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from pytest_dlperf.child.environment import numa_nodes, openmp_runtime_of, physical_cores, usable_cpus
from pytest_dlperf.scenario import Scenario
from pytest_dlperf.judging.outcomes import IMPROVEMENT, INCONCLUSIVE, OK, REGRESSION
from pytest_dlperf.judging.stats import PairedRatio, decide


class SlowdownWarning(UserWarning):
    """A tuning setting made training slower than the default configuration."""


@dataclass(frozen=True)
class Topology:
    usable_cpus: int
    physical_cores: int
    numa_nodes: int

    @property
    def threads_per_core(self) -> int:
        return max(1, self.usable_cpus // max(1, self.physical_cores))

    def describe(self) -> str:
        return (f"{self.usable_cpus} usable CPUs, {self.physical_cores} physical cores "
                f"({self.threads_per_core} thread(s) per core), {self.numa_nodes} NUMA node(s)")


def topology() -> Topology:
    return Topology(usable_cpus(), physical_cores(), numa_nodes())


def numactl_unavailable() -> str | None:
    """Why ``numactl --interleave=all`` cannot be used here, or None when it can."""
    if shutil.which("numactl") is None:
        return "numactl is not installed (Debian/Ubuntu: apt-get install -y numactl)"
    try:
        subprocess.run(["numactl", "--interleave=all", "true"], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"numactl is installed but cannot set a memory policy here ({exc}); containers may forbid it"
    return None


@dataclass(frozen=True)
class Setting:
    """One row of seed 003's table: what changes, and why it may not apply here."""

    name: str
    description: str
    env: Mapping[str, str] = field(default_factory=dict)
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None
    launch_prefix: tuple[str, ...] = ()
    skip_reason: str | None = None

    def apply(self, scenario: Scenario) -> Scenario:
        """``scenario`` with this setting in force, labelled with the setting's name."""
        changes: dict[str, Any] = {
            "env": {**scenario.env, **self.env},
            "launch_prefix": (*self.launch_prefix, *scenario.launch_prefix),
            "label": self.name,
        }
        if self.intra_op_threads is not None:
            changes["intra_op_threads"] = self.intra_op_threads
        if self.inter_op_threads is not None:
            changes["inter_op_threads"] = self.inter_op_threads
        return scenario.replace(**changes)

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in sorted(self.env.items())]
        if self.intra_op_threads is not None:
            parts.append(f"intra_op_threads={self.intra_op_threads}")
        if self.inter_op_threads is not None:
            parts.append(f"inter_op_threads={self.inter_op_threads}")
        if self.launch_prefix:
            parts.insert(0, " ".join(self.launch_prefix))
        return " ".join(parts) or "framework defaults"


#: Row names, in the seed's order.
SETTING_NAMES = ("default", "intra_inter_threads", "omp_num_threads", "kmp_affinity", "kmp_blocktime",
                 "onednn_off", "all_tuned", "numactl_interleave")


def seed_003_settings(
    framework: str,
    topo: Topology | None = None,
    runtime: str | None = None,
    numactl_reason: str | None = "check",
) -> list[Setting]:
    """Seed 003's table for ``framework`` on this machine (or on ``topo``/``runtime`` when given)."""
    topo = topo or topology()
    runtime = runtime or openmp_runtime_of(framework)
    if numactl_reason == "check":
        numactl_reason = numactl_unavailable()
    cores = topo.physical_cores
    inter = min(2, cores)  # Intel's TensorFlow guide: 2 inter-op threads, intra = physical cores

    if framework == "mxnet":  # MXNet's knobs are environment variables, read when the engine starts
        threads = Setting("intra_inter_threads", f"{cores} OpenMP threads per operator, {inter} engine workers",
                          env={"OMP_NUM_THREADS": str(cores), "MXNET_CPU_WORKER_NTHREADS": str(inter)})
    else:
        threads = Setting("intra_inter_threads", f"intra-op threads = {cores} physical cores, inter-op = {inter}",
                          intra_op_threads=cores, inter_op_threads=inter)

    if runtime == "intel":
        affinity = {"KMP_AFFINITY": "granularity=fine,compact,1,0"}
        blocktime = {"KMP_BLOCKTIME": "1"}
        said = "as the seed sets it (Intel OpenMP)"
    else:
        affinity = {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}
        blocktime = {"OMP_WAIT_POLICY": "PASSIVE"}
        said = f"in standard OpenMP words: this {framework} uses the {runtime} OpenMP runtime, which ignores KMP_*"

    onednn_env = {"tensorflow": {"TF_ENABLE_ONEDNN_OPTS": "0"}, "mxnet": {"MXNET_MKLDNN_ENABLED": "0"}}.get(framework)
    onednn_skip = None if onednn_env else (
        "PyTorch's CPU build always includes oneDNN (torch.backends.mkldnn); no switch before start turns it off")

    tuned_env = {"OMP_NUM_THREADS": str(cores), **affinity, **blocktime, **threads.env}
    all_tuned = Setting("all_tuned", "threads, OMP_NUM_THREADS, affinity and block time together",
                        env=tuned_env, intra_op_threads=threads.intra_op_threads,
                        inter_op_threads=threads.inter_op_threads)
    # On one node, interleaving places every page where all_tuned does: the row would time all_tuned again.
    one_node = None if topo.numa_nodes > 1 else (
        "one NUMA node here: interleaving over it places memory as all_tuned does, so this row would time all_tuned "
        "again; it runs on machines with two or more nodes")
    return [
        Setting("default", "the framework's defaults, nothing set"),
        threads,
        Setting("omp_num_threads", f"OMP_NUM_THREADS = {cores} physical cores", env={"OMP_NUM_THREADS": str(cores)}),
        Setting("kmp_affinity", f"threads pinned compactly to cores, {said}", env=affinity),
        Setting("kmp_blocktime", f"idle OpenMP threads sleep at once instead of spinning, {said}", env=blocktime),
        Setting("onednn_off", "oneDNN (MKL-DNN) switched off: what the oneDNN build is worth",
                env=onednn_env or {}, skip_reason=onednn_skip),
        all_tuned,
        Setting("numactl_interleave", "all_tuned under numactl --interleave=all",
                env=tuned_env, intra_op_threads=threads.intra_op_threads, inter_op_threads=threads.inter_op_threads,
                launch_prefix=("numactl", "--interleave=all"), skip_reason=numactl_reason or one_node),
    ]


#: A setting is called slower (or faster) than the default when the paired speedup is beyond this
#: and its interval excludes 1.0 (``stats.decide``, the rule the A/B mode uses too).
EFFECT_THRESHOLD = 0.05


def lost_gain(recorded: Sequence[float], ratio: PairedRatio) -> str | None:
    """Why a setting the baseline recorded as faster than the default no longer is, or None.

    Recorded as faster: every recorded run's speedup beyond :data:`EFFECT_THRESHOLD`. No longer faster:
    this run's whole interval below ``1 + EFFECT_THRESHOLD`` (same as, or slower than, the default). An
    interval that still reaches past the threshold is left to the stored speedup's own gate.
    """
    if not recorded_faster(recorded) or ratio.high >= 1 + EFFECT_THRESHOLD:
        return None
    runs = f"{len(recorded)} recorded run{'s' * (len(recorded) != 1)}"
    spread = f"{min(recorded):.2f}x" if len(recorded) == 1 else f"{min(recorded):.2f}-{max(recorded):.2f}x"
    return (f"no longer faster than the default: {spread} in the baseline ({runs}), now {ratio.describe()}; "
            f"a gain of {EFFECT_THRESHOLD:.0%} or more is outside this run's interval")


def recorded_faster(recorded: Sequence[float]) -> bool:
    """The baseline recorded the setting as faster than the default: every recorded speedup beyond the threshold."""
    return bool(recorded) and min(recorded) >= 1 + EFFECT_THRESHOLD


def gain_decided(recorded: Mapping[str, Sequence[float]]) -> Callable[[dict[str, PairedRatio]], bool]:
    """The tuning group's stopping rule: more processes only while a setting recorded as faster
    (``recorded``: its speedups, by name) reads at or below ``1 + EFFECT_THRESHOLD`` and its interval
    still reaches above it: the estimate says the gain is gone, but :func:`lost_gain` cannot say so yet.
    A setting that still reads faster costs nothing more (the usual run: no change); the other
    settings claim nothing that more processes would decide."""
    line = 1 + EFFECT_THRESHOLD

    def decided(ratios: dict[str, PairedRatio]) -> bool:
        return all(r.estimate > line or r.high < line for name, r in ratios.items()
                   if recorded_faster(recorded.get(name, ())))
    return decided


def describe_effect(ratio: PairedRatio) -> str:
    """``0.91x [0.89, 0.93] (95% CI, 20 pairs) default: slower than default``."""
    kind = {REGRESSION: "slower than default", IMPROVEMENT: "faster than default", OK: "no effect beyond the threshold",
            INCONCLUSIVE: "inconclusive"}
    return f"{ratio.describe()} over default: {kind[decide(ratio, EFFECT_THRESHOLD)]}"


def group_settle_seconds(framework: str) -> float:
    """Pause between a paired group's rounds: Intel OpenMP's idle threads spin for KMP_BLOCKTIME
    (200 ms by default) after a round and would slow the next child; GNU/LLVM runtimes spin
    for well under a millisecond."""
    return 0.25 if openmp_runtime_of(framework) == "intel" else 0.0

