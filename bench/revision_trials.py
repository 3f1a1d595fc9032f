"""Trials of A/B against a revision as a pull request would run it (#33).  (Not a pytest test.)

    python bench/revision_trials.py [--trials 20] [--kinds aa,slow10,slow5,faster] [--out FILE]
                                    [--gpu] [--seconds N] [--steps-per-round N]

The example project (examples/own_step) becomes a git repository of two commits: the base, and a
commit whose step is slower (``TINY_LM_SLOWDOWN``'s default raised to 0.10 or 0.05: the same work,
then that fraction more on the CPU). Each trial is one whole ``pytest --dlperf-reference-rev=REV``
run in that repository, the plugin's defaults otherwise (threshold 5%, generations until decided):

- ``aa``: the working tree at the base, against the base;
- ``slow10`` / ``slow5``: the working tree at the slower commit, against the base;
- ``faster``: the working tree at the base, against the 10% slower commit (the candidate is faster).

``--gpu`` marks the example's test ``gpu``, so both sides train on the CUDA device (one process per
variant, the plugin's GPU default); ``--seconds`` starts no trial once that many seconds have passed.
Kinds alternate trial by trial, so the machine's drift falls on all alike. Each trial's line gives the
exit status, the candidate/reference ratio with its interval, the verdict, the process pairs used and
the trial's wall time; the summary counts the verdicts per kind. Lines are appended to ``--out`` as
they come, so a stopped run keeps its trials. Run it alone on the machine: these are timings.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "own_step"
FILES = ("tiny_lm.py", "test_tiny_lm.py", "pyproject.toml")
DEFAULT = 'os.environ.get("TINY_LM_SLOWDOWN", "0")'
KINDS = ("aa", "slow10", "slow5", "faster")


def git(project: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(project), "-c", "user.name=trials", "-c", "user.email=t@example.com",
                           *args], capture_output=True, text=True, check=True).stdout.strip()


GPU_TEST = ("def test_tiny_lm_training_speed(dlperf):", "import pytest\n\n\n@pytest.mark.gpu\n"
            "def test_tiny_lm_training_speed(dlperf, gpu):")


def make_repository(root: Path, gpu: bool = False, steps: int | None = None) -> tuple[Path, dict[str, str]]:
    """The example as a repository: the base commit and one commit per slowdown, each on the base."""
    project = root / "project"
    project.mkdir()
    for name in FILES:
        shutil.copy(EXAMPLE / name, project / name)
    if gpu:
        test = (project / "test_tiny_lm.py").read_text(encoding="utf-8")
        if GPU_TEST[0] not in test:
            raise SystemExit(f"{EXAMPLE / 'test_tiny_lm.py'} no longer defines {GPU_TEST[0]}: update this script")
        (project / "test_tiny_lm.py").write_text(test.replace(*GPU_TEST), encoding="utf-8")
    if steps:
        test = (project / "test_tiny_lm.py").read_text(encoding="utf-8")
        if "steps_per_round=10" not in test:
            raise SystemExit(f"{EXAMPLE / 'test_tiny_lm.py'} no longer sets steps_per_round=10: update this script")
        (project / "test_tiny_lm.py").write_text(test.replace("steps_per_round=10", f"steps_per_round={steps}"),
                                                 encoding="utf-8")
    source = (project / "tiny_lm.py").read_text(encoding="utf-8")
    if DEFAULT not in source:
        raise SystemExit(f"{EXAMPLE / 'tiny_lm.py'} no longer reads {DEFAULT}: update this script")
    git(project, "init", "-q")
    git(project, "add", *FILES)
    git(project, "commit", "-q", "-m", "Base")
    commits = {"base": git(project, "rev-parse", "HEAD")}
    for name, slowdown in (("slow10", "0.10"), ("slow5", "0.05")):
        git(project, "checkout", "-q", commits["base"])
        (project / "tiny_lm.py").write_text(source.replace(DEFAULT, DEFAULT.replace('"0"', f'"{slowdown}"')),
                                            encoding="utf-8")
        git(project, "commit", "-q", "-am", f"Make the step {slowdown} slower")
        commits[name] = git(project, "rev-parse", "HEAD")
    return project, commits


#: Per kind: the commit the working tree holds, and the reference revision.
def sides(kind: str, commits: dict[str, str]) -> tuple[str, str]:
    return {"aa": (commits["base"], commits["base"]), "slow10": (commits["slow10"], commits["base"]),
            "slow5": (commits["slow5"], commits["base"]), "faster": (commits["base"], commits["slow10"])}[kind]


def ab_properties(junit: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    if junit.exists():
        for prop in ET.parse(junit).iter("property"):
            name = prop.get("name", "")
            if ".ab_" in name:
                found[name.rsplit(".", 1)[1]] = prop.get("value", "")
    return found


def trial(project: Path, commits: dict[str, str], kind: str, index: int,
          options: tuple[str, ...] = ()) -> dict[str, object]:
    tree, reference = sides(kind, commits)
    git(project, "checkout", "-q", tree)
    junit = project / "tmp" / f"{kind}-{index}.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DLPERF_", "TINY_LM_"))}
    env.update(PYTHONPATH=str(REPO / "src"), OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env["PYTHONPATH"], os.environ.get("PYTHONPATH")) if p)
    try:
        importlib.metadata.distribution("pytest-dlperf")
        plugin = []
    except importlib.metadata.PackageNotFoundError:  # a bare machine: load the plugin from the checkout
        plugin = ["-p", "pytest_dlperf.plugin.hooks"]
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", *plugin, "-p", "no:cacheprovider", "-q",
                           f"--dlperf-reference-rev={reference}", f"--junitxml={junit}", *options,
                           f"--basetemp={project / 'tmp' / f'{kind}-{index}'}"],
                          cwd=project, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    (project / "tmp" / f"{kind}-{index}.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    props = ab_properties(junit)
    if "ab_verdict" not in props:
        raise SystemExit(f"{kind} trial {index}: no A/B verdict in {junit} (exit {done.returncode}):\n"
                         f"{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return {"kind": kind, "index": index, "exit": done.returncode, "ratio": float(props["ab_ratio"]),
            "interval": props["ab_interval"], "verdict": props["ab_verdict"],
            "pairs": int(props["ab_process_pairs"]), "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20, help="trials of each kind")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    parser.add_argument("--out", type=Path, help="append each trial's line and the summary to this file")
    parser.add_argument("--gpu", action="store_true", help="train on the CUDA device (the test marked gpu)")
    parser.add_argument("--seconds", type=float, help="start no trial after this many seconds")
    parser.add_argument("--steps-per-round", type=int, help="the example's steps per round (10 as written)")
    parser.add_argument("--threshold", type=float,
                        help="the ini key dlperf_ab_threshold (the plugin's default otherwise)")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"--kinds: {', '.join(unknown)} unknown; choose from {', '.join(KINDS)}")

    def say(line: str) -> None:
        print(line, flush=True)
        if args.out:
            with args.out.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")

    root = Path(tempfile.mkdtemp(prefix="revision-trials-"))
    project, commits = make_repository(root, gpu=args.gpu, steps=args.steps_per_round)
    begun = time.monotonic()
    (project / "tmp").mkdir()
    say(f"# A/B of a revision: examples/own_step as a repository, {args.trials} trials of {', '.join(kinds)}, "
        f"python {sys.version.split()[0]}, threshold "
        f"{args.threshold if args.threshold is not None else 'the default (5%)'}, {project}")
    outcomes: dict[str, list[dict[str, object]]] = defaultdict(list)
    for i in range(args.trials):
        for kind in kinds:
            if args.seconds is not None and time.monotonic() - begun > args.seconds:
                break
            t = trial(project, commits, kind, i,
                      ("-o", f"dlperf_ab_threshold={args.threshold}") if args.threshold is not None else ())
            outcomes[kind].append(t)
            say(f"{kind:7s} {i:2d}  exit {t['exit']}  {t['ratio']:.4f}x {t['interval']}  {t['verdict']:12s} "
                f"{t['pairs']:2d} process pairs  {t['seconds']:.0f} s")
    for kind in kinds:
        rows = outcomes[kind]
        if not rows:
            continue
        verdicts = Counter(str(r["verdict"]) for r in rows)
        failed = sum(1 for r in rows if r["exit"] != 0)
        say(f"{kind}: {len(rows)} trials, {failed} failed the test; verdicts "
            + ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items()))
            + f"; process pairs median {statistics.median(r['pairs'] for r in rows):.0f} "
            f"(max {max(r['pairs'] for r in rows)}); seconds median {statistics.median(r['seconds'] for r in rows):.0f}"
            f" (max {max(r['seconds'] for r in rows):.0f})")


if __name__ == "__main__":
    main()
