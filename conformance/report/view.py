"""`python -m conformance.report.view PAGE.html [--screenshot PNG]`: the HTML report in a real browser, as a person first sees it.

Runs a headless Chromium at a window of --width x --height (1400 x 900 by
default), writes a screenshot of the first screen when asked, and prints
what that screen holds: how wide the matrix is against the window, and
where the matrix and the defect entries end. The layout is measured by the
browser itself, on a copy of the page with a few lines of script added (the
report itself carries none). Exit 0 when the matrix fits the window's width
and the first screen shows the matrix and the defect entries, 1 when it does
not, 2 when no browser could run (the reason on one line).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence
from conformance.errors import ConformanceError

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run", "--disable-sync", "--hide-scrollbars")
TIMEOUT_S = 60
MEASURE = """
<script>
(function () {
  function box(selector) { var e = document.querySelector(selector); if (!e) return null; var r = e.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; }
  var out = {window: [window.innerWidth, window.innerHeight], matrix: box('table.matrix'), entries: box('table.defects'),
             first_card: box('.card'), page_width: document.documentElement.scrollWidth};
  var pre = document.createElement('pre'); pre.id = 'conformance-measure'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


class NoBrowser(ConformanceError, RuntimeError):
    """No headless Chromium could run here."""


def find_browser() -> str:
    for name in [os.environ.get("CONFORMANCE_BROWSER", ""), *BROWSERS]:
        found = shutil.which(name) if name else None
        if found:
            return found
    raise NoBrowser(f"no Chromium found (looked for {', '.join(BROWSERS)} on PATH, and $CONFORMANCE_BROWSER); "
                    "on Debian: apt-get install -y chromium")


def _run(args: Sequence[str]) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="conformance-browser-") as profile:
        try:
            return subprocess.run([find_browser(), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise NoBrowser(f"the browser did not run: {exc}") from None


def screenshot(page: Path, png: Path, width: int = 1400, height: int = 900) -> Path:
    png.parent.mkdir(parents=True, exist_ok=True)
    done = _run([f"--window-size={width},{height}", f"--screenshot={png.resolve()}", Path(page).resolve().as_uri()])
    if not png.is_file():
        raise NoBrowser(f"the browser wrote no screenshot (exit {done.returncode}): {' '.join(done.stderr.split())[-300:]}")
    return png


def measure(page: Path, width: int = 1400, height: int = 900) -> dict:
    """The browser's boxes of the matrix, the entries' table and the first card, in a window of width x height."""
    text = Path(page).read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="conformance-measure-") as folder:
        copy = Path(folder) / "page.html"
        copy.write_text(text.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
        done = _run([f"--window-size={width},{height}", "--dump-dom", copy.as_uri()])
    found = re.search(r'<pre id="conformance-measure">(.*?)</pre>', done.stdout, re.S)
    if found is None:
        raise NoBrowser(f"the browser returned no layout (exit {done.returncode}): {' '.join(done.stderr.split())[-300:]}")
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def first_screen(layout: dict) -> list[str]:
    """What a person sees before scrolling, and what is missing from it ('problem: ...')."""
    width, height = layout["window"]
    matrix, index = layout.get("matrix"), layout.get("entries")
    lines = []
    if matrix is None:
        return ["problem: the page has no matrix"]
    lines.append(f"matrix: {matrix['right'] - matrix['left']:.0f} px wide, right edge at {matrix['right']:.0f} of {width} px, ends at {matrix['bottom']:.0f} of {height} px")
    if matrix["right"] > width or layout["page_width"] > width:
        lines.append(f"problem: the matrix does not fit the window's width ({matrix['right']:.0f} > {width})")
    if matrix["bottom"] > height:
        lines.append("problem: the matrix does not end on the first screen")
    if index is not None:
        lines.append(f"defect entries: from {index['top']:.0f} to {index['bottom']:.0f} px")
        if index["top"] >= height:
            lines.append("problem: no defect entry is on the first screen")
    else:
        lines.append("defect entries: none in this report")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.report.view", description=__doc__.splitlines()[0])
    parser.add_argument("page", help="PATH.html written by --conformance-report PATH")
    parser.add_argument("--screenshot", metavar="PNG", help="write the first screen to PNG")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=900)
    args = parser.parse_args(argv)
    page = Path(args.page)
    if not page.is_file():
        print(f"python -m conformance.report.view: invalid page: {args.page!r} (accepted: an HTML report that exists)", file=sys.stderr)
        return 2
    try:
        if args.screenshot:
            print(f"wrote {screenshot(page, Path(args.screenshot), args.width, args.height)}")
        lines = first_screen(measure(page, args.width, args.height))
    except NoBrowser as exc:
        print(f"python -m conformance.report.view: {exc}", file=sys.stderr)
        return 2
    try:
        print("\n".join(lines))
    except BrokenPipeError:  # a reader that stopped reading (| head) is no error of the page
        pass
    return 1 if any(line.startswith("problem:") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
