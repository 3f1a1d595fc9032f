"""A tiny Keras classifier trained with ``model.fit``; ``train(steps)`` adds the one callback pytest-dlperf needs."""

import time

import keras
import numpy as np

#: Seconds of extra work per step (the recipe runner's "slowed commit" sets it).
SLOWDOWN = 0.0


class LogBatches(keras.callbacks.Callback):
    """The project's own per-batch logging: what the slowed commit makes slower."""

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(SLOWDOWN)


def build(seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.AdamW(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((8192, 64), dtype=np.float32), rng.integers(0, 10, 8192)
    return model, x, y


def train(steps):
    model, x, y = build(steps.scenario.seed)
    model.fit(x, y, batch_size=steps.scenario.batch_size, epochs=100, verbose=0,
              callbacks=[LogBatches(), steps.keras()])
