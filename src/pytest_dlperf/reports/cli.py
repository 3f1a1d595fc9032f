"""``dlperf``: merge, summarise, compare and render as HTML the JUnit reports of pytest-dlperf runs.

    dlperf merge OUT.xml IN.xml [IN.xml ...] [--force]   --force: replace an existing OUT.xml
    dlperf summary REPORT.xml|DIR [...] [--output FILE]  Markdown, e.g. >> $GITHUB_STEP_SUMMARY
                   [--brief [--link URL]]               the verdict only, short enough for a PR comment
    dlperf compare OLD.xml NEW.xml [--threshold 0.05]    exit 1 when a metric got worse (the tests' rule)
                   [--history REPORT.xml|DIR ...]       earlier runs: each figure's run-to-run noise
    dlperf html REPORT.xml|RUNDIR [...] --out DIR        one self-contained page, charts (with matplotlib)
                                                         and history over runs
                [--history REPORT.xml|DIR|BASELINE.json ...]  plus change points over those runs
    dlperf history REPORT.xml|DIR|BASELINE.json [...]    each figure's change points over runs
    dlperf record [--baseline-dir DIR] [--estimate-from REPORT.xml|DIR ...] [-- COMMAND ...]
                                                         record this machine type's baselines: the suite's
                                                         command (tox -m perf) run until each figure has
                                                         its recorded runs; run it again to resume

This module parses the arguments and writes the output; each command's work is in a module of its own:
:mod:`.junit` (merge), :mod:`.summary` and :mod:`.brief`, :mod:`.compare`, :mod:`.html_report` (its charts:
:mod:`.plots`), :mod:`.history`, :mod:`.recording` (record).

Exit codes: 0 fine, 1 ``compare`` found a metric worse than the tolerance, 2 bad input; ``record`` exits with
a failed recording's own status.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Callable, Sequence, TextIO

from pytest_dlperf import __version__
from pytest_dlperf.judging.baselines import RECORDINGS, BaselineFileError
from pytest_dlperf.reports import history, recording
from pytest_dlperf.reports.brief import brief_markdown
from pytest_dlperf.reports.changepoints import MAX_PVALUE
from pytest_dlperf.reports.compare import compare
from pytest_dlperf.reports.cost import cost_markdown, costs_of
from pytest_dlperf.reports.html_report import write as write_html
from pytest_dlperf.reports.junit import expand, merge, read_reports
from pytest_dlperf.reports.records import ReportError
from pytest_dlperf.reports.summary import summary_markdown

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE = 0, 1, 2


def _threshold(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a fraction such as 0.05 for 5%") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{value} is out of range; give a fraction in [0, 1), e.g. 0.05 for 5%")
    return value


# --- merge ---------------------------------------------------------------------------------------

def cmd_merge(args: argparse.Namespace, out: TextIO) -> int:
    target = Path(args.output)
    for given in args.inputs:
        if target.resolve() == Path(given).resolve():
            raise ReportError(f"{target}: the output is also an input, and merging would overwrite it; write "
                              "the merged report to a new file: dlperf merge OUT.xml IN.xml [IN.xml ...]")
    if target.exists() and not args.force:
        raise ReportError(f"{target}: exists, and merging would overwrite it; give --force to replace it, or "
                          "write the merged report to a new file")
    merged = merge(args.inputs)
    if not target.parent.is_dir():
        raise ReportError(f"{target.parent}: no such directory to write {target.name} into")
    merged.write(str(target))
    print(f"{target}: {merged.tests} tests ({merged.failures} failed, {merged.errors} errors, "
          f"{merged.skipped} skipped) from {len(args.inputs)} reports", file=out)
    return EXIT_OK


# --- summary -------------------------------------------------------------------------------------

def cmd_summary(args: argparse.Namespace, out: TextIO) -> int:
    if args.link is not None and not args.brief:
        raise ReportError("--link goes with --brief (the full summary is the report it links to): "
                          "dlperf summary --brief REPORT.xml --link URL")
    reports = list(args.reports)
    absent = [r for r in reports if args.skip_missing and not os.path.exists(r)]
    reports = [r for r in reports if r not in absent]
    if not reports:
        raise ReportError(f"none of the reports exist: {', '.join(absent)}")
    tests = read_reports(expand(reports))
    if args.brief:
        text = brief_markdown(tests, link=args.link or None, not_run=absent)
    else:
        text = summary_markdown(tests)
        profile = cost_markdown(costs_of(expand(reports)))
        text += ("\n" + "\n".join(profile) + "\n") if profile else ""
    if absent and not args.brief:
        text += "\nNot run (no report): " + ", ".join(f"`{os.path.basename(r)}`" for r in absent) + "\n"
    if args.output:
        with open(args.output, "a", encoding="utf-8") as fh:
            fh.write(text)
    else:
        out.write(text)
    return EXIT_OK


# --- compare -------------------------------------------------------------------------------------

def cmd_compare(args: argparse.Namespace, out: TextIO) -> int:
    regressions = compare(args.old, args.new, args.threshold, [str(p) for p in expand(args.history)], out)
    return EXIT_REGRESSION if regressions else EXIT_OK



# --- html ----------------------------------------------------------------------------------------

def cmd_html(args: argparse.Namespace, out: TextIO) -> int:
    reports = [r for r in args.reports if not (args.skip_missing and not os.path.exists(r))]
    if not reports:
        raise ReportError(f"none of the reports exist: {', '.join(args.reports)}")
    target = write_html(reports, Path(args.out), history=args.history, max_pvalue=args.max_pvalue)
    print(target, file=out)
    return EXIT_OK


# --- history -------------------------------------------------------------------------------------

def _pvalue(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a p-value such as 0.001") from None
    if not 0.001 <= value < 1:  # 999 shuffles cannot show a p below 1/1000
        raise argparse.ArgumentTypeError(f"{value} is out of range; give a p-value in [0.001, 1), e.g. 0.001")
    return value


def cmd_history(args: argparse.Namespace, out: TextIO) -> int:
    analyses = history.history(args.reports, args.max_pvalue)
    shown = [a for a in analyses if a.changes] if args.changed_only else analyses
    for line in history.table(shown) if shown else []:
        print(line, file=out)
    print("", file=out)
    print(history.summary_line(analyses), file=out)
    print(history.method_line(args.max_pvalue), file=out)
    return EXIT_OK


# --- record --------------------------------------------------------------------------------------

def cmd_record(args: argparse.Namespace, out: TextIO) -> int:
    default = not args.suite
    command = list(recording.DEFAULT_COMMAND) if default else list(args.suite)
    if args.estimate_from:
        seconds, read = recording.profiled_seconds(expand(args.estimate_from))
    else:
        seconds, read = recording.profiled_seconds(recording.default_reports() if default else [], strict=False)
    unprofiled = recording.unprofiled_environments(read) if default and read and not args.estimate_from else []
    resume = ["dlperf", "record", *(["--baseline-dir", args.baseline_dir] if args.baseline_dir else []),
              *(["--estimate-from", *args.estimate_from] if args.estimate_from else []),
              *(["--", *args.suite] if args.suite else [])]
    return recording.record(command, Path(args.baseline_dir or "baselines"), out, shlex.join(resume),
                            (seconds, len(read)), default, unprofiled)


# --- entry point ---------------------------------------------------------------------------------

def _reading(sub: argparse._SubParsersAction, name: str, says: str, func: Callable[[argparse.Namespace, TextIO], int],
             metavar: str, reports_help: str | None = None) -> argparse.ArgumentParser:
    """A command that reads the reports given as its arguments: its parser, the reports' argument added."""
    p = sub.add_parser(name, help=says)
    p.add_argument("reports", metavar=metavar, nargs="+", help=reports_help)
    p.set_defaults(func=func)
    return p


def _out_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--out", required=True, metavar="DIR", help=f"folder for {what} (created if needed)")


def _max_pvalue_option(p: argparse.ArgumentParser, note: str) -> None:
    p.add_argument("--max-pvalue", type=_pvalue, default=MAX_PVALUE, help="significance of a change point "
                   f"(default {MAX_PVALUE:g}; {note})")


_FOLDERS = "reports, or folders of them (every *.xml under it)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dlperf", description="Merge, summarise, compare and render as HTML the "
                                     "JUnit XML reports of pytest-dlperf runs (pytest --junitxml=FILE).")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("merge", help="merge reports from several runners into one JUnit XML file")
    p.add_argument("output", metavar="OUT.xml")
    p.add_argument("inputs", metavar="IN.xml", nargs="+")
    p.add_argument("--force", action="store_true", help="replace OUT.xml where it exists")
    p.set_defaults(func=cmd_merge)

    p = _reading(sub, "summary", "Markdown summary (for $GITHUB_STEP_SUMMARY)", cmd_summary, "REPORT.xml|DIR",
                 _FOLDERS)
    p.add_argument("--brief", action="store_true", help="only the verdict, the failures, the regressions and the "
                   "A/B ratios, within 60,000 characters: a pull request's comment")
    p.add_argument("--link", metavar="URL", help="with --brief: end with a link to the full report (e.g. the "
                   "workflow run's page); an empty URL is left out")
    p.add_argument("--output", "-o", metavar="FILE", help="append to FILE instead of printing")
    p.add_argument("--skip-missing", action="store_true",
                   help="list reports that do not exist as not run instead of failing")

    p = sub.add_parser("compare", help="judge NEW against OLD metric by metric with the tests' rule; "
                       "exit 1 if one got worse")
    p.add_argument("old", metavar="OLD.xml")
    p.add_argument("new", metavar="NEW.xml")
    p.add_argument("--history", metavar="REPORT.xml|DIR", nargs="+", default=[],
                   help="reports (or folders of them) of earlier runs of the same tests on the same machine: each "
                        "figure's values in them give its run-to-run noise, as the baselines' recorded runs do "
                        "for the tests")
    p.add_argument("--threshold", "--tolerance", type=_threshold, default=0.05, dest="threshold",
                   help="the tolerance, as pytest --dlperf-tolerance: a change must exceed it (widened by "
                   "the noise of the rounds, as the tests widen it) to count (default 0.05 = 5%%)")
    p.set_defaults(func=cmd_compare)

    p = _reading(sub, "html", "one self-contained HTML page: summary, regressions first, tables, charts and, "
                 "given several runs, each figure's history", cmd_html, "REPORT.xml|RUNDIR",
                 "reports, or folders of them (every *.xml under it); the reports of one folder are one run (as "
                 "CI artifacts download), the newest run is shown in detail")
    _out_option(p, "index.html")
    p.add_argument("--skip-missing", action="store_true", help="leave out reports that do not exist")
    p.add_argument("--history", nargs="+", metavar="REPORT.xml|DIR|BASELINE.json",
                   help="add a change-point section over these runs' reports (as dlperf history)")
    _max_pvalue_option(p, "docs/history.md gives the rates")

    p = _reading(sub, "history", "each figure over many runs: the run where it changed, by how much, and whether "
                 "the change persisted (changed figures first)", cmd_history, "REPORT.xml|DIR|BASELINE.json",
                 "reports of runs of one suite, folders of them (every *.xml under it; a run's time is its "
                 "testsuite timestamp, else the file's mtime), or baselines/<key>.json with 'runs'")
    p.add_argument("--changed-only", action="store_true", help="list only the figures that changed")
    _max_pvalue_option(p, "0.01 finds more steps and more false ones: docs/history.md")

    p = sub.add_parser("record", help=f"record this machine type's baselines: run the suite's command, each time "
                       f"as a new process, until every figure has {RECORDINGS} recorded runs; run it again after an "
                       "interruption to continue", description="Record this machine type's baselines: the suite's "
                       "command runs with DLPERF_UPDATE_BASELINES=1 as many times as its figures still need. "
                       "Give the command after --, e.g. dlperf record -- pytest perf_tests -m 'not slow'.")
    p.add_argument("--baseline-dir", metavar="DIR",
                   help="the folder of baseline files the command's pytest runs write (default baselines/, as "
                   "pytest's default at the rootdir: run this from there)")
    p.add_argument("--estimate-from", nargs="+", default=[], metavar="REPORT.xml|DIR",
                   help="JUnit reports of an earlier run of the same command here: their cost profile estimates "
                   "each recording's time (default for tox -m perf: reports/perf-*.xml)")
    p.add_argument("suite", nargs="*", metavar="COMMAND",
                   help=f"after --: the suite's command (default: {shlex.join(recording.DEFAULT_COMMAND)})")
    p.set_defaults(func=cmd_record)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args, sys.stdout))
    except (ReportError, BaselineFileError, recording.RecordingError) as exc:
        print(f"dlperf {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # reading is checked in junit.load; this is writing the output
        print(f"dlperf {args.command}: error: cannot write {exc.filename or 'the output'}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
