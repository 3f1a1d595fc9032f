"""Your own training loop under test: ``dlperf.scenario("torch", name, loop="module:train")`` (pytester).

Your ``train(steps)`` runs the training as you run it and marks each optimizer step with
``steps.step(loss, samples=n)`` (or hands ``steps.lightning()`` / ``steps.huggingface()`` to the
trainer); the harness times the marks as it times a ``step=``. The trainers' tests run the real
libraries on the CPU with tiny models, and skip where the library is not installed.
"""

from __future__ import annotations

import importlib.util

import pytest

from pytest_dlperf import instructions
from pytest_dlperf.reports.junit import read_reports
from pytest_dlperf.scenario import Scenario, ScenarioError

TORCH = pytest.mark.framework("torch")

PLAIN_LOOP = """
import time
import torch

def make(scenario):
    torch.manual_seed(scenario.seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.randn(256, 16)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    return model, torch.optim.SGD(model.parameters(), lr=0.2), x, y

def train(steps):
    model, optimizer, x, y = make(steps.scenario)
    b = steps.scenario.batch_size
    i = 0
    while not steps.done:
        xb, yb = x[i % 256:i % 256 + b], y[i % 256:i % 256 + b]
        i += b
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
        accuracy = (model(xb).argmax(dim=1) == yb).float().mean()
        steps.step(loss, samples=3 * len(xb), figures={"batch_accuracy": accuracy})  # say, 3 rows a sample

def slow(steps):
    def slowed(loss, mark=steps.step, **counts):
        time.sleep(0.01)
        mark(loss, **counts)
    steps.step = slowed
    train(steps)

def short(steps):
    for _ in range(3):
        steps.step(1.0)

def diverges(steps):
    while not steps.done:
        steps.step(float("nan"))

def raises(steps):
    steps.step(1.0)
    raise ValueError("my loop broke at step 2")
"""

PLAIN_TESTS = """
import pytest

SHAPE = dict(batch_size=8, warmup_steps=2, rounds=3, steps_per_round=5)

def test_mine(dlperf):
    run = dlperf.run(dlperf.scenario("torch", "my_loop", loop="my_loop:train", **SHAPE))
    dlperf.check(run)
    assert run.loss_fell()
    assert len(run.losses) == 17 and run.details["user_loop"]["marked_steps"] == 17
    seconds = run.details["round_seconds"]
    assert run.throughput.samples == pytest.approx([5 * 24 / t for t in seconds], rel=1e-9)

def test_short(dlperf):
    dlperf.run(dlperf.scenario("torch", "short", loop="my_loop:short", **SHAPE))

def test_diverges(dlperf):
    dlperf.run(dlperf.scenario("torch", "diverges", loop="my_loop:diverges", **SHAPE))

def test_raises(dlperf):
    dlperf.run(dlperf.scenario("torch", "raises", loop="my_loop:raises", **SHAPE))
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def project(pytester: pytest.Pytester, test: str, **modules: str) -> None:
    folder = pytester.mkpydir("proj")
    (folder / "__init__.py").unlink()
    (folder / "test_mine.py").write_text(test)
    for name, text in modules.items():
        (folder / f"{name}.py").write_text(text)


@TORCH
def test_a_plain_loop_is_timed_at_its_marks_and_its_errors_are_its_own(pytester: pytest.Pytester) -> None:
    project(pytester, PLAIN_TESTS, my_loop=PLAIN_LOOP)
    result = run(pytester, "proj", "--junitxml=report.xml")
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines_random([
        "*training torch/my_loop (loop my_loop:train) fp32 on cpu, batch 8, 3x5 steps after 2 warm-up*",
        "*loop my_loop:short returned after 3 marked steps; the scenario needs 17 (2 warm-up, 3 rounds of 5): "
        "give your trainer max_steps=steps.total*",
        "*non-finite loss*loss became nan at step 0*",
        "*error in your code*loop my_loop:raises raised ValueError: my loop broke at step 2*",
    ])
    reports = {t.test: t for t in read_reports([pytester.path / "report.xml"])}
    figures = {m.metric: m for m in reports["proj/test_mine.py::test_mine"].metrics if m.label == "my_loop"}
    assert figures["throughput"].unit == "samples/s" and len(figures["throughput"].samples) == 3
    assert figures["step_time"].value > 0 and figures["peak_host_memory"].value > 0
    # a mark's own figure: per round, the mean of its marks, judged like the rest (higher is better)
    assert len(figures["batch_accuracy"].samples) == 3 and 0 <= figures["batch_accuracy"].value <= 1


COUNTED_LOOP = """
import torch

def train(steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    while not steps.done:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        steps.step(loss)
"""

COUNTED_TEST = """
def test_counted(dlperf):
    run = dlperf.run(dlperf.scenario("torch", "my_loop", loop="my_loop:train", batch_size=64, warmup_steps=2,
                                     rounds=3, steps_per_round=2, measure="instructions"))
    counts = run.metrics["instructions_per_step"].samples
    print("COUNTS", counts)
    assert len(counts) == 3 and min(counts) > 1e6
    # what the lane holds a figure to (0.5%): a plain loop's marks, in two threads, repeat within it
    assert max(counts) / min(counts) - 1 < 0.005, counts
    assert run.details["user_loop"]["marked_steps"] == 8
    dlperf.check(run)
"""


@TORCH
@pytest.mark.skipif(instructions.unavailable() is not None, reason=str(instructions.unavailable()))
def test_a_plain_loop_is_counted_between_its_marks_under_valgrind(pytester: pytest.Pytester) -> None:
    project(pytester, COUNTED_TEST, my_loop=COUNTED_LOOP)
    result = run(pytester, "proj", "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*instructions counted under Valgrind*", "COUNTS (*"])


def test_a_marks_figures_are_named_apart_from_the_harnesss() -> None:
    from pytest_dlperf.child.loop import Steps
    from pytest_dlperf.child.usercode import UserCodeError

    steps = Steps(Scenario("torch", "mine", loop="m:f"))
    with pytest.raises(UserCodeError, match=r"names \['throughput'\] must be identifiers and not the harness's own"):
        steps.step(1.0, figures={"throughput": 2.0})
    with pytest.raises(UserCodeError, match=r"samples must be a positive integer"):
        steps.step(1.0, samples=0)
    assert steps.marked == 0


def test_a_loader_s_prefetch_depth_is_read_off_it_and_a_wrong_one_is_named() -> None:
    from pytest_dlperf.child.loop import MarkedLoop, Steps, prefetch_depth
    from pytest_dlperf.child.usercode import UserCodeError

    class Loader:  # a torch DataLoader's attributes
        def __init__(self, num_workers, prefetch_factor):
            self.num_workers, self.prefetch_factor = num_workers, prefetch_factor

    assert prefetch_depth(Loader(2, None)) == 4 and prefetch_depth(Loader(3, 5)) == 15
    assert prefetch_depth(Loader(0, None)) == 0 and prefetch_depth([1, 2]) == 0
    steps = Steps(Scenario("torch", "mine", loop="m:f"))
    steps.loaders({"a": Loader(1, 2), "b": [Loader(4, 2)]})  # a trainer's loaders, as its callback finds them
    assert steps.prefetch_depth == 8
    steps.prefetch_depth = 2.5
    with pytest.raises(UserCodeError, match=r"steps.prefetch_depth=2.5 must be the count of batches"):
        MarkedLoop(steps, sync=lambda: None, synchronous=True).drain_prefetched()


PAIRED_TEST = """
def test_paired(dlperf):
    shape = dict(batch_size=8, warmup_steps=2, rounds=4, steps_per_round=5)
    paired = dlperf.run_paired(dlperf.scenario("torch", "fast", loop="my_loop:train", **shape),
                               dlperf.scenario("torch", "slow", loop="my_loop:slow", **shape))
    ratio = paired.ratio("slow")
    print("RATIO", ratio.describe())
    assert ratio.estimate < 0.9, ratio.describe()
"""


@pytest.mark.slow
@TORCH
def test_two_loops_run_in_paired_processes_and_a_slower_one_shows(pytester: pytest.Pytester) -> None:
    """Paced children wait for their turn inside a mark: your loop idles while the other side takes its round."""
    project(pytester, PAIRED_TEST, my_loop=PLAIN_LOOP)
    result = run(pytester, "proj", "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["RATIO *"])


DATA_LOOP = """
import time
import torch

def collate(delay):
    def stack(samples):
        time.sleep(delay)  # a slow transform
        return torch.utils.data.default_collate(samples)
    return stack

def train(steps):
    torch.manual_seed(steps.scenario.seed)
    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4096, 16), torch.randint(0, 4, (4096,))
    config = steps.scenario.model_config
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=steps.scenario.batch_size,
                                         collate_fn=collate(config["delay"]), num_workers=config.get("workers", 0))
    for xb, yb in steps.batches(loader):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
        steps.step(loss)
        if steps.done:
            break
"""

DATA_TEST = """
def test_data_wait(dlperf):
    shape = dict(batch_size=8, warmup_steps=2, rounds=3, steps_per_round=5)
    fast = dlperf.run(dlperf.scenario("torch", "fast", loop="my_loop:train", model_config={"delay": 0.0}, **shape))
    slow = dlperf.run(dlperf.scenario("torch", "slow", loop="my_loop:train", model_config={"delay": 0.03}, **shape))
    waits = fast.metrics["data_wait"], slow.metrics["data_wait"]
    assert waits[0].unit == "s" and waits[0].direction == "lower" and len(waits[1].samples) == 3
    assert 0.025 < waits[1].value - waits[0].value < 0.045, waits
    # throughput keeps its meaning: round wall time, the wait included
    assert slow.throughput.value < fast.throughput.value
"""


@pytest.mark.serial  # a 30-ms loader delay read back in its data wait
@TORCH
def test_a_loader_made_slower_raises_data_wait_by_its_delay(pytester: pytest.Pytester) -> None:
    project(pytester, DATA_TEST, my_loop=DATA_LOOP)
    run(pytester, "proj").assert_outcomes(passed=1)


PREFETCH_TEST = """
def test_prefetch(dlperf):
    # two workers, each making a batch of 8 in 40 ms: at most 8 / 0.02 = 400 samples/s; a round started with the
    # four batches they queued while the other side ran reads about 560
    shape = dict(batch_size=8, warmup_steps=4, rounds=3, steps_per_round=8, intra_op_threads=1,
                 model_config={"delay": 0.04, "workers": 2})
    paired = dlperf.run_paired(dlperf.scenario("torch", "one", loop="my_loop:train", **shape),
                               dlperf.scenario("torch", "two", loop="my_loop:train", **shape), pairs=3, processes=1)
    for side in paired.results.values():
        assert side.throughput.value < 1.2 * 400, side.throughput.samples
        assert side.details["user_loop"]["lead_in_steps"] == [4] * len(side.throughput.samples)
        assert side.metrics["data_wait"].value > 0.005
"""


@pytest.mark.serial  # a loader's 40-ms batches read back in the throughput
@TORCH
def test_a_paired_round_of_a_data_bound_loop_starts_without_the_batches_queued_while_it_idled(
        pytester: pytest.Pytester) -> None:
    project(pytester, PREFETCH_TEST, my_loop=DATA_LOOP)
    run(pytester, "proj").assert_outcomes(passed=1)


LIGHTNING_LOOP = """
import torch
import pytorch_lightning as pl

class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

def train(steps):
    torch.manual_seed(steps.scenario.seed)
    x = torch.randn(1024, 16)
    y = (x[:, 0] > 0).long()
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=steps.scenario.batch_size)
    trainer = pl.Trainer(max_steps=10 * steps.total, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, accumulate_grad_batches=2,
                         callbacks=[steps.lightning()])
    trainer.fit(Tiny(), data)
    assert trainer.global_step == steps.total, trainer.global_step  # stopped by the callback, not max_steps
"""

TRAINER_TEST = """
import pytest

def test_mine(dlperf):
    run = dlperf.run(dlperf.scenario("torch", "mine", loop="my_trainer:train", batch_size=4, warmup_steps=2,
                                     rounds=2, steps_per_round=3))
    assert run.details["user_loop"]["marked_steps"] == 8 and len(run.losses) == 8
    seconds = run.details["round_seconds"]
    # two accumulated batches of 4 per optimizer step
    assert run.throughput.samples == pytest.approx([3 * 8 / t for t in seconds], rel=1e-9)
"""


def _needs(*modules: str) -> pytest.MarkDecorator:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed here (pip install "
                              f"{' '.join(missing)}): the callback is tested against the real library")


@TORCH
@_needs("pytorch_lightning")
def test_lightning_trainer_fit_is_timed_in_optimizer_steps(pytester: pytest.Pytester) -> None:
    test = TRAINER_TEST + '    assert run.metrics["data_wait"].value > 0  # from the batch-start/end hooks\n'
    project(pytester, test, my_trainer=LIGHTNING_LOOP)
    run(pytester, "proj").assert_outcomes(passed=1)


HF_LOOP = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

def train(steps):
    torch.manual_seed(steps.scenario.seed)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=16,
                                       bos_token_id=0, eos_token_id=0))
    ids = torch.randint(0, 64, (512, 16))
    data = [{"input_ids": r, "labels": r} for r in ids]
    args = TrainingArguments(output_dir="hf_out", per_device_train_batch_size=steps.scenario.batch_size,
                             gradient_accumulation_steps=2, max_steps=10 * steps.total, report_to=[],
                             save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[steps.huggingface()])
    trainer.train()
    assert trainer.state.global_step == steps.total, trainer.state.global_step  # stopped by the callback
"""


@TORCH
@_needs("transformers", "accelerate")
def test_hugging_face_trainer_train_is_timed_in_optimizer_steps(pytester: pytest.Pytester) -> None:
    project(pytester, TRAINER_TEST, my_trainer=HF_LOOP)
    run(pytester, "proj").assert_outcomes(passed=1)


@pytest.mark.parametrize("settings, message", [
    (dict(loop="m:f", step="m:g"), "give one of loop="),
    (dict(loop="m:f", framework="mxnet"), "loop= is supported for torch, tensorflow; not yet for mxnet: give it a "
                                           "step="),
    (dict(loop="m:f", data="jpeg", data_dir="/d"), "with loop= your loop reads its own data"),
    (dict(loop="m f"), "loop='m f' is not 'package.module:function'; e.g. loop='my_training:train'"),
])
def test_loop_settings_are_checked_with_the_fix(settings: dict, message: str) -> None:
    fields = {"framework": "torch", "model": "mine", **settings}
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(").replace(".", r"\.")):
        Scenario(**fields)


def test_a_loop_scenario_is_named_by_its_workload_and_picks_the_loop_core() -> None:
    from pytest_dlperf.child.train import core_module

    s = Scenario("torch", "my_loop", loop="pkg.mod:train")
    assert s.label == "my_loop" and s.user_code and "loop pkg.mod:train" in s.describe()
    assert core_module(s) == "pytest_dlperf.child.cores.torch_loop"
