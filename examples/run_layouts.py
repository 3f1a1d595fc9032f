"""A/B of a revision in the project layouts users have (tox -e layouts): the example project in examples/layouts,
laid out five ways in a temporary folder, each a git repository whose first commit is 30% slower than its second.

Layouts: ``flat`` (the package beside its tests, not installed), ``src-editable`` (``src/``, ``pip install -e .``),
``src-installed`` (``src/``, ``pip install .``: an installed copy both sides must set aside), ``monorepo`` (the
project a subfolder of a larger repository, installed editable) and ``venv-inside`` (``.venv/`` inside the project,
installed editable there). Each runs, as its user would, ``pytest tests --dlperf-reference-rev=...``:

1. A/A: the working tree against HEAD, nothing changed: passes, and each side's code came from its own tree;
2. HEAD~1, 30% slower: an improvement, passes (in ``src-editable`` only);
3. the working tree made 30% slower (uncommitted): fails as a regression;
4. ``myproj.kernels`` loaded by file path from a copy outside both trees: the test errors, naming the module,
   and gives no verdict.

Every layout's environment shares this interpreter's torch and pytest-dlperf through a ``.pth`` file (one 5 GB
torch for all), and has ``layout_dep``, a small third-party package, installed in it: the step checks that it
stays loaded while the sides swap. The A/A run is capped at three processes (it passes, decided or not); the
changed revisions take fresh processes until decided, as a user's run does. Usage:
``python examples/run_layouts.py [LAYOUT ...]``; ``KEEP=1`` keeps the temporary folder.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent / "layouts"
LAYOUTS = ("flat", "src-editable", "src-installed", "monorepo", "venv-inside")
#: The one layout that also runs the improvement case: the regression case fails in every layout unless each
#: side runs its own tree's files; an older commit as the reference changes only which commit the worktree
#: checks out, alike in every layout, and each case costs a comparison of fresh processes.
IMPROVEMENT_LAYOUT = "src-editable"
PYPROJECT_PACKAGE = """[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "myproj"
version = "0.1.0"
dependencies = ["torch"]

[tool.pytest.ini_options]
addopts = "-ra"
"""
PYPROJECT_FLAT = """[tool.pytest.ini_options]
addopts = "-ra"
"""


class Failed(Exception):
    pass


def run(command: list[str], cwd: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False, **kwargs)  # type: ignore


def must(command: list[str], cwd: Path) -> None:
    done = run(command, cwd)
    if done.returncode:
        raise Failed(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}")


def git(repo: Path, *args: str) -> None:
    must(["git", "-c", "user.name=dev", "-c", "user.email=dev@example.com", *args], repo)


def venv(path: Path) -> Path:
    """A venv that sees this interpreter's packages (torch, pytest, pytest-dlperf) through a .pth file."""
    must([sys.executable, "-m", "venv", "--without-pip", str(path)], path.parent)
    python = path / "bin" / "python"
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], path).stdout.strip()
    Path(site, "shared-torch.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    return python


def pip_install(python: Path, *args: str) -> None:
    """``pip install --no-deps ARGS`` into ``python``'s venv, building with the setuptools it sees where that
    can build a wheel, else in pip's isolated build environment (which fetches setuptools)."""
    command = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", *args]
    if run([*command, "--no-build-isolation"], python.parent).returncode:
        must(command, python.parent)


def lay_out(layout: str, work: Path) -> tuple[Path, Path, Path]:
    """The repository, the project folder inside it and the interpreter of ``layout``."""
    repo = work / layout
    project = repo / "services" / "trainer" if layout == "monorepo" else repo
    package_root = project if layout == "flat" else project / "src"
    package_root.mkdir(parents=True)
    shutil.copytree(HERE / "myproj", package_root / "myproj")
    shutil.copytree(HERE / "tests", project / "tests")
    (project / "pyproject.toml").write_text(PYPROJECT_FLAT if layout == "flat" else PYPROJECT_PACKAGE,
                                            encoding="utf-8")
    (repo / ".gitignore").write_text(".venv/\n__pycache__/\n*.egg-info/\nbuild/\n", encoding="utf-8")
    if layout == "monorepo":
        (repo / "README.md").write_text("The monorepo: services/trainer is the training code.\n", encoding="utf-8")
    python = venv(project / ".venv" if layout == "venv-inside" else work / f"venv-{layout}")
    pip_install(python, str(HERE / "layout_dep"))
    return repo, project, python


def commit_history(repo: Path, project: Path) -> None:
    """Commit 1 is 30% slower than commit 2, the working tree's HEAD."""
    train = next(project.rglob("myproj/train.py"))
    git(repo, "init", "-q")
    slow(train, 0.3)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "Add the training step")
    slow(train, 0.0)
    git(repo, "commit", "-q", "-am", "Make the step 30% faster")


def slow(train: Path, fraction: float) -> None:
    text = re.sub(r"^SLOWDOWN = .*$", f"SLOWDOWN = {fraction}", train.read_text(encoding="utf-8"), flags=re.M)
    train.write_text(text, encoding="utf-8")


def ab(python: Path, project: Path, rev: str, report: Path, env: dict[str, str] | None = None,
       *options: str) -> tuple[int, str, dict[str, str]]:
    """``pytest tests --dlperf-reference-rev=REV`` as the user runs it: exit code, output, A/B properties."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("DLPERF_", "PYTHON"))}
    environ.update(OMP_NUM_THREADS="1", **(env or {}))
    done = run([str(python), "-m", "pytest", "tests", "-p", "no:cacheprovider", f"--dlperf-reference-rev={rev}",
                f"--junitxml={report}", *options], project, env=environ)
    properties = {}
    if report.exists():
        for prop in ET.parse(report).iter("property"):
            name = prop.get("name", "")
            if "::dlperf." in name:
                properties[name.rsplit(".", 1)[-1]] = prop.get("value", "")
    return done.returncode, done.stdout + done.stderr, properties


def check_layout(layout: str, work: Path) -> list[str]:
    repo, project, python = lay_out(layout, work)
    commit_history(repo, project)
    where = os.path.relpath(next(project.rglob("myproj/__init__.py")).parent, repo)
    lines = []

    def case(name: str, rev: str, want_code: int, env: dict[str, str] | None = None,
             *options: str) -> tuple[str, dict[str, str]]:
        started = time.monotonic()
        code, output, props = ab(python, project, rev, work / f"{layout}-{name.replace('/', '')}.xml", env, *options)
        if code != want_code:
            raise Failed(f"{layout} {name}: exit {code}, expected {want_code}\n{output}")
        lines.append(f"{layout:14} {name:12} exit {code}  {props.get('ab_ratio', '-'):>6}  "
                     f"{props.get('ab_verdict', 'no verdict'):12} {time.monotonic() - started:5.1f} s")
        return output, props

    _, props = case("A/A", "HEAD", 0, None, "--dlperf-max-generations=1")  # passes decided or not: 3 processes
    expect(props.get("candidate_code", ""), f"myproj from {where} (the working tree at", f"{layout} A/A candidate")
    expect(props.get("reference_code", ""), f"myproj from {where} (the worktree of", f"{layout} A/A reference")
    if layout == IMPROVEMENT_LAYOUT:
        _, props = case("improvement", "HEAD~1", 0)
        expect(props.get("ab_verdict", ""), "improvement", f"{layout} HEAD~1 30% slower")
    slow(next(project.rglob("myproj/train.py")), 0.3)
    output, props = case("regression", "HEAD", 1)
    expect(output, "A/B slower: myproj_mlp throughput candidate/reference 0.", f"{layout} 30% slower working tree")
    slow(next(project.rglob("myproj/train.py")), 0.0)
    stale = work / f"{layout}-stale-copy" / "kernels.py"
    stale.parent.mkdir()
    shutil.copy(HERE / "myproj" / "kernels.py", stale)
    output, props = case("outside", "HEAD", 1, {"MYPROJ_KERNELS_FROM": str(stale)}, "--dlperf-max-generations=1")
    expect(output, f"imported the project's module myproj.kernels from {stale}", f"{layout} kernels from outside")
    expect(output, "error in pytest-dlperf", f"{layout} kernels from outside")
    if "ab_verdict" in props:
        raise Failed(f"{layout} kernels from outside: a verdict ({props['ab_verdict']}) was given")
    worktrees = run(["git", "worktree", "list"], repo).stdout.strip().splitlines()
    if len(worktrees) != 1:
        raise Failed(f"{layout}: the reference revision's worktree was left behind: {worktrees}")
    return lines


def expect(text: str, wanted: str, what: str) -> None:
    if wanted not in text:
        raise Failed(f"{what}: expected {wanted!r} in:\n{text}")


def main(argv: list[str]) -> int:
    layouts = argv or list(LAYOUTS)
    unknown = sorted(set(layouts) - set(LAYOUTS))
    if unknown:
        print(f"unknown layout(s) {unknown}; known: {', '.join(LAYOUTS)}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="dlperf-layouts-"))
    results = []
    try:
        for layout in layouts:
            print(f"=== {layout}", flush=True)
            lines = check_layout(layout, work)
            print("\n".join(lines), flush=True)
            results += lines
    except Failed as exc:
        print(f"\nFAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if os.environ.get("KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")
    print(f"\nevery layout: A/A passed, a 30% slower working tree failed, a module from outside both trees gave "
          f"no verdict; in {IMPROVEMENT_LAYOUT}, HEAD~1 30% slower read an improvement\n" + "\n".join(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
