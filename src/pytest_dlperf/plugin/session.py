"""The run's state: settings, the baseline store, every verdict, and the test-facing fixture."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

from pytest_dlperf.plugin import markers
from pytest_dlperf.judging.baselines import Baseline, BaselineFileError, BaselineStore, entry_key, split_entry_key
from pytest_dlperf.plugin.console import Console
from pytest_dlperf.processes.devicelock import DeviceLockTimeout, announce_waits_with, device_lock, visible_gpus
from pytest_dlperf.child.environment import gpus, hardware_key
from pytest_dlperf.profiles import scenario_for
from pytest_dlperf.processes.paired import DEFAULT_PROCESSES, PairedResult, Variant, pairs_for, run_paired
from pytest_dlperf.result import HIGHER, Metric, TrainingResult, metric_from, paired_metric
from pytest_dlperf.processes.runner import ScenarioFailed, run_loader_only, run_scenario
from pytest_dlperf.scenario import Scenario, ScenarioError
from pytest_dlperf.plugin.settings import Settings
from pytest_dlperf.judging.stats import PairedRatio, decide
from pytest_dlperf.judging.gates import family_alpha, floor_for
from pytest_dlperf.judging.verdict import (CHECKED_METRICS, IMPROVEMENT, INCONCLUSIVE, MISSING, REGRESSION, UPDATED,
                                           Verdict, compare, failure_message)

#: Metrics compared with baselines. The rest are recorded (JUnit, baselines on update) but not judged:
#: achieved TFLOP/s is a multiple of throughput, and step time its reciprocal per step; judging them too
#: would report one change two or three times and double the chance of a false alarm.
SOFTWARE_KEYS = ("framework", "framework_version", "python", "cuda_version", "cudnn_version", "gpu_driver")


def software_of(result: TrainingResult) -> dict[str, Any]:
    env = result.environment
    return {k: env[k] for k in SOFTWARE_KEYS if env.get(k) is not None}


class DlperfSession:
    """Owns what the run measured; baselines are read once and written once."""

    def __init__(self, config: pytest.Config, settings: Settings):
        self.config = config
        self.settings = settings
        self.store = BaselineStore(settings.baseline_dir)
        self.verdicts: list[Verdict] = []
        self.written: list[Path] = []
        #: Node ids of the selected tests, in run order.
        self.collected: list[str] = []
        self.filtered = False
        #: A/B mode: (test, label, candidate/reference ratio, decision) per scenario.
        self.ab_outcomes: list[tuple[str, str, PairedRatio, str]] = []
        self.console = Console(config)
        #: pytest-benchmark integration (``benchmark.BenchmarkExport``), when that plugin is active.
        self.benchmarks: Any = None
        #: How many figures of the selected tests have baselines: the family the suite-wide error control covers.
        self.family = 0

    def count_family(self) -> int:
        """The judged figures the selected tests have baselines for, on this host's machines and profile
        (known before any test runs, so every figure's level is set the same way, xdist workers included)."""
        collected = set(self.collected)
        count = 0
        for hw in self.hardware_keys():
            entries = self.store.entries(hw)
            for key in self.store.keys(hw, self.settings.profile):
                if split_entry_key(key)[0] in collected:
                    count += sum(1 for name in entries[key] if name in CHECKED_METRICS)
        self.family = count
        return count

    @property
    def figure_alpha(self) -> float:
        """The level each figure is judged at (Bonferroni over :attr:`family`)."""
        return family_alpha(self.family)

    def start(self) -> None:
        announce_waits_with(self.console.line)
        try:
            self.store.check_all_readable()
        except BaselineFileError as exc:
            raise pytest.UsageError(str(exc)) from None

    def finish(self) -> None:
        announce_waits_with(None)
        if self.settings.update and self.store.staged_count:
            self.written = self.store.flush()

    def worker_output(self) -> dict[str, Any]:
        """What an xdist worker hands the controller (``config.workeroutput``): plain, picklable data."""
        return {"verdicts": [dataclasses.asdict(v) for v in self.verdicts],
                "written": [str(p) for p in self.written],
                "ab_outcomes": [(test, label, ratio.to_dict(), decision)
                                for test, label, ratio, decision in self.ab_outcomes],
                "collected": self.collected, "filtered": self.filtered, "family": self.family}

    def merge_worker(self, output: dict[str, Any]) -> None:
        """On the xdist controller: add a finished worker's verdicts, written files and A/B outcomes,
        so its summary and counts are the ones a run without ``-n`` prints (as syrupy merges its workers)."""
        self.verdicts += [Verdict(**v) for v in output.get("verdicts", [])]
        self.written += [Path(p) for p in output.get("written", []) if Path(p) not in self.written]
        self.ab_outcomes += [(test, label, PairedRatio.from_dict(ratio), decision)
                             for test, label, ratio, decision in output.get("ab_outcomes", [])]
        self.collected += [nodeid for nodeid in output.get("collected", []) if nodeid not in self.collected]
        self.filtered = self.filtered or bool(output.get("filtered"))
        self.family = max(self.family, int(output.get("family", 0)))
        # rows in the order a run without -n gives them: the tests' collection order (stable within a test)
        order = {nodeid: i for i, nodeid in enumerate(self.collected)}
        self.verdicts.sort(key=lambda v: order.get(v.test, len(order)))
        self.ab_outcomes.sort(key=lambda outcome: order.get(outcome[0], len(order)))

    def hardware_keys(self) -> list[str]:
        """The baseline files this host's figures go to: its CPUs', and its GPUs' when it has any."""
        return [hardware_key("cpu")] + ([hardware_key("cuda")] if gpus() else [])

    def unused(self) -> list[str]:
        """Entries of this run's machines and profile whose test no longer exists (unfiltered runs only)."""
        if self.filtered:
            return []
        hardware = {v.hardware for v in self.verdicts if v.hardware}
        collected = set(self.collected)
        return [key for hw in sorted(hardware) for key in self.store.keys(hw, self.settings.profile)
                if split_entry_key(key)[0] not in collected]


class DlperfRun:
    """The ``dlperf`` fixture: build scenarios, train them, check them against baselines."""

    def __init__(self, session: DlperfSession, item: pytest.Item, workdir: Path):
        self._session = session
        self._item = item
        self._workdir = workdir
        self._derived: list[tuple[str, Metric]] = []
        self._results: list[TrainingResult] = []

    @property
    def profile(self) -> str:
        return self._session.settings.profile

    @property
    def device(self) -> str:
        return "cuda" if self._item.get_closest_marker("gpu") else "cpu"

    def scenario(self, framework: str, model: str, **overrides: Any) -> Scenario:
        """A scenario in this run's profile; ``overrides`` win over the profile's shapes."""
        settings = self._session.settings
        overrides.setdefault("device", self.device)
        overrides.setdefault("timeout", settings.timeout)
        if settings.rounds is not None:
            overrides.setdefault("rounds", settings.rounds)
        if overrides.get("step") is not None or overrides.get("model_factory") is not None:
            # your module may sit beside the test file, at the rootdir or in pytest's `pythonpath` folders
            # (a src/ layout): the child looks there first, then in its installed packages
            config = self._item.config
            folders = (str(self._item.path.parent), str(config.rootpath),
                       *(str(p) for p in config.getini("pythonpath")))
            overrides.setdefault("import_path", tuple(dict.fromkeys(folders)))
        try:
            return scenario_for(self.profile, framework, model, **overrides)
        except ScenarioError as exc:
            pytest.fail(f"{self._item.nodeid}: bad scenario: {exc}", pytrace=False)

    def launcher(self) -> Any:
        """The launcher the user chose (``--dlperf-launcher``) for distributed jobs' ranks."""
        from pytest_dlperf.processes.distributed.launchers import make_launcher

        settings = self._session.settings
        return make_launcher(settings.launcher, settings.hostfile)

    def run(self, scenario: Scenario) -> TrainingResult:
        """Train ``scenario`` in a child process; a crash or hang fails this test only.

        In A/B mode (``--dlperf-reference``) the scenario also runs under the reference
        interpreter, interleaved with this one (:meth:`run_paired`), and the test fails
        when this environment is slower than the A/B threshold.
        """
        if self._session.settings.reference:
            return self._run_ab(scenario)
        return self.record(self._measured(scenario, f"training {scenario.describe()}",
                                          lambda progress: run_scenario(scenario, self._workdir, progress)))

    def run_loader_only(self, scenario: Scenario) -> TrainingResult:
        """The input pipeline of ``scenario`` alone (:mod:`pytest_dlperf.child.loaders`), holding the device lock
        like a training run; a crash or hang fails this test only. Not recorded: the caller picks the
        figures to hold (``dlperf.metric``), as test_input_pipeline does with its throughput."""
        intro = f"reading {scenario.data} with {scenario.loader_workers} loader workers, no training"
        return self._measured(scenario, intro,
                              lambda progress: run_loader_only(scenario, self._workdir / "loader", progress))

    def _measured(self, scenario: Scenario, intro: str,
                  child: Callable[[Callable[[str], None] | None], TrainingResult]) -> TrainingResult:
        """Run ``child`` (given the progress writer) holding the devices' lock, with a start and an end
        line on the terminal; a crash, hang or lock timeout fails this test with the report."""
        console = self._session.console
        say = console.for_scenario(scenario.label)
        problem = ""
        try:
            with self._exclusive_devices(scenario):
                say(intro)
                started = time.monotonic()
                result = child(console.child_progress(scenario.label))
        except ScenarioFailed as exc:
            problem = exc.report()
        except DeviceLockTimeout as exc:
            problem = f"scenario {scenario.label!r} not run: {exc}"
        if problem:  # failed outside the handler, so pytest shows the report alone, not a chain
            say(f"failed: {problem.splitlines()[0]}")
            pytest.fail(problem, pytrace=False)
        say(f"done in {time.monotonic() - started:.0f} s: {_headline(result)}")
        return result

    def run_paired(self, *variants: Scenario | Variant, pairs: int | None = None,
                   processes: int | None = None, generations: int | None = None, settle_seconds: float = 0.0,
                   record: bool = True, build_one_at_a_time: bool | None = None,
                   decided: Callable[[dict[str, PairedRatio]], bool] | None = None,
                   max_generations: int | None = None) -> PairedResult:
        """Train ``variants`` interleaved (:mod:`pytest_dlperf.processes.paired`); the first is the reference.

        Every variant's merged result is recorded like :meth:`run`'s (``record=False``: the caller
        records each with :meth:`record`, e.g. one test per variant of a shared group); each other variant's
        ratio over the first is in ``.ratios`` (give it to :meth:`speedup`). The device lock
        is held for the whole group. ``build_one_at_a_time``: each child builds and warms up alone
        (compiled scenarios: their compile time is measured without the other children's load);
        None: :func:`pytest_dlperf.processes.paired.build_width` chooses (one or two at a time on CPU, all on GPU).
        ``generations`` (default ``--dlperf-generations``): successive sets of fresh processes;
        ``decided``/``max_generations``: more generations while the ratios are not decided
        (:func:`pytest_dlperf.processes.paired.run_paired`).
        """
        settings = self._session.settings
        if len(variants) < 2:
            pytest.fail(f"{self._item.nodeid}: dlperf.run_paired() needs at least 2 scenarios, got {len(variants)}",
                        pytrace=False)
        first = variants[0].scenario if isinstance(variants[0], Variant) else variants[0]
        if processes is None:
            processes = settings.processes or (1 if first.device == "cuda" else DEFAULT_PROCESSES)
        generations = generations or settings.generations
        console = self._session.console
        keys = [v.key if isinstance(v, Variant) else v.label for v in variants]
        say = console.for_scenario(" vs ".join(keys) if len(keys) <= 3 else f"{keys[0]} vs {len(keys) - 1} variants")
        problem = ""
        try:
            with self._exclusive_devices(first):
                # what each child really runs: the pairs' rounds, not the scenario's own round count
                total = pairs_for(pairs or settings.pairs, processes, generations)
                fresh = f" x {generations} generations" if generations > 1 else ""
                say(f"training interleaved, {total} pairs x {processes} process{'es' if processes > 1 else ''}"
                    f"{fresh} per variant: {first.replace(rounds=total // (processes * generations)).describe()}")
                started = time.monotonic()
                paired = run_paired(list(variants), pairs=pairs or settings.pairs, processes=processes,
                                    generations=generations, workdir=self._workdir,
                                    on_progress=console.child_progress("paired"),
                                    settle_seconds=settle_seconds, build_one_at_a_time=build_one_at_a_time,
                                    decided=decided, max_generations=max_generations)
        except ScenarioFailed as exc:
            problem = exc.report()
        except ScenarioError as exc:
            problem = f"{self._item.nodeid}: bad paired run: {exc}"
        except DeviceLockTimeout as exc:
            problem = f"paired scenarios {[getattr(v, 'label', v) for v in variants]!r} not run: {exc}"
        if problem:
            say(f"failed: {problem.splitlines()[0]}")
            pytest.fail(problem, pytrace=False)
        say(f"done in {time.monotonic() - started:.0f} s: "
            + ", ".join(f"{key} {ratio.estimate:.3f}x" for key, ratio in paired.ratios.items())
            + f" over {paired.reference}")
        for key, result in paired.results.items():
            if record and (key != paired.reference or not settings.reference):
                self.record(result)
        props = self._item.user_properties
        for key, ratio in paired.ratios.items() if record else ():
            props.append((f"dlperf.{key}.paired_ratio", f"{ratio.estimate:.6g}"))
            props.append((f"dlperf.{key}.paired_interval", f"{ratio.low:.6g} {ratio.high:.6g}"))
            props.append((f"dlperf.{key}.paired_over", paired.reference))
            props.append((f"dlperf.{key}.pairs", str(ratio.n)))
        return paired

    def speedup(self, label: str, ratio: PairedRatio, floor: float | None = None) -> Metric:
        """A paired ratio as the derived ``speedup`` metric: per-pair ratios, estimate and interval
        go to the baselines and are judged by ``check`` with the other figures. ``floor``: the
        speedup the test claims (it asserts it itself), recorded so charts draw it."""
        metric = paired_metric("speedup", ratio)
        self._add_derived(label, metric)
        if floor is not None:
            self._item.user_properties.append((f"dlperf.{label}.speedup.floor", f"{floor:.6g}"))
        return metric

    def _run_ab(self, scenario: Scenario) -> TrainingResult:
        settings = self._session.settings
        reference = Variant(scenario, python=settings.reference, name=f"{scenario.label}@reference")

        def decided(ratios: dict[str, PairedRatio]) -> bool:
            return all(decide(r, settings.ab_threshold) != INCONCLUSIVE for r in ratios.values())

        # at least two generations, so the interval rests on more than one process pair
        paired = self.run_paired(reference, Variant(scenario), generations=max(settings.generations, 2),
                                 decided=decided, max_generations=settings.max_generations)
        result = paired.results[scenario.label]
        ratio = paired.ratio(scenario.label)
        verdict = decide(ratio, settings.ab_threshold)
        ref_software = software_of(paired.results[reference.key])
        props = self._item.user_properties
        props.append((f"dlperf.{scenario.label}.ab_ratio", f"{ratio.estimate:.6g}"))
        props.append((f"dlperf.{scenario.label}.ab_interval", f"{ratio.low:.6g} {ratio.high:.6g}"))
        props.append((f"dlperf.{scenario.label}.ab_verdict", verdict))
        props.append((f"dlperf.{scenario.label}.reference_software",
                      " ".join(f"{k}={v}" for k, v in ref_software.items())))
        self._session.ab_outcomes.append((self._item.nodeid, scenario.label, ratio, verdict))
        if verdict == REGRESSION:
            stacks = (f"candidate {_stack(software_of(result))} vs reference {_stack(ref_software)}")
            pytest.fail(f"A/B slower: {scenario.label} throughput candidate/reference {ratio.describe()}, "
                        f"beyond the {settings.ab_threshold:.0%} threshold; {stacks}\n"
                        f"reference interpreter: {settings.reference}", pytrace=False)
        return result

    def record(self, result: TrainingResult) -> TrainingResult:
        """Add a result's figures to this test's report (``run`` does it for its own results;
        ``check`` for any result it is given that was not recorded yet)."""
        scenario = result.scenario
        self._results.append(result)
        if self._session.benchmarks is not None:
            self._session.benchmarks.add(self._item, result, software_of(result))
        props = self._item.user_properties
        props.append(("dlperf.hardware", result.environment.get("hardware_key", "")))
        props.append((f"dlperf.{result.label}.scenario", scenario.describe()))
        props.append((f"dlperf.{result.label}.software",
                      " ".join(f"{k}={v}" for k, v in software_of(result).items())))
        for metric in result.metrics.values():
            s = metric.summary
            props.append((f"dlperf.{result.label}.{metric.name}", f"{s.median:.6g}"))
            props.append((f"dlperf.{result.label}.{metric.name}.iqr", f"{s.iqr:.6g}"))
            props.append((f"dlperf.{result.label}.{metric.name}.n", str(s.n)))
            props.append((f"dlperf.{result.label}.{metric.name}.unit", metric.unit))
            props.append((f"dlperf.{result.label}.{metric.name}.direction", metric.direction))
            props.append((f"dlperf.{result.label}.{metric.name}.samples", _samples_text(metric)))
        if result.environment.get("workers"):
            props.append((f"dlperf.{result.label}.workers", str(result.environment["workers"])))
        return result

    def _exclusive_devices(self, scenario: Scenario) -> Any:
        """Every scenario holds its devices' locks, so two pytest runs never time one device at once:
        the GPUs it sees, or the host's CPUs for a CPU scenario (two runs sharing cores distort
        each other's figures just as much; measured: -55% to -90% in a clash of two CI runs)."""
        devices = visible_gpus(environ={**os.environ, **scenario.env}) if scenario.device == "cuda" else ["cpu"]
        return device_lock(devices, timeout=scenario.timeout, owner=self._item.nodeid,
                           on_wait=self._session.console.for_scenario(scenario.label))

    def metric(self, label: str, name: str, samples: Sequence[float], unit: str, direction: str = HIGHER) -> Metric:
        """A derived figure (a speedup, a scaling efficiency) checked with the others by ``check``."""
        metric = metric_from(name, samples, unit, direction)
        self._add_derived(label, metric)
        return metric

    def _add_derived(self, label: str, metric: Metric) -> None:
        name, unit, direction = metric.name, metric.unit, metric.direction
        self._derived.append((label, metric))
        props = self._item.user_properties
        props.append((f"dlperf.{label}.{name}", f"{metric.value:.6g}"))
        props.append((f"dlperf.{label}.{name}.iqr", f"{metric.summary.iqr:.6g}"))
        props.append((f"dlperf.{label}.{name}.unit", unit))
        props.append((f"dlperf.{label}.{name}.direction", direction))
        props.append((f"dlperf.{label}.{name}.samples", _samples_text(metric)))
        if metric.interval is not None:
            props.append((f"dlperf.{label}.{name}.interval", f"{metric.interval[0]:.6g} {metric.interval[1]:.6g}"))

    def check(self, *results: TrainingResult, tolerance: float | None = None) -> list[Verdict]:
        """Compare every checked metric with this machine's baseline; fail on a regression.

        With ``--update-baselines`` the figures are staged for writing instead.
        """
        settings = self._session.settings
        marked = markers.tolerance_of(self._item)
        nodeid = self._item.nodeid
        for result in results:  # e.g. a distributed job's: every judged figure is in the report with its value
            if not any(result is seen for seen in self._results):
                self.record(result)
        pending: list[tuple[str, Metric, TrainingResult]] = [
            (r.label, m, r) for r in results for m in r.metrics.values() if m.name in CHECKED_METRICS
        ]
        anchor = results[0] if results else (self._results[0] if self._results else None)
        if anchor is None:
            pytest.fail(f"{nodeid}: dlperf.check() needs at least one result from dlperf.run()", pytrace=False)
        pending += [(label, m, anchor) for label, m in self._derived]
        verdicts = []
        store = self._session.store
        for label, metric, result in pending:
            hw = result.environment.get("hardware_key", "unknown")
            key = entry_key(nodeid, label, self.profile)
            software = software_of(result)
            floor = floor_for(metric.name, settings.tolerance, marked.for_metric(metric.name), tolerance)
            baseline = store.lookup(hw, key, metric.name)
            framework = str(software.get("framework", ""))
            verdict = compare(nodeid, label, metric, baseline, floor, software,
                              reasons=result.details.get(f"{metric.name}_reasons", ()),
                              pool=store.pools(hw).get((metric.name, framework)),
                              alpha=self._session.figure_alpha)
            if settings.update:
                # a run beyond its gate is a real change being accepted: the history starts again from it
                store.stage(hw, _hardware_record(result), key, metric, software,
                            restart=verdict.status in (REGRESSION, IMPROVEMENT))
                verdict = dataclasses.replace(verdict, status=UPDATED, baseline=None, gate=None, noise=None,
                                              p_value=None)
            verdict = dataclasses.replace(verdict, hardware=hw)
            verdicts.append(verdict)
            props = self._item.user_properties
            props.append((f"dlperf.{label}.{metric.name}.verdict", verdict.status))
            props.append((f"dlperf.{label}.{metric.name}.tolerance", f"{verdict.tolerance:.6g}"))
            if verdict.baseline is not None:
                props.append((f"dlperf.{label}.{metric.name}.baseline", f"{verdict.baseline:.6g}"))
                props.append((f"dlperf.{label}.{metric.name}.runs", str(verdict.runs)))
                props.append((f"dlperf.{label}.{metric.name}.detectable",
                              "unknown" if verdict.gate is None else f"{verdict.gate:.6g}"))
                if verdict.noise is not None:
                    props.append((f"dlperf.{label}.{metric.name}.noise", f"{verdict.noise:.6g}"))
        self._derived.clear()
        self._session.verdicts += verdicts
        if self._session.benchmarks is not None:
            self._session.benchmarks.add_verdicts(verdicts)
        # In A/B mode the reference environment, run beside this one, is the baseline that fails a test
        # (``run``); the stored figures are still compared and shown in the summary.
        if any(v.status == REGRESSION for v in verdicts) and not settings.reference:
            pytest.fail(failure_message(nodeid, verdicts), pytrace=False)
        missing = [v for v in verdicts if v.status == MISSING]
        if missing and settings.require_baselines:
            hw = missing[0].hardware
            pytest.fail(f"{nodeid}: no baseline for {', '.join(f'{v.label} {v.metric}' for v in missing)} on "
                        f"{hw} ({self._session.store.path(hw)}), and --dlperf-require-baselines is set. Record "
                        "them on this machine with pytest --update-baselines, then commit baselines/", pytrace=False)
        return verdicts

    def stored(self, result: TrainingResult, metric: str, label: str | None = None) -> Baseline | None:
        """The stored baseline of one of this test's figures on ``result``'s machine (``label``: a
        derived figure's, such as a speedup's), or None when none is recorded."""
        hw = result.environment.get("hardware_key", "unknown")
        return self._session.store.lookup(hw, entry_key(self._item.nodeid, label or result.label, self.profile),
                                          metric)

    @property
    def updating(self) -> bool:
        """``--update-baselines``: this run records its figures instead of being judged by them."""
        return bool(self._session.settings.update)

    @property
    def missing(self) -> list[Verdict]:
        return [v for v in self._session.verdicts if v.test == self._item.nodeid and v.status == MISSING]


def _headline(result: TrainingResult) -> str:
    """The figure a person watching wants first: throughput, median of the rounds."""
    if "throughput" not in result.metrics:
        return "no throughput measured"
    m = result.metrics["throughput"]
    return f"{m.value:.4g} {m.unit} (median of {m.summary.n} rounds)"


def _samples_text(metric: Metric) -> str:
    """Every sample, so ``dlperf compare`` judges two reports with the tests' rule (verdict.compare)."""
    return " ".join(f"{x:.6g}" for x in metric.samples)


def _stack(software: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in software.items()) or "unknown software"


def _hardware_record(result: TrainingResult) -> dict[str, Any]:
    env = result.environment
    keys = ("cpu_model", "usable_cpus", "physical_cores", "numa_nodes", "machine", "gpus", "gpu_memory_mib")
    return {k: env[k] for k in keys if k in env}
