"""A user's own training code: a tiny character-level language model and its training step.

pytest-dlperf imports ``make_step`` in a child process, calls it with the scenario (batch size,
device, precision, seed) and times the step it returns. ``TINY_LM_REPEAT`` (default 1) runs the
forward and backward pass that many times per step: the slowed variant CI uses to show a
regression is caught.
"""

import os

import torch
from torch import nn

TEXT = b"the quick brown fox jumps over the lazy dog. " * 64
CONTEXT = 32


class TinyLM(nn.Module):
    def __init__(self, vocab=256, width=128):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.rnn = nn.GRU(width, width, batch_first=True)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        hidden, _ = self.rnn(self.embed(tokens))
        return self.head(hidden)


def make_step(scenario):
    torch.manual_seed(scenario.seed)
    device = torch.device(scenario.device)
    model = TinyLM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.tensor(list(TEXT), dtype=torch.long)
    starts = torch.randint(0, len(data) - CONTEXT - 1, (scenario.batch_size,))
    x = torch.stack([data[s:s + CONTEXT] for s in starts]).to(device)
    y = torch.stack([data[s + 1:s + CONTEXT + 1] for s in starts]).to(device)
    repeat = int(os.environ.get("TINY_LM_REPEAT", "1"))

    def step():
        optimizer.zero_grad(set_to_none=True)
        for _ in range(repeat):
            loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            loss.backward()
        optimizer.step()
        return loss.detach()  # a tensor: the plugin reads it after the round, no per-step sync

    step.samples_per_step = scenario.batch_size * CONTEXT  # throughput in tokens/s
    step.unit = "tokens"
    return step
