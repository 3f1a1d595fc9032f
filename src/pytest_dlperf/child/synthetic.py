"""Synthetic image batches that a network can actually learn.

Each class has a fixed random template (a smooth colour pattern); a sample is its
class template plus Gaussian noise. Throughput does not depend on the pixels, but
a loss that falls on this data shows the optimizer, the precision and the loss
scaling really train, which random labels on noise would not.
"""

from __future__ import annotations

import numpy as np


def class_templates(num_classes: int, image_size: int, seed: int) -> np.ndarray:
    """(classes, 3, H, W) float32 templates: a coarse 4x4 random grid, upsampled."""
    rng = np.random.default_rng(seed)
    coarse = rng.standard_normal((num_classes, 3, 4, 4)).astype(np.float32)
    reps = -(-image_size // 4)
    full = np.repeat(np.repeat(coarse, reps, axis=2), reps, axis=3)
    return np.ascontiguousarray(full[:, :, :image_size, :image_size])


def batches(
    num_batches: int,
    batch_size: int,
    image_size: int,
    num_classes: int,
    seed: int = 0,
    noise: float = 0.5,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``num_batches`` (images NCHW float32, labels int64) pairs, reproducible from ``seed``."""
    templates = class_templates(num_classes, image_size, seed)
    rng = np.random.default_rng(seed + 1)
    out = []
    for _ in range(num_batches):
        labels = rng.integers(0, num_classes, size=batch_size, dtype=np.int64)
        images = templates[labels] + noise * rng.standard_normal(templates[labels].shape, dtype=np.float32)
        out.append((images.astype(np.float32), labels))
    return out
