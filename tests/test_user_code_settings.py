"""Your code runs as it would in your own training: no settings, imports or units it did not ask for (pytester).

The built-in ResNets keep their switches (TF32 off for fp32, ``cudnn.benchmark`` on CUDA); a ``step=``
or ``loop=`` finds torch's defaults, no torchvision imported by the plugin, and throughput in samples/s.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_dlperf.scenario import Scenario, ScenarioError, entry_of

TORCH = pytest.mark.framework("torch")

#: What the child's torch holds when your code starts, written beside the module for the test to read.
PROBE_MODULE = """
import json, os, sys
import torch

def flags():
    return {"matmul_tf32": torch.backends.cuda.matmul.allow_tf32, "cudnn_tf32": torch.backends.cudnn.allow_tf32,
            "cudnn_benchmark": torch.backends.cudnn.benchmark, "threads": torch.get_num_threads(),
            "interop_threads": torch.get_num_interop_threads(), "torchvision": "torchvision" in sys.modules}

def make_step(scenario):
    with open(os.path.join(os.path.dirname(__file__), "flags.json"), "w") as fh:
        json.dump(flags(), fh)
    w = torch.zeros(4, requires_grad=True)

    def step():
        loss = ((w - 1.0) ** 2).sum()
        loss.backward()
        with torch.no_grad():
            w.sub_(0.1 * w.grad)
            w.grad = None
        return loss.detach()
    return step
"""

PROBE_TEST = """
def test_probe(dlperf):
    dlperf.run(dlperf.scenario("torch", "probe", step="probe:make_step", batch_size=2, warmup_steps=1, rounds=1,
                               steps_per_round=2))
"""

FRESH = ("import json, torch; print(json.dumps({'matmul_tf32': torch.backends.cuda.matmul.allow_tf32, "
         "'cudnn_tf32': torch.backends.cudnn.allow_tf32, 'cudnn_benchmark': torch.backends.cudnn.benchmark, "
         "'threads': torch.get_num_threads(), 'interop_threads': torch.get_num_interop_threads()}))")


def project(pytester: pytest.Pytester, test: str, **modules: str) -> None:
    folder = pytester.mkpydir("proj")
    (folder / "__init__.py").unlink()
    (folder / "test_mine.py").write_text(test)
    for name, text in modules.items():
        (folder / f"{name}.py").write_text(text)


@TORCH
def test_your_step_finds_torchs_own_backend_flags_and_no_torchvision(pytester: pytest.Pytester) -> None:
    project(pytester, PROBE_TEST, probe=PROBE_MODULE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "proj")
    result.assert_outcomes(passed=1)
    seen = json.loads((pytester.path / "proj" / "flags.json").read_text())
    fresh = json.loads(subprocess.run([sys.executable, "-c", FRESH], check=True, capture_output=True,
                                      text=True).stdout)
    assert seen.pop("torchvision") is False, "the plugin imported torchvision for a step that does not use it"
    assert seen == fresh  # cudnn.allow_tf32 is True in torch's defaults: the old prepare() turned it off


@TORCH
def test_asked_for_settings_still_apply_to_your_step(pytester: pytest.Pytester) -> None:
    project(pytester, PROBE_TEST.replace("steps_per_round=2", "steps_per_round=2, precision='tf32', "
                                         "intra_op_threads=1"), probe=PROBE_MODULE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "proj")
    result.assert_outcomes(passed=1)
    seen = json.loads((pytester.path / "proj" / "flags.json").read_text())
    assert seen["matmul_tf32"] is True and seen["cudnn_tf32"] is True and seen["threads"] == 1


def test_the_builtin_image_core_keeps_its_switches() -> None:
    torch = pytest.importorskip("torch")
    from pytest_dlperf.child.cores import torch_core

    before = torch.backends.cudnn.allow_tf32
    try:
        torch_core.prepare(Scenario("torch", "resnet18", precision="fp32"))
        assert torch.backends.cudnn.allow_tf32 is False and torch.backends.cuda.matmul.allow_tf32 is False
    finally:
        torch.backends.cudnn.allow_tf32 = before


def make_step(scenario: Scenario) -> None:
    """A module-level function of an importable module: accepted as an object."""


def test_a_module_level_function_becomes_its_name() -> None:
    s = Scenario("torch", "mine", step=make_step)
    assert s.step == f"{__name__}:make_step"
    assert Scenario.from_dict(json.loads(s.to_json())) == s
    assert entry_of("loop", make_step) == f"{__name__}:make_step"


def test_a_lambda_or_local_function_is_refused_with_the_fix() -> None:
    def local(scenario: Scenario) -> None:
        pass

    with pytest.raises(ScenarioError, match=r"step=<function .*<lambda>.* is a lambda: the training runs in a "
                                            r"child process, .* define it at the top level of a module"):
        Scenario("torch", "mine", step=lambda scenario: None)
    with pytest.raises(ScenarioError, match=r"loop=.* is a function defined inside another function: .*"
                                            r"e\.g\. loop='my_training:train'"):
        Scenario("torch", "mine", loop=local)
    with pytest.raises(ScenarioError, match=r"step=3 is not 'package.module:function'"):
        Scenario("torch", "mine", step=3)  # type: ignore[arg-type]
