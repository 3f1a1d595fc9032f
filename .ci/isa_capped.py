"""The ISA-capped rerun of tox's CPU perf environments: the CPU bf16 precision tests again with the
vector ISA capped below native bf16 (docs/method.md, "The ISA-capped reruns").

    python .ci/isa_capped.py --marker "not gpu and not slow" --junitxml=FILE -- [ARGS given to tox after --]

Where the cap would not lower this CPU's level (no native bf16 to cap), no pytest is started: it would
skip every test it found. The arguments given to tox after ``--`` reach this rerun as they reach the first
run (``--update-baselines`` records the capped figures too), except that pytest keeps only the last ``-m``
and ``-k``: a runner's ``-m gpu`` would replace the rerun's own and run GPU tests under CPU caps. So the
rerun's marker and keyword expressions are ANDed with the given ones (``-m gpu`` then selects nothing
here), and the given ``--junitxml`` is dropped (the rerun writes its own file, never over the first run's).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

#: oneDNN (torch and TensorFlow read ONEDNN_, MXNet's oneDNN 2 reads DNNL_) and ATen honour these.
CAPS = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "DNNL_MAX_CPU_ISA": "AVX512_CORE", "ATEN_CPU_CAPABILITY": "avx512"}
#: fp32 runs the same AVX-512 kernels with or without the cap, so only bf16 is rerun, and on ResNet-18 only:
#: an emulated bf16 runs ResNet-50 at ResNet-18's small size, so it added a model's build for no other kernel.
KEYWORDS = "cpu_precisions and amp_bf16 and resnet18"
#: pytest's "no tests were collected": the given selection left nothing for the rerun.
NO_TESTS = 5

_OPTIONS = {"-m": "markers", "-k": "keywords", "--junitxml": "junitxml", "--junit-xml": "junitxml"}


def split(given: Sequence[str]) -> tuple[dict[str, list[str]], list[str]]:
    """The given ``-m``, ``-k`` and ``--junitxml`` values (each form pytest takes: ``-m X``, ``-mX``,
    ``--junitxml X``, ``--junitxml=X``), and every other argument in order."""
    taken: dict[str, list[str]] = {"markers": [], "keywords": [], "junitxml": []}
    rest: list[str] = []
    args = iter(given)
    for arg in args:
        name, eq, value = arg.partition("=")
        if arg in _OPTIONS:
            taken[_OPTIONS[arg]].append(next(args, ""))
        elif eq and name in ("--junitxml", "--junit-xml"):
            taken["junitxml"].append(value)
        elif arg[:2] in ("-m", "-k") and len(arg) > 2:
            taken[_OPTIONS[arg[:2]]].append(arg[2:])
        else:
            rest.append(arg)
    return taken, rest


def both(own: str, given: Sequence[str]) -> str:
    return " and ".join(f"({e})" for e in (*given, own)) if given else own


def pytest_command() -> list[str]:
    """The pytest on PATH, as the first run's: tox starts this script with the environment's own python,
    which in an environment that runs in another's interpreter (tox.ini's [in_torch]) has no pytest."""
    found = shutil.which("pytest")
    return [found] if found else [sys.executable, "-m", "pytest"]


def cap_problem(caps: dict[str, str]) -> str:
    """Why ``caps`` cannot stand for another CPU here (pytest_dlperf's ``cap_problem``, asked of the
    interpreter the pytest on PATH runs in, as this one may not have the plugin), or "" where they lower this
    CPU's level, or where that interpreter cannot tell (the rerun then runs, and its tests say why they skip)."""
    found = pytest_command()[0]
    python = Path(found).with_name("python") if found != sys.executable else Path(sys.executable)
    asked = subprocess.run([str(python if python.exists() else sys.executable), "-c",
                            "import os; from pytest_dlperf.child.environment import cap_problem; "
                            "print(cap_problem(os.environ))"],
                           env={**os.environ, **caps}, capture_output=True, text=True, check=False)
    if asked.returncode:
        print(f"ISA-capped rerun: could not ask {python} whether the cap lowers this CPU's level "
              f"({asked.stderr.strip().splitlines()[-1:] or asked.returncode}); running it", flush=True)
        return ""
    return asked.stdout.strip()


def command(marker: str, junitxml: str, given: Sequence[str]) -> list[str]:
    """The rerun's pytest command line: quiet, as the tiers' first runs (tox.ini's [tier])."""
    taken, rest = split(given)
    return [*pytest_command(), "perf_tests", "-q", "-p", "no:cacheprovider", *rest,
            "-m", both(marker, taken["markers"]), "-k", both(KEYWORDS, taken["keywords"]), f"--junitxml={junitxml}"]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, given = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(prog="isa_capped.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--marker", required=True, help="the rerun's own -m expression")
    parser.add_argument("--junitxml", required=True, help="the rerun's own report")
    args = parser.parse_args(own)
    problem = cap_problem(CAPS)
    if problem:
        print(f"ISA-capped rerun not run: {problem}", flush=True)
        return 0
    cmd = command(args.marker, args.junitxml, given)
    print("ISA-capped rerun:", " ".join(f"{k}={v}" for k, v in CAPS.items()), *cmd, flush=True)
    code = subprocess.call(cmd, env={**os.environ, **CAPS})
    if code == NO_TESTS:
        print("ISA-capped rerun: the given selection leaves no CPU bf16 test to rerun")
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
