"""The HTML report in a real browser: a headless Chromium at 1,400 x 900 shows the matrix and the defect entries first.

The report is built from records shaped like a --sglang-live run's (two
classes of one tree, each on cpu and cuda, a dozen defect entries) and laid
out by the browser itself (conformance/report/view.py). Skipped, saying so,
where no Chromium is installed.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from conformance.report.html import render_html
from conformance.report.view import (
    NoBrowser,
    find_browser,
    first_screen,
    main,
    measure,
    screenshot,
)


def _browser() -> str:
    try:
        return find_browser()
    except NoBrowser as exc:
        pytest.skip(str(exc))


def test_the_first_screen_shows_the_matrix_whole_and_the_defect_entries(live_shaped_report, tmp_path):
    _browser()
    data = live_shaped_report()
    assert len(data["defects"]["entries"]) >= 12
    page = tmp_path / "report.html"
    page.write_text(render_html(data))
    layout = measure(page, 1400, 900)
    assert layout["matrix"]["right"] <= 1400 and layout["page_width"] <= 1400, layout
    assert layout["matrix"]["bottom"] < layout["entries"]["top"] < layout["window"][1], layout
    assert not [line for line in first_screen(layout) if line.startswith("problem:")]
    # Narrower than the matrix: the check says so instead of passing.
    assert any(line.startswith("problem: the matrix does not fit") for line in first_screen(measure(page, 700, 900)))


def test_the_screenshot_is_the_first_screen_at_the_window_size(live_shaped_report, tmp_path):
    _browser()
    page = tmp_path / "report.html"
    page.write_text(render_html(live_shaped_report()))
    png = screenshot(page, tmp_path / "shot.png", 1400, 900)
    header = png.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", header[16:24]) == (1400, 900)


def test_the_view_command_says_what_the_first_screen_holds(live_shaped_report, tmp_path, capsys):
    assert main([str(tmp_path / "missing.html")]) == 2
    assert "invalid page" in capsys.readouterr().err
    _browser()
    page = tmp_path / "report.html"
    page.write_text(render_html(live_shaped_report()))
    assert main([str(page), "--screenshot", str(tmp_path / "s.png")]) == 0
    out = capsys.readouterr().out
    assert "matrix: " in out and "defect entries: from " in out and Path(tmp_path / "s.png").is_file()
