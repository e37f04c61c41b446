"""A baseline: the findings a code base already has, so that adopting the
linter fails only on new ones.

`--write-baseline FILE` records every failing finding (errors; warnings too
with fail-on-warnings) by fingerprint: rule, file relative to the baseline's
folder, method and message with numbers removed. A later run leaves out as
many findings of each fingerprint as the baseline holds, wherever their lines
moved; anything else is reported as usual.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from lint.errors import LintConfigError
from lint.findings import Finding, fingerprint
from lint.source import relative_posix

VERSION = 1


def write(file: Path, findings: list[Finding]) -> None:
    folder = Path(os.path.abspath(file)).parent
    entries = sorted(
        ({"fingerprint": fingerprint(f, relative_posix(f.path, folder)), "code": f.code, "path": relative_posix(f.path, folder),
          "method": f.method, "message": f.message} for f in findings),
        key=lambda e: (e["path"], e["code"], e["method"] or "", e["message"]))
    document = {"version": VERSION, "tool": "hicache-lint", "findings": entries}
    try:
        file.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise LintConfigError(str(file), f"cannot write the baseline: {exc.strerror or exc}") from None


def read(file: Path) -> Counter:
    display = str(file)
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LintConfigError(display, "baseline file not found; create it with --write-baseline "
                                   f"{display}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LintConfigError(display, f"cannot read the baseline: {exc}") from None
    entries = document.get("findings") if isinstance(document, dict) else None
    if (not isinstance(document, dict) or document.get("version") != VERSION or not isinstance(entries, list)
            or not all(isinstance(e, dict) and isinstance(e.get("fingerprint"), str) for e in entries)):
        raise LintConfigError(display, f"not a hicache-lint baseline (expected version {VERSION} with a "
                                   f"findings list of fingerprints); write one with --write-baseline")
    return Counter(e["fingerprint"] for e in entries)


def left_out(findings: list[Finding], file: Path) -> tuple[list[Finding], int]:
    """(findings the baseline does not hold, how many it held)."""
    budget = read(file)
    folder = Path(os.path.abspath(file)).parent
    kept, held = [], 0
    for finding in findings:
        key = fingerprint(finding, relative_posix(finding.path, folder))
        if budget[key] > 0:
            budget[key] -= 1
            held += 1
        else:
            kept.append(finding)
    return kept, held
