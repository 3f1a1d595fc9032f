"""Shapes and step counts per profile.

``smoke``: small images and batches so a 2-core CI machine trains every scenario in
seconds; the code path (model, optimizer, precision, loader) is the same as ``full``.
``full``: the documented configurations: 224 px ImageNet shapes, 1000 classes, the
batch sizes of the seeds.
"""

from __future__ import annotations

from typing import Any

from .scenario import Scenario

PROFILE_DEFAULTS: dict[str, dict[str, Any]] = {
    "smoke": dict(image_size=64, num_classes=10, warmup_steps=3, rounds=5, steps_per_round=4, lr=0.05),
    "full": dict(image_size=224, num_classes=1000, warmup_steps=20, rounds=5, steps_per_round=30, lr=0.1),
}

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
    return Scenario(framework=framework, model=model, **settings)
