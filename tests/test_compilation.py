"""Compiled scenarios: their settings, the compile figures measure() records, and a graph break failing a test.

The graph-break test is end to end: a real ``torch.compile`` of a tiny model, in pytester
children, first recorded as the baseline (no graph break), then with a
``torch._dynamo.graph_break()`` injected into its forward: the test must fail and name it.
"""

from __future__ import annotations

import importlib.util
import shutil
import time

import pytest

from pytest_dlperf.judging.baselines import Baseline
from pytest_dlperf.child.measure import measure
from pytest_dlperf.result import LOWER, metric_from
from pytest_dlperf.scenario import Scenario, ScenarioError
from pytest_dlperf.judging.verdict import IMPROVEMENT, OK, REGRESSION, compare, failure_message


def scenario(**changes) -> Scenario:
    settings = dict(framework="torch", model="resnet18", warmup_steps=3, rounds=3, steps_per_round=2)
    settings.update(changes)
    return Scenario(**settings)


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize("compile_, cuda_graphs, mode", [
    ("off", False, None),
    ("default", False, "default"),
    ("default", True, "reduce-overhead"),
    ("max-autotune", False, "max-autotune-no-cudagraphs"),
    ("max-autotune", True, "max-autotune"),
])
def test_compile_and_cuda_graphs_map_to_torch_compiles_modes(compile_, cuda_graphs, mode):
    s = scenario(compile=compile_, cuda_graphs=cuda_graphs, device="cuda" if cuda_graphs else "cpu")
    assert s.torch_compile_mode == mode
    assert s.compiled == (compile_ != "off")
    assert s == Scenario.from_dict(s.to_dict())  # crosses the process boundary unchanged


@pytest.mark.parametrize("changes, words", [
    (dict(compile="fast"), ["compile='fast'", "off, default, max-autotune"]),
    (dict(framework="tensorflow", compile="default"), ["torch.compile", "jit_compile=True"]),
    (dict(framework="mxnet", compile="default"), ["torch.compile", "hybridize=True"]),
    (dict(compile="default", cuda_graphs=True), ["device='cuda'"]),
    (dict(cuda_graphs=True, device="cuda"), ["compile='default' or 'max-autotune'"]),
    (dict(hybridize=True), ["MXNet's compiler switch", "compile='default'"]),
    (dict(framework="mxnet", hybridize="yes"), ["True, False or None"]),
    (dict(jit_compile=True), ["TensorFlow's XLA switch", "compile='default'"]),
    (dict(compile="default", warmup_steps=0), ["warmup_steps >= 1"]),
])
def test_a_compiler_setting_of_another_framework_is_refused_with_its_equivalent(changes, words):
    with pytest.raises(ScenarioError) as err:
        scenario(**changes)
    for word in words:
        assert word in str(err.value)


def test_describe_names_the_compiler():
    assert "torch.compile(reduce-overhead)" in scenario(compile="default", cuda_graphs=True, device="cuda").describe()
    assert " XLA " in scenario(framework="tensorflow", jit_compile=True).describe()
    assert " imperative " in scenario(framework="mxnet", hybridize=False).describe()
    assert "hybridized" not in scenario(framework="mxnet").describe()  # the default records no compile figures


# --------------------------------------------------------------------------- measure()


class CompilingLoop:
    """A loop whose first step 'compiles' (sleeps ``compile_s``) and whose second recompiles once."""

    samples_per_step = 4
    synchronous = True
    compiles = True

    def __init__(self, compile_s: float, step_s: float, cache: str = "cold", events: dict | None = None):
        self.compile_s, self.step_s, self.cache, self.steps = compile_s, step_s, cache, 0
        self.events = events if events is not None else {"graph_breaks": [], "recompilations": ["x: size 4 -> 5"]}
        self.compile_setup_seconds = 0.05

    def step(self) -> float:
        self.steps += 1
        time.sleep(self.compile_s if self.steps == 1 else self.compile_s / 2 if self.steps == 2 else self.step_s)
        return 1.0 / self.steps

    def sync(self) -> None:
        pass

    def losses_to_floats(self, handles):
        return list(handles)

    def compile_cache(self) -> str:
        return self.cache

    def compile_events(self) -> dict:
        return self.events


@pytest.mark.serial  # sleeps timed to within 50 ms
def test_measure_times_the_first_step_and_the_warmups_excess_over_steady_state():
    s = scenario(warmup_steps=3, rounds=3, steps_per_round=2)
    metrics, _, details = measure(CompilingLoop(compile_s=0.3, step_s=0.01), s)
    first, total = metrics["compile_time"].value, metrics["compile_time_total"].value
    assert 0.34 <= first < 0.5  # the 0.3 s first step plus 0.05 s of tracing before it
    # the second step's 0.15 s recompile counts too; the third step is steady state (~0.01 s), not compile time
    assert 0.47 <= total < 0.7  # 0.3 + 0.15 + 0.01 - 3 x 0.01 steady, + 0.05 tracing
    assert metrics["compile_time"].direction == LOWER
    assert metrics["recompilations"].value == 1 and metrics["graph_breaks"].value == 0
    assert details["recompilations_reasons"] == ["x: size 4 -> 5"]
    assert details["compile"]["cache"] == "cold"
    assert max(metrics["step_time"].samples) < 0.1  # the compile stayed out of the timed rounds


def test_a_warm_cache_compile_is_named_so_and_never_compared_with_a_cold_one():
    s = scenario(warmup_steps=2, rounds=2, steps_per_round=2)
    metrics, _, details = measure(CompilingLoop(0.05, 0.005, cache="warm"), s)
    assert "compile_time" not in metrics and "compile_time_total" not in metrics
    assert metrics["compile_time_warm_cache"].value >= 0.05
    assert details["compile"]["cache"] == "warm"


def test_an_eager_loop_records_no_compile_figures():
    loop = CompilingLoop(0.0, 0.001)
    loop.compiles = False
    metrics, _, details = measure(loop, scenario(warmup_steps=1, rounds=2, steps_per_round=2))
    assert not any(name.startswith("compile") or name in ("graph_breaks", "recompilations") for name in metrics)
    assert "compile" not in details


# --------------------------------------------------------------------------- verdicts on counts


def _count_baseline(value: float) -> Baseline:
    return Baseline(value=value, unit="count", direction=LOWER, samples=(value,), iqr=0.0, software={}, recorded="")


def test_a_graph_break_where_the_baseline_had_none_is_a_regression_with_its_reason():
    observed = metric_from("graph_breaks", [1.0], "count", LOWER)
    verdict = compare("t", "compiled", observed, _count_baseline(0.0), tolerance=0.5,
                      reasons=["Call to `torch._dynamo.graph_break()`"])
    assert verdict.status == REGRESSION
    message = failure_message("t", [verdict])
    assert message.splitlines()[0] == (
        "regression: compiled graph_breaks 1 vs baseline 0: Call to `torch._dynamo.graph_break()`")


def test_counts_are_exact_whatever_the_tolerance():
    same = compare("t", "c", metric_from("recompilations", [2.0], "count", LOWER), _count_baseline(2.0), 0.9)
    fewer = compare("t", "c", metric_from("recompilations", [0.0], "count", LOWER), _count_baseline(2.0), 0.01)
    assert (same.status, fewer.status) == (OK, IMPROVEMENT)


# --------------------------------------------------------------------------- end to end: an injected graph break


GRAPH_BREAK_TEST = """
import os

import torch

from pytest_dlperf.child.cores.torch_core import TorchTrainingLoop
from pytest_dlperf.child.measure import measure
from pytest_dlperf.result import TrainingResult


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3 * 8 * 8, 16)
        self.b = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.a(x.flatten(1)))
        if os.environ.get("INJECT_GRAPH_BREAK") == "1":
            torch._dynamo.graph_break()
        return self.b(x)


def test_compiled_tiny_model(dlperf):
    s = dlperf.scenario("torch", "tiny", compile="default", batch_size=4, image_size=8, num_classes=10,
                        warmup_steps=2, rounds=2, steps_per_round=2, label="compiled")
    loop = TorchTrainingLoop(s, model=Tiny())
    metrics, losses, details = measure(loop, s)
    env = {"hardware_key": "selftest-cpu", "framework": "torch", "framework_version": torch.__version__}
    dlperf.check(TrainingResult(s, metrics, losses, env, details))
"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="torch.compile's CPU backend (inductor) needs a C++ compiler: apt-get install g++")
def test_a_graph_break_injected_into_a_compiled_model_fails_the_test_with_its_reason(pytester, monkeypatch):
    # torch is only imported in the pytester children: importing it here, inside pytester's sys.modules
    # snapshot, would unload numpy afterwards and break every later test that imports it
    pytester.makepyfile(test_graph_break=GRAPH_BREAK_TEST)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(pytester.path / "inductor"))
    monkeypatch.setenv("INJECT_GRAPH_BREAK", "0")
    recorded = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--update-baselines")
    recorded.assert_outcomes(passed=1)
    stored = (pytester.path / "baselines" / "selftest-cpu.json").read_text()
    assert '"graph_breaks"' in stored and '"recompilations"' in stored and '"compile_time"' in stored

    monkeypatch.setenv("INJECT_GRAPH_BREAK", "1")
    broken = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    broken.assert_outcomes(failed=1)
    broken.stdout.fnmatch_lines(["*regression: compiled graph_breaks 1 vs baseline 0: Call to "
                                 "`torch._dynamo.graph_break()`*"])
