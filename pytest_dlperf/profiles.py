"""Shapes and step counts per profile.

``smoke``: small images and batches so a 2-core CI machine trains every scenario in
seconds; the code path (model, optimizer, precision, loader) is the same as ``full``.
``full``: the documented configurations: 224 px ImageNet shapes, 1000 classes, the
batch sizes of the seeds.

The learning rate follows the linear scaling rule (Goyal et al., "Accurate, Large Minibatch
SGD"): ``lr = LR_PER_256[profile] * batch_size / 256`` unless a test sets ``lr``. A fixed smoke
rate of 0.05 at batch 8 diverged in amp_bf16 on CPUs without native bf16 (ResNet-50 loss
2.29 -> 40.3 -> 70.0 on an AVX-512 Xeon, and on AVX-512-bf16 EPYC too, where it passed only
because the last steps happened to land low); at the scaled rate (0.003) fp32 and bf16 fall
smoothly on both CPU classes.
"""

from __future__ import annotations

from typing import Any

from .scenario import Scenario

PROFILE_DEFAULTS: dict[str, dict[str, Any]] = {
    "smoke": dict(image_size=64, num_classes=10, warmup_steps=3, rounds=5, steps_per_round=4),
    "full": dict(image_size=224, num_classes=1000, warmup_steps=20, rounds=5, steps_per_round=30),
}

#: Learning rate per 256 samples of batch. ``full`` keeps the rate the seeds' runs used (0.1 at batch 128).
LR_PER_256: dict[str, float] = {"smoke": 0.1, "full": 0.2}

#: Batch sizes per profile and model. ``full`` follows seed 001 (Apex ``-b 128``) and seed 000
#: (tf_cnn_benchmarks ``--batch_size=128``); other models fall back to the ``*`` entry.
BATCH_SIZES: dict[str, dict[str, int]] = {
    "smoke": {"resnet18": 16, "resnet50": 8, "*": 8},
    "full": {"resnet18": 128, "resnet50": 128, "*": 64},
}


def scenario_for(profile: str, framework: str, model: str, **overrides: Any) -> Scenario:
    """A scenario with this profile's shapes; ``overrides`` win over the profile."""
    settings: dict[str, Any] = dict(PROFILE_DEFAULTS[profile])
    sizes = BATCH_SIZES[profile]
    settings["batch_size"] = sizes.get(model, sizes["*"])
    settings.update(overrides)
    settings.setdefault("lr", LR_PER_256[profile] * settings["batch_size"] / 256)
    return Scenario(framework=framework, model=model, **settings)
