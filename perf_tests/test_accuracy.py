"""Seed 004: a training run reports top-1/top-5 accuracy, and accuracy is held like speed.

The seed trains ResNet on ImageNet and reports top-1 46.9% / top-5 72.6% after two
epochs. On a CPU the claim tested is its mechanism: on a learnable data set made by
the suite (10 classes of JPEG images, a tenth of them mislabelled, pytest_dlperf.child.datasets),
each framework's core reaches a stated top-1 and top-5 on the held-out split within a
bounded number of steps, and the accuracy is checked against this machine's baseline (higher is
better), so a change that keeps the speed but breaks learning fails.
"""

from __future__ import annotations

import pytest

from pytest_dlperf.child.datasets import FRAMEWORK_FORMATS, ImageSetSpec, ensure_image_set
from pytest_dlperf.child.train import ACCURACY, REAL_DATA, missing_capability

#: A tenth of each class's images carries another class's label, so the best possible top-1 is 0.90
#: (``SPEC.top1_ceiling``) and a drop of a few points shows, where a clean set let every core reach 1.00.
SPEC = ImageSetSpec(num_classes=10, train_per_class=160, val_per_class=40, image_size=64, label_noise=0.1)
#: Bounded training: 4 warm-up + 3 x 16 timed steps of 16 images (832 images, about half the 1600-image epoch).
#: lr 0.005, the same for every framework: at 0.02 MXNet's loss jumps between steps and its BatchNorm
#: moving statistics (which MXNet updates in the backward pass) lag the weights, leaving eval-mode
#: predictions at chance while train-mode ones are right.
SMOKE = dict(image_size=32, batch_size=16, warmup_steps=4, rounds=3, steps_per_round=16, lr=0.005, loader_workers=0)
#: Floors from what the smoke profile measures (docs/evidence.md, "Accuracy"), 4 points below for top-1
#: (torch and TF reach the ceiling, 0.900; MXNet 0.7975) and 3 below the lowest top-5 (0.935), so a
#: 5-point loss fails; chance is 0.10 top-1 and 0.50 top-5. The stored baseline holds each to 3%.
MIN_TOP1 = {"torch": 0.86, "tensorflow": 0.86, "mxnet": 0.75}
MIN_TOP5 = 0.90

FRAMEWORKS = [pytest.param(fw, marks=pytest.mark.framework(fw), id=fw) for fw in ("torch", "tensorflow", "mxnet")]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "dlperf-data"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_core_reaches_stated_accuracy_on_suite_data(dlperf, framework, data_root):
    reason = missing_capability(framework, REAL_DATA) or missing_capability(framework, ACCURACY)
    if reason:
        pytest.skip(f"{reason}: no accuracy on the suite's data set can be measured")
    data = FRAMEWORK_FORMATS[framework]
    data_dir = ensure_image_set(data_root, SPEC, formats=(data,))
    shapes = SMOKE if dlperf.profile == "smoke" else {}
    s = dlperf.scenario(framework, "resnet18", num_classes=SPEC.num_classes, data=data, data_dir=str(data_dir),
                        label="train_and_eval", **shapes)
    r = dlperf.run(s)
    assert "accuracy_top1" in r.metrics, (
        f"the {framework} core is listed with {ACCURACY!r} in worker.CAPABILITIES but reported no accuracy_top1")
    dlperf.check(r)

    top1, top5 = r.metric("accuracy_top1").value, r.metric("accuracy_top5").value
    assert r.loss_fell(), f"loss did not fall: {r.losses[:3]} ... {r.losses[-3:]}"
    assert top1 >= MIN_TOP1[framework], (
        f"{framework}: top-1 {top1:.3f} after {s.total_steps} steps, stated >= {MIN_TOP1[framework]} "
        f"(best possible {SPEC.top1_ceiling:.2f}, chance 0.10)")
    assert top5 >= MIN_TOP5, (
        f"{framework}: top-5 {top5:.3f} after {s.total_steps} steps, stated >= {MIN_TOP5} (chance 0.50)")
