"""Shapes and step counts per profile.

``smoke``: small images and batches so a 2-core CI machine trains every scenario in
seconds; the code path (model, optimizer, precision, loader) is the same as ``full``.
``full``: the documented configurations: 224 px ImageNet shapes, 1000 classes, the
batch sizes of the reference scripts (NVIDIA Apex's ImageNet example, tf_cnn_benchmarks).

The learning rate follows the linear scaling rule (Goyal et al., "Accurate, Large Minibatch
SGD"): ``lr = LR_PER_256[profile] * batch_size / 256`` unless a test sets ``lr``. A fixed smoke
rate of 0.05 at batch 8 diverged in amp_bf16 on CPUs without native bf16 (ResNet-50 loss
2.29 -> 40.3 -> 70.0 on an AVX-512 Xeon, and on AVX-512-bf16 EPYC too, where it passed only
because the last steps happened to land low); at the scaled rate (0.003) fp32 and bf16 fall
smoothly on both CPU classes.
"""

from __future__ import annotations

from typing import Any

from pytest_dlperf.scenario import Scenario, ScenarioError

PROFILE_DEFAULTS: dict[str, dict[str, Any]] = {
    "smoke": dict(image_size=64, num_classes=10, warmup_steps=3, rounds=5, steps_per_round=4),
    "full": dict(image_size=224, num_classes=1000, warmup_steps=20, rounds=5, steps_per_round=30),
}

#: A precision the CPU only emulates (bf16 without AVX512_BF16 or AMX) runs at this size on ``smoke``:
#: a quarter of the pixels, the same steps (fewer left ResNet-50's loss too noisy to show it fell).
EMULATED_SHAPE: dict[str, Any] = dict(image_size=32)
#: The rounds of a scenario ``--dlperf-measure=instructions`` counts instead of timing: one step costs about
#: a minute under callgrind at smoke sizes, and its count repeats to a few hundredths of a percent, so
#: three rounds of one step show what a timed scenario's rounds would (docs/instructions.md).
COUNTED_ROUNDS: dict[str, Any] = dict(rounds=3, steps_per_round=1)

#: Learning rate per 256 samples of batch. ``full`` keeps those scripts' rate (0.1 at batch 128).
LR_PER_256: dict[str, float] = {"smoke": 0.1, "full": 0.2}

#: Batch sizes per profile and model. ``full`` follows Apex's ImageNet example (``-b 128``)
#: and tf_cnn_benchmarks (``--batch_size=128``); other models fall back to the ``*`` entry.
BATCH_SIZES: dict[str, dict[str, int]] = {
    "smoke": {"resnet18": 16, "resnet50": 8, "*": 8},
    "full": {"resnet18": 128, "resnet50": 128, "*": 64},
}


#: The built-in GPT-style decoder (``model="gpt"``, torch): its sizes per profile; ``model_config`` entries
#: win. ``full`` is GPT-2 small (Radford et al. 2019) with the vocabulary padded to a multiple of 64 as
#: nanoGPT does; ``smoke`` trains on a CPU in seconds.
GPT_SIZES: dict[str, dict[str, int]] = {
    "smoke": dict(layers=2, width=128, heads=4, context=128, vocab=512),
    "full": dict(layers=12, width=768, heads=12, context=1024, vocab=50304),
}
#: Sequences per step, and AdamW's rate and weight decay (nanoGPT's GPT-2 settings at ``full``).
GPT_DEFAULTS: dict[str, dict[str, Any]] = {
    "smoke": dict(batch_size=8, lr=3e-3, weight_decay=0.1),
    "full": dict(batch_size=8, lr=6e-4, weight_decay=0.1),
}


def gpt_config(config: dict[str, Any]) -> dict[str, int]:
    """A complete, valid GPT size: every key of :data:`GPT_SIZES`, positive integers, width divisible by heads."""
    known = set(GPT_SIZES["smoke"])
    unknown = sorted(set(config) - known)
    missing = sorted(known - set(config))
    if unknown or missing:
        raise ScenarioError(f"model_config for 'gpt' takes {sorted(known)}; unknown {unknown}, missing {missing}")
    for key, value in config.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ScenarioError(f"model_config {key}={value!r} must be an integer > 0")
    if config["width"] % config["heads"]:
        raise ScenarioError(f"model_config width={config['width']} must be divisible by heads={config['heads']}")
    return dict(config)


def scenario_for(profile: str, framework: str, model: str, **overrides: Any) -> Scenario:
    """A scenario with this profile's shapes; ``overrides`` win over the profile."""
    settings: dict[str, Any] = dict(PROFILE_DEFAULTS[profile])
    sizes = BATCH_SIZES[profile]
    settings["batch_size"] = sizes.get(model, sizes["*"])
    if framework == "torch" and model == "gpt" and not overrides.get("step") and not overrides.get("loop") \
            and not overrides.get("model_factory"):
        settings.update(GPT_DEFAULTS[profile])
        settings["model_config"] = gpt_config({**GPT_SIZES[profile], **overrides.pop("model_config", {})})
    settings.update(overrides)
    settings.setdefault("lr", LR_PER_256[profile] * settings["batch_size"] / 256)
    return Scenario(framework=framework, model=model, **settings)
