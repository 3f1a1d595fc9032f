"""A GPT-style decoder language model as a built-in PyTorch scenario (``model="gpt"``).

The model is the GPT-2 shape (Radford et al. 2019; nanoGPT's layout): token and position
embeddings, pre-LayerNorm blocks of causal self-attention through
``torch.nn.functional.scaled_dot_product_attention(is_causal=True)`` (PyTorch picks its fused
flash / memory-efficient kernel) and a 4x GELU MLP, the output head tied to the token embedding;
AdamW, next-token cross-entropy. It trains through :class:`TorchTrainingLoop`'s step, so
precision (autocast, loss scaling), ``torch.compile``, CUDA graphs and the timing are the ResNet
scenarios' own.

Samples are tokens: ``samples_per_step = batch_size * context``, so ``throughput`` is tokens/s.
FLOPs per step follow the PaLM paper's model-FLOPs count (Chowdhery et al. 2022, appendix B):
``6 * N + 12 * layers * width * context`` per token, N the parameters doing matmuls (all but the
position embedding; the tied embedding counted once, as the head). On a GPU whose dense peak is
known the model-FLOPs utilisation is recorded as ``mfu`` (reported, not judged against baselines).

The synthetic text is learnable: each sequence follows a fixed random successor table with 10%
random tokens, so a training model's loss falls well below the uniform ``ln(vocab)``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pytest_dlperf.profiles import gpt_config
from pytest_dlperf.result import HIGHER, metric_from
from pytest_dlperf.scenario import Scenario, ScenarioError
from pytest_dlperf.child.cores.torch_core import TorchTrainingLoop, environment, prepare
from pytest_dlperf.child.measure import measure

#: Distinct synthetic batches cycled through, as the image scenarios do.
SYNTHETIC_POOL = 4
#: Share of tokens drawn at random instead of from the successor table.
NOISE = 0.1
#: Dense tensor-core peak TFLOP/s per precision, by the device name torch reports: NVIDIA's data sheets.
PEAK_TFLOPS = {
    "amp_fp16": {"H100 80GB HBM3": 989.4, "H100 PCIe": 756.0, "H200": 989.4, "A100": 312.0},
    "amp_bf16": {"H100 80GB HBM3": 989.4, "H100 PCIe": 756.0, "H200": 989.4, "A100": 312.0},
    "tf32": {"H100 80GB HBM3": 494.7, "H100 PCIe": 378.0, "H200": 494.7, "A100": 156.0},
}


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, layers: int, width: int, heads: int, context: int, vocab: int):
        super().__init__()
        self.context = context
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied, as GPT-2
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2's scaled init of the residual projections
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tokens(idx) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def matmul_parameters(self) -> int:
        """Parameters that take part in a matmul: all but the position table (the tied one counted once)."""
        return sum(p.numel() for p in self.parameters()) - self.positions.weight.numel()


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def model_flops_per_step(params: int, layers: int, width: int, context: int, tokens: int) -> float:
    """Forward and backward FLOPs of one step (PaLM, appendix B), ``tokens`` tokens of ``context``-long sequences."""
    return float((6 * params + 12 * layers * width * context) * tokens)


def synthetic_tokens(batches: int, batch_size: int, context: int, vocab: int,
                     seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(inputs, next-token targets) int64 pairs of shape (batch, context), reproducible from ``seed``."""
    rng = np.random.default_rng(seed)
    successor = rng.permutation(vocab)
    out = []
    for _ in range(batches):
        seq = np.empty((batch_size, context + 1), dtype=np.int64)
        seq[:, 0] = rng.integers(0, vocab, batch_size)
        noise = rng.random((batch_size, context)) < NOISE
        random_tokens = rng.integers(0, vocab, (batch_size, context))
        for t in range(context):
            seq[:, t + 1] = np.where(noise[:, t], random_tokens[:, t], successor[seq[:, t]])
        out.append((seq[:, :-1].copy(), seq[:, 1:].copy()))
    return out


class GptTrainingLoop(TorchTrainingLoop):
    """The built-in loop's step (autocast, loss scaling, compile) on the GPT with AdamW."""

    def __init__(self, scenario: Scenario):
        self.config = gpt_config(dict(scenario.model_config))
        device = torch.device(scenario.device)
        model = GPT(**self.config)
        data = [(torch.from_numpy(x).to(device), torch.from_numpy(y).to(device))
                for x, y in synthetic_tokens(SYNTHETIC_POOL, scenario.batch_size, self.config["context"],
                                             self.config["vocab"], scenario.seed)]
        super().__init__(scenario, data, model=model, criterion=lm_loss)
        # AdamW, weight decay on matrices only (nanoGPT, after the GPT-2/3 papers); the base built SGD
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.model.parameters() if p.dim() < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": scenario.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=scenario.lr, betas=(0.9, 0.95), fused=self.device.type == "cuda")
        self.optimizer.register_step_post_hook(self._count_applied)
        self.samples_per_step = scenario.batch_size * self.config["context"]

    def _count_flops(self) -> float | None:
        c = self.config
        model = self.model
        assert isinstance(model, GPT)
        return model_flops_per_step(model.matmul_parameters(), c["layers"], c["width"], c["context"],
                                    self.scenario.batch_size * c["context"])


def peak_tflops(scenario: Scenario) -> float | None:
    """The GPU's dense peak for this precision, when the table knows it."""
    if scenario.device != "cuda":
        return None
    name = torch.cuda.get_device_name(0)
    return next((v for k, v in PEAK_TFLOPS.get(scenario.precision, {}).items() if k in name), None)


def train(scenario: Scenario, progress: Any = None) -> tuple[Any, list[float], dict[str, Any], dict[str, Any]]:
    """Entry point used by the worker for ``framework='torch'``, ``model='gpt'``."""

    if scenario.data != "synthetic":
        raise ScenarioError(f"model='gpt' trains on synthetic tokens; data={scenario.data!r} is for the image models")
    prepare(scenario)
    loop = GptTrainingLoop(scenario)
    metrics, losses, details = measure(loop, scenario, progress)
    if "throughput" in metrics:  # counted instead of timed (measure="instructions"): no throughput
        metrics["throughput"] = dataclasses.replace(metrics["throughput"], unit="tokens/s")
    peak = peak_tflops(scenario)
    if peak and "achieved_tflops" in metrics:
        metrics["mfu"] = metric_from("mfu", [t / peak for t in metrics["achieved_tflops"].samples], "fraction", HIGHER)
    details["gpt"] = {**loop.config, "parameters": sum(p.numel() for p in loop.model.parameters()),
                      "tokens_per_step": loop.samples_per_step, "peak_tflops": peak, "samples": "tokens"}
    env = environment(scenario)
    env["channels_last"] = None
    return metrics, losses, details, env
