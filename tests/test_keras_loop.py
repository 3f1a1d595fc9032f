"""Your Keras ``model.fit`` under test: ``loop=`` for framework "tensorflow" with ``steps.keras()`` (pytester).

Run against the real TensorFlow and Keras 3 in perf-tf's interpreter (tox -e selftest-tf); the
torch environment has no TensorFlow, so the tests marked for it are skipped there.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from pytest_dlperf.reports.junit import read_reports
from pytest_dlperf.scenario import Scenario

TF = pytest.mark.framework("tensorflow")

KERAS_FIT = """
import numpy as np
import keras

def build(scenario):
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)])
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), **scenario.model_config)
    x = np.random.default_rng(scenario.seed).standard_normal((256, 16)).astype("float32")
    return model, x, (x[:, 0] > 0).astype("int64")

def train(steps):
    model, x, y = build(steps.scenario)
    history = model.fit(x, y, batch_size=steps.scenario.batch_size, epochs=100, verbose=0,
                        callbacks=[steps.keras()])
    assert len(history.epoch) < 100  # stopped by the callback, not by running out of epochs

def train_tokens(steps):
    steps.unit = "rows"
    model, x, y = build(steps.scenario)
    model.fit(x, y, batch_size=4, epochs=100, verbose=0, callbacks=[steps.keras(samples=4)])
"""

KERAS_TESTS = """
import pytest

SHAPE = dict(batch_size=8, warmup_steps=2, rounds=3, steps_per_round=5)

def test_fit(dlperf):
    run = dlperf.run(dlperf.scenario("tensorflow", "keras_mlp", loop="my_fit:train", **SHAPE))
    dlperf.check(run)
    assert run.loss_fell(), run.losses
    assert len(run.losses) == 17 and run.details["user_loop"]["marked_steps"] == 17
    seconds = run.details["round_seconds"]
    assert run.throughput.samples == pytest.approx([5 * 8 / t for t in seconds], rel=1e-9)
    assert "data_wait" not in run.metrics  # Keras fetches its batches inside its train function

def test_samples(dlperf):
    run = dlperf.run(dlperf.scenario("tensorflow", "keras_rows", loop="my_fit:train_tokens", **SHAPE))
    assert run.throughput.unit == "rows/s"
    assert run.throughput.samples == pytest.approx([5 * 4 / t for t in run.details["round_seconds"]], rel=1e-9)

def test_steps_per_execution(dlperf):
    dlperf.run(dlperf.scenario("tensorflow", "keras_spe", loop="my_fit:train", model_config={"steps_per_execution": 4},
                               **SHAPE))
"""


def project(pytester: pytest.Pytester, test: str, **modules: str) -> None:
    folder = pytester.mkpydir("proj")
    (folder / "__init__.py").unlink()
    (folder / "test_mine.py").write_text(test)
    for name, text in modules.items():
        (folder / f"{name}.py").write_text(text)


@TF
def test_keras_model_fit_is_timed_per_batch_and_stopped_when_done(pytester: pytest.Pytester) -> None:
    project(pytester, KERAS_TESTS, my_fit=KERAS_FIT)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "proj", "--junitxml=report.xml")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "*scenario 'keras_spe' failed: error in your code: *steps.keras() marks one optimizer step per batch; the "
        "model was compiled with steps_per_execution=4: compile it with steps_per_execution=1*",
    ])
    reports = {t.test: t for t in read_reports([pytester.path / "report.xml"])}
    figures = {m.metric: m for m in reports["proj/test_mine.py::test_fit"].metrics if m.label == "keras_mlp"}
    assert figures["throughput"].unit == "samples/s" and len(figures["throughput"].samples) == 3
    assert figures["peak_host_memory"].value > 0
    assert "tensorflow/keras_mlp (loop my_fit:train)" in reports["proj/test_mine.py::test_fit"].scenarios["keras_mlp"]


def test_a_tensorflow_loop_scenario_picks_the_tf_loop_core() -> None:
    from pytest_dlperf.child.train import core_module

    assert core_module(Scenario("tensorflow", "my_fit", loop="pkg.mod:train")) == "pytest_dlperf.child.cores.tf_loop"


def test_the_loop_handle_imports_no_trainer_until_asked() -> None:
    """A torch user's loop (and the parent) never import TensorFlow, Keras, Lightning or transformers."""
    trainers = "{'tensorflow', 'keras', 'lightning', 'pytorch_lightning', 'transformers'}"
    probe = ("import sys, pytest_dlperf.child.loop, pytest_dlperf.child.callbacks; "
             f"print(sorted({trainers} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
