"""The figure schema: the names a test's figures carry in its report, written by the plugin and read
back by every report (:mod:`pytest_dlperf.reports.junit`).

Each test's figures travel as its ``item.user_properties`` (so pytest-xdist carries them from its
workers), named::

    dlperf.hardware                       the machine key the figures belong to
    dlperf.<label>.<key>                  LABEL_FIELDS, AB_FIELDS, PAIRED_FIELDS: facts of a scenario
    dlperf.<label>.<metric>               a figure: the median of its samples, or its estimate
    dlperf.<label>.<metric>.<field>       METRIC_FIELDS: facts of that figure

In the JUnit file they are properties of the ``<testsuite>``, each prefixed with its test's node id
(:func:`suite_property_name`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from pytest_dlperf.result import Metric, TrainingResult

PREFIX = "dlperf."
HARDWARE = "hardware"
#: ``dlperf.<label>.<metric>.<field>``: facts about one figure.
METRIC_FIELDS = ("iqr", "n", "unit", "verdict", "baseline", "direction", "interval", "samples", "tolerance", "floor",
                 "detectable", "noise", "runs", "df", "alpha", "shared")
#: ``dlperf.<label>.<key>`` that describe a scenario rather than measure it.
LABEL_FIELDS = ("scenario", "software", "workers")
#: A/B mode (``--dlperf-reference``): the comparison of a scenario with the reference environment.
AB_FIELDS = ("ab_ratio", "ab_interval", "ab_confidence", "ab_verdict", "ab_process_pairs", "reference_software",
             "reference_commit", "candidate_commit", "reference_code", "candidate_code", "ab_not_compared")
#: The ``ab_verdict`` of a scenario the reference revision could not run: its step or loop is new.
NOT_COMPARED = "not compared"
#: A paired group's ratio of a variant over the group's reference (its ``speedup`` figure carries it too).
PAIRED_FIELDS = ("paired_ratio", "paired_interval", "paired_over", "pairs")
#: The value of ``.detectable`` when the gate cannot detect a halving or a doubling.
CANNOT_DETECT = "none"
#: A test's cost profile (:mod:`pytest_dlperf.cost`): a name of one part, so no reader takes it for a figure.
COST = f"{PREFIX}cost"

Property = tuple[str, str]


def name(label: str, key: str, field: str | None = None) -> str:
    """``dlperf.<label>.<key>[.<field>]``."""
    return f"{PREFIX}{label}.{key}" + (f".{field}" if field else "")


def number(value: float) -> str:
    return f"{value:.6g}"


def interval(low: float, high: float) -> str:
    return f"{number(low)} {number(high)}"


def words(pairs: Mapping[str, Any]) -> str:
    """A software stack as ``framework=torch framework_version=2.14.1 ...``."""
    return " ".join(f"{k}={v}" for k, v in pairs.items())


def is_figure(property_name: str) -> bool:
    """A ``user_properties`` name this schema writes."""
    return property_name.startswith(PREFIX)


@dataclass(frozen=True)
class Name:
    """A parsed property name: ``field`` is set for a figure's facts, ``key`` is ``hardware`` alone
    for the machine key (``label`` empty)."""

    label: str
    key: str
    field: str | None = None


def parse(property_name: str) -> Name | None:
    """The parts of a name this schema writes; None for any other name."""
    if not is_figure(property_name):
        return None
    rest = property_name[len(PREFIX):]
    if rest == HARDWARE:
        return Name("", HARDWARE)
    parts = rest.split(".")
    if len(parts) >= 3 and parts[-1] in METRIC_FIELDS:
        return Name(".".join(parts[:-2]), parts[-2], parts[-1])
    if len(parts) >= 2:
        return Name(".".join(parts[:-1]), parts[-1])
    return None


def suite_property_name(nodeid: str, property_name: str) -> str:
    """The ``<testsuite>`` property name of test ``nodeid``'s figure ``property_name``."""
    return f"{nodeid}::{property_name}"


def split_suite_property(suite_name: str) -> tuple[str, str] | None:
    """(node id, ``dlperf.…`` name) of a suite property :func:`suite_property_name` wrote, else None."""
    nodeid, sep, rest = suite_name.rpartition("::" + PREFIX)
    return (nodeid, PREFIX + rest) if sep and nodeid else None


# --- what the plugin writes ---------------------------------------------------------------------

def of_result(result: TrainingResult) -> list[Property]:
    """A training result: its machine, scenario, software and every measured figure."""
    label = result.label
    props = [(PREFIX + HARDWARE, str(result.environment.get("hardware_key", ""))),
             (name(label, "scenario"), result.scenario.describe()),
             (name(label, "software"), words(result.software))]
    for metric in result.metrics.values():
        props += _figure(label, metric, with_n=True)
    if result.environment.get("workers"):
        props.append((name(label, "workers"), str(result.environment["workers"])))
    return props


def of_derived(label: str, metric: Metric) -> list[Property]:
    """A figure the test derived (a speedup, a scaling efficiency), with its interval if it has one."""
    props = _figure(label, metric, with_n=False)
    if metric.interval is not None:
        props.append((name(label, metric.name, "interval"), interval(*metric.interval)))
    return props


def _figure(label: str, metric: Metric, with_n: bool) -> list[Property]:
    stats = metric.stats
    value = stats.median if with_n else metric.value
    props = [(name(label, metric.name), number(value)),
             (name(label, metric.name, "iqr"), number(stats.iqr))]
    if with_n:
        props.append((name(label, metric.name, "n"), str(stats.n)))
    props += [(name(label, metric.name, "unit"), metric.unit),
              (name(label, metric.name, "direction"), metric.direction),
              (name(label, metric.name, "samples"), " ".join(number(x) for x in metric.samples))]
    return props


def of_floor(label: str, metric: str, floor: float) -> list[Property]:
    """The figure a test claims at least (drawn in charts)."""
    return [(name(label, metric, "floor"), number(floor))]


def of_verdict(verdict: Any) -> list[Property]:
    """A stored-baseline judgement (:class:`pytest_dlperf.judging.verdict.Verdict`) of one figure."""
    label, metric = verdict.label, verdict.metric
    props = [(name(label, metric, "verdict"), verdict.status),
             (name(label, metric, "tolerance"), number(verdict.tolerance))]
    if verdict.baseline is not None:
        props += [(name(label, metric, "baseline"), number(verdict.baseline)),
                  (name(label, metric, "runs"), str(verdict.runs)),
                  (name(label, metric, "detectable"), CANNOT_DETECT if verdict.gate is None else number(verdict.gate))]
        if verdict.noise is not None:
            props.append((name(label, metric, "noise"), number(verdict.noise)))
        if verdict.alpha is not None:  # the policy it was judged under, so `dlperf compare` judges the same way
            props += [(name(label, metric, "df"), number(verdict.df)),
                      (name(label, metric, "alpha"), number(verdict.alpha))]
    return props


def of_paired(key: str, ratio: Any, reference: str) -> list[Property]:
    """A paired group's ratio (:class:`pytest_dlperf.judging.stats.PairedRatio`) of ``key`` over ``reference``."""
    return [(name(key, "paired_ratio"), number(ratio.estimate)),
            (name(key, "paired_interval"), interval(ratio.low, ratio.high)),
            (name(key, "paired_over"), reference),
            (name(key, "pairs"), str(ratio.n))]


def of_not_compared(label: str, why: str, commits: Mapping[str, str] | None = None) -> list[Property]:
    """A/B mode, a scenario the reference revision could not run (new in the candidate): ``ab_verdict``
    :data:`NOT_COMPARED`, why, and both sides' commits."""
    return [(name(label, "ab_verdict"), NOT_COMPARED), (name(label, "ab_not_compared"), why),
            *((name(label, f"{side}_commit"), text) for side, text in (commits or {}).items())]


def of_ab(label: str, ratio: Any, outcome: str, reference_software: Mapping[str, Any],
          commits: Mapping[str, str] | None = None, code: Mapping[str, str] | None = None) -> list[Property]:
    """A/B mode: the candidate over the reference, the outcome, the reference's software, the process pairs
    the interval rests on and, against a revision, both sides' commits (``reference_commit``,
    ``candidate_commit``: id, subject, and whether the working tree had uncommitted changes); for your own
    code, where each side imported the project's modules from (``reference_code``, ``candidate_code``)."""
    return [(name(label, "ab_ratio"), number(ratio.estimate)),
            (name(label, "ab_interval"), interval(ratio.low, ratio.high)),
            (name(label, "ab_confidence"), f"{ratio.confidence:g}"),
            (name(label, "ab_verdict"), outcome),
            (name(label, "ab_process_pairs"), str(ratio.units)),
            (name(label, "reference_software"), words(reference_software)),
            *((name(label, f"{side}_commit"), text) for side, text in (commits or {}).items()),
            *((name(label, f"{side}_code"), text) for side, text in (code or {}).items())]
