"""Is the MXNet core as fast as a hand-written Gluon loop?  (Not a pytest test.)

The same configuration is trained twice in one process: by a bare loop written the
way MXNet's Gluon tutorials write it, and by pytest-dlperf's ``MXNetTrainingLoop``.
Rounds alternate (bare, core, core, bare, ...) so drift of the machine (other load,
thermal state) hits both alike; each round is timed between ``mx.nd.waitall()`` calls.
Prints ``bare <median> img/s, dlperf <median> img/s, ratio <x>`` and exits 1 when the
ratio is outside 1 +/- ``--max-gap``.

    python bench/bare_vs_core_mxnet.py --model resnet50 --batch-size 8 --image-size 64
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Callable

from pytest_dlperf.child.cores.mxnet_core import MXNetTrainingLoop, apply_environment
from pytest_dlperf.child.cores.mxnet_support import check_supported, default_kvstore
from pytest_dlperf.scenario import Scenario
from pytest_dlperf.child.synthetic import batches


def bare_loop(s: Scenario) -> Callable[[], Any]:
    """The hand-written Gluon loop: model zoo, Xavier init, hybridize, Trainer over a KVStore."""
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet.contrib import amp

    ctx = mx.gpu(0) if s.device == "cuda" else mx.cpu()
    if s.precision == "amp_fp16":
        amp.init()
    elif s.precision == "amp_bf16":
        amp.init(target_dtype="bfloat16")
    net = gluon.model_zoo.vision.get_model(f"{s.model}_v1", classes=s.num_classes)
    net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2), ctx=ctx)
    net.hybridize(static_alloc=True, static_shape=True)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    loss_fn.hybridize(static_alloc=True, static_shape=True)
    fp16 = s.precision == "amp_fp16"
    trainer = gluon.Trainer(
        net.collect_params(), "sgd",
        {"learning_rate": s.lr, "momentum": s.momentum, "wd": s.weight_decay, "multi_precision": fp16},
        kvstore=mx.kv.create(default_kvstore(s)), update_on_kvstore=False if fp16 else None,
    )
    if fp16:
        amp.init_trainer(trainer)
    data = [
        (mx.nd.array(x, ctx=ctx), mx.nd.array(y, ctx=ctx, dtype="float32"))
        for x, y in batches(4, s.batch_size, s.image_size, s.num_classes, s.seed)
    ]
    state = {"i": 0}

    def step() -> Any:
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        with autograd.record():
            loss = loss_fn(net(x), y)
            if fp16:
                with amp.scale_loss(loss, trainer) as scaled:
                    autograd.backward(scaled)
        if not fp16:
            loss.backward()
        trainer.step(s.batch_size)
        return loss

    return step


def timed_round(step: Callable[[], Any], steps: int, batch_size: int) -> float:
    import mxnet as mx

    mx.nd.waitall()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    mx.nd.waitall()
    return batch_size * steps / (time.perf_counter() - start)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", choices=("resnet18", "resnet50"))
    parser.add_argument("--precision", default="fp32", choices=("fp32", "amp_fp16", "amp_bf16"))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3, help="steps per loop before timing")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per loop")
    parser.add_argument("--steps", type=int, default=5, help="steps per round")
    parser.add_argument("--max-gap", type=float, default=0.03, help="allowed |ratio - 1|")
    args = parser.parse_args(argv)

    scenario = Scenario(
        framework="mxnet", model=args.model, precision=args.precision, device=args.device,
        batch_size=args.batch_size, image_size=args.image_size, num_classes=args.num_classes, lr=0.05,
    )
    check_supported(scenario)
    apply_environment(scenario)
    core = MXNetTrainingLoop(scenario)
    bare = bare_loop(scenario)
    for step in (bare, core.step):
        for _ in range(args.warmup):
            step()
    bare_rates, core_rates = [], []
    for r in range(args.rounds):
        # ABBA order: whichever loop runs second in a pair does not always gain (or lose) from it.
        if r % 2 == 0:
            bare_rates.append(timed_round(bare, args.steps, args.batch_size))
            core_rates.append(timed_round(core.step, args.steps, args.batch_size))
        else:
            core_rates.append(timed_round(core.step, args.steps, args.batch_size))
            bare_rates.append(timed_round(bare, args.steps, args.batch_size))
        print(f"round {r + 1}/{args.rounds}: bare {bare_rates[-1]:.2f}, dlperf {core_rates[-1]:.2f} img/s", flush=True)
    bare_median, core_median = statistics.median(bare_rates), statistics.median(core_rates)
    ratio = core_median / bare_median
    paired = statistics.median(c / b for b, c in zip(bare_rates, core_rates))
    print(f"{args.model} {args.precision} batch {args.batch_size} {args.image_size}px on {args.device}, "
          f"kvstore {core.kvstore.type}")
    print(f"median of per-round ratios (robust to drift between rounds): {paired:.3f}")
    print(f"bare {bare_median:.2f} img/s, dlperf {core_median:.2f} img/s, ratio {ratio:.3f}")
    return 0 if abs(ratio - 1.0) <= args.max_gap else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
