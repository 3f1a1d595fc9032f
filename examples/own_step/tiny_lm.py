"""A user's own training code: a tiny character-level language model and its training step.

pytest-dlperf imports ``make_step`` in a child process, calls it with the scenario (batch size,
device, precision, seed) and times the step it returns. ``TINY_LM_SLOWDOWN`` (default 0) makes
each step that fraction longer (0.35: a step 35% slower, as an extra copy or a slower kernel would):
the slowed variant CI uses to show a regression is caught. ``TINY_LM_EXTRA_COPY_MB`` (default 0) adds
one copy of a tensor of that many megabytes to every step: work an instruction count sees (about 1% of
the step's instructions at 18 MB, 3% at 54 MB, batch 16) where a timing on a shared machine cannot.
"""

import os
import time

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
    slowdown = float(os.environ.get("TINY_LM_SLOWDOWN", "0"))
    extra = torch.ones(int(float(os.environ.get("TINY_LM_EXTRA_COPY_MB", "0")) * 2**20 / 4))

    def step():
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        optimizer.step()
        if extra.numel():
            extra.clone()
        if slowdown:  # the same work, then as much again times the slowdown, on the CPU like the step
            until = time.perf_counter() + slowdown * (time.perf_counter() - started)
            while time.perf_counter() < until:
                pass
        return loss.detach()  # a tensor: the plugin reads it after the round, no per-step sync

    step.samples_per_step = scenario.batch_size * CONTEXT  # throughput in tokens/s
    step.unit = "tokens"
    return step
