"""A timm model trained by a plain loop over the project's own DataLoader; ``train(steps)`` is that loop marked."""

import time

import timm
import torch

#: Seconds of extra work per batch in the loader's collate (the recipe runner's "slowed commit" sets it).
SLOWDOWN = 0.0


def collate(samples):
    time.sleep(SLOWDOWN)  # the project's own batch assembly, in the main process (no workers)
    return torch.utils.data.default_collate(samples)


def loader(batch_size, seed=0):
    g = torch.Generator().manual_seed(seed)
    images, labels = torch.randn(2048, 3, 32, 32, generator=g), torch.randint(0, 10, (2048,), generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, labels), batch_size=batch_size,
                                       shuffle=True, collate_fn=collate)


def train(steps):
    torch.manual_seed(steps.scenario.seed)
    model = timm.create_model("test_resnet", pretrained=False, num_classes=10)  # timm's tiny test network
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = loader(steps.scenario.batch_size, steps.scenario.seed)
    while not steps.done:
        for images, labels in steps.batches(data):  # each wait for the next batch timed: data_wait
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            steps.step(loss, samples=len(images))
            if steps.done:
                break
