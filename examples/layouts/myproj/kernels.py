"""The project's own helper module, imported by name from the same revision as the step."""

import torch


def activation(logits):
    return torch.tanh(logits) * 4
