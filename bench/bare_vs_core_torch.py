"""Is the PyTorch core as fast as a hand-written torchvision loop?  (Not a pytest test.)

The same configuration is trained twice in one process: by a bare loop written the
way the PyTorch AMP recipe and the ImageNet example write it, and by pytest-dlperf's
``TorchTrainingLoop`` timed by the plugin's own harness (``measure``). Rounds
alternate in ABBA order so drift of the machine hits both alike; every round starts
and ends with the device synchronised.
Prints ``bare <median> img/s, dlperf <median> img/s, ratio <x>`` and exits 1 when the
ratio is outside 1 +/- ``--max-gap``.

    python bench/bare_vs_core_torch.py --model resnet18 --batch-size 16 --image-size 64
    python bench/bare_vs_core_torch.py --device cuda --model resnet50 --batch-size 128 --image-size 224 \
        --precision amp_fp16

With ``--compile MODE`` (default, max-autotune; ``--cuda-graphs`` adds CUDA graphs) both loops
``torch.compile`` their model the same way (the bare one as the PyTorch 2 tutorial does:
``model = torch.compile(model, mode=...)``, marking each step for cudagraph trees), compile
in the warm-up, and the first step of each is printed: the bare loop compiles first and cold
(with a fresh TORCHINDUCTOR_CACHE_DIR), the core's loop then reuses inductor's cache of the same
graphs (CPU, ResNet-18 64 px: 48.8 s, then 0.22 s). Achieved TFLOP/s (FLOPs
of forward+backward, torch's FlopCounterMode) and, with ``--peak-tflops``, the model FLOPs
utilisation are printed for the core's rate:

    python bench/bare_vs_core_torch.py --device cuda --model resnet50 --batch-size 128 --image-size 224 \
        --precision amp_fp16 --compile max-autotune --cuda-graphs --max-gap 0.01 --peak-tflops 989.4
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Callable

import torch
import torchvision

from pytest_dlperf.child.cores.torch_core import TorchTrainingLoop, apply_threads, configure_precision
from pytest_dlperf.child.measure import measure
from pytest_dlperf.scenario import Scenario
from pytest_dlperf.child.synthetic import batches


def bare_loop(s: Scenario) -> Callable[[], torch.Tensor]:
    """The hand-written loop: torchvision model, SGD, autocast + GradScaler for fp16, torch.compile if asked."""
    device = torch.device(s.device)
    fmt = torch.channels_last if s.uses_channels_last else torch.contiguous_format
    model = torchvision.models.get_model(s.model, weights=None, num_classes=s.num_classes).to(device)
    model = model.to(memory_format=fmt).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay)
    if s.torch_compile_mode is not None:
        model = torch.compile(model, mode=s.torch_compile_mode)
    criterion = torch.nn.CrossEntropyLoss()
    dtype = {"amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}.get(s.precision)
    scaler = torch.amp.GradScaler(device.type, enabled=s.precision == "amp_fp16")
    data = [(torch.from_numpy(x).to(device).contiguous(memory_format=fmt), torch.from_numpy(y).to(device))
            for x, y in batches(4, s.batch_size, s.image_size, s.num_classes, s.seed)]
    state = {"i": 0}

    def step() -> torch.Tensor:
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        if s.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()

    return step


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def bare_round(step: Callable[[], torch.Tensor], s: Scenario) -> float:
    sync(s.device)
    start = time.perf_counter()
    for _ in range(s.steps_per_round):
        step()
    sync(s.device)
    return s.batch_size * s.steps_per_round / (time.perf_counter() - start)


def core_round(loop: TorchTrainingLoop, s: Scenario) -> float:
    # the loops are warmed up (and compiled) by main(); measure() times rounds only
    metrics, _, _ = measure(loop, s.replace(warmup_steps=0, compile="off", cuda_graphs=False))
    return metrics["throughput"].value


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "tf32", "amp_fp16", "amp_bf16"))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=5, help="steps per loop before timing")
    parser.add_argument("--rounds", type=int, default=8, help="timed rounds per loop")
    parser.add_argument("--steps", type=int, default=6, help="steps per round")
    parser.add_argument("--max-gap", type=float, default=0.03, help="allowed |ratio - 1|")
    parser.add_argument("--compile", default="off", choices=("off", "default", "max-autotune"),
                        help="torch.compile both loops in this mode")
    parser.add_argument("--cuda-graphs", action="store_true", help="with --compile on CUDA: CUDA graphs too")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the GPU's dense peak for the precision (H100 SXM fp16/bf16: 989.4), for MFU")
    args = parser.parse_args(argv)

    s = Scenario(framework="torch", model=args.model, precision=args.precision, device=args.device,
                 batch_size=args.batch_size, image_size=args.image_size, num_classes=args.num_classes, lr=0.05,
                 warmup_steps=1, rounds=1, steps_per_round=args.steps, compile=args.compile,
                 cuda_graphs=args.cuda_graphs)
    apply_threads(s)
    configure_precision(s)  # TF32 flags and cudnn.benchmark: shared by both loops
    torch.manual_seed(s.seed)
    core = TorchTrainingLoop(s)
    bare = bare_loop(s)
    for name, step in (("bare", bare), ("dlperf", core.step)):
        sync(s.device)
        started = time.perf_counter()
        step()
        sync(s.device)
        first = time.perf_counter() - started
        for _ in range(args.warmup - 1):
            step()
        sync(s.device)
        print(f"{name}: first step {first:.2f} s, warm-up of {args.warmup} steps {time.perf_counter() - started:.2f} s"
              + (" (compiling)" if s.torch_compile_mode else ""), flush=True)
    bare_rates: list[float] = []
    core_rates: list[float] = []
    for r in range(args.rounds):
        if r % 2 == 0:  # ABBA: neither loop always runs first
            bare_rates.append(bare_round(bare, s))
            core_rates.append(core_round(core, s))
        else:
            core_rates.append(core_round(core, s))
            bare_rates.append(bare_round(bare, s))
        print(f"round {r + 1}/{args.rounds}: bare {bare_rates[-1]:.2f}, dlperf {core_rates[-1]:.2f} img/s", flush=True)
    bare_median, core_median = statistics.median(bare_rates), statistics.median(core_rates)
    ratio = core_median / bare_median
    where = torch.cuda.get_device_name() if s.device == "cuda" else f"CPU x{torch.get_num_threads()} threads"
    print(f"{s.model} {s.precision} batch {s.batch_size} {s.image_size}px on {where}, torch {torch.__version__}")
    print(f"bare {bare_median:.2f} img/s, dlperf {core_median:.2f} img/s, ratio {ratio:.3f}")
    if core.flops_per_step:
        tflops = core.flops_per_step * core_median / s.batch_size / 1e12
        mfu = f", MFU {tflops / args.peak_tflops:.1%} of {args.peak_tflops:g}" if args.peak_tflops else ""
        print(f"dlperf achieved {tflops:.3g} TFLOP/s (forward+backward FLOPs){mfu}")
    return 0 if abs(ratio - 1.0) <= args.max_gap else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
