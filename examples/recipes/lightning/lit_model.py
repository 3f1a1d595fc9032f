"""A LightningModule trained with ``Trainer.fit``; ``train(steps)`` adds the one callback pytest-dlperf needs."""

import time

import pytorch_lightning as pl
import torch

#: Seconds of extra work per step (the recipe runner's "slowed commit" sets it).
SLOWDOWN = 0.0


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        time.sleep(SLOWDOWN)
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def loader(batch_size):
    x, y = torch.randn(8192, 64), torch.randint(0, 10, (8192,))
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch_size)


def train(steps):
    torch.manual_seed(steps.scenario.seed)
    trainer = pl.Trainer(max_steps=steps.total, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[steps.lightning()])
    trainer.fit(Classifier(), loader(steps.scenario.batch_size))
