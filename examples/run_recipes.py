"""The recipes of docs/own-training-code.md, run as their users run them (examples/recipes): a plain PyTorch loop,
a LightningModule with ``Trainer.fit``, a Hugging Face model with ``Trainer.train``, a timm model over your own
DataLoader, and a Keras model with ``model.fit``.

Each recipe is copied into a temporary git repository (the project as its user has it, one commit) and goes
through what docs/own-training-code.md tells its user to do, with this interpreter (which has the recipe's
framework, its trainer and pytest-dlperf):

1. record: ``pytest --update-baselines``, three times, writes ``baselines/<hardware-key>.json``: a tiny model's
   throughput moves by up to 40% from one process to the next on a shared 2-core CPU, and three recorded runs
   put that spread in the gate, where one run left it unknown and a judged run fell outside it;
2. judge: ``pytest`` holds the run against that baseline (a wide tolerance besides);
3. A/A: ``pytest --dlperf-reference-rev=HEAD``, nothing changed: passes;
4. slowed: the working tree made slower (``SLOWDOWN`` seconds of extra work per step, uncommitted) against
   HEAD: fails as "A/B slower".

A/A and slowed each check the design their A/B ran: a plain loop's two revisions alternating in one process, a
trainer's in process pairs.

Tiny models and few rounds, so the whole run stays within minutes on a 2-core CPU. Usage:
``python examples/run_recipes.py [RECIPE ...]``; ``KEEP=1`` keeps the temporary folder. With no recipe named it
runs the PyTorch ones (tox -e recipes); the Keras one needs TensorFlow's interpreter (tox -e recipes-tf runs
``run_recipes.py keras`` in perf-tf's). A recipe whose trainer is not installed fails (install pytorch-lightning,
transformers, accelerate and timm; tensorflow for keras), never skipped.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent / "recipes"
#: recipe -> (the module that holds SLOWDOWN, the workload name, the slowdown per step in seconds, the module the
#: recipe's framework is imported as). A loop compared in one process gets about its own step's time: half speed is
#: decided at once, and a larger slowdown only makes the slowed side's rounds longer. A trainer's loop, compared in
#: process pairs, keeps several times its step: at half speed its processes' spread needed more generations
#: (docs/evidence.md, "The second round of cuts").
RECIPES = {
    "plain": ("train_loop.py", "plain_mlp", 0.001, "torch"),
    "lightning": ("lit_model.py", "lit_mlp", 0.02, "torch"),
    "huggingface": ("hf_model.py", "hf_gpt2", 0.03, "torch"),
    "timm": ("timm_model.py", "timm_resnet", 0.025, "torch"),
    "keras": ("keras_model.py", "keras_mlp", 0.02, "tensorflow"),
}
#: recipe -> a figure its judged run must report beside throughput
FIGURE = {"timm": "data_wait"}
#: How an A/B compares each recipe's revisions: a plain loop alternates both in one process, a trainer's loop
#: runs in process pairs (docs/ab.md).
ONE_PROCESS, PROCESS_PAIRS = "alternating in one process", "a trainer's loop: compared in process pairs instead"
AB_DESIGN = {"plain": ONE_PROCESS, "timm": ONE_PROCESS, "lightning": PROCESS_PAIRS, "huggingface": PROCESS_PAIRS,
             "keras": PROCESS_PAIRS}
#: Run when no recipe is named: the ones this project's torch environment can run.
DEFAULT = [name for name, (*_, framework) in RECIPES.items() if framework == "torch"]


#: One process per side at a time and few pairs: a trainer's child takes seconds to start (importing Lightning or
#: transformers), and a slowdown of several times is decided in A/B mode's first few generations.
SMALL_AB = ("-o", "dlperf_processes=1", "-o", "dlperf_pairs=6")
#: Recorded runs before the judged one (the module's docstring says why three).
RECORDINGS = 3


class Failed(Exception):
    pass


def run(command: list[str], cwd: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False, **kwargs)  # type: ignore


def git(repo: Path, *args: str) -> None:
    done = run(["git", "-c", "user.name=dev", "-c", "user.email=dev@example.com", *args], repo)
    if done.returncode:
        raise Failed(f"git {' '.join(args)}: {done.stdout}{done.stderr}")


def slow(module: Path, seconds: float) -> None:
    text = re.sub(r"^SLOWDOWN = .*$", f"SLOWDOWN = {seconds}", module.read_text(encoding="utf-8"), flags=re.M)
    module.write_text(text, encoding="utf-8")


def pytest(project: Path, report: Path, *options: str) -> tuple[int, str, dict[str, str]]:
    """``pytest OPTIONS`` in the project as its user runs it: exit code, output, the dlperf properties."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DLPERF_")}
    environ.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TF_CPP_MIN_LOG_LEVEL="2")
    done = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}", *options],
               project, env=environ)
    properties = {}
    if report.exists():
        for prop in ET.parse(report).iter("property"):
            name = prop.get("name", "")
            if "::dlperf." in name:
                properties[name.rsplit(".", 1)[-1]] = prop.get("value", "")
    return done.returncode, done.stdout + done.stderr, properties


def check_recipe(recipe: str, work: Path) -> list[str]:
    module_name, workload, slowdown, _ = RECIPES[recipe]
    project = work / recipe
    shutil.copytree(HERE / recipe, project)
    (project / ".gitignore").write_text("__pycache__/\nhf_out/\nlightning_logs/\n", encoding="utf-8")
    git(project, "init", "-q")
    git(project, "add", ".")
    git(project, "commit", "-q", "-m", f"The {recipe} recipe")
    lines = []

    def case(name: str, want_code: int, *options: str) -> tuple[str, dict[str, str]]:
        started = time.monotonic()
        code, output, props = pytest(project, work / f"{recipe}-{name.replace('/', '')}.xml", *options)
        if code != want_code:
            raise Failed(f"{recipe} {name}: exit {code}, expected {want_code}\n{output}")
        lines.append(f"{recipe:12} {name:8} exit {code}  {props.get('ab_ratio', '-'):>6}  "
                     f"{props.get('ab_verdict', '-'):12} {time.monotonic() - started:5.1f} s")
        return output, props

    for _ in range(RECORDINGS):
        case("record", 0, "--update-baselines")
    if not list((project / "baselines").glob("*.json")):
        raise Failed(f"{recipe} record: no baselines/<hardware-key>.json written")
    output, props = case("judge", 0, "--dlperf-tolerance=0.6")
    if recipe in FIGURE and FIGURE[recipe] not in props:
        raise Failed(f"{recipe} judge: no {FIGURE[recipe]} figure in its report ({sorted(props)})")
    expect(output, f"{workload}", f"{recipe} judge")
    expect(output, "compared with baselines. 0 regressions.", f"{recipe} judge")
    output, _ = case("A/A", 0, "--dlperf-reference-rev=HEAD", *SMALL_AB, "--dlperf-max-generations=2")
    expect(output, AB_DESIGN[recipe], f"{recipe} A/A")
    slow(project / module_name, slowdown)
    output, props = case("slowed", 1, "--dlperf-reference-rev=HEAD", *SMALL_AB)
    expect(output, f"A/B slower: {workload} throughput candidate/reference 0.", f"{recipe} slowed working tree")
    return lines


def expect(text: str, wanted: str, what: str) -> None:
    if wanted not in text:
        raise Failed(f"{what}: expected {wanted!r} in:\n{text}")


def main(argv: list[str]) -> int:
    recipes = argv or DEFAULT
    unknown = sorted(set(recipes) - set(RECIPES))
    if unknown:
        print(f"unknown recipe(s) {unknown}; known: {', '.join(RECIPES)}", file=sys.stderr)
        return 2
    for recipe in recipes:
        framework = RECIPES[recipe][3]
        if importlib.util.find_spec(framework) is None:
            print(f"the {recipe} recipe needs {framework}, which {sys.executable} does not have: run it with an "
                  f"interpreter that does" + (" (tox -e recipes-tf)" if framework == "tensorflow" else ""),
                  file=sys.stderr)
            return 2
    work = Path(tempfile.mkdtemp(prefix="dlperf-recipes-"))
    results = []
    started = time.monotonic()
    try:
        for recipe in recipes:
            print(f"=== {recipe}", flush=True)
            lines = check_recipe(recipe, work)
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
    print(f"\nevery recipe: recorded, judged, A/A passed, a slowed working tree failed "
          f"({time.monotonic() - started:.0f} s)\n" + "\n".join(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
