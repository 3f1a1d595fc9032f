"""The run's state: options, the baseline store, every verdict and A/B outcome, the xdist hand-over."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pytest

from pytest_dlperf.child.environment import hardware_key
from pytest_dlperf.child.gpus import gpus
from pytest_dlperf.plugin.console import Console
from pytest_dlperf.plugin.options import Options
from pytest_dlperf.processes.devicelock import announce_waits_with
from pytest_dlperf.units import count

if TYPE_CHECKING:  # the judging model's modules bring scipy: imported where a run first judges or reads a baseline
    from pytest_dlperf.judging.baselines import BaselineStore
    from pytest_dlperf.judging.gates import Policy
    from pytest_dlperf.judging.stats import PairedRatio
    from pytest_dlperf.judging.verdict import Verdict
    from pytest_dlperf.processes.revision import ReferenceRevision


class DlperfSession:
    """Owns what the run measured; baselines are read once and written once.

    Made in every pytest run the plugin is loaded in, so it costs nothing until a run needs it: the
    baseline store, and the judging model with it (scipy), is made on first use (:attr:`store`), and a
    run whose baseline folder holds no file (:meth:`has_baselines`) knows without it that nothing has one.
    """

    def __init__(self, config: pytest.Config, options: Options):
        self.config = config
        self.options = options
        self._store: BaselineStore | None = None
        self.verdicts: list[Verdict] = []
        self.written: list[Path] = []
        #: Node ids of the selected tests, in run order.
        self.collected: list[str] = []
        #: Some selected test asks for the ``dlperf`` fixture: this run is meant to measure something.
        self.measures = False
        self.filtered = False
        #: A/B mode: (test, label, candidate/reference ratio, decision) per scenario.
        #: (test, label, ratio, verdict, where each side's code came from) of every A/B comparison.
        self.ab_outcomes: list[tuple[str, str, PairedRatio, str, dict[str, str]]] = []
        #: (test, label, why) of every scenario A/B mode could not compare: new in the candidate.
        self.ab_not_compared: list[tuple[str, str, str]] = []
        self.console = Console(config)
        #: pytest-benchmark integration (``benchmark.BenchmarkExport``), when that plugin is active.
        self.benchmarks: Any = None
        #: How many figures of the selected tests have baselines: the family the suite-wide error control covers.
        self.family = 0
        #: A/B mode against a revision (``--dlperf-reference-rev``): resolved now, checked out on first use.
        self.revision: ReferenceRevision | None = None
        if options.reference_rev:
            from pytest_dlperf.processes.revision import ReferenceRevision, RevisionError

            try:
                self.revision = ReferenceRevision.of(Path(config.rootpath), options.reference_rev)
            except RevisionError as exc:
                raise pytest.UsageError(str(exc)) from None

    @property
    def store(self) -> BaselineStore:
        """The run's baseline store, made on first use."""
        if self._store is None:
            from pytest_dlperf.judging.baselines import BaselineStore

            self._store = BaselineStore(self.options.baseline_dir)
            worker = getattr(self.config, "workerinput", None)
            if worker and worker.get("dlperf_session"):  # an xdist worker records under its controller's session
                self._store.session = worker["dlperf_session"]
        return self._store

    def has_baselines(self) -> bool:
        """Whether there is a baseline to read: the store is in use, or the folder holds a baseline file
        (``*.json``, as :meth:`BaselineStore.check_all_readable` reads them). Without one, every machine's
        file is absent and has no entries, which a run that measures nothing knows without the store."""
        if self._store is not None:
            return True
        folder = self.options.baseline_dir
        return folder.is_dir() and any(folder.glob("*.json"))

    def header_lines(self) -> list[str]:
        """Per hardware key of this host: the baseline file its figures are compared with, and how many it holds.
        The counting model's only where its file exists or the run counts: which tests count is known only as
        they run, and a project that never counts would read a request to record a file it never fills."""
        from pytest_dlperf import instructions

        profile = self.options.profile
        store = self.store if self.has_baselines() else None
        lines = []
        for hw in self.hardware_keys():
            if store is not None:
                path, entries = store.path(hw), len(store.keys(hw, profile))
            else:  # the file BaselineStore.path names, absent
                path, entries = self.options.baseline_dir / f"{hw}.json", 0
            if hw == instructions.counting_key() and not path.exists() and self.options.measure != "instructions":
                continue
            held = (count(entries, f"{profile} entry", f"{profile} entries") if entries else
                    f"no {profile} entries yet: record them with pytest --update-baselines")
            lines.append(f"dlperf: hardware {hw}, compared with {path} ({held})")
        return lines

    def count_family(self) -> int:
        """The judged figures the selected tests have baselines for, on this host's machines and profile
        (known before any test runs, so every figure's level is set the same way, xdist workers included)."""
        if not self.has_baselines():
            self.family = 0
            return 0
        from pytest_dlperf.judging.baselines import split_entry_key
        from pytest_dlperf.judging.verdict import CHECKED_METRICS, EVENT_COUNTS

        collected = set(self.collected)
        figures = 0
        for hw in self.hardware_keys():
            entries = self.store.entries(hw)
            for key in self.store.keys(hw, self.options.profile):
                if split_entry_key(key)[0] in collected:
                    figures += sum(1 for name in entries[key] if name in CHECKED_METRICS and name not in EVENT_COUNTS)
        self.family = figures
        return figures

    def policy(self, marked: Callable[[str], float | None] | None = None, explicit: float | None = None) -> Policy:
        """What a test's figures are held to: this run's tolerance and error budget over :attr:`family`, with
        the test's ``tolerance`` marker (``marked``) and ``dlperf.check(tolerance=)`` (``explicit``)."""
        from pytest_dlperf.judging.gates import Policy

        return Policy(self.options.tolerance, marked, explicit, self.options.alpha, self.family)

    def judge_run(self, test: str) -> str:
        """Judge the run as a whole (:mod:`pytest_dlperf.judging.run_shift`): its shift verdicts join
        the run's, every figure's verdict becomes its judgement after the shift; returns what failed."""
        if not self.verdicts:  # nothing to judge (as run_shift finds it), without importing the judging model
            return ""
        from pytest_dlperf.judging import run_shift

        before = list(self.verdicts)
        shifts, after = run_shift.judge_run(before, self.store.noise, test, self.options.alpha)
        self.verdicts = after + shifts
        return run_shift.failure_message(shifts, before, after)

    def shift_verdicts(self) -> list[Verdict]:
        if not self.verdicts:
            return []
        from pytest_dlperf.judging import run_shift

        return [v for v in self.verdicts if v.metric.endswith(f" {run_shift.SHIFT}")]

    def start(self) -> None:
        announce_waits_with(self.console.line)
        if not self.has_baselines():  # no file to check
            return
        from pytest_dlperf.judging.baselines import BaselineFileError

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
        if self.options.update and self._store is not None and self._store.staged_count:  # staged in the store
            self.written = self._store.flush()

    @property
    def judges(self) -> bool:
        """This run is meant to judge figures against baselines: its tests measure, and it neither
        records them nor runs A/B."""
        return self.measures and not (self.options.update or self.options.ab_mode)

    def unjudged_fails(self) -> bool:
        """``--dlperf-require-baselines`` and a run that compared no figure with a baseline: every test
        skipped (a GPU runner that sees no GPU) or every figure without one fails the run, not only its tests."""
        if not (self.options.require_baselines and self.judges):
            return False
        from pytest_dlperf.plugin.report import judged_count

        return not judged_count(self.verdicts)

    def worker_output(self) -> dict[str, Any]:
        """What an xdist worker hands the controller (``config.workeroutput``): plain, picklable data."""
        return {"verdicts": [dataclasses.asdict(v) for v in self.verdicts],
                "written": [str(p) for p in self.written],
                "ab_outcomes": [(test, label, ratio.to_dict(), decision, code)
                                for test, label, ratio, decision, code in self.ab_outcomes],
                "ab_not_compared": self.ab_not_compared,
                "collected": self.collected, "filtered": self.filtered, "family": self.family,
                "measures": self.measures}

    def add_worker_output(self, output: dict[str, Any]) -> None:
        """On the xdist controller: add a finished worker's verdicts, written files and A/B outcomes,
        so its summary and counts are the ones a run without ``-n`` prints (as syrupy merges its workers)."""
        if output.get("verdicts"):
            from pytest_dlperf.judging.verdict import Verdict

            self.verdicts += [Verdict(**v) for v in output["verdicts"]]
        self.written += [Path(p) for p in output.get("written", []) if Path(p) not in self.written]
        if output.get("ab_outcomes"):
            from pytest_dlperf.judging.stats import PairedRatio

            self.ab_outcomes += [(test, label, PairedRatio.from_dict(ratio), decision, code)
                                 for test, label, ratio, decision, code in output["ab_outcomes"]]
        self.ab_not_compared += [(test, label, why) for test, label, why in output.get("ab_not_compared", [])]
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
        from pytest_dlperf import instructions

        counted = [] if instructions.unavailable() else [instructions.counting_key()]
        return [hardware_key("cpu")] + ([hardware_key("cuda")] if gpus() else []) + counted

    def unused(self) -> list[str]:
        """Entries of this run's machines and profile whose test no longer exists (unfiltered runs only)."""
        if self.filtered:
            return []
        hardware = {v.hardware for v in self.verdicts if v.hardware}
        if not hardware:
            return []
        from pytest_dlperf.judging.baselines import split_entry_key

        collected = set(self.collected)
        return [key for hw in sorted(hardware) for key in self.store.keys(hw, self.options.profile)
                if split_entry_key(key)[0] not in collected]
