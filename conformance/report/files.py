"""Writing the conformance report's files: PATH.json, PATH.md and PATH.html, from one report dictionary.

Its own module so that the renderers import nothing of each other's writer
(conformance/report/terminal.py renders the terminal and Markdown,
conformance/report/html.py the page).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from conformance.report.html import render_html
from conformance.report.markdown import render_markdown


def write_report(data: Mapping[str, Any], path: str | Path) -> tuple[Path, Path, Path]:
    """PATH.json, PATH.md and PATH.html (parent folders created)."""
    base = Path(path)
    base.parent.mkdir(parents=True, exist_ok=True)
    paths = tuple(base.with_name(base.name + suffix) for suffix in (".json", ".md", ".html"))
    paths[0].write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    paths[1].write_text(render_markdown(data), encoding="utf-8")
    paths[2].write_text(render_html(data), encoding="utf-8")
    return paths  # type: ignore[return-value]
