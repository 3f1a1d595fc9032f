"""The run's state: options, the baseline store, every verdict and A/B outcome, the xdist hand-over."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import pytest

from pytest_dlperf import instructions
from pytest_dlperf.child.environment import hardware_key
from pytest_dlperf.child.gpus import gpus
from pytest_dlperf.judging.baselines import BaselineFileError, BaselineStore, split_entry_key
from pytest_dlperf.judging import run_shift
from pytest_dlperf.judging.gates import Policy
from pytest_dlperf.judging.stats import PairedRatio
from pytest_dlperf.judging.verdict import CHECKED_METRICS, EVENT_COUNTS, Verdict
from pytest_dlperf.plugin.console import Console
from pytest_dlperf.plugin.report import judged_count
from pytest_dlperf.plugin.options import Options
from pytest_dlperf.processes.devicelock import announce_waits_with
from pytest_dlperf.processes.revision import ReferenceRevision, RevisionError


class DlperfSession:
    """Owns what the run measured; baselines are read once and written once."""

    def __init__(self, config: pytest.Config, options: Options):
        self.config = config
        self.options = options
        self.store = BaselineStore(options.baseline_dir)
        worker = getattr(config, "workerinput", None)
        if worker and worker.get("dlperf_session"):  # an xdist worker records under its controller's session
            self.store.session = worker["dlperf_session"]
        self.verdicts: list[Verdict] = []
        self.written: list[Path] = []
        #: Node ids of the selected tests, in run order.
        self.collected: list[str] = []
        #: Some selected test asks for the ``dlperf`` fixture: this run is meant to measure something.
        self.measures = False
        self.filtered = False
        #: A/B mode: (test, label, candidate/reference ratio, decision) per scenario.
        self.ab_outcomes: list[tuple[str, str, PairedRatio, str]] = []
        self.console = Console(config)
        #: pytest-benchmark integration (``benchmark.BenchmarkExport``), when that plugin is active.
        self.benchmarks: Any = None
        #: How many figures of the selected tests have baselines: the family the suite-wide error control covers.
        self.family = 0
        #: A/B mode against a revision (``--dlperf-reference-rev``): resolved now, checked out on first use.
        self.revision: ReferenceRevision | None = None
        if options.reference_rev:
            try:
                self.revision = ReferenceRevision.of(Path(config.rootpath), options.reference_rev)
            except RevisionError as exc:
                raise pytest.UsageError(str(exc)) from None

    def count_family(self) -> int:
        """The judged figures the selected tests have baselines for, on this host's machines and profile
        (known before any test runs, so every figure's level is set the same way, xdist workers included)."""
        collected = set(self.collected)
        count = 0
        for hw in self.hardware_keys():
            entries = self.store.entries(hw)
            for key in self.store.keys(hw, self.options.profile):
                if split_entry_key(key)[0] in collected:
                    count += sum(1 for name in entries[key] if name in CHECKED_METRICS and name not in EVENT_COUNTS)
        self.family = count
        return count

    def policy(self, marked: Callable[[str], float | None] | None = None, explicit: float | None = None) -> Policy:
        """What a test's figures are held to: this run's tolerance and error budget over :attr:`family`, with
        the test's ``tolerance`` marker (``marked``) and ``dlperf.check(tolerance=)`` (``explicit``)."""
        return Policy(self.options.tolerance, marked, explicit, self.options.alpha, self.family)

    def judge_run(self, test: str) -> str:
        """Judge the run as a whole (:mod:`pytest_dlperf.judging.run_shift`): its shift verdicts join
        the run's, every figure's verdict becomes its judgement after the shift; returns what failed."""
        before = list(self.verdicts)
        shifts, after = run_shift.judge_run(before, self.store.noise, test, self.options.alpha)
        self.verdicts = after + shifts
        return run_shift.failure_message(shifts, before, after)

    def shift_verdicts(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.metric.endswith(f" {run_shift.SHIFT}")]

    def start(self) -> None:
        announce_waits_with(self.console.line)
        try:
            self.store.check_all_readable()
        except BaselineFileError as exc:
            raise pytest.UsageError(str(exc)) from None

    def reference_description(self) -> str:
        """What the A/B mode's reference is: another revision, another interpreter, or both."""
        parts = [self.revision.describe()] if self.revision else []
        if self.options.reference:
            parts.append(f"reference interpreter {self.options.reference}")
        return "; ".join(parts)

    def finish(self) -> None:
        announce_waits_with(None)
        if self.revision is not None:
            self.revision.close()
        if self.options.update and self.store.staged_count:
            self.written = self.store.flush()

    @property
    def judges(self) -> bool:
        """This run is meant to judge figures against baselines: its tests measure, and it neither
        records them nor runs A/B."""
        return self.measures and not (self.options.update or self.options.ab_mode)

    def unjudged_fails(self) -> bool:
        """``--dlperf-require-baselines`` and a run that compared no figure with a baseline: every test
        skipped (a GPU runner that sees no GPU) or every figure without one fails the run, not only its tests."""
        return self.options.require_baselines and self.judges and not judged_count(self.verdicts)

    def worker_output(self) -> dict[str, Any]:
        """What an xdist worker hands the controller (``config.workeroutput``): plain, picklable data."""
        return {"verdicts": [dataclasses.asdict(v) for v in self.verdicts],
                "written": [str(p) for p in self.written],
                "ab_outcomes": [(test, label, ratio.to_dict(), decision)
                                for test, label, ratio, decision in self.ab_outcomes],
                "collected": self.collected, "filtered": self.filtered, "family": self.family,
                "measures": self.measures}

    def add_worker_output(self, output: dict[str, Any]) -> None:
        """On the xdist controller: add a finished worker's verdicts, written files and A/B outcomes,
        so its summary and counts are the ones a run without ``-n`` prints (as syrupy merges its workers)."""
        self.verdicts += [Verdict(**v) for v in output.get("verdicts", [])]
        self.written += [Path(p) for p in output.get("written", []) if Path(p) not in self.written]
        self.ab_outcomes += [(test, label, PairedRatio.from_dict(ratio), decision)
                             for test, label, ratio, decision in output.get("ab_outcomes", [])]
        self.collected += [nodeid for nodeid in output.get("collected", []) if nodeid not in self.collected]
        self.measures = self.measures or bool(output.get("measures"))
        self.filtered = self.filtered or bool(output.get("filtered"))
        self.family = max(self.family, int(output.get("family", 0)))
        # rows in the order a run without -n gives them: the tests' collection order (stable within a test)
        order = {nodeid: i for i, nodeid in enumerate(self.collected)}
        self.verdicts.sort(key=lambda v: order.get(v.test, len(order)))
        self.ab_outcomes.sort(key=lambda outcome: order.get(outcome[0], len(order)))

    def hardware_keys(self) -> list[str]:
        """The baseline files this host's figures go to: its CPUs', its GPUs' when it has any, and its
        counting model's where it can count instructions."""
        counted = [] if instructions.unavailable() else [instructions.counting_key()]
        return [hardware_key("cpu")] + ([hardware_key("cuda")] if gpus() else []) + counted

    def unused(self) -> list[str]:
        """Entries of this run's machines and profile whose test no longer exists (unfiltered runs only)."""
        if self.filtered:
            return []
        hardware = {v.hardware for v in self.verdicts if v.hardware}
        collected = set(self.collected)
        return [key for hw in sorted(hardware) for key in self.store.keys(hw, self.options.profile)
                if split_entry_key(key)[0] not in collected]
