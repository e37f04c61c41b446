"""Every SARIF helpUri lands on an anchor that exists: the spec's clause anchors, or the linter's README."""

from __future__ import annotations

import re
from pathlib import Path

from lint.rules import ALL_RULES
from lint.sarif import LINT_DOC_URL, SPEC_URL, help_uri

REPO = Path(__file__).resolve().parents[2]


def anchors_of(markdown: str) -> set[str]:
    explicit = set(re.findall(r'<a id="([^"]+)"></a>', markdown))
    # GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes.
    headings = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", markdown, re.M)}
    return explicit | headings


def test_every_rule_links_to_an_existing_anchor():
    docs = {SPEC_URL: anchors_of((REPO / "spec" / "SPEC.md").read_text()),
            LINT_DOC_URL: anchors_of((REPO / "lint" / "README.md").read_text())}
    for rule in ALL_RULES:
        base, _, anchor = help_uri(rule).partition("#")
        assert base in docs, f"{rule.code}: helpUri {help_uri(rule)} points outside the spec and the lint README"
        assert anchor in docs[base], f"{rule.code}: no anchor #{anchor} in {base.rsplit('/', 2)[-2:]}"
