"""The gpu, precision and distributed fixtures, as a team writing its own perf tests uses them (pytester)."""

from __future__ import annotations

import subprocess

import pytest

from pytest_dlperf.plugin import fixtures
from pytest_dlperf.child.gpus import Gpu
from pytest_dlperf.processes.distributed.netns import unavailable_reason


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def test_gpu_fixture_skips_with_the_reason_without_a_gpu(pytester: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU, also on a GPU runner
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpu
        def test_one(gpu): pass

        @pytest.mark.gpu(count=2)
        def test_two(gpu): pass
    """)
    result = run(pytester, "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*needs 1 CUDA device(s), found 0: run it on a GPU runner (pytest -m gpu)*",
                                 "*needs 2 CUDA device(s), found 0: run it on a GPU runner (pytest -m gpu)*"])


def test_gpu_fixture_describes_the_device_and_holds_its_lock_for_the_test(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    h100 = (Gpu("NVIDIA H100 80GB HBM3", "550.54", 81559),)
    monkeypatch.setattr(fixtures, "gpus", lambda: h100)
    monkeypatch.setattr("pytest_dlperf.plugin.markers.gpus", lambda: h100)
    monkeypatch.setenv("DLPERF_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    pytester.makepyfile("""
        import pytest
        from pytest_dlperf.processes.devicelock import holders

        @pytest.mark.gpu
        def test_on_gpu(gpu, request):
            assert gpu.describe() == "NVIDIA H100 80GB HBM3 (81559 MiB, driver 550.54)"
            assert gpu.count == 1
            held = holders()
            assert list(held) == ["gpu0.lock"], held
            assert request.node.nodeid in held["gpu0.lock"]
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    from pytest_dlperf.processes.devicelock import holders

    assert holders(tmp_path / "locks") == {}, "the lock outlived the test"


def test_precision_fixture_gives_one_test_per_precision_with_readable_ids(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.precision("fp32", "amp_bf16")
        @pytest.mark.parametrize("model", ["resnet18", "resnet50"])
        def test_cpu(precision, model):
            assert precision in ("fp32", "amp_bf16")

        @pytest.mark.precision("amp_fp16")
        def test_one(precision):
            assert precision == "amp_fp16"
    """)
    result = run(pytester, "--collect-only", "-q")
    result.stdout.fnmatch_lines([
        "*test_cpu[[]fp32-resnet18[]]", "*test_cpu[[]fp32-resnet50[]]",
        "*test_cpu[[]amp_bf16-resnet18[]]", "*test_cpu[[]amp_bf16-resnet50[]]",
        "*test_one[[]amp_fp16[]]", "5 tests collected*"])
    run(pytester).assert_outcomes(passed=5)


@pytest.mark.parametrize("source, message", [
    ("@pytest.mark.precision('fp32')\ndef test_x(): pass",
     "*precision: drives the precision fixture, which this test does not ask for: add a 'precision' argument*"),
    ("def test_x(precision): pass", "*the precision fixture needs @pytest.mark.precision on the test*"),
    ("def test_x(gpu): pass", "*the gpu fixture needs @pytest.mark.gpu on the test*"),
    ("def test_x(distributed): pass", "*the distributed fixture needs @pytest.mark.distributed on the test*"),
    ("@pytest.mark.precision('fp8')\ndef test_x(precision): pass", "*precision: 'fp8' is not allowed*"),
    ("@pytest.mark.distributed(workers=2)\ndef test_x(): pass",
     "*distributed: drives the distributed fixture, which this test does not ask for*"),
    ("@pytest.mark.distributed(workers=2, launcher='local', rate='1gbit')\ndef test_x(distributed): pass",
     "*distributed: rate='1gbit' needs launcher='netns'*"),
    ("@pytest.mark.distributed(workers=2, launcher='netns', rate='fast')\ndef test_x(distributed): pass",
     "*distributed: rate 'fast' is not a tc rate; write e.g. '100mbit'*"),
    ("@pytest.mark.distributed(hosts=2)\ndef test_x(distributed): pass",
     "*distributed: takes only workers=, launcher= and rate=*"),
], ids=["precision-marker-without-fixture", "precision-fixture-without-marker", "gpu-fixture-without-marker",
        "distributed-fixture-without-marker", "unknown-precision",
        "distributed-marker-without-fixture", "rate-without-netns", "bad-rate", "unknown-argument"])
def test_marker_and_fixture_misuse_is_a_usage_error(pytester: pytest.Pytester, source: str, message: str) -> None:
    pytester.makepyfile("import pytest\n" + source + "\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    output = result.stdout.str() + "\n" + result.stderr.str()
    pytest.LineMatcher(output.splitlines()).fnmatch_lines(["ERROR: " + message])
    assert "Traceback" not in output and "pluggy/" not in output, output


def test_a_parametrized_argument_named_like_a_fixture_is_the_tests_own(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.parametrize("gpu", ["a100", "h100"])
        @pytest.mark.parametrize("precision", ["fp32"])
        def test_x(gpu, precision):
            assert gpu in ("a100", "h100") and precision == "fp32"
    """)
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_a_gpu_marker_alone_selects_and_skips_without_devices(pytester: pytest.Pytester, monkeypatch) -> None:
    """A ``gpu`` marker needs no fixture: it selects the test for ``-m gpu`` and skips it without devices
    (``dlperf.scenario`` then trains on cuda; the fixture would add a whole-test lock)."""
    monkeypatch.setattr("pytest_dlperf.plugin.markers.gpus", lambda: [])
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpu
        def test_on_gpu():
            pass

        def test_on_cpu():
            pass
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-m", "gpu", "-rs")
    result.assert_outcomes(skipped=1, deselected=1)
    result.stdout.fnmatch_lines(["*needs 1 CUDA device(s), found 0: run it on a GPU runner*"])


def test_distributed_fixture_gives_local_hosts_and_skips_a_launcher_it_cannot_have(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.distributed(workers=2, launcher="local")
        def test_local(distributed):
            assert distributed.name == "local" and distributed.workers == 2
            assert distributed.addresses == ("127.0.0.1",)
            assert distributed.launcher.argv(1, ["python", "-V"], {}) == ["python", "-V"]

        @pytest.mark.distributed(workers=2)
        def test_users_launcher(distributed):
            assert distributed.name == "local"  # --dlperf-launcher's default

        @pytest.mark.distributed(workers=2, launcher="ssh")
        def test_ssh(distributed): pass
    """)
    result = run(pytester, "-rs")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*distributed(launcher='ssh'): the ssh launcher needs a hostfile "
                                 "(--dlperf-hostfile PATH)*"])


@pytest.mark.serial  # network namespaces
@pytest.mark.skipif(unavailable_reason() is not None, reason=unavailable_reason() or "")
def test_distributed_netns_hosts_exist_during_the_test_and_are_torn_down_after(pytester: pytest.Pytester,
                                                                                tmp_path) -> None:
    record = tmp_path / "namespaces.txt"
    pytester.makepyfile(f"""
        import subprocess
        import pytest

        @pytest.mark.distributed(workers=2, launcher="netns", rate="100mbit")
        def test_hosts(distributed):
            names = distributed.launcher.namespaces
            open({str(record)!r}, "w").write("\\n".join(names))
            listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
            assert all(n in listed for n in names) and len(names) == 2
            assert distributed.addresses == ("10.77.0.1", "10.77.0.2") and distributed.rate == "100mbit"
            inside = subprocess.run(distributed.launcher.argv(1, ["ip", "-4", "addr"], {{}}),
                                    capture_output=True, text=True).stdout
            assert "10.77.0.2" in inside, inside  # the launcher runs rank slot 1 on host 2
            raise RuntimeError("the test body fails")
    """)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    names = record.read_text().split()
    assert len(names) == 2
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(n in listed for n in names), f"namespaces left after the test: {listed}"
