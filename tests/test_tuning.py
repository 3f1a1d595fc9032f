"""Seed 003's settings: values from the machine, applied to scenarios, and honest speedup verdicts."""

from __future__ import annotations

import pytest

from pytest_dlperf.child import environment
from perf_tests.claims import tuning
from pytest_dlperf.scenario import Scenario
from pytest_dlperf.judging.stats import PairedRatio, paired_ratio

BIG = tuning.Topology(usable_cpus=36, physical_cores=18, numa_nodes=2)  # the seed's c4.8xlarge, one socket view
SMALL = tuning.Topology(usable_cpus=2, physical_cores=2, numa_nodes=1)


def table(framework="torch", topo=BIG, runtime="intel", numactl_reason=None):
    return {s.name: s for s in tuning.seed_003_settings(framework, topo, runtime, numactl_reason)}


def test_every_row_of_the_seed_is_there_in_order():
    assert tuple(table()) == tuning.SETTING_NAMES


def test_thread_counts_follow_the_physical_cores():
    rows = table(topo=BIG)
    assert rows["intra_inter_threads"].intra_op_threads == 18
    assert rows["intra_inter_threads"].inter_op_threads == 2
    assert rows["omp_num_threads"].env == {"OMP_NUM_THREADS": "18"}
    assert table(topo=SMALL)["omp_num_threads"].env == {"OMP_NUM_THREADS": "2"}
    assert tuning.Topology(4, 2, 1).threads_per_core == 2


def test_kmp_variables_only_for_intel_openmp():
    intel, gnu = table(runtime="intel"), table(runtime="gnu")
    assert intel["kmp_affinity"].env == {"KMP_AFFINITY": "granularity=fine,compact,1,0"}
    assert intel["kmp_blocktime"].env == {"KMP_BLOCKTIME": "1"}
    assert gnu["kmp_affinity"].env == {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}
    assert gnu["kmp_blocktime"].env == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert "ignores KMP_" in gnu["kmp_affinity"].description


def test_framework_specific_rows():
    assert table("torch")["onednn_off"].skip_reason
    assert table("tensorflow")["onednn_off"].env == {"TF_ENABLE_ONEDNN_OPTS": "0"}
    mx = table("mxnet")
    assert mx["onednn_off"].env == {"MXNET_MKLDNN_ENABLED": "0"}
    assert mx["intra_inter_threads"].env == {"OMP_NUM_THREADS": "18", "MXNET_CPU_WORKER_NTHREADS": "2"}
    assert mx["intra_inter_threads"].intra_op_threads is None


def test_numactl_row_skips_without_numactl_and_on_one_numa_node():
    assert table(numactl_reason="numactl is not installed")["numactl_interleave"].skip_reason == \
        "numactl is not installed"
    row = table()["numactl_interleave"]
    assert row.launch_prefix == ("numactl", "--interleave=all") and row.skip_reason is None
    assert "OMP_NUM_THREADS" in row.env  # on top of all_tuned, as in the seed
    single = table(topo=SMALL)["numactl_interleave"]
    assert single.skip_reason.startswith("one NUMA node here") and "time all_tuned again" in single.skip_reason


def test_apply_merges_into_the_scenario():
    base = Scenario(framework="torch", model="resnet50", env={"MKL_VERBOSE": "0"}, launch_prefix=("nice",))
    tuned = table()["numactl_interleave"].apply(base)
    assert tuned.label == "numactl_interleave"
    assert tuned.env["MKL_VERBOSE"] == "0" and tuned.env["KMP_BLOCKTIME"] == "1"
    assert tuned.launch_prefix == ("numactl", "--interleave=all", "nice")
    assert tuned.intra_op_threads == 18 and tuned.inter_op_threads == 2
    assert table()["default"].apply(base).env == base.env
    assert table()["default"].describe() == "framework defaults"
    assert table()["numactl_interleave"].describe().startswith("numactl --interleave=all ")


def test_effect_is_the_paired_rule_at_the_stated_threshold():
    slow = paired_ratio([70, 72, 71, 69, 70, 71, 70, 72], [100, 101, 99, 100, 102, 100, 99, 101])
    assert tuning.describe_effect(slow).endswith("over default: slower than default")
    fast = paired_ratio([150, 151, 149, 152, 150, 151, 150, 149], [100, 101, 99, 100, 102, 100, 99, 101])
    assert tuning.describe_effect(fast).endswith("faster than default")
    # 3% slower in every pair: real, but within the 5% threshold, so no claim either way.
    small = paired_ratio([97, 98, 96, 97, 98, 97, 96, 97], [100, 101, 99, 100, 101, 100, 99, 100])
    assert tuning.describe_effect(small).endswith("no effect beyond the threshold")
    wide = paired_ratio([80, 120, 90, 110, 85, 115, 95, 105], [100] * 8, units=[0, 1, 2, 3] * 2)
    assert tuning.describe_effect(wide).endswith("inconclusive")


def test_settle_pause_only_for_intel_openmp(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(tuning, "openmp_runtime_of", lambda framework: "intel")
    assert tuning.group_settle_seconds("mxnet") >= 0.2  # KMP_BLOCKTIME's 200 ms default spin
    monkeypatch.setattr(tuning, "openmp_runtime_of", lambda framework: "gnu")
    assert tuning.group_settle_seconds("torch") == 0.0


def test_runtime_detection_and_machine_facts():
    assert environment._runtime_in(["/x/libiomp5.so", "/x/libgomp.so.1"]) == "intel"
    assert environment._runtime_in(["/usr/lib/libgomp-a34b3233.so.1"]) == "gnu"
    assert environment._runtime_in(["libc.so.6"]) is None
    topo = tuning.topology()
    assert topo.usable_cpus >= topo.physical_cores >= 1 and topo.numa_nodes >= 1


def test_openmp_runtime_of_a_package_is_read_from_its_files(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """A fake installed package with a vendored libiomp5 (auditwheel's ``<name>.libs``) is intel;
    with libgomp beside its modules, gnu; with no OpenMP library, unknown."""
    import sys

    package = tmp_path / "mxnet"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mxnet", raising=False)
    assert environment.openmp_runtime_of("mxnet") == "unknown"
    (package / "libgomp-a34b3233.so.1").write_bytes(b"")
    assert environment.openmp_runtime_of("mxnet") == "gnu"
    (package / "libgomp-a34b3233.so.1").unlink()
    (tmp_path / "mxnet.libs").mkdir()
    (tmp_path / "mxnet.libs" / "libiomp5.so").write_bytes(b"")
    assert environment.openmp_runtime_of("mxnet") == "intel"


def test_loaded_openmp_runtime_is_the_library_mapped_into_the_process():
    """A child that loads libgomp reports gnu; one that loads nothing, 'none loaded'."""
    import ctypes.util
    import subprocess
    import sys

    name = ctypes.util.find_library("gomp")
    if name is None:
        pytest.skip("libgomp is not installed (apt-get install libgomp1)")
    code = ("import ctypes, sys; {load}from pytest_dlperf.child import environment; "
            "print(environment.loaded_openmp_runtime())")

    def run(load):
        return subprocess.run([sys.executable, "-c", code.format(load=load)], capture_output=True,
                              text=True, check=True).stdout.strip()
    assert run(f"ctypes.CDLL({name!r}); ") == "gnu"
    assert run("") == "none loaded"


def test_a_child_reports_the_memory_policy_the_kernel_applied():
    """``numactl --interleave=all`` is seen by the child as an interleave policy over every node
    it may use (get_mempolicy); without it, the default policy."""
    import json
    import subprocess
    import sys

    reason = tuning.numactl_unavailable()
    if reason:
        pytest.skip(reason)
    code = ("import json; from pytest_dlperf.child.environment import memory_policy, allowed_memory_nodes; "
            "print(json.dumps([memory_policy(), allowed_memory_nodes()]))")
    plain, _ = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                         check=True).stdout)
    tuned, nodes = json.loads(subprocess.run(["numactl", "--interleave=all", sys.executable, "-c", code],
                                             capture_output=True, text=True, check=True).stdout)
    assert plain["mode"] == "default"
    assert tuned == {"mode": "interleave", "nodes": nodes} and nodes


def _ratio(estimate: float, low: float, high: float) -> PairedRatio:
    return PairedRatio(ratios=(estimate,) * 20, estimate=estimate, low=low, high=high, confidence=0.95, units=4)


@pytest.mark.parametrize("recorded, now, lost", [
    ((1.23,), (1.00, 0.97, 1.03), True),          # recorded faster, now the same as the default
    ((1.20, 1.25), (0.90, 0.87, 0.93), True),     # ... or slower
    ((1.20, 1.25), (1.04, 1.01, 1.07), False),    # the interval still reaches a gain: the stored gate judges
    ((1.20, 1.25), (1.22, 1.18, 1.26), False),    # still faster
    ((1.04,), (0.97, 0.95, 0.99), False),         # never recorded beyond the threshold
    ((1.30, 1.02), (0.97, 0.95, 0.99), False),    # ... not in every recorded run
    ((), (0.50, 0.45, 0.55), False),              # nothing recorded
])
def test_a_gain_the_baseline_recorded_fails_once_this_run_rules_it_out(recorded, now, lost):
    message = tuning.lost_gain(recorded, _ratio(*now))
    assert (message is not None) == lost
    if lost:
        assert message.startswith("no longer faster than the default: ")
        assert f"{now[0]:.3f}x [{now[1]:.3f}, {now[2]:.3f}]" in message and "baseline" in message


@pytest.mark.parametrize("now, decided", [
    ((1.00, 0.97, 1.03), True),   # the gain is gone: lost_gain can fail the test
    ((1.22, 1.18, 1.26), True),   # the gain is kept
    ((1.60, 0.90, 2.80), True),   # reads as kept; a wide interval alone costs no more processes
    ((1.02, 0.90, 1.15), False),  # reads as lost, yet a gain is still possible: fresh processes join
])
def test_the_group_stops_once_every_recorded_gain_is_decided(now, decided):
    recorded = {"omp_num_threads": (1.20, 1.25), "kmp_affinity": (1.01,)}
    undecided_elsewhere = _ratio(1.00, 0.80, 1.20)  # recorded at no gain: nothing to decide about it
    rule = tuning.gain_decided(recorded)
    assert rule({"omp_num_threads": _ratio(*now), "kmp_affinity": undecided_elsewhere}) is decided
    assert tuning.gain_decided({})({"omp_num_threads": _ratio(1.10, 0.98, 1.25)}) is True
