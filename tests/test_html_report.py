"""``dlperf html``: the page's content from hand-made reports, then the page as headless Chromium renders it."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_dlperf.reports.combine import unique_tests
from pytest_dlperf.reports.html_sections import sparkline
from pytest_dlperf.reports.runs import read_runs
from test_cli import HW, amp_case, case, metric_props, run, scaling_case, write_report

DATA = Path(__file__).parent / "data"


def three_runs(tmp_path: Path) -> list[Path]:
    """Three runs' reports, each in its own folder as CI artifacts download; the last one regressed."""
    folders = []
    for i, (fp32, verdict) in enumerate(((100.0, "ok"), (97.0, "ok"), (80.0, "regression"))):
        folder = tmp_path / "runs" / f"run{i + 1}"
        folder.mkdir(parents=True)
        failure = ("regression: fp32 throughput 80 samples/s vs baseline 100 (-20.0%)"
                   if verdict == "regression" else None)
        write_report(folder / "torch.xml", [amp_case(fp32=fp32, verdicts=(verdict, "ok"), failure=failure)])
        write_report(folder / "mxnet.xml", [scaling_case(), case("test_amp[resnet18]", [], skipped="no GPU")])
        for report in folder.iterdir():  # the order the runs happened in, as the reports' timestamps would say
            os.utime(report, (1_700_000_000 + 3600 * i,) * 2)
        folders.append(folder)
    return folders


def html_of(tmp_path: Path, capsys: pytest.CaptureFixture[str], *paths: Path) -> str:
    code, out, err = run(capsys, "html", *map(str, paths), "--out", str(tmp_path / "html"))
    assert code == 0, err
    assert out.strip() == str(tmp_path / "html" / "index.html")
    return (tmp_path / "html" / "index.html").read_text(encoding="utf-8")


def text_of(page: str) -> str:
    """The page's words; a line-break opportunity (``<wbr>``) inside a test name is no space."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page.replace("<wbr>", "")))


def test_the_newest_run_in_detail_regressions_first_and_every_figure_s_history(tmp_path, capsys):
    page = html_of(tmp_path, capsys, *reversed(three_runs(tmp_path)))  # given in any order
    text = text_of(page)
    # The title names the run by its machine and day; the verdict line comes first.
    assert "<title>pytest-dlperf: cpu-test-4cpu · 2023-11-15</title>" in page
    assert text.index("FAILED: 1 regression beyond its noise, 0 correctness failures") < text.index("Summary")
    # Two tests, counted once though test_amp is in two reports (passed in one, skipped in the other).
    assert "2 tests (each counted once" in text and "0 passed 1 failed" not in text and "1 passed" in text
    # Regressions and failures come before the per-test tables and the charts.
    assert page.index('id="attention"') < page.index('id="tests"') < page.index('id="charts"')
    attention = text[text.index("Regressions and failures"):text.index("Tests perf_tests")]
    assert "regression: fp32 throughput 80 samples/s vs baseline 100 (-20.0%)" in attention
    # every row on one machine: its key said once above the table, not in a column
    assert "All on cpu-test-4cpu . test scenario metric" in attention
    assert "test_amp[resnet18] fp32 throughput 80 samples/s IQR 4 100 samples/s -20.0%" in attention
    assert "amp_vs_fp32 speedup 2.62x" in attention  # the paired evidence beside the absolute throughput
    # Units a person reads; the direction where lower is better.
    assert "1.863 GiB" in text and "peak_host_memory (lower is better)" in text
    # History: the figure in each run, oldest first, the change of the newest, and a sparkline.
    history = text[text.index("figures over the last 3 runs"):]
    assert "The newest run's 10 figures over the last 3 runs" in text
    row = re.search(r"test_amp\[resnet18\] fp32 throughput (.*?)%", history).group(1)
    assert row.split()[:6] == ["100", "samples/s", "97", "samples/s", "80", "samples/s"], row
    assert "-17.5" in row
    assert page.count('<svg class="spark"') >= 5


def test_the_page_needs_no_network_and_no_other_file(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the charts need matplotlib")
    page = html_of(tmp_path, capsys, three_runs(tmp_path)[-1])
    assert not re.search(r"""(src|href)=["'](?!data:|#)""", page), "a resource outside the page"
    assert "<script" not in page and "<link" not in page and "@import" not in page
    images = re.findall(r'<img alt="([^"]*)" src="data:image/png;base64,', page)
    assert images == ["test_fake: change from the baseline on cpu-test-4cpu", "test_fake: speedups on cpu-test-4cpu",
                      "test_distributed: scaling on cpu-test-4cpu"]
    assert "One run only" in page  # and says how to get a history


def test_a_rerun_under_another_hardware_key_is_told_apart(tmp_path, capsys):
    """The ISA-capped rerun has the same test ids and its own machine key: its figures are not merged into the
    others'."""
    folder = tmp_path / "run"
    folder.mkdir()
    write_report(folder / "torch.xml", [amp_case(fp32=100.0)])
    capped = amp_case(fp32=70.0).replace(HW, "cpu-test-4cpu-isa-avx512-core")
    write_report(folder / "torch-capped.xml", [capped])
    text = text_of(html_of(tmp_path, capsys, folder / "torch.xml", folder / "torch-capped.xml"))
    assert "cpu-test-4cpu-isa-avx512-core fp32 throughput 70 samples/s" in text
    assert "cpu-test-4cpu fp32 throughput 100 samples/s" in text


def test_runs_are_ordered_by_their_reports_timestamps(tmp_path):
    folders = three_runs(tmp_path)
    for folder, stamp in zip(folders, ("2026-01-03T00:00:00", "2026-01-01T00:00:00", "2026-01-02T00:00:00")):
        for report in folder.iterdir():
            report.write_text(report.read_text().replace('time="1" ', f'time="1" timestamp="{stamp}" '))
    assert [r.name for r in read_runs(folders)] == ["run2", "run3", "run1"]


def test_a_test_run_by_several_framework_environments_counts_once():
    from pytest_dlperf.reports.records import TestRecord

    tests = [TestRecord("t.py::a", "skipped"), TestRecord("t.py::a", "passed"), TestRecord("t.py::a", "skipped"),
             TestRecord("t.py::b", "passed"), TestRecord("t.py::b", "failed", "boom")]
    merged = {t.test: t for t in unique_tests(tests)}
    assert len(merged) == 2 and merged["t.py::a"].outcome == "passed"
    assert (merged["t.py::b"].outcome, merged["t.py::b"].message) == ("failed", "boom")


def test_sparkline_skips_runs_without_the_figure():
    svg = sparkline([1.0, None, 3.0, 2.0])
    assert svg.count(",") == 3 and "<circle" in svg  # three points, the newest marked
    assert sparkline([None, 2.0]) == ""


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = run(capsys, "html", str(empty), "--out", str(tmp_path / "html"))
    assert code == 2 and err.strip() == f"dlperf html: error: {empty}: a folder without any .xml report under it"
    code, _, err = run(capsys, "html", str(tmp_path / "absent.xml"), "--out", str(tmp_path / "html"))
    assert code == 2 and "absent.xml: no such file" in err
    report = write_report(tmp_path / "r.xml", [amp_case()])
    (tmp_path / "file").write_text("")
    code, _, err = run(capsys, "html", str(report), "--out", str(tmp_path / "file"))
    assert code == 2 and "exists and is not a directory" in err


def test_a_real_run_s_report(tmp_path, capsys):
    """A report the suite wrote (tests/data): its figures and charts reach the page."""
    pytest.importorskip("matplotlib", reason="the charts need matplotlib")
    reports = sorted(DATA.glob("perf-*.xml"))
    assert reports, f"no stored report in {DATA}"
    page = html_of(tmp_path, capsys, *reports)
    text = text_of(page)
    for t in unique_tests([t for r in read_runs(reports) for t in r.tests]):
        for m in t.metrics:
            assert f"{m.label} {m.metric}" in text, (t.test, m.label, m.metric)
    assert page.count('src="data:image/png;base64,') >= 3


# --- in a browser --------------------------------------------------------------------------------

def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium); the page is checked "
                "without a browser by the tests above")


def _browse(tmp_path: Path, page: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--user-data-dir={tmp_path / 'chromium-profile'}", *flags, page.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_chromium_renders_the_page_with_its_figures_and_charts(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the charts need matplotlib")
    image = pytest.importorskip("matplotlib.image", reason="reading the screenshot needs matplotlib")
    html_of(tmp_path, capsys, *three_runs(tmp_path))
    page = tmp_path / "html" / "index.html"

    dom = _browse(tmp_path, page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = text_of(dom.stdout)
    assert "1 regression" in text and "80 samples/s IQR 4" in text and "-20.0%" in text
    assert "History" in text and "97 samples/s" in text

    shot = tmp_path / "shot.png"
    done = _browse(tmp_path, page, f"--screenshot={shot}", "--window-size=1300,2600")
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    pixels = image.imread(str(shot))[..., :3]
    assert pixels.shape[:2] == (2600, 1300)
    assert pixels.std() > 0.05, "the screenshot is blank"
    # The regression's red (#d62728) is on screen: in the summary badge, the tables and the chart.
    red = ((abs(pixels[..., 0] - 0xd6 / 255) < 0.03) & (abs(pixels[..., 1] - 0x27 / 255) < 0.03)
           & (abs(pixels[..., 2] - 0x28 / 255) < 0.03))
    assert red.sum() > 2000, red.sum()
    # A chart was drawn: rows of the page below the tables carry the charts' many colours.
    assert len({tuple(p) for p in (pixels[1500:2600:7, ::7] * 255).astype(int).reshape(-1, 3)}) > 50


def test_history_follows_the_newest_run_s_figures(tmp_path, capsys):
    old, new = tmp_path / "runs" / "a", tmp_path / "runs" / "b"
    old.mkdir(parents=True)
    new.mkdir()
    write_report(old / "r.xml", [amp_case(fp32=90.0), scaling_case()])
    write_report(new / "r.xml", [amp_case(fp32=100.0)])
    os.utime(old / "r.xml", (1_700_000_000,) * 2)
    text = text_of(html_of(tmp_path, capsys, old, new))
    history = text[text.index("History"):]
    assert "The newest run's 6 figures over the last 2 runs" in history
    assert "4 figures of earlier runs that the newest run does not have are left out" in history
    assert "fp32 throughput 90 samples/s 100 samples/s +11.1%" in history and "workers4" not in history


def test_skip_missing_leaves_out_absent_reports(tmp_path, capsys):
    report = write_report(tmp_path / "torch.xml", [amp_case()])
    absent = tmp_path / "tf.xml"
    code, out, err = run(capsys, "html", "--skip-missing", str(report), str(absent), "--out", str(tmp_path / "html"))
    assert code == 0 and (tmp_path / "html" / "index.html").is_file(), err
    code, _, err = run(capsys, "html", "--skip-missing", str(absent), "--out", str(tmp_path / "html"))
    assert code == 2 and err.strip() == f"dlperf html: error: none of the reports exist: {absent}"


# --- a large run, as a person reads it (issue 26) --------------------------------------------------

LONG = "test_cpu_precisions_train_and_hold_their_throughput_under_every_supported_setting"


def gated(label: str, metric: str, value: float, unit: str, baseline: float, verdict: str,
          tolerance: float = 0.1, detectable: str = "0.12", runs: int = 6) -> list[tuple[str, str]]:
    """A figure as the plugin writes it since gates are recorded: tolerance, gate, noise and runs."""
    direction = "lower" if metric in ("peak_host_memory", "step_time") else "higher"
    return metric_props(label, metric, value, unit, verdict, baseline, iqr=value * 0.02) + [
        (f"dlperf.{label}.{metric}.direction", direction), (f"dlperf.{label}.{metric}.tolerance", str(tolerance)),
        (f"dlperf.{label}.{metric}.detectable", detectable), (f"dlperf.{label}.{metric}.runs", str(runs))]


def big_run(folder: Path) -> dict[str, object]:
    """One run of 20 tests (80 figures) on one machine: one torch throughput regression reported in two
    files (a merged report beside its part), every TensorFlow memory figure up 12-21% (a shift of the
    environment), a figure with unknown noise, and a test that failed on a NaN loss."""
    folder.mkdir(parents=True)
    torch_cases, tf_cases = [], []
    for i in range(10):
        for fw, cases in (("torch", torch_cases), ("tensorflow", tf_cases)):
            params = f"[resnet{18 + i}-{fw}-amp_bf16-channels_last-batch64]"
            props = [("dlperf.hardware", HW), ("dlperf.fp32.software",
                                               f"framework={fw} framework_version=2.{i % 2}.0 python=3.11.7")]
            regressed = fw == "torch" and i == 3
            props += gated("fp32", "throughput", 70.0 if regressed else 100.0 + i, "samples/s", 100.0,
                           "regression" if regressed else "ok")
            memory = 1.0e9 * (1.12 + 0.01 * i) if fw == "tensorflow" else 1.0e9
            props += gated("fp32", "peak_host_memory", memory, "bytes", 1.0e9,
                           "regression" if fw == "tensorflow" and i >= 8
                           else "inconclusive" if fw == "tensorflow" else "ok")
            unknown = fw == "torch" and i == 5
            props += gated("fp32", "step_time", 0.2, "s", 0.16 if unknown else 0.2,
                           "inconclusive" if unknown else "ok", detectable="unknown" if unknown else "0.12",
                           runs=1 if unknown else 6)
            props += gated("amp_vs_fp32", "speedup", 1.5, "x", 1.5, "ok") + [
                ("dlperf.amp_vs_fp32.speedup.interval", "1.41 1.62")]
            failure = None
            if regressed:
                failure = "regression: fp32 throughput 70 samples/s vs baseline 100 (-30.0%)"
            if fw == "tensorflow" and i == 0:
                failure = "AssertionError: the loss is NaN after 12 steps"
            cases.append(case(LONG + params, props, failure=failure, classname=f"perf_tests.test_precision_{fw}"))
    write_report(folder / "torch.xml", torch_cases)
    write_report(folder / "tensorflow.xml", tf_cases)
    write_report(folder / "torch-merged.xml", torch_cases)  # the same figures again: counted once
    return {"regressions": 1 + 2, "correctness": 1, "inconclusive": 8 + 1}


def test_a_large_run_opens_with_its_verdict_and_its_correctness_failures(tmp_path, capsys):
    expected = big_run(tmp_path / "run")
    page = html_of(tmp_path, capsys, tmp_path / "run")
    text = text_of(page)
    first = text[text.index("FAILED"):text.index("Regressions Summary")]
    assert (f"FAILED: {expected['regressions']} regressions beyond their noise, "
            f"{expected['correctness']} correctness failure, {expected['inconclusive']} inconclusive") in first
    assert "80 figures on cpu-test-4cpu" in first and "tensorflow 2.0.0" in first and "torch 2.1.0" in first
    # The NaN loss is a correctness failure, in its own section above the regressions.
    assert page.index('id="correctness"') < page.index('id="attention"')
    assert "the loss is NaN after 12 steps" in text[text.index("Correctness failures"):text.index("Regressions and")]
    # No unjudged roll-up: how far a run moved is its judged `<kind> shift` figure.
    assert 'id="rollups"' not in page and '<p class="warn">' not in page
    # The paired evidence beside the regressed throughput; the figure with one recorded run is marked.
    start = text.index("3 regressions beyond the figures' noise")
    regressions = text[start:text.index("Failed tests", start)]
    assert "amp_vs_fp32 speedup 1.5x [1.41, 1.62]" in regressions
    assert "cannot detect" in text[text.index("inconclusive figures"):]
    # A gate that cannot detect is named so, never shown as the tolerance it does not hold to.
    gates = re.findall(r'<td class="num gate">(.*?)</td>', page)
    assert any("cannot detect" in g for g in gates)
    assert not [g for g in gates if "cannot detect" in g and "±" in g]
    # Every memory figure in one unit (1.0-1.21e9 bytes straddle 1 GiB: shown all in MiB, or all in GiB).
    assert ("MiB" in text) != ("GiB" in text)


def _geometry(tmp_path: Path, page: Path, width: int, height: int) -> dict:
    """The page as Chromium lays it out at ``width`` x ``height``: a script added to a copy of the
    page (the page itself has none) writes element boxes into the DOM, which --dump-dom returns."""
    import json

    probe = """<script>addEventListener('load', () => {
      const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
      const out = {viewport: [document.documentElement.clientWidth, innerHeight],
                   pageWidth: document.documentElement.scrollWidth,
                   verdict: box(document.getElementById('verdict')),
                   verdictText: document.getElementById('verdict').textContent,
                   tables: [...document.querySelectorAll('table')].map(box),
                   testCells: [...document.querySelectorAll('td.test')].map(
                     c => [c.textContent, c.clientWidth, c.scrollWidth, box(c)])};
      const pre = document.createElement('pre'); pre.id = 'geometry'; pre.textContent = JSON.stringify(out);
      document.body.appendChild(pre); });</script>"""
    probed = page.with_name("probed.html")
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", probe + "</body>"), encoding="utf-8")
    done = _browse(tmp_path, probed, "--dump-dom", f"--window-size={width},{height}", "--virtual-time-budget=5000",
                   "--disable-background-networking", "--no-first-run", "--disable-component-update",
                   "--disable-sync")
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<pre id="geometry">(.*?)</pre>', done.stdout, re.S)
    assert found, "the probe wrote no geometry: " + done.stdout[-500:]
    return json.loads(html.unescape(found.group(1)))


def test_chromium_shows_the_verdict_on_the_first_screen_and_no_table_wider_than_it(tmp_path, capsys):
    expected = big_run(tmp_path / "run")
    html_of(tmp_path, capsys, tmp_path / "run")
    g = _geometry(tmp_path, tmp_path / "html" / "index.html", 1400, 900)
    width, height = g["viewport"]
    # The window's frame may take some of the 900 px: the first screen is what is left of it.
    assert width == 1400 and 600 <= height <= 900, g["viewport"]
    left, top, right, bottom = g["verdict"]
    assert 0 <= top < bottom <= height, f"the verdict line is not within the first screen: {g['verdict']}"
    assert g["verdictText"].startswith(f"FAILED: {expected['regressions']} regressions beyond their noise")
    assert g["pageWidth"] <= width, f"the page scrolls sideways: {g['pageWidth']} px wide"
    wide = [t for t in g["tables"] if t[0] < 0 or t[2] > width]
    assert not wide, f"{len(wide)} tables wider than the {width} px viewport: {wide[:3]}"
    # Test names whole (every one in the DOM, untruncated) and readable: no cell overflows or is crushed.
    cells = g["testCells"]
    assert len(cells) >= 3 + 9 and all(LONG in text for text, *_ in cells)
    crushed = [c for c in cells if c[2] > c[1] or c[1] < 150]
    assert not crushed, f"{len(crushed)} test cells overflow or are narrower than 150 px: {crushed[:2]}"


WHOLE_RUN = Path(__file__).parent / "data" / "whole-run-avx2"


def test_a_real_suite_s_tables_fit_the_page_and_say_a_shared_machine_once(tmp_path, capsys):
    """A whole `tox -m perf` run's twelve reports: its long inconclusive table once ran past a 1400 px
    window (the verdict column off the edge); a table whose rows share a machine key names it above
    the table instead of in a column."""
    page = html_of(tmp_path, capsys, WHOLE_RUN)
    start = page.index('id="inconclusive"')
    table = page[start:page.index("</table>", start)]
    assert "<th>hardware</th>" not in table and '<td class="hw">' not in table
    assert '<p class="shared">All on <code>cpu-amd-epyc-f25m1-2cpu-avx2</code>.</p>' in table
    g = _geometry(tmp_path, tmp_path / "html" / "index.html", 1400, 900)
    width = g["viewport"][0]
    wide = [t for t in g["tables"] if t[0] < 0 or t[2] > width]
    assert not wide and g["pageWidth"] <= width, f"{len(wide)} tables wider than {width} px: {wide[:3]}"
