"""Baseline files: one JSON file per hardware key, read once, written once, atomically. Counted figures
(instructions) are filed under their counting model's key instead (``counted-x86_64-valgrind3.19-nofma``).

Layout of ``baselines/<hardware-key>.json`` (sorted keys, two-space indent)::

    {"format": 2, "hardware_key": "...", "hardware": {...},
     "entries": {"<test node id>::<run label>@<profile>": {
         "<metric>": {"value": the latest run's value, "unit": ..., "direction": "higher"|"lower",
                      "n": ..., "iqr": ..., "samples": [...],   (the latest run's rounds)
                      "runs": [{"value": ..., "recorded": "2026-11-22T23:59:00Z", "session": "...",
                                "host": "..." (files keyed by a counting model: the host that counted)}, ...],
                      "older_runs": [runs of the same shape, for dlperf history only],
                      "software": {...}, "recorded": "2026-11-22T23:59:00Z"}}}}

``runs`` are the runs a figure is judged against and its noise is learned from: the newest
:data:`JUDGED_RUNS` since its history last started again. Every ``--update-baselines`` run adds one, and a
run recorded beyond the figure's gate (a real change, accepted by recording it) starts them again.
``session`` names the pytest run that recorded it, so the noise model can tell one run's common shift
from each figure's own noise. ``older_runs`` (oldest first) keeps the runs that left ``runs``, pushed out
by the cap or by a new start, up to :data:`KEPT_RUNS` runs in all: only ``dlperf history`` reads them, so
that a series long enough to find a change point is kept where users keep their figures; a change of
unit or direction drops them too. Format 1 files (no ``runs``) are read as one recorded run per figure.
Recording a test drops the metrics its entry holds that the test no longer writes (stale ones), of the
measure it recorded: a counted run (``--dlperf-measure=instructions``) leaves the timed figures alone,
and a timed run the counts.

Writing re-reads the file under an exclusive lock and merges, so entries of tests
that did not run, and of other machines, are never lost, and two pytest processes
updating the same file do not overwrite each other.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from pytest_dlperf import instructions
from pytest_dlperf.atomic import write_atomically
from pytest_dlperf.result import Metric
from pytest_dlperf.sample_stats import sample_stats
from pytest_dlperf.judging.noise import MachineNoise

FORMAT = 2
#: The formats this version reads (1: no run history).
READABLE_FORMATS = (1, 2)
#: The newest runs a figure is judged against and its noise learned from (``runs``).
JUDGED_RUNS = 10
#: The most runs a figure's record keeps, ``runs`` and ``older_runs`` together: more than twice the 17 runs
#: a series needs for ``dlperf history`` to find a change point (reports.changepoints.min_runs).
KEPT_RUNS = 40
#: The recorded runs a new machine type gives each figure (``dlperf record``): a figure is judged from
#: its first, borrowing its kind's noise, and three give it two degrees of freedom of its own
#: (docs/verdicts.md); more narrow its gate further, as later recordings add them.
RECORDINGS = 3


class BaselineFileError(Exception):
    """A baseline file cannot be used; the message names the file and the fix."""


@dataclass(frozen=True)
class Baseline:
    value: float
    unit: str
    direction: str
    samples: tuple[float, ...]
    iqr: float
    software: Mapping[str, Any]
    recorded: str
    #: The recorded runs' values, oldest first (at least the latest run's).
    runs: tuple[float, ...] = ()

    @property
    def rel_spread(self) -> float:
        return (self.iqr / 2.0) / abs(self.value) if self.value else 0.0


def entry_key(nodeid: str, label: str, profile: str) -> str:
    return f"{nodeid}::{label}@{profile}"


def split_entry_key(key: str) -> tuple[str, str, str]:
    """(node id, run label, profile) of an entry key."""
    rest, _, profile = key.rpartition("@")
    nodeid, _, label = rest.rpartition("::")
    return nodeid, label, profile


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _session_name() -> str:
    """This pytest run's name among recordings: when it started, to the microsecond, and its process;
    whole seconds let two short recordings in a row share a name, and the noise model one run."""
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")
    return f"{started}-{os.getpid()}"


def record_for(metric: Metric, software: Mapping[str, Any], restart: bool = False,
               session: str = "", host: str = "") -> dict[str, Any]:
    """The record of one run's figure. ``restart``: this run starts the figure's history again
    (it moved beyond its gate: what was recorded before is no longer its level). ``host``: the machine
    that measured it, where the file is keyed by something else (a counting model)."""
    s = sample_stats(metric.samples)
    paired = {"interval": list(metric.interval)} if metric.interval is not None else {}
    recorded = _now()
    run = {"value": metric.value, "recorded": recorded, **({"session": session} if session else {}),
           **({"host": host} if host else {})}
    return {
        "runs": [run],
        "restart": restart,
        **paired,
        "value": metric.value,
        "unit": metric.unit,
        "direction": metric.direction,
        "n": s.n,
        "iqr": s.iqr,
        "samples": list(metric.samples),
        "software": dict(software),
        "recorded": recorded,
    }


def with_new_run(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """``new`` (one run, from :func:`record_for`) added to ``old``'s runs, the newest :data:`JUDGED_RUNS` of
    them judged, those before kept in ``older_runs`` up to :data:`KEPT_RUNS` runs in all.

    The judged runs start again where ``new`` says so (the runs before stay in ``older_runs``), and the
    whole history where unit or direction changed (a figure that no longer means what it measured)."""
    merged = {k: v for k, v in new.items() if k != "restart"}
    runs, older = list(new["runs"]), []
    if old and old.get("unit") == new.get("unit") and old.get("direction") == new.get("direction"):
        older = list(old.get("older_runs", []))
        if new.get("restart"):
            older += runs_of(old)
        else:
            runs = runs_of(old) + runs
    older += runs[:-JUDGED_RUNS]
    merged["runs"] = runs[-JUDGED_RUNS:]
    older = older[max(0, len(older) + len(merged["runs"]) - KEPT_RUNS):]
    if older:
        merged["older_runs"] = older
    return merged


def runs_of(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A record's runs; a format 1 record is its one run."""
    if "runs" in rec:
        return list(rec["runs"])
    return [{"value": rec["value"], "recorded": rec.get("recorded", "")}]


def _fail(path: Path, problem: str) -> BaselineFileError:
    return BaselineFileError(
        f"baseline file {path} is unusable: {problem}. Fix it by hand, restore it from version control "
        f"(git checkout -- {path}), or delete it and run with --update-baselines"
    )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def validate(path: Path, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
        raise _fail(path, "the top level must be an object with an 'entries' object")
    if data.get("format") not in READABLE_FORMATS:
        raise _fail(path, f"format is {data.get('format')!r}, this version of pytest-dlperf reads formats "
                          f"{', '.join(map(str, READABLE_FORMATS))}")
    for key, metrics in data["entries"].items():
        if not isinstance(metrics, dict):
            raise _fail(path, f"entry {key!r} must be an object of metrics")
        for name, rec in metrics.items():
            where = f"entry {key!r} metric {name!r}"
            if not isinstance(rec, dict):
                raise _fail(path, f"{where} must be an object")
            if not _number(rec.get("value")):
                raise _fail(path, f"{where} has no finite 'value'")
            if rec.get("direction") not in ("higher", "lower"):
                raise _fail(path, f"{where} has direction {rec.get('direction')!r}, expected 'higher' or 'lower'")
            samples = rec.get("samples", [])
            if not isinstance(samples, list) or not all(_number(v) for v in samples):
                raise _fail(path, f"{where} has 'samples' that are not a list of numbers")
            for listing in ("runs", "older_runs"):
                runs = rec.get(listing, [])
                if not isinstance(runs, list) or not all(isinstance(r, dict) and _number(r.get("value")) for r in runs):
                    raise _fail(path, f"{where} has '{listing}' that are not a list of objects with a finite 'value'")
    return data


def dumps(data: Mapping[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, indent=2) + "\n"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@dataclass
class BaselineStore:
    """The baselines of one session: files read lazily once, updates staged and flushed once."""

    directory: Path
    _files: dict[str, dict[str, Any]] = field(default_factory=dict)
    _staged: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    _hardware: dict[str, dict[str, Any]] = field(default_factory=dict)
    _noise: dict[str, MachineNoise] = field(default_factory=dict)
    #: Names this session's recordings (the run each recorded value came from).
    session: str = field(default_factory=_session_name)
    #: Metrics dropped from entries because their test no longer writes them: (file, entry, metric).
    pruned: list[tuple[str, str, str]] = field(default_factory=list)

    def path(self, hardware_key: str) -> Path:
        return self.directory / f"{hardware_key}.json"

    def _read(self, path: Path) -> dict[str, Any] | None:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _fail(path, f"it cannot be read ({exc.strerror})") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise _fail(path, f"it is not valid JSON ({exc})") from None
        return validate(path, data)

    def entries(self, hardware_key: str) -> dict[str, Any]:
        if hardware_key not in self._files:
            data = self._read(self.path(hardware_key))
            self._files[hardware_key] = data["entries"] if data else {}
        return self._files[hardware_key]

    def check_all_readable(self) -> None:
        """Validate every file in the directory up front, so a broken one stops the run early."""
        if self.directory.is_dir():
            for path in sorted(self.directory.glob("*.json")):
                data = self._read(path)
                if data is not None:
                    self._files.setdefault(path.stem, data["entries"])

    def other_hardware(self, hardware_key: str) -> dict[str, dict[str, Any]]:
        """The other machines' files in the folder, by key, with the hardware each recorded: never compared."""
        found = {}
        if self.directory.is_dir():
            for path in sorted(self.directory.glob("*.json")):
                if path.stem != hardware_key:
                    data = self._read(path) or {}
                    found[path.stem] = dict(data.get("hardware", {}))
        return found

    def keys(self, hardware_key: str, profile: str | None = None) -> list[str]:
        """The entry keys of a machine's file, sorted; only the ``profile``'s when one is given."""
        return sorted(k for k in self.entries(hardware_key) if profile is None or split_entry_key(k)[2] == profile)

    def lookup(self, hardware_key: str, key: str, metric: str) -> Baseline | None:
        rec = self.entries(hardware_key).get(key, {}).get(metric)
        if rec is None:
            return None
        return Baseline(
            value=float(rec["value"]),
            unit=rec.get("unit", ""),
            direction=rec["direction"],
            samples=tuple(float(v) for v in rec.get("samples", [])),
            iqr=float(rec.get("iqr", 0.0)),
            software=rec.get("software", {}),
            recorded=rec.get("recorded", ""),
            runs=tuple(float(r["value"]) for r in runs_of(rec)),
        )

    def noise(self, hardware_key: str) -> MachineNoise:
        """The noise model of this machine's figures: built once per file, as its entries are read once."""
        if hardware_key not in self._noise:
            self._noise[hardware_key] = MachineNoise.build(hardware_key, self.entries(hardware_key))
        return self._noise[hardware_key]

    def stage(self, hardware_key: str, hardware: Mapping[str, Any], key: str, metric: Metric,
              software: Mapping[str, Any], restart: bool = False, host: str = "") -> None:
        self._staged.setdefault(hardware_key, {}).setdefault(key, {})[metric.name] = record_for(
            metric, software, restart, self.session, host)
        self._hardware.setdefault(hardware_key, dict(hardware))

    @property
    def staged_count(self) -> int:
        return sum(len(m) for entries in self._staged.values() for m in entries.values())

    def flush(self) -> list[Path]:
        """Merge staged records into their files; returns the files written."""
        written = []
        for hardware_key, staged in sorted(self._staged.items()):
            path = self.path(hardware_key)
            with _locked(path):
                current = self._read(path) or {"format": FORMAT, "hardware_key": hardware_key, "entries": {}}
                current["format"] = FORMAT
                current["hardware"] = self._hardware.get(hardware_key, current.get("hardware", {}))
                for key, metrics in staged.items():
                    entry = current["entries"].setdefault(key, {})
                    measured = {instructions.measure_of(name) for name in metrics}
                    for name in sorted(n for n in set(entry) - set(metrics) if instructions.measure_of(n) in measured):
                        self.pruned.append((hardware_key, key, name))
                        del entry[name]
                    for name, rec in metrics.items():
                        entry[name] = with_new_run(entry.get(name), rec)
                write_atomically(path, dumps(current))
            written.append(path)
        self._staged.clear()
        return written
