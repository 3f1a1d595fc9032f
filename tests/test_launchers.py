"""Launchers build argv lists; hostfile entries are validated; nothing reaches a shell unquoted."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest

from pytest_dlperf.processes.distributed import launchers
from pytest_dlperf.processes.distributed.hosts import Host, HostfileError, read_hostfile, slot_hosts, validate_host

TF_CONFIG = json.dumps({"cluster": {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]},
                        "task": {"type": "worker", "index": 1}})
ENV = {"RANK": "1", "TF_CONFIG": TF_CONFIG, "DLPERF_JOB": "j-1", "HOME": "/root", "SECRET_TOKEN": "x"}
COMMAND = [sys.executable, "-m", "pytest_dlperf.child.cores.torch_ddp", "/tmp/a b/config.json", "/tmp/r'1.json"]


@pytest.mark.parametrize("text,expected", [
    ("node1", Host("node1")),
    ("node-1.cluster.example.org", Host("node-1.cluster.example.org")),
    ("10.0.0.7 slots=4", Host("10.0.0.7", slots=4)),
    ("ubuntu@ip-10-0-0-219", Host("ip-10-0-0-219", user="ubuntu")),
    ("fe80::1", Host("fe80::1")),
    ("node1:2222", Host("node1", port=2222)),
    ("ubuntu@node1:2222 slots=2", Host("node1", user="ubuntu", slots=2, port=2222)),
    ("10.0.0.7:65535", Host("10.0.0.7", port=65535)),
    ("[fe80::1]:2222", Host("fe80::1", port=2222)),
    ("ubuntu@[fe80::1%eth0]:22", Host("fe80::1%eth0", user="ubuntu", port=22)),
    ("[fe80::1]", Host("fe80::1")),
    ("fe80::1:22", Host("fe80::1:22")),  # bare IPv6: every colon belongs to the address
])
def test_valid_hosts_are_parsed(text, expected):
    assert validate_host(text) == expected


@pytest.mark.parametrize("text,problem", [
    ("node1;reboot", "neither an IP address nor a DNS host name"),
    ("node1;rm -rf /", "not understood"),
    ("$(reboot)", "neither"),
    ("`id`", "neither"),
    ("-oProxyCommand=touch_pwned", "starts with '-'"),
    ("node1 slots=0", "slots=N"),
    ("node1 extra", "not understood"),
    ("bad user@node1", "not understood"),
    ("r$oot@node1", "not a valid login name"),
    ("node_1", "neither"),
    ("a" * 300, "neither"),
    ("node1:0", "port '0' is not a TCP port (host:PORT, PORT from 1 to 65535)"),
    ("node1:70000", "port '70000' is not a TCP port"),
    ("ubuntu@node1:abc", "port 'abc' is not a TCP port"),
    ("node1:", "port '' is not a TCP port"),
    ("[fe80::1]:0", "port '0'"),
    ("node1:22:33", "an IPv6 address with a port is written [ADDRESS]:PORT"),
    ("[node1]:22", "brackets hold an IPv6 address"),
    ("[fe80::1]22", "brackets hold an IPv6 address"),
    ("-oProxyCommand=x:22", "starts with '-'"),
    ("fe80::1%$(reboot)", "not an interface name"),
])
def test_unsafe_or_malformed_hosts_are_rejected(text, problem):
    with pytest.raises(HostfileError, match=re.escape(problem)):
        validate_host(text)


def test_hostfile_skips_comments_and_names_the_bad_line(tmp_path):
    good = tmp_path / "hosts"
    good.write_text("# workers\nnode1 slots=2\n\n10.0.0.2  # second\n", encoding="utf-8")
    assert read_hostfile(good) == [Host("node1", slots=2), Host("10.0.0.2")]
    bad = tmp_path / "bad"
    bad.write_text("node1\nnode2 && curl evil\n", encoding="utf-8")
    with pytest.raises(HostfileError, match=r"bad:2: .*not understood"):
        read_hostfile(bad)
    bad.write_text("node1:2222\nnode2:70000\n", encoding="utf-8")
    with pytest.raises(HostfileError, match=r"bad:2: port '70000' is not a TCP port"):
        read_hostfile(bad)
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n", encoding="utf-8")
    with pytest.raises(HostfileError, match="lists no hosts"):
        read_hostfile(empty)
    with pytest.raises(HostfileError, match="cannot read hostfile"):
        read_hostfile(tmp_path / "missing")


def test_slots_are_filled_in_order_then_wrap():
    hosts = [Host("a", slots=2), Host("b")]
    assert [h.address for h in slot_hosts(hosts, 5)] == ["a", "a", "b", "a", "a"]


def test_local_and_netns_argv():
    assert launchers.LocalLauncher().argv(0, COMMAND, ENV) == COMMAND
    netns = launchers.NetnsLauncher(["ns0", "ns1"], ["10.77.0.1", "10.77.0.2"])
    assert netns.argv(1, COMMAND, ENV) == ["ip", "netns", "exec", "ns1", *COMMAND]
    assert netns.address(1) == "10.77.0.2"


def test_ssh_quotes_every_remote_word_and_forwards_only_job_variables():
    ssh = launchers.SshLauncher([Host("node1", user="ubuntu"), Host("node2")], workdir="/srv/my job")
    argv = ssh.argv(1, COMMAND, ENV)
    assert isinstance(argv, list) and argv[0] == "ssh" and "node2" in argv
    assert argv[argv.index("--") - 1] == "node2"
    remote = argv[-1]
    assert "SECRET_TOKEN" not in remote and "HOME=" not in remote
    prefix, _, command = remote.partition(" && ")
    assert shlex.split(prefix) == ["cd", "/srv/my job"]
    assert shlex.split(command) == ["env", "RANK=1", f"TF_CONFIG={TF_CONFIG}", "DLPERF_JOB=j-1", *COMMAND]
    assert ssh.argv(0, COMMAND, ENV)[argv.index("--") - 1] == "ubuntu@node1"


def test_ssh_passes_a_host_port_as_its_own_words():
    ssh = launchers.SshLauncher([Host("node1", user="ubuntu", port=2222), Host("fe80::1", port=22), Host("node3")])
    argv = ssh.argv(0, COMMAND, ENV)
    target = argv.index("--") - 1
    assert argv[target - 2:target + 1] == ["-p", "2222", "ubuntu@node1"]
    assert ssh.argv(1, COMMAND, ENV)[target - 2:target + 1] == ["-p", "22", "fe80::1"]
    assert "-p" not in ssh.argv(2, COMMAND, ENV)
    assert [ssh.address(i) for i in range(3)] == ["node1", "fe80::1", "node3"]  # rendezvous: the address alone


def test_ssh_remote_command_survives_a_real_shell(tmp_path):
    """What sshd does with the remote string: hand it to the login shell. The words must arrive intact."""
    ssh = launchers.SshLauncher([Host("node1")])
    probe = [sys.executable, "-c", "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ['TF_CONFIG']]))",
             "a b", "$(touch pwned)", "'; touch pwned2; '"]
    remote = ssh.argv(0, probe, ENV)[-1]
    out = subprocess.run(["sh", "-c", remote], capture_output=True, text=True, cwd=tmp_path, check=True).stdout
    args, tf_config = json.loads(out)
    assert args == probe[3:] and tf_config == TF_CONFIG
    assert not list(tmp_path.iterdir()), "the shell executed part of an argument"


def test_mpirun_and_srun_argv_use_env_not_a_shell():
    hosts = [Host("node1"), Host("node2")]
    mpi = launchers.MpiLauncher(hosts).argv(1, COMMAND, ENV)
    at = mpi.index("-np")
    assert mpi[0] == "mpirun" and mpi[at:at + 4] == ["-np", "1", "--host", "node2"]
    assert mpi[at + 4] == "env" and f"TF_CONFIG={TF_CONFIG}" in mpi and mpi[-len(COMMAND):] == COMMAND
    # the remote Open MPI daemon carries the job's marker, so a clean-up by marker finds it too
    marked = launchers.MpiLauncher(hosts).argv(1, COMMAND, dict(ENV, DLPERF_JOB="ddp-1a2b"))
    assert marked[1:7] == ["--mca", "orte_launch_agent", "env DLPERF_JOB=ddp-1a2b orted",
                           "--mca", "orte_tmpdir_base", "/tmp/dlperf-ranks/ddp-1a2b/ompi1"]
    srun = launchers.SlurmLauncher(hosts).argv(0, COMMAND, ENV)
    assert srun[:4] == ["srun", "--nodes=1", "--ntasks=1", "--nodelist=node1"]
    assert "env" in srun and srun[-len(COMMAND):] == COMMAND
    for argv in (mpi, srun):
        assert "sh" not in argv and "-c" not in argv[:argv.index("env")]


def test_qrsh_gets_one_quoted_command_that_survives_the_remote_shell(tmp_path):
    """qrsh joins its words and hands them to the remote shell (bash -c): the command is one quoted word."""
    sge = launchers.GridEngineLauncher([Host("10.0.0.1"), Host("10.0.0.2")], prefix=("env", "SGE_CELL=default"),
                                       nodes={"10.0.0.2": "h1"})
    probe = [sys.executable, "-c", "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ['TF_CONFIG']]))",
             "a b", "$(touch pwned)", "'; touch pwned2; '"]
    argv = sge.argv(1, probe, ENV)
    assert argv[:3] == [sys.executable, "-c", launchers.QRSH_STATUS]  # qrsh's exit status is not the command's
    assert argv[3:-1] == ["env", "SGE_CELL=default", "qrsh", "-now", "yes", "-l", "hostname=h1"]
    assert sge.argv(0, ["true"], {})[-2] == "hostname=10.0.0.1"  # no node name given: the address
    assert "SECRET_TOKEN" not in argv[-1] and "DLPERF_JOB=j-1" in argv[-1]
    # a stand-in for qrsh: the remote shell runs the last word, as sge_execd's does
    work = tmp_path / "work"
    work.mkdir()
    fake = tmp_path / "qrsh"
    fake.write_text('#!/bin/bash\nexec bash -c "${@: -1}"\n', encoding="utf-8")
    fake.chmod(0o755)
    sge.qrsh = str(fake)
    done = subprocess.run(sge.argv(1, probe, ENV)[:3] + sge.argv(1, probe, ENV)[5:], capture_output=True,
                          text=True, cwd=work)
    assert done.returncode == 0, done.stderr
    args, tf_config = json.loads(done.stdout)  # the status line kept back
    assert args == probe[3:] and tf_config == TF_CONFIG
    assert not list(work.iterdir()), "the shell executed part of an argument"
    failed = subprocess.run(sge.argv(0, ["sh", "-c", "printf unended; exit 17"], {})[:3] + [str(fake), "true",
                            sge.argv(0, ["sh", "-c", "printf unended; exit 17"], {})[-1]],
                            capture_output=True, text=True)
    assert (failed.returncode, failed.stdout) == (17, "unended"), failed
    lost = subprocess.run(sge.argv(0, ["true"], {})[:3] + ["true"], capture_output=True, text=True)
    assert lost.returncode == 255 and "without the command's exit status" in lost.stderr, lost  # qrsh said 0


def test_bad_environment_names_are_refused():
    with pytest.raises(ValueError, match="not valid"):
        launchers.MpiLauncher([Host("n")]).argv(0, COMMAND, {"DLPERF_X; rm": "1"})


def test_make_launcher_names_the_problem(tmp_path):
    # YARN is not built: Hadoop's jars come from Maven Central, which this machine type cannot reach
    # (docs/frameworks.md, "Grid Engine and YARN")
    with pytest.raises(ValueError, match="'yarn' is not known; use one of: local, ssh, mpi, slurm, sge, netns"):
        launchers.make_launcher("yarn")
    with pytest.raises(ValueError, match="needs a hostfile"):
        launchers.make_launcher("ssh")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1\nnode2\n", encoding="utf-8")
    ssh = launchers.make_launcher("ssh", hostfile)
    assert isinstance(ssh, launchers.SshLauncher) and ssh.address(1) == "node2"
    assert isinstance(launchers.make_launcher("local"), launchers.LocalLauncher)


@pytest.mark.parametrize("name,problem,fix", [
    ("mpi", "mpirun's --host and hostfile have no per-host ssh port",
     "'Host node2' with 'Port 2222' in ~/.ssh/config, or, if every host listens on that port, "
     "export OMPI_MCA_plm_rsh_args='-p 2222' (Open MPI 4) or PRTE_MCA_plm_ssh_args='-p 2222' (Open MPI 5)"),
    ("slurm", "srun starts ranks through slurmd, not ssh", "remove the ':PORT' from the hostfile"),
    ("sge", "qrsh starts ranks through sge_execd, not ssh", "remove the ':PORT' from the hostfile"),
])
def test_launchers_without_an_ssh_port_refuse_one_when_made(tmp_path, name, problem, fix):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1\nnode2:2222\n[fe80::1]:2200\n", encoding="utf-8")
    with pytest.raises(HostfileError) as refused:
        launchers.make_launcher(name, hostfile)
    message = str(refused.value)
    assert message.startswith(f"the {name} launcher cannot use the ssh port of 'node2:2222', '[fe80::1]:2200': ")
    assert problem in message and fix in message
    hostfile.write_text("node1\nnode2\n", encoding="utf-8")
    assert launchers.make_launcher(name, hostfile).address(1) == "node2"


def test_missing_tools_are_reported(monkeypatch):
    monkeypatch.setattr(launchers.shutil, "which", lambda name: None)
    assert "openmpi" in launchers.MpiLauncher([Host("n")]).missing()
    assert "Slurm" in launchers.SlurmLauncher([Host("n")]).missing()
    assert "gridengine-client" in launchers.GridEngineLauncher([Host("n")]).missing()
    assert "ssh client" in launchers.SshLauncher([Host("n")]).missing()


def test_a_hostfile_names_each_host_s_interpreter(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("10.0.0.1 slots=2 python=/opt/venv/bin/python\n10.0.0.2\n")
    first, second = read_hostfile(path)
    assert (first.python, first.slots, second.python) == ("/opt/venv/bin/python", 2, None)
    ssh = launchers.SshLauncher([first, second])
    assert ssh.python(0) == "/opt/venv/bin/python" and ssh.python(2) is None
    for bad in ("python=venv/bin/python", "python=/opt/my venv/python", "python=/x;rm"):
        path.write_text(f"10.0.0.1 {bad}\n")
        with pytest.raises(HostfileError, match="absolute path|not understood"):
            read_hostfile(path)


def test_torchrun_is_one_agent_per_host_meeting_at_a_c10d_rendezvous_by_ip():
    command = launchers.torchrun_command("/opt/venv/bin/python",
                                         ["pytest_dlperf.child.cores.torch_ddp", "-", "/r/w{index}.json"],
                                         nnodes=2, nproc=1, address="10.77.0.1", port=29411, job_id="j-1",
                                         is_host=False, local_address="10.77.0.2", log_dir="/tmp/dlperf-ranks/j-1/t1")
    assert command[:3] == ["/opt/venv/bin/python", "-m", "torch.distributed.run"]
    assert {"--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d", "--rdzv-endpoint=10.77.0.1:29411",
            "--rdzv-id=j-1", "--rdzv-conf=is_host=0", "--local-addr=10.77.0.2", "--max-restarts=0", "--tee=3",
            "--log-dir=/tmp/dlperf-ranks/j-1/t1"} <= set(command)
    assert command[-4:] == ["-m", "pytest_dlperf.child.cores.torch_ddp", "-", "/r/w{index}.json"]
    tag = launchers.TORCHRUN_TAG.replace("${local_rank}", "3")  # what torchrun prints before a line of local rank 3
    assert re.match(launchers.TORCHRUN_TAG_PATTERN, tag + "[dlperf] step 1").group(1) == "3"
    six = launchers.torchrun_command("p", ["m"], nnodes=1, nproc=2, address="fe80::1", port=1, job_id="j",
                                     is_host=True, local_address="fe80::1", log_dir="/l")
    assert "--rdzv-endpoint=[fe80::1]:1" in six and "--rdzv-conf=is_host=1" in six
    with pytest.raises(ValueError, match="nproc=0 must be >= 1"):
        launchers.torchrun_command("p", ["m"], nnodes=1, nproc=0, address="a", port=1, job_id="j", is_host=True,
                                   local_address="a", log_dir="/l")


def test_a_torchrun_command_survives_ssh_s_remote_shell():
    """The tag template holds '${local_rank}': it must reach torchrun as written, not expanded by the login shell."""
    ssh = launchers.SshLauncher([Host("node1")])
    probe = [sys.executable, "-c", "import sys; print(sys.argv[1])",
             f"--log-line-prefix-template={launchers.TORCHRUN_TAG}"]
    out = subprocess.run(["sh", "-c", ssh.argv(0, probe, ENV)[-1]], capture_output=True, text=True, check=True).stdout
    assert out.rstrip("\n") == f"--log-line-prefix-template={launchers.TORCHRUN_TAG}"


def test_one_mpirun_starts_the_world_with_tagged_output():
    mpi = launchers.MpiLauncher([Host("10.0.0.1", slots=2), Host("10.0.0.2")])
    argv = mpi.world_argv([0, 1, 2], COMMAND, dict(ENV, DLPERF_JOB="ddp-1"))
    at = argv.index("-np")
    assert argv[at:at + 5] == ["-np", "3", "--host", "10.0.0.1:2,10.0.0.2:1", "--tag-output"]
    assert argv[at + 5] == "env" and argv[-len(COMMAND):] == COMMAND
    assert "/tmp/dlperf-ranks/ddp-1/ompi-world" in argv  # its own Open MPI session folder, removed with the job
    assert re.match(launchers.MPI_TAG_PATTERN, "[1,2]<stderr>:Traceback").group(1) == "2"
    wrapped = launchers.MpiLauncher([Host("10.0.0.1"), Host("10.0.0.2")])
    with pytest.raises(ValueError, match="give each host as many slots= as ranks it runs"):
        wrapped.world_argv([0, 1, 2], COMMAND, ENV)  # ranks 0 and 2 on one host: mpirun would put 0 and 1 there


def test_the_marker_takes_every_launcher_there_is():
    """plugin/markers.py keeps its own list (validating markers must not import the distributed package at
    start-up), so it is held to the launchers' own."""
    from pytest_dlperf.plugin import markers
    from pytest_dlperf.processes.distributed import launchers

    assert markers.LAUNCHERS == launchers.LAUNCHERS
