"""The pull-request comment as a reviewer sees it: ``dlperf summary --brief`` of reports, rendered as GitHub
renders a comment, screenshotted in headless Chromium.  (A dev script, not a pytest test.)

The Markdown goes through cmarkgfm (the Python binding of cmark-gfm, GitHub's renderer, with its
extensions: tables, autolinks, strikethrough; inline HTML kept, as GitHub keeps the tags its sanitizer
allows) into a page styled as a comment on a pull request's conversation tab: the comment's body about
850 px wide in a 1400 px window (GitHub's 1280 px container less the sidebar and the avatar's gutter,
an estimate), 14 px text, and the table rules of GitHub's Markdown CSS that decide what a reviewer
sees of a wide table: ``display: block; width: max-content; max-width: 100%; overflow: auto``, so
columns beyond the comment's width scroll out of sight. Chromium's shot is cropped below the
comment's last line (at most :data:`HEIGHT` px: a long brief is shown from its top).

    pip install cmarkgfm      # the torch environment of tox.ini has it
    python bench/pr_comment.py tests/data/whole-run-avx2 --slowed 3 \\
        --link https://github.com/OWNER/REPO/actions/runs/1 --out docs/pictures/pr-comment.png

``--slowed K`` lowers every K-th throughput that its gate can judge just beyond that gate and judges it
a regression (``slowed`` of ``tests/test_brief.py``), to see a whole suite's brief with regressions.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]
from pytest_dlperf.reports.brief import brief_markdown  # noqa: E402
from pytest_dlperf.reports.junit import expand, read_reports  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
WIDTH = 1400
#: Tall enough for a whole brief of a large run at 14 px; the shot is cropped to the comment.
HEIGHT = 8000

#: GitHub's comment styles, as far as they decide layout: the comment box and the Markdown rules for
#: headings, paragraphs, lists, code and tables (github-markdown-css, light theme).
CSS = """
body { margin: 0; background: #ffffff; font-family: -apple-system, BlinkMacSystemFont, "Segoe UI", "Noto Sans",
       Helvetica, Arial, sans-serif; color: #1f2328; }
.page { width: 1280px; margin: 24px auto; display: flex; gap: 24px; }
.timeline { width: 912px; padding-left: 56px; }
.sidebar { width: 296px; color: #59636e; font-size: 12px; }
.comment { border: 1px solid #d1d9e0; border-radius: 6px; }
.comment-header { background: #f6f8fa; border-bottom: 1px solid #d1d9e0; padding: 8px 16px; font-size: 14px;
                  color: #59636e; border-radius: 6px 6px 0 0; }
.markdown-body { padding: 16px; font-size: 14px; line-height: 1.5; word-wrap: break-word; }
.markdown-body > *:first-child { margin-top: 0 !important; }
.markdown-body > *:last-child { margin-bottom: 0 !important; }
.markdown-body h2, .markdown-body h3 { margin-top: 24px; margin-bottom: 16px; font-weight: 600; line-height: 1.25; }
.markdown-body h2 { font-size: 1.5em; padding-bottom: .3em; border-bottom: 1px solid #d1d9e0b3; }
.markdown-body h3 { font-size: 1.25em; }
.markdown-body p, .markdown-body ul, .markdown-body table { margin-top: 0; margin-bottom: 16px; }
.markdown-body ul { padding-left: 2em; }
.markdown-body li + li { margin-top: .25em; }
.markdown-body strong { font-weight: 600; }
.markdown-body a { color: #0969da; text-decoration: none; }
.markdown-body code { font-family: ui-monospace, SFMono-Regular, "SF Mono", Menlo, Consolas, "Liberation Mono",
                      monospace; font-size: 85%; padding: .2em .4em; margin: 0; white-space: break-spaces;
                      background-color: #818b981f; border-radius: 6px; }
.markdown-body table { border-spacing: 0; border-collapse: collapse; display: block; width: max-content;
                       max-width: 100%; overflow: auto; font-variant: tabular-nums; }
.markdown-body table th { font-weight: 600; }
.markdown-body table th, .markdown-body table td { padding: 6px 13px; border: 1px solid #d1d9e0; }
.markdown-body table tr { background-color: #ffffff; border-top: 1px solid #d1d9e0b3; }
.markdown-body table tr:nth-child(2n) { background-color: #f6f8fa; }
"""


def render(markdown: str) -> str:
    """The comment's body as GitHub's renderer makes it: cmark-gfm with GitHub's extensions, inline HTML
    kept (GitHub keeps the tags its sanitizer allows, ``<br>``, ``<code>`` and ``<wbr>`` among them)."""
    import cmarkgfm
    from cmarkgfm.cmark import Options

    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


def page(body: str) -> str:
    """``body`` as the one comment of a pull request's conversation tab, with the sidebar beside it."""
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{CSS}</style></head><body>"
            f"<div class='page'><div class='timeline'><div class='comment'>"
            f"<div class='comment-header'><strong>github-actions</strong> bot commented</div>"
            f"<div class='markdown-body'>{body}</div></div></div>"
            f"<div class='sidebar'>Reviewers<br>Assignees<br>Labels</div></div></body></html>")


def screenshot(page_html: str, out: Path) -> None:
    """``page_html`` shot by headless Chromium at :data:`WIDTH` px, cropped below its last line."""
    from PIL import Image, ImageChops

    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "comment.html"
        source.write_text(page_html, encoding="utf-8")
        shot = Path(tmp) / "shot.png"
        subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                        f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}", source.as_uri()],
                       check=True, capture_output=True, timeout=120)
        image = Image.open(shot).convert("RGB")
        box = ImageChops.difference(image, Image.new("RGB", image.size, "white")).getbbox()
        bottom = min(image.height, (box[3] if box else image.height) + 24)
        out.parent.mkdir(parents=True, exist_ok=True)
        image.crop((0, 0, WIDTH, bottom)).save(out, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", help="JUnit reports, or folders of them")
    parser.add_argument("--link", default=None, help="the full report's URL, as the workflow passes it")
    parser.add_argument("--slowed", type=int, default=0, metavar="K",
                        help="every K-th judged throughput a quarter lower and a regression (0: as recorded)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "pictures" / "pr-comment.png")
    parser.add_argument("--markdown", type=Path, help="also write the brief's Markdown here")
    args = parser.parse_args(argv)
    tests = read_reports(expand(args.reports))
    if args.slowed:
        from test_brief import slowed

        tests = slowed(tests, args.slowed)
    markdown = brief_markdown(tests, link=args.link)
    if args.markdown:
        args.markdown.write_text(markdown, encoding="utf-8")
    screenshot(page(render(markdown)), args.out)
    print(f"{len(markdown):,} characters of Markdown; {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
