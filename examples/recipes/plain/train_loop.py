"""A plain PyTorch training loop, as its owner runs it; ``train(steps)`` is the same loop under pytest-dlperf."""

import time

import torch

#: Seconds of extra work per step (the recipe runner's "slowed commit" sets it).
SLOWDOWN = 0.0


def fit(model, optimizer, loader, steps=None, epochs=1):
    for _ in range(epochs):
        for x, y in (steps.batches(loader) if steps else loader):
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            time.sleep(SLOWDOWN)
            if steps:
                steps.step(loss, samples=len(x))  # mark the optimizer step
                if steps.done:
                    return


def build(seed=0, batch_size=32):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    x, y = torch.randn(8192, 64), torch.randint(0, 10, (8192,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch_size, shuffle=True)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), loader


def train(steps):
    model, optimizer, loader = build(steps.scenario.seed, steps.scenario.batch_size)
    fit(model, optimizer, loader, steps, epochs=100)
