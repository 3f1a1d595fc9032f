"""A tiny GPT-2 trained with the Hugging Face ``Trainer``; ``train(steps)`` adds pytest-dlperf's callback."""

import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

#: Seconds of extra work per step (the recipe runner's "slowed commit" sets it).
SLOWDOWN = 0.0


class Slowdown(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(SLOWDOWN)


def train(steps):
    torch.manual_seed(steps.scenario.seed)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=256, n_positions=32,
                                       bos_token_id=0, eos_token_id=0))
    ids = torch.randint(0, 256, (2048, 32))
    data = [{"input_ids": row, "labels": row} for row in ids]
    args = TrainingArguments(output_dir="hf_out", per_device_train_batch_size=steps.scenario.batch_size,
                             max_steps=steps.total, report_to=[], save_strategy="no", logging_strategy="no",
                             use_cpu=True, disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=data, callbacks=[Slowdown(), steps.huggingface()]).train()
