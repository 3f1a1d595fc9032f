"""Loss scaling really works in the PyTorch core: the static scale (seed 001's Apex
``--static-loss-scale``), its skipped steps, and GradScaler's dynamic scale.

A small classifier is trained through the core's own step (``TorchTrainingLoop``:
autocast to float16, the scenario's loss scaling, SGD), with a loss weight of 2**-22,
as a small auxiliary loss would have: the gradient of the logits, about 2**-28, is
below float16's smallest subnormal (2**-24), so under fp16 autocast without scaling
every gradient is exactly zero and nothing trains. The learning rate is divided by the
same weight, so in fp32 this is ordinary training. Then:

- a static scale of 2**16 brings the gradients back into float16's range: it trains as
  fp32 does, and no step is skipped;
- a static scale of 2**50 overflows float16 (2**22 > 65504) in every step: the core's
  finiteness check skips every update, counts each one, and the weights never move;
- GradScaler (``loss_scale="dynamic"``) recovers the gradients too.

float16 autocast runs on the CPU in recent PyTorch (slowly, which does not matter for
a model this size: the CPU tests take seconds); on a GPU the same tests run on CUDA.
Runs in-process, holding the device's lock like every measured run.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

pytestmark = pytest.mark.framework("torch")

LOSS_WEIGHT = 2.0 ** -22
#: Learning rate of the unweighted problem; SGD gets LEARNING_RATE / LOSS_WEIGHT.
LEARNING_RATE = 0.1
BATCH, IMAGE, CLASSES, POOL = 64, 8, 4, 4
STEPS_PER_ROUND, ROUNDS = 15, 4
STEPS = STEPS_PER_ROUND * ROUNDS
#: Brings the ~2**-28 logit gradients to ~2**-12: well inside float16's range.
GOOD_STATIC_SCALE = 2.0 ** 16
#: float16 overflows above 65504: ~2**-28 times 2**50 is ~2**22.
OVERFLOWING_STATIC_SCALE = 2.0 ** 50

DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", marks=pytest.mark.gpu, id="cuda")]


@dataclass
class Run:
    losses: list[float]  # unweighted cross-entropy per step
    skipped: int
    final_scale: float | None
    weights_moved: bool

    def mean(self, part: slice) -> float:
        values = self.losses[part]
        return sum(values) / len(values)

    def fell(self, factor: float = 0.5) -> bool:
        """The mean of the last 4 steps is below ``factor`` x the mean of the first 4."""
        return self.mean(slice(-4, None)) < factor * self.mean(slice(0, 4))


@pytest.fixture
def device(request):
    """The device, locked for the test: the CPUs' lock, or the gpu fixture's (which skips without one)."""
    if request.param == "cuda":
        request.getfixturevalue("gpu")
        yield "cuda"
        return
    from pytest_dlperf.processes.devicelock import device_lock

    with device_lock(["cpu"], owner=request.node.nodeid):
        yield "cpu"


def scenario(device: str, precision: str, loss_scale: str | float = "dynamic"):
    from pytest_dlperf.scenario import Scenario

    return Scenario(framework="torch", model="mlp", precision=precision, device=device, batch_size=BATCH,
                    image_size=IMAGE, num_classes=CLASSES, warmup_steps=0, rounds=ROUNDS,
                    steps_per_round=STEPS_PER_ROUND, lr=LEARNING_RATE / LOSS_WEIGHT, momentum=0.9,
                    weight_decay=0.0, loss_scale=loss_scale, label=f"{precision}-{loss_scale}")


def small_model():
    """A 2-layer MLP, the same initial weights every time."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * IMAGE * IMAGE, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, CLASSES))


def weighted_loss(logits, labels):
    import torch

    return LOSS_WEIGHT * torch.nn.functional.cross_entropy(logits, labels)


def data(device: str):
    import torch

    from pytest_dlperf.child.synthetic import batches

    return [(torch.from_numpy(x).to(device), torch.from_numpy(y).long().to(device))
            for x, y in batches(POOL, BATCH, IMAGE, CLASSES, seed=1)]


def train(device: str, precision: str, loss_scale: str | float = "dynamic") -> Run:
    from pytest_dlperf.child.cores import torch_core
    from pytest_dlperf.child.measure import measure

    s = scenario(device, precision, loss_scale)
    torch_core.configure_precision(s)
    model = small_model()
    before = [p.detach().clone() for p in model.parameters()]
    loop = torch_core.TorchTrainingLoop(s, data(device), model=model, criterion=weighted_loss)
    _, losses, details = measure(loop, s)
    moved = any(not bool((a.to(b.device) == b).all()) for a, b in zip(before, model.parameters()))
    return Run([v / LOSS_WEIGHT for v in losses], details["skipped_steps"], details["final_loss_scale"], moved)


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_fp16_gradients_underflow_to_zero_without_loss_scaling(device):
    import torch

    x, y = data(device)[0]
    grads = {}
    for dtype in (torch.float32, torch.float16):
        model = small_model().to(device)
        with torch.autocast(device, dtype=dtype, enabled=dtype is torch.float16):
            loss = weighted_loss(model(x), y)
        loss.backward()
        grads[dtype] = [int(torch.count_nonzero(p.grad)) for p in model.parameters()]
    assert all(n > 0 for n in grads[torch.float32]), f"the fp32 control has zero gradients: {grads[torch.float32]}"
    assert grads[torch.float16] == [0] * len(grads[torch.float16]), (
        f"expected every fp16-autocast gradient to underflow to 0, non-zeros: {grads[torch.float16]}")

    fp32 = train(device, "fp32")
    unscaled = train(device, "amp_fp16", loss_scale=1.0)  # a static scale of 1 is no loss scaling
    assert fp32.fell(), f"the fp32 control did not train: {fp32.losses[:4]} ... {fp32.losses[-4:]}"
    assert not unscaled.weights_moved, "fp16 without loss scaling changed the weights: no underflow?"
    assert unscaled.skipped == 0, f"{unscaled.skipped} steps skipped with finite (zero) gradients"
    assert not unscaled.fell(0.99), f"fp16 without loss scaling trained: {unscaled.losses[-4:]}"


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_static_loss_scale_recovers_the_gradients_and_trains(device):
    fp32 = train(device, "fp32")
    scaled = train(device, "amp_fp16", loss_scale=GOOD_STATIC_SCALE)
    assert scaled.skipped == 0, f"a static scale of 2**16 skipped {scaled.skipped} steps: they overflowed"
    assert scaled.final_scale == GOOD_STATIC_SCALE
    assert scaled.fell(), f"fp16 with a static scale did not train: {scaled.losses[:4]} ... {scaled.losses[-4:]}"
    # Recovered, not just non-zero: it ends about where fp32 ends.
    assert scaled.mean(slice(-4, None)) < 2 * fp32.mean(slice(-4, None)) + 0.05, (
        f"fp16 + static scale ends at {scaled.mean(slice(-4, None)):.4f}, fp32 at {fp32.mean(slice(-4, None)):.4f}")


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_an_overflowing_static_scale_skips_every_step_and_leaves_the_weights(device):
    run = train(device, "amp_fp16", loss_scale=OVERFLOWING_STATIC_SCALE)
    frozen = train(device, "amp_fp16", loss_scale=1.0)  # zero gradients: the weights never move
    assert run.skipped == STEPS, f"every step overflows at 2**50, but {STEPS - run.skipped} of {STEPS} were applied"
    assert not run.weights_moved, "skipped steps changed the weights"
    # Nothing moved, so every loss is the initial model's on that step's batch.
    assert run.losses == pytest.approx(frozen.losses, rel=1e-6)


@pytest.mark.parametrize("device", DEVICES, indirect=True)
def test_dynamic_loss_scaling_recovers_the_gradients_and_trains(device):
    fp32 = train(device, "fp32")
    scaled = train(device, "amp_fp16")
    assert scaled.weights_moved
    assert scaled.fell(), f"fp16 with GradScaler did not train: {scaled.losses[:4]} ... {scaled.losses[-4:]}"
    assert scaled.mean(slice(-4, None)) < 2 * fp32.mean(slice(-4, None)) + 0.05
    # GradScaler starts at 2**16 and doubles only after 2000 clean steps: none overflowed, none doubled
    assert scaled.skipped == 0 and scaled.final_scale == 2.0 ** 16, (scaled.skipped, scaled.final_scale)
