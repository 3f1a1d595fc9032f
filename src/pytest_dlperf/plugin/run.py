"""The ``dlperf`` fixture: builds a test's scenarios, runs them in children holding the devices' lock,
and hands their figures to its ledger (:mod:`pytest_dlperf.plugin.ledger`), which records them in the
report, derives figures and judges them; ``check`` fails the test on the verdicts."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any, Callable, Collection, Iterator, Mapping

import pytest

from pytest_dlperf import cost, figures, instructions
from pytest_dlperf.child.environment import emulated_precisions, isa_level
from pytest_dlperf.judging.stats import AB_CONFIDENCE, PairedRatio, decide, decided_at
from pytest_dlperf.judging.verdict import MISSING, REGRESSION, Verdict, failure_message
from pytest_dlperf.plugin.ledger import Ledger
from pytest_dlperf.plugin.session import DlperfSession
from pytest_dlperf.processes.devicelock import DeviceLockTimeout, device_lock, visible_gpus
from pytest_dlperf.processes.distributed import Job, JobFailed, jobs_lock
from pytest_dlperf.processes.distributed.paced_job import PairedJobs, run_paired_jobs
from pytest_dlperf.processes import owncode
from pytest_dlperf.processes.alternation import run_alternated
from pytest_dlperf.processes.revision import RevisionError
from pytest_dlperf.processes.paired import DEFAULT_PROCESSES, PairedResult, Variant, pairs_for, run_paired
from pytest_dlperf.processes.runner import (PACKAGE_DIR, ScenarioFailed, run_loader_only, run_scenario, run_scenarios,
                                           unshareable)
from pytest_dlperf.profiles import COUNTED_ROUNDS, EMULATED_SHAPE, scenario_for
from pytest_dlperf.protocol import NOT_IN_REFERENCE, TRAINER_LOOP
from pytest_dlperf.result import TrainingResult
from pytest_dlperf.scenario import Scenario, ScenarioError

#: A/B alternating in one process: the fewest processes whose spread makes an interval (t with 2 df).
ALTERNATION_MIN_PROCESSES = 3


class DlperfRun:
    """The ``dlperf`` fixture: build scenarios, train them, check them against baselines.

    It runs things; :attr:`ledger` records, derives, looks up and judges the figures.
    """

    def __init__(self, session: DlperfSession, item: pytest.Item, workdir: Path):
        self._session = session
        self._item = item
        self._workdir = workdir
        #: The test's figures: ``record``, ``metric``, ``speedup``, ``stored``, ``recorded_runs``, ``updating``.
        self.ledger = Ledger(session, item)

    @property
    def profile(self) -> str:
        return self._session.options.profile

    def scenario(self, framework: str, model: str, **overrides: Any) -> Scenario:
        """A scenario in this run's profile; ``overrides`` win over the profile's shapes."""
        options = self._session.options
        overrides.setdefault("device", "cuda" if self._item.get_closest_marker("gpu") else "cpu")
        overrides.setdefault("timeout", options.timeout)
        if options.rounds is not None:
            overrides.setdefault("rounds", options.rounds)
        if any(overrides.get(name) is not None for name in ("step", "loop", "model_factory")):
            # your module may sit beside the test file, at the rootdir, in pytest's `pythonpath` folders or
            # in the source folders of your pyproject.toml or editable install: the child imports your
            # project's modules from there before anything installed
            config = self._item.config
            folders = overrides.get("import_path") or (self._item.path.parent, config.rootpath,
                                                       *config.getini("pythonpath"))
            revision = self._session.revision
            code = owncode.find([Path(f) for f in folders], Path(config.rootpath),
                                revision.top if revision is not None else None)
            overrides["import_path"] = code.roots
            overrides.setdefault("own_code", {"modules": list(code.modules), "compiled": list(code.compiled)})
        if overrides["device"] == "cpu" and overrides.get("precision") in emulated_precisions() \
                and self.profile == "smoke":
            for name, value in EMULATED_SHAPE.items():
                overrides.setdefault(name, value)
            self._session.console.for_scenario(overrides.get("label") or overrides["precision"])(
                f"{overrides['precision']} is emulated on this CPU (ISA level {isa_level()}: no AVX512_BF16 or "
                f"AMX), so it runs at the emulated size ({', '.join(f'{k} {v}' for k, v in EMULATED_SHAPE.items())})")
        if options.measure == "instructions" and "measure" not in overrides:
            # the test sized its rounds for timing; counted steps repeat exactly, so fewer serve
            overrides.update(measure="instructions", **COUNTED_ROUNDS)
            if overrides["device"] != "cpu" or overrides.get("kvstore") or overrides.get("loader_workers"):
                pytest.skip("--dlperf-measure=instructions counts one CPU process's steps: this scenario runs on "
                            f"{overrides['device']}, with a kvstore or loader workers; run it without the option")
        try:
            return scenario_for(self.profile, framework, model, **overrides)
        except ScenarioError as exc:
            pytest.fail(f"{self._item.nodeid}: bad scenario: {exc}", pytrace=False)

    def run(self, scenario: Scenario, loader_only: bool = False) -> TrainingResult:
        """Train ``scenario`` in a child process; a crash or hang fails this test only.

        In A/B mode (``--dlperf-reference``) the scenario also runs under the reference
        interpreter, interleaved with this one (:meth:`run_paired`), and the test fails
        when this environment is slower than the A/B threshold.

        ``loader_only``: run the input pipeline of ``scenario`` alone (:mod:`pytest_dlperf.child.loaders`),
        holding the device lock like a training run, and do not record it: the caller picks the
        figures to hold (``dlperf.ledger.metric``), as test_input_pipeline does with its throughput.
        """
        if loader_only:
            intro = f"reading {scenario.data} with {scenario.loader_workers} loader workers, no training"
            return self._measured(scenario, intro,
                                  lambda progress: run_loader_only(scenario, self._workdir / "loader", progress))
        if scenario.measure == "instructions":
            reason = instructions.unavailable()
            if reason:
                pytest.skip(reason)
        elif self._session.options.ab_mode:
            return self._run_ab(scenario)
        return self.ledger.record(self._measured(scenario, f"training {scenario.describe()}",
                                          lambda progress: run_scenario(scenario, self._workdir, progress)))

    def run_together(self, *scenarios: Scenario) -> list[TrainingResult]:
        """Train ``scenarios`` one after the other in one child process, which imports their framework once:
        counted scenarios of one framework pay its import under Valgrind once, not each. The results, in order,
        are not recorded: record each in the test it belongs to (``ledger.record``). The scenarios share a
        framework, launch prefix, environment and measure; any one's failure fails this test with its report.
        Not in A/B mode, which compares each scenario on its own (``run``)."""
        if not scenarios:
            pytest.fail(f"{self._item.nodeid}: dlperf.run_together() needs at least one scenario", pytrace=False)
        labels = [s.describe() for s in scenarios]
        if scenarios[0].measure == "instructions":
            reason = instructions.unavailable()
            if reason:
                pytest.skip(reason)
        elif self._session.options.ab_mode:
            pytest.fail(f"{self._item.nodeid}: dlperf.run_together() does not run in A/B mode: run each scenario "
                        "with dlperf.run", pytrace=False)
        problem = unshareable(scenarios)
        if problem:
            pytest.fail(f"{self._item.nodeid}: dlperf.run_together(): {problem}", pytrace=False)
        outcomes = self._measured(
            scenarios[0], "in one process: " + "; ".join(f"training {label}" for label in labels),
            lambda progress: run_scenarios(scenarios, self._workdir / "together", progress),
            name=" + ".join(f"{s.model}/{s.label}" for s in scenarios),
            headline=lambda done: "; ".join(f"{s.model} " + (_headline(o) if isinstance(o, TrainingResult)
                                                              else "failed") for s, o in zip(scenarios, done)))
        failed = [o for o in outcomes if isinstance(o, ScenarioFailed)]
        if failed:
            pytest.fail("\n".join(f.report() for f in failed), pytrace=False)
        return [o for o in outcomes if isinstance(o, TrainingResult)]

    def _measured(self, scenario: Scenario, intro: str, child: Callable[[Callable[[str], None] | None], Any],
                  name: str = "", headline: Callable[[Any], str] | None = None) -> Any:
        """Run ``child`` (given the progress writer) holding ``scenario``'s devices' lock, with a start and an
        end line on the terminal (``name``: whose, default the scenario's label; ``headline``: what the end
        line says of what ``child`` returned, default a result's throughput); a crash, hang or lock timeout
        fails this test with the report."""
        console = self._session.console
        name = name or scenario.label
        say = console.for_scenario(name)
        problem = ""
        try:
            with self._exclusive_devices(scenario):
                say(intro)
                started = time.monotonic()
                result = child(console.child_progress(name))
        except ScenarioFailed as exc:
            problem = exc.report()
        except DeviceLockTimeout as exc:
            problem = f"scenario {scenario.label!r} not run: {exc}"
        except instructions.InstructionsUnavailable as exc:
            pytest.skip(str(exc))
        if problem:  # failed outside the handler, so pytest shows the report alone, not a chain
            say(f"failed: {problem.splitlines()[0]}")
            pytest.fail(problem, pytrace=False)
        say(f"done in {time.monotonic() - started:.0f} s: {(headline or _headline)(result)}")
        return result

    def run_paired(self, *variants: Scenario | Variant, pairs: int | None = None,
                   processes: int | None = None, generations: int | None = None, settle_seconds: float = 0.0,
                   record: bool = True, build_one_at_a_time: bool | None = None,
                   decided: Callable[[dict[str, PairedRatio]], bool] | None = None,
                   max_generations: int | None = None, confidence: float = 0.95) -> PairedResult:
        """Train ``variants`` interleaved (:mod:`pytest_dlperf.processes.paired`); the first is the reference.

        Every variant's merged result is recorded like :meth:`run`'s (``record=False``: the caller
        records each with ``ledger.record``, e.g. one test per variant of a shared group); each other variant's
        ratio over the first is in ``.ratios`` (give it to ``ledger.speedup``). The device lock
        is held for the whole group. ``build_one_at_a_time``: each child builds and warms up alone
        (compiled scenarios: their compile time is measured without the other children's load);
        None: :func:`pytest_dlperf.processes.paired.build_width` chooses (one or two at a time on CPU, all on GPU).
        ``generations`` (default: the ini key ``dlperf_generations``): successive sets of fresh processes;
        ``decided`` (e.g. :func:`pytest_dlperf.judging.stats.decided_at`): one more generation at a time while
        the ratios are not decided, up to ``max_generations`` (default ``--dlperf-max-generations``)
        (:func:`pytest_dlperf.processes.paired.run_paired`). A generation's pairs stay ``pairs``' share.
        ``confidence``: of the ratios' intervals.
        """
        options = self._session.options
        if len(variants) < 2:
            pytest.fail(f"{self._item.nodeid}: dlperf.run_paired() needs at least 2 scenarios, got {len(variants)}",
                        pytrace=False)
        first = variants[0].scenario if isinstance(variants[0], Variant) else variants[0]
        if first.measure == "instructions" or options.measure == "instructions":
            pytest.skip("a paired comparison times its variants' rounds against each other; instructions are "
                        "counted by dlperf.run, one scenario at a time")
        if processes is None:
            processes = options.processes or (1 if first.device == "cuda" else DEFAULT_PROCESSES)
        generations = generations or options.generations
        if decided is not None and max_generations is None:
            max_generations = max(options.max_generations, generations)
        console = self._session.console
        keys = [v.key if isinstance(v, Variant) else v.label for v in variants]
        say = console.for_scenario(" vs ".join(keys) if len(keys) <= 3 else f"{keys[0]} vs {len(keys) - 1} variants")
        problem = ""
        try:
            with self._exclusive_devices(first):
                # what each child really runs: the pairs' rounds, not the scenario's own round count
                total = pairs_for(pairs or options.pairs, processes, generations)
                fresh = f" x {generations} generations" if generations > 1 else ""
                say(f"training interleaved, {total} pairs x {processes} process{'es' if processes > 1 else ''}"
                    f"{fresh} per variant: {first.replace(rounds=total // (processes * generations)).describe()}")
                started = time.monotonic()
                paired = run_paired(list(variants), pairs=pairs or options.pairs, processes=processes,
                                    generations=generations, workdir=self._workdir,
                                    on_progress=console.child_progress("paired"),
                                    settle_seconds=settle_seconds, confidence=confidence,
                                    build_one_at_a_time=build_one_at_a_time, decided=decided,
                                    max_generations=max_generations)
        except ScenarioFailed as exc:
            problem = exc.report()
        except ScenarioError as exc:
            problem = f"{self._item.nodeid}: bad paired run: {exc}"
        except DeviceLockTimeout as exc:
            problem = f"paired scenarios {[getattr(v, 'label', v) for v in variants]!r} not run: {exc}"
        if problem:
            say(f"failed: {problem.splitlines()[0]}")
            pytest.fail(problem, pytrace=False)
        taken = max((ratio.units for ratio in paired.ratios.values()), default=0) // processes
        more = (f"; undecided after {generations} generation{'s' * (generations > 1)}, it took {taken}"
                if taken > generations else "")
        say(f"done in {time.monotonic() - started:.0f} s: "
            + ", ".join(f"{key} {ratio.estimate:.3f}x" for key, ratio in paired.ratios.items())
            + f" over {paired.reference}{more}")
        for key, result in paired.results.items():
            if record and (key != paired.reference or not options.ab_mode):
                self.ledger.record(result)
        for key, ratio in paired.ratios.items() if record else ():
            self._item.user_properties += figures.of_paired(key, ratio, paired.reference)
        return paired

    def run_paired_jobs(self, *jobs: Job, pairs: int, processes: int = 1,
                        decided: Callable[[dict[str, PairedRatio]], bool] | None = None,
                        max_generations: int | None = None) -> PairedJobs:
        """Run distributed ``jobs`` interleaved, round by round; the first (e.g. the 1-worker job) is the
        reference (:func:`pytest_dlperf.processes.distributed.paced_job.run_paired_jobs`). The devices' lock
        is held for the whole group; a job that fails fails the test with its ranks' report. ``decided``
        (e.g. :func:`pytest_dlperf.judging.stats.claim_decided`): one more generation of fresh processes at a
        time while the ratios are not decided, up to ``max_generations`` (default ``--dlperf-max-generations``).
        The caller records and judges the figures (``paired.ratio(label)``, ``paired.results``)."""
        if decided is not None and max_generations is None:
            max_generations = self._session.options.max_generations
        labels = [job.label for job in jobs]
        say = self._session.console.for_scenario(" vs ".join(labels))
        until = f", more generations until decided (up to {max_generations})" if decided is not None else ""
        say(f"jobs interleaved, {pairs_for(pairs, processes)} pairs x {processes} "
            f"process{'es' if processes > 1 else ''} per job{until}")
        started = time.monotonic()
        try:
            with jobs_lock(jobs):
                paired = run_paired_jobs(jobs, pairs=pairs, processes=processes, workdir=self._workdir,
                                         on_progress=self._session.console.child_progress("paired jobs"),
                                         decided=decided, max_generations=max_generations)
        except JobFailed as exc:
            say(f"failed: {exc.report().splitlines()[0]}")
            pytest.fail(exc.report(), pytrace=False)
        except DeviceLockTimeout as exc:
            pytest.fail(f"paired jobs {labels!r} not run: {exc}", pytrace=False)
        say(f"done in {time.monotonic() - started:.0f} s, {paired.generations} "
            f"generation{'s' * (paired.generations > 1)}: "
            + ", ".join(f"{key} {ratio.describe()}" for key, ratio in paired.ratios.items()) + f" over {labels[0]}")
        return paired

    def _run_ab(self, scenario: Scenario) -> TrainingResult:
        options = self._session.options
        revision = self._session.revision
        code = None
        if revision is None:
            reference = Variant(scenario, python=options.reference, name=f"{scenario.label}@reference")
            commits = None
        else:  # your code as it is at the revision: its folders, and this package where the repository holds it
            try:
                tree = revision.tree()
            except RevisionError as exc:
                pytest.fail(f"pytest-dlperf could not make the reference revision's worktree: {exc}", pytrace=False)
            scenario, reference_scenario = self._sides(scenario, tree)
            reference = Variant(reference_scenario, python=options.reference,
                                name=f"{scenario.label}@{revision.commit.short}", package=tree.package(PACKAGE_DIR))
            commits = {"reference": revision.commit.describe(), "candidate": revision.candidate.describe()}

        alternated = None
        if revision is not None and (scenario.step or scenario.loop) and reference.python is None \
                and reference.package is None:
            # both sides are your step or loop module at two revisions under one interpreter and one plugin
            try:
                alternated = self._alternated(reference.scenario, scenario)
            except _NotInReference as absent:
                return self._new_in_candidate(scenario, reference.name, str(absent), commits)
        if alternated is not None:
            result, ref_result, ratio = alternated
        else:  # at least two generations, so the interval rests on more than one process pair
            paired = self.run_paired(reference, Variant(scenario), generations=max(options.generations, 2),
                                     decided=decided_at(options.ab_threshold), confidence=AB_CONFIDENCE)
            result, ref_result = paired.results[scenario.label], paired.results[reference.key]
            ratio = paired.ratio(scenario.label)
        if scenario.user_code:
            code = self._code_origins(scenario, result, reference.scenario, ref_result, revision is None)
        verdict = decide(ratio, options.ab_threshold)
        ref_software = ref_result.software
        self._item.user_properties += figures.of_ab(scenario.label, ratio, verdict, ref_software, commits, code)
        self._session.ab_outcomes.append((self._item.nodeid, scenario.label, ratio, verdict, code or {}))
        if verdict == REGRESSION:
            stacks = (f"candidate {_stack(result.software)} vs reference {_stack(ref_software)}")
            pytest.fail(f"A/B slower: {scenario.label} throughput candidate/reference {ratio.describe()}, "
                        f"beyond the {options.ab_threshold:.0%} threshold; {stacks}\n"
                        f"{self._session.reference_description()}", pytrace=False)
        return result

    def _new_in_candidate(self, scenario: Scenario, reference: str, absent: str,
                          commits: Mapping[str, str] | None) -> TrainingResult:
        """A step or loop the reference revision does not hold (a pull request that adds it): nothing to
        compare, so the candidate runs alone, judged against its stored baselines like any run, and the A/B
        summary says it was not compared and why. The test passes unless the candidate itself fails."""
        why = f"{absent}: new in the candidate"
        self._session.console.for_scenario(f"{reference} vs {scenario.label}")(f"not compared: {why}; the "
                                                                              "candidate runs alone")
        result = self.ledger.record(self._measured(scenario, f"training {scenario.describe()}",
                                                   lambda progress: run_scenario(scenario, self._workdir, progress)))
        self._item.user_properties += figures.of_not_compared(scenario.label, why, commits)
        self._session.ab_not_compared.append((self._item.nodeid, scenario.label, why))
        return result

    def _sides(self, scenario: Scenario, tree: Any) -> tuple[Scenario, Scenario]:
        """The candidate (the working tree) and the reference (the worktree) of a scenario, each told which
        tree its project modules must come from; a project with compiled extensions is refused."""
        if not scenario.own_code.get("modules"):
            return scenario, scenario.replace(import_path=tuple(tree.remap(p) for p in scenario.import_path))
        revision = self._session.revision
        assert revision is not None
        compiled = scenario.own_code.get("compiled") or []
        if compiled:
            pytest.fail(f"{self._item.nodeid}: --dlperf-reference-rev cannot compare this project: it has compiled "
                        f"extension modules ({', '.join(compiled[:3])}), and the reference revision's worktree holds "
                        "only its sources. Build and install each revision into an environment of its own and "
                        "compare those with --dlperf-reference=PYTHON (the reference environment's interpreter)",
                        pytrace=False)
        top, worktree = str(revision.top), str(tree.path)
        candidate = scenario.replace(own_code={**scenario.own_code, "tree": top, "other": worktree,
                                               "describe": f"the working tree at {revision.candidate.short}"})
        reference = scenario.replace(import_path=tuple(tree.remap(p) for p in scenario.import_path),
                                     own_code={**scenario.own_code, "tree": worktree, "other": top,
                                               "describe": f"the worktree of {revision.commit.short}"})
        return candidate, reference

    def _code_origins(self, candidate: Scenario, result: TrainingResult, reference: Scenario,
                      ref_result: TrainingResult, environments: bool) -> dict[str, str]:
        """Where each side imported the project's modules from, in words; an A/B of environments whose two
        interpreters imported different files of the project fails (it compares environments, not code)."""
        sides = {"candidate": (candidate, result), "reference": (reference, ref_result)}
        origins = {side: r.details.get("own_code") or {} for side, (_, r) in sides.items()}
        differ = owncode.first_difference(origins["candidate"], origins["reference"]) if environments else None
        if differ is not None:
            name, here, there = differ
            pytest.fail(f"{self._item.nodeid}: an A/B of environments compares environments, not code, but the two "
                        f"interpreters imported different files of your project: {name} from {here} here and "
                        f"{there} under the reference. Install the project the same way in both (or not at all: "
                        "the test's folders are searched first), or compare revisions with --dlperf-reference-rev",
                        pytrace=False)
        return {side: owncode.describe_origins(origins[side], s.own_code.get("tree"))
                + (f" ({s.own_code['describe']})" if s.own_code.get("describe") else "")
                for side, (s, _) in sides.items()}

    def _alternated(self, reference: Scenario,
                    candidate: Scenario) -> tuple[TrainingResult, TrainingResult, PairedRatio] | None:
        """A/B of your step or plain loop at two revisions inside one process at a time
        (:mod:`pytest_dlperf.processes.alternation`): the process's own offset falls on both sides; fresh
        processes until the ratio is decided. None where the loop turned out to be a trainer's (its
        callback asked for), which is compared in process pairs."""
        options = self._session.options
        label = f"{reference.label}@{self._session.revision.commit.short} vs {candidate.label}"  # type: ignore[union-attr]
        say = self._session.console.for_scenario(label)
        # as many processes as the process-pair design may take per side at most
        most = max(options.max_generations * (options.processes or DEFAULT_PROCESSES), ALTERNATION_MIN_PROCESSES)
        threshold = decided_at(options.ab_threshold)
        problem = ""
        try:
            with self._exclusive_devices(candidate):
                say(f"alternating in one process, {candidate.rounds} pairs of rounds each, ABBA, fresh processes "
                    f"until decided ({ALTERNATION_MIN_PROCESSES} to {most}): {candidate.describe()}")
                started = time.monotonic()
                done = run_alternated(reference, candidate, self._workdir / "alternation",
                                      min_processes=ALTERNATION_MIN_PROCESSES, max_processes=most,
                                      decided=lambda ratio: threshold({candidate.label: ratio}),
                                      on_progress=self._session.console.child_progress(candidate.label),
                                      confidence=AB_CONFIDENCE)
        except ScenarioFailed as exc:
            if exc.reason == TRAINER_LOOP:
                say("a trainer's loop: compared in process pairs instead")
                return None
            if exc.reason == NOT_IN_REFERENCE:
                raise _NotInReference(exc.detail.split(": ", 1)[-1]) from None
            problem = exc.report()
        except DeviceLockTimeout as exc:
            problem = f"scenario {candidate.label!r} not run: {exc}"
        if problem:
            say(f"failed: {problem.splitlines()[0]}")
            pytest.fail(problem, pytrace=False)
        say(f"done in {time.monotonic() - started:.0f} s: {candidate.label} {done.ratio.describe()}")
        result = done.results["candidate"]
        self.ledger.record(result)
        self._item.user_properties += figures.of_paired(candidate.label, done.ratio, f"{reference.label}@reference")
        return result, done.results["reference"], done.ratio

    @contextlib.contextmanager
    def _exclusive_devices(self, scenario: Scenario) -> Iterator[None]:
        """Every scenario holds its devices' locks, so two pytest runs never time one device at once:
        the GPUs it sees, or the host's CPUs for a CPU scenario (two runs sharing cores distort
        each other's figures just as much; measured: -55% to -90% in a clash of two CI runs).
        The wait for them is the test's ``lock`` time (:mod:`pytest_dlperf.cost`)."""
        devices = visible_gpus(environ={**os.environ, **scenario.env}) if scenario.device == "cuda" else ["cpu"]
        with contextlib.ExitStack() as held:
            with cost.timed(cost.LOCK):
                held.enter_context(device_lock(devices, timeout=scenario.timeout, owner=self._item.nodeid,
                                               on_wait=self._session.console.for_scenario(scenario.label)))
            yield

    def check(self, *results: TrainingResult, tolerance: float | None = None,
              unjudged: Collection[str] = ()) -> list[Verdict]:
        """Compare every checked metric (and every figure derived since the last check) with this
        machine's baseline (:meth:`Ledger.judge`); fail on a regression. ``unjudged``: metrics only
        reported, for figures that do not repeat (the test asserts its own claim on them).

        With ``--update-baselines`` the figures are staged for writing instead.
        """
        options = self._session.options
        nodeid = self._item.nodeid
        verdicts = self.ledger.judge(results, tolerance, unjudged)
        # In A/B mode the reference environment, run beside this one, is the baseline that fails a test
        # (``run``); the stored figures are still compared and shown in the summary.
        if any(v.status == REGRESSION for v in verdicts) and not options.ab_mode:
            pytest.fail(failure_message(nodeid, verdicts), pytrace=False)
        missing = [v for v in verdicts if v.status == MISSING]
        if missing and options.require_baselines:
            hw = missing[0].hardware
            pytest.fail(f"{nodeid}: no baseline for {', '.join(f'{v.label} {v.metric}' for v in missing)} on "
                        f"{hw} ({self._session.store.path(hw)}), and --dlperf-require-baselines is set. Record "
                        "them on this machine with pytest --update-baselines, then commit baselines/", pytrace=False)
        return verdicts


class _NotInReference(Exception):
    """The reference revision has no module or function the scenario's step= or loop= names."""


def _headline(result: TrainingResult) -> str:
    """The figure a person watching wants first: throughput, median of the rounds."""
    if instructions.METRIC in result.metrics:
        m = result.metrics[instructions.METRIC]
        return f"{m.value:,.0f} instructions per step (median of {m.stats.n} rounds)"
    if "throughput" not in result.metrics:
        return "no throughput measured"
    m = result.metrics["throughput"]
    return f"{m.value:.4g} {m.unit} (median of {m.stats.n} rounds)"


def _stack(software: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in software.items()) or "unknown software"
