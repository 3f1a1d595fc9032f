"""A/B of a revision as a user runs it: ``--dlperf-reference-rev REV`` on a project that is a git repository
(pytester, real torch children running the project's own step at two commits)."""

from __future__ import annotations

import subprocess

import pytest

from pytest_dlperf.reports import cli
from pytest_dlperf.reports.junit import read_reports

STEP = """
import torch

from stepwork import WORK


def make_step(scenario):
    a = torch.randn(192, 192)

    def step():
        for _ in range(WORK * 8):
            b = a @ a
        return b.mean() * 0.0

    return step
"""
TEST = """
import pytest

@pytest.mark.framework("torch")
def test_step(dlperf):
    dlperf.run(dlperf.scenario("torch", "mystep", step="mystep:make_step", batch_size=4, warmup_steps=2,
                               steps_per_round=4, intra_op_threads=1))
"""
FAST = ("-p", "no:cacheprovider", "-o", "dlperf_pairs=8", "-o", "dlperf_processes=2")


def git(pytester: pytest.Pytester, *args: str) -> None:
    subprocess.run(["git", "-C", str(pytester.path), *args], check=True, capture_output=True)


def project_with_two_commits(pytester: pytest.Pytester, before: int, after: int) -> None:
    git(pytester, "init", "-q")
    git(pytester, "config", "user.email", "dev@example.com")
    git(pytester, "config", "user.name", "Dev")
    # the change is in a module the step imports: each side must run its own revision's copy of it
    pytester.makepyfile(mystep=STEP, stepwork=f"WORK = {before}\n", test_step=TEST)
    git(pytester, "add", ".")
    git(pytester, "commit", "-q", "-m", "Add the step")
    pytester.makepyfile(stepwork=f"WORK = {after}\n")
    git(pytester, "commit", "-qam", "Do the step's work three times")


@pytest.mark.slow
@pytest.mark.framework("torch")
def test_a_revision_that_made_the_step_slower_fails_against_its_base(pytester: pytest.Pytester) -> None:
    project_with_two_commits(pytester, before=1, after=3)
    result = pytester.runpytest_subprocess(*FAST, "--dlperf-reference-rev=HEAD~1", "--junitxml=report.xml")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "dlperf A/B mode: every scenario also runs on the reference (reference * 'Add the step', candidate the "
        "working tree at * 'Do the step's work three times'), interleaved*",
        "*mystep@* vs mystep: alternating in one process, * pairs of rounds each, ABBA, fresh processes until decided*",
        "*A/B slower: mystep throughput candidate/reference 0.*x*",
        "*1 scenario compared with the reference (threshold 5%): 1 slower (regression)*",
    ])
    (test,) = read_reports([pytester.path / "report.xml"])
    properties = test.ab["mystep"]
    assert "'Add the step'" in properties["reference_commit"]
    assert properties["candidate_commit"].endswith("'Do the step's work three times'")
    assert int(properties["ab_process_pairs"]) >= 2
    listed = subprocess.run(["git", "-C", str(pytester.path), "worktree", "list"], capture_output=True, text=True)
    assert len(listed.stdout.splitlines()) == 1  # the reference's worktree is gone after the run


def test_an_unknown_revision_or_no_repository_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_step="def test_x(): pass")
    outside = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--dlperf-reference-rev=main")
    assert outside.ret == pytest.ExitCode.USAGE_ERROR
    outside.stderr.fnmatch_lines(["*--dlperf-reference-rev compares revisions of the git repository holding the "
                                  "rootdir*not in one*"])
    git(pytester, "init", "-q")
    unknown = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--dlperf-reference-rev=v9.9")
    assert unknown.ret == pytest.ExitCode.USAGE_ERROR
    unknown.stderr.fnmatch_lines(["*--dlperf-reference-rev 'v9.9': no such commit in *"])


def test_a_project_with_compiled_extensions_is_refused_saying_how_to_compare_it(pytester: pytest.Pytester) -> None:
    """The worktree holds only sources: a compiled module of the project would be the checkout's on both sides."""
    project_with_two_commits(pytester, before=1, after=2)
    (pytester.path / "fastkernels.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")  # a build output, untracked
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--dlperf-reference-rev=HEAD~1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*--dlperf-reference-rev cannot compare this project: it has compiled extension "
                                 "modules (*fastkernels.cpython-311-x86_64-linux-gnu.so)*--dlperf-reference=PYTHON*"])
    listed = subprocess.run(["git", "-C", str(pytester.path), "worktree", "list"], capture_output=True, text=True)
    assert len(listed.stdout.splitlines()) == 1


@pytest.mark.framework("torch")
def test_a_step_new_in_the_working_tree_runs_alone_and_is_reported_not_compared(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    """A pull request that adds a step and its test: the base has nothing to compare, which is no failure."""
    project_with_two_commits(pytester, before=1, after=2)
    pytester.makepyfile(newstep=STEP, test_new=TEST.replace("mystep", "newstep"))  # untracked, as before a commit
    result = pytester.runpytest_subprocess(*FAST, "--dlperf-reference-rev=HEAD", "--junitxml=report.xml",
                                           "test_new.py")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*newstep@* vs newstep: not compared: the worktree of * has no module newstep: new in the candidate; the "
        "candidate runs alone",
        "*newstep: done in * s: * samples/s*",
        "No scenario compared with the reference; 1 scenario new in the candidate, judged against stored "
        "baselines only.",
        "test_new.py::test_step::newstep: not compared: the worktree of * has no module newstep: new in the candidate",
    ])
    (test,) = read_reports([pytester.path / "report.xml"])
    assert test.ab["newstep"]["ab_verdict"] == "not compared"
    assert test.ab["newstep"]["ab_not_compared"].endswith("has no module newstep: new in the candidate")
    assert cli.main(["summary", "--brief", str(pytester.path / "report.xml")]) == 0
    assert "0 scenarios compared with the reference (1 new in the candidate, not compared)" in capsys.readouterr().out
