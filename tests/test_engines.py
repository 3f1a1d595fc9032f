"""Real ssh, Open MPI, Slurm and Grid Engine engines across namespace hosts: bring-up, teardown, checks, faults.

Each host is a network namespace with its own sshd (keys made for the run) and its own core;
the launch clients run on a separate head namespace, so every rank is remote. The faults are
the ones a cluster has: a host's link goes down mid-job, or the host dies (every process on it,
its sshd included, killed). The job must fail within its timeout naming the rank and its host,
and no process of the job may be left on any host.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import time

import pytest

from pytest_dlperf.processes import distributed as dist
from pytest_dlperf.processes.distributed import engines
from pytest_dlperf.processes.distributed.hosts import Host, read_hostfile

pytestmark = pytest.mark.serial  # network-namespace hosts pinned to CPUs, Grid Engine cells, the CPU lock

SSH_REASON = engines.unavailable_reason("ssh")
MPI_REASON = engines.unavailable_reason("mpi")
SLURM_REASON = engines.unavailable_reason("slurm")
SGE_REASON = engines.unavailable_reason("sge")
needs_ssh = pytest.mark.skipif(SSH_REASON is not None, reason=SSH_REASON or "")
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (tox -e perf-torch)")
CONFIG = dict(model="tiny_cnn", batch_size=4, image_size=8, num_classes=4, lr=0.05, momentum=0.9, seed=0,
              train_samples=64, steps=6, warmup_steps=0, rounds=1, threads=1)
#: Long enough that the fault lands mid-job (steps are ~ms); the timeout is what a hang runs into.
LONG = dict(CONFIG, steps=100000)
FAULT_TIMEOUT = 60.0


@pytest.fixture
def hosts(tmp_path, monkeypatch):
    if SSH_REASON:
        pytest.skip(SSH_REASON)
    monkeypatch.setenv("DLPERF_LOCK_DIR", str(tmp_path / "locks"))  # functional jobs: no wait on measured runs
    with engines.EngineHosts(2, slurm=SLURM_REASON is None, sge=SGE_REASON is None) as up:
        yield up
    assert up.cluster.exists() == [], "a namespace outlived the engine"
    assert not up.sge or all(p.poll() is not None for p in up.sge.daemons), "a Grid Engine daemon lives on"


def _at_step(log_dir, stem: str, step: int, timeout: float = 60.0) -> None:
    """Wait until the rank whose log is ``stem.log`` (under the job folder) has entered ``step``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = list(log_dir.glob(f"*/{stem}.log"))
        if logs and dist.last_step(logs[0]) >= step:
            return
        time.sleep(0.1)
    raise AssertionError(f"{stem} never reached step {step}")


def _fail_with(job, tmp_path, fault) -> tuple[dist.JobFailed, float]:
    thread = threading.Thread(target=fault, daemon=True)
    thread.start()
    start = time.monotonic()
    with pytest.raises(dist.JobFailed) as info:
        dist.run_job(job, tmp_path)
    thread.join(timeout=5)
    return info.value, time.monotonic() - start


def _nothing_left(hosts: engines.EngineHosts, exc: dist.JobFailed, grace: float = 15.0) -> None:
    """No rank anywhere; the hosts' ssh sessions end too (a cut-off one when sshd's ClientAlive expires, ~6 s)."""
    assert dist.job_processes(exc.job) == [], exc.report()
    deadline = time.monotonic() + grace
    for i in range(len(hosts.addresses)):
        while hosts.host_pids(i) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert hosts.host_pids(i) == [], f"processes left on host {hosts.addresses[i]} after {grace:g} s"


@needs_ssh
def test_the_hosts_come_up_pinned_and_go_away(hosts):
    import subprocess

    for i, address in enumerate(hosts.addresses):
        out = subprocess.run([*hosts.head_prefix, "ssh", *hosts.ssh_options(), address,
                              "hostname; grep Cpus_allowed_list /proc/self/status"],
                             capture_output=True, text=True, timeout=30, check=True).stdout.split()
        assert out[0] == f"h{i}" and out[-1] == str(hosts.cores[i]), out
    assert [h.address for h in read_hostfile(hosts.hostfile(sys.executable))] == hosts.addresses
    assert read_hostfile(hosts.hostfile(sys.executable))[0].python == sys.executable


@pytest.mark.skipif(SGE_REASON is not None, reason=SGE_REASON or "")
def test_grid_engine_starts_a_command_through_the_host_s_execd_not_ssh(hosts):
    """qrsh to h1: the command runs on h1, on its core, under sge_shepherd (started by sge_execd), no sshd."""
    import subprocess

    probe = [sys.executable, "-c", "import os, socket\npid, chain = os.getpid(), []\nwhile pid > 1:\n"
             "    pid = int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])\n"
             "    chain.append(open(f'/proc/{pid}/comm').read().strip())\n"
             "print(socket.gethostname(), sorted(os.sched_getaffinity(0)), chain, os.environ['DLPERF_X'])"]
    launcher = hosts.launcher("sge")
    for i in range(2):
        out = subprocess.run(launcher.argv(i, probe, {"DLPERF_X": "a b'c"}), capture_output=True, text=True,
                             timeout=60, check=True).stdout.strip()
        name, cpus, chain = out.split(" ", 2)[0], out.split("]", 1)[0] + "]", out.split("] ", 1)[1]
        assert name == f"h{i}" and cpus.endswith(f"[{hosts.cores[i]}]"), out
        assert "sge_shepherd" in chain and "sge_execd" in chain and "sshd" not in chain, out
        assert out.endswith("a b'c"), out
    print(f"Grid Engine cell up in {hosts.bring_up['sge']:.1f} s (sshds {hosts.bring_up['ssh']:.1f} s)")


def test_a_missing_grid_engine_is_skipped_with_the_preseeded_install_command(monkeypatch):
    monkeypatch.setattr(engines, "netns_unavailable", lambda: None)
    monkeypatch.setattr(engines.shutil, "which", lambda tool: None if "sge" in tool or tool.startswith("q") else tool)
    reason = engines.unavailable_reason("sge")
    assert reason.startswith("the sge engine needs '/usr/sbin/sge_qmaster': printf "), reason
    assert "'gridengine-common shared/gridenginemaster string head'" in reason, reason
    assert "| debconf-set-selections && apt-get install" in reason, reason
    assert reason.endswith("apt-get install --no-install-recommends openssh-server openssh-client gridengine-master "
                           "gridengine-exec gridengine-client (.ci/run installs it)"), reason


@pytest.mark.skipif(SGE_REASON is not None, reason=SGE_REASON or "")
def test_a_grid_engine_cell_leaves_nothing_behind():
    """The cell's daemons, its SGE_ROOT and the namespaces' hosts files all go with the hosts."""
    import subprocess

    with engines.EngineHosts(1, sge=True) as up:
        cell = up.sge
        etc = list(cell._etc)
        assert cell.ready_hosts() == ["h0"] and all(p.poll() is None for p in cell.daemons)
    assert all(p.poll() is not None for p in cell.daemons)
    assert not any(p.exists() for p in etc) and not cell.root.exists() and up.cluster.exists() == []
    left = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(cell.root) not in left and str(cell.dir) not in left, left


def test_a_teardown_after_a_failed_bring_up_leaves_nothing(monkeypatch):
    if SSH_REASON:
        pytest.skip(SSH_REASON)
    made = []

    def broken(self):
        made.append(self)
        raise engines.EngineUnavailable("injected")

    monkeypatch.setattr(engines.EngineHosts, "_wait_ready", broken)
    with pytest.raises(engines.EngineUnavailable, match="injected"):
        with engines.EngineHosts(2):
            pass
    assert made and made[0].cluster.exists() == [] and all(p.poll() is not None for p in made[0].sshd)


@needs_ssh
def test_a_host_without_the_interpreter_is_named_before_the_job_starts(hosts, tmp_path):
    launcher = hosts.launcher("ssh", [Host(hosts.addresses[0]), Host(hosts.addresses[1], python="/nonexistent/python")])
    job = dist.Job("torch", 2, CONFIG, launcher=launcher, timeout=60, label="nopython")
    with pytest.raises(dist.HostsNotReady, match=r"host 10\.77\.0\.2: ssh could not run /nonexistent/python"):
        dist.run_job(job, tmp_path)


@pytest.mark.slow
@needs_ssh
@needs_torch
@pytest.mark.parametrize("engine", ["ssh", pytest.param("mpi", marks=pytest.mark.skipif(
    MPI_REASON is not None, reason=MPI_REASON or "")), pytest.param("slurm", marks=pytest.mark.skipif(
    SLURM_REASON is not None, reason=SLURM_REASON or "")), pytest.param("sge", marks=pytest.mark.skipif(
    SGE_REASON is not None, reason=SGE_REASON or ""))])
def test_a_host_whose_link_goes_down_is_named(hosts, tmp_path, engine):
    job = dist.Job("torch", 2, LONG, launcher=hosts.launcher(engine), timeout=FAULT_TIMEOUT, label=f"linkdown-{engine}")

    def fault():
        _at_step(tmp_path, "worker1", 3)
        hosts.cluster.link(1, up=False)

    exc, seconds = _fail_with(job, tmp_path, fault)
    print(f"{engine}: the job failed {seconds:.1f} s after it started: {exc.rank} on {exc.host}: {exc.reason}")
    assert exc.rank == "worker 1" and exc.host == "10.77.0.2", exc.report()
    assert seconds < FAULT_TIMEOUT + 40, f"took {seconds:.0f} s"  # the timeout, then the probe and the clean-up
    assert any("10.77.0.2" in u for u in exc.unreached), exc.report()  # the clean-up says what it could not reach
    if engine in ("slurm", "sge"):
        # slurmstepd (sge_shepherd) on a cut-off node outlives the job until the node is back: then
        # slurmctld ends it (the rank finds its qrsh and its peer gone)
        hosts.cluster.link(1, up=True)
    _nothing_left(hosts, exc, grace=60.0 if engine in ("slurm", "sge") else 15.0)


@pytest.mark.slow
@needs_ssh
@needs_torch
@pytest.mark.parametrize("engine", ["ssh", pytest.param("slurm", marks=pytest.mark.skipif(
    SLURM_REASON is not None, reason=SLURM_REASON or "")), pytest.param("sge", marks=pytest.mark.skipif(
    SGE_REASON is not None, reason=SGE_REASON or ""))])
def test_a_host_that_dies_mid_job_is_named_at_once(hosts, tmp_path, engine):
    """Every process on the host killed (sshd, slurmd or sge_execd, the session, the rank): the launcher notices."""
    job = dist.Job("torch", 2, LONG, launcher=hosts.launcher(engine), timeout=FAULT_TIMEOUT, label=f"hostdies-{engine}")

    def fault():
        _at_step(tmp_path, "worker1", 3)
        hosts.crash(1)

    exc, seconds = _fail_with(job, tmp_path, fault)
    print(f"{engine}: the job failed {seconds:.1f} s after it started: {exc.rank} on {exc.host}: {exc.reason}")
    assert exc.rank == "worker 1" and exc.host == "10.77.0.2", exc.report()
    # ssh notices the closed connection at once (~1 s); srun only after its probe of the host (~35 s); qrsh
    # at once too, but each probe and clean-up call through qrsh to the lost host takes ~5 s to be refused
    assert seconds < (FAULT_TIMEOUT / 2 if engine == "ssh" else FAULT_TIMEOUT), f"took {seconds:.0f} s"
    _nothing_left(hosts, exc)


@needs_ssh
@pytest.mark.parametrize("sge", [False, pytest.param(True, marks=pytest.mark.skipif(
    SGE_REASON is not None, reason=SGE_REASON or ""))])
def test_a_terminated_run_removes_its_hosts(sge):
    """A SIGTERM (CI's timeout) must not leave daemons, namespaces or hosts files behind: it becomes a clean exit."""
    import os
    import signal
    import subprocess

    script = ("import time\nfrom pytest_dlperf.processes.distributed import engines\n"
              f"with engines.EngineHosts(2, sge={sge}) as e:\n"
              "    print(e.cluster.token, flush=True)\n    time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    token = proc.stdout.readline().strip()
    assert token, "the hosts did not come up"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"dlp-{token}-" not in listed, listed
    assert not [n for n in (os.listdir("/etc/netns") if os.path.isdir("/etc/netns") else []) if token in n]
    left = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"dlp-{token}-" not in left, left


# ---------------------------------------------------------------- torchrun and the MPI environment (no network)

class _Hosts:
    """A launcher's addressing only: slot i on host i % 2 (what rank_environments and launch_groups read)."""

    name, remote, interface = "ssh", True, "eth0"

    def address(self, slot):
        return ("10.77.0.1", "10.77.0.2")[slot % 2]


class _Ports:
    def take(self, address):
        return {"10.77.0.1": 29400, "10.77.0.2": 29401}[address]


def test_torchrun_ranks_get_the_rendezvous_not_a_rank(monkeypatch):
    monkeypatch.setenv("RANK", "7")  # a stale value in the caller's environment must not reach torchrun's ranks
    job = dist.Job("torch", 3, CONFIG, launcher=_Hosts(), label="t", start="torchrun")
    assert dist.Job("torch", 3, CONFIG).start == dist.DEFAULT_TORCH_START
    envs = dist.rank_environments(job, "t-1", _Ports())
    for rank, env in envs.items():
        assert env["DLPERF_RENDEZVOUS"] == "10.77.0.1:29400" and env["GLOO_SOCKET_IFNAME"] == "eth0"
        assert not {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "DLPERF_PROCESS_INDEX"} & set(env), rank
    # workers 0 and 2 on the first host, worker 1 on the second: local rank -> launch index
    assert [envs[r]["DLPERF_PROCESS_INDEXES"] for r in job.ranks()] == ["0,2", "1", "0,2"]
    assert [[r.index for r in g] for g in dist.launch_groups(job, job.ranks())] == [[0, 2], [1]]
    assert dist.rendezvous_of(envs) == ["10.77.0.1:29400"]
    monkeypatch.setenv("DLPERF_PROCESS_INDEXES", "0,2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert dist.launch_index() == 2


def test_mpi_ranks_get_the_master_and_take_their_rank_from_open_mpi(monkeypatch):
    from pytest_dlperf.processes.distributed.launchers import MpiLauncher

    job = dist.Job("torch", 2, CONFIG, launcher=MpiLauncher([Host("10.77.0.1"), Host("10.77.0.2")]), start="mpi")
    envs = dist.rank_environments(job, "m-1", _Ports())
    env = envs[job.ranks()[1]]
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.77.0.1", "29400") and "RANK" not in env
    assert [[r.index for r in g] for g in dist.launch_groups(job, job.ranks())] == [[0, 1]]
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    assert dist.launch_index() == 1


def test_the_rank_reads_open_mpi_s_environment_as_ddp_users_do():
    torch_ddp = pytest.importorskip("pytest_dlperf.child.cores.torch_ddp")
    environ = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}
    assert torch_ddp.env_from_mpi(environ)
    assert (environ["RANK"], environ["WORLD_SIZE"], environ["LOCAL_RANK"]) == ("1", "2", "0")
    torchrun = {"RANK": "0", "OMPI_COMM_WORLD_RANK": "1"}  # torchrun's own variables win
    assert not torch_ddp.env_from_mpi(torchrun) and torchrun["RANK"] == "0"


def test_start_is_checked_against_framework_and_launcher():
    with pytest.raises(ValueError, match="start='mpi' reads the ranks from mpirun's environment; it needs the mpi"):
        dist.Job("torch", 2, CONFIG, start="mpi")
    with pytest.raises(ValueError, match="use one of torchrun, env, mpi"):
        dist.Job("torch", 2, CONFIG, start="horovodrun")
    with pytest.raises(ValueError, match="start=.env. is for torch and MXNet jobs"):
        dist.Job("tensorflow", 2, CONFIG, start="env")
    with pytest.raises(ValueError, match="an MXNet job starts one process per rank"):
        dist.Job("mxnet", 2, dict(CONFIG, kvstore="dist_sync"), start="torchrun")
    assert dist.Job("tensorflow", 2, CONFIG).start is None


TAGGED = r"""
import sys
print("agent: starting 2 ranks", flush=True)
print("[dlperf-rank 1] [dlperf] step 1\r", flush=True)
print("[dlperf-rank 0] [dlperf] step 1", flush=True)
print("[dlperf-rank 1] Traceback: boom", flush=True)
# as torchrun 2.x prints it with two ranks on the host: the rank it SIGTERMed after the first
# failure is listed under "Failures:", before the root cause
print("Failures:\n  rank      : 2 (local_rank: 0)\n  exitcode  : -15 (pid: 98)  (SIGTERM)", flush=True)
print("Root Cause (first observed failure):\n  rank      : 3 (local_rank: 1)\n  exitcode  : 17 (pid: 99)", flush=True)
sys.exit(1)
"""


def test_a_launch_of_several_ranks_keeps_a_log_per_rank_and_blames_the_one_torchrun_names(tmp_path):
    ranks = [dist.Rank("worker", 2, 0), dist.Rank("worker", 3, 0)]
    logs = [tmp_path / "worker2.log", tmp_path / "worker3.log"]
    launch = dist.TaggedLaunch([sys.executable, "-c", TAGGED], {}, "torchrun", ranks, logs, tmp_path / "launch0.log")
    assert launch.wait(timeout=30) == 1 and launch.poll() == 1
    first, second = (p.read_text().splitlines() for p in logs)
    assert first == ["[dlperf] step 1"]  # its own lines only: the agent's are kept apart
    assert second == ["[dlperf] step 1", "Traceback: boom"]  # untagged, without ssh's CR
    assert dist.last_step(logs[1]) == 1
    assert launch.blame(ranks[0], 1) == (ranks[1], 17)
    report = launch.report(logs[1])
    assert report.startswith("[dlperf] step 1\nTraceback: boom\n--- last lines of torchrun ---\nagent: starting")
    assert "exitcode  : 17" in report
    assert "Root Cause" in (tmp_path / "launch0.log").read_text()


def test_mpirun_s_failure_report_names_the_world_rank(tmp_path):
    # mpirun tags each chunk it forwards: a rank's unfinished line, another rank's chunk after it on
    # the same line, the rest (a long result line in two chunks) later
    script = ('print("[5,0]<stdout>:[dlperf] step 2[5,1]<stdout>:[dlperf] res[5,1]<stdout>:ult {}");'
              'print("[5,0]<stdout>:"); print("  Process name: [[5138,1],1]\\n  Exit code:    17");'
              'raise SystemExit(17)')
    ranks = [dist.Rank("worker", 0, 0), dist.Rank("worker", 1, 1)]
    launch = dist.TaggedLaunch([sys.executable, "-c", script], {}, "mpi", ranks,
                               [tmp_path / "w0.log", tmp_path / "w1.log"], tmp_path / "launch0.log")
    launch.wait(timeout=30)
    assert launch.blame(ranks[0], 17) == (ranks[1], 17)
    assert (tmp_path / "w0.log").read_text() == "[dlperf] step 2\n"
    assert dist.read_rank_result(tmp_path / "w1.log", None) == {}


def test_mxnet_under_mpirun_is_one_mpirun_per_role_as_launch_py_does():
    from pytest_dlperf.processes.distributed.launchers import MpiLauncher

    launcher = MpiLauncher([Host("10.77.0.1"), Host("10.77.0.2")], interface="eth0")
    job = dist.Job("mxnet", 2, dict(CONFIG, kvstore="dist_sync"), launcher=launcher, servers=2, start="mpi")
    groups = dist.launch_groups(job, job.ranks())
    assert [[r.name for r in g] for g in groups] == [["scheduler"], ["server 0", "server 1"], ["worker 0", "worker 1"]]
    envs = dist.rank_environments(job, "x-1", _Ports())
    worker = envs[groups[2][1]]
    assert worker["DMLC_ROLE"] == "worker" and worker["DMLC_PS_ROOT_URI"] == "10.77.0.1"
    assert worker["DMLC_INTERFACE"] == "eth0" and worker["DMLC_JOB_CLUSTER"] == "mpi"
    assert "DMLC_NODE_HOST" not in worker and "DLPERF_PROCESS_INDEX" not in worker  # one env for the whole mpirun
    assert envs[groups[2][0]] == worker
    with pytest.raises(ValueError, match="needs a dist_\\* kvstore"):
        dist.Job("mxnet", 2, dict(CONFIG, kvstore="local"), launcher=launcher, start="mpi")
    with pytest.raises(ValueError, match="launch.py --launcher mpi"):
        dist.Job("mxnet", 2, dict(CONFIG, kvstore="dist_sync"), start="mpi")


MPI_OK = pytest.mark.skipif(MPI_REASON is not None, reason=MPI_REASON or "")
SLURM_OK = pytest.mark.skipif(SLURM_REASON is not None, reason=SLURM_REASON or "")
SGE_OK = pytest.mark.skipif(SGE_REASON is not None, reason=SGE_REASON or "")


@pytest.mark.slow
@needs_ssh
@needs_torch
@pytest.mark.parametrize("engine,start", [("ssh", "torchrun"), pytest.param("mpi", "torchrun", marks=MPI_OK),
                                          pytest.param("mpi", "mpi", marks=MPI_OK),
                                          pytest.param("slurm", "torchrun", marks=SLURM_OK),
                                          pytest.param("sge", "torchrun", marks=SGE_OK)])
def test_a_rank_that_fails_under_torchrun_or_mpirun_is_named_with_its_host(hosts, tmp_path, engine, start):
    """Rank 1 exits 17 at step 3: the launch process (a host's torchrun, the world's mpirun) carries two
    or one ranks, so the rank comes from its own failure report; nothing is left on either host."""
    config = dict(CONFIG, steps=40, fault={"rank": 1, "step": 3, "kind": "crash"})
    job = dist.Job("torch", 2, config, launcher=hosts.launcher(engine), start=start, timeout=FAULT_TIMEOUT,
                   label=f"crash-{engine}-{start}")
    with pytest.raises(dist.JobFailed) as info:
        dist.run_job(job, tmp_path)
    exc = info.value
    assert (exc.rank, exc.host) == ("worker 1", "10.77.0.2"), exc.report()
    assert "exit status 17" in exc.reason and "injected fault: crash at step 3" in exc.output_tail, exc.report()
    _nothing_left(hosts, exc)
