"""Your own training step under test: ``dlperf.scenario(framework, name, step="module:make_step")`` (pytester).

Each test writes a small project: the step module and its test in a subfolder ``proj/``, so the child
(``python -m pytest_dlperf.child.train``, started in pytester's folder) can only import the module through
the import path the fixture passes it, not through its working directory.
"""

from __future__ import annotations

import sys

import pytest

from pytest_dlperf.reports.junit import read_reports
from pytest_dlperf.profiles import scenario_for
from pytest_dlperf.scenario import Scenario, ScenarioError

TORCH = pytest.mark.framework("torch")

#: A tiny MLP classifier; ``samples_per_step``/``unit`` say one step processes 3 "rows" per sample.
STEP_MODULE = """
import torch

def make_step(scenario):
    torch.manual_seed(scenario.seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    x = torch.randn(scenario.batch_size, 16)
    y = (x[:, :2].sum(dim=1) > 0).long() + 2 * (x[:, 2] > 0).long()

    def step():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    step.samples_per_step = 3 * scenario.batch_size
    step.unit = "rows"
    return step
"""

STEP_TEST = """
def test_mine(dlperf):
    s = dlperf.scenario("torch", "tiny_mlp", step="tiny_model:make_step", batch_size=4,
                        warmup_steps=2, rounds=3, steps_per_round=5)
    run = dlperf.run(s)
    dlperf.check(run)
    assert run.loss_fell()
    seconds = run.details["round_seconds"]
    assert run.throughput.samples == __import__("pytest").approx([5 * 12 / t for t in seconds], rel=1e-9)
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def project(pytester: pytest.Pytester, test: str, **modules: str) -> None:
    folder = pytester.mkpydir("proj")
    (folder / "__init__.py").unlink()  # a rootdir-less folder of test files, as most projects have
    (folder / "test_mine.py").write_text(test)
    for name, text in modules.items():
        (folder / f"{name}.py").write_text(text)


@TORCH
def test_step_beside_the_test_is_trained_and_its_figures_reach_junit(pytester: pytest.Pytester) -> None:
    project(pytester, STEP_TEST, tiny_model=STEP_MODULE)
    result = run(pytester, "proj", "--junitxml=report.xml")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*tiny_mlp*training torch/tiny_mlp (step tiny_model:make_step) fp32 on cpu*",
                                 "*missing*"])
    (test,) = read_reports([pytester.path / "report.xml"])
    assert test.test == "proj/test_mine.py::test_mine" and test.outcome == "passed"
    figures = {m.metric: m for m in test.metrics if m.label == "tiny_mlp"}
    assert figures["throughput"].unit == "rows/s" and figures["throughput"].value > 0
    assert len(figures["throughput"].samples) == 3
    assert figures["throughput"].verdict == "missing"
    assert figures["peak_host_memory"].value > 0
    assert "torch/tiny_mlp (step tiny_model:make_step)" in test.scenarios["tiny_mlp"]


@pytest.mark.slow
@TORCH
def test_step_baselines_round_trip_under_the_workload_name(pytester: pytest.Pytester) -> None:
    project(pytester, STEP_TEST, tiny_model=STEP_MODULE)
    run(pytester, "proj", "--update-baselines").assert_outcomes(passed=1)
    stored = (pytester.path / "baselines").glob("*.json")
    text = "".join(p.read_text() for p in stored)
    assert "proj/test_mine.py::test_mine::tiny_mlp@smoke" in text
    result = run(pytester, "proj", "--dlperf-tolerance=0.9")
    result.assert_outcomes(passed=1)
    # compared with the recorded figures (one run: its noise is unknown, so the verdict is no change or
    # inconclusive, never a failure)
    result.stdout.fnmatch_lines(["test_mine.py::test_mine::tiny_mlp  throughput * rows/s * rows/s *",
                                 "2 metrics compared with baselines. 0 regressions. * 0 missing baselines."])


FAILING_TESTS = """
import pytest

def test_step_raises(dlperf):
    dlperf.run(dlperf.scenario("torch", "broken", step="broken_model:make_step", rounds=1, steps_per_round=2))

def test_make_step_raises(dlperf):
    dlperf.run(dlperf.scenario("torch", "unbuilt", step="broken_model:make_nothing", rounds=1, steps_per_round=2))

def test_module_missing(dlperf):
    dlperf.run(dlperf.scenario("torch", "absent", step="no_such_model:make_step", rounds=1, steps_per_round=2))

def test_wrong_return(dlperf):
    dlperf.run(dlperf.scenario("torch", "vector", step="broken_model:make_vector_step", rounds=1,
                               steps_per_round=2))

def test_nan_loss(dlperf):
    dlperf.run(dlperf.scenario("torch", "diverges", step="broken_model:make_nan_step", rounds=1, steps_per_round=2))

def test_hangs(dlperf):
    dlperf.run(dlperf.scenario("torch", "stuck", step="broken_model:make_stuck_step", rounds=1, steps_per_round=2,
                               timeout=15))

def test_after(dlperf):
    run = dlperf.run(dlperf.scenario("torch", "tiny_mlp", step="tiny_model:make_step", rounds=1, steps_per_round=2))
    assert len(run.losses) == run.scenario.total_steps
"""

BROKEN_MODULE = """
import torch

def check_shapes(x):
    if x.shape[1] != 7:
        raise ValueError(f"my_layer wants 7 features, got {x.shape[1]}")

def make_step(scenario):
    x = torch.randn(scenario.batch_size, 5)
    calls = []

    def step():
        calls.append(1)
        if len(calls) == 3:  # fails in the third step, inside the warm-up
            check_shapes(x)
        return x.sum()
    return step

def make_nothing(scenario):
    return {"not": "a step"}[scenario.model]

def make_vector_step(scenario):
    return lambda: torch.ones(3)

def make_nan_step(scenario):
    return lambda: float("nan")

def make_stuck_step(scenario):
    import time
    return lambda: time.sleep(600)
"""


@pytest.mark.slow
@TORCH
def test_errors_in_your_code_fail_that_test_with_your_traceback(pytester: pytest.Pytester) -> None:
    project(pytester, FAILING_TESTS, broken_model=BROKEN_MODULE, tiny_model=STEP_MODULE)
    result = run(pytester, "proj")
    result.assert_outcomes(failed=6, passed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "*scenario 'broken' failed: error in your code: UserCodeError: step broken_model:make_step raised "
        "ValueError: my_layer wants 7 features, got 5",
        "--- your code's traceback ---",
        "Traceback (most recent call last):",
        '  File "*proj/broken_model.py", line *, in step',
        "    check_shapes(x)",
        '  File "*proj/broken_model.py", line *, in check_shapes',
        "ValueError: my_layer wants 7 features, got 5",
        "--- last output of the child ---",
    ])
    result.stdout.fnmatch_lines([
        "*scenario 'unbuilt' failed: error in your code: UserCodeError: broken_model:make_nothing(scenario) "
        "raised KeyError: 'unbuilt'*",
        "--- your code's traceback ---",
        "Traceback (most recent call last):",
        '  File "*proj/broken_model.py", line *, in make_nothing',
    ])
    result.stdout.fnmatch_lines([
        "*scenario 'absent' failed: error in your code: UserCodeError: step='no_such_model:make_step': no module "
        "named 'no_such_model'; looked in the test's folders (*proj, *) and the installed packages. Put "
        "no_such_model.py beside the test file*",
    ])
    result.stdout.fnmatch_lines(["*scenario 'vector' failed: error in your code: UserCodeError: step "
                                 "broken_model:make_vector_step returned a tensor of shape (3,); return the loss*"])
    result.stdout.fnmatch_lines(["*scenario 'diverges' failed: non-finite loss: NonFiniteLoss: loss became nan at "
                                 "step 0, no loss scaling*"])
    result.stdout.fnmatch_lines(["*scenario 'stuck' failed: timed out: no result after 15 s; the child was killed*"])
    # the user's traceback holds the user's frames only, not the plugin's (counted in the failure reports:
    # with CI set, pytest repeats each whole message in the short summary)
    failures = out.split("short test summary info")[0]
    yours = [block.split("--- last output of the child ---")[0]
             for block in failures.split("--- your code's traceback ---")[1:]]
    assert len(yours) == 3 and not any("pytest_dlperf" in block for block in yours), yours


@pytest.mark.parametrize("step, message", [
    ("tiny_model.make_step", "*bad scenario: step='tiny_model.make_step' is not 'package.module:function'; "
                             "e.g. step='my_model:make_step' for the function make_step in my_model.py beside the "
                             "test file*"),
    ("tiny_model:", "*bad scenario: step='tiny_model:' is not 'package.module:function'*"),
    ("make_step", "*bad scenario: step='make_step' is not 'package.module:function'*"),
])
def test_a_bad_step_string_names_the_fix(pytester: pytest.Pytester, step: str, message: str) -> None:
    project(pytester, f"""
def test_bad(dlperf):
    dlperf.scenario("torch", "mine", step={step!r})

def test_after():
    pass
""")
    result = run(pytester, "proj")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([message])
    assert "Traceback" not in result.stdout.str()


def test_a_lambda_as_step_says_to_define_a_module_level_function(pytester: pytest.Pytester) -> None:
    project(pytester, """
def test_bad(dlperf):
    dlperf.scenario("torch", "mine", step=lambda scenario: (lambda: 0.0))
""")
    result = run(pytester, "proj")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*bad scenario: step=<function test_bad.<locals>.<lambda>*> is a lambda: the "
                                 "training runs in a child process, which imports the function by name; define it "
                                 "at the top level of a module and pass it (or its name, e.g. "
                                 "step='my_model:make_step')*"])


@TORCH
def test_a_module_level_function_object_as_step_is_run_by_its_name(pytester: pytest.Pytester) -> None:
    project(pytester, """
from tiny_model import make_step

def test_mine(dlperf):
    s = dlperf.scenario("torch", "tiny_mlp", step=make_step, batch_size=4, warmup_steps=1, rounds=1,
                        steps_per_round=2)
    assert s.step == "tiny_model:make_step"
    run = dlperf.run(s)
    assert len(run.losses) == 3
""", tiny_model=STEP_MODULE)
    run(pytester, "proj").assert_outcomes(passed=1)


@pytest.mark.slow
@TORCH
def test_your_step_in_a_b_mode_runs_under_both_interpreters(pytester: pytest.Pytester) -> None:
    """Paired children (``--paced``) import your step too, the reference interpreter's included."""
    project(pytester, STEP_TEST.replace("dlperf.check(run)\n", "dlperf.check(run)\n    return\n"),
            tiny_model=STEP_MODULE)
    result = run(pytester, "proj", "-o", "dlperf_pairs=4", "-o", "dlperf_processes=1",
                 f"--dlperf-reference={sys.executable}", "-o", "dlperf_ab_threshold=0.9", "--junitxml=report.xml")
    result.assert_outcomes(passed=1)
    (test,) = read_reports([pytester.path / "report.xml"])
    assert "tiny_mlp" in test.ab and float(test.ab["tiny_mlp"]["ab_ratio"]) > 0
    assert test.ab["tiny_mlp"]["ab_verdict"] in ("ok", "improvement", "regression", "inconclusive")


@TORCH
def test_your_model_in_the_cores_loop(pytester: pytest.Pytester) -> None:
    """``model_factory=``: your nn.Module, trained by the core's own SGD + cross-entropy on its synthetic images."""
    project(pytester, """
def test_mine(dlperf):
    s = dlperf.scenario("torch", "small_cnn", model_factory="small_cnn:make_model", image_size=16, num_classes=4,
                        batch_size=8, warmup_steps=2, rounds=3, steps_per_round=4, lr=0.05)
    run = dlperf.run(s)
    dlperf.check(run)
    assert run.label == "small_cnn" and "achieved_tflops" in run.metrics
    assert run.loss_fell(), run.losses
""", small_cnn="""
import torch

def make_model(scenario):
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(8, scenario.num_classes))
""")
    result = run(pytester, "proj")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*training torch/small_cnn (model small_cnn:make_model) fp32 on cpu, batch 8, 16px*"])


TF_STEP_MODULE = """
import tensorflow as tf

def make_step(scenario):
    tf.random.set_seed(scenario.seed)
    model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(4)])
    optimizer = tf.keras.optimizers.SGD(0.2)
    x = tf.random.normal((scenario.batch_size, 16))
    y = tf.cast(x[:, 0] > 0, tf.int32) + 2 * tf.cast(x[:, 1] > 0, tf.int32)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function(jit_compile=scenario.jit_compile)
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    step.samples_per_step = 2 * scenario.batch_size  # a tf.function takes attributes like any function
    return step

def make_bad_step(scenario):
    def step():
        return tf.constant([1.0, 2.0])
    return step
"""


@pytest.mark.framework("tensorflow")
def test_a_tf_function_step_is_trained_and_checked(pytester: pytest.Pytester) -> None:
    project(pytester, """
def test_mine(dlperf):
    run = dlperf.run(dlperf.scenario("tensorflow", "tf_mlp", step="tf_model:make_step", batch_size=8,
                                     warmup_steps=2, rounds=3, steps_per_round=5))
    dlperf.check(run)
    assert run.loss_fell(), run.losses
    assert run.throughput.samples == __import__("pytest").approx([5 * 16 / t for t in run.details["round_seconds"]])

def test_vector_loss(dlperf):
    dlperf.run(dlperf.scenario("tensorflow", "tf_bad", step="tf_model:make_bad_step", rounds=1, steps_per_round=1))
""", tf_model=TF_STEP_MODULE)
    result = run(pytester, "proj", "--junitxml=report.xml")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*scenario 'tf_bad' failed: error in your code: UserCodeError: step "
                                 "tf_model:make_bad_step returned a tensor of shape (2,); return the loss*"])
    test = next(t for t in read_reports([pytester.path / "report.xml"]) if t.test.endswith("test_mine"))
    assert {m.metric for m in test.metrics if m.label == "tf_mlp"} >= {"throughput", "peak_host_memory"}
    assert "tensorflow/tf_mlp (step tf_model:make_step)" in test.scenarios["tf_mlp"]


MXNET_STEP_MODULE = """
import mxnet as mx
from mxnet import autograd, gluon

def make_step(scenario):
    mx.random.seed(scenario.seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(32, activation="relu"), gluon.nn.Dense(4))
    net.initialize(mx.init.Xavier())
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.2})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x = mx.nd.random.normal(shape=(scenario.batch_size, 16))
    y = (x[:, 0] > 0) + 2 * (x[:, 1] > 0)

    def step():
        with autograd.record():
            loss = loss_fn(net(x), y).mean()
        loss.backward()
        trainer.step(1)
        return loss

    return step

def make_bad_step(scenario):
    return lambda: mx.nd.ones((2,))
"""


@pytest.mark.framework("mxnet")
def test_an_mxnet_gluon_step_is_trained_and_checked(pytester: pytest.Pytester) -> None:
    project(pytester, """
def test_mine(dlperf):
    run = dlperf.run(dlperf.scenario("mxnet", "mx_mlp", step="mx_model:make_step", batch_size=8,
                                     warmup_steps=2, rounds=3, steps_per_round=5))
    dlperf.check(run)
    assert run.loss_fell(), run.losses
    assert run.throughput.samples == __import__("pytest").approx([5 * 8 / t for t in run.details["round_seconds"]])

def test_vector_loss(dlperf):
    dlperf.run(dlperf.scenario("mxnet", "mx_bad", step="mx_model:make_bad_step", rounds=1, steps_per_round=1))
""", mx_model=MXNET_STEP_MODULE)
    result = run(pytester, "proj", "--junitxml=report.xml")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*scenario 'mx_bad' failed: error in your code: UserCodeError: step "
                                 "mx_model:make_bad_step returned a tensor of shape (2,); return the loss*"])
    test = next(t for t in read_reports([pytester.path / "report.xml"]) if t.test.endswith("test_mine"))
    assert {m.metric for m in test.metrics if m.label == "mx_mlp"} >= {"throughput", "peak_host_memory"}


def test_a_step_scenario_is_named_by_its_workload_and_crosses_as_json() -> None:
    s = scenario_for("smoke", "torch", "my_lm", step="pkg.models:make_step", import_path=("/a", "/b"),
                     model_config={"hidden": 64})
    assert s.label == "my_lm" and s.user_code
    assert Scenario.from_dict(__import__("json").loads(s.to_json())) == s
    # two precisions of one step get two names, so a paired group can hold both
    assert s.replace(precision="amp_bf16").label == "my_lm-amp_bf16"
    assert s.replace(precision="amp_bf16", label="fast").label == "fast"


@pytest.mark.parametrize("settings, message", [
    (dict(step="m:f", model_factory="m:g"), "either step= *or model_factory="),
    (dict(model="my lm", step="m:f"), "the workload name 'my lm' keys the baselines"),
    (dict(model="a@b", step="m:f"), "the workload name 'a@b' keys the baselines"),
    (dict(step="m:f", data="jpeg", data_dir="/d"), "with step= your step reads its own data"),
    (dict(step="m:f", model_config={"x": object()}), "model_config must hold JSON values"),
    (dict(model_factory="m:g", framework="tensorflow"), "model_factory= is supported for torch"),
])
def test_user_code_settings_are_checked_with_the_fix(settings: dict, message: str) -> None:
    fields = {"framework": "torch", "model": "mine", **settings}
    with pytest.raises(ScenarioError, match=message.replace("*", ".*").replace("(", r"\(")):
        Scenario(**fields)


def test_gpt_sizes_are_checked() -> None:
    assert scenario_for("smoke", "torch", "gpt", model_config={"layers": 1}).model_config["layers"] == 1
    with pytest.raises(ScenarioError, match="width=100 must be divisible by heads=3"):
        scenario_for("smoke", "torch", "gpt", model_config={"width": 100, "heads": 3})
    with pytest.raises(ScenarioError, match=r"unknown \['depth'\]"):
        scenario_for("smoke", "torch", "gpt", model_config={"depth": 3})


@TORCH
def test_a_step_in_a_src_layout_is_found_through_pytests_pythonpath(pytester: pytest.Pytester) -> None:
    """A project whose code sits under src/ (not installed) names it in pytest's ``pythonpath`` ini key."""
    pytester.makeini("[pytest]\npythonpath = src\n")
    (pytester.path / "src" / "mypkg").mkdir(parents=True)
    (pytester.path / "src" / "mypkg" / "__init__.py").write_text("")
    (pytester.path / "src" / "mypkg" / "training.py").write_text(STEP_MODULE)
    project(pytester, STEP_TEST.replace("tiny_model:make_step", "mypkg.training:make_step"))
    result = run(pytester, "proj")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*training torch/tiny_mlp (step mypkg.training:make_step)*"])


def test_the_worker_picks_the_core_that_runs_the_scenario() -> None:
    from pytest_dlperf.child.train import core_module

    assert core_module(scenario_for("smoke", "torch", "gpt")) == "pytest_dlperf.child.cores.torch_gpt"
    assert core_module(scenario_for("smoke", "torch", "gpt", step="m:f")) == "pytest_dlperf.child.cores.torch_step"
    assert (core_module(scenario_for("smoke", "torch", "gpt", model_factory="m:g"))
            == "pytest_dlperf.child.cores.torch_core")
    assert core_module(scenario_for("smoke", "tensorflow", "x", step="m:f")) == "pytest_dlperf.child.cores.tf_step"
    assert core_module(scenario_for("smoke", "torch", "resnet18")) == "pytest_dlperf.child.cores.torch_core"


PID_STEP = """
import os

from tiny_model import make_step as tiny

def make_step(scenario):
    with open(scenario.model_config["pids"], "a") as fh:  # which process built this scenario
        fh.write(f"{os.getpid()}\\n")
    return tiny(scenario)
"""

TOGETHER_TEST = """
import os

SHAPE = dict(batch_size=4, warmup_steps=1, rounds=2, steps_per_round=3)

def test_together(dlperf, tmp_path):
    pids = tmp_path / "pids"
    a = dlperf.scenario("torch", "tiny_mlp", step="pid_step:make_step", model_config={"pids": str(pids)}, **SHAPE)
    first, second = dlperf.run_together(a, a.replace(batch_size=8))
    built = pids.read_text().split()
    assert len(built) == 2 and built[0] == built[1] != str(os.getpid())
    assert first.scenario.batch_size == 4 and second.scenario.batch_size == 8 and len(second.losses) == 7
    dlperf.ledger.record(second)

def test_one_fails(dlperf):
    a = dlperf.scenario("torch", "tiny_mlp", step="tiny_model:make_step", **SHAPE)
    dlperf.run_together(a, a.replace(step="tiny_model:no_such_step", label="missing"))
"""


@TORCH
def test_scenarios_run_together_share_one_child_and_a_failure_names_its_scenario(pytester: pytest.Pytester) -> None:
    project(pytester, TOGETHER_TEST, tiny_model=STEP_MODULE, pid_step=PID_STEP)
    result = run(pytester, "proj")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*scenario 'missing' failed: error in your code*no_such_step*"])
